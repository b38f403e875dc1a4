package nvidia

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/xpu-exporter/xpu_exporter/vendors/reading"
)

// reader reads one device. It collects unexpected errors and stops at the
// first GPU_IS_LOST, because every later call would fail the same way.
type reader struct {
	lib     nvml.Interface
	gpm     *gpmDevice
	symbols symbols
	// lastSeen is the newest device utilization sample (µs) of the previous
	// committed read: this read's window starts after it (see window.go).
	lastSeen uint64
	// periods are this read's window, nil when the driver gave no device
	// samples for it.
	periods []period
	// prev is the last committed read's window, reported again when no
	// driver period has ended since (two reads within one period); win is
	// this read's, kept once it is committed.
	prev, win *window
	// push says that the read starts from the pushes' window (ReadPush).
	push bool
	// identified is told the device's identity once it is read, before
	// the rest: a later call that hangs must not leave the device unnamed
	// (its owners are found by its UUID).
	identified func(Identity)
	lost       bool
	errs       []CallError
	// pending advances the device's windows to this read, or undoes what
	// it took, once the client knows whether a scrape used it.
	pending *pending
}

// pending is what a read changes in the device's window state: applied
// (commit) when a scrape used the read, to the pushes' window alone
// (pushed) when only a push that moves on did, undone (discard) otherwise,
// so that /devices, event owner look-ups, pushes and a read nobody waited
// for never shorten a scrape's window.
type pending struct{ commit, pushed, discard []func() }

func (p *pending) apply(m move) {
	fns := p.discard
	switch m {
	case moveScrape:
		fns = p.commit
	case movePush:
		fns = p.pushed
	}
	for _, f := range fns {
		f()
	}
}

// buffered says the driver is known to keep per-process entries per
// period (window.go): a committed read showed it.
func (r *reader) buffered() bool { return r.prev != nil && r.prev.buffered }

// ok reports whether ret carries a reading, and files the failure otherwise.
func (r *reader) ok(call string, ret nvml.Return) bool {
	switch ret {
	case nvml.SUCCESS:
		return true
	case nvml.ERROR_GPU_IS_LOST:
		r.lost = true
		return false
	default:
		// The GPU model, driver or our privileges may lack a reading: omit it.
		if !benign(ret) {
			r.errs = append(r.errs, CallError{Call: call, Return: ret})
		}
		return false
	}
}

// readGPU fills d step by step, so that a panic part-way leaves what was
// read so far (the identity comes first).
func (r *reader) readGPU(h nvml.Device, d *Device) {
	r.identity(d, h)
	if r.identified != nil && d.UUID != "" {
		r.identified(d.Identity)
	}
	steps := []func(*Device, nvml.Device){
		r.utilization, r.memory, r.thermal, r.power, r.clocks,
		r.throttle, r.pcie, r.ecc, r.retirement, r.migMode, r.processes,
		r.nvlink, r.profiling,
	}
	for _, step := range steps {
		if r.lost {
			break
		}
		step(d, h)
	}
	*d = r.finish(*d)
}

func (r *reader) finish(d Device) Device {
	d.Errors = r.errs
	if r.lost {
		return Device{Identity: d.Identity, MIG: d.MIG, Down: "GPU is lost", Errors: d.Errors}
	}
	d.Up = true
	return d
}

func (r *reader) identity(d *Device, h nvml.Device) {
	if v, ret := h.GetUUID(); r.ok("GetUUID", ret) {
		d.UUID = v
	}
	if v, ret := h.GetName(); r.ok("GetName", ret) {
		d.Name = v
	}
	if v, ret := h.GetPciInfo(); r.ok("GetPciInfo", ret) {
		d.PCIBusID = busID(v.BusId)
	}
	if v, ret := h.GetSerial(); r.ok("GetSerial", ret) {
		d.Serial = v
	}
	if v, ret := h.GetVbiosVersion(); r.ok("GetVbiosVersion", ret) {
		d.VBIOSVersion = v
	}
	if v, ret := h.GetMinorNumber(); r.ok("GetMinorNumber", ret) {
		d.Minor = reading.Some(v)
	}
}

// busID turns NVML's fixed C char array into the lower-case "0000:3b:00.0"
// form that sysfs and the device plugins use.
func busID(raw [32]int8) string {
	var b strings.Builder
	for _, c := range raw {
		if c == 0 {
			break
		}
		b.WriteByte(byte(c))
	}
	return strings.ToLower(b.String())
}

