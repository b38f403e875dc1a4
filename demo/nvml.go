package demo

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// NVML returns an NVML implementation that answers as the scenario's node
// would at the time now() returns. start is when the simulated node booted:
// counters (energy, ECC errors) grow from it.
func (s *Scenario) NVML(start time.Time, now func() time.Time) nvml.Interface {
	lib := &mock.Interface{}
	ext := &mock.ExtendedInterface{LookupSymbolFunc: func(string) error { return nil }}
	var devices []nvml.Device
	for i := range s.Devices {
		devices = append(devices, newGPU(&s.Devices[i], i, start, now))
	}
	lib.ExtensionsFunc = func() nvml.ExtendedInterface { return ext }
	lib.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) { return newEventSet(s, devices, start), nvml.SUCCESS }
	lib.GpmSampleAllocFunc = func() (nvml.GpmSample, nvml.Return) { return newGPMSample(), nvml.SUCCESS }
	lib.GpmMetricsGetFunc = gpmMetricsGet
	lib.InitFunc = func() nvml.Return {
		if s.NoDriver {
			return nvml.ERROR_LIBRARY_NOT_FOUND
		}
		return nvml.SUCCESS
	}
	lib.ShutdownFunc = func() nvml.Return { return nvml.SUCCESS }
	lib.DeviceGetCountFunc = func() (int, nvml.Return) { return len(devices), nvml.SUCCESS }
	lib.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if i < 0 || i >= len(devices) {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		return devices[i], nvml.SUCCESS
	}
	lib.SystemGetDriverVersionFunc = func() (string, nvml.Return) { return s.DriverVersion, nvml.SUCCESS }
	lib.SystemGetCudaDriverVersionFunc = func() (int, nvml.Return) {
		var major, minor int
		if _, err := fmt.Sscanf(s.CUDAVersion, "%d.%d", &major, &minor); err != nil {
			return 0, nvml.ERROR_UNKNOWN
		}
		return major*1000 + minor*10, nvml.SUCCESS
	}
	return lib
}

// sim evaluates one device's values and faults.
type sim struct {
	spec  *DeviceSpec
	index int
	start time.Time
	now   func() time.Time
}

// gate applies the device's faults to one call, named by its fault key.
func (s *sim) gate(key string) nvml.Return {
	f := &s.spec.Faults
	switch {
	case f.Lost:
		return nvml.ERROR_GPU_IS_LOST
	case slices.Contains(f.Panic, key):
		panic("demo: injected panic in " + key)
	case slices.Contains(f.Hang, key):
		time.Sleep(f.hangFor)
	}
	switch {
	case slices.Contains(f.Unsupported, key):
		return nvml.ERROR_NOT_SUPPORTED
	case slices.Contains(f.Errors, key):
		return nvml.ERROR_UNKNOWN
	}
	return nvml.SUCCESS
}

// value evaluates a metric; a metric the scenario leaves out is not
// supported by the simulated GPU, as on a real model that lacks it.
func (s *sim) value(key string) (float64, nvml.Return) {
	if ret := s.gate(key); ret != nvml.SUCCESS {
		return 0, ret
	}
	v, ok := s.spec.Metrics[key]
	if !ok {
		return 0, nvml.ERROR_NOT_SUPPORTED
	}
	v.seed = uint64(hashString(key))<<8 | uint64(s.index)
	// Spread the devices over the period so that they do not move in lockstep.
	v.Phase += float64(s.index) * 0.137
	return math.Max(0, v.At(s.start, s.now())), nvml.SUCCESS
}

func (s *sim) u32(key string, scale float64) (uint32, nvml.Return) {
	v, ret := s.value(key)
	return uint32(math.Min(math.Round(v*scale), math.MaxUint32)), ret
}

func (s *sim) u64(key string, scale float64) (uint64, nvml.Return) {
	v, ret := s.value(key)
	return uint64(math.Round(v * scale)), ret
}

func (s *sim) int(key string) (int, nvml.Return) {
	v, ret := s.value(key)
	return int(math.Round(v)), ret
}

