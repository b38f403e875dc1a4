package collector

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/xpu-exporter/xpu_exporter/internal/grace"
	"github.com/xpu-exporter/xpu_exporter/vendors/nvidia"
	"github.com/xpu-exporter/xpu_exporter/vendors/reading"
)

func init() {
	registerCollector("nvidia", true, "NVIDIA GPUs through NVML", newNvidiaCollector)
}

var (
	deviceInfo   = gauge("device_info", "Static facts of a device; always 1.")
	partShare    = gauge("partition_share_ratio", "Share of its physical GPU a partition holds: a MIG instance's compute slices over the GPU's (1/4 for 1g on a 4-slice GPU, 3/7 for 3g on a 7-slice one), 1/N for one of an AMD GPU's N compute partitions; absent where the GPU's slice count could not be read.")
	deviceUp     = gauge("device_up", "1 if the device answered in this scrape, 0 if it is lost or did not answer in time.")
	utilization  = gauge("utilization_ratio", "Fraction of time a kernel ran on the device: averaged over the driver's samples since the previous scrape, else its last sample period; GPM graphics activity for a MIG instance (dcgm-exporter's, with --collector.dcgm, where there is no GPM).")
	memUtil      = gauge("memory_utilization_ratio", "Fraction of the last sample period during which device memory was read or written.")
	encoderUtil  = gauge("encoder_utilization_ratio", "Utilization of the video encoder.")
	decoderUtil  = gauge("decoder_utilization_ratio", "Utilization of the video decoder.")
	memUsed      = gauge("memory_used_bytes", "Device memory in use by processes.")
	memTotal     = gauge("memory_total_bytes", "Device memory in total.")
	memReserved  = gauge("memory_reserved_bytes", "Device memory reserved by the driver and firmware.")
	temperature  = gauge("temperature_celsius", "Temperature of a device sensor.")
	tempLimit    = gauge("temperature_threshold_celsius", "Temperature limit the driver sets for the device: shutdown (hardware protection), slowdown (hardware slowdown begins), gpu_max (maximum operating temperature of the core) or memory_max (memory slowdown begins); on AMD, per sensor, crit (the sensor's throttle limit) or emergency (ASIC shutdown).")
	power        = gauge("power_watts", "Power draw of the device.")
	powerLimit   = gauge("power_limit_watts", "Power limit the driver enforces on the device.")
	energy       = counter("energy_joules_total", "Energy the device consumed since the driver was loaded.")
	fanSpeed     = gauge("fan_speed_ratio", "Fan speed as a fraction of its maximum.")
	clock        = gauge("clock_hertz", "Current clock frequency of a clock domain.")
	clockMax     = gauge("clock_max_hertz", "Maximum clock frequency of a clock domain.")
	throttled    = gauge("clock_throttled", "1 if clocks are held down for this reason now.")
	pstate       = gauge("performance_state", "Performance state, 0 (P0, fastest) to 15 (slowest).")
	pcieTraffic  = gauge("pcie_throughput_bytes_per_second", "PCIe throughput: averaged since the previous scrape (GPM), over dcgm-exporter's sample period (DCGM), else over NVML's last 20 ms sample.")
	pcieReplays  = counter("pcie_replays_total", "PCIe replays (link-level retransmissions) since the driver was loaded.")
	pcieGen      = gauge("pcie_link_generation", "Current PCIe link generation.")
	pcieWidth    = gauge("pcie_link_width", "Current PCIe link width in lanes.")
	pcieMaxGen   = gauge("pcie_link_max_generation", "Maximum PCIe link generation of the device and slot.")
	pcieMaxWidth = gauge("pcie_link_max_width", "Maximum PCIe link width in lanes.")
	eccErrors    = counter("ecc_errors_total", "Memory ECC errors; scope volatile counts since the driver was loaded, aggregate over the device's life.")
	retired      = counter("retired_pages_total", "Device memory pages retired, by cause.")
	retiredPend  = gauge("retired_pages_pending", "1 if pages are waiting to be retired at the next reboot.")
	remapped     = gauge("remapped_rows", "Memory rows remapped, by outcome.")
	remapPending = gauge("remapped_rows_pending", "1 if a row remapping waits for a GPU reset.")
	remapFailed  = gauge("remapped_rows_failed", "1 if a row remapping failed: the GPU should be serviced.")
	migEnabled   = gauge("mig_mode_enabled", "1 if the GPU is in MIG mode.")
	nvmlErrors   = counter("nvml_errors_total", "Unexpected NVML call failures (not counting features a GPU model lacks).")
	nvlinkUp     = gauge("nvlink_up", "1 if the NVLink is up (--nvidia.nvlink-per-link).")
	nvlinkLinks  = gauge("nvlink_links", "The GPU's NVLinks by state (up, down), counting those whose state NVML gave; per link with --nvidia.nvlink-per-link.")
	nvlinkErrors = counter("nvlink_errors_total", "NVLink data-link errors by type (replay, recovery, crc_flit, crc_data), summed over the GPU's links unless --nvidia.nvlink-per-link.")
	nvlinkBytes  = gauge("nvlink_throughput_bytes_per_second", "NVLink throughput over all links, averaged since the previous scrape (GPM), or dcgm-exporter's rate with --collector.dcgm where there is no GPM.")
	nvlinkData   = counter("nvlink_data_bytes_total", "Data bytes the GPU's NVLinks carried since the driver was loaded, by direction; per link with --nvidia.nvlink-per-link.")
)

