package collector

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/xpu-exporter/xpu_exporter/demo"

	"github.com/xpu-exporter/xpu_exporter/internal/syncbuf"
)

var update = flag.Bool("update", false, "rewrite golden files from the current output")

// testClock is a fixed moment, so that scenario generators give the same
// values at every run.
var (
	testStart = time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	testNow   = testStart.Add(90 * time.Minute)
)

func loadScenario(t testing.TB, name string) *demo.Scenario {
	t.Helper()
	if name == "default" {
		return demo.Default()
	}
	s, err := demo.Load(filepath.Join("..", "fixtures", "scenarios", name+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newTestExporter(t testing.TB, s *demo.Scenario, collectors map[string]bool) *Exporter {
	t.Helper()
	return newTestExporterAt(t, s, collectors, func() time.Time { return testNow })
}

func newTestExporterAt(t testing.TB, s *demo.Scenario, collectors map[string]bool, now func() time.Time) *Exporter {
	t.Helper()
	return newExporterOf(t, Config{NVML: s.NVML(testStart, now), Now: now}, enabled(collectors)...)
}

// enabled lists the collectors set to true.
func enabled(collectors map[string]bool) []string {
	var names []string
	for name, on := range collectors {
		if on {
			names = append(names, name)
		}
	}
	return names
}

// newExporterOf enables exactly the named collectors and builds an exporter
// from cfg, closed when the test ends.
func newExporterOf(t testing.TB, cfg Config, collectors ...string) *Exporter {
	t.Helper()
	states := map[string]bool{}
	for name := range factories {
		states[name] = slices.Contains(collectors, name)
	}
	if err := Enable(states); err != nil {
		t.Fatal(err)
	}
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}

// scrapeText gathers one scrape under timeout and renders it as the text
// exposition, without the durations, which vary from run to run.
func scrapeText(t testing.TB, e *Exporter, timeout time.Duration) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return gatherText(t, e.Bind(ctx))
}

// gatherText gathers c through a registry, as the OTLP bridge does, in
// the text format, without the collectors' durations (they vary).
func gatherText(t testing.TB, c prometheus.Collector) string {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if mf.GetName() == "xpu_scrape_collector_duration_seconds" {
			continue
		}
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	return buf.String()
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("..", "fixtures", "golden", "collector", name+".prom")
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./collector -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (run go test ./collector -update and review the diff):\n%s", path, diffLines(string(want), got))
	}
}

// diffLines lists the lines only one side has: enough to read a failure.
func diffLines(want, got string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	w, g := in(want), in(got)
	var b strings.Builder
	for _, l := range strings.Split(want, "\n") {
		if !g[l] {
			b.WriteString("- " + l + "\n")
		}
	}
	for _, l := range strings.Split(got, "\n") {
		if !w[l] {
			b.WriteString("+ " + l + "\n")
		}
	}
	return b.String()
}

// withExtendedReadings turns on --nvidia.extended-readings for one test:
// the goldens and the tests of how each reading is read cover them all.
func withExtendedReadings(t *testing.T) {
	*extendedReadings = true
	t.Cleanup(func() { *extendedReadings = false })
}

func TestNvidiaGolden(t *testing.T) {
	withExtendedReadings(t)
	for _, tc := range []struct {
		scenario string
		process  bool
	}{
		{scenario: "default"},
		{scenario: "mig", process: true},
		{scenario: "not-supported"},
		{scenario: "lost"},
		{scenario: "no-driver"},
		{scenario: "panic"},
	} {
		t.Run(tc.scenario, func(t *testing.T) {
			e := newTestExporter(t, loadScenario(t, tc.scenario), map[string]bool{"nvidia": true, "process": tc.process})
			golden(t, "nvidia-"+tc.scenario, scrapeText(t, e, 5*time.Second))
		})
	}
}

// seriesCount counts the exposition lines of one family.
func seriesCount(text, family string) int {
	return len(regexp.MustCompile(`(?m)^`+family+`[{ ]`).FindAllString(text, -1))
}

func TestNvidiaHealthyNode(t *testing.T) {
	out := scrapeText(t, newTestExporter(t, demo.Default(), map[string]bool{"nvidia": true}), 5*time.Second)
	// 8 GPUs plus the 4 MIG instances of GPU 4.
	for family, want := range map[string]int{
		"xpu_device_info":             12,
		"xpu_device_up":               12,
		"xpu_memory_total_bytes":      12,
		"xpu_utilization_ratio":       7, // NVML cannot measure a GPU in MIG mode as a whole, nor its instances
		"xpu_power_watts":             8,
		"xpu_clock_throttled":         8 * 9,
		"xpu_ecc_errors_total":        8 * 2, // corrected and uncorrected, volatile scope only
		"xpu_temperature_celsius":     8 * 2,
		"xpu_fan_speed_ratio":         0, // H100 SXM has no fans
		"xpu_nvml_errors_total":       0,
		"xpu_mig_mode_enabled":        8,
		"xpu_nvlink_up":               0,     // per link only with --nvidia.nvlink-per-link
		"xpu_nvlink_links":            8 * 2, // up and down, per GPU
		"xpu_nvlink_data_bytes_total": 8 * 2, // summed per GPU by default
		"xpu_nvlink_errors_total":     8 * 4,
		"xpu_process_memory_bytes":    0, // the process collector is off
		// The extended readings wait for --nvidia.extended-readings.
		"xpu_clock_max_hertz":                  0,
		"xpu_performance_state":                0,
		"xpu_memory_reserved_bytes":            0,
		"xpu_encoder_utilization_ratio":        0,
		"xpu_decoder_utilization_ratio":        0,
		"xpu_pcie_throughput_bytes_per_second": 0,
	} {
		if got := seriesCount(out, family); got != want {
			t.Errorf("%s: %d series, want %d", family, got, want)
		}
	}
	for _, line := range []string{
		`xpu_device_up{gpu="4",mig_instance="1",mig_profile="3g.40gb",model="NVIDIA H100 80GB HBM3",parent_uuid="GPU-2b149611-0000-4000-8000-000000000004",uuid="MIG-2b149611-0004-4000-8000-000000000000",vendor="nvidia"} 1`,
		`xpu_clock_throttled{gpu="6",model="NVIDIA H100 80GB HBM3",reason="hw_thermal_slowdown",uuid="GPU-2b149611-0000-4000-8000-000000000006",vendor="nvidia"} 1`,
		`xpu_clock_throttled{gpu="7",model="NVIDIA H100 80GB HBM3",reason="gpu_idle",uuid="GPU-2b149611-0000-4000-8000-000000000007",vendor="nvidia"} 1`,
		`xpu_memory_total_bytes{gpu="0",model="NVIDIA H100 80GB HBM3",uuid="GPU-2b149611-0000-4000-8000-000000000000",vendor="nvidia"} 8.589934592e+10`,
		`xpu_scrape_collector_success{collector="nvidia"} 1`,
	} {
		if !strings.Contains(out, line+"\n") {
			t.Errorf("missing %s", line)
		}
	}
}

// With --nvidia.extended-readings a whole H100 of the demo node has 11
// series more: 3 maximum clocks, P-state, reserved memory, encoder and
// decoder utilization, 2 PCIe directions and 2 aggregate ECC counters.
func TestNvidiaExtendedReadings(t *testing.T) {
	e := newTestExporter(t, demo.Default(), map[string]bool{"nvidia": true})
	base := scrapeText(t, e, 5*time.Second)
	withExtendedReadings(t)
	ext := scrapeText(t, e, 5*time.Second)
	// GPU 0 is a whole GPU, not in MIG mode.
	gpu0 := func(out string) int {
		n := 0
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "xpu_") && strings.Contains(l, `gpu="0"`) && !strings.HasPrefix(l, "xpu_scrape_") {
				n++
			}
		}
		return n
	}
	if d := gpu0(ext) - gpu0(base); d != 3+1+1+2+2+2 {
		t.Errorf("GPU 0: %d series more with the extended readings, want 11", d)
	}
	for family, want := range map[string]int{
		"xpu_clock_max_hertz":                  8 * 3,
		"xpu_performance_state":                8,
		"xpu_memory_reserved_bytes":            8 + 4, // the 8 GPUs and GPU 4's 4 MIG instances
		"xpu_encoder_utilization_ratio":        7,     // not GPU 4 as a whole, in MIG mode
		"xpu_pcie_throughput_bytes_per_second": 8 * 2,
		"xpu_ecc_errors_total":                 8 * 4, // 2 types × 2 scopes
	} {
		if got := seriesCount(ext, family); got != want {
			t.Errorf("%s: %d series, want %d", family, got, want)
		}
	}
}