// utilization reads the device's utilization over the window since the
// previous scrape from the driver's samples, and falls back to its latest
// sample period (nvml.h, nvmlUtilization_t: "Each sample period may be
// between 1 second and 1/6 second, depending on the product being
// queried") where
// the driver keeps no samples or has none newer than the previous scrape.
func (r *reader) utilization(d *Device, h nvml.Device) {
	if u, ret := h.GetUtilizationRates(); r.ok("GetUtilizationRates", ret) {
		d.Utilization = reading.Some(percent(u.Gpu))
		d.MemoryUtilization = reading.Some(percent(u.Memory))
	}
	if r.lost {
		return
	}
	typ, samples, ret := h.GetSamples(nvml.GPU_UTILIZATION_SAMPLES, r.lastSeen)
	switch {
	case ret == nvml.ERROR_NOT_FOUND:
		// No sample since the previous scrape: two reads closer together
		// than the driver's sample period see the most recent complete
		// window again.
		if r.prev != nil {
			d.Utilization, d.WindowEnd = reading.Some(r.prev.device), r.prev.end
		}
	case r.ok("GetSamples", ret):
		r.periods = devicePeriods(r.lastSeen, typ, samples)
		if w := newWindow(r.periods, nil, r.buffered()); w.length > 0 {
			d.Utilization, d.WindowEnd = reading.Some(w.device), w.end
			r.win = &w
		} else {
			r.periods = nil
		}
	}
	if r.lost {
		return
	}
	if u, _, ret := h.GetEncoderUtilization(); r.ok("GetEncoderUtilization", ret) {
		d.EncoderUtilization = reading.Some(percent(u))
	}
	if u, _, ret := h.GetDecoderUtilization(); r.ok("GetDecoderUtilization", ret) {
		d.DecoderUtilization = reading.Some(percent(u))
	}
}

func percent(v uint32) float64 { return float64(v) / 100 }

func (r *reader) memory(d *Device, h nvml.Device) {
	if r.symbols.memoryV2 {
		// v2 separates the memory the driver reserves from the memory in use,
		// which v1 counts as used.
		if m, ret := h.GetMemoryInfo_v2(); r.ok("GetMemoryInfo_v2", ret) {
			d.MemoryTotal, d.MemoryUsed, d.MemoryReserved = reading.Some(m.Total), reading.Some(m.Used), reading.Some(m.Reserved)
			return
		}
		if r.lost {
			return
		}
	}
	if m, ret := h.GetMemoryInfo(); r.ok("GetMemoryInfo", ret) {
		d.MemoryTotal, d.MemoryUsed = reading.Some(m.Total), reading.Some(m.Used)
	}
}

func (r *reader) thermal(d *Device, h nvml.Device) {
	if t, ret := h.GetTemperature(nvml.TEMPERATURE_GPU); r.ok("GetTemperature", ret) {
		d.Temperature = reading.Some(float64(t))
	}
	if v, ok := r.field(h, nvml.FI_DEV_MEMORY_TEMP); ok {
		d.MemoryTemperature = reading.Some(v)
	}
	if v, ret := h.GetFanSpeed(); r.ok("GetFanSpeed", ret) {
		d.FanSpeed = reading.Some(percent(v))
	}
	for _, t := range tempThresholdTypes {
		// A limit of 0 °C would put every device past it at all times: a
		// driver that answers 0 has no such limit.
		if v, ret := h.GetTemperatureThreshold(t.typ); r.ok("GetTemperatureThreshold", ret) && v > 0 {
			if d.TempLimits == nil {
				d.TempLimits = map[TempThreshold]float64{}
			}
			d.TempLimits[t.name] = float64(v)
		}
	}
}

