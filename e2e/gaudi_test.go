package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The real binary on a Gaudi node: the demo's hl-smi is the binary itself,
// run by the Gaudi collector at every scrape; processes come from the
// demo's procfs and sysfs, owners from its kubelet.
func TestGaudiDemo(t *testing.T) {
	e := start(t, "--demo", "--demo.scenario=../fixtures/scenarios/gaudi.yaml")
	url := "http://" + e.addr + "/metrics"
	code, first := get(t, http.DefaultClient, url)
	if code != http.StatusOK {
		t.Fatalf("status %d:\n%s", code, first)
	}
	promtoolCheck(t, first)
	for family, typ := range map[string]string{
		"xpu_device_info":                 "gauge",
		"xpu_device_up":                   "gauge",
		"xpu_utilization_ratio":           "gauge",
		"xpu_memory_used_bytes":           "gauge",
		"xpu_memory_total_bytes":          "gauge",
		"xpu_temperature_celsius":         "gauge",
		"xpu_power_watts":                 "gauge",
		"xpu_power_limit_watts":           "gauge",
		"xpu_clock_hertz":                 "gauge",
		"xpu_clock_max_hertz":             "gauge",
		"xpu_ecc_errors_total":            "counter",
		"xpu_gaudi_dram_ecc_errors_total": "counter",
		"xpu_pcie_link_generation":        "gauge",
		"xpu_pcie_link_width":             "gauge",
		"xpu_hlsmi_errors_total":          "counter",
		"xpu_workload_allocated_devices":  "gauge",
		"xpu_workload_utilization_ratio":  "gauge",
		"xpu_device_owners":               "gauge",
	} {
		if !strings.Contains(first, "# TYPE "+family+" "+typ+"\n") {
			t.Errorf("family %s (%s) missing", family, typ)
		}
	}
	for _, want := range []string{
		`xpu_scrape_collector_success{collector="gaudi"} 1`,
		// Serial AN15000003 is device 3, allocated to the training pod.
		`xpu_device_up{container="train",gpu="3",model="HL-225",namespace="training",pod="llama-ft-0",uuid="01P0-HL2080A0-15-B3B6AE52-03-04-03",vendor="habana",workload="llama-ft",workload_kind="StatefulSet"} 1`,
		// Two host services on device 6, found through their open accel
		// nodes: two owners.
		`xpu_device_owners{gpu="6",model="HL-225",uuid="01P0-HL2080A0-15-B3B6AE52-06-04-03",vendor="habana"} 2`,
	} {
		if !strings.Contains(first, want+"\n") {
			t.Errorf("missing %s", want)
		}
	}
	for _, line := range strings.Split(first, "\n") {
		if strings.HasPrefix(line, "xpu_hlsmi_errors_total{") && !strings.HasSuffix(line, " 0") {
			t.Errorf("hl-smi failed: %s", line)
		}
	}

	// Device 0's power is noise stepping about once a second: hl-smi is
	// run anew at each scrape, so the value moves.
	gpu0 := `uuid="01P0-HL2080A0-15-B3B6AE52-00-04-03"`
	p1 := value(t, first, "xpu_power_watts", gpu0)
	moved := false
	for i := 0; i < 5 && !moved; i++ {
		time.Sleep(1100 * time.Millisecond)
		_, next := get(t, http.DefaultClient, url)
		moved = value(t, next, "xpu_power_watts", gpu0) != p1
	}
	if !moved {
		t.Errorf("power of device 0 stayed %v over five scrapes", p1)
	}

	code, body := get(t, http.DefaultClient, "http://"+e.addr+"/devices?format=json")
	if code != http.StatusOK {
		t.Fatalf("/devices: status %d", code)
	}
	var devices struct {
		Devices []struct {
			Vendor string `json:"vendor"`
			GPU    string `json:"gpu"`
			Owners []struct {
				Labels map[string]string `json:"labels"`
			} `json:"owners"`
		} `json:"devices"`
	}
	if err := json.Unmarshal([]byte(body), &devices); err != nil {
		t.Fatalf("/devices: %v\n%s", err, body)
	}
	if len(devices.Devices) != 8 {
		t.Fatalf("/devices lists %d devices, want 8", len(devices.Devices))
	}
	d0 := devices.Devices[0]
	if d0.Vendor != "habana" || d0.GPU != "0" || len(d0.Owners) != 1 || d0.Owners[0].Labels["pod"] != "tgi-gaudi-6b8d7f9c5-m2p7x" {
		t.Errorf("/devices: device 0 is %+v, want the TGI pod's Gaudi", d0)
	}
	if n := strings.Count(e.Logs(), "Gaudi collector reading devices through hl-smi"); n != 1 {
		t.Errorf("%d log lines saying the Gaudi collector reads hl-smi, want 1:\n%s", n, e.Logs())
	}
}