func TestNvidiaNotSupportedOmitsOnlyThatSeries(t *testing.T) {
	withExtendedReadings(t)
	out := scrapeText(t, newTestExporter(t, loadScenario(t, "not-supported"), map[string]bool{"nvidia": true}), 5*time.Second)
	for family, want := range map[string]int{
		"xpu_device_up":                        1,
		"xpu_utilization_ratio":                1,
		"xpu_power_watts":                      1,
		"xpu_ecc_errors_total":                 4,
		"xpu_retired_pages_total":              2,
		"xpu_pcie_throughput_bytes_per_second": 2,
		"xpu_energy_joules_total":              0,
		"xpu_fan_speed_ratio":                  0,
		"xpu_power_limit_watts":                0,
		"xpu_clock_max_hertz":                  0,
		"xpu_remapped_rows":                    0,
		"xpu_retired_pages_pending":            0,
		"xpu_mig_mode_enabled":                 0,
		"xpu_pcie_link_generation":             0,
	} {
		if got := seriesCount(out, family); got != want {
			t.Errorf("%s: %d series, want %d", family, got, want)
		}
	}
	// The unexpected error is counted, not hidden.
	if !strings.Contains(out, `xpu_nvml_errors_total{call="GetRetiredPagesPendingStatus",error="ERROR_UNKNOWN"} 1`) {
		t.Errorf("unexpected NVML error not counted:\n%s", out)
	}
}

