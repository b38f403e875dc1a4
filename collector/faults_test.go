package collector

import (
	"bytes"
	"compress/gzip"
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/xpu-exporter/xpu_exporter/attribution"
	"github.com/xpu-exporter/xpu_exporter/attribution/kubernetes"

	"github.com/xpu-exporter/xpu_exporter/demo"

	"github.com/xpu-exporter/xpu_exporter/internal/syncbuf"
)

// writeScript replaces an executable atomically: a script being run
// cannot be rewritten in place (ETXTBSY). An empty body removes it.
func writeScript(t *testing.T, path, body string) {
	t.Helper()
	if body == "" {
		if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		return
	}
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// workloadLine is the xpu_workload_info series of Slurm job 4242, the
// default demo's job on GPU 5.
func workloadLine(t *testing.T, out string) string {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "xpu_workload_info{") && strings.Contains(line, `slurm_job_id="4242"`) {
			return line
		}
	}
	t.Fatalf("no xpu_workload_info of job 4242 in:\n%s", out)
	return ""
}

// scontrol missing, slow or failing: the job still owns its GPU (its ID
// comes from the process's cgroup, which scontrol is not needed for), only
// the metadata scontrol gives (user, account) is missing; the pods and
// units of the other GPUs are attributed as usual; slurm is the one source
// down; one line is logged when it fails and one when it answers again,
// after which the job's metadata is back.
func TestScontrolFaults(t *testing.T) {
	for _, fault := range []struct{ name, script string }{
		{"missing", ""},
		{"slow", "#!/bin/sh\nexec sleep 30\n"},
		{"failing", "#!/bin/sh\necho 'slurm_load_jobs error: Unable to contact slurm controller (connect failure)' >&2\nexit 1\n"},
	} {
		t.Run(fault.name, func(t *testing.T) {
			s := demo.Default()
			cfg, sim := simulatedAttribution(t, s)
			real := cfg.Slurm.Path
			path := filepath.Join(t.TempDir(), "scontrol")
			writeScript(t, path, fault.script)
			cfg.Slurm.Path, cfg.Slurm.Timeout = path, 300*time.Millisecond
			var logs syncbuf.Buffer
			cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			e := newResolvedExporter(t, s, sim, attribution.New(cfg))

			for scrape := range 2 {
				out := scrapeText(t, e, 5*time.Second)
				for source, want := range map[string]float64{"slurm": 0, "kubelet": 1, "procfs": 1} {
					if v := sample(t, out, "xpu_attribution_source_up", `source="`+source+`"`); v != want {
						t.Errorf("scrape %d: xpu_attribution_source_up{source=%q} = %v, want %v", scrape, source, v, want)
					}
				}
				if line := workloadLine(t, out); strings.Contains(line, "slurm_user=") {
					t.Errorf("scrape %d: job metadata without scontrol: %s", scrape, line)
				}
				if n := seriesCount(out, "xpu_device_up"); n != 12 {
					t.Errorf("scrape %d: %d devices, want the 12 of the demo node", scrape, n)
				}
				if !strings.Contains(out, `namespace="inference"`) {
					t.Errorf("scrape %d: the pods are no longer attributed", scrape)
				}
			}
			if n := strings.Count(logs.String(), "source=slurm"); n != 1 {
				t.Errorf("%d log lines for two failed scrapes, want 1:\n%s", n, logs.String())
			}

			writeScript(t, path, "#!/bin/sh\nexec "+real+" \"$@\"\n")
			out := scrapeText(t, e, 5*time.Second)
			if v := sample(t, out, "xpu_attribution_source_up", `source="slurm"`); v != 1 {
				t.Errorf("after recovery slurm is %v, want 1", v)
			}
			if line := workloadLine(t, out); !strings.Contains(line, `slurm_user="carol"`) || !strings.Contains(line, `slurm_account="nlp-research"`) {
				t.Errorf("after recovery: %s, want carol's job in nlp-research", line)
			}
			if n := strings.Count(logs.String(), "attribution source answering again"); n != 1 {
				t.Errorf("%d recovery lines, want 1:\n%s", n, logs.String())
			}
		})
	}
}