// tempThresholdTypes maps nvmlDeviceGetTemperatureThreshold's types to our
// names. nvml.h, nvmlTemperatureThresholds_t: SHUTDOWN is "Temperature at
// which the GPU will shut down for HW protection", SLOWDOWN "Temperature at
// which the GPU will begin HW slowdown", MEM_MAX "Memory Temperature at
// which the GPU will begin SW slowdown", GPU_MAX "GPU Temperature at which
// the GPU can be throttled below base clock" (nvidia-smi's "GPU Max
// Operating Temp"). nvmlDeviceGetTemperatureThreshold returns them in
// degrees C "For Kepler or newer fully supported devices", and
// NOT_SUPPORTED "if the device does not have a temperature sensor or is
// unsupported". The header adds that on Ada and later these four are to
// move to nvmlDeviceGetFieldValues in a future release; until then this
// call answers for them.
var tempThresholdTypes = []struct {
	typ  nvml.TemperatureThresholds
	name TempThreshold
}{
	{nvml.TEMPERATURE_THRESHOLD_SHUTDOWN, TempShutdown},
	{nvml.TEMPERATURE_THRESHOLD_SLOWDOWN, TempSlowdown},
	{nvml.TEMPERATURE_THRESHOLD_GPU_MAX, TempGPUMax},
	{nvml.TEMPERATURE_THRESHOLD_MEM_MAX, TempMemoryMax},
}

// power reads, from nvml.h: nvmlDeviceGetPowerUsage, "power usage for this
// GPU in milliwatts and its associated circuitry (e.g. memory)" ("On Ampere
// (except GA100) or newer GPUs, the API returns power averaged over 1 sec
// interval"); nvmlDeviceGetEnforcedPowerLimit, "the effective power limit
// that the driver enforces after taking into account all limiters", in
// milliwatts; nvmlDeviceGetTotalEnergyConsumption, "total energy
// consumption for this GPU in millijoules (mJ) since the driver was last
// reloaded", so a counter that starts again at a reload, which rate()
// takes as a reset.
func (r *reader) power(d *Device, h nvml.Device) {
	if mw, ret := h.GetPowerUsage(); r.ok("GetPowerUsage", ret) {
		d.Power = reading.Some(float64(mw) / 1000)
	}
	if mw, ret := h.GetEnforcedPowerLimit(); r.ok("GetEnforcedPowerLimit", ret) {
		d.PowerLimit = reading.Some(float64(mw) / 1000)
	}
	if mj, ret := h.GetTotalEnergyConsumption(); r.ok("GetTotalEnergyConsumption", ret) {
		d.Energy = reading.Some(float64(mj) / 1000)
	}
	if p, ret := h.GetPerformanceState(); r.ok("GetPerformanceState", ret) && p != nvml.PSTATE_UNKNOWN {
		d.PState = reading.Some(int(p))
	}
}

var clockTypes = []struct {
	clock Clock
	typ   nvml.ClockType
}{
	{ClockGraphics, nvml.CLOCK_GRAPHICS},
	{ClockSM, nvml.CLOCK_SM},
	{ClockMemory, nvml.CLOCK_MEM},
}

// clocks reads nvmlDeviceGetClockInfo, "the current clock speeds for the
// device", and nvmlDeviceGetMaxClockInfo, each "in MHz" (nvml.h).
func (r *reader) clocks(d *Device, h nvml.Device) {
	for _, c := range clockTypes {
		if mhz, ret := h.GetClockInfo(c.typ); r.ok("GetClockInfo", ret) {
			if d.Clocks == nil {
				d.Clocks = map[Clock]float64{}
			}
			d.Clocks[c.clock] = float64(mhz) * 1e6
		}
		if mhz, ret := h.GetMaxClockInfo(c.typ); r.ok("GetMaxClockInfo", ret) {
			if d.MaxClocks == nil {
				d.MaxClocks = map[Clock]float64{}
			}
			d.MaxClocks[c.clock] = float64(mhz) * 1e6
		}
	}
}

func (r *reader) throttle(d *Device, h nvml.Device) {
	current, supported := h.GetCurrentClocksThrottleReasons, h.GetSupportedClocksThrottleReasons
	if r.symbols.eventReasons {
		current, supported = h.GetCurrentClocksEventReasons, h.GetSupportedClocksEventReasons
	}
	mask, ret := current()
	if !r.ok("GetCurrentClocksEventReasons", ret) {
		return
	}
	// Reasons the GPU model cannot report are left out rather than shown as
	// never throttling; without the supported mask no reason is known to be
	// reportable, so none is emitted.
	all, ret := supported()
	if !r.ok("GetSupportedClocksEventReasons", ret) {
		return
	}
	d.Throttle = make(map[string]bool, len(ThrottleReasons))
	for _, reason := range ThrottleReasons {
		if all&reason.Bit != 0 {
			d.Throttle[reason.Name] = mask&reason.Bit != 0
		}
	}
}

