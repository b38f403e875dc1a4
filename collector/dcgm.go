package collector

import (
	"context"
	"fmt"
	"net/http"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/xpu-exporter/xpu_exporter/engines"
	"github.com/xpu-exporter/xpu_exporter/vendors/nvidia"
)

func init() {
	registerCollector("dcgm", false,
		"Profiling metrics (SM, tensor, DRAM activity) from NVIDIA's dcgm-exporter, for GPUs without GPM (before Hopper), joined to our devices and owners", newDCGMCollector)
}

var (
	dcgmURL = kingpin.Flag("dcgm.url",
		"dcgm-exporter metrics endpoint read at each scrape by --collector.dcgm.").Default("http://localhost:9400/metrics").String()
	dcgmMaxBytes = kingpin.Flag("dcgm.max-bytes",
		"Largest dcgm-exporter response read; a larger one fails the dcgm collector.").Default("16777216").Int64()
)

// dcgmCollector re-emits dcgm-exporter's profiling fields under the
// exporter's profiling names, with our device and owner labels. A device
// with GPM gets its profiling from GPM alone, so no series is emitted twice.
type dcgmCollector struct {
	client *http.Client
}

func newDCGMCollector(Config) (Collector, error) {
	return &dcgmCollector{client: &http.Client{}}, nil
}

// dcgmMetrics are the families DCGM fills, by profiling key.
var dcgmMetrics = func() map[string]metric {
	m := map[string]metric{}
	for _, p := range profilingMetrics {
		m[p.key] = p.m
	}
	return m
}()

func (c *dcgmCollector) Update(ctx context.Context, snap *Snapshot, ch chan<- prometheus.Metric) error {
	families, err := engines.Scrape(ctx, c.client, *dcgmURL, *dcgmMaxBytes)
	if err != nil {
		return fmt.Errorf("dcgm-exporter: %w", err)
	}
	readings, _ := engines.DCGMProfiling(families)
	type key struct{ uuid, gi string }
	byDevice := map[key][]engines.DCGMReading{}
	for _, r := range readings {
		byDevice[key{r.UUID, r.GPUInstance}] = append(byDevice[key{r.UUID, r.GPUInstance}], r)
	}
	e := emitter{ch: ch}
	for _, d := range snap.Devices {
		nd, ok := d.vendorData.(*nvidia.Device)
		if !ok || !d.Up || nd.GPM {
			continue
		}
		k := key{d.UUID, ""}
		if d.MIG != nil {
			k = key{d.MIG.ParentUUID, d.MIG.Instance}
		}
		l := deviceLabels(d)
		for _, r := range byDevice[k] {
			switch r.Field {
			case nvidia.ProfNVLinkTX, nvidia.ProfNVLinkRX:
				dir := "tx"
				if r.Field == nvidia.ProfNVLinkRX {
					dir = "rx"
				}
				e.emit(nvlinkBytes, l.with("direction", dir), r.Value)
			default:
				if m, ok := dcgmMetrics[r.Field]; ok {
					e.emit(m, l, r.Value)
				}
			}
		}
	}
	return nil
}