// garbageKubelet answers every connection on a unix socket with bytes
// that are not HTTP/2, as a wrong process on the kubelet's socket would.
func garbageKubelet(t *testing.T, path string) func() {
	t.Helper()
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\n\x00\xff\xfe garbage \x04\x00\x00\x00\x00"))
			c.Close()
		}
	}()
	return func() {
		l.Close()
		<-done
		os.Remove(path)
	}
}

// The kubelet's socket missing, then answered by garbage: GPUs are still
// served and the Slurm job and units still attributed, pods are not (only
// the kubelet tells which container holds a GPU), the kubelet is the one
// source down, logged once; when the real kubelet answers on the socket,
// the same client recovers, logged once, and pods are back.
func TestKubeletSocketFaults(t *testing.T) {
	s := demo.Default()
	cfg, sim := simulatedAttribution(t, s)
	// A short directory: unix socket paths are limited to 108 bytes.
	dir, err := os.MkdirTemp("", "kubelet")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	socket := filepath.Join(dir, "kubelet.sock")
	client, err := kubernetes.Dial(socket, kubernetes.WithCallTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	cfg.Kubelet = client
	var logs syncbuf.Buffer
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	e := newResolvedExporter(t, s, sim, attribution.New(cfg))

	check := func(state string, kubeletUp bool) string {
		t.Helper()
		out := scrapeText(t, e, 5*time.Second)
		want := map[string]float64{"kubelet": 0, "slurm": 1, "procfs": 1}
		if kubeletUp {
			want["kubelet"] = 1
		}
		for source, w := range want {
			if v := sample(t, out, "xpu_attribution_source_up", `source="`+source+`"`); v != w {
				t.Errorf("%s: xpu_attribution_source_up{source=%q} = %v, want %v", state, source, v, w)
			}
		}
		if n := seriesCount(out, "xpu_device_up"); n != 12 {
			t.Errorf("%s: %d devices, want the 12 of the demo node", state, n)
		}
		if line := workloadLine(t, out); !strings.Contains(line, `slurm_user="carol"`) {
			t.Errorf("%s: the Slurm job lost its owner: %s", state, line)
		}
		if pods := strings.Contains(out, `namespace="inference"`); pods != kubeletUp {
			t.Errorf("%s: pods attributed = %v, want %v", state, pods, kubeletUp)
		}
		return out
	}

	check("socket missing", false)
	stop := garbageKubelet(t, socket)
	check("garbage on the socket", false)
	check("garbage on the socket again", false)
	// The failure is the garbage, not the missing socket of before.
	if _, err := client.List(context.Background()); err == nil || strings.Contains(err.Error(), "no such file") {
		t.Errorf("List with garbage on the socket: %v", err)
	}
	stop()
	if n := strings.Count(logs.String(), "source=kubelet"); n != 1 {
		t.Errorf("%d log lines while the kubelet was down, want 1:\n%s", n, logs.String())
	}

	if err := os.Symlink(sim.Kubelet.PodResourcesSocket(), socket); err != nil {
		t.Fatal(err)
	}
	check("kubelet back", true)
	if n := strings.Count(logs.String(), `answering again" source=kubelet`); n != 1 {
		t.Errorf("%d recovery lines, want 1:\n%s", n, logs.String())
	}
}

// An engine endpoint that is down, slow, huge, a gzip bomb, invalid or
// answering protobuf (which decoded a 2 TB length prefix before) fails
// only its own target: xpu_inference_up 0, the healthy engine still served,
// the collector successful; each faulty target logged once over two
// scrapes; when the endpoints heal, every target is up again, each logged
// once.
func TestEngineFaults(t *testing.T) {
	healthy, err := os.ReadFile("../fixtures/engines/vllm-v0-0.5-datadog-fixture.prom")
	if err != nil {
		t.Fatal(err)
	}
	healthy = append(healthy, '\n')
	// 8 MiB of lines of a family no mapping reads, more than the 1 MiB
	// limit of setEngineFlags, gzipped to a few KiB.
	var bomb bytes.Buffer
	zw := gzip.NewWriter(&bomb)
	line := []byte("python_gc_objects_collected_total{generation=\"0\"} 1234\n")
	for written := 0; written < 8<<20; written += len(line) {
		zw.Write(line)
	}
	zw.Close()

	var healed atomic.Bool
	faults := map[string]http.HandlerFunc{
		"slow": func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-time.After(5 * time.Second):
			case <-r.Context().Done():
			}
		},
		"huge": func(w http.ResponseWriter, _ *http.Request) {
			for range 2 << 20 / len(line) {
				w.Write(line)
			}
		},
		"gzip-bomb": func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Encoding", "gzip")
			w.Write(bomb.Bytes())
		},
		"invalid": func(w http.ResponseWriter, _ *http.Request) {
			w.Write([]byte("vllm:num_requests_running{model_name=\"m\" 1\n"))
		},
		"protobuf": func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited")
			w.Write([]byte("\x99\x99\x99\x99\xd9?\x1a\x0e\b"))
		},
		"error-status": func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "model loading", http.StatusServiceUnavailable)
		},
	}
	var targets []string
	urls := map[string]string{}
	for name, fault := range faults {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if healed.Load() {
				w.Write(healthy)
				return
			}
			fault(w, r)
		}))
		t.Cleanup(srv.Close)
		urls[name] = srv.URL + "/" + name
		targets = append(targets, "vllm="+urls[name])
	}
	good := engineServer(t, "triton-densenet-t4-datadog-fixture.prom")
	targets = append(targets, "triton="+good.URL+"/metrics")
	setEngineFlags(t, targets)

	var logs syncbuf.Buffer
	e := newExporterOf(t, Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))}, "engines")

	for scrape := range 2 {
		started := time.Now()
		out := scrapeText(t, e, 2*time.Second)
		if took := time.Since(started); took > 4*time.Second {
			t.Errorf("scrape %d took %v with a 2s deadline", scrape, took)
		}
		for name, u := range urls {
			if v := sample(t, out, "xpu_inference_up", `target="`+u+`"`); v != 0 {
				t.Errorf("scrape %d: %s target up = %v", scrape, name, v)
			}
		}
		if v := sample(t, out, "xpu_inference_up", `engine="triton"`); v != 1 {
			t.Errorf("scrape %d: the healthy engine is down", scrape)
		}
		if !strings.Contains(out, `xpu_scrape_collector_success{collector="engines"} 1`) {
			t.Errorf("scrape %d: faulty engines failed the collector", scrape)
		}
	}
	for name, u := range urls {
		if n := strings.Count(logs.String(), `"inference engine not scraped" target=`+u+" "); n != 1 {
			t.Errorf("%s: %d failure lines over two scrapes, want 1:\n%s", name, n, logs.String())
		}
	}

	healed.Store(true)
	out := scrapeText(t, e, 2*time.Second)
	for name, u := range urls {
		if v := sample(t, out, "xpu_inference_up", `target="`+u+`"`); v != 1 {
			t.Errorf("%s healed, still down", name)
		}
		if n := strings.Count(logs.String(), `"inference engine scraped" target=`+u+"\n"); n != 1 {
			t.Errorf("%s: %d recovery lines, want 1", name, n)
		}
	}
}