func (r *reader) pcie(d *Device, h nvml.Device) {
	// NVML reports PCIe throughput in KB/s over a 20 ms sample.
	if kb, ret := h.GetPcieThroughput(nvml.PCIE_UTIL_TX_BYTES); r.ok("GetPcieThroughput", ret) {
		d.PCIeTX = reading.Some(float64(kb) * 1024)
	}
	if kb, ret := h.GetPcieThroughput(nvml.PCIE_UTIL_RX_BYTES); r.ok("GetPcieThroughput", ret) {
		d.PCIeRX = reading.Some(float64(kb) * 1024)
	}
	if v, ret := h.GetPcieReplayCounter(); r.ok("GetPcieReplayCounter", ret) {
		d.PCIeReplays = reading.Some(uint64(v))
	}
	if v, ret := h.GetCurrPcieLinkGeneration(); r.ok("GetCurrPcieLinkGeneration", ret) {
		d.PCIeLinkGeneration = reading.Some(v)
	}
	if v, ret := h.GetCurrPcieLinkWidth(); r.ok("GetCurrPcieLinkWidth", ret) {
		d.PCIeLinkWidth = reading.Some(v)
	}
	if v, ret := h.GetMaxPcieLinkGeneration(); r.ok("GetMaxPcieLinkGeneration", ret) {
		d.PCIeLinkMaxGeneration = reading.Some(v)
	}
	if v, ret := h.GetMaxPcieLinkWidth(); r.ok("GetMaxPcieLinkWidth", ret) {
		d.PCIeLinkMaxWidth = reading.Some(v)
	}
}

var eccCounters = []struct {
	counter ECCCounter
	errType nvml.MemoryErrorType
	scope   nvml.EccCounterType
}{
	{ECCCounter{"corrected", "volatile"}, nvml.MEMORY_ERROR_TYPE_CORRECTED, nvml.VOLATILE_ECC},
	{ECCCounter{"corrected", "aggregate"}, nvml.MEMORY_ERROR_TYPE_CORRECTED, nvml.AGGREGATE_ECC},
	{ECCCounter{"uncorrected", "volatile"}, nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC},
	{ECCCounter{"uncorrected", "aggregate"}, nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.AGGREGATE_ECC},
}

func (r *reader) ecc(d *Device, h nvml.Device) {
	for _, c := range eccCounters {
		if v, ret := h.GetTotalEccErrors(c.errType, c.scope); r.ok("GetTotalEccErrors", ret) {
			if d.ECC == nil {
				d.ECC = map[ECCCounter]uint64{}
			}
			d.ECC[c.counter] = v
		}
	}
}

func (r *reader) retirement(d *Device, h nvml.Device) {
	for _, c := range []struct {
		cause nvml.PageRetirementCause
		name  string
	}{
		{nvml.PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS, "single_bit_ecc"},
		{nvml.PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR, "double_bit_ecc"},
	} {
		if pages, ret := h.GetRetiredPages(c.cause); r.ok("GetRetiredPages", ret) {
			if d.RetiredPages == nil {
				d.RetiredPages = map[string]uint64{}
			}
			d.RetiredPages[c.name] = uint64(len(pages))
		}
	}
	if v, ret := h.GetRetiredPagesPendingStatus(); r.ok("GetRetiredPagesPendingStatus", ret) {
		d.RetiredPagesPending = reading.Some(v == nvml.FEATURE_ENABLED)
	}
	if !r.symbols.remappedRows {
		return
	}
	if corr, unc, pending, failed, ret := h.GetRemappedRows(); r.ok("GetRemappedRows", ret) {
		d.RemappedRows = reading.Some(RemappedRows{Correctable: corr, Uncorrectable: unc, Pending: pending, Failed: failed})
	}
}

func (r *reader) migMode(d *Device, h nvml.Device) {
	if current, _, ret := h.GetMigMode(); r.ok("GetMigMode", ret) {
		d.MIGEnabled = reading.Some(current == nvml.DEVICE_MIG_ENABLE)
	}
}

