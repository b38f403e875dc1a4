package demo

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"sync/atomic"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// The simulated driver implements nvml.Interface and nvml.Device itself,
// rather than through go-nvml's mock package, whose types record every call
// in slices that are never cleared: a demo exporter scraped for days grew
// without bound. Each type embeds the nvml interface it stands for, so a
// method the simulation does not answer panics like an unset mock function
// would, and the exporter marks that device down.
//
// It answers as NVML documents (nvml.h in go-nvml v0.13.3-0), including what
// is awkward for a reader; README.md ("Demo scenarios") has the table of
// behaviours with the header's sentences.

// NVML returns an NVML implementation that answers as the scenario's node
// would at the time now() returns. start is when the simulated node booted:
// counters (energy, ECC errors) grow from it.
func (s *Scenario) NVML(start time.Time, now func() time.Time) nvml.Interface {
	lib := &simLib{scenario: s, start: start, now: now, byScenario: make([]*gpu, len(s.Devices))}
	for i := range s.Devices {
		if s.Devices[i].Vendor != VendorNVIDIA {
			continue // served through the demo's hl-smi or sysfs
		}
		g := newGPU(&s.Devices[i], len(lib.devices), start, now, s.stats)
		g.loaded = start
		if !s.DriverLoaded.IsZero() {
			g.loaded = s.DriverLoaded
		}
		lib.devices = append(lib.devices, g)
		lib.byScenario[i] = g
	}
	return lib
}

type simLib struct {
	nvml.Interface
	scenario *Scenario
	devices  []*gpu
	// byScenario is each scenario device's GPU, nil for other vendors'.
	byScenario []*gpu
	start      time.Time
	now        func() time.Time
}

func (l *simLib) Init() nvml.Return {
	// A node without NVIDIA GPUs (a Gaudi node) has no NVIDIA driver.
	if l.scenario.NoDriver || len(l.devices) == 0 {
		return nvml.ERROR_LIBRARY_NOT_FOUND
	}
	return nvml.SUCCESS
}

func (l *simLib) Shutdown() nvml.Return                         { return nvml.SUCCESS }
func (l *simLib) Extensions() nvml.ExtendedInterface            { return simExtensions{} }
func (l *simLib) DeviceGetCount() (int, nvml.Return)            { return len(l.devices), nvml.SUCCESS }
func (l *simLib) GpmSampleAlloc() (nvml.GpmSample, nvml.Return) { return &gpmSample{}, nvml.SUCCESS }

func (l *simLib) EventSetCreate() (nvml.EventSet, nvml.Return) {
	// Events name devices by their place in the scenario, which only
	// NVIDIA GPUs may be (Parse checks).
	return newEventSet(l.scenario, l.byScenario, l.start), nvml.SUCCESS
}