// linkCounterKiB is one link's data counter: the device's mean NVLink rate
// (key, bytes/s over all links) since start, split evenly between links, so
// that it only grows.
func (s *sim) linkCounterKiB(key string) (uint64, bool) {
	v, ok := s.spec.Metrics[key]
	if !ok || s.spec.NVLinks == nil || *s.spec.NVLinks == 0 || s.gate("nvlink") != nvml.SUCCESS {
		return 0, false
	}
	bytes := v.Mean() * s.now().Sub(s.start).Seconds() / float64(*s.spec.NVLinks)
	return uint64(math.Max(0, bytes) / 1024), true
}

func (s *sim) memoryTotal() uint64 {
	return uint64(s.spec.MemoryTotal.At(s.start, s.now()))
}

func newGPU(spec *DeviceSpec, index int, start time.Time, now func() time.Time) nvml.Device {
	s := &sim{spec: spec, index: index, start: start, now: now}
	d := &mock.Device{}
	str := func(key, v string) func() (string, nvml.Return) {
		return func() (string, nvml.Return) { return v, s.gate(key) }
	}
	d.GetUUIDFunc = str("identity", spec.UUID)
	d.GetNameFunc = str("identity", spec.Model)
	d.GetSerialFunc = str("identity", spec.Serial)
	d.GetVbiosVersionFunc = str("identity", spec.VBIOSVersion)
	d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
		var p nvml.PciInfo
		for i := 0; i < len(spec.PCIBusID) && i < len(p.BusId)-1; i++ {
			p.BusId[i] = int8(spec.PCIBusID[i])
		}
		return p, s.gate("identity")
	}
	// NVML cannot measure a GPU in MIG mode as a whole.
	migged := func(key string) (uint32, nvml.Return) {
		if len(spec.MIG) > 0 {
			return 0, nvml.ERROR_NOT_SUPPORTED
		}
		return s.u32(key, 100)
	}
	d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
		g, ret := migged("utilization")
		if ret != nvml.SUCCESS {
			return nvml.Utilization{}, ret
		}
		m, ret := migged("memory_utilization")
		return nvml.Utilization{Gpu: g, Memory: m}, ret
	}
	d.GetEncoderUtilizationFunc = func() (uint32, uint32, nvml.Return) {
		v, ret := migged("encoder_utilization")
		return v, 167000, ret
	}
	d.GetDecoderUtilizationFunc = func() (uint32, uint32, nvml.Return) {
		v, ret := migged("decoder_utilization")
		return v, 167000, ret
	}
	d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
		m, ret := s.memory()
		return nvml.Memory{Total: m.Total, Used: m.Used + m.Reserved, Free: m.Free}, ret
	}
	d.GetMemoryInfo_v2Func = s.memory
	d.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return s.u32("temperature", 1) }
	d.GetFieldValuesFunc = func(values []nvml.FieldValue) nvml.Return {
		for i := range values {
			values[i].NvmlReturn = uint32(nvml.ERROR_NOT_SUPPORTED)
			switch values[i].FieldId {
			case nvml.FI_DEV_MEMORY_TEMP:
				v, ret := s.u32("memory_temperature", 1)
				values[i].NvmlReturn, values[i].ValueType = uint32(ret), uint32(nvml.VALUE_TYPE_UNSIGNED_INT)
				binary.LittleEndian.PutUint64(values[i].Value[:], uint64(v))
			case nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_TX, nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_RX:
				key := "nvlink_tx"
				if values[i].FieldId == nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_RX {
					key = "nvlink_rx"
				}
				if kib, ok := s.linkCounterKiB(key); ok {
					values[i].NvmlReturn, values[i].ValueType = uint32(nvml.SUCCESS), uint32(nvml.VALUE_TYPE_UNSIGNED_LONG_LONG)
					binary.LittleEndian.PutUint64(values[i].Value[:], kib)
				}
			}
		}
		return s.gate("identity")
	}
	d.GetFanSpeedFunc = func() (uint32, nvml.Return) { return s.u32("fan_speed", 100) }
	d.GetPowerUsageFunc = func() (uint32, nvml.Return) { return s.u32("power", 1000) }
	d.GetTotalEnergyConsumptionFunc = func() (uint64, nvml.Return) { return s.u64("energy", 1000) }
	d.GetEnforcedPowerLimitFunc = func() (uint32, nvml.Return) {
		if ret := s.gate("power_limit"); ret != nvml.SUCCESS {
			return 0, ret
		}
		if spec.PowerLimitWatts == nil {
			return 0, nvml.ERROR_NOT_SUPPORTED
		}
		return uint32(spec.PowerLimitWatts.At(start, now()) * 1000), nvml.SUCCESS
	}
	d.GetPerformanceStateFunc = func() (nvml.Pstates, nvml.Return) {
		v, ret := s.int("performance_state")
		return nvml.Pstates(v), ret
	}
	clockKey := map[nvml.ClockType]string{nvml.CLOCK_GRAPHICS: "graphics", nvml.CLOCK_SM: "sm", nvml.CLOCK_MEM: "memory"}
	d.GetClockInfoFunc = func(t nvml.ClockType) (uint32, nvml.Return) { return s.u32("clock_"+clockKey[t], 1) }
	d.GetMaxClockInfoFunc = func(t nvml.ClockType) (uint32, nvml.Return) {
		if ret := s.gate("max_clocks"); ret != nvml.SUCCESS {
			return 0, ret
		}
		v, ok := spec.MaxClocksMHz[clockKey[t]]
		if !ok {
			return 0, nvml.ERROR_NOT_SUPPORTED
		}
		return uint32(v.At(start, now())), nvml.SUCCESS
	}
	throttle := func() (uint64, nvml.Return) {
		var mask uint64
		for _, name := range spec.ThrottleReasons {
			mask |= 1 << slices.Index(throttleNames, name)
		}
		return mask, s.gate("throttle_reasons")
	}
	d.GetCurrentClocksThrottleReasonsFunc = throttle
	d.GetCurrentClocksEventReasonsFunc = throttle
	d.GetSupportedClocksThrottleReasonsFunc = func() (uint64, nvml.Return) {
		return nvml.ClocksThrottleReasonAll, s.gate("throttle_reasons")
	}
	d.GetSupportedClocksEventReasonsFunc = d.GetSupportedClocksThrottleReasonsFunc
	d.GetPcieThroughputFunc = func(c nvml.PcieUtilCounter) (uint32, nvml.Return) {
		if c == nvml.PCIE_UTIL_TX_BYTES {
			return s.u32("pcie_tx", 1.0/1024)
		}
		return s.u32("pcie_rx", 1.0/1024)
	}
	d.GetPcieReplayCounterFunc = func() (int, nvml.Return) { return s.int("pcie_replays") }
	d.GetCurrPcieLinkGenerationFunc = func() (int, nvml.Return) { return s.int("pcie_generation") }
	d.GetCurrPcieLinkWidthFunc = func() (int, nvml.Return) { return s.int("pcie_width") }
	d.GetMaxPcieLinkGenerationFunc = func() (int, nvml.Return) { return s.int("pcie_max_generation") }
	d.GetMaxPcieLinkWidthFunc = func() (int, nvml.Return) { return s.int("pcie_max_width") }
	d.GetTotalEccErrorsFunc = func(t nvml.MemoryErrorType, c nvml.EccCounterType) (uint64, nvml.Return) {
		key := "ecc_corrected"
		if t == nvml.MEMORY_ERROR_TYPE_UNCORRECTED {
			key = "ecc_uncorrected"
		}
		v, ret := s.u64(key, 1)
		if c == nvml.AGGREGATE_ECC {
			v += 3 * v // the lifetime count includes earlier driver loads
		}
		return v, ret
	}
	d.GetRetiredPagesFunc = func(c nvml.PageRetirementCause) ([]uint64, nvml.Return) {
		key := "retired_pages_single_bit"
		if c == nvml.PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR {
			key = "retired_pages_double_bit"
		}
		n, ret := s.int(key)
		pages := make([]uint64, min(n, 4096))
		for i := range pages {
			pages[i] = uint64(0x1000 * (i + 1))
		}
		return pages, ret
	}
	d.GetRetiredPagesPendingStatusFunc = func() (nvml.EnableState, nvml.Return) {
		return nvml.FEATURE_DISABLED, s.gate("retired_pages_pending")
	}
	d.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) {
		if ret := s.gate("remapped_rows"); ret != nvml.SUCCESS {
			return 0, 0, false, false, ret
		}
		c, ret := s.int("remapped_rows_correctable")
		if ret != nvml.SUCCESS {
			return 0, 0, false, false, ret
		}
		u, ret := s.int("remapped_rows_uncorrectable")
		return c, u, false, false, ret
	}
	d.GetMigModeFunc = func() (int, int, nvml.Return) {
		mode := nvml.DEVICE_MIG_DISABLE
		if len(spec.MIG) > 0 {
			mode = nvml.DEVICE_MIG_ENABLE
		}
		return mode, mode, s.gate("mig")
	}
	d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		return s.processes(spec.Processes, 0, 0)
	}
	d.GetProcessUtilizationFunc = func(lastSeen uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
		if ret := s.gate("processes"); ret != nvml.SUCCESS {
			return nil, ret
		}
		// One sample per process at the current time, as NVML gives one per
		// sampling period.
		ts := uint64(now().UnixMicro())
		if ts <= lastSeen {
			return nil, nvml.ERROR_NOT_FOUND
		}
		var out []nvml.ProcessUtilizationSample
		for _, p := range spec.Processes {
			if p.Utilization == nil {
				continue
			}
			sm := uint32(math.Round(math.Max(0, p.Utilization.At(start, now())) * 100))
			out = append(out, nvml.ProcessUtilizationSample{Pid: p.PID, TimeStamp: ts, SmUtil: sm, MemUtil: sm / 2})
		}
		if len(out) == 0 {
			return nil, nvml.ERROR_NOT_FOUND
		}
		return out, nvml.SUCCESS
	}
	d.GetSupportedEventTypesFunc = func() (uint64, nvml.Return) {
		if ret := s.gate("events"); ret != nvml.SUCCESS {
			return 0, ret
		}
		return nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError | nvml.EventTypeSingleBitEccError | nvml.EventTypePState, nvml.SUCCESS
	}
	d.RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return s.gate("events") }
	d.GetNvLinkStateFunc = func(link int) (nvml.EnableState, nvml.Return) {
		if ret := s.gate("nvlink"); ret != nvml.SUCCESS {
			return 0, ret
		}
		if spec.NVLinks == nil || link >= *spec.NVLinks {
			if link == 0 {
				return 0, nvml.ERROR_NOT_SUPPORTED
			}
			return 0, nvml.ERROR_INVALID_ARGUMENT
		}
		if slices.Contains(spec.NVLinksDown, link) {
			return nvml.FEATURE_DISABLED, nvml.SUCCESS
		}
		return nvml.FEATURE_ENABLED, nvml.SUCCESS
	}
	nvlinkKeys := map[nvml.NvLinkErrorCounter]string{
		nvml.NVLINK_ERROR_DL_REPLAY: "nvlink_replay_errors", nvml.NVLINK_ERROR_DL_RECOVERY: "nvlink_recovery_errors",
		nvml.NVLINK_ERROR_DL_CRC_FLIT: "nvlink_crc_flit_errors", nvml.NVLINK_ERROR_DL_CRC_DATA: "nvlink_crc_data_errors",
	}
	d.GetNvLinkErrorCounterFunc = func(link int, c nvml.NvLinkErrorCounter) (uint64, nvml.Return) {
		if ret := s.gate("nvlink"); ret != nvml.SUCCESS {
			return 0, ret
		}
		return s.u64(nvlinkKeys[c], 1)
	}
	gpmSupported := func() (nvml.GpmSupport, nvml.Return) {
		profiled := false
		for _, k := range ProfilingKeys {
			_, ok := spec.Metrics[k]
			for _, m := range spec.MIG {
				_, inMIG := m.Metrics[k]
				ok = ok || inMIG
			}
			profiled = profiled || ok
		}
		var support nvml.GpmSupport
		if profiled {
			support.IsSupportedDevice = 1
		}
		return support, s.gate("gpm")
	}
	d.GpmQueryDeviceSupportFunc = gpmSupported
	d.GpmSampleGetFunc = func(sample nvml.GpmSample) nvml.Return {
		if ret := s.gate("gpm"); ret != nvml.SUCCESS {
			return ret
		}
		sample.(*gpmSample).take(s.profiler(spec.Metrics), now())
		return nvml.SUCCESS
	}
	d.GpmMigSampleGetFunc = func(gi int, sample nvml.GpmSample) nvml.Return {
		if ret := s.gate("gpm"); ret != nvml.SUCCESS {
			return ret
		}
		for _, m := range spec.MIG {
			if m.GPUInstance == gi {
				sample.(*gpmSample).take(s.profiler(m.Metrics), now())
				return nvml.SUCCESS
			}
		}
		return nvml.ERROR_NOT_FOUND
	}
	migs := make([]nvml.Device, len(spec.MIG))
	for j := range spec.MIG {
		migs[j] = s.newMIG(&spec.MIG[j])
	}
	d.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return 7, s.gate("mig") }
	d.GetMigDeviceHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if ret := s.gate("mig"); ret != nvml.SUCCESS {
			return nil, ret
		}
		if i < 0 || i >= len(migs) {
			return nil, nvml.ERROR_NOT_FOUND
		}
		return migs[i], nvml.SUCCESS
	}
	d.GetGpuInstanceProfileInfoFunc = func(profile int) (nvml.GpuInstanceProfileInfo, nvml.Return) {
		if profile != nvml.GPU_INSTANCE_PROFILE_7_SLICE {
			return nvml.GpuInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
		}
		return nvml.GpuInstanceProfileInfo{Id: uint32(profile), SliceCount: 7}, s.gate("mig")
	}
	return d
}