// A GPU that falls off the bus and comes back: down with the other GPU
// served, one line when it goes and one when it is back, whether it was
// seen before it went (its UUID known) or was lost from the start.
func TestNvidiaGPULostAndBack(t *testing.T) {
	for _, tc := range []struct {
		name string
		lost []bool // per scrape
	}{
		{"seen, lost, back", []bool{false, true, true, false, false}},
		{"lost from the start, back", []bool{true, true, false, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := loadScenario(t, "lost")
			var logs syncbuf.Buffer
			e := newExporterOf(t, Config{NVML: s.NVML(testStart, func() time.Time { return testNow }), Now: func() time.Time { return testNow },
				Logger: slog.New(slog.NewTextHandler(&logs, nil))}, "nvidia")
			for i, lost := range tc.lost {
				// Between scrapes nothing reads the simulated GPU.
				s.Devices[1].Faults.Lost = lost
				out := scrapeText(t, e, 5*time.Second)
				want := 1.0
				if lost {
					want = 0
				}
				if v := sample(t, out, "xpu_device_up", `gpu="1"`); v != want {
					t.Errorf("scrape %d: GPU 1 up = %v, want %v", i, v, want)
				}
				if v := sample(t, out, "xpu_device_up", `gpu="0"`); v != 1 {
					t.Errorf("scrape %d: GPU 0 up = %v while GPU 1 is lost", i, v)
				}
			}
			if n := strings.Count(logs.String(), "NVIDIA device down"); n != 1 {
				t.Errorf("%d down lines, want 1:\n%s", n, logs.String())
			}
			if n := strings.Count(logs.String(), "NVIDIA device is back"); n != 1 {
				t.Errorf("%d back lines, want 1:\n%s", n, logs.String())
			}
		})
	}
}

