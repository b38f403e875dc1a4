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
	e := newTestExporter(b, demo.Default(), map[string]bool{"nvidia": true})
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