func (s *sim) memory() (nvml.Memory_v2, nvml.Return) {
	if ret := s.gate("memory"); ret != nvml.SUCCESS {
		return nvml.Memory_v2{}, ret
	}
	total := s.memoryTotal()
	used, ret := s.u64("memory_used", 1)
	if ret != nvml.SUCCESS {
		return nvml.Memory_v2{}, ret
	}
	reserved, _ := s.u64("memory_reserved", 1)
	used = min(used, total)
	reserved = min(reserved, total-used)
	return nvml.Memory_v2{Total: total, Used: used, Reserved: reserved, Free: total - used - reserved}, nvml.SUCCESS
}

func (s *sim) processes(procs []ProcessSpec, gi, ci uint32) ([]nvml.ProcessInfo, nvml.Return) {
	if ret := s.gate("processes"); ret != nvml.SUCCESS {
		return nil, ret
	}
	out := make([]nvml.ProcessInfo, 0, len(procs))
	for _, p := range procs {
		mem := uint64(math.MaxUint64) // NVML_VALUE_NOT_AVAILABLE
		if p.MemoryUsed != nil {
			mem = uint64(p.MemoryUsed.At(s.start, s.now()))
		}
		out = append(out, nvml.ProcessInfo{Pid: p.PID, UsedGpuMemory: mem, GpuInstanceId: gi, ComputeInstanceId: ci})
	}
	return out, nvml.SUCCESS
}

