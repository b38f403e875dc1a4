package demo

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/xpu-exporter/xpu_exporter/attribution/kubernetes"
)

// AMD GPUs of a scenario (vendor: amd) are not simulated through NVML: they
// are written as the amdgpu driver lays them out in sysfs, and their
// processes' DRM fdinfo into the demo's procfs, so that the exporter reads
// them with its production code through --path.sysfs and --path.procfs.
// Each file's format is the one fixtures/amd/SOURCES.md documents with its
// kernel source; the layout follows an MI300X (gc 9.4.3): no edge sensor
// and no power1_average in hwmon, power in µW, temperatures in m°C, a
// gpu_metrics v1.6 table, compute partitions as amdgpu_xcp_<n> platform
// devices joined to their GPU through KFD's topology.

// PartitionSpec is one compute partition of an AMD GPU.
type PartitionSpec struct {
	Processes []ProcessSpec `yaml:"processes"`
}

// amdPartitionModes names a partition count as the driver's
// current_compute_partition prints it (amdgpu_gfx.c); MI300X has 8 XCCs.
var amdPartitionModes = map[int]string{1: "SPX", 2: "DPX", 4: "QPX", 8: "CPX"}

const amdXCCs = 8

func (d *DeviceSpec) isAMD() bool { return d.Vendor == VendorAMD }

// amdOnlyKeys are readings only a simulated AMD GPU takes.
var amdOnlyKeys = map[string]string{
	// driver_reloads counts amdgpu reloads (a counter): each time it
	// passes a whole number, the driver is reloaded and its RAS counts
	// start again from 0, as they live in the driver's RAS objects.
	"driver_reloads": "count (counter)",
	// xgmi_read and xgmi_write are the bytes the GPU's XGMI links carried
	// since the driver was loaded, spread evenly over its amdXGMILinks
	// links (gpu_metrics' per-link xgmi_read/write_data_acc, in KB).
	"xgmi_read":  "bytes over the XGMI links (counter)",
	"xgmi_write": "bytes over the XGMI links (counter)",
	// pcie_naks is amdgpu's pcie_replay_count: NAKs the link generated
	// and received.
	"pcie_naks": "count (counter)",
}

// amdXGMILinks are the XGMI links of an MI300X in an 8-GPU hive, one to
// each peer: gpu_metrics has 8 slots (NUM_XGMI_LINKS), the last all-ones.
const amdXGMILinks = 7

// amdKeys are the readings an AMD GPU takes: those writeGPU and rasFile
// write into the tree. The others are NVML's or hl-smi's, which amdgpu has
// no file for.
var amdKeys = []string{
	"utilization", "memory_utilization", "memory_used", "temperature", "memory_temperature",
	"power", "energy", "clock_graphics", "clock_memory", "pcie_generation", "pcie_max_generation",
	"pcie_width", "pcie_max_width", "pcie_replays", "ecc_corrected", "ecc_uncorrected", "driver_reloads",
	"xgmi_read", "xgmi_write", "pcie_naks",
}

// amdRASKeys are the readings that fill ras/umc_err_count.
var amdRASKeys = []string{"ecc_uncorrected", "ecc_corrected"}

// amdEmergencyFault, in faults.unsupported, leaves out temp2_emergency and
// temp3_emergency, as kernels did on MI300X (gc 9.4.3) before
// hwmon_attributes_visible showed them there (fixtures/amd/SOURCES.md).
const amdEmergencyFault = "temperature_emergency"

// amdTempLimits are the limits every simulated MI300X shows, °C, by hwmon
// channel: illustrative values of the order the firmware gives, the
// throttle limit (crit) some degrees below shutdown (emergency).
var amdTempLimits = []struct {
	channel         string
	crit, emergency int
}{{"temp2", 100, 110}, {"temp3", 95, 105}}

func init() {
	for k, unit := range amdOnlyKeys {
		MetricKeys[k] = unit
	}
}

// amdDefaults fills what an AMD device lacks in the forms amdgpu gives:
// unique_id as 16 hexadecimal digits, the PCI address in sysfs form.
func (d *DeviceSpec) amdDefaults(node string, i int) {
	if d.UUID == "" {
		d.UUID = fmt.Sprintf("%08x%08x", hashString(node), 0xa0000000+i)
	}
	if d.PCIBusID == "" {
		bus, dev := pciSlot(0x0c, i)
		d.PCIBusID = fmt.Sprintf("0000:%02x:%02x.0", bus, dev)
	}
	if d.Serial == "" {
		d.Serial = fmt.Sprintf("692251%08d", i)
	}
	if d.VBIOSVersion == "" {
		d.VBIOSVersion = "113-M3000100-102"
	}
}