// processes reads the processes of a whole GPU. On a GPU in MIG mode the
// parent's list needs privileges and mixes instances, so each MIG instance
// reads its own.
func (r *reader) processes(d *Device, h nvml.Device) {
	if d.MIGEnabled.OK && d.MIGEnabled.Value {
		return
	}
	d.Processes, d.ProcessesPartial = r.processList(h)
	switch {
	case r.lost:
	case r.periods != nil && (len(d.Processes) > 0 || r.win.device > 0):
		// Read even when no process runs now, if the GPU was busy in the
		// window: processes that exited since used it, and that time is
		// not a later owner's.
		r.processUtilization(d, h)
	case len(d.Processes) == 0:
		if r.win != nil {
			r.win.procs = []procWindow{} // no process used the GPU
		}
	case r.prev != nil && r.prev.procs != nil && r.win == nil && d.Utilization.OK:
		setProcessUtilization(d, *r.prev)
	}
}

// processLists are NVML's three lists of processes on a device. Under MPS
// the clients are only in the MPS list (nvml.h,
// nvmlDeviceGetMPSComputeRunningProcesses_v3: "Get information about
// processes with a Multi-Process Service (MPS) compute context on a
// device"), and a process that
// both computes and draws is in two lists.
var processLists = [...]struct {
	call string
	get  func(nvml.Device) ([]nvml.ProcessInfo, nvml.Return)
}{
	{"GetComputeRunningProcesses", nvml.Device.GetComputeRunningProcesses},
	{"GetMPSComputeRunningProcesses", nvml.Device.GetMPSComputeRunningProcesses},
	{"GetGraphicsRunningProcesses", nvml.Device.GetGraphicsRunningProcesses},
}

// processList merges the three lists, one entry per PID. The memory of a
// PID in several lists is the largest it is given: nvml.h says
// "usedGpuMemory [...] is all of the memory used by the application", so
// each list gives the same whole, not a part to add.
//
// partial says a list could not be read for a reason other than the
// device or driver lacking it, so that processes may be missing and their
// owners must not show 0. nvml.h, nvmlDeviceGet*RunningProcesses_v3:
// NVML_ERROR_NOT_SUPPORTED "if this query is not supported by device" (and
// FUNCTION_NOT_FOUND, a driver without the call): no such processes to
// list; NVML_ERROR_NO_PERMISSION "if the user doesn't have permission to
// perform this operation", or UNKNOWN: processes hidden.
func (r *reader) processList(h nvml.Device) (out []Process, partial bool) {
	var lists [len(processLists)][]nvml.ProcessInfo
	n := 0
	for i, l := range processLists {
		if r.lost {
			break
		}
		procs, ret := l.get(h)
		if !r.ok(l.call, ret) {
			partial = partial || (ret != nvml.ERROR_NOT_SUPPORTED && ret != nvml.ERROR_FUNCTION_NOT_FOUND)
			if ret == nvml.ERROR_NO_PERMISSION {
				// Counted though benign elsewhere: here it costs every
				// owner of the device its memory and utilization.
				r.errs = append(r.errs, CallError{Call: l.call, Return: ret})
			}
			continue
		}
		lists[i] = procs
		n += len(procs)
	}
	if n == 0 {
		return nil, partial
	}
	// Sized for every entry at once: a GPU may run hundreds of processes.
	out = make([]Process, 0, n)
	at := pidIndexes.Get().(map[uint32]int)
	defer func() {
		clear(at)
		pidIndexes.Put(at)
	}()
	for _, procs := range lists {
		for _, p := range procs {
			i, dup := at[p.Pid]
			if !dup {
				i = len(out)
				at[p.Pid] = i
				out = append(out, Process{PID: p.Pid})
			}
			// NVML_VALUE_NOT_AVAILABLE (all ones) without the permission to
			// see another user's process.
			if p.UsedGpuMemory != math.MaxUint64 && (!out[i].UsedMemory.OK || p.UsedGpuMemory > out[i].UsedMemory.Value) {
				out[i].UsedMemory = reading.Some(p.UsedGpuMemory)
			}
		}
	}
	return out, partial
}

// pidIndexes are processList's scratch maps, kept between reads rather
// than one map of hundreds of PIDs made for every GPU at every read.
var pidIndexes = sync.Pool{New: func() any { return map[uint32]int{} }}