// profilingMetrics are GPM readings, averaged since the previous scrape.
var profilingMetrics = []struct {
	key string
	m   metric
}{
	{nvidia.ProfSMActive, gauge("sm_active_ratio", "Fraction of time at least one warp was active on an SM, averaged over all SMs.")},
	{nvidia.ProfSMOccupancy, gauge("sm_occupancy_ratio", "Fraction of the maximum warps resident on the SMs.")},
	{nvidia.ProfTensorActive, gauge("tensor_active_ratio", "Fraction of time any tensor core pipe was active.")},
	{nvidia.ProfDRAMActive, gauge("dram_active_ratio", "Fraction of time the device memory interface was busy.")},
	{nvidia.ProfFP16Active, gauge("fp16_active_ratio", "Fraction of time the FP16 pipe was active.")},
	{nvidia.ProfFP32Active, gauge("fp32_active_ratio", "Fraction of time the FP32 pipe was active.")},
	{nvidia.ProfFP64Active, gauge("fp64_active_ratio", "Fraction of time the FP64 pipe was active.")},
}

type nvidiaCollector struct {
	client *nvidia.Client
	logger *slog.Logger
	events *eventRecorder

	mu      sync.Mutex
	lastErr string            // logged on change only
	down    map[string]string // device → why it is down, logged on change only
	// timedOut are the devices whose reads ran out of time, not logged
	// yet (logDown).
	timedOut   grace.Holds
	partial    map[string]bool // devices whose process list is not whole, logged on change only
	driver     string
	cuda       string
	callErrors map[[2]string]float64 // call, error → count
	// dcgmPCIe: the dcgm collector is on and emits the PCIe throughput of
	// devices without GPM (see dcgmCollector).
	dcgmPCIe bool
	// reads numbers the reads in the order they start, and logged (under
	// mu) is the read each device's logged state comes from (logState).
	reads  atomic.Uint64
	logged map[string]uint64
	// migPIDs are each MIG device's processes at its last read (under mu):
	// see migExits.
	migPIDs map[string]migRead
	// lifetime is the exporter's run, from background.
	lifetime
}

// peers learns which other collectors are on: with the dcgm collector, the
// PCIe throughput of a device without GPM is its to emit, DCGM's or ours.
func (c *nvidiaCollector) peers(all map[string]Collector) {
	_, c.dcgmPCIe = all["dcgm"]
}

func newNvidiaCollector(cfg Config) (Collector, error) {
	lib := cfg.NVML
	if lib == nil {
		lib = nvml.New()
	}
	procfs := cfg.Procfs
	if procfs == "" {
		procfs = "/proc"
	}
	return &nvidiaCollector{
		client: nvidia.New(lib, nvidia.DriverTable(procfs)), logger: cfg.Logger, events: newEventRecorder(cfg.Logger, cfg.Now),
		callErrors: map[[2]string]float64{}, down: map[string]string{}, partial: map[string]bool{}, logged: map[string]uint64{},
	}, nil
}

func (c *nvidiaCollector) Close() { c.client.Shutdown() }

