package collector

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/xpu-exporter/xpu_exporter/demo"
)

var matrixResults = flag.String("matrix.results", "", "run the scrape cost matrix and write it to this Markdown file (make bench)")

// The matrix's axes (issue 12).
var (
	matrixDevices   = []int{1, 8, 16, 64}
	matrixProcesses = []int{10, 100, 1000, 10000}
	matrixPods      = []int{0, 64, 512}
)

// defaultCollectors are the collectors on without flags (registerCollector's
// enabledByDefault): nvidia, attribution, engines, cost.
var defaultCollectors = map[string]bool{"nvidia": true, "attribution": true, "engines": true, "cost": true}

func withProcess(on map[string]bool) map[string]bool {
	out := map[string]bool{"process": true}
	for k, v := range on {
		out[k] = v
	}
	return out
}

// matrixScenario is a node of H100s with every reading and 18 NVLinks,
// running procs processes spread round-robin over the GPUs. Pod j holds a
// time-slicing replica of GPU j mod devices; a process runs in one of its
// GPU's pods, or in a login session when its GPU has none.
func matrixScenario(tb testing.TB, devices, procs, pods int) *demo.Scenario {
	tb.Helper()
	const node = "matrix-node"
	var y strings.Builder
	fmt.Fprintf(&y, "node: %s\ndefaults:\n  model: NVIDIA H100 80GB HBM3\n  memory_total: 80GiB\n  power_limit_watts: 700\n", node)
	// The driver keeps 20 sample periods here: a scrape every 15 s reads 15
	// of them whatever the buffer, and the first scrape need not read 100.
	y.WriteString("  max_clocks_mhz: {graphics: 1980, sm: 1980, memory: 2619}\n  nvlinks: 18\n  sample_buffer: 20\n  metrics:\n")
	for _, m := range []string{
		"utilization: 0.9", "memory_utilization: 0.5", "encoder_utilization: 0", "decoder_utilization: 0",
		"memory_used: 70GiB", "memory_reserved: 512MiB", "temperature: 60", "memory_temperature: 70", "power: 500",
		"energy: {start: 3.6e9, rate: 510}", "performance_state: 0", "clock_graphics: 1900", "clock_sm: 1900",
		"clock_memory: 2619", "pcie_tx: 1.0e9", "pcie_rx: 2.0e9", "pcie_replays: 0", "pcie_generation: 5",
		"pcie_width: 16", "pcie_max_generation: 5", "pcie_max_width: 16", "ecc_corrected: {start: 0, rate: 0.002}",
		"ecc_uncorrected: 0", "retired_pages_single_bit: 0", "retired_pages_double_bit: 0",
		"remapped_rows_correctable: 0", "remapped_rows_uncorrectable: 0", "nvlink_replay_errors: 0",
		"nvlink_recovery_errors: 0", "nvlink_crc_flit_errors: 0", "nvlink_crc_data_errors: 0",
		"nvlink_tx: 1.0e11", "nvlink_rx: 1.0e11", "graphics_active: 0.9", "sm_active: 0.8", "sm_occupancy: 0.4",
		"tensor_active: 0.5", "dram_active: 0.5", "fp16_active: 0.1", "fp32_active: 0.05", "fp64_active: 0",
	} {
		fmt.Fprintf(&y, "    %s\n", m)
	}
	podsOn := func(d int) int { // pods holding GPU d
		if d >= pods {
			return 0
		}
		return (pods-d-1)/devices + 1
	}
	// Each GPU's processes hold 64 MiB each, or less where there are so
	// many that together they would hold more than the 60 GiB of the
	// device's 70 GiB used that the scenario gives them (demo refuses a
	// device using less memory than its processes).
	perGPU := (procs + devices - 1) / devices
	procKiB := 64 << 10
	if perGPU > 0 {
		procKiB = min(procKiB, (60<<20)/perGPU)
	}
	y.WriteString("devices:\n")
	for d := range devices {
		fmt.Fprintf(&y, "  - processes:\n")
		if d >= procs {
			y.WriteString("      []\n")
		}
		for i := d; i < procs; i += devices {
			owner := ""
			if n := podsOn(d); n > 0 {
				owner = fmt.Sprintf(", pod: bench/pod-%d", d+devices*((i/devices)%n))
			}
			fmt.Fprintf(&y, "      - {pid: %d%s, memory_used: %dKiB, utilization: 0.01}\n", 10000+i, owner, procKiB)
		}
	}
	if pods > 0 {
		y.WriteString("kubernetes:\n  pods:\n")
		for j := range pods {
			fmt.Fprintf(&y, "    - {namespace: bench, name: pod-%d, uid: %08d-0000-4000-8000-%012d, containers: [{name: main, devices: [{resource: nvidia.com/gpu, ids: [\"GPU-%08x-0000-4000-8000-%012x::%d\"]}]}]}\n",
				j, j, j, hashNode(node), j%devices, j/devices)
		}
		// The device plugin advertises as many replicas of each GPU as
		// pods hold it: each holds 1/N of it.
		y.WriteString("  allocatable:\n    - resource: nvidia.com/gpu\n      ids:\n")
		for j := range pods {
			fmt.Fprintf(&y, "        - \"GPU-%08x-0000-4000-8000-%012x::%d\"\n", hashNode(node), j%devices, j/devices)
		}
	}
	s, err := demo.Parse([]byte(y.String()))
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// cpuTime is the CPU time this process has used, user and system: the
// cost of a scrape on a shared node, whatever the wall time.
func cpuTime() time.Duration { return rusageCPU(syscall.RUSAGE_SELF) }

// childCPUTime is the CPU time of this process's children that have been
// waited for (getrusage(2): RUSAGE_CHILDREN "returns resource usage
// statistics for all children of the calling process that have terminated
// and been waited for"), such as the hl-smi runs.
func childCPUTime() time.Duration { return rusageCPU(syscall.RUSAGE_CHILDREN) }

func rusageCPU(who int) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(who, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchScrape measures full scrapes, exposition encoded, with the scenario's
// simulated sources (kubelet, procfs) in this process. The clock moves 15 s
// per scrape, so each scrape sees a Prometheus interval's worth of NVML
// utilization samples. cpu-ns/op includes the fake kubelet's work;
// sim-cpu-ns/op is the simulated NVML's answers (simMeter), meter-cpu-ns/op
// the meter's own clock reads, own-cpu-ns/op the rest.
func benchScrape(b *testing.B, s *demo.Scenario, collectors map[string]bool) {
	var clock atomic.Int64
	clock.Store(testNow.UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	var sim simMeter
	e := newAttributedExporterWith(b, s, collectors, now, func(c *Config) { c.NVML = sim.wrap(c.NVML) })
	var body bytes.Buffer
	scrape := func() {
		clock.Add(int64(15 * time.Second))
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		body.Reset()
		e.WriteText(ctx, &body, nil)
	}
	scrape() // caches and the first sample windows fill here
	b.ReportAllocs()
	cpu0, sim0, windows0 := cpuTime(), sim.ns.Load(), sim.windows.Load()
	n := 0
	for b.Loop() {
		scrape()
		n++
	}
	cpu, c := float64(cpuTime()-cpu0)/float64(n), sim.since(sim0, windows0, n)
	b.ReportMetric(cpu, "cpu-ns/op")
	b.ReportMetric(c.sim, "sim-cpu-ns/op")
	b.ReportMetric(c.meter, "meter-cpu-ns/op")
	b.ReportMetric(cpu-c.sim-c.meter, "own-cpu-ns/op")
}

// BenchmarkScrapeMatrix is the scrape cost across node sizes, process
// collector off; make bench runs it through TestBenchMatrix.
func BenchmarkScrapeMatrix(b *testing.B) {
	for _, d := range matrixDevices {
		for _, p := range matrixProcesses {
			for _, q := range matrixPods {
				b.Run(fmt.Sprintf("devices=%d/processes=%d/pods=%d", d, p, q), func(b *testing.B) {
					benchScrape(b, matrixScenario(b, d, p, q), defaultCollectors)
				})
			}
		}
	}
}

type matrixRow struct {
	devices, procs, pods int
	process              bool
	res                  testing.BenchmarkResult
}

func (r matrixRow) cpuNs() float64 { return r.res.Extra["cpu-ns/op"] }
func (r matrixRow) ownNs() float64 { return r.res.Extra["own-cpu-ns/op"] }

// TestBenchMatrix writes bench/results.md (make bench): the cost of one
// scrape over the matrix, whether it grows linearly, and series counts.
// TestMatrixScenariosParse: every node of the matrix is a scenario the
// demo takes, so that make bench, which make test does not run, is not
// broken by a stricter scenario check (as it was once).
func TestMatrixScenariosParse(t *testing.T) {
	for _, d := range matrixDevices {
		for _, p := range matrixProcesses {
			for _, q := range matrixPods {
				matrixScenario(t, d, p, q)
			}
		}
	}
}

func TestBenchMatrix(t *testing.T) {
	if *matrixResults == "" {
		t.Skip("run by make bench (-matrix.results=FILE)")
	}
	var rows []matrixRow
	run := func(d, p, q int, process bool) {
		on := defaultCollectors
		if process {
			on = withProcess(on)
		}
		s := matrixScenario(t, d, p, q)
		var failed string
		res := testing.Benchmark(func(b *testing.B) {
			defer func() {
				if b.Failed() {
					failed = "benchmark failed"
				}
			}()
			benchScrape(b, s, on)
		})
		if failed != "" || res.N == 0 {
			t.Fatalf("devices=%d processes=%d pods=%d process=%v: %s", d, p, q, process, failed)
		}
		rows = append(rows, matrixRow{d, p, q, process, res})
		t.Logf("devices=%d processes=%d pods=%d process=%v: %s %.0f cpu-ns/op", d, p, q, process, res.String(), res.Extra["cpu-ns/op"])
	}
	for _, d := range matrixDevices {
		for _, p := range matrixProcesses {
			for _, q := range matrixPods {
				run(d, p, q, false)
			}
		}
	}
	for _, p := range matrixProcesses {
		for _, q := range matrixPods {
			run(8, p, q, true)
		}
	}
	series := seriesCounts(t)

	var md bytes.Buffer
	writeMatrix(&md, rows, series)
	if err := os.WriteFile(*matrixResults, md.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func machine() string {
	model := "unknown"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	nproc := fmt.Sprint(runtime.NumCPU())
	if out, err := exec.Command("nproc").Output(); err == nil {
		nproc = strings.TrimSpace(string(out))
	}
	return fmt.Sprintf("- date: %s\n- nproc: %s\n- CPU: %s\n- Go: %s %s/%s\n- GOMAXPROCS: %d (the binary's default is 1, --runtime.gomaxprocs)\n",
		time.Now().UTC().Format(time.RFC3339), nproc, model, runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0))
}

func find(rows []matrixRow, d, p, q int, process bool) matrixRow {
	for _, r := range rows {
		if r.devices == d && r.procs == p && r.pods == q && r.process == process {
			return r
		}
	}
	panic(fmt.Sprintf("no row devices=%d processes=%d pods=%d", d, p, q))
}

// linearity compares how the cost grows over an axis's largest step with
// how the size does. Cost that grows linearly (a + b·n) grows at most as
// much as the size, less where the fixed part a weighs; superlinear cost
// grows more. A growth up to 1.5 times the size's is called linear: runs on
// a shared machine are noisy.
type linearity struct {
	what         string
	sizes        [3]int
	costs        [3]float64
	sizeX, costX float64 // largest / middle size, and their costs
}

func (l linearity) ratio() float64 { return l.costX / l.sizeX }

func axis(what string, sizes [3]int, costs [3]float64) linearity {
	return linearity{what: what, sizes: sizes, costs: costs,
		sizeX: float64(sizes[2]) / float64(sizes[1]), costX: costs[2] / costs[1]}
}

func writeMatrix(w io.Writer, rows []matrixRow, series seriesResult) {
	fmt.Fprintf(w, "# Scrape cost matrix\n\nWritten by `make bench` (collector/bench_matrix_test.go, TestBenchMatrix); do not edit.\n\n")
	fmt.Fprintf(w, "## Machine\n\n%s\n", machine())
	fmt.Fprintf(w, "## Cost of one scrape\n\n"+
		"One full scrape (node snapshot, attribution, every enabled collector, text exposition encoded) of a simulated "+
		"node of H100s with every reading and 18 NVLinks each; processes spread round-robin over the GPUs, pod j holding a "+
		"time-slicing replica of GPU j mod devices, processes running in their GPU's pods. The simulated clock moves 15 s "+
		"per scrape, so each scrape reads 15 s of NVML utilization samples per process. Collectors: the defaults "+
		"(nvidia, attribution, engines, cost); the last table adds `--collector.process`. CPU ns/op is this process's user+system "+
		"CPU time per scrape, including the in-process fake kubelet's and simulated NVML's; own CPU ns/op leaves out the simulated NVML's "+
		"answers, timed on their thread's CPU clock (bench_sim_test.go: what it does not time, the fake kubelet included, counts as own). "+
		"wall ns/op is shorter where devices are read in parallel.\n\n")
	table := func(process bool) {
		fmt.Fprintf(w, "| devices | processes | pods | CPU ns/op | own CPU ns/op | wall ns/op | B/op | allocs/op | scrapes |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, r := range rows {
			if r.process != process {
				continue
			}
			fmt.Fprintf(w, "| %d | %d | %d | %.0f | %.0f | %d | %d | %d | %d |\n", r.devices, r.procs, r.pods, r.cpuNs(), r.ownNs(),
				r.res.NsPerOp(), r.res.AllocedBytesPerOp(), r.res.AllocsPerOp(), r.res.N)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "### Process collector off (default)\n\n")
	table(false)
	fmt.Fprintf(w, "### Process collector on, 8 devices\n\n")
	table(true)

	var axes []linearity
	for _, q := range matrixPods {
		c := func(d int) float64 { return find(rows, d, 1000, q, false).cpuNs() }
		axes = append(axes, axis(fmt.Sprintf("devices, 1,000 processes, %d pods", q), [3]int{8, 16, 64}, [3]float64{c(8), c(16), c(64)}))
	}
	for _, d := range matrixDevices {
		for _, q := range matrixPods {
			c := func(p int) float64 { return find(rows, d, p, q, false).cpuNs() }
			axes = append(axes, axis(fmt.Sprintf("processes, %d devices, %d pods", d, q), [3]int{100, 1000, 10000}, [3]float64{c(100), c(1000), c(10000)}))
		}
	}
	for _, d := range matrixDevices {
		for _, p := range []int{10, 1000} {
			c := func(q int) float64 { return find(rows, d, p, q, false).cpuNs() }
			// From 64 to 512 pods (the step from none adds attribution itself).
			axes = append(axes, axis(fmt.Sprintf("pods, %d devices, %d processes", d, p), [3]int{0, 64, 512}, [3]float64{c(0), c(64), c(512)}))
		}
	}
	c := func(p int) float64 { return find(rows, 8, p, 64, true).cpuNs() }
	axes = append(axes, axis("processes with --collector.process, 8 devices, 64 pods", [3]int{100, 1000, 10000}, [3]float64{c(100), c(1000), c(10000)}))

	fmt.Fprintf(w, "## Does the cost grow linearly?\n\n"+
		"Per axis, how much the CPU cost grows over the largest step (e.g. 1,000 → 10,000 processes, ×10) against how "+
		"much the size does. Linear cost (fixed part plus a part per unit) grows at most as much as the size (ratio ≤ 1); "+
		"superlinear cost grows more. A ratio up to 1.5 is counted as linear on this noisy shared machine.\n\n")
	fmt.Fprintf(w, "| axis | sizes | CPU ms/op | size × | cost × | ratio | linear |\n|---|---|---|---:|---:|---:|---|\n")
	var bad []string
	for _, a := range axes {
		lin := a.ratio() <= 1.5
		if !lin {
			bad = append(bad, a.what)
		}
		fmt.Fprintf(w, "| %s | %d / %d / %d | %.1f / %.1f / %.1f | %.0f | %.1f | %.2f | %s |\n", a.what, a.sizes[0], a.sizes[1], a.sizes[2],
			a.costs[0]/1e6, a.costs[1]/1e6, a.costs[2]/1e6, a.sizeX, a.costX, a.ratio(), map[bool]string{true: "yes", false: "**no**"}[lin])
	}
	if len(bad) == 0 {
		fmt.Fprintf(w, "\n**Verdict: linear.** On every axis the cost grows at most 1.5 times as much as the size over the largest step.\n\n")
	} else {
		fmt.Fprintf(w, "\n**Verdict: not linear** on %d of %d axes: %s. There the cost grows faster than the size.\n\n", len(bad), len(axes), strings.Join(bad, "; "))
	}
	fmt.Fprintf(w, "## Series with default flags\n\n%s", series.markdown())
}

// seriesResult holds series counts of scrapes with default collectors.
type seriesResult struct {
	node                                  int // the 8-GPU matrix node, 64 pods, 1,000 processes
	gpus8, gpus16                         int
	exclusive0, exclusive8                int // 8 GPUs without owners / each with its own pod
	shared64, shared128                   int // 8 GPUs time-sliced by 64 / 128 pods
	perDevice, perExclusive, perSharedPod float64
}

func (s seriesResult) markdown() string {
	return fmt.Sprintf("Counted from the second scrape of the matrix node, when GPM profiling readings have their two samples (differences, so fixed series such as self-metrics cancel out):\n\n"+
		"| what | from | series |\n|---|---|---:|\n"+
		"| per device | (16 GPUs − 8 GPUs) / 8, no owners: %d − %d | %.1f |\n"+
		"| per owner, a pod alone on its GPU | (8 GPUs with a pod and one process each − 8 without): (%d − %d) / 8 | %.1f |\n"+
		"| per owner, a pod sharing a GPU | (8 GPUs × 16 pods − 8 GPUs × 8 pods), one process per pod: (%d − %d) / 64 | %.1f |\n"+
		"| whole node | 8 GPUs, 64 pods, 1,000 processes | %d |\n\n"+
		"Budget: ≤ 60 per device, ≤ 6 per owner.\n",
		s.gpus16, s.gpus8, s.perDevice, s.exclusive8, s.exclusive0, s.perExclusive, s.shared128, s.shared64, s.perSharedPod, s.node)
}

// countSeries counts the series of a node's second scrape, 15 s after the
// first: GPM profiling readings need two samples, and a budget that left
// them out would count less than every scrape after the first serves.
func countSeries(tb testing.TB, s *demo.Scenario) int {
	tb.Helper()
	now := testNow
	e := newAttributedExporterWith(tb, s, defaultCollectors, func() time.Time { return now })
	scrapeText(tb, e, time.Minute)
	now = now.Add(15 * time.Second)
	out := scrapeText(tb, e, time.Minute)
	n := 0
	for _, l := range strings.Split(out, "\n") {
		if l != "" && !strings.HasPrefix(l, "#") {
			n++
		}
	}
	return n
}

func seriesCounts(tb testing.TB) seriesResult {
	var r seriesResult
	r.node = countSeries(tb, matrixScenario(tb, 8, 1000, 64))
	r.gpus8 = countSeries(tb, matrixScenario(tb, 8, 0, 0))
	r.gpus16 = countSeries(tb, matrixScenario(tb, 16, 0, 0))
	r.exclusive0 = r.gpus8
	r.exclusive8 = countSeries(tb, matrixScenario(tb, 8, 8, 8))
	r.shared64 = countSeries(tb, matrixScenario(tb, 8, 64, 64))
	r.shared128 = countSeries(tb, matrixScenario(tb, 8, 128, 128))
	r.perDevice = float64(r.gpus16-r.gpus8) / 8
	r.perExclusive = float64(r.exclusive8-r.exclusive0) / 8
	r.perSharedPod = float64(r.shared128-r.shared64) / 64
	return r
}

// The matrix node is what it claims: with 8 GPUs, 64 pods and 1,000
// processes, each GPU has 64/8 = 8 owners and every process is attributed
// to a pod.
func TestMatrixScenario(t *testing.T) {
	e := newAttributedExporterWith(t, matrixScenario(t, 8, 1000, 64), defaultCollectors, func() time.Time { return testNow })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	snap := e.Snapshot(ctx)
	procs := 0
	for _, d := range snap.Devices {
		if len(d.Claims) != 8 {
			t.Errorf("GPU %s: %d owners, want 64 pods / 8 GPUs = 8", d.Index, len(d.Claims))
		}
		for pid, i := range d.ProcessOwner {
			if i < 0 {
				t.Errorf("GPU %s: process %d unattributed", d.Index, pid)
			}
			procs++
		}
	}
	if procs != 1000 {
		t.Errorf("%d processes attributed, want 1000", procs)
	}
	// 512 pods on one GPU: all of them its owners.
	snap = newAttributedExporterWith(t, matrixScenario(t, 1, 10, 512), defaultCollectors, func() time.Time { return testNow }).Snapshot(ctx)
	if len(snap.Devices) != 1 || len(snap.Devices[0].Claims) != 512 {
		t.Errorf("1 GPU with 512 pods: %d devices, owners %v", len(snap.Devices), len(snap.Devices[0].Claims))
	}
}