func TestNvidiaLostGPUIsDownOthersServed(t *testing.T) {
	out := scrapeText(t, newTestExporter(t, loadScenario(t, "lost"), map[string]bool{"nvidia": true}), 5*time.Second)
	for _, line := range []string{
		`xpu_device_up{gpu="0",model="NVIDIA H100 80GB HBM3",uuid="GPU-00000000-0000-4000-8000-000000000000",vendor="nvidia"} 1`,
		`xpu_device_up{gpu="1",vendor="nvidia"} 0`,
		`xpu_utilization_ratio{gpu="0",model="NVIDIA H100 80GB HBM3",uuid="GPU-00000000-0000-4000-8000-000000000000",vendor="nvidia"} 0.5`,
		`xpu_scrape_collector_success{collector="nvidia"} 1`,
	} {
		if !strings.Contains(out, line+"\n") {
			t.Errorf("missing %s in\n%s", line, out)
		}
	}
	if n := seriesCount(out, "xpu_utilization_ratio"); n != 1 {
		t.Errorf("the lost GPU must have no readings; got %d utilization series", n)
	}
}

func TestNvidiaHangingCallMissesDeadline(t *testing.T) {
	e := newTestExporter(t, loadScenario(t, "hang"), map[string]bool{"nvidia": true})
	for i, why := range []string{"first scrape", "second scrape, while the first query is still stuck"} {
		start := time.Now()
		// GPU 0 hangs for 3 s; 1 s leaves GPU 1's read (and a loaded
		// machine under -race) room within the sources' deadline.
		out := scrapeText(t, e, time.Second)
		if took := time.Since(start); took > 2*time.Second {
			t.Fatalf("%s: scrape took %v, it must end at its deadline", why, took)
		}
		// Its identity was read before the call that hangs: it is down
		// under its UUID, by which owners find it.
		if !strings.Contains(out, `xpu_device_up{gpu="0",model="NVIDIA H100 80GB HBM3",uuid="GPU-00000000-0000-4000-8000-00000000000a",vendor="nvidia"} 0`) {
			t.Errorf("%s (%d): hanging GPU not reported down:\n%s", why, i, out)
		}
		if !strings.Contains(out, `xpu_device_up{gpu="1",model="NVIDIA H100 80GB HBM3",uuid="GPU-00000000-0000-4000-8000-00000000000b",vendor="nvidia"} 1`) {
			t.Errorf("%s: the other GPU must still be served:\n%s", why, out)
		}
	}
}