// validateVendor checks what only one vendor's devices may have.
func (d *DeviceSpec) validateVendor() []error {
	var errs []error
	if !d.isAMD() {
		if len(d.Partitions) > 0 {
			errs = append(errs, errors.New("partitions: only AMD GPUs have compute partitions (vendor: amd); NVIDIA GPUs use mig"))
		}
		for _, k := range sortedKeys(d.Metrics) {
			if _, ok := amdOnlyKeys[k]; ok {
				errs = append(errs, fmt.Errorf("metrics.%s: only an AMD GPU (vendor: amd) has this reading", k))
			}
		}
		if slices.Contains(d.Faults.Unsupported, amdEmergencyFault) {
			errs = append(errs, fmt.Errorf("faults.unsupported: %q: only an AMD GPU (vendor: amd) has hwmon emergency limits", amdEmergencyFault))
		}
		return errs
	}
	for _, k := range sortedKeys(d.Metrics) {
		if _, known := MetricKeys[k]; known && !slices.Contains(amdKeys, k) {
			errs = append(errs, fmt.Errorf("metrics.%s: the simulated amdgpu gives no such reading (an AMD GPU takes %s)", k, strings.Join(amdKeys, ", ")))
		}
	}
	if len(d.ThrottleReasons) > 0 {
		errs = append(errs, errors.New("throttle_reasons: the simulated amdgpu reports none"))
	}
	if len(d.MaxClocksMHz) > 0 {
		errs = append(errs, errors.New("max_clocks_mhz: the simulated amdgpu serves no maximum clock"))
	}
	// The simulated amdgpu answers no NVML call; of the faults, it takes
	// the RAS file's: unsupported (no ras/umc_err_count, as on a part or
	// firmware without UMC RAS) and errors (the driver's "Query currently
	// inaccessible"); and lost and lost_after, a GPU fallen off the bus.
	f := d.Faults
	if len(f.NoPermission)+len(f.Hang)+len(f.Panic)+len(f.FailingLinks) > 0 {
		errs = append(errs, errors.New("faults: an AMD GPU takes only lost, lost_after, and unsupported and errors of "+strings.Join(amdRASKeys, " or ")))
	}
	for field, keys := range map[string][]string{"unsupported": f.Unsupported, "errors": f.Errors} {
		for _, k := range keys {
			if !slices.Contains(amdRASKeys, k) && (field != "unsupported" || k != amdEmergencyFault) {
				errs = append(errs, fmt.Errorf("faults.%s: %q; an AMD GPU's faults are its RAS file's, %s, and unsupported %s", field, k, strings.Join(amdRASKeys, " or "), amdEmergencyFault))
			}
		}
	}
	if d.PowerLimitWatts == nil {
		// hwmon's power1_cap, which every Instinct has, and the curve of
		// the default power reading are the limit's.
		errs = append(errs, errors.New("power_limit_watts: missing; an AMD GPU's hwmon has power1_cap (set it on the device or in defaults)"))
	}
	if d.inMIGMode() {
		errs = append(errs, errors.New("mig: an AMD GPU has compute partitions (partitions), not MIG"))
	}
	if d.NVLinks != nil {
		errs = append(errs, errors.New("nvlinks: an AMD GPU has no NVLink"))
	}
	if n := len(d.Partitions); n > 0 {
		if _, ok := amdPartitionModes[n]; !ok || n == 1 {
			errs = append(errs, fmt.Errorf("partitions: %d; an MI300X has 2 (DPX), 4 (QPX) or 8 (CPX)", n))
		}
		if len(d.Processes) > 0 {
			errs = append(errs, errors.New("processes: a partitioned GPU runs processes in its partitions"))
		}
	}
	// The PCI address is the ROCm device plugin's ID of the GPU, and
	// unique_id its uuid label, as amdgpu prints it ("%016llx").
	if ref, err := kubernetes.NormalizeDeviceID("amd.com/gpu", d.PCIBusID); err != nil || ref.PCIBusID != d.PCIBusID || !strings.HasPrefix(d.PCIBusID, "0000:") {
		errs = append(errs, fmt.Errorf("pci_bus_id: %q is not in sysfs form, e.g. 0000:0c:00.0", d.PCIBusID))
	}
	if len(d.UUID) != 16 || strings.Trim(d.UUID, "0123456789abcdef") != "" {
		errs = append(errs, fmt.Errorf("uuid: %q is not an amdgpu unique_id (16 lower-case hexadecimal digits)", d.UUID))
	}
	return errs
}

// allProcesses lists a device's processes, its partitions' and MIG
// instances' included.
func (d *DeviceSpec) allProcesses() []ProcessSpec {
	procs := slices.Clone(d.Processes)
	for _, m := range d.MIG {
		procs = append(procs, m.Processes...)
	}
	for _, p := range d.Partitions {
		procs = append(procs, p.Processes...)
	}
	return procs
}

// HasAMD says whether the scenario has AMD GPUs.
func (s *Scenario) HasAMD() bool {
	return slices.ContainsFunc(s.Devices, func(d DeviceSpec) bool { return d.isAMD() })
}

// AMDSim writes the scenario's AMD GPUs into a sysfs tree and their
// processes' fdinfo into a procfs tree, as they are at a given time.
type AMDSim struct {
	s      *Scenario
	sysfs  string
	procfs string
	start  time.Time
	gpus   []amdGPU

	mu sync.Mutex
	// engine is each process's accumulated gfx engine time in ns, and
	// last the time it was accumulated to: busy time is the integral of
	// the process's utilization, so it is summed step by step.
	engine map[uint32]float64
	last   map[uint32]time.Time
	// printed is the engine time each process's fdinfo last showed, and
	// writes how often it was written, for ProcessSpec.EngineDip and
	// EngineDipToZero.
	printed map[uint32]uint64
	writes  map[uint32]int
	// gen is the churn generation each PID's counters belong to: a PID
	// that comes back in a later generation is a new process, whose
	// client starts from nothing.
	gen map[uint32]uint64
	// clients are each process's DRM client ID, by PID, in the churn
	// generation it was given in, from nextClient: the kernel numbers
	// clients with one counter for the whole node as they open
	// (drm_file.c, drm_file_alloc: "file->client_id =
	// atomic64_inc_return(&ident)"), so an ID says nothing of its PID.
	clients    map[uint32]drmClient
	nextClient uint64
	// rasInterrupt is whether any GPU has Faults.RASInterrupt. The driver
	// keeps one flag for every amdgpu device of the node (amdgpu_ras.h:
	// "extern atomic_t amdgpu_ras_in_intr", read by
	// amdgpu_ras_intr_triggered), which the Instinct drivers'
	// print_clk_levels test: while it is up, every GPU's pp_dpm_sclk and
	// pp_dpm_mclk print "unavailable", not only the faulty one's; and the
	// reset it starts takes the whole XGMI hive's RAS files (writeGPU).
	rasInterrupt bool
	// energy is each GPU's energy counter (J) as of energyAt, by scenario
	// index: the integral of its power.
	energy   map[int]float64
	energyAt map[int]time.Time
	// tables counts each GPU's gpu_metrics writes, for Faults.XGMIGaps;
	// under mu, which WriteAt holds.
	tables map[int]int
	stop   chan struct{}
	done   chan struct{}
}