// The driver goes away and comes back (a driver upgrade, a reload): no
// NVIDIA devices and one line while it is missing, the self-metrics still
// served, then the GPUs again and one line when NVML answers.
func TestNvidiaDriverAppears(t *testing.T) {
	s := loadScenario(t, "lost")
	s.Devices[1].Faults.Lost = false
	s.NoDriver = true
	var logs syncbuf.Buffer
	e := newExporterOf(t, Config{NVML: s.NVML(testStart, func() time.Time { return testNow }), Now: func() time.Time { return testNow },
		Logger: slog.New(slog.NewTextHandler(&logs, nil))}, "nvidia")
	for i := range 2 {
		out := scrapeText(t, e, 5*time.Second)
		if n := seriesCount(out, "xpu_device_up"); n != 0 {
			t.Errorf("scrape %d without a driver: %d devices", i, n)
		}
		if !strings.Contains(out, "xpu_scrape_collector_success{") {
			t.Errorf("scrape %d without a driver: no self-metrics:\n%s", i, out)
		}
	}
	s.NoDriver = false
	out := scrapeText(t, e, 5*time.Second)
	if v := sample(t, out, "xpu_device_up", `gpu="1"`); v != 1 || seriesCount(out, "xpu_device_up") != 2 {
		t.Errorf("after the driver appeared: %d devices, GPU 1 up %v", seriesCount(out, "xpu_device_up"), v)
	}
	if v := sample(t, out, "xpu_scrape_collector_success", `collector="nvidia"`); v != 1 {
		t.Errorf("nvidia collector success %v once the driver is there", v)
	}
	if n, m := strings.Count(logs.String(), "has no driver"), strings.Count(logs.String(), "reading devices through NVML"); n != 1 || m != 1 {
		t.Errorf("%d no-driver and %d driver lines, want 1 each:\n%s", n, m, logs.String())
	}
}