// TestNvidiaNoDriver: without the NVML library (an AMD or Gaudi node) the
// collector serves no device and succeeds, saying so once; a library that
// loads but fails to initialise is a broken driver and fails it.
func TestNvidiaNoDriver(t *testing.T) {
	for _, c := range []struct {
		name    string
		init    nvml.Return
		success string
		log     string
	}{
		{"no library", nvml.ERROR_LIBRARY_NOT_FOUND, "1", "has no driver to talk to"},
		{"driver not loaded", nvml.ERROR_DRIVER_NOT_LOADED, "0", "NVIDIA collector failed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var logs syncbuf.Buffer
			now := func() time.Time { return testNow }
			lib := initFails{Interface: loadScenario(t, "no-driver").NVML(testStart, now), ret: c.init}
			e := newExporterOf(t, Config{NVML: lib, Now: now, Logger: slog.New(slog.NewTextHandler(&logs, nil))}, "nvidia")
			for range 2 {
				out := scrapeText(t, e, time.Second)
				if !strings.Contains(out, `xpu_scrape_collector_success{collector="nvidia"} `+c.success+"\n") {
					t.Errorf("want the nvidia collector's success %s:\n%s", c.success, out)
				}
				if n := seriesCount(out, "xpu_device_up"); n != 0 {
					t.Errorf("no driver, yet %d devices", n)
				}
			}
			if n := strings.Count(logs.String(), c.log); n != 1 {
				t.Errorf("%q logged %d times over two scrapes, want once:\n%s", c.log, n, logs.String())
			}
		})
	}
}

// initFails is an NVML whose Init answers ret.
type initFails struct {
	nvml.Interface
	ret nvml.Return
}

func (l initFails) Init() nvml.Return { return l.ret }

func TestConcurrentScrapesShareOneSnapshot(t *testing.T) {
	e := newTestExporter(t, demo.Default(), map[string]bool{"nvidia": true})
	var builds atomic.Int32
	release := make(chan struct{})
	orig := e.snapshots.sources["nvidia"]
	e.snapshots.sources["nvidia"] = sourceFunc(func(ctx context.Context) ([]*Device, error) {
		builds.Add(1)
		<-release
		return orig.readDevices(ctx, moveScrape)
	})
	results := make(chan *Snapshot, 2)
	for range 2 {
		go func() { results <- e.Snapshot(context.Background()) }()
	}
	deadline := time.Now().Add(10 * time.Second)
	for e.snapshots.coalesced.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	close(release)
	a, b := <-results, <-results
	if a != b || builds.Load() != 1 {
		t.Errorf("two concurrent scrapes made %d builds (same snapshot: %v)", builds.Load(), a == b)
	}
}

type sourceFunc func(context.Context) ([]*Device, error)

func (f sourceFunc) readDevices(ctx context.Context, _ move) ([]*Device, error) { return f(ctx) }