// drmClient is a DRM client ID and the churn generation of the process
// it was given to.
type drmClient struct{ gen, id uint64 }

type amdGPU struct {
	spec   *DeviceSpec
	index  int // among the scenario's devices, seeds its values
	card   int
	render int
	parts  []amdPart
}

type amdPart struct {
	spec   *PartitionSpec
	xcp    int // amdgpu_xcp_<n>; -1 for partition 0, the GPU's own function
	card   int
	render int
}

// newAMDSim lays out the AMD GPUs: GPU j is card<j+1> and renderD<128+j>;
// the further partitions follow as amdgpu_xcp_<n> with the next cards and
// render minors, numbered across the node as the amdxcp driver does.
func (s *Scenario) newAMDSim(sysfs, procfs string, start time.Time) *AMDSim {
	a := &AMDSim{s: s, sysfs: sysfs, procfs: procfs, start: start, engine: map[uint32]float64{}, last: map[uint32]time.Time{}, printed: map[uint32]uint64{}, writes: map[uint32]int{}, gen: map[uint32]uint64{}, clients: map[uint32]drmClient{}, energy: map[int]float64{}, energyAt: map[int]time.Time{}, tables: map[int]int{}}
	for i := range s.Devices {
		if d := &s.Devices[i]; d.isAMD() {
			a.gpus = append(a.gpus, amdGPU{spec: d, index: i})
			a.rasInterrupt = a.rasInterrupt || d.Faults.RASInterrupt
		}
	}
	next, xcp := len(a.gpus), 0
	for j := range a.gpus {
		g := &a.gpus[j]
		g.card, g.render = j+1, 128+j
		for k := range g.spec.Partitions {
			p := amdPart{spec: &g.spec.Partitions[k], xcp: -1, card: g.card, render: g.render}
			if k > 0 {
				p.xcp, p.card, p.render = xcp, next+1, 128+next
				xcp++
				next++
			}
			g.parts = append(g.parts, p)
		}
	}
	return a
}

// WriteAt writes every file as it reads at time t. A GPU's sysfs files are
// rewritten in place (writeInPlace), as the exporter keeps them open the
// way sysfs allows; the other files are replaced by rename (writeAtomic).
func (a *AMDSim) WriteAt(t time.Time) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var errs []error
	kfd := []string{"cpu_cores_count 96\nsimd_count 0\ndrm_render_minor 0\ndomain 0\nlocation_id 0\n"}
	for _, g := range a.gpus {
		if a.lost(g, t) {
			errs = append(errs, a.removeGPU(g))
			continue
		}
		errs = append(errs, a.writeGPU(g, t))
		dom, loc := pciLocation(g.spec.PCIBusID)
		if len(g.parts) == 0 {
			kfd = append(kfd, fmt.Sprintf("cpu_cores_count 0\nsimd_count 1216\ndrm_render_minor %d\ndomain %d\nlocation_id %d\n", g.render, dom, loc))
		}
		// Each partition's node has the partition's number ORed into
		// location_id, as the kernel writes it (kfd_topology.c,
		// kfd_topology_add_device: location_id |= node_id when the GPU
		// has several KFD nodes).
		for i, p := range g.parts {
			kfd = append(kfd, fmt.Sprintf("cpu_cores_count 0\nsimd_count %d\ndrm_render_minor %d\ndomain %d\nlocation_id %d\n", 1216/len(g.parts), p.render, dom, loc|i))
		}
	}
	nodes := filepath.Join(a.sysfs, "class/kfd/kfd/topology/nodes")
	for i, props := range kfd {
		errs = append(errs, writeAtomic(filepath.Join(nodes, fmt.Sprint(i), "properties"), props))
	}
	// The nodes of a GPU gone are gone, and none stays past the last.
	if entries, err := os.ReadDir(nodes); err == nil {
		for _, e := range entries {
			if n, err := strconv.Atoi(e.Name()); err == nil && n >= len(kfd) {
				errs = append(errs, os.RemoveAll(filepath.Join(nodes, e.Name())))
			}
		}
	}
	errs = append(errs, a.writeKFDProcesses())
	return errors.Join(errs...)
}

// lost says whether g has fallen off the bus at t (faults lost,
// lost_after).
func (a *AMDSim) lost(g amdGPU, t time.Time) bool {
	f := g.spec.Faults
	return f.Lost || (f.lostAfter > 0 && t.Sub(a.start) >= f.lostAfter)
}

// removeGPU takes g's DRM nodes and its partitions' out of /sys/class/drm,
// as a GPU that fell off the bus leaves it (its KFD nodes go too, in
// WriteAt). Its processes' fdinfo stays as last written: a client's file
// stays open.
func (a *AMDSim) removeGPU(g amdGPU) error {
	var errs []error
	for _, n := range []string{fmt.Sprintf("card%d", g.card), fmt.Sprintf("renderD%d", g.render)} {
		errs = append(errs, removeIfPresent(filepath.Join(a.sysfs, "class", "drm", n)))
	}
	for _, p := range g.parts {
		if p.xcp >= 0 {
			for _, n := range []string{fmt.Sprintf("card%d", p.card), fmt.Sprintf("renderD%d", p.render)} {
				errs = append(errs, removeIfPresent(filepath.Join(a.sysfs, "class", "drm", n)))
			}
		}
	}
	return errors.Join(errs...)
}