func (s *sim) newMIG(m *MIGSpec) nvml.Device {
	sliceCount, gb, _ := parseProfile(m.Profile)
	d := &mock.Device{}
	d.GetUUIDFunc = func() (string, nvml.Return) { return m.UUID, s.gate("mig") }
	d.GetNameFunc = func() (string, nvml.Return) { return s.spec.Model + " MIG " + m.Profile, s.gate("mig") }
	d.GetGpuInstanceIdFunc = func() (int, nvml.Return) { return m.GPUInstance, s.gate("mig") }
	d.GetComputeInstanceIdFunc = func() (int, nvml.Return) { return m.ComputeInstance, s.gate("mig") }
	total := uint64(gb) << 30
	d.GetAttributesFunc = func() (nvml.DeviceAttributes, nvml.Return) {
		return nvml.DeviceAttributes{
			GpuInstanceSliceCount: uint32(sliceCount), ComputeInstanceSliceCount: uint32(sliceCount),
			MemorySizeMB: total >> 20, MultiprocessorCount: uint32(sliceCount * 16),
		}, s.gate("mig")
	}
	memory := func() (nvml.Memory_v2, nvml.Return) {
		if ret := s.gate("memory"); ret != nvml.SUCCESS {
			return nvml.Memory_v2{}, ret
		}
		var used uint64
		if m.MemoryUsed != nil {
			used = min(uint64(m.MemoryUsed.At(s.start, s.now())), total)
		}
		return nvml.Memory_v2{Total: total, Used: used, Free: total - used}, nvml.SUCCESS
	}
	d.GetMemoryInfo_v2Func = memory
	d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
		v, ret := memory()
		return nvml.Memory{Total: v.Total, Used: v.Used, Free: v.Free}, ret
	}
	d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		return s.processes(m.Processes, uint32(m.GPUInstance), uint32(m.ComputeInstance))
	}
	// NVML does not sample per-process utilization inside MIG instances.
	d.GetProcessUtilizationFunc = func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
		return nil, nvml.ERROR_NOT_SUPPORTED
	}
	return d
}