func TestHungSourceFailsOnlyItself(t *testing.T) {
	e := newTestExporter(t, demo.Default(), map[string]bool{"nvidia": true})
	release := make(chan struct{})
	defer close(release)
	e.snapshots.sources["nvidia"] = sourceFunc(func(ctx context.Context) ([]*Device, error) {
		<-release // a driver call that never returns, deaf to ctx
		return nil, nil
	})
	for _, want := range []string{"no answer before the scrape deadline", "previous read still running"} {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		snap := e.Snapshot(ctx)
		cancel()
		if err := snap.sources["nvidia"].err; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("source error %v, want %q", err, want)
		}
	}
}

func TestNvidiaProfilingNeedsTwoScrapes(t *testing.T) {
	withExtendedReadings(t)
	now := testNow
	e := newTestExporterAt(t, demo.Default(), map[string]bool{"nvidia": true}, func() time.Time { return now })
	first := scrapeText(t, e, 5*time.Second)
	if n := seriesCount(first, "xpu_sm_active_ratio"); n != 0 {
		t.Errorf("first scrape has %d GPM readings; GPM needs two samples", n)
	}
	now = now.Add(15 * time.Second)
	second := scrapeText(t, e, 5*time.Second)
	// 7 whole GPUs and 4 MIG instances are profiled; GPU 4 is in MIG mode.
	if n := seriesCount(second, "xpu_sm_active_ratio"); n != 11 {
		t.Errorf("second scrape: %d xpu_sm_active_ratio series, want 11:\n%s", n, second)
	}
	for _, line := range []string{
		// GPU 7 idles: every pipe at 0.
		`xpu_sm_active_ratio{gpu="7",model="NVIDIA H100 80GB HBM3",uuid="GPU-2b149611-0000-4000-8000-000000000007",vendor="nvidia"} 0`,
		// A MIG instance's utilization is GPM's graphics activity.
		`xpu_utilization_ratio{gpu="4",mig_instance="13",mig_profile="1g.10gb",model="NVIDIA H100 80GB HBM3",parent_uuid="GPU-2b149611-0000-4000-8000-000000000004",uuid="MIG-2b149611-0004-4000-8000-000000000002",vendor="nvidia"} 0.12`,
		// GPU 6 has link 11 of its 18 down: 17 up, 1 down.
		`xpu_nvlink_links{gpu="6",model="NVIDIA H100 80GB HBM3",state="down",uuid="GPU-2b149611-0000-4000-8000-000000000006",vendor="nvidia"} 1`,
		`xpu_nvlink_links{gpu="6",model="NVIDIA H100 80GB HBM3",state="up",uuid="GPU-2b149611-0000-4000-8000-000000000006",vendor="nvidia"} 17`,
		`xpu_nvlink_links{gpu="7",model="NVIDIA H100 80GB HBM3",state="down",uuid="GPU-2b149611-0000-4000-8000-000000000007",vendor="nvidia"} 0`,
		`xpu_pcie_throughput_bytes_per_second{direction="tx",gpu="7",model="NVIDIA H100 80GB HBM3",uuid="GPU-2b149611-0000-4000-8000-000000000007",vendor="nvidia"} 100000`,
	} {
		if !strings.Contains(second, line+"\n") {
			t.Errorf("missing %s", line)
		}
	}
	if n := seriesCount(second, "xpu_nvlink_throughput_bytes_per_second"); n != 14 {
		t.Errorf("%d NVLink throughput series, want 14 (7 GPUs × 2 directions)", n)
	}
}

// A scrape with a shorter deadline than a build already under way (the
// warm-up at start, a slow HA peer) builds its own snapshot rather than
// wait past its deadline and serve nothing.
func TestShortScrapeDoesNotWaitOnALongerBuild(t *testing.T) {
	e := newTestExporter(t, loadScenario(t, "hang"), map[string]bool{"nvidia": true})
	long, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go e.Snapshot(long) // hangs on GPU 0 for 3 s
	time.Sleep(50 * time.Millisecond)
	out := scrapeText(t, e, 300*time.Millisecond)
	if !strings.Contains(out, `xpu_device_up{gpu="1",model="NVIDIA H100 80GB HBM3",uuid="GPU-00000000-0000-4000-8000-00000000000b",vendor="nvidia"} 1`) {
		t.Errorf("the healthy GPU is not served while a longer build runs:\n%s", out)
	}
}