// processUtilization gives every process its utilization over this read's
// window (window.go): the time-weighted mean of its samples, 0 for the
// periods it has none. It is what splits a shared GPU between its owners.
func (r *reader) processUtilization(d *Device, h nvml.Device) {
	entries, ret := h.GetProcessUtilization(r.lastSeen)
	if ret == nvml.ERROR_INSUFFICIENT_SIZE {
		// go-nvml sizes its buffer by a first call and fills it by a
		// second; more samples by then (nvml.h: the count "may differ from
		// a previously read value as instances are created or destroyed")
		// is this error. Asked again, the buffer is sized anew.
		entries, ret = h.GetProcessUtilization(r.lastSeen)
	}
	switch {
	case ret == nvml.ERROR_NOT_FOUND:
		entries = []nvml.ProcessUtilizationSample{} // no process used the GPU in the window
	case !r.ok("GetProcessUtilization", ret):
		return
	}
	w := newWindow(r.periods, entries, r.buffered())
	r.win = &w
	setProcessUtilization(d, w)
}

func setProcessUtilization(d *Device, w window) {
	// running marks the window's PIDs that are still on the device; the
	// others with SM time are the exited ones.
	running := make([]bool, len(w.procs))
	for i := range d.Processes {
		p := &d.Processes[i]
		var u procWindow
		if row := w.row(p.PID); row >= 0 {
			u, running[row] = w.procs[row], true
		}
		p.SMUtilization = reading.Some(u.sm)
	}
	if d.ProcessesPartial || !w.buffered {
		// A PID no list names may be one a failed list hides; and from a
		// driver that gives one entry per process, an exited process's
		// entry says nothing of how much of the window was its.
		return
	}
	for row, u := range w.procs {
		if !running[row] && u.sm > 0 {
			d.Exited = append(d.Exited, Process{PID: u.pid, SMUtilization: reading.Some(u.sm)})
		}
	}
}

// profiling samples GPM for the whole GPU; a GPU in MIG mode is profiled per
// instance instead (profileMIG), but is still a GPU with GPM, whose
// profiling no other source (DCGM) may fill in.
func (r *reader) profiling(d *Device, h nvml.Device) {
	if d.MIGEnabled.OK && d.MIGEnabled.Value {
		d.GPM = r.gpmSupported(h)
		return
	}
	if r.gpmSupported(h) {
		d.GPM = true
		r.profile(d, "", h.GpmSampleGet)
	}
}

// nvlinkCounters are the counters of NVLinkErrorTypes, in their order.
var nvlinkCounters = [len(NVLinkErrorTypes)]nvml.NvLinkErrorCounter{
	nvml.NVLINK_ERROR_DL_REPLAY, nvml.NVLINK_ERROR_DL_RECOVERY, nvml.NVLINK_ERROR_DL_CRC_FLIT, nvml.NVLINK_ERROR_DL_CRC_DATA,
}

// nvlink reads the state and error counters of every NVLink of the GPU. A
// link whose state cannot be read is still listed, with nothing known, so
// that sums over the links know they would be partial.
func (r *reader) nvlink(d *Device, h nvml.Device) {
	for link := 0; link < nvml.NVLINK_MAX_LINKS && !r.lost; link++ {
		state, ret := h.GetNvLinkState(link)
		if ret == nvml.ERROR_INVALID_ARGUMENT || (link == 0 && benign(ret)) {
			break // past the GPU's last link, or a GPU without NVLink
		}
		if d.NVLinks == nil {
			// Grown one link at a time, 18 links on an H100 took five
			// allocations and twice the room.
			d.NVLinks = make([]NVLink, 0, nvml.NVLINK_MAX_LINKS)
		}
		if !r.ok("GetNvLinkState", ret) {
			d.NVLinks = append(d.NVLinks, NVLink{Link: link})
			continue
		}
		l := NVLink{Link: link, Up: reading.Some(state == nvml.FEATURE_ENABLED)}
		for i, c := range nvlinkCounters {
			if v, ret := h.GetNvLinkErrorCounter(link, c); r.ok("GetNvLinkErrorCounter", ret) {
				l.Errors[i] = reading.Some(v)
			}
		}
		d.NVLinks = append(d.NVLinks, l)
	}
	r.nvlinkTraffic(d, h)
}