// dcgm-exporter failing, then back: the bridge fails alone (device metrics
// still served), one line when it fails and one when it answers again.
// Its failures used to be logged only at debug level.
func TestDCGMFailureLoggedOnChange(t *testing.T) {
	var broken atomic.Bool
	broken.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if broken.Load() {
			w.Write([]byte("DCGM_FI_PROF_SM_ACTIVE{UUID=\"GPU-1\" 0.5\n"))
			return
		}
		w.Write([]byte(t4Profiling))
	}))
	t.Cleanup(srv.Close)
	oldURL, oldMax := *dcgmURL, *dcgmMaxBytes
	*dcgmURL, *dcgmMaxBytes = srv.URL+"/metrics", 1<<20
	t.Cleanup(func() { *dcgmURL, *dcgmMaxBytes = oldURL, oldMax })

	s := loadScenario(t, "not-supported")
	var logs syncbuf.Buffer
	e := newExporterOf(t, Config{NVML: s.NVML(testStart, func() time.Time { return testNow }), Now: func() time.Time { return testNow },
		Logger: slog.New(slog.NewTextHandler(&logs, nil))}, "nvidia", "dcgm")
	for i, fail := range []bool{true, true, false, false} {
		broken.Store(fail)
		out := scrapeText(t, e, 5*time.Second)
		want := 1.0
		if fail {
			want = 0
		}
		if v := sample(t, out, "xpu_scrape_collector_success", `collector="dcgm"`); v != want {
			t.Errorf("scrape %d: dcgm success %v, want %v", i, v, want)
		}
		if v := sample(t, out, "xpu_scrape_collector_success", `collector="nvidia"`); v != 1 || seriesCount(out, "xpu_utilization_ratio") != 1 {
			t.Errorf("scrape %d: device metrics must be served whatever dcgm-exporter does", i)
		}
	}
	if n, m := strings.Count(logs.String(), "dcgm-exporter not scraped"), strings.Count(logs.String(), `"dcgm-exporter scraped"`); n != 1 || m != 1 {
		t.Errorf("%d failure and %d recovery lines, want 1 each:\n%s", n, m, logs.String())
	}
}

// NVML event registration failing on every GPU (an event-set error): the
// listener says it is not listening, once in the log, and the devices are
// served as usual. (It retries every minute, too long to wait for here.)
func TestNvidiaEventSetErrors(t *testing.T) {
	s := loadScenario(t, "lost")
	for i := range s.Devices {
		s.Devices[i].Faults.Lost = false
		s.Devices[i].Faults.Errors = []string{"events"}
	}
	var logs syncbuf.Buffer
	e := newExporterOf(t, Config{NVML: s.NVML(testStart, func() time.Time { return testNow }), Now: func() time.Time { return testNow },
		Logger: slog.New(slog.NewTextHandler(&logs, nil))}, "nvidia")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	e.Start(ctx)
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(logs.String(), "not receiving NVIDIA driver events"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no warning about events:\n%s", logs.String())
		}
	}
	for i := range 2 {
		out := scrapeText(t, e, 5*time.Second)
		if !strings.Contains(out, "xpu_nvml_events_listening 0\n") {
			t.Errorf("scrape %d: listening is not 0", i)
		}
		if v := sample(t, out, "xpu_scrape_collector_success", `collector="nvidia"`); v != 1 || seriesCount(out, "xpu_device_up") != 2 {
			t.Errorf("scrape %d: devices must be served without events", i)
		}
	}
	if n := strings.Count(logs.String(), "not receiving NVIDIA driver events"); n != 1 {
		t.Errorf("%d lines, want 1:\n%s", n, logs.String())
	}
}

