package collector

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xpu-exporter/xpu_exporter/attribution"
	"github.com/xpu-exporter/xpu_exporter/demo"
)

// BenchmarkScrape measures one full scrape of the 8-GPU demo node, from the
// NVML reads to the encoded text exposition.
func BenchmarkScrape(b *testing.B) {
	benchmarkScrape(b, newTestExporter(b, demo.Default(), map[string]bool{"nvidia": true}))
}

// BenchmarkScrapeGaudi measures one full scrape of the 8-device Gaudi node
// (fixtures/scenarios/gaudi.yaml), attributed: an hl-smi run (the test
// binary as the stand-in, started anew each time as hl-smi is), the process
// scan of the demo's procfs and sysfs, and the owners from its kubelet,
// which answers from a process of its own as in BenchmarkScrapeShared.
func BenchmarkScrapeGaudi(b *testing.B) {
	y, err := os.ReadFile(filepath.Join("..", "fixtures", "scenarios", "gaudi.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	s, err := demo.Parse(y)
	if err != nil {
		b.Fatal(err)
	}
	// Started before gaudiTable sets the environment that makes this test
	// binary the hl-smi stand-in, which the child would otherwise inherit.
	k := startChildKubelet(b, string(y))
	gaudiTable(b, s)
	cfg, sim := simulatedAttribution(b, s)
	k.attributeFrom(b, &cfg)
	e := newResolvedExporter(b, s, sim, attribution.New(cfg), func(c *Config) { c.HLSMIPath = selfPath(b) })
	benchmarkScrapeOf(b, e, benchApart{kubelet: k})
}

// BenchmarkScrapeAMD measures one full scrape of an 8-GPU MI300X node
// served through the demo's sysfs and fdinfo, attributed: eight parallel
// sysfs reads with their gpu_metrics tables, the DRM-node holder scan,
// sixteen fdinfo clients and the owners of their processes.
func BenchmarkScrapeAMD(b *testing.B) {
	s := unitScenario(b, "vendor: amd, model: AMD Instinct MI300X OAM, memory_total: 192GiB, power_limit_watts: 750")
	benchmarkScrape(b, newAttributedExporterFor(b, s))
}

// BenchmarkScrapeNVIDIAAttributed is BenchmarkScrapeAMD's node with H100s:
// the same sixteen processes under the same units, read through NVML, so
// that the AMD and Gaudi scrapes are set against an NVIDIA scrape that
// resolves owners too (BenchmarkScrape resolves none).
func BenchmarkScrapeNVIDIAAttributed(b *testing.B) {
	s := unitScenario(b, "vendor: nvidia, model: NVIDIA H100 80GB HBM3, memory_total: 80GiB, power_limit_watts: 700")
	benchmarkScrape(b, newAttributedExporterFor(b, s))
}

// unitScenario is an 8-device node of the given defaults, each device
// running two processes, one of a.service and one of b.service.
func unitScenario(b *testing.B, defaults string) *demo.Scenario {
	var y strings.Builder
	fmt.Fprintf(&y, "node: bench-units\ndefaults: {%s}\ndevices:\n", defaults)
	for i := range 8 {
		fmt.Fprintf(&y, "  - processes: [{pid: %d, unit: a.service, memory_used: 8GiB, utilization: 0.4}, {pid: %d, unit: b.service, memory_used: 4GiB, utilization: 0.2}]\n", 5000+2*i, 5001+2*i)
	}
	s, err := demo.Parse([]byte(y.String()))
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// benchmarkScrape reports, beside the wall time, the CPU time per scrape of
// this process (cpu-ns/op: the exporter, and the simulated sources it
// serves in-process) apart from that of its children (child-cpu-ns/op: the
// hl-smi stand-in), since the wall time of a Gaudi scrape is mostly the
// child's start-up.
func benchmarkScrape(b *testing.B, e *Exporter) { benchmarkScrapeOf(b, e, benchApart{}) }

// benchApart is what a benchmark times apart from the exporter's own work.
type benchApart struct {
	// kubelet is a child kubelet: its CPU is kubelet-cpu-ns/op.
	kubelet *childKubelet
	// sim times the simulated NVML's answers (sim-cpu-ns/op); own-cpu-ns/op
	// is then cpu-ns/op without them.
	sim *simMeter
}

func benchmarkScrapeOf(b *testing.B, e *Exporter, apart benchApart) {
	var body bytes.Buffer
	b.ReportAllocs()
	cpu0, child0, n := cpuTime(), childCPUTime(), 0
	var kubelet0 time.Duration
	var sim0, windows0 int64
	if apart.kubelet != nil {
		kubelet0 = apart.kubelet.cpu(b)
	}
	if apart.sim != nil {
		sim0, windows0 = apart.sim.ns.Load(), apart.sim.windows.Load()
	}
	for b.Loop() {
		n++
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		body.Reset()
		e.WriteText(ctx, &body, nil)
		cancel()
	}
	cpu := float64(cpuTime()-cpu0) / float64(n)
	b.ReportMetric(cpu, "cpu-ns/op")
	b.ReportMetric(float64(childCPUTime()-child0)/float64(n), "child-cpu-ns/op")
	if apart.kubelet != nil {
		b.ReportMetric(float64(apart.kubelet.cpu(b)-kubelet0)/float64(n), "kubelet-cpu-ns/op")
	}
	if apart.sim != nil {
		c := apart.sim.since(sim0, windows0, n)
		b.ReportMetric(c.sim, "sim-cpu-ns/op")
		b.ReportMetric(c.meter, "meter-cpu-ns/op")
		b.ReportMetric(cpu-c.sim-c.meter, "own-cpu-ns/op")
	}
}