func TestNVLinkCountersPerLink(t *testing.T) {
	*nvlinkPerLink = true
	t.Cleanup(func() { *nvlinkPerLink = false })
	out := scrapeText(t, newTestExporter(t, demo.Default(), map[string]bool{"nvidia": true}), 5*time.Second)
	if n := seriesCount(out, "xpu_nvlink_data_bytes_total"); n != 8*18*2 {
		t.Errorf("%d per-link data series, want %d", n, 8*18*2)
	}
	if n := seriesCount(out, "xpu_nvlink_up"); n != 8*18 {
		t.Errorf("%d link states, want %d", n, 8*18)
	}
	if n := seriesCount(out, "xpu_nvlink_links"); n != 0 {
		t.Errorf("%d per-GPU link counts with per-link states, want none", n)
	}
	if !strings.Contains(out, `xpu_nvlink_up{gpu="6",link="11",model="NVIDIA H100 80GB HBM3",uuid="GPU-2b149611-0000-4000-8000-000000000006",vendor="nvidia"} 0`+"\n") {
		t.Error("GPU 6's link 11 is not down")
	}
	// GPU 6's replay errors: 3 + 0.005/s over the 90 minutes, on each link.
	if v := sample(t, out, "xpu_nvlink_errors_total", `gpu="6"`, `link="0"`, `type="replay"`); v != 30 {
		t.Errorf("replay errors on one link %v, want 30", v)
	}
}

// TestNVLinkDataBytes states the NVLink data counters, per GPU and per link,
// from the scenario's raw rates: the goldens alone covered them, with equal
// rates both ways, so a sum of the wrong direction passed unseen.
//
// The demo GPU's 4 links carry 2048 B/s out and 1024 B/s in, together, for
// the 5400 s from testStart to testNow; NVML counts each link's data in
// KiB. Per link: 2048 × 5400 / 4 = 2,764,800 B = 2700 KiB out, and 1024 ×
// 5400 / 4 = 1,382,400 B = 1350 KiB in. The exporter serves bytes: 2700 ×
// 1024 = 2,764,800 and 1350 × 1024 = 1,382,400 per link, and per GPU the 4
// links' sum, 4 × 2,764,800 = 11,059,200 out and 4 × 1,382,400 = 5,529,600
// in.
func TestNVLinkDataBytes(t *testing.T) {
	s, err := demo.Parse([]byte(`
devices:
  - model: X
    memory_total: 80GiB
    nvlinks: 4
    metrics: {nvlink_tx: 2048, nvlink_rx: 1024}
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		perLink  bool
		matchers []string
		tx, rx   float64
	}{
		{false, []string{`gpu="0"`}, 11_059_200, 5_529_600},
		{true, []string{`gpu="0"`, `link="2"`}, 2_764_800, 1_382_400},
	} {
		t.Run(fmt.Sprintf("per link %v", tc.perLink), func(t *testing.T) {
			*nvlinkPerLink = tc.perLink
			t.Cleanup(func() { *nvlinkPerLink = false })
			out := scrapeText(t, newTestExporter(t, s, map[string]bool{"nvidia": true}), 5*time.Second)
			for dir, want := range map[string]float64{"tx": tc.tx, "rx": tc.rx} {
				if v := sample(t, out, "xpu_nvlink_data_bytes_total", append(tc.matchers, `direction="`+dir+`"`)...); v != want {
					t.Errorf("%s: %v bytes, want %v", dir, v, want)
				}
			}
		})
	}
}
