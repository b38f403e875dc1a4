package engines

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// DCGMReading is one profiling reading that NVIDIA's dcgm-exporter exported
// for a GPU or a MIG instance. It lets GPUs without GPM (before Hopper) have
// the profiling families, from DCGM's own profiling fields.
type DCGMReading struct {
	UUID string
	// GPUInstance is the MIG GPU instance (GPU_I_ID), "" for a whole GPU.
	GPUInstance string
	// Field is the exporter's profiling key: graphics_active, sm_active,
	// sm_occupancy, tensor_active, dram_active, fp16_active, fp32_active,
	// fp64_active (ratios), pcie_tx_bytes_per_second, pcie_rx_bytes_per_second,
	// nvlink_tx_bytes_per_second, nvlink_rx_bytes_per_second.
	Field string
	Value float64
}

// dcgmFields maps DCGM profiling fields to profiling keys. The PROF fields
// are already ratios and byte rates.
var dcgmFields = map[string]string{
	"DCGM_FI_PROF_GR_ENGINE_ACTIVE":   "graphics_active",
	"DCGM_FI_PROF_SM_ACTIVE":          "sm_active",
	"DCGM_FI_PROF_SM_OCCUPANCY":       "sm_occupancy",
	"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": "tensor_active",
	"DCGM_FI_PROF_DRAM_ACTIVE":        "dram_active",
	"DCGM_FI_PROF_PIPE_FP16_ACTIVE":   "fp16_active",
	"DCGM_FI_PROF_PIPE_FP32_ACTIVE":   "fp32_active",
	"DCGM_FI_PROF_PIPE_FP64_ACTIVE":   "fp64_active",
	"DCGM_FI_PROF_PCIE_TX_BYTES":      "pcie_tx_bytes_per_second",
	"DCGM_FI_PROF_PCIE_RX_BYTES":      "pcie_rx_bytes_per_second",
	"DCGM_FI_PROF_NVLINK_TX_BYTES":    "nvlink_tx_bytes_per_second",
	"DCGM_FI_PROF_NVLINK_RX_BYTES":    "nvlink_rx_bytes_per_second",
}

// dcgmRates are the profiling keys that are byte rates; the others are
// ratios.
var dcgmRates = map[string]bool{
	"pcie_tx_bytes_per_second": true, "pcie_rx_bytes_per_second": true,
	"nvlink_tx_bytes_per_second": true, "nvlink_rx_bytes_per_second": true,
}

// DCGMLeftOut is a dcgm-exporter profiling series DCGMProfiling left out,
// and why.
type DCGMLeftOut struct {
	// Series is the series' name and labels, without its value: the same
	// series left out at two scrapes has the same Series.
	Series string
	Why    string
}

// DCGMProfiling reads the profiling fields out of a dcgm-exporter scrape
// made at now, and the series it leaves out, in the order of their names.
// A series that names no GPU (no UUID label) cannot be joined to a device;
// one whose value is not a finite non-negative number (at most
// 1 for a ratio: dcgm-exporter documents each as a "Ratio of" cycles or
// time, etc/dcp-metrics-included.csv) is malformed; one stamped more than
// maxSampleAge before now is stale, as for an engine (Prometheus would not
// return it for now). Each is left out, with why, rather than guessed at.
func DCGMProfiling(families map[string]*dto.MetricFamily, now time.Time) (readings []DCGMReading, left []DCGMLeftOut) {
	for name, field := range dcgmFields {
		mf := families[name]
		if mf == nil {
			continue
		}
		for _, m := range mf.GetMetric() {
			var uuid, gi string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "UUID":
					uuid = l.GetValue()
				case "GPU_I_ID":
					gi = l.GetValue()
				}
			}
			v, ok := plainValue(m)
			var why string
			switch {
			case uuid == "":
				why = "no UUID label names its GPU"
			case !ok:
				why = "not a gauge, counter or untyped sample"
			case math.IsNaN(v) || math.IsInf(v, 0) || v < 0:
				why = fmt.Sprintf("value %v is not a finite non-negative number", v)
			case v > 1 && !dcgmRates[field]:
				why = fmt.Sprintf("value %v is not a ratio 0..1", v)
			case m.TimestampMs != nil && now.Sub(time.UnixMilli(m.GetTimestampMs())) > maxSampleAge:
				why = fmt.Sprintf("stamped %s, more than %v ago", time.UnixMilli(m.GetTimestampMs()).UTC().Format(time.RFC3339), maxSampleAge)
			default:
				readings = append(readings, DCGMReading{UUID: uuid, GPUInstance: gi, Field: field, Value: v})
				continue
			}
			left = append(left, DCGMLeftOut{Series: seriesName(name, m), Why: why})
		}
	}
	// In a fixed order, which the families' map does not have: the
	// collector logs when the set changes.
	slices.SortFunc(left, func(a, b DCGMLeftOut) int { return strings.Compare(a.Series, b.Series) })
	return readings, left
}

// plainValue is the value of a gauge, counter or untyped sample.
func plainValue(m *dto.Metric) (float64, bool) {
	switch {
	case m.Gauge != nil:
		return m.GetGauge().GetValue(), true
	case m.Counter != nil:
		return m.GetCounter().GetValue(), true
	case m.Untyped != nil:
		return m.GetUntyped().GetValue(), true
	}
	return 0, false
}

// DCGMWanted says whether a dcgm-exporter family is one DCGMProfiling reads:
// scrapes of dcgm-exporter parse only those.
func DCGMWanted(name string) bool {
	_, ok := dcgmFields[name]
	return ok
}