// gpmSample is a simulated GPM sample: it remembers whose readings it took
// and when, and GpmMetricsGet evaluates them at the later sample's time.
type gpmSample struct {
	mock.GpmSample
	profile func(key string, at time.Time) (float64, bool)
	at      time.Time
}

func newGPMSample() *gpmSample {
	g := &gpmSample{}
	g.FreeFunc = func() nvml.Return { return nvml.SUCCESS }
	return g
}

func (g *gpmSample) take(profile func(string, time.Time) (float64, bool), at time.Time) {
	g.profile, g.at = profile, at
}

// profiler evaluates profiling metrics of one device or MIG instance; PCIe
// comes from the device's pcie_tx and pcie_rx.
func (s *sim) profiler(metrics map[string]Value) func(string, time.Time) (float64, bool) {
	return func(key string, at time.Time) (float64, bool) {
		v, ok := metrics[key]
		if !ok && (key == "pcie_tx" || key == "pcie_rx") {
			v, ok = s.spec.Metrics[key]
		}
		if !ok {
			return 0, false
		}
		v.Phase += float64(s.index) * 0.137
		return math.Max(0, v.At(s.start, at)), true
	}
}

var gpmKeys = map[nvml.GpmMetricId]struct {
	key   string
	scale float64 // to NVML's units: percent, MiB/s
}{
	nvml.GPM_METRIC_GRAPHICS_UTIL:           {"graphics_active", 100},
	nvml.GPM_METRIC_SM_UTIL:                 {"sm_active", 100},
	nvml.GPM_METRIC_SM_OCCUPANCY:            {"sm_occupancy", 100},
	nvml.GPM_METRIC_ANY_TENSOR_UTIL:         {"tensor_active", 100},
	nvml.GPM_METRIC_DRAM_BW_UTIL:            {"dram_active", 100},
	nvml.GPM_METRIC_FP16_UTIL:               {"fp16_active", 100},
	nvml.GPM_METRIC_FP32_UTIL:               {"fp32_active", 100},
	nvml.GPM_METRIC_FP64_UTIL:               {"fp64_active", 100},
	nvml.GPM_METRIC_PCIE_TX_PER_SEC:         {"pcie_tx", 1.0 / (1 << 20)},
	nvml.GPM_METRIC_PCIE_RX_PER_SEC:         {"pcie_rx", 1.0 / (1 << 20)},
	nvml.GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC: {"nvlink_tx", 1.0 / (1 << 20)},
	nvml.GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC: {"nvlink_rx", 1.0 / (1 << 20)},
}

func gpmMetricsGet(mg *nvml.GpmMetricsGetType) nvml.Return {
	s1, ok1 := mg.Sample1.(*gpmSample)
	s2, ok2 := mg.Sample2.(*gpmSample)
	if !ok1 || !ok2 || s2.profile == nil || !s2.at.After(s1.at) {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	for i := range mg.NumMetrics {
		m := &mg.Metrics[i]
		k, known := gpmKeys[nvml.GpmMetricId(m.MetricId)]
		v, ok := s2.profile(k.key, s2.at)
		if !known || !ok {
			m.NvmlReturn = uint32(nvml.ERROR_NOT_SUPPORTED)
			continue
		}
		m.NvmlReturn, m.Value = uint32(nvml.SUCCESS), v*k.scale
	}
	return nvml.SUCCESS
}