// nvlinkTraffic reads each link's data counters (KiB since the driver was
// loaded) in one field-value call. They are counters, so they work on GPUs
// without GPM (A100) and averaging is left to rate().
func (r *reader) nvlinkTraffic(d *Device, h nvml.Device) {
	if len(d.NVLinks) == 0 || r.lost {
		return
	}
	values := make([]nvml.FieldValue, 0, 2*len(d.NVLinks))
	for _, l := range d.NVLinks {
		values = append(values,
			nvml.FieldValue{FieldId: nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_TX, ScopeId: uint32(l.Link)},
			nvml.FieldValue{FieldId: nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_RX, ScopeId: uint32(l.Link)})
	}
	if !r.ok("GetFieldValues", h.GetFieldValues(values)) {
		return
	}
	for i, v := range values {
		if nvml.Return(v.NvmlReturn) != nvml.SUCCESS {
			continue // a link or model without the counter
		}
		kib, ok := fieldValue(v)
		if !ok {
			continue
		}
		l := &d.NVLinks[i/2]
		if v.FieldId == nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_TX {
			l.TXBytes = reading.Some(kib * 1024)
		} else {
			l.RXBytes = reading.Some(kib * 1024)
		}
	}
}

// field reads one NVML field value as a float.
func (r *reader) field(h nvml.Device, id uint32) (float64, bool) {
	values := []nvml.FieldValue{{FieldId: id}}
	if !r.ok("GetFieldValues", h.GetFieldValues(values)) {
		return 0, false
	}
	if !r.ok(fmt.Sprintf("GetFieldValues(%d)", id), nvml.Return(values[0].NvmlReturn)) {
		return 0, false
	}
	return fieldValue(values[0])
}

func fieldValue(v nvml.FieldValue) (float64, bool) {
	return sampleValue(nvml.ValueType(v.ValueType), v.Value)
}

// readMIGInstances reads the MIG devices of a GPU in MIG mode. NVML gives
// memory and processes per instance; utilization needs GPM or DCGM.
//
// Each MIG device NVML hands out is a compute instance; several can share one
// GPU instance. The device plugins' index strategy names MIG devices by the
// GPU's index and the handle index i of nvmlDeviceGetMigDeviceHandleByIndex,
// which follows no promised order of GPU instance IDs, so Index keeps i.
//
// listed says every slot answered, with a MIG device or as empty: the GPU
// has no MIG devices but those returned, none perhaps.
func (r *reader) readMIGInstances(parent Device, h nvml.Device) (devs []Device, listed bool) {
	count, ret := h.GetMaxMigDeviceCount()
	if !r.ok("GetMaxMigDeviceCount", ret) {
		return nil, false
	}
	listed = true
	parentSlices := 0
	var out []Device
	for i := range count {
		mh, ret := h.GetMigDeviceHandleByIndex(i)
		if ret == nvml.ERROR_NOT_FOUND || ret == nvml.ERROR_INVALID_ARGUMENT {
			continue // an empty slot: not every MIG slot holds an instance
		}
		mr := &reader{lib: r.lib, gpm: r.gpm, symbols: r.symbols, pending: r.pending}
		if !mr.ok("GetMigDeviceHandleByIndex", ret) {
			r.errs = append(r.errs, mr.errs...)
			listed = false
			continue
		}
		if parentSlices == 0 {
			parentSlices = maxSlices(h)
		}
		out = append(out, mr.readMIG(parent, mh, i, parentSlices))
	}
	r.profileMIG(h, out)
	return out, listed
}

// profileMIG samples GPM once per GPU instance (nvmlGpmMigSampleGet takes a
// GPU instance ID). Its readings belong to an instance only when it is the
// GPU instance's only compute instance: compute instances that share a GPU
// instance share its readings, which are then no one instance's own and are
// left out. NVML has no other utilization of a MIG instance; GPM's graphics
// engine activity is what DCGM reports for instances too.
func (r *reader) profileMIG(parent nvml.Device, devs []Device) {
	if len(devs) == 0 || !r.gpmSupported(parent) {
		return
	}
	perGI := map[int][]int{}
	for i, d := range devs {
		if d.Up && d.MIG != nil && d.MIG.GPUInstanceID >= 0 {
			perGI[d.MIG.GPUInstanceID] = append(perGI[d.MIG.GPUInstanceID], i)
		}
	}
	for gi, idx := range perGI {
		for _, i := range idx {
			devs[i].GPM = true
		}
		if len(idx) != 1 || r.lost {
			continue
		}
		d := &devs[idx[0]]
		r.profile(d, "gi:"+strconv.Itoa(gi), func(s nvml.GpmSample) nvml.Return { return parent.GpmMigSampleGet(gi, s) })
		if v, ok := d.Profiling[ProfGraphicsActive]; ok {
			d.Utilization = reading.Some(v)
		}
	}
}

