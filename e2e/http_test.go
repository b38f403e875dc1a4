package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Only GET and HEAD read the hardware: anything else is 405, whatever its
// body.
func TestOnlyGETReadsTheHardware(t *testing.T) {
	e := start(t, "--demo")
	for _, path := range []string{"/metrics", "/devices"} {
		for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodDelete} {
			req, _ := http.NewRequest(method, "http://"+e.addr+path, strings.NewReader(strings.Repeat("x", 1<<20)))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD" {
				t.Errorf("%s %s: %d, Allow %q; want 405, GET, HEAD", method, path, resp.StatusCode, resp.Header.Get("Allow"))
			}
		}
	}
}

// A scrape that cannot wait for the GPUs at all still reports each GPU it
// knows, down, rather than leave them out.
func TestTinyTimeoutReportsDevicesDown(t *testing.T) {
	e := start(t, "--demo")
	get(t, http.DefaultClient, "http://"+e.addr+"/metrics") // the GPUs are known from here on
	req, _ := http.NewRequest(http.MethodGet, "http://"+e.addr+"/metrics", nil)
	req.Header.Set("X-Prometheus-Scrape-Timeout-Seconds", "0.001")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	n := 0
	for _, l := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(l, "xpu_device_up{") && !strings.Contains(l, `parent_uuid`) {
			n++
		}
	}
	// The default demo node has 8 GPUs.
	if n != 8 {
		t.Errorf("%d GPUs in a scrape with a 1 ms timeout, want all 8:\n%s", n, body)
	}
}