func removeIfPresent(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// pciLocation is the domain and KFD location_id (bus << 8 | devfn) of a
// sysfs PCI address.
func pciLocation(addr string) (domain, location int) {
	var bus, dev, fn int
	fmt.Sscanf(addr, "%x:%x:%x.%d", &domain, &bus, &dev, &fn)
	return domain, bus<<8 | dev<<3 | fn
}

// busy is the process's utilization at t: its value while in the busy part
// of its duty cycle, 0 otherwise.
func (a *AMDSim) busy(p *ProcessSpec, index int, t time.Time) float64 {
	if p.Utilization == nil || !p.busyAt(t.Sub(a.start)) {
		return 0
	}
	return clamp01(seeded(*p.Utilization, fmt.Sprint("amd-proc", p.PID), index).At(a.start, t))
}

func seeded(v Value, key string, index int) Value {
	v.seed = uint64(hashString(key))<<8 | uint64(index)
	return v
}

func clamp01(v float64) float64 { return math.Max(0, math.Min(1, v)) }

// energyJ advances GPU index's energy counter to t at power, the watts it
// draws now, from the previous write (from boot at the first): the counter
// grows as the power the GPU reads, which an idle GPU's did not (it grew at
// the mean of its power range whatever its load). Writes are a fraction of
// a second apart while the demo animates them.
func (a *AMDSim) energyJ(index int, power float64, t time.Time) float64 {
	last, ok := a.energyAt[index]
	if !ok {
		last = a.start
	}
	if t.After(last) {
		a.energy[index] += power * t.Sub(last).Seconds()
		a.energyAt[index] = t
	}
	return a.energy[index]
}

// engineNS advances the busy-time counter of the process's instance pid in
// churn generation gen to t, in steps of at most a second, each at the
// utilization of its start. The scenario's own processes run from boot; a
// later generation's from when it is first written, shortly after its
// churn.
func (a *AMDSim) engineNS(p *ProcessSpec, pid uint32, gen uint64, index int, t time.Time) uint64 {
	if g, ok := a.gen[pid]; !ok || g != gen {
		delete(a.engine, pid)
		delete(a.last, pid)
		delete(a.printed, pid)
		delete(a.writes, pid)
		a.gen[pid] = gen
	}
	last, ok := a.last[pid]
	if !ok {
		last = a.start
		if gen > 0 {
			last = t
		}
	}
	for last.Before(t) {
		step := min(time.Second, t.Sub(last))
		a.engine[pid] += a.busy(p, index, last) * float64(step.Nanoseconds())
		last = last.Add(step)
	}
	a.last[pid] = last
	ns := uint64(a.engine[pid])
	if p.EngineDip || p.EngineDipToZero {
		a.writes[pid]++
		if was := a.printed[pid]; a.writes[pid]%3 == 0 && was > uint64(time.Millisecond) {
			ns = was - uint64(time.Millisecond)
			if p.EngineDipToZero {
				ns = 0 // no line: writeClient prints none at 0
			}
		}
	}
	a.printed[pid] = ns
	return ns
}

func (a *AMDSim) writeGPU(g amdGPU, t time.Time) error {
	d := g.spec
	m := func(key string, def float64) float64 {
		v, ok := d.Metrics[key]
		if !ok {
			return def
		}
		return seeded(v, key, g.index).At(a.s.origin(key, a.start), t)
	}
	pciDir := filepath.Join(a.sysfs, "devices", "pci0000:00", "0000:00:01.1", d.PCIBusID)
	files := map[string]string{}
	// Processes: their fdinfo, and their part of the partition's or GPU's
	// utilization and memory.
	groups := [][]ProcessSpec{d.Processes}
	nodes := []amdNodes{{g.card, g.render}}
	if len(g.parts) > 0 {
		groups, nodes = nil, nil
		for _, p := range g.parts {
			groups = append(groups, p.spec.Processes)
			nodes = append(nodes, amdNodes{p.card, p.render})
		}
	}
	var partUtil []float64
	memUsed := 0.0
	for k, procs := range groups {
		u := 0.0
		for i := range procs {
			p := &procs[i]
			b := a.busy(p, g.index, t)
			u += b
			mem := 0.0
			if p.MemoryUsed != nil {
				mem = seeded(*p.MemoryUsed, fmt.Sprint("amd-mem", p.PID), g.index).At(a.start, t)
			}
			memUsed += mem
			if err := a.writeClient(p, d.PCIBusID, nodes[k], g.index, mem, t); err != nil {
				return err
			}
		}
		partUtil = append(partUtil, clamp01(u))
	}
	util := m("utilization", mean(partUtil))
	memTotal := d.MemoryTotal.Mean()
	memUsed = math.Min(m("memory_used", memUsed), memTotal)
	power := m("power", 140+util*(d.PowerLimitWatts.Mean()-140))
	energy := m("energy", a.energyJ(g.index, power, t))

	files["vendor"] = "0x1002\n"
	files["device"] = "0x74a1\n"
	files["unique_id"] = d.UUID + "\n"
	files["product_name"] = d.Model + "\n"
	files["serial_number"] = d.Serial + "\n"
	files["vbios_version"] = d.VBIOSVersion + "\n"
	files["gpu_busy_percent"] = fmt.Sprintf("%d\n", int(math.Round(util*100)))
	files["mem_busy_percent"] = fmt.Sprintf("%d\n", int(math.Round(clamp01(m("memory_utilization", util/3))*100)))
	files["mem_info_vram_total"] = fmt.Sprintf("%d\n", uint64(memTotal))
	files["mem_info_vram_used"] = fmt.Sprintf("%d\n", uint64(memUsed))
	gen, maxGen := int(m("pcie_generation", 5)), int(m("pcie_max_generation", 5))
	files["current_link_speed"] = pcieSpeed(gen)
	files["max_link_speed"] = pcieSpeed(maxGen)
	files["current_link_width"] = fmt.Sprintf("%d\n", int(m("pcie_width", 16)))
	files["max_link_width"] = fmt.Sprintf("%d\n", int(m("pcie_max_width", 16)))
	files["pcie_replay_count"] = fmt.Sprintf("%d\n", uint64(m("pcie_naks", 0)))
	sclk := int(m("clock_graphics", 500+util*1600))
	mclk := int(m("clock_memory", 1300))
	files["pp_dpm_sclk"] = gfxClockTable(500, 2100, sclk)
	files["pp_dpm_mclk"] = fmt.Sprintf("0: 900Mhz\n1: %dMhz *\n", mclk)
	files["ras/features"] = "feature mask: 0x00003fff\n"
	umc, umcFile := a.rasFile(g, m, t)
	if umc != "" {
		files[umcFile] = umc
	}
	files["ras/gfx_err_count"] = "ue: 0\nce: 0\n"
	if a.rasInterrupt {
		// smu_v13_0_6_print_clk_levels: "if (amdgpu_ras_intr_triggered())
		// return sysfs_emit(buf, "unavailable\n");".
		files["pp_dpm_sclk"], files["pp_dpm_mclk"] = "unavailable\n", "unavailable\n"
		// The GPU is reset, with every GPU of its XGMI hive (the simulated
		// MI300Xs are one), and amdgpu_device_gpu_recover calls
		// amdgpu_ras_set_error_query_ready(tmp_adev, false) for each: until
		// the reset is done every RAS file of theirs, whatever its block,
		// prints what amdgpu_ras_sysfs_read does then.
		for _, f := range []string{umcFile, "ras/gfx_err_count"} {
			if _, ok := files[f]; ok {
				files[f] = rasInaccessible
			}
		}
	}
	hw := "hwmon/hwmon" + fmt.Sprint(2+g.card)
	junction := m("temperature", 35+util*45)
	files[hw+"/name"] = "amdgpu\n"
	files[hw+"/temp2_input"] = fmt.Sprintf("%d\n", int(junction*1000))
	files[hw+"/temp2_label"] = "junction\n"
	files[hw+"/temp3_input"] = fmt.Sprintf("%d\n", int(m("memory_temperature", junction-6)*1000))
	files[hw+"/temp3_label"] = "mem\n"
	for _, l := range amdTempLimits {
		files[hw+"/"+l.channel+"_crit"] = fmt.Sprintf("%d\n", l.crit*1000)
		if !slices.Contains(d.Faults.Unsupported, amdEmergencyFault) {
			files[hw+"/"+l.channel+"_emergency"] = fmt.Sprintf("%d\n", l.emergency*1000)
		}
	}
	files[hw+"/power1_input"] = fmt.Sprintf("%d\n", uint64(power*1e6))
	files[hw+"/power1_cap"] = fmt.Sprintf("%d\n", uint64(d.PowerLimitWatts.Mean()*1e6))
	mode := amdPartitionModes[max(1, len(g.parts))]
	files["current_compute_partition"] = mode + "\n"
	files["available_compute_partition"] = "SPX, DPX, QPX, CPX\n"
	files["current_memory_partition"] = "NPS1\n"
	files["available_memory_partition"] = "NPS1, NPS4\n"
	files["gpu_metrics"] = string(gpuMetricsV1_6(gpuMetricsValues{
		junction: junction, mem: m("memory_temperature", junction-6), power: power, energy: energy,
		gfx: util, umc: clamp01(m("memory_utilization", util/3)), pcieGen: gen, pcieWidth: int(m("pcie_width", 16)),
		replays: uint64(m("pcie_replays", 0)), sclk: sclk, mclk: mclk, partitions: partUtil,
		xgmiRead: a.xgmiLinks(g, "xgmi_read", m), xgmiWrite: a.xgmiLinks(g, "xgmi_write", m),
	}))
	a.tables[g.index]++
	var errs []error
	for name, content := range files {
		errs = append(errs, writeInPlace(filepath.Join(pciDir, name), content))
	}
	if umc == "" {
		if err := os.Remove(filepath.Join(pciDir, umcFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	errs = append(errs,
		writeAtomic(filepath.Join(pciDir, "drm", fmt.Sprintf("card%d", g.card), "dev"), fmt.Sprintf("226:%d\n", g.card)),
		writeAtomic(filepath.Join(pciDir, "drm", fmt.Sprintf("renderD%d", g.render), "dev"), fmt.Sprintf("226:%d\n", g.render)),
		symlink("../../../../bus/pci/drivers/amdgpu", filepath.Join(pciDir, "driver")),
		// Every DRM minor, card and render node alike, links back to its
		// device, as the DRM core registers it with its parent
		// (drm_sysfs.c, drm_sysfs_minor_alloc: kdev->parent).
		symlink("../../../"+d.PCIBusID, filepath.Join(pciDir, "drm", fmt.Sprintf("card%d", g.card), "device")),
		symlink("../../../"+d.PCIBusID, filepath.Join(pciDir, "drm", fmt.Sprintf("renderD%d", g.render), "device")),
		symlink(filepath.Join("..", "..", "devices", "pci0000:00", "0000:00:01.1", d.PCIBusID, "drm", fmt.Sprintf("card%d", g.card)),
			filepath.Join(a.sysfs, "class", "drm", fmt.Sprintf("card%d", g.card))),
		symlink(filepath.Join("..", "..", "devices", "pci0000:00", "0000:00:01.1", d.PCIBusID, "drm", fmt.Sprintf("renderD%d", g.render)),
			filepath.Join(a.sysfs, "class", "drm", fmt.Sprintf("renderD%d", g.render))),
	)
	for _, p := range g.parts {
		if p.xcp < 0 {
			continue
		}
		plat := filepath.Join(a.sysfs, "devices", "platform", fmt.Sprintf("amdgpu_xcp_%d", p.xcp))
		errs = append(errs,
			writeAtomic(filepath.Join(plat, "drm", fmt.Sprintf("card%d", p.card), "dev"), fmt.Sprintf("226:%d\n", p.card)),
			writeAtomic(filepath.Join(plat, "drm", fmt.Sprintf("renderD%d", p.render), "dev"), fmt.Sprintf("226:%d\n", p.render)),
			symlink("../../../amdgpu_xcp_"+fmt.Sprint(p.xcp), filepath.Join(plat, "drm", fmt.Sprintf("card%d", p.card), "device")),
			symlink("../../../amdgpu_xcp_"+fmt.Sprint(p.xcp), filepath.Join(plat, "drm", fmt.Sprintf("renderD%d", p.render), "device")),
			symlink(filepath.Join("..", "..", "devices", "platform", fmt.Sprintf("amdgpu_xcp_%d", p.xcp), "drm", fmt.Sprintf("card%d", p.card)),
				filepath.Join(a.sysfs, "class", "drm", fmt.Sprintf("card%d", p.card))),
			symlink(filepath.Join("..", "..", "devices", "platform", fmt.Sprintf("amdgpu_xcp_%d", p.xcp), "drm", fmt.Sprintf("renderD%d", p.render)),
				filepath.Join(a.sysfs, "class", "drm", fmt.Sprintf("renderD%d", p.render))),
		)
	}
	return errors.Join(errs...)
}

// rasFile is the content of ras/umc_err_count ("" when the file is
// absent) and its name at t. The file prints the counts of the driver's
// UMC RAS object (amdgpu_ras.c, amdgpu_ras_sysfs_read: "ue: %lu\nce:
// %lu\nde: %lu\n" for UMC on kernels with deferred errors), which start at
// 0 when the driver loads: after a reload (driver_reloads passing a whole
// number) they count from the readings' values at that moment. The moment
// is worked out from the timeline, not remembered by this process: a
// reload happened when it happened, however often the exporter restarts
// (review11 R8: the counts jumped up by their value at the reload after an
// exporter restart). While the driver cannot query the block, it prints
// "Query currently inaccessible".
func (a *AMDSim) rasFile(g amdGPU, m func(string, float64) float64, t time.Time) (content, name string) {
	name = "ras/umc_err_count"
	f := g.spec.Faults
	if slices.ContainsFunc(amdRASKeys, func(k string) bool { return slices.Contains(f.Unsupported, k) }) {
		return "", name
	}
	if slices.ContainsFunc(amdRASKeys, func(k string) bool { return slices.Contains(f.Errors, k) }) {
		return rasInaccessible, name
	}
	var reloaded time.Time
	if v, ok := g.spec.Metrics["driver_reloads"]; ok {
		reloaded = lastReload(v, a.s.origin("ecc_corrected", a.start), t)
	}
	count := func(k string) uint64 {
		c := m(k, 0)
		if v, ok := g.spec.Metrics[k]; ok && !reloaded.IsZero() {
			c -= seeded(v, k, g.index).At(a.s.origin(k, a.start), reloaded)
		}
		return uint64(max(0, c))
	}
	return fmt.Sprintf("ue: %d\nce: %d\nde: 0\n", count("ecc_uncorrected"), count("ecc_corrected")), name
}

// rasInaccessible is what amdgpu_ras_sysfs_read prints while the
// device's error query is not ready ("if
// (!amdgpu_ras_get_error_query_ready(obj->adev)) return sysfs_emit(buf,
// "Query currently inaccessible\n")").
const rasInaccessible = "Query currently inaccessible\n"

// lastReload is when the driver was last reloaded by t, a counter of
// reloads from origin (the driver's first load) passing its last whole
// number; zero when it has not passed one since origin. A fixed count
// reloaded before the simulation, at a moment it does not tell: the RAS
// counts run from origin.
func lastReload(reloads Value, origin, t time.Time) time.Time {
	if reloads.Fixed != nil || reloads.Rate <= 0 {
		return time.Time{}
	}
	n := math.Floor(reloads.At(origin, t))
	if n <= math.Floor(reloads.Start) {
		return time.Time{}
	}
	return origin.Add(time.Duration((n - reloads.Start) / reloads.Rate * float64(time.Second)))
}

// amdNodes are the DRM nodes of a GPU or partition: card<card>,
// renderD<render>.
type amdNodes struct{ card, render int }

// writeClient writes the process's one DRM client, fd 5 on its render
// node (or primary node: ProcessSpec.DRMNode), as amdgpu_show_fdinfo
// prints it with drm_print_memory_stats (drm-total-/drm-resident- in the
// unit drmSize picks), its legacy drm-memory-vram alias of the resident
// size in KiB, and one
// drm-engine-gfx line once the client has used the engine. drm-total-vram
// counts a buffer by its preferred placement whether or not it is there
// (amdgpu_bo_mem_stats_placement): every client here has an evicted 512
// MiB buffer, in its total and not resident.
func (a *AMDSim) writeClient(p *ProcessSpec, pdev string, nodes amdNodes, index int, mem float64, t time.Time) error {
	// The process of the current churn generation (churn_every): the old
	// one's directory goes with it.
	gen := a.s.stats.gen.Load()
	pid := churnPID(p.PID, gen)
	dir := filepath.Join(a.procfs, fmt.Sprint(pid))
	node := fmt.Sprintf("/dev/dri/renderD%d", nodes.render)
	if p.DRMNode == "primary" {
		node = fmt.Sprintf("/dev/dri/card%d", nodes.card)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "pos:\t0\nflags:\t02100002\nmnt_id:\t24\nino:\t%d\n", 1000+nodes.render)
	c, ok := a.clients[pid]
	if !ok || c.gen != gen {
		a.nextClient++
		c = drmClient{gen: gen, id: a.nextClient}
		a.clients[pid] = c
	}
	fmt.Fprintf(&b, "drm-driver:\tamdgpu\ndrm-client-id:\t%d\ndrm-pdev:\t%s\npasid:\t%d\n", c.id, pdev, 32768+pid%32768)
	kib := uint64(mem) / 1024
	fmt.Fprintf(&b, "drm-total-vram:\t%s\ndrm-resident-vram:\t%s\ndrm-total-gtt:\t%s\ndrm-resident-gtt:\t%s\ndrm-memory-vram:\t%d KiB\namd-evicted-vram:\t524288 KiB\n",
		drmSize((kib+512*1024)*1024), drmSize(kib*1024), drmSize(2<<20), drmSize(2<<20), kib)
	if p.KFD {
		// Its work is on KFD queues: no engine time, and fd 4 on /dev/kfd.
		return errors.Join(
			writeAtomic(filepath.Join(dir, "fdinfo", "5"), b.String()),
			symlink(node, filepath.Join(dir, "fd", "5")),
			symlink("/dev/kfd", filepath.Join(dir, "fd", "4")),
		)
	}
	if ns := a.engineNS(p, pid, gen, index, t); ns > 0 {
		fmt.Fprintf(&b, "drm-engine-gfx:\t%d ns\n", ns)
	}
	return errors.Join(
		writeAtomic(filepath.Join(dir, "fdinfo", "5"), b.String()),
		symlink(node, filepath.Join(dir, "fd", "5")),
	)
}

// writeKFDProcesses lists the KFD processes of the current churn
// generation under class/kfd/kfd/proc, each a directory with its pasid,
// and removes those of processes gone, as the driver does when a KFD
// process is released (kfd_process.c, kfd_process_remove_sysfs).
func (a *AMDSim) writeKFDProcesses() error {
	dir := filepath.Join(a.sysfs, "class/kfd/kfd/proc")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	gen := a.s.stats.gen.Load()
	want := map[string]bool{}
	var errs []error
	for _, g := range a.gpus {
		groups := [][]ProcessSpec{g.spec.Processes}
		for _, p := range g.parts {
			groups = append(groups, p.spec.Processes)
		}
		for _, procs := range groups {
			for i := range procs {
				if !procs[i].KFD {
					continue
				}
				pid := churnPID(procs[i].PID, gen)
				want[fmt.Sprint(pid)] = true
				errs = append(errs, writeAtomic(filepath.Join(dir, fmt.Sprint(pid), "pasid"), fmt.Sprintf("%d\n", 32768+pid%32768)))
			}
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, e := range entries {
		if !want[e.Name()] {
			errs = append(errs, os.RemoveAll(filepath.Join(dir, e.Name())))
		}
	}
	return errors.Join(errs...)
}

// pcieSpeed prints a generation's rate as the PCI core does
// (pci_speed_string).
func pcieSpeed(gen int) string {
	rates := []string{"2.5", "5.0", "8.0", "16.0", "32.0", "64.0"}
	if gen < 1 || gen > len(rates) {
		return "Unknown\n"
	}
	return rates[gen-1] + " GT/s PCIe\n"
}

func mean(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	sum := 0.0
	for _, v := range vs {
		sum += v
	}
	return sum / float64(len(vs))
}

type gpuMetricsValues struct {
	junction, mem, power, energy, gfx, umc float64
	pcieGen, pcieWidth                     int
	replays                                uint64
	sclk, mclk                             int
	partitions                             []float64
	// xgmiRead and xgmiWrite are the links' accumulators in KB, nil
	// where the scenario gives none (every slot all-ones).
	xgmiRead, xgmiWrite []amdLink
}

// amdLink is one XGMI link's accumulator; a link the firmware does not
// report in a table is left all-ones.
type amdLink struct {
	kb     uint64
	absent bool
}

// xgmiLinks spreads the GPU's XGMI counter key (bytes) over its links, in
// whole KB, as the firmware accumulates them. A link of Faults.XGMIGaps is
// left out of every other table, as smu_v13_0_6_ppt.c leaves a link it
// could not map (amdgpu_xgmi_get_ext_link) at the all-ones
// smu_cmn_init_soft_gpu_metrics filled the table with.
func (a *AMDSim) xgmiLinks(g amdGPU, key string, m func(string, float64) float64) []amdLink {
	if _, ok := g.spec.Metrics[key]; !ok {
		return nil
	}
	odd := a.tables[g.index]%2 == 1
	perLink := uint64(math.Max(0, m(key, 0)) / amdXGMILinks / 1000)
	links := make([]amdLink, amdXGMILinks)
	for i := range links {
		links[i] = amdLink{kb: perLink, absent: odd && slices.Contains(g.spec.Faults.XGMIGaps, i)}
	}
	return links
}

// gpuMetricsV1_6 builds struct gpu_metrics_v1_6 (kgd_pp_interface.h), 1664
// bytes, as smu_v13_0_6_ppt.c fills it: all 0xFF first
// (smu_cmn_init_soft_gpu_metrics), then the header and the fields the
// firmware gives. Offsets are those vendors/amd decodes (decodeV1_6).
func gpuMetricsV1_6(v gpuMetricsValues) []byte {
	b := make([]byte, 1664)
	for i := range b {
		b[i] = 0xff
	}
	le := binary.LittleEndian
	le.PutUint16(b[0:], 1664)
	b[2], b[3] = 1, 6
	le.PutUint16(b[4:], uint16(v.junction))                                                         // temperature_hotspot, °C
	le.PutUint16(b[6:], uint16(v.mem))                                                              // temperature_mem
	le.PutUint16(b[10:], uint16(v.power))                                                           // curr_socket_power, W
	le.PutUint16(b[12:], uint16(math.Round(v.gfx*100)))                                             // average_gfx_activity, %
	le.PutUint16(b[14:], uint16(math.Round(v.umc*100)))                                             // average_umc_activity, %
	le.PutUint64(b[16:], uint64(v.energy*65536))                                                    // energy_accumulator, 2^-16 J
	le.PutUint16(b[60:], uint16(v.pcieWidth))                                                       // pcie_link_width
	le.PutUint16(b[62:], uint16(10*[]float64{0, 2.5, 5, 8, 16, 32, 64}[min(max(v.pcieGen, 0), 6)])) // 0.1 GT/s
	le.PutUint64(b[104:], v.replays)                                                                // pcie_replay_count_acc
	for i, l := range v.xgmiRead {
		if !l.absent {
			le.PutUint64(b[128+8*i:], l.kb) // xgmi_read_data_acc[], KB
		}
	}
	for i, l := range v.xgmiWrite {
		if !l.absent {
			le.PutUint64(b[192+8*i:], l.kb) // xgmi_write_data_acc[], KB
		}
	}
	for i := 0; i < amdXCCs; i++ {
		le.PutUint16(b[264+2*i:], uint16(v.sclk)) // current_gfxclk[], MHz
	}
	le.PutUint16(b[304:], uint16(v.mclk)) // current_uclk, MHz
	parts := max(1, len(v.partitions))
	le.PutUint16(b[306:], uint16(parts)) // num_partition
	for p := 0; p < parts; p++ {
		u := v.gfx
		if p < len(v.partitions) {
			u = v.partitions[p]
		}
		// xcp_stats[p].gfx_busy_inst[]: one entry per XCC the partition has.
		for x := 0; x < amdXCCs/parts; x++ {
			le.PutUint32(b[312+p*168+4*x:], uint32(math.Round(u*100)))
		}
	}
	return b
}

func writeAtomic(path, content string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// writeInPlace rewrites the file at path keeping its inode, so that a
// reader holding it open, as the exporter holds sysfs attributes, reads the
// new content at its next read from offset 0; a file replaced by rename
// would leave that reader on the old inode forever. The content goes in
// with one write at offset 0, padded with newlines up to the old length,
// before the file is cut to size: a concurrent reader sees the old content,
// the new one, or the new one followed by blank lines, which every sysfs
// parser of vendors/amd skips as trailing white space; never an empty file
// nor the tail of the old value.
func writeInPlace(path, content string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	b := []byte(content)
	for int64(len(b)) < st.Size() {
		b = append(b, '\n')
	}
	_, err = f.WriteAt(b, 0)
	return errors.Join(err, f.Truncate(int64(len(content))), f.Close())
}

func symlink(target, path string) error {
	if cur, err := os.Readlink(path); err == nil && cur == target {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	os.Remove(path)
	return os.Symlink(target, path)
}

// Reset makes start the moment the simulated node booted, forgetting the
// busy time accumulated so far: tests replay a scenario from a fixed clock.
func (a *AMDSim) Reset(start time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.start = start
	clear(a.engine)
	clear(a.last)
	clear(a.printed)
	clear(a.writes)
	clear(a.gen)
	clear(a.clients)
	a.nextClient = 0
	clear(a.energy)
	clear(a.energyAt)
	clear(a.tables)
}

// Animate rewrites the files every interval, as the driver's values move,
// until Close.
func (a *AMDSim) Animate(interval time.Duration, now func() time.Time) {
	a.mu.Lock()
	if a.stop != nil {
		a.mu.Unlock()
		return
	}
	a.stop, a.done = make(chan struct{}), make(chan struct{})
	a.mu.Unlock()
	go func() {
		defer close(a.done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-a.stop:
				return
			case <-tick.C:
				a.WriteAt(now())
			}
		}
	}()
}

func (a *AMDSim) close() {
	a.mu.Lock()
	stop, done := a.stop, a.done
	a.mu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
}

// gfxClockTable is pp_dpm_sclk as the MI300 driver prints it
// (smu_v13_0_6_ppt.c, smu_v13_0_6_print_clk_levels, case SMU_SCLK): the
// current clock as a middle level "1: <now>Mhz *" when it is within 1 MHz
// of neither the soft minimum nor the maximum; else the two alone, each
// marked where the clock is within 1 MHz of it ("0: %uMhz %s\n", so an
// unmarked line ends in a space), both when they are that close.
func gfxClockTable(minMHz, maxMHz, now int) string {
	near := func(f int) bool { return max(f-now, now-f) <= 1 }
	if !near(minMHz) && !near(maxMHz) {
		return fmt.Sprintf("0: %dMhz\n1: %dMhz *\n2: %dMhz\n", minMHz, now, maxMHz)
	}
	mark := func(f int) string {
		if near(f) {
			return "*"
		}
		return ""
	}
	return fmt.Sprintf("0: %dMhz %s\n1: %dMhz %s\n", minMHz, mark(minMHz), maxMHz, mark(maxMHz))
}

// drmSize is a size as drm_print_memory_stats prints it (drm_file.c,
// print_size: units "", " KiB", " MiB", divided by 1024 while the size is
// not 0 and "IS_ALIGNED(sz, SZ_1K)"): 2 MiB is "2 MiB", 3 KiB "3 KiB",
// 0 "0".
func drmSize(bytes uint64) string {
	units := []string{"", " KiB", " MiB"}
	u := 0
	for ; u < len(units)-1; u++ {
		if bytes == 0 || bytes%1024 != 0 {
			break
		}
		bytes /= 1024
	}
	return fmt.Sprintf("%d%s", bytes, units[u])
}