// gaudiScenarioWith writes fixtures/scenarios/gaudi.yaml with extra put
// after the line old, and returns the file's path.
func gaudiScenarioWith(t *testing.T, old, extra string) string {
	t.Helper()
	b, err := os.ReadFile("../fixtures/scenarios/gaudi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), old+"\n") {
		t.Fatalf("gaudi.yaml has no line %q", old)
	}
	path := filepath.Join(t.TempDir(), "gaudi.yaml")
	if err := os.WriteFile(path, []byte(strings.Replace(string(b), old+"\n", old+"\n"+extra, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// The demo's hl-smi leaves devices out as the scenario says, while their
// accel nodes and holders stay: one from the start (the driver has it,
// hl-smi never listed it), one after a while (listed, then no more).
func TestGaudiDemoDevicesHLSMIDoesNotList(t *testing.T) {
	const tgi0 = "    processes: [{pid: 3001, pod: inference/tgi-gaudi-6b8d7f9c5-m2p7x, command: text-generation-server}]"
	gpu0 := `uuid="01P0-HL2080A0-15-B3B6AE52-00-04-03"`

	t.Run("never listed", func(t *testing.T) {
		e := start(t, "--demo", "--demo.scenario="+gaudiScenarioWith(t, tgi0, "    faults: {unlisted: true}\n"))
		_, out := get(t, http.DefaultClient, "http://"+e.addr+"/metrics")
		if got := value(t, out, "xpu_gaudi_devices_unlisted"); got != 1 {
			t.Errorf("xpu_gaudi_devices_unlisted = %v, want 1", got)
		}
		if n := strings.Count(out, "\nxpu_device_up{"); n != 7 {
			t.Errorf("%d devices served, want the 7 hl-smi lists", n)
		}
		// The TGI pod holds devices 0 and 1: device 1 keeps it as its owner.
		if got := value(t, out, "xpu_device_owners", `gpu="1"`); got != 1 {
			t.Errorf("device 1 has %v owners, want 1 (the TGI pod)", got)
		}
		// Device 0's generated bus id: 0x19 + 0×0x10.
		waitUntil(t, "the warning naming device 0", func() bool { return strings.Contains(e.Logs(), "pci=0000:19:00.0") })
	})

	t.Run("no longer listed", func(t *testing.T) {
		e := start(t, "--demo", "--demo.scenario="+gaudiScenarioWith(t, tgi0, "    faults: {unlisted_after: 8s}\n"))
		url := "http://" + e.addr + "/metrics"
		_, out := get(t, http.DefaultClient, url)
		if got := value(t, out, "xpu_device_up", gpu0); got != 1 {
			t.Fatalf("device 0 up = %v before it leaves hl-smi's table, want 1", got)
		}
		waitUntil(t, "device 0 to leave hl-smi's table", func() bool {
			time.Sleep(250 * time.Millisecond) // each scrape runs hl-smi
			_, out = get(t, http.DefaultClient, url)
			return value(t, out, "xpu_device_up", gpu0) == 0
		})
		// Known, so down rather than unlisted; the seven others up.
		if got := value(t, out, "xpu_gaudi_devices_unlisted"); got != 0 {
			t.Errorf("xpu_gaudi_devices_unlisted = %v, want 0: device 0 is known and reported down", got)
		}
		if got := value(t, out, "xpu_device_up", `gpu="1"`); got != 1 {
			t.Errorf("device 1 up = %v, want 1", got)
		}
		_, out = get(t, http.DefaultClient, url)
		if n := strings.Count(e.Logs(), "no longer listed"); n != 1 {
			t.Errorf("%d log lines for device 0 leaving, want 1:\n%s", n, e.Logs())
		}
	})
}

// A hung hl-smi (the scenario's hl_smi: {mode: hang}) costs a scrape no
// more than its deadline: the run is killed there and counted.
func TestGaudiHungHLSMI(t *testing.T) {
	scenario, err := os.ReadFile("../fixtures/scenarios/gaudi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "hung.yaml")
	if err := os.WriteFile(path, append(scenario, "hl_smi: {mode: hang}\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	e := start(t, "--demo", "--demo.scenario="+path, "--scrape.timeout-offset=100ms")
	var body string
	for range 2 {
		req, _ := http.NewRequest(http.MethodGet, "http://"+e.addr+"/metrics", nil)
		req.Header.Set("X-Prometheus-Scrape-Timeout-Seconds", "1")
		started := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body = string(b)
		if took := time.Since(started); took > 2500*time.Millisecond {
			t.Errorf("scrape with a 1 s timeout took %v", took)
		}
	}
	if !strings.Contains(body, `xpu_scrape_collector_success{collector="gaudi"} 0`) {
		t.Error("the Gaudi collector does not report the hung hl-smi")
	}
	// The warm-up at start ran hl-smi with its own 10 s deadline; both
	// scrapes waited for that run, which was still hung at their deadline,
	// and started none of their own: busy, twice. The run is logged once,
	// when the warm-up's deadline ends it; the scrapes that gave up on it
	// are not logged.
	if got := value(t, body, "xpu_hlsmi_errors_total", `reason="busy"`); got != 2 {
		t.Errorf("busy counted %v times, want 2", got)
	}
	waitUntil(t, "the warm-up's run to be killed and logged", func() bool { return strings.Contains(e.Logs(), "hl-smi failed") })
	if n := strings.Count(e.Logs(), "hl-smi failed"); n != 1 || !strings.Contains(e.Logs(), "reason=timeout") {
		t.Errorf("%d log lines for the hung hl-smi, want 1 (timeout):\n%s", n, e.Logs())
	}
}

// TestShutdownDuringHLSMIRun: the exporter is stopped (SIGTERM, as systemd
// and the kubelet do) while a scrape waits for a hung hl-smi. The scrape is
// answered, its device down, rather than cut off with an empty reply;
// hl-smi, in a process group of its own that the signal does not reach,
// does not outlive the exporter; and the run the stop ended is not logged
// as hl-smi failing.
func TestShutdownDuringHLSMIRun(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"sys", "proc"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// Logs each run; lists one device until the test creates "hang", then
	// logs its PID as hung and hangs.
	hlsmi := filepath.Join(dir, "hl-smi")
	script := `#!/bin/sh
echo $$ >> "` + dir + `/runs"
if [ -e "` + dir + `/hang" ]; then
	echo $$ >> "` + dir + `/hung"
	exec sleep 300
fi
echo "index, uuid"
echo "0, UA"
`
	if err := os.WriteFile(hlsmi, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	e := start(t, "--gaudi.hl-smi-path="+hlsmi, "--gaudi.query-fields=index,uuid",
		"--path.sysfs="+filepath.Join(dir, "sys"), "--path.procfs="+filepath.Join(dir, "proc"),
		"--no-collector.nvidia", "--no-collector.amd", "--no-collector.engines", "--no-attribution.slurm")
	// Once the warm-up at start has started its run, the first scrape ends
	// after it: the next run is the second scrape's.
	waitUntil(t, "the warm-up's hl-smi run", func() bool {
		_, err := os.Stat(filepath.Join(dir, "runs"))
		return err == nil
	})
	url := "http://" + e.addr + "/metrics"
	if code, body := get(t, http.DefaultClient, url); code != http.StatusOK || value(t, body, "xpu_device_up", `uuid="UA"`) != 1 {
		t.Fatalf("first scrape: status %d:\n%s", code, body)
	}
	if err := os.WriteFile(filepath.Join(dir, "hang"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		code int
		body string
		err  error
	}
	answers := make(chan answer, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Header.Set("X-Prometheus-Scrape-Timeout-Seconds", "60")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			answers <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		answers <- answer{resp.StatusCode, string(b), err}
	}()
	var pid int
	waitUntil(t, "the scrape's hl-smi run to hang", func() bool {
		b, _ := os.ReadFile(filepath.Join(dir, "hung"))
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return pid > 0
	})
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	exporter := e.cmd.Process.Pid
	if err := e.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-answers:
		if a.err != nil || a.code != http.StatusOK {
			t.Errorf("scrape under way at shutdown: status %d, %v; want an answer", a.code, a.err)
		} else if v := value(t, a.body, "xpu_device_up", `uuid="UA"`); v != 0 {
			t.Errorf("device up = %v in the answer cut short, want 0", v)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("no answer to the scrape under way at shutdown")
	}
	// Reaped by start's Wait once it has exited.
	waitUntil(t, "the exporter to exit", func() bool { return syscall.Kill(exporter, 0) != nil })
	if !exited(pid) {
		t.Errorf("hl-smi run %d outlived the exporter", pid)
	}
	// The stop ended the run, not hl-smi's failing: a log alert on
	// "hl-smi failed" must not fire at every restart (probe6-gaudi D3).
	if strings.Contains(e.Logs(), "hl-smi failed") {
		t.Errorf("the run the stop ended is logged as a failure:\n%s", e.Logs())
	}
}

// waitUntil polls cond, failing the test after a bound generous enough for
// a loaded machine.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// exited says whether pid has exited: gone, or a zombie that its new
// parent (init, here perhaps one that does not reap) has not reaped.
func exited(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] == 'Z' || s[i+2] == 'X'
}

// An hl-smi given by flag replaces the demo's simulated one, as every
// source flag given explicitly does (README "Demo scenarios"), in a
// scenario with Gaudi devices or without: it was replaced by the demo's
// own, or switched off (found by probe6-rules).
func TestDemoTakesTheHLSMIGiven(t *testing.T) {
	dir := t.TempDir()
	hlsmi := filepath.Join(dir, "hl-smi")
	if err := os.WriteFile(hlsmi, []byte("#!/bin/sh\necho \"index, uuid\"\necho \"0, GIVEN-HLSMI\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, scenario := range []string{"gaudi", "mig"} {
		e := start(t, "--demo", "--demo.scenario=../fixtures/scenarios/"+scenario+".yaml", "--gaudi.hl-smi-path="+hlsmi, "--gaudi.query-fields=index,uuid")
		code, body := get(t, http.DefaultClient, "http://"+e.addr+"/metrics")
		var gaudis []string
		for _, line := range strings.Split(body, "\n") {
			if strings.HasPrefix(line, "xpu_device_up{") && strings.Contains(line, `vendor="habana"`) {
				gaudis = append(gaudis, line)
			}
		}
		if code != http.StatusOK || len(gaudis) != 1 || !strings.Contains(gaudis[0], `uuid="GIVEN-HLSMI"`) || !strings.HasSuffix(gaudis[0], " 1") {
			t.Errorf("%s: status %d, Gaudi devices %q; want the given hl-smi's one, up", scenario, code, gaudis)
		}
	}
}
