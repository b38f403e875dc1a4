// Package e2e builds the real xpu_exporter binary, runs it as a user would
// and checks what it serves over HTTP.
package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"math/big"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/xpu-exporter/xpu_exporter/internal/syncbuf"
)

var (
	binary   string
	prebuilt = flag.String("e2e.binary", "", "run this xpu_exporter binary instead of building one (make rss: the one make build writes)")
)

func TestMain(m *testing.M) {
	flag.Parse()
	if *prebuilt != "" {
		binary = *prebuilt
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "xpu-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "xpu_exporter")
	build := exec.Command("go", "build", "-o", binary, ".")
	build.Dir = ".."
	build.Env = append(os.Environ(), "CGO_ENABLED=1", "CGO_CFLAGS=-Wno-deprecated-declarations")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build xpu_exporter: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// exporter is a running xpu_exporter process.
type exporter struct {
	addr string
	cmd  *exec.Cmd
	logs syncbuf.Buffer
}

func (e *exporter) Logs() string { return e.logs.String() }

// portsGiven are the ports freePort has handed out in this test binary.
var portsGiven = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// freePort is a loopback address no one listens on, never the same twice,
// with a port below the kernel's ephemeral range (ip_local_port_range):
// every connection's source port and every bind to port 0 is drawn from
// that range, so a port there (the demo's engine servers, Prometheus's and
// Slurm's own connections) could be taken between freePort closing it and
// the server binding it.
func freePort(t *testing.T) string {
	t.Helper()
	low := ephemeralLow()
	portsGiven.Lock()
	defer portsGiven.Unlock()
	for range 200 {
		p := 20000 + mrand.IntN(low-20000)
		if portsGiven.ports[p] {
			continue
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue // someone listens there
		}
		l.Close()
		portsGiven.ports[p] = true
		return addr
	}
	t.Fatal("no free port from 20000 to the ephemeral range")
	return ""
}

// ephemeralLow is the first port of the kernel's ephemeral range, or
// 32768, its default, where it cannot be read or leaves too little below.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if f := strings.Fields(string(b)); err == nil && len(f) == 2 {
		if n, err := strconv.Atoi(f[0]); err == nil && n > 21000 {
			return n
		}
	}
	return 32768
}

// start runs the binary with args and waits until it accepts connections.
// freePort's port is free only until it is closed: another process may
// bind it first. Then the exporter exits at once with "address already in
// use", and is started again on another.
func start(t *testing.T, args ...string) *exporter {
	t.Helper()
	for range 2 {
		if e, taken := launch(t, freePort(t), args...); !taken {
			return e
		}
	}
	return startAt(t, freePort(t), args...)
}

// startAt is start on a given address, e.g. that of a stopped exporter.
func startAt(t *testing.T, addr string, args ...string) *exporter {
	t.Helper()
	e, taken := launch(t, addr, args...)
	if taken {
		t.Fatalf("exporter exited early:\n%s", e.Logs())
	}
	return e
}

