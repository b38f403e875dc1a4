package collector

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

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
// scan of the demo's procfs and sysfs, and the owners from its kubelet.
func BenchmarkScrapeGaudi(b *testing.B) {
	s := loadScenario(b, "gaudi")
	gaudiTable(b, s)
	benchmarkScrape(b, newAttributedExporterFor(b, s, func(c *Config) { c.HLSMIPath = selfPath(b) }))
}

func benchmarkScrape(b *testing.B, e *Exporter) {
	enc := expfmt.NewEncoder(io.Discard, expfmt.NewFormat(expfmt.TypeTextPlain))
	b.ReportAllocs()
	for b.Loop() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		reg := prometheus.NewRegistry()
		reg.MustRegister(e.Bind(ctx))
		mfs, err := reg.Gather()
		if err != nil {
			b.Fatal(err)
		}
		for _, mf := range mfs {
			if err := enc.Encode(mf); err != nil {
				b.Fatal(err)
			}
		}
		cancel()
	}
}