// background listens for driver events (Xid errors): they happen between
// scrapes and would be lost otherwise.
func (c *nvidiaCollector) background(ctx context.Context, snapshot func(context.Context) *Snapshot) {
	c.begin(ctx)
	c.events.listen(ctx, c.client, snapshot)
}

func (c *nvidiaCollector) readDevices(ctx context.Context, m move) ([]*Device, error) {
	read := c.reads.Add(1)
	var node nvidia.Node
	var err error
	if m == movePush {
		node, err = c.client.ReadPush(ctx)
	} else {
		node, err = c.client.Read(ctx, m == moveScrape)
	}
	c.logChange(err)
	if errors.Is(err, nvidia.ErrNoDriver) {
		// No NVML library: a node without NVIDIA GPUs, such as the AMD or
		// Gaudi nodes of a mixed fleet running one DaemonSet. That is not a
		// failing collector, as an AMD node without amdgpu is not for the
		// amd collector; logChange says it once. A library that loads but
		// fails to initialise (a driver not loaded, a version mismatch) is
		// a broken driver and fails the collector.
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.driver, c.cuda = node.DriverVersion, node.CUDAVersion
	c.mu.Unlock()
	for i := range node.Devices {
		c.countErrors(node.Devices[i].Errors)
	}
	return c.devices(node.Devices, read), nil
}

// migRead is what a read saw of a MIG device's processes.
type migRead struct {
	read uint64
	pids []uint32
}

// migExits are the processes of a MIG device at its previous read that it
// runs no more: they used it earlier in this read's window. NVML keeps no
// per-process samples on a MIG device (nvml.h,
// nvmlDeviceGetProcessUtilization: "On MIG-enabled GPUs, querying process
// utilization is not currently supported"), so these,
// unlike a whole GPU's exited processes, come without their utilization:
// their owner had a part of the window's time, how much unknown. Without
// them a pod replaced on an instance between two scrapes was its sole
// owner over the whole window, billed its predecessor's seconds (found by
// probe18-nvidia). A read that did not list the device's processes whole
// leaves what was known.
func (c *nvidiaCollector) migExits(nd *nvidia.Device, read uint64) []Process {
	c.mu.Lock()
	defer c.mu.Unlock()
	prev, seen := c.migPIDs[nd.UUID]
	if !nd.Up || nd.ProcessesPartial || (seen && prev.read > read) {
		return nil
	}
	pids := make([]uint32, 0, len(nd.Processes))
	for i := range nd.Processes {
		pids = append(pids, nd.Processes[i].PID)
	}
	if c.migPIDs == nil {
		c.migPIDs = map[string]migRead{}
	}
	c.migPIDs[nd.UUID] = migRead{read, pids}
	var gone []Process
	for _, pid := range prev.pids {
		if !slices.Contains(pids, pid) {
			gone = append(gone, Process{PID: pid})
		}
	}
	return gone
}

// unanswered is every GPU known so far, down: a scrape whose deadline passed
// before the read answered at all still says which GPUs it could not read.
func (c *nvidiaCollector) unanswered() []*Device {
	return c.devices(c.client.Known(noAnswer), c.reads.Add(1))
}

// noAnswer is why a GPU is down in a snapshot that stopped waiting before
// the read answered at all.
const noAnswer = "no answer before the scrape deadline"

// devices converts the devices that read (its number) returned.
func (c *nvidiaCollector) devices(nds []nvidia.Device, read uint64) []*Device {
	// A read the exporter's own stop cut short says nothing of the GPUs
	// it did not reach: they are not logged down, which a log alert on
	// "NVIDIA device down" would take for a GPU lost at every restart.
	stopping := c.stopping()
	devs := make([]*Device, 0, len(nds))
	for i := range nds {
		nd := &nds[i]
		d := &Device{
			Vendor:       "nvidia",
			Index:        strconv.Itoa(nd.Index),
			UUID:         nd.UUID,
			Model:        nd.Name,
			PCIBusID:     nd.PCIBusID,
			Minor:        nd.Minor,
			HasMIG:       nd.MIGEnabled.OK && nd.MIGEnabled.Value,
			MIGListed:    nd.MIGListed,
			MIGModeKnown: nd.MIGEnabled.OK,
			Up:           nd.Up,
			vendorData:   nd,
		}
		if nd.MIG != nil {
			d.MIG = &MIGInstance{
				ParentUUID:      nd.MIG.ParentUUID,
				Profile:         nd.MIG.Profile,
				Instance:        migInstance(nd.MIG.GPUInstanceID),
				Index:           nd.MIG.Index,
				Fraction:        nd.MIG.SliceFraction,
				ComputeInstance: nd.MIG.ComputeInstanceID,
			}
		}
		d.MemoryUsed, d.MemoryTotal = asFloat(nd.MemoryUsed), asFloat(nd.MemoryTotal)
		if nd.Utilization.OK {
			d.Utilization = &nd.Utilization.Value
		}
		d.ProcessesPartial, d.SamplesByPID, d.WindowEnd = nd.ProcessesPartial, true, nd.WindowEnd
		d.Processes = make([]Process, 0, len(nd.Processes))
		// Pointers into nd's own slice, not into a per-process copy.
		for i := range nd.Processes {
			p := &nd.Processes[i]
			proc := Process{PID: p.PID}
			if p.UsedMemory.OK {
				proc.MemoryUsed = &p.UsedMemory.Value
			}
			if p.SMUtilization.OK {
				proc.Utilization = &p.SMUtilization.Value
			}
			d.Processes = append(d.Processes, proc)
		}
		for i := range nd.Exited {
			p := &nd.Exited[i]
			d.Exited = append(d.Exited, Process{PID: p.PID, Utilization: &p.SMUtilization.Value})
		}
		if nd.MIG != nil {
			d.Exited = append(d.Exited, c.migExits(nd, read)...)
		}
		if !stopping || !timedOut(nd.Down) {
			c.logState(d, nd.Down, read)
		}
		devs = append(devs, d)
	}
	for _, d := range devs {
		d.MIGEmpty = d.Up && d.HasMIG && d.MIGListed && !slices.ContainsFunc(devs, func(m *Device) bool {
			return m.MIG != nil && m.MIG.ParentUUID == d.UUID
		})
	}
	// The MIG devices gone since (instances destroyed, made anew under
	// other UUIDs) are forgotten; not by a read older than what was seen
	// of them, which ended late (review18 R18-3).
	c.mu.Lock()
	for uuid, seen := range c.migPIDs {
		if seen.read < read && !slices.ContainsFunc(nds, func(nd nvidia.Device) bool { return nd.UUID == uuid }) {
			delete(c.migPIDs, uuid)
		}
	}
	c.mu.Unlock()
	return devs
}

// logChange logs the collector's health when it changes: one line when the
// driver is missing, not one per scrape.
func (c *nvidiaCollector) logChange(err error) {
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if msg == c.lastErr {
		return
	}
	c.lastErr = msg
	switch {
	case errors.Is(err, nvidia.ErrNoDriver):
		c.logger.Info("NVIDIA collector has no driver to talk to; serving no NVIDIA devices until one appears (disable with --no-collector.nvidia)", "err", err)
	case err != nil:
		c.logger.Error("NVIDIA collector failed", "err", err)
	default:
		c.logger.Info("NVIDIA collector reading devices through NVML")
	}
}

// deviceLogKey keys a device's logged state by position, not UUID: a GPU
// that is lost has none, so it would never be found again when it is back.
func deviceLogKey(d *Device) string {
	if d.MIG != nil {
		return d.Index + "/mig" + strconv.Itoa(d.MIG.Index)
	}
	return d.Index
}

// timedOut says that a GPU is down because its read did not answer in
// time (vendors/nvidia's await, Known), not because the driver said so.
func timedOut(why string) bool {
	return why == "timeout" || why == "previous query still running" || why == noAnswer
}

// logState logs the changes of the device's state that read found, unless
// a read that started after it has been logged: reads overlap, and one
// with a long deadline (/devices, the warm-up at start) waiting for a hung
// GPU hands in its other GPUs' answers after later scrapes logged newer
// ones. An older answer is not a change: it would log a GPU lost since as
// back.
func (c *nvidiaCollector) logState(d *Device, why string, read uint64) {
	key := deviceLogKey(d)
	c.mu.Lock()
	defer c.mu.Unlock()
	if read < c.logged[key] {
		return
	}
	c.logged[key] = read
	c.logDown(key, d, why)
	c.logPartial(key, d)
}

// logDown logs the device going down or coming back; c.mu is held.
//
// A read that ran out of time is logged once the GPU has not answered for
// grace.Period, or its read that timed out before is still running (a
// hang): the deadline is the scraper's, and one scrape asking for a
// millisecond logged every GPU down and back, twice under two reasons for
// one state (probe H, PH4). A GPU whose reads always take longer than its
// scrapes allow is logged at the next scrape.
func (c *nvidiaCollector) logDown(key string, d *Device, why string) {
	state := why
	if timedOut(why) {
		// The read that timed out may still be hung: one state, not a
		// new one at every other scrape.
		state = "timeout"
		_, before := c.timedOut[key]
		hung := before && why == "previous query still running"
		if c.down[key] != state && !hung && c.timedOut.Hold(key, time.Now()) {
			return
		}
	}
	delete(c.timedOut, key)
	if c.down[key] == state {
		return
	}
	if why == "" {
		c.logger.Info("NVIDIA device is back", "gpu", d.Index, "uuid", d.UUID)
		delete(c.down, key)
		return
	}
	c.logger.Warn("NVIDIA device down", "gpu", d.Index, "uuid", d.UUID, "reason", why)
	c.down[key] = state
}

// logPartial logs a device whose process list NVML would not give whole
// when that starts and when it ends: its owners' memory and utilization are
// left out meanwhile (Device.Usage), and this says why. c.mu is held.
func (c *nvidiaCollector) logPartial(key string, d *Device) {
	switch {
	case d.ProcessesPartial && !c.partial[key]:
		c.partial[key] = true
		c.logger.Warn("NVML did not list all processes of an NVIDIA device; its owners' memory and utilization are left out until it does (see xpu_nvml_errors_total)", "gpu", d.Index, "uuid", d.UUID)
	case !d.ProcessesPartial && c.partial[key]:
		delete(c.partial, key)
		c.logger.Info("NVML lists all processes of an NVIDIA device again", "gpu", d.Index, "uuid", d.UUID)
	}
}

func (c *nvidiaCollector) countErrors(errs []nvidia.CallError) {
	if len(errs) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range errs {
		c.callErrors[[2]string{e.Call, e.Return.Error()}]++
	}
}

func (c *nvidiaCollector) Update(_ context.Context, snap *Snapshot, ch chan<- prometheus.Metric) error {
	e := newEmitter(ch)
	defer e.flush()
	c.events.collect(e)
	c.mu.Lock()
	driver, cuda := c.driver, c.cuda
	for k, v := range c.callErrors {
		e.emit(nvmlErrors, labels{names: []string{"call", "error"}, values: k[:]}, v)
	}
	c.mu.Unlock()
	for _, d := range snap.Devices {
		nd, ok := d.vendorData.(*nvidia.Device)
		if !ok {
			continue
		}
		l := deviceLabels(d)
		// Static facts only: an owner would make the series change with
		// every new pod.
		if d.UUID != "" {
			e.emit(deviceInfo, identityLabels(d).with("driver_version", driver).with("cuda_version", cuda).
				with("pci_bus_id", nd.PCIBusID).with("serial", nd.Serial).with("vbios_version", nd.VBIOSVersion), 1)
		}
		emitPartitionShare(e, d)
		e.emit(deviceUp, l, boolValue(nd.Up))
		if nd.Up {
			emitNvidiaReadings(e, l, nd, !c.dcgmPCIe || nd.GPM)
		}
	}
	return nil
}

// emitPartitionShare emits a partition's share of its GPU. It is a fact of
// the device, as xpu_device_info is, so it carries no owner labels: one
// series per partition, which the mixin joins by uuid to count a
// partition's use in whole GPUs without a table of models and their slice
// counts.
func emitPartitionShare(e emitter, d *Device) {
	if d.UUID != "" && d.MIG != nil && d.MIG.Fraction > 0 {
		e.emit(partShare, identityLabels(d), d.MIG.Fraction)
	}
}

var extendedReadings = kingpin.Flag("nvidia.extended-readings",
	"Also the readings no alert, rule or dashboard of the mixin uses: maximum clocks, reserved memory, performance state, "+
		"video encoder and decoder utilization, PCIe throughput and the aggregate-scope (lifetime) ECC counters (11 series an H100).").Bool()

// emitNvidiaReadings emits the device's readings, its PCIe throughput only
// if withPCIe. The extended readings wait for their flag: every series is
// paid for on every node at every scrape, so the default set is what the
// mixin's alerts, rules and dashboards use and what tells a GPU's health
// and use, within the budget of 60 series per GPU (README "Sizing").
func emitNvidiaReadings(e emitter, l labels, d *nvidia.Device, withPCIe bool) {
	ext := *extendedReadings
	optional(e, utilization, l, d.Utilization)
	optional(e, memUtil, l, d.MemoryUtilization)
	if ext {
		optional(e, encoderUtil, l, d.EncoderUtilization)
		optional(e, decoderUtil, l, d.DecoderUtilization)
		optional(e, memReserved, l, d.MemoryReserved)
		optional(e, pstate, l, d.PState)
	}
	optional(e, memUsed, l, d.MemoryUsed)
	optional(e, memTotal, l, d.MemoryTotal)
	optional(e, temperature, l.with("sensor", "gpu"), d.Temperature)
	optional(e, temperature, l.with("sensor", "memory"), d.MemoryTemperature)
	for _, t := range nvidia.TempThresholds {
		if v, ok := d.TempLimits[t]; ok {
			e.emit(tempLimit, l.with("threshold", string(t)), v)
		}
	}
	optional(e, power, l, d.Power)
	optional(e, powerLimit, l, d.PowerLimit)
	optional(e, energy, l, d.Energy)
	optional(e, fanSpeed, l, d.FanSpeed)
	for _, c := range []nvidia.Clock{nvidia.ClockGraphics, nvidia.ClockSM, nvidia.ClockMemory} {
		if v, ok := d.Clocks[c]; ok {
			e.emit(clock, l.with("clock", string(c)), v)
		}
		if v, ok := d.MaxClocks[c]; ok && ext {
			e.emit(clockMax, l.with("clock", string(c)), v)
		}
	}
	for _, r := range nvidia.ThrottleReasons {
		if v, ok := d.Throttle[r.Name]; ok {
			e.emit(throttled, l.with("reason", r.Name), boolValue(v))
		}
	}
	// GPM averages PCIe traffic since the previous scrape; NVML's counter is
	// a 20 ms sample. The average is the better reading, so it wins.
	if withPCIe && ext {
		pcieTX, pcieRX := d.PCIeTX, d.PCIeRX
		if v, ok := d.Profiling[nvidia.ProfPCIeTX]; ok {
			pcieTX = nvidia.Opt[float64]{Value: v, OK: true}
		}
		if v, ok := d.Profiling[nvidia.ProfPCIeRX]; ok {
			pcieRX = nvidia.Opt[float64]{Value: v, OK: true}
		}
		optional(e, pcieTraffic, l.with("direction", "tx"), pcieTX)
		optional(e, pcieTraffic, l.with("direction", "rx"), pcieRX)
	}
	optional(e, pcieReplays, l, d.PCIeReplays)
	optional(e, pcieGen, l, d.PCIeLinkGeneration)
	optional(e, pcieWidth, l, d.PCIeLinkWidth)
	optional(e, pcieMaxGen, l, d.PCIeLinkMaxGeneration)
	optional(e, pcieMaxWidth, l, d.PCIeLinkMaxWidth)
	for _, t := range []string{"corrected", "uncorrected"} {
		for _, s := range []string{"volatile", "aggregate"} {
			if v, ok := d.ECC[nvidia.ECCCounter{Type: t, Scope: s}]; ok && (ext || s == "volatile") {
				e.emit(eccErrors, l.with("type", t).with("scope", s), float64(v))
			}
		}
	}
	for _, cause := range []string{"single_bit_ecc", "double_bit_ecc"} {
		if v, ok := d.RetiredPages[cause]; ok {
			e.emit(retired, l.with("cause", cause), float64(v))
		}
	}
	if d.RetiredPagesPending.OK {
		e.emit(retiredPend, l, boolValue(d.RetiredPagesPending.Value))
	}
	if rr := d.RemappedRows; rr.OK {
		e.emit(remapped, l.with("outcome", "correctable"), float64(rr.Value.Correctable))
		e.emit(remapped, l.with("outcome", "uncorrectable"), float64(rr.Value.Uncorrectable))
		e.emit(remapPending, l, boolValue(rr.Value.Pending))
		e.emit(remapFailed, l, boolValue(rr.Value.Failed))
	}
	if d.MIGEnabled.OK {
		e.emit(migEnabled, l, boolValue(d.MIGEnabled.Value))
	}
	emitNVLinks(e, l, d.NVLinks)
	if v, ok := d.Profiling[nvidia.ProfNVLinkTX]; ok {
		e.emit(nvlinkBytes, l.with("direction", "tx"), v)
	}
	if v, ok := d.Profiling[nvidia.ProfNVLinkRX]; ok {
		e.emit(nvlinkBytes, l.with("direction", "rx"), v)
	}
	for _, p := range profilingMetrics {
		if v, ok := d.Profiling[p.key]; ok {
			e.emit(p.m, l, v)
		}
	}
}

var nvlinkPerLink = kingpin.Flag("nvidia.nvlink-per-link",
	"NVLink state, error and data counters per link (18 links on an H100: 7 series each) instead of counted and summed per GPU.").Bool()

// emitNVLinks emits the links' states and counters, per link or counted and
// summed per GPU: per-link series multiply a node's series several times
// over (18 links on an H100), and the GPU's count of links down and its
// sums tell a bad GPU already; the flag says which link it is.
// A sum is emitted only when every link gave its counter: a sum missing one
// link would drop, and Prometheus would read that as a counter reset.
func emitNVLinks(e emitter, l labels, links []nvidia.NVLink) {
	if *nvlinkPerLink {
		for _, link := range links {
			ll := l.with("link", strconv.Itoa(link.Link))
			optional(e, nvlinkUp, ll, nvidia.Opt[float64]{Value: boolValue(link.Up.Value), OK: link.Up.OK})
			for i, t := range nvidia.NVLinkErrorTypes {
				if v := link.Errors[i]; v.OK {
					e.emit(nvlinkErrors, ll.with("type", t), float64(v.Value))
				}
			}
			optional(e, nvlinkData, ll.with("direction", "tx"), link.TXBytes)
			optional(e, nvlinkData, ll.with("direction", "rx"), link.RXBytes)
		}
		return
	}
	type sum struct {
		v       float64
		missing bool
	}
	var errs [len(nvidia.NVLinkErrorTypes)]sum
	var tx, rx sum
	add := func(s *sum, v float64, ok bool) {
		s.v += v
		s.missing = s.missing || !ok
	}
	var up, down int
	for _, link := range links {
		switch {
		case !link.Up.OK:
		case link.Up.Value:
			up++
		default:
			down++
		}
		for i, v := range link.Errors {
			add(&errs[i], float64(v.Value), v.OK)
		}
		add(&tx, link.TXBytes.Value, link.TXBytes.OK)
		add(&rx, link.RXBytes.Value, link.RXBytes.OK)
	}
	if up+down > 0 {
		e.emit(nvlinkLinks, l.with("state", "up"), float64(up))
		e.emit(nvlinkLinks, l.with("state", "down"), float64(down))
	}
	if len(links) == 0 {
		return
	}
	for i, t := range nvidia.NVLinkErrorTypes {
		if !errs[i].missing {
			e.emit(nvlinkErrors, l.with("type", t), errs[i].v)
		}
	}
	if !tx.missing {
		e.emit(nvlinkData, l.with("direction", "tx"), tx.v)
	}
	if !rx.missing {
		e.emit(nvlinkData, l.with("direction", "rx"), rx.v)
	}
}

// asFloat is a reading as a Device holds it: nil when unset.
func asFloat[T int | uint64 | float64](v reading.Opt[T]) *float64 {
	if !v.OK {
		return nil
	}
	f := float64(v.Value)
	return &f
}

// optional emits a reading the device gave, and nothing for one it did
// not (any vendor: their readers share reading.Opt).
func optional[T int | uint64 | float64](e emitter, m metric, l labels, v reading.Opt[T]) {
	if v.OK {
		e.emit(m, l, float64(v.Value))
	}
}

// migInstance is the mig_instance label of a GPU instance ID, "" where it
// could not be read.
func migInstance(id int) string {
	if id < 0 {
		return ""
	}
	return strconv.Itoa(id)
}