func (l *simLib) DeviceGetHandleByIndex(i int) (nvml.Device, nvml.Return) {
	l.scenario.stats.handles.Add(1)
	if i < 0 || i >= len(l.devices) {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	return l.devices[i], nvml.SUCCESS
}

func (l *simLib) SystemGetDriverVersion() (string, nvml.Return) {
	return l.scenario.DriverVersion, nvml.SUCCESS
}

func (l *simLib) SystemGetCudaDriverVersion() (int, nvml.Return) {
	var major, minor int
	if _, err := fmt.Sscanf(l.scenario.CUDAVersion, "%d.%d", &major, &minor); err != nil {
		return 0, nvml.ERROR_UNKNOWN
	}
	return major*1000 + minor*10, nvml.SUCCESS
}

func (l *simLib) GpmMetricsGet(mg *nvml.GpmMetricsGetType) nvml.Return { return gpmMetricsGet(mg) }

// simExtensions says every entry point exists: the simulated driver is new.
type simExtensions struct{ nvml.ExtendedInterface }

func (simExtensions) LookupSymbol(string) error { return nil }

// simStats counts what the simulated driver was asked, for every NVML
// built from one scenario: they tell load tests how often the hardware
// would have been read, whatever the number of scrapers.
type simStats struct {
	handles atomic.Uint64 // DeviceGetHandleByIndex calls
	calls   atomic.Uint64 // gated readings, each costing call_latency
	// gen is the churn generation whose PIDs the driver reports.
	gen atomic.Uint64
	// gens is when each generation began, for the sample buffer: a period
	// the driver still holds was used by the processes of its own time.
	gens genHistory
}

// pid is a scenario process's PID in the current churn generation.
func (s *sim) pid(p uint32) uint32 { return churnPID(p, s.stats.gen.Load()) }

// pidAt is a scenario process's PID in the generation that ran at t.
func (s *sim) pidAt(p uint32, t time.Time) uint32 { return churnPID(p, s.stats.gens.at(t)) }

// DeviceReads is how many device handles the scenario's simulated drivers
// have handed out: the exporter takes one per device read (by a scrape or
// /devices) and one per device when it starts listening for events.
func (s *Scenario) DeviceReads() uint64 { return s.stats.handles.Load() }

// Calls is how many gated readings the scenario's simulated drivers have
// answered; each sleeps the device's call_latency.
func (s *Scenario) Calls() uint64 { return s.stats.calls.Load() }

// sim evaluates one device's values and faults.
type sim struct {
	spec  *DeviceSpec
	index int
	// start is when the simulation started, the origin of its timelines
	// (faults, ramps); loaded is when the driver was loaded, the origin
	// of its counters (Scenario.DriverLoaded).
	start, loaded time.Time
	now           func() time.Time
	stats         *simStats
}

// driverCounters are the metrics a driver counts since it was loaded
// (NVML's, amdgpu's energy and RAS counts, hl-smi's volatile ECC).
var driverCounters = map[string]bool{
	"energy": true, "pcie_replays": true, "ecc_corrected": true, "ecc_uncorrected": true,
	"dram_ecc_corrected": true, "dram_ecc_uncorrected": true, "xgmi_read": true, "xgmi_write": true,
	"retired_pages_single_bit": true, "retired_pages_double_bit": true,
	"nvlink_replay_errors": true, "nvlink_recovery_errors": true, "nvlink_crc_flit_errors": true, "nvlink_crc_data_errors": true,
}

// gate applies the device's modelled latency and faults to one call, named
// by its fault key.
func (s *sim) gate(key string) nvml.Return {
	s.stats.calls.Add(1)
	if s.spec.callLatency > 0 {
		time.Sleep(s.spec.callLatency)
	}
	return s.fault(key)
}

// lost says the device has fallen off the bus, as faults.lost and
// faults.lost_after make it.
func (s *sim) lost() bool {
	f := &s.spec.Faults
	return f.Lost || (f.lostAfter > 0 && s.now().Sub(s.start) >= f.lostAfter)
}

// fault is the answer the scenario's faults give a call named key, SUCCESS
// if none.
func (s *sim) fault(key string) nvml.Return {
	f := &s.spec.Faults
	switch {
	case s.lost():
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
	case slices.Contains(f.NoPermission, key):
		return nvml.ERROR_NO_PERMISSION
	}
	return nvml.SUCCESS
}

// origin is where the scenario's value of key starts: the driver's load for
// the driver's counters, the simulation's start for everything else.
func (s *Scenario) origin(key string, start time.Time) time.Time {
	if driverCounters[key] && !s.DriverLoaded.IsZero() {
		return s.DriverLoaded
	}
	return start
}

// valueAt evaluates a metric at t; a metric the scenario leaves out is not
// supported by the simulated GPU, as on a real model that lacks it.
func (s *sim) valueAt(key string, t time.Time) (float64, bool) {
	v, ok := s.spec.Metrics[key]
	if !ok {
		return 0, false
	}
	v.seed = uint64(hashString(key))<<8 | uint64(s.index)
	// Spread the devices over the period so that they do not move in lockstep.
	v.Phase += float64(s.index) * 0.137
	origin := s.start
	if driverCounters[key] {
		origin = s.loaded
	}
	return math.Max(0, v.At(origin, t)), true
}

func (s *sim) value(key string) (float64, nvml.Return) {
	if ret := s.gate(key); ret != nvml.SUCCESS {
		return 0, ret
	}
	v, ok := s.valueAt(key, s.now())
	if !ok {
		return 0, nvml.ERROR_NOT_SUPPORTED
	}
	return v, nvml.SUCCESS
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

// The driver's sample periods. nvml.h, nvmlUtilization_t: "Each sample
// period may be between 1 second and 1/6 second, depending on the product
// being queried", and its gpu field: "Percent of time over the past sample
// period during which one or more kernels was executing on the GPU".
// Period k ends at k×period since
// the epoch and is reported with that CPU timestamp in µs; the driver keeps
// the last sampleBuffer of them.

func (s *sim) period() time.Duration { return s.spec.samplePeriod }

// periodsSince lists the ends of the completed periods after lastSeen (µs)
// that the driver's buffer still holds, oldest first.
func (s *sim) periodsSince(lastSeen uint64) []time.Time {
	p := s.period()
	newest := s.now().Truncate(p)
	oldest := newest.Add(-time.Duration(s.spec.SampleBuffer-1) * p)
	if after := time.UnixMicro(int64(lastSeen)).Truncate(p).Add(p); lastSeen > 0 && after.After(oldest) {
		oldest = after
	}
	if oldest.After(newest) {
		return nil
	}
	out := make([]time.Time, 0, newest.Sub(oldest)/p+1)
	for t := oldest; !t.After(newest); t = t.Add(p) {
		if uint64(t.UnixMicro()) > lastSeen {
			out = append(out, t)
		}
	}
	return out
}

// processUtil is a process's SM utilization in the period ending at t: its
// utilization while busy, 0 in the idle part of its duty cycle, as it is
// in the middle of the period.
func (s *sim) processUtil(p *ProcessSpec, t time.Time) float64 {
	if p.Utilization == nil || !p.busyAt(t.Add(-s.period()/2).Sub(s.start)) {
		return 0
	}
	return math.Min(math.Max(0, p.Utilization.At(s.start, t)), 1)
}

// deviceUtil is the device's utilization in the period ending at t: as busy
// as its processes together (capped at 1) when the scenario gives their
// utilization, else its utilization metric.
func (s *sim) deviceUtil(t time.Time) (float64, bool) {
	sum, driven := 0.0, false
	for i := range s.spec.Processes {
		p := &s.spec.Processes[i]
		if p.Utilization != nil {
			driven = true
			sum += s.processUtil(p, t)
		}
	}
	if driven {
		return math.Min(sum, 1), true
	}
	v, ok := s.valueAt("utilization", t)
	return math.Min(v, 1), ok
}

// linkCounterKiB is one link's data counter: the device's mean NVLink rate
// (key, bytes/s over all links) since start, split evenly between links, so
// that it only grows.
func (s *sim) linkCounterKiB(key string, link int) (uint64, bool) {
	v, ok := s.spec.Metrics[key]
	if !ok || s.spec.NVLinks == nil || *s.spec.NVLinks == 0 || s.gate("nvlink") != nvml.SUCCESS ||
		slices.Contains(s.spec.Faults.FailingLinks, link) {
		return 0, false
	}
	bytes := v.Mean() * s.now().Sub(s.loaded).Seconds() / float64(*s.spec.NVLinks)
	return uint64(math.Max(0, bytes) / 1024), true
}

func (s *sim) memory() (nvml.Memory_v2, nvml.Return) {
	if ret := s.gate("memory"); ret != nvml.SUCCESS {
		return nvml.Memory_v2{}, ret
	}
	total := uint64(s.spec.MemoryTotal.At(s.start, s.now()))
	used, ret := s.u64("memory_used", 1)
	if ret != nvml.SUCCESS {
		return nvml.Memory_v2{}, ret
	}
	reserved, _ := s.u64("memory_reserved", 1)
	used = min(used, total)
	reserved = min(reserved, total-used)
	return nvml.Memory_v2{Total: total, Used: used, Reserved: reserved, Free: total - used - reserved}, nvml.SUCCESS
}

// processes answers one of NVML's three process lists: the processes whose
// spec names that list (compute by default). A fault on "processes" fails
// the three, one on "processes_<list>" that list alone, as a driver may
// refuse one list (no_permission: NO_PERMISSION) and answer the others.
func (s *sim) processes(procs []ProcessSpec, list string, gi, ci uint32) ([]nvml.ProcessInfo, nvml.Return) {
	if ret := s.gate("processes"); ret != nvml.SUCCESS {
		return nil, ret
	}
	if ret := s.fault("processes_" + list); ret != nvml.SUCCESS {
		return nil, ret
	}
	out := make([]nvml.ProcessInfo, 0, len(procs))
	for _, p := range procs {
		if !p.inList(list) {
			continue
		}
		mem := uint64(math.MaxUint64) // NVML_VALUE_NOT_AVAILABLE
		if p.MemoryUsed != nil {
			mem = uint64(p.MemoryUsed.At(s.start, s.now()))
		}
		out = append(out, nvml.ProcessInfo{Pid: s.pid(p.PID), UsedGpuMemory: mem, GpuInstanceId: gi, ComputeInstanceId: ci})
	}
	return out, nvml.SUCCESS
}

// scramble reorders a result the way NVML promises nothing about: the
// reader must not depend on the order of samples.
func scramble[T any](xs []T) {
	slices.Reverse(xs)
	for i := 0; i+2 < len(xs); i += 3 {
		xs[i], xs[i+2] = xs[i+2], xs[i]
	}
}

// gpu is one simulated whole GPU.
type gpu struct {
	nvml.Device
	*sim
	migs []*migDevice // by handle index, nil for an empty slot
	// utilCalls counts GetProcessUtilization calls, for
	// DeviceSpec.InsufficientSize.
	utilCalls atomic.Uint64
}

func newGPU(spec *DeviceSpec, index int, start time.Time, now func() time.Time, stats *simStats) *gpu {
	g := &gpu{sim: &sim{spec: spec, index: index, start: start, now: now, stats: stats}}
	if n := len(spec.MIG); n > 0 {
		g.migs = make([]*migDevice, spec.MIG[n-1].slot+1)
	}
	for j := range spec.MIG {
		g.migs[spec.MIG[j].slot] = &migDevice{sim: g.sim, spec: &spec.MIG[j]}
	}
	return g
}

func (g *gpu) str(v string) (string, nvml.Return) { return v, g.gate("identity") }

func (g *gpu) GetUUID() (string, nvml.Return) { return g.str(g.spec.UUID) }
func (g *gpu) GetName() (string, nvml.Return) { return g.str(g.spec.Model) }
func (g *gpu) GetSerial() (string, nvml.Return) {
	// nvml.h, nvmlDeviceGetSerial: "For all products with an inforom",
	// which GeForce boards lack: the one identity call they refuse.
	v, ret := g.str(g.spec.Serial)
	if ret == nvml.SUCCESS {
		ret = g.fault("serial")
	}
	return v, ret
}
func (g *gpu) GetVbiosVersion() (string, nvml.Return) { return g.str(g.spec.VBIOSVersion) }
func (g *gpu) GetMinorNumber() (int, nvml.Return)     { return g.spec.minor, g.gate("identity") }

func (g *gpu) GetPciInfo() (nvml.PciInfo, nvml.Return) {
	var p nvml.PciInfo
	for i := 0; i < len(g.spec.PCIBusID) && i < len(p.BusId)-1; i++ {
		p.BusId[i] = int8(g.spec.PCIBusID[i])
	}
	return p, g.gate("identity")
}

// migged answers a whole-device reading: nvml.h, "On MIG-enabled GPUs,
// querying device utilization rates is not currently supported."
func (g *gpu) migged(key string) (uint32, nvml.Return) {
	if g.spec.inMIGMode() {
		return 0, nvml.ERROR_NOT_SUPPORTED
	}
	return g.u32(key, 100)
}

// GetUtilizationRates gives the last completed sample period.
func (g *gpu) GetUtilizationRates() (nvml.Utilization, nvml.Return) {
	if g.spec.inMIGMode() {
		return nvml.Utilization{}, nvml.ERROR_NOT_SUPPORTED
	}
	if ret := g.gate("utilization"); ret != nvml.SUCCESS {
		return nvml.Utilization{}, ret
	}
	u, ok := g.deviceUtil(g.now().Truncate(g.period()))
	if !ok {
		return nvml.Utilization{}, nvml.ERROR_NOT_SUPPORTED
	}
	m, ret := g.migged("memory_utilization")
	return nvml.Utilization{Gpu: uint32(math.Round(u * 100)), Memory: m}, ret
}

// GetSamples answers NVML_GPU_UTILIZATION_SAMPLES only: "Return only samples
// with timestamp greater than lastSeenTimeStamp", NOT_FOUND "if sample
// entries are not found", in no promised order, and not on a GPU in MIG mode.
func (g *gpu) GetSamples(typ nvml.SamplingType, lastSeen uint64) (nvml.ValueType, []nvml.Sample, nvml.Return) {
	if typ != nvml.GPU_UTILIZATION_SAMPLES || g.spec.inMIGMode() {
		return 0, nil, nvml.ERROR_NOT_SUPPORTED
	}
	if ret := g.gate("samples"); ret != nvml.SUCCESS {
		return 0, nil, ret
	}
	periods := g.periodsSince(lastSeen)
	out := make([]nvml.Sample, 0, len(periods))
	for _, t := range periods {
		u, ok := g.deviceUtil(t)
		if !ok {
			return 0, nil, nvml.ERROR_NOT_SUPPORTED
		}
		var s nvml.Sample
		s.TimeStamp = uint64(t.UnixMicro())
		binary.LittleEndian.PutUint64(s.SampleValue[:], uint64(math.Round(u*100)))
		out = append(out, s)
	}
	if len(out) == 0 {
		return 0, nil, nvml.ERROR_NOT_FOUND
	}
	scramble(out)
	return nvml.VALUE_TYPE_UNSIGNED_INT, out, nvml.SUCCESS
}

// GetProcessUtilization: "One utilization sample structure is returned per
// process running, that had some non-zero utilization during the last sample
// period. It includes the CPU timestamp at which the samples were recorded.
// [...] If no valid sample entries are found since the lastSeenTimeStamp,
// NVML_ERROR_NOT_FOUND is returned." With process_samples: buffered (the
// default) the driver returns such entries for every period since lastSeen
// that its buffer holds, several per PID; with last_period only the newest
// period's. duplicate_samples returns a second, smaller entry for the same
// PID and period, as some drivers have been seen to; with latest, each
// process's newest entry since lastSeen alone, as tools have seen drivers
// answer (go-nvml issue #51: one entry per PID, timestamps seconds apart);
// garbage_samples adds
// zero-filled entries and an impossible one (DeviceSpec.GarbageSamples).
func (g *gpu) GetProcessUtilization(lastSeen uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
	if g.spec.inMIGMode() {
		return nil, nvml.ERROR_NOT_SUPPORTED // "On MIG-enabled GPUs, querying process utilization is not currently supported."
	}
	if ret := g.gate("processes"); ret != nvml.SUCCESS {
		return nil, ret
	}
	if ret := g.gate("process_utilization"); ret != nvml.SUCCESS {
		return nil, ret
	}
	if g.spec.InsufficientSize && g.utilCalls.Add(1)%2 == 1 {
		// go-nvml's answer then: an empty slice of the first call's size.
		return []nvml.ProcessUtilizationSample{}, nvml.ERROR_INSUFFICIENT_SIZE
	}
	periods := g.periodsSince(lastSeen)
	if g.spec.ProcessSamples == "last_period" && len(periods) > 1 {
		periods = periods[len(periods)-1:]
	}
	// Sized as the driver's buffer would be, so that benchmarks count the
	// exporter's allocations rather than this simulation's growing slice.
	out := make([]nvml.ProcessUtilizationSample, 0, len(periods)*len(g.spec.Processes))
	for _, t := range periods {
		for i := range g.spec.Processes {
			p := &g.spec.Processes[i]
			sm := uint32(math.Round(g.processUtil(p, t) * 100))
			if sm == 0 {
				continue
			}
			// The process of the generation that ran in the middle of the
			// period, as processUtil judges busy: after a churn, the
			// buffered periods before it still name the old PIDs.
			pid := g.pidAt(p.PID, t.Add(-g.period()/2))
			e := nvml.ProcessUtilizationSample{Pid: pid, TimeStamp: uint64(t.UnixMicro()), SmUtil: sm, MemUtil: sm / 2}
			if g.spec.ProcessSamples == "latest" {
				// Periods come oldest first: a newer one replaces the
				// process's entry.
				if j := slices.IndexFunc(out, func(o nvml.ProcessUtilizationSample) bool { return o.Pid == pid }); j >= 0 {
					out[j] = e
					continue
				}
			}
			out = append(out, e)
			if g.spec.DuplicateSamples {
				e.SmUtil, e.MemUtil = sm/2, sm/4
				out = append(out, e)
			}
		}
	}
	if g.spec.GarbageSamples && len(periods) > 0 {
		newest := uint64(periods[len(periods)-1].UnixMicro())
		out = append(out, make([]nvml.ProcessUtilizationSample, 3)...) // PID 0, timestamp 0
		out = append(out, nvml.ProcessUtilizationSample{Pid: garbagePID, TimeStamp: newest, SmUtil: 37100, EncUtil: 50583, DecUtil: 50624})
	}
	if len(out) == 0 {
		return nil, nvml.ERROR_NOT_FOUND
	}
	scramble(out)
	return out, nvml.SUCCESS
}

// garbagePID is the zombie PID of garbage_samples: in no process list,
// above any churned PID.
const garbagePID = 4_190_000

func (g *gpu) GetEncoderUtilization() (uint32, uint32, nvml.Return) {
	v, ret := g.migged("encoder_utilization")
	return v, 167000, ret
}

func (g *gpu) GetDecoderUtilization() (uint32, uint32, nvml.Return) {
	v, ret := g.migged("decoder_utilization")
	return v, 167000, ret
}

// GetMemoryInfo (v1) counts the driver's reserved memory as used.
func (g *gpu) GetMemoryInfo() (nvml.Memory, nvml.Return) {
	m, ret := g.memory()
	return nvml.Memory{Total: m.Total, Used: m.Used + m.Reserved, Free: m.Free}, ret
}

func (g *gpu) GetMemoryInfo_v2() (nvml.Memory_v2, nvml.Return) { return g.memory() }

func (g *gpu) GetTemperature(nvml.TemperatureSensors) (uint32, nvml.Return) {
	return g.u32("temperature", 1)
}

// GetTemperatureThreshold answers the limits every simulated GPU reports; a
// GPU without a temperature reading has no limits either.
func (g *gpu) GetTemperatureThreshold(t nvml.TemperatureThresholds) (uint32, nvml.Return) {
	if _, ret := g.value("temperature"); ret != nvml.SUCCESS {
		return 0, ret
	}
	limit, ok := demoTempLimits[t]
	if !ok {
		return 0, nvml.ERROR_NOT_SUPPORTED
	}
	return limit, nvml.SUCCESS
}

// demoTempLimits are the limits every simulated GPU reports (°C):
// illustrative values of the order a data-centre GPU reports, with the core
// slowing down a few degrees before it shuts off.
var demoTempLimits = map[nvml.TemperatureThresholds]uint32{
	nvml.TEMPERATURE_THRESHOLD_SHUTDOWN: 92,
	nvml.TEMPERATURE_THRESHOLD_SLOWDOWN: 89,
	nvml.TEMPERATURE_THRESHOLD_GPU_MAX:  87,
	nvml.TEMPERATURE_THRESHOLD_MEM_MAX:  95,
}

func (g *gpu) GetFieldValues(values []nvml.FieldValue) nvml.Return {
	for i := range values {
		v := &values[i]
		v.NvmlReturn = uint32(nvml.ERROR_NOT_SUPPORTED)
		switch v.FieldId {
		case nvml.FI_DEV_MEMORY_TEMP:
			t, ret := g.u32("memory_temperature", 1)
			v.NvmlReturn, v.ValueType = uint32(ret), uint32(nvml.VALUE_TYPE_UNSIGNED_INT)
			binary.LittleEndian.PutUint64(v.Value[:], uint64(t))
		case nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_TX, nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_RX:
			key := "nvlink_tx"
			if v.FieldId == nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_RX {
				key = "nvlink_rx"
			}
			if kib, ok := g.linkCounterKiB(key, int(v.ScopeId)); ok {
				v.NvmlReturn, v.ValueType = uint32(nvml.SUCCESS), uint32(nvml.VALUE_TYPE_UNSIGNED_LONG_LONG)
				binary.LittleEndian.PutUint64(v.Value[:], kib)
			}
		}
	}
	return g.gate("identity")
}

func (g *gpu) GetFanSpeed() (uint32, nvml.Return)               { return g.u32("fan_speed", 100) }
func (g *gpu) GetPowerUsage() (uint32, nvml.Return)             { return g.u32("power", 1000) }
func (g *gpu) GetTotalEnergyConsumption() (uint64, nvml.Return) { return g.u64("energy", 1000) }
func (g *gpu) GetPcieReplayCounter() (int, nvml.Return)         { return g.int("pcie_replays") }
func (g *gpu) GetCurrPcieLinkGeneration() (int, nvml.Return)    { return g.int("pcie_generation") }
func (g *gpu) GetCurrPcieLinkWidth() (int, nvml.Return)         { return g.int("pcie_width") }
func (g *gpu) GetMaxPcieLinkGeneration() (int, nvml.Return)     { return g.int("pcie_max_generation") }
func (g *gpu) GetMaxPcieLinkWidth() (int, nvml.Return)          { return g.int("pcie_max_width") }
func (g *gpu) GetMaxMigDeviceCount() (int, nvml.Return)         { return maxMIGDevices, g.gate("mig") }
func (g *gpu) RegisterEvents(mask uint64, set nvml.EventSet) nvml.Return {
	if ret := g.gate("events"); ret != nvml.SUCCESS {
		return ret
	}
	if es, ok := set.(*eventSet); ok {
		es.register(g, mask)
	}
	return nvml.SUCCESS
}
func (g *gpu) GetRetiredPagesPendingStatus() (nvml.EnableState, nvml.Return) {
	return nvml.FEATURE_DISABLED, g.gate("retired_pages_pending")
}

func (g *gpu) GetPerformanceState() (nvml.Pstates, nvml.Return) {
	v, ret := g.int("performance_state")
	return nvml.Pstates(v), ret
}

func (g *gpu) GetEnforcedPowerLimit() (uint32, nvml.Return) {
	if ret := g.gate("power_limit"); ret != nvml.SUCCESS {
		return 0, ret
	}
	if g.spec.PowerLimitWatts == nil {
		return 0, nvml.ERROR_NOT_SUPPORTED
	}
	return uint32(g.spec.PowerLimitWatts.At(g.start, g.now()) * 1000), nvml.SUCCESS
}

var clockKey = map[nvml.ClockType]string{nvml.CLOCK_GRAPHICS: "graphics", nvml.CLOCK_SM: "sm", nvml.CLOCK_MEM: "memory"}

func (g *gpu) GetClockInfo(t nvml.ClockType) (uint32, nvml.Return) {
	return g.u32("clock_"+clockKey[t], 1)
}

func (g *gpu) GetMaxClockInfo(t nvml.ClockType) (uint32, nvml.Return) {
	if ret := g.gate("max_clocks"); ret != nvml.SUCCESS {
		return 0, ret
	}
	v, ok := g.spec.MaxClocksMHz[clockKey[t]]
	if !ok {
		return 0, nvml.ERROR_NOT_SUPPORTED
	}
	return uint32(v.At(g.start, g.now())), nvml.SUCCESS
}

func (g *gpu) throttleMask() (uint64, nvml.Return) {
	var mask uint64
	for _, name := range g.spec.ThrottleReasons {
		mask |= 1 << slices.Index(throttleNames, name)
	}
	return mask, g.gate("throttle_reasons")
}

func (g *gpu) supportedThrottle() (uint64, nvml.Return) {
	if ret := g.gate("throttle_reasons"); ret != nvml.SUCCESS {
		return 0, ret
	}
	return nvml.ClocksThrottleReasonAll, g.gate("supported_throttle_reasons")
}

func (g *gpu) GetCurrentClocksThrottleReasons() (uint64, nvml.Return)   { return g.throttleMask() }
func (g *gpu) GetCurrentClocksEventReasons() (uint64, nvml.Return)      { return g.throttleMask() }
func (g *gpu) GetSupportedClocksThrottleReasons() (uint64, nvml.Return) { return g.supportedThrottle() }
func (g *gpu) GetSupportedClocksEventReasons() (uint64, nvml.Return)    { return g.supportedThrottle() }

func (g *gpu) GetPcieThroughput(c nvml.PcieUtilCounter) (uint32, nvml.Return) {
	if c == nvml.PCIE_UTIL_TX_BYTES {
		return g.u32("pcie_tx", 1.0/1024)
	}
	return g.u32("pcie_rx", 1.0/1024)
}

func (g *gpu) GetTotalEccErrors(t nvml.MemoryErrorType, c nvml.EccCounterType) (uint64, nvml.Return) {
	key := "ecc_corrected"
	if t == nvml.MEMORY_ERROR_TYPE_UNCORRECTED {
		key = "ecc_uncorrected"
	}
	v, ret := g.u64(key, 1)
	if c == nvml.AGGREGATE_ECC {
		v += 3 * v // the lifetime count includes earlier driver loads
	}
	return v, ret
}

func (g *gpu) GetRetiredPages(c nvml.PageRetirementCause) ([]uint64, nvml.Return) {
	key := "retired_pages_single_bit"
	if c == nvml.PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR {
		key = "retired_pages_double_bit"
	}
	n, ret := g.int(key)
	pages := make([]uint64, min(n, 4096))
	for i := range pages {
		pages[i] = uint64(0x1000 * (i + 1))
	}
	return pages, ret
}

func (g *gpu) GetRemappedRows() (int, int, bool, bool, nvml.Return) {
	if ret := g.gate("remapped_rows"); ret != nvml.SUCCESS {
		return 0, 0, false, false, ret
	}
	c, ret := g.int("remapped_rows_correctable")
	if ret != nvml.SUCCESS {
		return 0, 0, false, false, ret
	}
	u, ret := g.int("remapped_rows_uncorrectable")
	return c, u, false, false, ret
}

func (g *gpu) GetMigMode() (int, int, nvml.Return) {
	mode := nvml.DEVICE_MIG_DISABLE
	if g.spec.inMIGMode() {
		mode = nvml.DEVICE_MIG_ENABLE
	}
	return mode, mode, g.gate("mig")
}

func (g *gpu) GetComputeRunningProcesses() ([]nvml.ProcessInfo, nvml.Return) {
	return g.processes(g.spec.Processes, "compute", 0, 0)
}

func (g *gpu) GetMPSComputeRunningProcesses() ([]nvml.ProcessInfo, nvml.Return) {
	return g.processes(g.spec.Processes, "mps", 0, 0)
}

func (g *gpu) GetGraphicsRunningProcesses() ([]nvml.ProcessInfo, nvml.Return) {
	return g.processes(g.spec.Processes, "graphics", 0, 0)
}

func (g *gpu) GetSupportedEventTypes() (uint64, nvml.Return) {
	if ret := g.gate("events"); ret != nvml.SUCCESS {
		return 0, ret
	}
	return nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError | nvml.EventTypeSingleBitEccError | nvml.EventTypePState, nvml.SUCCESS
}

// GetNvLinkState fails for the links the scenario names in
// faults.failing_links, and for no other.
func (g *gpu) GetNvLinkState(link int) (nvml.EnableState, nvml.Return) {
	if ret := g.gate("nvlink"); ret != nvml.SUCCESS {
		return 0, ret
	}
	if g.spec.NVLinks == nil || link >= *g.spec.NVLinks {
		if link == 0 {
			return 0, nvml.ERROR_NOT_SUPPORTED
		}
		return 0, nvml.ERROR_INVALID_ARGUMENT
	}
	if slices.Contains(g.spec.Faults.FailingLinks, link) {
		return 0, nvml.ERROR_UNKNOWN
	}
	if slices.Contains(g.spec.NVLinksDown, link) {
		return nvml.FEATURE_DISABLED, nvml.SUCCESS
	}
	return nvml.FEATURE_ENABLED, nvml.SUCCESS
}

var nvlinkKeys = map[nvml.NvLinkErrorCounter]string{
	nvml.NVLINK_ERROR_DL_REPLAY: "nvlink_replay_errors", nvml.NVLINK_ERROR_DL_RECOVERY: "nvlink_recovery_errors",
	nvml.NVLINK_ERROR_DL_CRC_FLIT: "nvlink_crc_flit_errors", nvml.NVLINK_ERROR_DL_CRC_DATA: "nvlink_crc_data_errors",
}

func (g *gpu) GetNvLinkErrorCounter(link int, c nvml.NvLinkErrorCounter) (uint64, nvml.Return) {
	if ret := g.gate("nvlink"); ret != nvml.SUCCESS {
		return 0, ret
	}
	if slices.Contains(g.spec.Faults.FailingLinks, link) {
		return 0, nvml.ERROR_UNKNOWN
	}
	return g.u64(nvlinkKeys[c], 1)
}

func (g *gpu) GpmQueryDeviceSupport() (nvml.GpmSupport, nvml.Return) {
	profiled := false
	for _, k := range ProfilingKeys {
		_, ok := g.spec.Metrics[k]
		for _, m := range g.spec.MIG {
			_, inMIG := m.Metrics[k]
			ok = ok || inMIG
		}
		profiled = profiled || ok
	}
	var support nvml.GpmSupport
	if profiled {
		support.IsSupportedDevice = 1
	}
	return support, g.gate("gpm")
}

func (g *gpu) GpmSampleGet(sample nvml.GpmSample) nvml.Return {
	if ret := g.gate("gpm"); ret != nvml.SUCCESS {
		return ret
	}
	sample.(*gpmSample).take(g.profiler(g.spec.Metrics), g.now())
	return nvml.SUCCESS
}

// GpmMigSampleGet samples a GPU instance: its compute instances share it.
func (g *gpu) GpmMigSampleGet(gi int, sample nvml.GpmSample) nvml.Return {
	if ret := g.gate("gpm"); ret != nvml.SUCCESS {
		return ret
	}
	for _, m := range g.spec.MIG {
		if m.GPUInstance == gi {
			sample.(*gpmSample).take(g.profiler(m.Metrics), g.now())
			return nvml.SUCCESS
		}
	}
	return nvml.ERROR_NOT_FOUND
}

// GetMigDeviceHandleByIndex hands out MIG devices at their slots, in the
// order the scenario lists them, which need not follow their GPU instance
// IDs: nvml.h promises no order. An empty slot is NVML_ERROR_NOT_FOUND, "if
// no valid MIG device was found at index".
func (g *gpu) GetMigDeviceHandleByIndex(i int) (nvml.Device, nvml.Return) {
	if ret := g.gate("mig"); ret != nvml.SUCCESS {
		return nil, ret
	}
	if i < 0 || i >= len(g.migs) || g.migs[i] == nil {
		return nil, nvml.ERROR_NOT_FOUND
	}
	return g.migs[i], nvml.SUCCESS
}

func (g *gpu) GetGpuInstanceProfileInfo(profile int) (nvml.GpuInstanceProfileInfo, nvml.Return) {
	if profile != nvml.GPU_INSTANCE_PROFILE_7_SLICE {
		return nvml.GpuInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
	}
	return nvml.GpuInstanceProfileInfo{Id: uint32(profile), SliceCount: 7}, g.gate("mig")
}

// migDevice is one MIG device: a compute instance inside a GPU instance.
type migDevice struct {
	nvml.Device
	*sim
	spec *MIGSpec
}

func (m *migDevice) GetUUID() (string, nvml.Return) { return m.spec.UUID, m.gate("mig") }
func (m *migDevice) GetName() (string, nvml.Return) {
	return m.sim.spec.Model + " MIG " + m.spec.Profile, m.gate("mig")
}
func (m *migDevice) GetGpuInstanceId() (int, nvml.Return) { return m.spec.GPUInstance, m.gate("mig") }
func (m *migDevice) GetComputeInstanceId() (int, nvml.Return) {
	return m.spec.ComputeInstance, m.gate("mig")
}

func (m *migDevice) GetAttributes() (nvml.DeviceAttributes, nvml.Return) {
	if ret := m.gate("mig_attributes"); ret != nvml.SUCCESS {
		return nvml.DeviceAttributes{}, ret
	}
	ci, gi, gb := m.spec.slices()
	return nvml.DeviceAttributes{
		GpuInstanceSliceCount: uint32(gi), ComputeInstanceSliceCount: uint32(ci),
		MemorySizeMB: uint64(gb) << 10, MultiprocessorCount: uint32(ci * 16),
	}, m.gate("mig")
}

func (m *migDevice) memory() (nvml.Memory_v2, nvml.Return) {
	if ret := m.gate("memory"); ret != nvml.SUCCESS {
		return nvml.Memory_v2{}, ret
	}
	_, _, gb := m.spec.slices()
	total := uint64(gb) << 30
	// Without memory_used, the instance uses what its processes hold, as
	// their entries in the process lists give it.
	var used uint64
	if m.spec.MemoryUsed != nil {
		used = min(uint64(m.spec.MemoryUsed.At(m.start, m.now())), total)
	} else {
		for _, p := range m.spec.Processes {
			if p.MemoryUsed != nil {
				used += uint64(p.MemoryUsed.At(m.start, m.now()))
			}
		}
	}
	return nvml.Memory_v2{Total: total, Used: used, Free: total - used}, nvml.SUCCESS
}

func (m *migDevice) GetMemoryInfo_v2() (nvml.Memory_v2, nvml.Return) { return m.memory() }
func (m *migDevice) GetMemoryInfo() (nvml.Memory, nvml.Return) {
	v, ret := m.memory()
	return nvml.Memory{Total: v.Total, Used: v.Used, Free: v.Free}, ret
}

func (m *migDevice) list(kind string) ([]nvml.ProcessInfo, nvml.Return) {
	return m.processes(m.spec.Processes, kind, uint32(m.spec.GPUInstance), uint32(m.spec.ComputeInstance))
}

func (m *migDevice) GetComputeRunningProcesses() ([]nvml.ProcessInfo, nvml.Return) {
	return m.list("compute")
}
func (m *migDevice) GetMPSComputeRunningProcesses() ([]nvml.ProcessInfo, nvml.Return) {
	return m.list("mps")
}
func (m *migDevice) GetGraphicsRunningProcesses() ([]nvml.ProcessInfo, nvml.Return) {
	return m.list("graphics")
}

// GetProcessUtilization: nvml.h, "On MIG-enabled GPUs, querying process
// utilization is not currently supported."
func (m *migDevice) GetProcessUtilization(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
	return nil, nvml.ERROR_NOT_SUPPORTED
}

// gpmSample is a simulated GPM sample: it remembers whose readings it took
// and when, and GpmMetricsGet evaluates them at the later sample's time.
type gpmSample struct {
	nvml.GpmSample
	profile func(key string, at time.Time) (float64, bool)
	at      time.Time
}

func (g *gpmSample) Free() nvml.Return { return nvml.SUCCESS }

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