// fullGPUProfiles are the GPU instance profiles that span a whole GPU on
// some model, largest first. NVIDIA's MIG user guide ("Supported GPUs")
// lists at most 7 instances on A100, H100, H200, B200 and GB200, 4 on A30
// and RTX PRO 6000 Blackwell, 2 on RTX PRO 5000 and 4500 Blackwell. A GPU
// supports its smaller profiles too (a 7-slice GPU has 4g), so the first
// one it supports is its own.
var fullGPUProfiles = []int{nvml.GPU_INSTANCE_PROFILE_7_SLICE, nvml.GPU_INSTANCE_PROFILE_4_SLICE, nvml.GPU_INSTANCE_PROFILE_2_SLICE}

// maxSlices is the number of compute slices of the whole GPU: the slice
// count of its full-GPU profile; 0 when none is supported.
func maxSlices(h nvml.Device) int {
	for _, p := range fullGPUProfiles {
		if info, ret := h.GetGpuInstanceProfileInfo(p); ret == nvml.SUCCESS && info.SliceCount > 0 {
			return int(info.SliceCount)
		}
	}
	return 0
}

func (r *reader) readMIG(parent Device, h nvml.Device, index, parentSlices int) Device {
	// The parent's model, not the MIG device's name ("… MIG 1g.10gb"), so
	// that fleets aggregate by model across MIG and whole GPUs.
	d := Device{
		Identity: Identity{Index: parent.Index, Name: parent.Name, PCIBusID: parent.PCIBusID},
		// An instance ID that cannot be read matches no event's, and no
		// allocation's.
		MIG: &MIG{ParentUUID: parent.UUID, ParentIndex: parent.Index, Index: index, GPUInstanceID: -1, ComputeInstanceID: -1},
	}
	if v, ret := h.GetUUID(); r.ok("GetUUID", ret) {
		d.UUID = v
	}
	var name string
	if v, ret := h.GetName(); r.ok("GetName", ret) {
		name = v
	}
	if v, ret := h.GetGpuInstanceId(); r.ok("GetGpuInstanceId", ret) {
		d.MIG.GPUInstanceID = v
	}
	if v, ret := h.GetComputeInstanceId(); r.ok("GetComputeInstanceId", ret) {
		d.MIG.ComputeInstanceID = v
	}
	var attrs nvml.DeviceAttributes
	if v, ret := h.GetAttributes(); r.ok("GetAttributes", ret) {
		attrs = v
		// A compute instance holds its own slices of the GPU instance's
		// compute; the GPU instance's slices are its share only when it is
		// the only one.
		slices := v.ComputeInstanceSliceCount
		if slices == 0 {
			slices = v.GpuInstanceSliceCount
		}
		if parentSlices > 0 && slices > 0 {
			d.MIG.SliceFraction = float64(slices) / float64(parentSlices)
		}
	}
	d.MIG.Profile = migProfile(name, attrs)
	if !r.lost {
		r.memory(&d, h)
	}
	if !r.lost {
		// nvml.h, nvmlDeviceGetProcessUtilization: "On MIG-enabled GPUs,
		// querying process utilization is not currently supported", so a MIG
		// instance's processes carry memory only.
		d.Processes, d.ProcessesPartial = r.processList(h)
	}
	return r.finish(d)
}

var migNameProfile = regexp.MustCompile(`MIG (\d+c\.)?\d+g\.\d+gb$`)

// migProfile names the instance as nvidia-smi does ("3g.40gb"). Drivers put
// it at the end of the MIG device's name; older ones do not, and then it is
// built from the instance's slices and memory.
func migProfile(name string, a nvml.DeviceAttributes) string {
	if m := migNameProfile.FindString(name); m != "" {
		return strings.TrimPrefix(m, "MIG ")
	}
	if a.GpuInstanceSliceCount == 0 {
		return ""
	}
	// NVIDIA's profile names round the memory up: 4864 MiB is "5gb", 40192 MiB "40gb".
	gb := int(math.Ceil(float64(a.MemorySizeMB) / 1024))
	if a.ComputeInstanceSliceCount > 0 && a.ComputeInstanceSliceCount < a.GpuInstanceSliceCount {
		return fmt.Sprintf("%dc.%dg.%dgb", a.ComputeInstanceSliceCount, a.GpuInstanceSliceCount, gb)
	}
	return fmt.Sprintf("%dg.%dgb", a.GpuInstanceSliceCount, gb)
}