// A GPU hung in the driver across several scrapes: its read times out,
// later scrapes find it still running; one state, so one line when it
// goes down and one when it is back, not a line at every change of reason
// (found by probing: two lines per hang, forever).
func TestNvidiaHungGPULoggedOnce(t *testing.T) {
	s, err := demo.Parse([]byte(`
devices:
  - {model: X, memory_total: 1GiB, metrics: {power: 100}}
  - {model: X, memory_total: 1GiB, metrics: {power: 100}}
`))
	if err != nil {
		t.Fatal(err)
	}
	var hung atomic.Bool
	hung.Store(true)
	lib := hangingLib{Interface: s.NVML(time.Now(), time.Now), hung: &hung}
	var logs syncbuf.Buffer
	e := newExporterOf(t, Config{NVML: lib, Logger: slog.New(slog.NewTextHandler(&logs, nil))}, "nvidia")
	// 100 ms scrapes 150 ms apart: each read of GPU 0 hangs 900 ms in its
	// power call, so a scrape either times out on a read it started or
	// finds one still running, past its deadline by more than its budget.
	for range 8 {
		out := scrapeText(t, e, 100*time.Millisecond)
		if v := sample(t, out, "xpu_device_up", `gpu="0"`); v != 0 {
			t.Fatalf("GPU 0 up while every read of it hangs: the test proves nothing")
		}
		time.Sleep(150 * time.Millisecond)
	}
	// The driver answers again; the read in flight ends within 900 ms.
	hung.Store(false)
	time.Sleep(time.Second)
	out := scrapeText(t, e, 5*time.Second)
	if v := sample(t, out, "xpu_device_up", `gpu="0"`); v != 1 {
		t.Errorf("GPU 0 up = %v after its hang ended", v)
	}
	if n := strings.Count(logs.String(), "NVIDIA device down"); n != 1 {
		t.Errorf("%d down lines for one hang, want 1:\n%s", n, logs.String())
	}
	if n := strings.Count(logs.String(), "NVIDIA device is back"); n != 1 {
		t.Errorf("%d back lines, want 1:\n%s", n, logs.String())
	}
}

// A GPU lost for good (lost_after) while a read with a longer deadline
// (/devices, the warm-up at start) waits for a hung GPU beside it: that
// read took the lost GPU's answer before it was lost and hands it in after
// a scrape found it lost. One line when it goes, and no "back": an answer
// older than the one logged is not a change (found by probing: down, back,
// down again for a GPU that never answered again).
func TestNvidiaLateReadDoesNotLogLostGPUBack(t *testing.T) {
	s, err := demo.Parse([]byte(`
defaults: {model: X, memory_total: 1GiB, metrics: {temperature: 50}}
devices:
  - faults: {hang: [temperature], hang_for: 3s}
  - faults: {lost_after: 1m}
`))
	if err != nil {
		t.Fatal(err)
	}
	var now atomic.Pointer[time.Time]
	now.Store(&testStart)
	clock := func() time.Time { return *now.Load() }
	var logs syncbuf.Buffer
	e := newExporterOf(t, Config{NVML: s.NVML(testStart, clock), Now: clock, Logger: slog.New(slog.NewTextHandler(&logs, nil))}, "nvidia")

	slow := make(chan *Snapshot)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		slow <- e.Snapshot(ctx) // reads GPU 1 at once, then waits for GPU 0
	}()
	time.Sleep(100 * time.Millisecond)
	lost := testStart.Add(2 * time.Minute)
	now.Store(&lost)
	for i := range 2 {
		if i == 1 {
			if snap := <-slow; snap == nil || len(snap.Devices) != 2 || !snap.Devices[1].Up {
				t.Fatalf("the slow read did not take GPU 1's answer from before it was lost: the test proves nothing")
			}
		}
		out := scrapeText(t, e, 500*time.Millisecond)
		if v := sample(t, out, "xpu_device_up", `gpu="1"`); v != 0 {
			t.Errorf("scrape %d: GPU 1 up = %v after it was lost", i, v)
		}
	}
	if n := strings.Count(logs.String(), `"NVIDIA device down" gpu=1 `); n != 1 {
		t.Errorf("%d down lines for GPU 1, want 1:\n%s", n, logs.String())
	}
	if strings.Contains(logs.String(), `"NVIDIA device is back" gpu=1 `) {
		t.Errorf("GPU 1 logged back, though it never answered again:\n%s", logs.String())
	}
}