// Clients that send requests and never read the answers hold request slots
// no longer than a body's write time, 20 s for the demo's, whatever the
// longest scrape allowed (2 minutes by default, whose 125 s write timeout
// locked scrapers out for as long: probe H, PH2): a normal scrape gets
// through.
func TestSlowReadersDoNotStarveScrapes(t *testing.T) {
	e := start(t, "--demo", "--web.max-requests=2")
	var conns []net.Conn
	// A small receive buffer, set before connecting (it sets the TCP
	// window), so that a response blocks its write, as on a real network.
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var err error
		rc.Control(func(fd uintptr) { err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return err
	}}
	for range 2 {
		c, err := d.Dial("tcp", e.addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		// Pipelined scrapes whose responses are never read.
		for range 50 {
			if _, err := c.Write([]byte("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
				break
			}
		}
		// Its answers fill the socket buffers, and the last one's write
		// blocks, holding a slot, before the next connection asks: one
		// turned away first would block writing its 503s, holding none.
		time.Sleep(2 * time.Second)
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	// First the slow readers hold both slots: scrapes are turned away.
	client := &http.Client{Timeout: 40 * time.Second}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err := client.Get("http://" + e.addr + "/metrics")
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusServiceUnavailable {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the slow readers never held both request slots")
		}
	}
	// Their writes end after 20 s (writeTime); within the 40 s below a normal
	// scrape must succeed, at the latest once those connections are cut.
	deadline := time.Now().Add(40 * time.Second)
	for {
		resp, err := client.Get("http://" + e.addr + "/metrics")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && strings.Contains(string(body), "xpu_device_up") {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no scrape got through while slow readers held the slots (last: %v)", err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// --web.enable-pprof still gives a heap profile of the scrape path: without
// the flag the exporter stops recording one (runtime.MemProfileRate 0,
// main.go), so this fails if that ever happens with the flag too.
func TestPprofHeapProfileWhenEnabled(t *testing.T) {
	e := start(t, "--demo", "--web.enable-pprof")
	// 20 scrapes allocate about 40 MiB (make rss: 2 MiB a scrape) and the
	// runtime samples one allocation per 512 KiB on average: about 80
	// samples. 13% of the bytes are allocated under collector.(*Exporter)
	// (pprof -sample_index=alloc_space), so the chance that no sample
	// falls there is about 0.87^80 ≈ 1.4e-5.
	for range 20 {
		get(t, http.DefaultClient, "http://"+e.addr+"/metrics")
	}
	code, body := get(t, http.DefaultClient, "http://"+e.addr+"/debug/pprof/heap?debug=1")
	if code != http.StatusOK || !strings.Contains(body, "collector.(*Exporter).") {
		t.Errorf("heap profile: status %d, no allocation under collector.(*Exporter):\n%.2000s", code, body)
	}
}

// net/http's own error lines go through the exporter's logger: with
// --log.format=json the stream stays JSON when a client speaks plain HTTP
// to the TLS port, and the handshake error that causes is at debug level,
// so a port scanner does not fill the log at the default level.
func TestHTTPServerErrorsKeepTheLogFormat(t *testing.T) {
	dir := t.TempDir()
	certPEM, keyPEM := selfSigned(t)
	os.WriteFile(filepath.Join(dir, "cert.pem"), certPEM, 0o600)
	os.WriteFile(filepath.Join(dir, "key.pem"), keyPEM, 0o600)
	config := fmt.Sprintf("tls_server_config:\n  cert_file: %s\n  key_file: %s\n", filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"))
	os.WriteFile(filepath.Join(dir, "web.yml"), []byte(config), 0o600)

	e := start(t, "--demo", "--web.config.file="+filepath.Join(dir, "web.yml"), "--log.format=json", "--log.level=debug")
	if resp, err := http.Get("http://" + e.addr + "/metrics"); err == nil {
		resp.Body.Close()
	}
	// The server answers 400 before it logs the handshake error.
	var handshake map[string]any
	for deadline := time.Now().Add(10 * time.Second); handshake == nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no TLS handshake error logged:\n%s", e.Logs())
		}
		for _, line := range strings.Split(strings.TrimSpace(e.Logs()), "\n") {
			var record map[string]any
			if err := json.Unmarshal([]byte(line), &record); err != nil {
				t.Fatalf("not a JSON log line: %s", line)
			}
			if msg, _ := record["msg"].(string); strings.Contains(msg, "TLS handshake error") {
				handshake = record
			}
		}
	}
	if handshake["level"] != "DEBUG" {
		t.Errorf("TLS handshake error logged at %v, want DEBUG: %v", handshake["level"], handshake)
	}
}

// TestReadmeFlagsListsEveryFlag: README's Flags section says `--help`
// prints them all; every flag --help prints is in it, so that one added to
// the binary is not left out of the documentation (found by probing:
// probe12-install 03, --web.systemd-socket and --gaudi.query-fields).
func TestReadmeFlagsListsEveryFlag(t *testing.T) {
	help, err := exec.Command(binary, "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("--help: %v\n%s", err, help)
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n## Flags\n")
	if !ok {
		t.Fatal("README has no Flags section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	flagName := regexp.MustCompile(`^ {2,8}(?:-\w, )?--(?:\[no-\])?([a-z][a-z0-9.-]*[a-z0-9])`)
	n := 0
	for line := range strings.SplitSeq(string(help), "\n") {
		m := flagName.FindStringSubmatch(line)
		if m == nil || m[1] == "help" {
			continue
		}
		n++
		if !regexp.MustCompile(`(?m)--(\[no-\])?` + regexp.QuoteMeta(m[1]) + "([=` ]|$)").MatchString(section) {
			t.Errorf("--%s is printed by --help but not in README's Flags section", m[1])
		}
	}
	if n < 40 {
		t.Fatalf("read %d flags from --help, want the 40 and more it prints:\n%s", n, help)
	}
}

// With the telemetry path "/", only "/" serves the metrics: ServeMux took it
// for the whole tree, and every path (/favicon.ico, /debug/pprof/ with
// pprof off) answered with a full read of every GPU (probe17-http D3).
func TestRootTelemetryPathIsOnePath(t *testing.T) {
	e := start(t, "--demo", "--web.telemetry-path=/")
	for path, want := range map[string]int{"/": http.StatusOK, "/favicon.ico": http.StatusNotFound, "/debug/pprof/": http.StatusNotFound, "/devices": http.StatusOK} {
		resp, err := http.Get("http://" + e.addr + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s: %d, want %d", path, resp.StatusCode, want)
		}
		if path == "/" && !strings.Contains(string(body), "xpu_device_up") {
			t.Errorf("GET /: no metrics:\n%.300s", body)
		}
	}
}
