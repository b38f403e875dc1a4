package nvidia

import "github.com/NVIDIA/go-nvml/pkg/nvml"

// Profiling readings come from GPM (GPU Performance Monitoring, Hopper and
// later): each is an average over the time between two samples, so the
// exporter takes one sample per scrape and compares it with the previous
// scrape's. The first scrape of a device has no readings.
const (
	ProfGraphicsActive = "graphics_active" // ratio; NVML's only utilization of a MIG instance
	ProfSMActive       = "sm_active"
	ProfSMOccupancy    = "sm_occupancy"
	ProfTensorActive   = "tensor_active"
	ProfDRAMActive     = "dram_active"
	ProfFP16Active     = "fp16_active"
	ProfFP32Active     = "fp32_active"
	ProfFP64Active     = "fp64_active"
	ProfPCIeTX         = "pcie_tx_bytes_per_second"
	ProfPCIeRX         = "pcie_rx_bytes_per_second"
	ProfNVLinkTX       = "nvlink_tx_bytes_per_second"
	ProfNVLinkRX       = "nvlink_rx_bytes_per_second"
)

var gpmMetrics = []struct {
	id    nvml.GpmMetricId
	name  string
	scale float64 // to ratios and bytes
}{
	{nvml.GPM_METRIC_GRAPHICS_UTIL, ProfGraphicsActive, 0.01},
	{nvml.GPM_METRIC_SM_UTIL, ProfSMActive, 0.01},
	{nvml.GPM_METRIC_SM_OCCUPANCY, ProfSMOccupancy, 0.01},
	{nvml.GPM_METRIC_ANY_TENSOR_UTIL, ProfTensorActive, 0.01},
	{nvml.GPM_METRIC_DRAM_BW_UTIL, ProfDRAMActive, 0.01},
	{nvml.GPM_METRIC_FP16_UTIL, ProfFP16Active, 0.01},
	{nvml.GPM_METRIC_FP32_UTIL, ProfFP32Active, 0.01},
	{nvml.GPM_METRIC_FP64_UTIL, ProfFP64Active, 0.01},
	{nvml.GPM_METRIC_PCIE_TX_PER_SEC, ProfPCIeTX, 1 << 20}, // MiB/s
	{nvml.GPM_METRIC_PCIE_RX_PER_SEC, ProfPCIeRX, 1 << 20},
	{nvml.GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC, ProfNVLinkTX, 1 << 20},
	{nvml.GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC, ProfNVLinkRX, 1 << 20},
}

// gpmState is what GPM keeps between scrapes for one GPU or MIG instance.
type gpmState struct {
	// prev is the last scrape's sample; pushed the last push's that moved
	// on past it (Client.ReadPush), nil when none has.
	prev, pushed nvml.GpmSample
}

func (s *gpmState) free() {
	if s.prev != nil {
		s.prev.Free()
		s.prev = nil
	}
	s.freePushed()
}

func (s *gpmState) freePushed() {
	if s.pushed != nil {
		s.pushed.Free()
		s.pushed = nil
	}
}

// gpmSupported asks once per GPU whether it has GPM; the answer is kept.
func (r *reader) gpmSupported(h nvml.Device) bool {
	if r.gpm == nil || !r.symbols.gpm {
		return false
	}
	if r.gpm.supported == nil {
		s, ret := h.GpmQueryDeviceSupport()
		ok := r.ok("GpmQueryDeviceSupport", ret) && s.IsSupportedDevice != 0
		if r.lost || (ret != nvml.SUCCESS && !benign(ret)) {
			return false // ask again next time: the failure may pass
		}
		r.gpm.supported = &ok
	}
	return *r.gpm.supported
}

// profile takes a GPM sample with get and, if an earlier one exists, sets the
// readings averaged between the two. The new sample replaces the previous one
// only when the read is committed: a read no scrape used leaves the next
// scrape's window where it was. A push that moves on (Client.ReadPush)
// keeps its sample apart, the base of the next such push.
func (r *reader) profile(d *Device, key string, get func(nvml.GpmSample) nvml.Return) {
	st := r.gpm.states[key]
	if st == nil {
		st = &gpmState{}
		r.gpm.states[key] = st
	}
	r.gpm.seen[key] = true
	sample, ret := r.lib.GpmSampleAlloc()
	if !r.ok("GpmSampleAlloc", ret) {
		return
	}
	if !r.ok("GpmSampleGet", get(sample)) {
		sample.Free()
		return
	}
	r.pending.commit = append(r.pending.commit, func() {
		st.free()
		st.prev = sample
	})
	r.pending.pushed = append(r.pending.pushed, func() {
		st.freePushed()
		st.pushed = sample
	})
	r.pending.discard = append(r.pending.discard, func() { sample.Free() })
	prev := st.prev
	if r.push && st.pushed != nil {
		prev = st.pushed
	}
	if prev == nil {
		return
	}
	// The request holds room for 333 metrics (several KiB): one is kept per
	// GPU and reused rather than allocated at every scrape.
	if r.gpm.request == nil {
		r.gpm.request = &nvml.GpmMetricsGetType{}
	}
	mg := r.gpm.request
	*mg = nvml.GpmMetricsGetType{NumMetrics: uint32(len(gpmMetrics)), Sample1: prev, Sample2: sample}
	defer func() { mg.Sample1, mg.Sample2 = nil, nil }()
	for i, m := range gpmMetrics {
		mg.Metrics[i].MetricId = uint32(m.id)
	}
	if !r.ok("GpmMetricsGet", r.lib.GpmMetricsGet(mg)) {
		return
	}
	for i, m := range gpmMetrics {
		got := mg.Metrics[i]
		if nvml.Return(got.NvmlReturn) != nvml.SUCCESS {
			continue // this metric is not available on this GPU model
		}
		if d.Profiling == nil {
			d.Profiling = map[string]float64{}
		}
		d.Profiling[m.name] = got.Value * m.scale
	}
}

// gpmDevice is the GPM state of one GPU and its MIG instances.
type gpmDevice struct {
	supported *bool
	request   *nvml.GpmMetricsGetType
	states    map[string]*gpmState // "" for the GPU, "gi:<id>" for a GPU instance
	seen      map[string]bool      // states used in this read
}

// pushedAny says a push has moved one of the device's GPM windows past the
// last scrape; false for a device never read (nil).
func (g *gpmDevice) pushedAny() bool {
	if g == nil {
		return false
	}
	for _, st := range g.states {
		if st.pushed != nil {
			return true
		}
	}
	return false
}

// sweep frees the samples of GPU instances that no longer exist, once a
// read is committed.
func (g *gpmDevice) sweep() {
	for key, st := range g.states {
		if !g.seen[key] {
			st.free()
			delete(g.states, key)
		}
	}
	clear(g.seen)
}

// freeAll releases every sample, when NVML is shut down.
func (g *gpmDevice) freeAll() {
	for _, st := range g.states {
		st.free()
	}
	clear(g.states)
}

func benign(ret nvml.Return) bool {
	return ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_NO_PERMISSION || ret == nvml.ERROR_FUNCTION_NOT_FOUND
}