// startedHangingGPU is a started exporter of two simulated GPUs, GPU 0's
// power reads taking hang, its log, and what stops it.
func startedHangingGPU(t *testing.T, hang string) (*Exporter, *syncbuf.Buffer, context.CancelFunc) {
	t.Helper()
	s, err := demo.Parse([]byte(`
defaults: {model: X, memory_total: 1GiB, metrics: {power: 100}}
devices:
  - faults: {hang: [power], hang_for: ` + hang + `}
  - {}
`))
	if err != nil {
		t.Fatal(err)
	}
	logs := new(syncbuf.Buffer)
	e := newExporterOf(t, Config{NVML: s.NVML(time.Now(), time.Now), Logger: slog.New(slog.NewTextHandler(logs, nil))}, "nvidia")
	ctx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	e.Start(ctx)
	return e, logs, stop
}

// A read cut because the exporter stops (SIGTERM, or a start that fails
// after the collectors started) did not find its GPUs down: they are not
// logged down, while a GPU whose read misses the deadline of two scrapes
// in a row (it hangs 2 s) is.
func TestNvidiaReadCutByShutdownLogsNothing(t *testing.T) {
	for _, tc := range []struct {
		name      string
		stop      bool
		downLines int
	}{
		{"deadline", false, 1},
		{"shutdown", true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, logs, stop := startedHangingGPU(t, "2s") // its warm-up read waits for GPU 0
			time.Sleep(100 * time.Millisecond)
			if tc.stop {
				stop()
				time.Sleep(300 * time.Millisecond) // for the cut read to answer
			} else {
				scrapeText(t, e, 300*time.Millisecond)
				scrapeText(t, e, 300*time.Millisecond)
			}
			if n := strings.Count(logs.String(), "NVIDIA device down"); n != tc.downLines {
				t.Errorf("%d down lines, want %d:\n%s", n, tc.downLines, logs.String())
			}
		})
	}
}

// hangingLib is a simulated NVML whose GPU 0 hangs 900 ms in
// nvmlDeviceGetPowerUsage while hung is set.
type hangingLib struct {
	nvml.Interface
	hung *atomic.Bool
}

func (l hangingLib) DeviceGetHandleByIndex(i int) (nvml.Device, nvml.Return) {
	d, ret := l.Interface.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS || i != 0 {
		return d, ret
	}
	return hangingDevice{Device: d, hung: l.hung}, ret
}

type hangingDevice struct {
	nvml.Device
	hung *atomic.Bool
}

func (d hangingDevice) GetPowerUsage() (uint32, nvml.Return) {
	if d.hung.Load() {
		time.Sleep(900 * time.Millisecond)
	}
	return d.Device.GetPowerUsage()
}

// TestOneScrapeDeadlineLogsNoGPUDown: GPU 0's power reads take 200 ms
// (hang_for). A scrape that gives itself 50 ms (a client may ask any
// deadline) serves it down, but logs nothing: the next scrapes, of a
// second each, find it answering (probe H, PH4: every GPU was logged
// down, twice under two reasons, then back). A GPU whose reads take 2 s,
// past two scrapes in a row, is logged down once, under one state
// whatever the reason each scrape saw.
func TestOneScrapeDeadlineLogsNoGPUDown(t *testing.T) {
	for _, tc := range []struct {
		hang      string
		downLines int
	}{{"200ms", 0}, {"2s", 1}} {
		t.Run(tc.hang, func(t *testing.T) {
			e, logs, _ := startedHangingGPU(t, tc.hang)
			time.Sleep(100 * time.Millisecond)
			if v := sample(t, scrapeText(t, e, 50*time.Millisecond), "xpu_device_up", `gpu="0"`); v != 0 {
				t.Fatalf("GPU 0 up = %v in a scrape of 50 ms while its read hangs: the test proves nothing", v)
			}
			time.Sleep(300 * time.Millisecond)
			for range 3 {
				scrapeText(t, e, time.Second)
			}
			if n := strings.Count(logs.String(), "NVIDIA device down"); n != tc.downLines {
				t.Errorf("%d down lines, want %d:\n%s", n, tc.downLines, logs.String())
			}
			if n := strings.Count(logs.String(), "NVIDIA device is back"); n != 0 {
				t.Errorf("%d back lines, want none:\n%s", n, logs.String())
			}
		})
	}
}
