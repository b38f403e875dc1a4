package collector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/xpu-exporter/xpu_exporter/engines"
	"github.com/xpu-exporter/xpu_exporter/vendors/nvidia"
)

func init() {
	registerCollector("dcgm", false,
		"Profiling metrics (SM, tensor, DRAM activity), MIG instance utilization and PCIe throughput from NVIDIA's dcgm-exporter, for GPUs without GPM (before Hopper), joined to our devices and owners", newDCGMCollector)
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
//
// For a device without GPM it also fills what NVML lacks or measures worse:
//   - xpu_utilization_ratio of a MIG instance, from DCGM_FI_PROF_GR_ENGINE_ACTIVE,
//     which dcgm-exporter documents as "Ratio of time the graphics engine is
//     active" (etc/dcp-metrics-included.csv), the same reading GPM gives as
//     GPM_METRIC_GRAPHICS_UTIL for instances of a GPU that has it. NVML has
//     no utilization of a MIG instance at all. The GPU in MIG mode as a whole
//     gets none: its instances' readings would count twice in a sum().
//     dcgm-exporter reports a MIG device per GPU instance (GPU_I_ID, the
//     NVML GPU instance ID); where several compute instances share one, its
//     readings are no one instance's own and are left out, as GPM's are.
//   - xpu_pcie_throughput_bytes_per_second, which it emits in place of the
//     NVML collector (see nvidiaCollector.peers): DCGM_FI_PROF_PCIE_{TX,RX}_BYTES
//     are "The rate of data transmitted [received] over the PCIe bus -
//     including both protocol headers and data payloads - in bytes per
//     second" over DCGM's sample period, where nvmlDeviceGetPcieThroughput
//     is "querying a byte counter over a 20ms interval" (nvml.h). DCGM's
//     wins; with --nvidia.extended-readings, which NVML's needs, NVML's 20 ms
//     sample fills a direction DCGM lacks, and every direction when
//     dcgm-exporter does not answer.
type dcgmCollector struct {
	client *http.Client
	logger *slog.Logger

	mu sync.Mutex
	// state is the kind of the last failure ("" when the last scrape
	// worked), so that a failure and a recovery are logged once each.
	state string
	// leftOut is the series the last answer had left out, sorted and
	// joined, so that a change of that set is logged once.
	leftOut string
}

var dcgmLeftOut = gauge("dcgm_series_left_out",
	"dcgm-exporter profiling series the last scrape left out: malformed (a ratio outside 0..1, a negative or non-finite value), stamped more than 5 minutes ago, or naming no GPU by a UUID label; named in one warning when the set changes.")

func newDCGMCollector(cfg Config) (Collector, error) {
	if *dcgmMaxBytes <= 0 {
		return nil, fmt.Errorf("--dcgm.max-bytes=%d: want more than 0", *dcgmMaxBytes)
	}
	if u, err := url.Parse(*dcgmURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--dcgm.url=%q is not an http(s) URL", redact(*dcgmURL))
	}
	return &dcgmCollector{client: &http.Client{}, logger: cfg.Logger}, nil
}

func (c *dcgmCollector) logChange(err error) {
	state := errorState(err)
	c.mu.Lock()
	defer c.mu.Unlock()
	if state == c.state {
		return
	}
	c.state = state
	if err != nil {
		c.logger.Warn("dcgm-exporter not scraped; no profiling metrics from it", "url", redact(*dcgmURL), "err", err)
	} else {
		c.logger.Info("dcgm-exporter scraped", "url", redact(*dcgmURL))
	}
}

// maxLeftOutNamed bounds the series one warning names: a dcgm-exporter
// whose every series is malformed must not write a line per series.
const maxLeftOutNamed = 5

// logLeftOut logs the series an answer left out when their set changes:
// the collector succeeds with the rest, so without this a GPU's profiling
// would go missing unseen.
func (c *dcgmCollector) logLeftOut(left []engines.DCGMLeftOut) {
	series := make([]string, len(left))
	for i, l := range left {
		series[i] = l.Series
	}
	state := strings.Join(series, "\n")
	c.mu.Lock()
	defer c.mu.Unlock()
	if state == c.leftOut {
		return
	}
	c.leftOut = state
	if len(left) == 0 {
		c.logger.Info("dcgm-exporter series all read again", "url", redact(*dcgmURL))
		return
	}
	named := make([]string, 0, min(len(left), maxLeftOutNamed))
	for _, l := range left[:min(len(left), maxLeftOutNamed)] {
		named = append(named, l.Series+": "+l.Why)
	}
	c.logger.Warn("dcgm-exporter series left out: malformed, stale or naming no GPU (xpu_dcgm_series_left_out)",
		"url", redact(*dcgmURL), "count", len(left), "series", strings.Join(named, "; "))
}

// dcgmMetrics are the families DCGM fills, by profiling key.
var dcgmMetrics = func() map[string]metric {
	m := map[string]metric{}
	for _, p := range profilingMetrics {
		m[p.key] = p.m
	}
	return m
}()

// namesAGPUOf says some reading names a GPU of snap, or snap has no NVIDIA
// GPU to name (a node whose NVML failed tells nothing of dcgm-exporter's).
func namesAGPUOf(readings []engines.DCGMReading, snap *Snapshot) bool {
	gpus := map[string]bool{}
	for _, d := range snap.Devices {
		if _, ok := d.vendorData.(*nvidia.Device); ok && d.UUID != "" && d.MIG == nil {
			gpus[strings.ToLower(d.UUID)] = true
		}
	}
	if len(gpus) == 0 {
		return true
	}
	return slices.ContainsFunc(readings, func(r engines.DCGMReading) bool { return gpus[strings.ToLower(r.UUID)] })
}

func (c *dcgmCollector) Update(ctx context.Context, snap *Snapshot, ch chan<- prometheus.Metric) error {
	type key struct{ uuid, gi string }
	byDevice := map[key]map[string]float64{}
	families, err := engines.Scrape(ctx, c.client, *dcgmURL, engines.Limits{MaxBytes: *dcgmMaxBytes, MaxSeries: 100000, Keep: engines.DCGMWanted})
	var readings []engines.DCGMReading
	var left []engines.DCGMLeftOut
	if err == nil {
		readings, left = engines.DCGMProfiling(families, time.Now())
		skipped := len(left)
		switch {
		case len(families) == 0:
			// An answer without a single profiling field is another
			// endpoint (a login page, node_exporter on the wrong port) or
			// a counters file without them: nothing to join, which a
			// success would hide.
			err = errors.New("no DCGM_FI_PROF_* field in the response: not dcgm-exporter, or its counters file lists none")
		case len(readings) == 0 && skipped > 0:
			// dcgm-exporter labels every series with its GPU's UUID;
			// profiling fields none of which can be joined are not its
			// output as documented.
			err = fmt.Errorf("none of the %d DCGM_FI_PROF_* series could be read: each names no GPU (a UUID label), or is malformed or stale (first: %s)", skipped, left[0].Series)
		case len(readings) > 0 && !namesAGPUOf(readings, snap):
			// Another node's dcgm-exporter (its pod's address, or a
			// Service in front of all of them): a good answer that joins
			// nothing here, which a success would hide.
			err = errors.New("it names none of this node's GPUs: another node's dcgm-exporter, or a Service in front of several?")
		}
	}
	c.logChange(err)
	e := newEmitter(ch)
	defer e.flush()
	if err != nil {
		err = fmt.Errorf("dcgm-exporter: %w", err)
		readings = nil
	} else {
		c.logLeftOut(left)
		e.emit(dcgmLeftOut, labels{}, float64(len(left)))
	}
	for _, r := range readings {
		// NVML prints UUIDs with lower-case hex, and so does
		// dcgm-exporter; a case-insensitive join costs nothing.
		k := key{strings.ToLower(r.UUID), r.GPUInstance}
		if byDevice[k] == nil {
			byDevice[k] = map[string]float64{}
		}
		byDevice[k][r.Field] = r.Value
	}
	devKey := func(d *Device) key {
		if d.MIG != nil {
			return key{strings.ToLower(d.MIG.ParentUUID), d.MIG.Instance}
		}
		return key{strings.ToLower(d.UUID), ""}
	}
	sharing := map[key]int{} // devices by GPU instance
	for _, d := range snap.Devices {
		sharing[devKey(d)]++
	}
	for _, d := range snap.Devices {
		nd, ok := d.vendorData.(*nvidia.Device)
		if !ok || !d.Up || nd.GPM {
			continue
		}
		k := devKey(d)
		got := byDevice[k]
		if sharing[k] > 1 {
			got = nil // compute instances sharing a GPU instance
		}
		l := deviceLabels(d)
		for dir, r := range map[string]struct {
			field string
			nvml  nvidia.Opt[float64]
		}{"tx": {nvidia.ProfPCIeTX, nd.PCIeTX}, "rx": {nvidia.ProfPCIeRX, nd.PCIeRX}} {
			if !*extendedReadings {
				r.nvml = nvidia.Opt[float64]{}
			}
			if v, ok := got[r.field]; ok {
				r.nvml = nvidia.Opt[float64]{Value: v, OK: true}
			}
			optional(e, pcieTraffic, l.with("direction", dir), r.nvml)
		}
		if v, ok := got[nvidia.ProfGraphicsActive]; ok && d.MIG != nil && d.Utilization == nil {
			e.emit(utilization, l, v)
		}
		for field, v := range got {
			switch field {
			case nvidia.ProfNVLinkTX:
				e.emit(nvlinkBytes, l.with("direction", "tx"), v)
			case nvidia.ProfNVLinkRX:
				e.emit(nvlinkBytes, l.with("direction", "rx"), v)
			default:
				if m, ok := dcgmMetrics[field]; ok {
					e.emit(m, l, v)
				}
			}
		}
	}
	return err
}