// launch is startAt, but says rather than fails when the exporter exited
// because its address was taken.
func launch(t *testing.T, addr string, args ...string) (e *exporter, taken bool) {
	t.Helper()
	e = &exporter{addr: addr}
	e.cmd = exec.Command(binary, append([]string{"--web.listen-address=" + e.addr}, args...)...)
	e.cmd.Stdout, e.cmd.Stderr = &e.logs, &e.logs
	if err := e.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { e.cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		e.cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			e.cmd.Process.Kill()
			t.Errorf("exporter did not stop on SIGINT")
		}
		if t.Failed() {
			t.Logf("exporter logs:\n%s", e.Logs())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			if strings.Contains(e.Logs(), "address already in use") {
				return e, true
			}
			t.Fatalf("exporter exited early:\n%s", e.Logs())
		default:
		}
		// Only once it says it listens: before that, a connection may
		// reach whoever took the port (a test's server), and the exporter
		// exit with "address already in use" after it.
		if strings.Contains(e.Logs(), "Listening on") {
			if c, err := net.Dial("tcp", e.addr); err == nil {
				c.Close()
				return e, false
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("exporter did not listen on %s:\n%s", e.addr, e.Logs())
	return nil, false
}

func get(t *testing.T, client *http.Client, url string) (int, string) {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

func promtoolCheck(t *testing.T, exposition string) {
	t.Helper()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool not found: install Debian's prometheus package (make test-deps does)")
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(exposition)
	if out, err := cmd.CombinedOutput(); err != nil || len(out) > 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

// value returns the sample value of the one series matching selector, a
// metric name followed by label matchers as they appear in the exposition.
func value(t *testing.T, exposition, name string, labels ...string) float64 {
	t.Helper()
	var found []float64
	for _, line := range strings.Split(exposition, "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(line, l)
		}
		if ok {
			v, err := strconv.ParseFloat(line[strings.LastIndex(line, " ")+1:], 64)
			if err != nil {
				t.Fatalf("bad sample %q", line)
			}
			found = append(found, v)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%s%v: %d series, want 1", name, labels, len(found))
	}
	return found[0]
}

// families issue 2 promises on the demo node, with their types; some of the
// NVIDIA readings need --nvidia.extended-readings.
var wantFamilies = map[string]string{
	"xpu_device_info":                           "gauge",
	"xpu_device_up":                             "gauge",
	"xpu_utilization_ratio":                     "gauge",
	"xpu_memory_utilization_ratio":              "gauge",
	"xpu_encoder_utilization_ratio":             "gauge",
	"xpu_decoder_utilization_ratio":             "gauge",
	"xpu_memory_used_bytes":                     "gauge",
	"xpu_memory_total_bytes":                    "gauge",
	"xpu_memory_reserved_bytes":                 "gauge",
	"xpu_temperature_celsius":                   "gauge",
	"xpu_power_watts":                           "gauge",
	"xpu_power_limit_watts":                     "gauge",
	"xpu_energy_joules_total":                   "counter",
	"xpu_clock_hertz":                           "gauge",
	"xpu_clock_max_hertz":                       "gauge",
	"xpu_clock_throttled":                       "gauge",
	"xpu_performance_state":                     "gauge",
	"xpu_pcie_throughput_bytes_per_second":      "gauge",
	"xpu_pcie_link_generation":                  "gauge",
	"xpu_pcie_link_width":                       "gauge",
	"xpu_pcie_link_max_generation":              "gauge",
	"xpu_pcie_link_max_width":                   "gauge",
	"xpu_pcie_replays_total":                    "counter",
	"xpu_ecc_errors_total":                      "counter",
	"xpu_retired_pages_total":                   "counter",
	"xpu_remapped_rows":                         "gauge",
	"xpu_mig_mode_enabled":                      "gauge",
	"xpu_scrape_collector_duration_seconds":     "gauge",
	"xpu_scrape_collector_success":              "gauge",
	"xpu_exporter_build_info":                   "gauge",
	"xpu_device_owners":                         "gauge",
	"xpu_workload_info":                         "gauge",
	"xpu_workload_allocated_devices":            "gauge",
	"xpu_workload_utilization_ratio":            "gauge",
	"xpu_workload_memory_used_bytes":            "gauge",
	"xpu_attribution_source_up":                 "gauge",
	"xpu_nvlink_links":                          "gauge",
	"xpu_nvlink_errors_total":                   "counter",
	"xpu_inference_up":                          "gauge",
	"xpu_inference_requests_running":            "gauge",
	"xpu_inference_kv_cache_usage_ratio":        "gauge",
	"xpu_inference_tokens_total":                "counter",
	"xpu_inference_requests_total":              "counter",
	"xpu_inference_time_to_first_token_seconds": "histogram",
	"xpu_inference_request_duration_seconds":    "histogram",
	"xpu_inference_device_info":                 "gauge",
	"go_goroutines":                             "gauge",
	"process_resident_memory_bytes":             "gauge",
}

func TestDemoServesEveryFamilyAndValuesMove(t *testing.T) {
	e := start(t, "--demo", "--nvidia.extended-readings")
	url := "http://" + e.addr + "/metrics"
	code, first := get(t, http.DefaultClient, url)
	if code != http.StatusOK {
		t.Fatalf("status %d:\n%s", code, first)
	}
	for family, typ := range wantFamilies {
		if !strings.Contains(first, "# TYPE "+family+" "+typ+"\n") {
			t.Errorf("family %s (%s) missing", family, typ)
		}
	}
	promtoolCheck(t, first)
	if !strings.Contains(first, `demo="true"`) {
		t.Error("build info does not say demo")
	}
	if !strings.Contains(e.Logs(), "DEMO MODE") {
		t.Error("demo mode is not announced in the log")
	}
	if regexp.MustCompile(`[{,](job|instance)="`).MatchString(first) {
		t.Error("exporter must not emit the reserved target labels job or instance")
	}

	time.Sleep(1100 * time.Millisecond)
	_, second := get(t, http.DefaultClient, url)
	gpu0 := `uuid="GPU-2b149611-0000-4000-8000-000000000000"`
	e1, e2 := value(t, first, "xpu_energy_joules_total", gpu0), value(t, second, "xpu_energy_joules_total", gpu0)
	if e2 <= e1 {
		t.Errorf("energy counter did not grow between scrapes: %v then %v", e1, e2)
	}
	p1, p2 := value(t, first, "xpu_power_watts", gpu0), value(t, second, "xpu_power_watts", gpu0)
	if p1 == p2 {
		t.Errorf("power did not move between scrapes: %v", p1)
	}
	// GPM profiling needs two samples: it is there from the second scrape.
	for _, family := range []string{"xpu_sm_active_ratio", "xpu_tensor_active_ratio", "xpu_dram_active_ratio", "xpu_nvlink_throughput_bytes_per_second"} {
		if !strings.Contains(second, "# TYPE "+family+" gauge\n") {
			t.Errorf("second scrape lacks %s", family)
		}
	}
	promtoolCheck(t, second)

	code, landing := get(t, http.DefaultClient, "http://"+e.addr+"/")
	if code != http.StatusOK || !strings.Contains(landing, "DEMO MODE") || !strings.Contains(landing, `href="/metrics"`) {
		t.Errorf("landing page (%d) lacks the demo notice or the metrics link:\n%s", code, landing)
	}
}

func TestScrapeTimeoutHeaderBoundsAHungGPU(t *testing.T) {
	e := start(t, "--demo", "--demo.scenario=../fixtures/scenarios/hang.yaml", "--scrape.timeout-offset=100ms")
	req, _ := http.NewRequest(http.MethodGet, "http://"+e.addr+"/metrics", nil)
	// 2 s: time enough for the healthy GPU on a loaded machine, far less
	// than the hang.
	req.Header.Set("X-Prometheus-Scrape-Timeout-Seconds", "2")
	started := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if took := time.Since(started); took > 10*time.Second {
		t.Errorf("scrape with a 2s timeout took %v, as long as the GPU hangs", took)
	}
	// GPU 0 is down, under its UUID when its identity was read before the
	// call that hangs (the start's warm-up read may still be on it).
	if !regexp.MustCompile(`(?m)^xpu_device_up\{gpu="0",(model="NVIDIA H100 80GB HBM3",uuid="GPU-00000000-0000-4000-8000-00000000000a",)?vendor="nvidia"\} 0$`).Match(body) ||
		!strings.Contains(string(body), `xpu_device_up{gpu="1",model="NVIDIA H100 80GB HBM3",uuid="GPU-00000000-0000-4000-8000-00000000000b",vendor="nvidia"} 1`) {
		t.Errorf("want the hung GPU down and the other up:\n%s", body)
	}
}

// SIGHUP, which operators send to reload Prometheus and Alertmanager, is
// logged and ignored: it killed the exporter without a word, and systemd
// does not restart a unit a SIGHUP ended (probe17-http D2).
func TestSIGHUPIgnored(t *testing.T) {
	e := start(t, "--demo")
	if err := e.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(e.Logs(), "SIGHUP ignored"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no log line for SIGHUP:\n%s", e.Logs())
		}
	}
	resp, err := http.Get("http://" + e.addr + "/metrics")
	if err != nil {
		t.Fatalf("the exporter does not answer after SIGHUP: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("status %d after SIGHUP, want 200", resp.StatusCode)
	}
}

// A /devices request under way at SIGTERM, with no scrape beside it, is
// answered once the shutdown's grace is over, as a scrape is: the hung GPU
// down, the other up; not cut off with no reply when the exporter exits
// (probe6-ops D4).
func TestDevicesAnsweredAtShutdown(t *testing.T) {
	e := start(t, "--demo", "--demo.scenario=../fixtures/scenarios/hang.yaml", "--scrape.timeout=25s")
	type answer struct {
		code int
		body []byte
		err  error
	}
	answers := make(chan answer, 1)
	go func() {
		resp, err := http.Get("http://" + e.addr + "/devices?format=json")
		if err != nil {
			answers <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		answers <- answer{resp.StatusCode, b, err}
	}()
	// The request is read and waiting on GPU 0 well before this.
	time.Sleep(time.Second)
	if err := e.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var a answer
	select {
	case a = <-answers:
	case <-time.After(20 * time.Second):
		t.Fatal("no answer to /devices under way at shutdown")
	}
	if a.err != nil || a.code != http.StatusOK {
		t.Fatalf("/devices under way at shutdown: status %d, %v; want an answer", a.code, a.err)
	}
	var page struct {
		Devices []struct {
			GPU string `json:"gpu"`
			Up  bool   `json:"up"`
		} `json:"devices"`
	}
	if err := json.Unmarshal(a.body, &page); err != nil {
		t.Fatalf("%v:\n%s", err, a.body)
	}
	up := map[string]bool{}
	for _, d := range page.Devices {
		up[d.GPU] = d.Up
	}
	if len(up) != 2 || up["0"] || !up["1"] {
		t.Errorf("devices up %v, want GPU 0 down and GPU 1 up", up)
	}
}

// A node without NVIDIA's library (an AMD or Gaudi node) is not a failing
// collector: it serves no NVIDIA device and says so once. A library named
// by --nvidia.nvml-library that cannot be loaded is a failure, logged once
// as an error naming the path: a typo there must not look like a node
// without NVIDIA GPUs.
func TestNoDriverStillServesSelfMetrics(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		success string
		log     string
	}{
		{"no library", []string{"--demo", "--demo.scenario=../fixtures/scenarios/no-driver.yaml"}, "1", `level=INFO source=nvidia.go:.* msg="NVIDIA collector has no driver to talk to`},
		{"named library missing", []string{"--nvidia.nvml-library=/nonexistent/libnvidia-ml.so.1", "--no-collector.amd", "--no-collector.gaudi"}, "0",
			`level=ERROR source=nvidia.go:.* msg="NVIDIA collector failed" err=".*/nonexistent/libnvidia-ml.so.1: no such file or directory"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := start(t, tc.args...)
			for range 2 {
				code, body := get(t, http.DefaultClient, "http://"+e.addr+"/metrics")
				if code != http.StatusOK {
					t.Fatalf("status %d", code)
				}
				if !strings.Contains(body, `xpu_scrape_collector_success{collector="nvidia"} `+tc.success+"\n") || !strings.Contains(body, "xpu_exporter_build_info{") {
					t.Errorf("want self-metrics with the nvidia collector's success %s:\n%s", tc.success, body)
				}
				if strings.Contains(body, `xpu_device_up{`) {
					t.Errorf("devices served without a library:\n%s", body)
				}
			}
			if n := len(regexp.MustCompile(tc.log).FindAllString(e.Logs(), -1)); n != 1 {
				t.Errorf("%d lines matching %s over two scrapes, want 1:\n%s", n, tc.log, e.Logs())
			}
		})
	}
}

func TestBadScenarioIsRejectedClearly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(path, []byte("devices:\n  - model: X\n    memory_total: 1GiB\n    metrics: {utilisation: 0.5}\n"), 0o644)
	out, err := exec.Command(binary, "--demo", "--demo.scenario="+path).CombinedOutput()
	if code := exitCode(err); code != 2 {
		t.Fatalf("exit code %d, want 2:\n%s", code, out)
	}
	if !strings.Contains(string(out), "devices[0]: metrics.utilisation: unknown metric") {
		t.Errorf("error does not name the bad field:\n%s", out)
	}
}

// The exporter runs its Go code on one CPU unless told otherwise, as
// node_exporter does: --runtime.gomaxprocs, or else GOMAXPROCS in its
// environment, which Go's runtime applies, or ignores when it cannot use
// the value (review26 F6: the exporter refused to start); 0 keeps Go's
// default.
func TestGOMAXPROCS(t *testing.T) {
	if os.Getenv("GOMAXPROCS") != "" {
		t.Skip("GOMAXPROCS is set for the tests: Go's default is not known")
	}
	// The CPUs Go gives a process here (runtime: the CPUs it may run on,
	// less a cgroup CPU limit), this test's as the exporter's.
	goDefault := strconv.Itoa(runtime.GOMAXPROCS(0))
	for _, tc := range []struct {
		name string
		env  string
		args []string
		want string
	}{
		{"default", "", nil, "1"},
		{"flag", "", []string{"--runtime.gomaxprocs=2"}, "2"},
		{"environment", "GOMAXPROCS=2", nil, "2"},
		{"environment Go ignores", "GOMAXPROCS=max", nil, goDefault},
		{"the flag over the environment", "GOMAXPROCS=2", []string{"--runtime.gomaxprocs=1"}, "1"},
		{"Go's default", "", []string{"--runtime.gomaxprocs=0"}, goDefault},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != "" {
				t.Setenv("GOMAXPROCS", strings.TrimPrefix(tc.env, "GOMAXPROCS="))
			}
			e := start(t, append([]string{"--demo"}, tc.args...)...)
			_, body := get(t, http.DefaultClient, "http://"+e.addr+"/metrics")
			if !strings.Contains(body, "\ngo_sched_gomaxprocs_threads "+tc.want+"\n") {
				t.Errorf("want go_sched_gomaxprocs_threads %s:\n%s", tc.want, grepLines(body, "gomaxprocs"))
			}
		})
	}
	out, err := exec.Command(binary, "--runtime.gomaxprocs=-1").CombinedOutput()
	if code := exitCode(err); code != 2 || !strings.Contains(string(out), "--runtime.gomaxprocs=-1") {
		t.Errorf("--runtime.gomaxprocs=-1: exit %d, want 2 and the flag named:\n%s", code, out)
	}
}

func grepLines(text, substr string) string {
	var b strings.Builder
	for line := range strings.SplitSeq(text, "\n") {
		if strings.Contains(line, substr) {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

func exitCode(err error) int {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

func TestTLSAndBasicAuth(t *testing.T) {
	dir := t.TempDir()
	certPEM, keyPEM := selfSigned(t)
	os.WriteFile(filepath.Join(dir, "cert.pem"), certPEM, 0o600)
	os.WriteFile(filepath.Join(dir, "key.pem"), keyPEM, 0o600)
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	config := fmt.Sprintf("tls_server_config:\n  cert_file: %s\n  key_file: %s\nbasic_auth_users:\n  prometheus: %s\n",
		filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"), hash)
	os.WriteFile(filepath.Join(dir, "web.yml"), []byte(config), 0o600)

	e := start(t, "--demo", "--web.config.file="+filepath.Join(dir, "web.yml"))
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(certPEM)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 10 * time.Second}
	url := "https://" + e.addr + "/metrics"

	for _, tc := range []struct {
		user, password string
		want           int
	}{
		{"prometheus", "s3cret", http.StatusOK},
		{"prometheus", "wrong", http.StatusUnauthorized},
		{"", "", http.StatusUnauthorized},
	} {
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
		if tc.user != "" {
			req.SetBasicAuth(tc.user, tc.password)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("user %q password %q: status %d, want %d", tc.user, tc.password, resp.StatusCode, tc.want)
		}
		if tc.want == http.StatusOK && !regexp.MustCompile(`(?m)^xpu_device_up\{`).Match(body) {
			t.Errorf("authorised scrape has no device metrics")
		}
	}
	if _, err := http.Get("http://" + e.addr + "/metrics"); err == nil {
		// A plain HTTP request to a TLS port gets a 400 from Go's server,
		// never metrics.
		code, body := get(t, http.DefaultClient, "http://"+e.addr+"/metrics")
		if code == http.StatusOK || strings.Contains(body, "xpu_") {
			t.Errorf("plain HTTP served metrics (%d)", code)
		}
	}
}

func selfSigned(t *testing.T) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "xpu-exporter-e2e"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

// A start that fails (the port taken, a bad web configuration, no systemd
// socket to take, a bad flag found late) exits with that error and nothing
// else: no GPU was found down and no attribution source failing, and a line
// saying so per GPU, which log alerts match, would bury the one error.
func TestFailedStartLogsOnlyItsError(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	for _, tc := range []struct {
		name string
		args []string
		err  string
	}{
		{"port taken", []string{"--web.listen-address=" + taken.Addr().String()}, "address already in use"},
		{"web config missing", []string{"--web.listen-address=" + freePort(t), "--web.config.file=/nonexistent/web.yml"}, "/nonexistent/web.yml"},
		{"no systemd socket", []string{"--web.systemd-socket"}, "no socket activation file descriptors found"},
		{"otlp interval", []string{"--web.listen-address=" + freePort(t), "--otlp.interval=-5s"}, "--otlp.interval -5s must be positive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(binary, append([]string{"--demo"}, tc.args...)...)
			cmd.Env = slices.DeleteFunc(os.Environ(), func(v string) bool { return strings.HasPrefix(v, "LISTEN_") })
			// The exporter takes a moment to exit after its error; the
			// warm-up read's lines came in that moment.
			out, err := cmd.CombinedOutput()
			if exitCode(err) == 0 {
				t.Fatalf("started:\n%s", out)
			}
			var problems []string
			for _, line := range strings.Split(string(out), "\n") {
				if regexp.MustCompile(`level=(WARN|ERROR)`).MatchString(line) && !strings.Contains(line, "DEMO MODE") {
					problems = append(problems, line)
				}
			}
			if len(problems) != 1 || !strings.Contains(problems[0], tc.err) {
				t.Errorf("want one line, with %q; got:\n%s", tc.err, strings.Join(problems, "\n"))
			}
		})
	}
}

// TestDemoCountersSurviveARestart: the demo's simulated driver was loaded
// when the host booted, so a restarted demo exporter serves its energy
// counter on from where the stopped one left it, as a real exporter does
// with NVML's ("since the driver was last reloaded"), not again from the
// scenario's start: a fall Prometheus read as a reset worth 3.6e9 J.
func TestDemoCountersSurviveARestart(t *testing.T) {
	gpu0 := `uuid="GPU-2b149611-0000-4000-8000-000000000000"`
	e := start(t, "--demo")
	// Long enough that the counter, 510 W from its start, is ahead of
	// where a restart counting from its own start would be (≈ 765 J).
	time.Sleep(1500 * time.Millisecond)
	_, before := get(t, http.DefaultClient, "http://"+e.addr+"/metrics")
	e.cmd.Process.Signal(os.Interrupt)
	e.cmd.Process.Wait()
	time.Sleep(100 * time.Millisecond)
	e2 := start(t, "--demo")
	_, after := get(t, http.DefaultClient, "http://"+e2.addr+"/metrics")
	if b, a := value(t, before, "xpu_energy_joules_total", gpu0), value(t, after, "xpu_energy_joules_total", gpu0); a < b {
		t.Errorf("energy %v J before the restart, %v after: a fall read as a reset", b, a)
	}
}
