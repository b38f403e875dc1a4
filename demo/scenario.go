// Package demo simulates a GPU node from a scenario file: hardware through
// go-nvml's mock package, so that the exporter's production code paths run
// unchanged in demo mode, in end-to-end tests and when replaying a node
// layout from a bug report.
package demo

import (
	"bytes"
	"cmp"
	_ "embed"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/xpu-exporter/xpu_exporter/attribution/kubernetes"
	"github.com/xpu-exporter/xpu_exporter/attribution/kubernetes/kubelettest"
)

//go:embed default.yaml
var defaultScenario []byte

// Default returns the embedded scenario that `--demo` runs.
func Default() *Scenario {
	s, err := Parse(defaultScenario)
	if err != nil {
		panic("embedded demo scenario is invalid: " + err.Error())
	}
	return s
}

// Load reads and validates a scenario file.
func Load(path string) (*Scenario, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read scenario: %w", err)
	}
	s, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("scenario %s: %w", path, err)
	}
	return s, nil
}

// Scenario describes a simulated node.
type Scenario struct {
	// DriverLoaded is when the simulated driver was loaded, the origin of
	// its counters (energy, ECC, PCIe replays, NVLink): NVML counts them
	// "since the driver was last reloaded" (nvml.h), which an exporter
	// restart does not do. Zero: the start the NVML is made with. Set by
	// the program, not the scenario file.
	DriverLoaded time.Time `yaml:"-"`

	Node          string `yaml:"node"`
	DriverVersion string `yaml:"driver_version"`
	CUDAVersion   string `yaml:"cuda_version"`
	// NoDriver simulates a node without the NVIDIA driver; so does a
	// scenario without NVIDIA devices.
	NoDriver bool `yaml:"no_driver"`
	// PIDFD false simulates a kernel without pidfd_open(2) (PIDWatcher);
	// default true.
	PIDFD *bool `yaml:"pidfd"`
	// PIDFDLimit bounds the processes watched at once, as the exporter
	// bounds its pidfds by the descriptors it may hold (process.Exits);
	// those beyond are checked by their start time. 0: no bound.
	PIDFDLimit int `yaml:"pidfd_limit"`
	// GaudiDriverVersion is what hl-smi prints as driver_version.
	GaudiDriverVersion string `yaml:"gaudi_driver_version"`
	// HLSMI injects failures into the demo's hl-smi.
	HLSMI    HLSMIFaults  `yaml:"hl_smi"`
	Defaults DeviceSpec   `yaml:"defaults"`
	Devices  []DeviceSpec `yaml:"devices"`
	Events   []EventSpec  `yaml:"events"`
	// Kubernetes is the node as its kubelet reports it: pods with their
	// containers' device IDs, and the allocatable devices (the fake
	// kubelet's fixture format, see fixtures/kubelet/); nil without a
	// kubernetes section. Tests serve it from a kubelet of their own.
	Kubernetes *kubelettest.Fixture `yaml:"kubernetes"`
	Slurm      *SlurmSpec           `yaml:"slurm"`
	// Engines are inference engines served by the scenario's pods.
	Engines []EngineSpec `yaml:"engines"`
	// ChurnEvery replaces, that often, every pod by a new one (a new name
	// and UID) and every process by a new one (a new PID), as on a busy
	// cluster: soak tests prove that nothing the exporter keeps per owner,
	// process or engine target grows without bound. Empty: never.
	ChurnEvery string `yaml:"churn_every"`

	stats      *simStats
	churnEvery time.Duration
	// raw is the scenario's text, which the demo's hl-smi reads again.
	raw []byte
}

// EventSpec is an NVML event the simulated driver raises: once At after
// start, then, if Every is set, again every Every.
type EventSpec struct {
	Device int    `yaml:"device"` // index in devices
	Type   string `yaml:"type"`   // xid (default), double_bit_ecc, single_bit_ecc
	XID    uint64 `yaml:"xid"`
	At     string `yaml:"at"`
	Every  string `yaml:"every"`
	// GPUInstance and ComputeInstance name the MIG instance an Xid is
	// about (nvml.h, nvmlEventData_t: valid when the event "is
	// attributable to" one): a GPU instance alone is the whole of it,
	// with every compute instance it holds. Unset: the GPU's.
	GPUInstance     *int `yaml:"gpu_instance"`
	ComputeInstance *int `yaml:"compute_instance"`

	at, every time.Duration
}

// DeviceSpec is one simulated GPU. Unset fields take the scenario defaults.
type DeviceSpec struct {
	// Vendor is nvidia (default), gaudi (an Intel Gaudi device, served
	// through the demo's hl-smi) or amd (an AMD GPU, served through a
	// generated sysfs tree and DRM fdinfo, amdsim.go), not NVML.
	Vendor       string `yaml:"vendor"`
	UUID         string `yaml:"uuid"`
	Model        string `yaml:"model"`
	Serial       string `yaml:"serial"`
	PCIBusID     string `yaml:"pci_bus_id"`
	VBIOSVersion string `yaml:"vbios_version"`
	// MinorNumber is the N of the GPU's /dev/nvidiaN (nvmlDeviceGetMinorNumber);
	// default its place in the scenario. The driver numbers the files as
	// it probes the GPUs, which need not be NVML's (PCI bus) order.
	MinorNumber     *int             `yaml:"minor_number"`
	MemoryTotal     *Value           `yaml:"memory_total"`
	PowerLimitWatts *Value           `yaml:"power_limit_watts"`
	MaxClocksMHz    map[string]Value `yaml:"max_clocks_mhz"`
	Metrics         map[string]Value `yaml:"metrics"`
	ThrottleReasons []string         `yaml:"throttle_reasons"`
	// NVLinks is the number of NVLinks (18 on H100 SXM); NVLinksDown lists
	// the ones that are down.
	NVLinks     *int      `yaml:"nvlinks"`
	NVLinksDown []int     `yaml:"nvlinks_down"`
	MIG         []MIGSpec `yaml:"mig"`
	// MIGMode puts a GPU in MIG mode with no MIG instances made yet (mig
	// lists them when there are some, and implies MIG mode).
	MIGMode   bool          `yaml:"mig_mode"`
	Processes []ProcessSpec `yaml:"processes"`
	Faults    Faults        `yaml:"faults"`
	// Partitions are an AMD GPU's compute partitions: 2 (DPX), 4 (QPX) or
	// 8 (CPX).
	Partitions []PartitionSpec `yaml:"partitions"`

	// SamplePeriod is the driver's utilization sample period (NVML: between
	// 1/6 s and 1 s by product; default 1s) and SampleBuffer how many
	// periods its buffer keeps (default 100; NVML does not document it).
	SamplePeriod string `yaml:"sample_period"`
	SampleBuffer int    `yaml:"sample_buffer"`
	// ProcessSamples is how nvmlDeviceGetProcessUtilization answers:
	// "buffered" (default) gives an entry per process and period since
	// lastSeen, several per PID; "last_period" only the newest period's;
	// "latest" each process's newest entry since lastSeen, in whichever
	// period that was.
	ProcessSamples string `yaml:"process_samples"`
	// DuplicateSamples adds a second, smaller entry for the same PID and
	// period, as drivers have been seen to.
	DuplicateSamples bool `yaml:"duplicate_samples"`
	// GarbageSamples adds entries as drivers have been seen to return
	// beside zombie processes (nvtop issue #110, "The GPU usage shows huge
	// % usage": a count of 100 with zero-filled entries, and entries of
	// PIDs with values such as "%SM=37100"): zero-filled padding, and an
	// entry in the newest period of a PID no list names, far above 100 %.
	GarbageSamples bool `yaml:"garbage_samples"`
	// InsufficientSize makes every other nvmlDeviceGetProcessUtilization
	// answer ERROR_INSUFFICIENT_SIZE, as go-nvml does when the driver's
	// sample count grows between its sizing call and its filling call (a
	// process started: nvml.h, the count "may differ from a previously
	// read value as instances are created or destroyed").
	InsufficientSize bool `yaml:"insufficient_size"`
	// CallLatency is how long every reading of this device takes, as a
	// real driver's calls do (a few µs to ms each; more on a busy or
	// failing GPU): benchmarks and load tests model hardware time with
	// it. Default 0.
	CallLatency string `yaml:"call_latency"`

	samplePeriod time.Duration
	callLatency  time.Duration
	minor        int
}

// MIGSpec is one MIG instance of a GPU.
//
// The list's order is the order of nvmlDeviceGetMigDeviceHandleByIndex,
// which need not follow GPU instance IDs. Several entries with one
// gpu_instance are compute instances sharing it; their profile names their
// own slices, e.g. 1c.3g.40gb.
type MIGSpec struct {
	UUID            string `yaml:"uuid"`
	Profile         string `yaml:"profile"` // e.g. 3g.40gb or 1c.3g.40gb
	GPUInstance     int    `yaml:"gpu_instance"`
	ComputeInstance int    `yaml:"compute_instance"`
	// Slot is the index nvmlDeviceGetMigDeviceHandleByIndex hands the
	// instance out at, 0 to 6; default the slot after the previous entry's.
	// Slots skipped are empty and answer NVML_ERROR_NOT_FOUND, as they do
	// once an instance made before them is destroyed (nvml.h: "if no valid
	// MIG device was found at index"). Entries list slots in rising order.
	Slot       *int          `yaml:"slot"`
	MemoryUsed *Value        `yaml:"memory_used"`
	Processes  []ProcessSpec `yaml:"processes"`
	// Metrics takes the profiling keys (ProfilingKeys): GPM measures GPU
	// instances one by one.
	Metrics map[string]Value `yaml:"metrics"`

	ciSlices, giSlices, gb int
	slot                   int
}

// maxMIGDevices is what the simulated nvmlDeviceGetMaxMigDeviceCount
// answers: an A100's or H100's seven 1g instances.
const maxMIGDevices = 7

// ProcessSpec is a compute process on a device. It runs in at most one of a
// pod (namespace/name), a Slurm job or a systemd unit, or in a Slurm job
// inside a pod (slurmd run in the pod); with none it runs in a login
// session.
type ProcessSpec struct {
	PID uint32 `yaml:"pid"`
	Pod string `yaml:"pod"`
	// Container is the pod's container the process runs in; default its
	// first.
	Container string `yaml:"container"`
	SlurmJob  string `yaml:"slurm_job"`
	Unit      string `yaml:"unit"`
	// Environ are variables in the process's environment beyond those its
	// owner gives it (SLURM_JOB_ID for a job's task): any user can set
	// SLURM_JOB_ID in a login session or a service.
	Environ    map[string]string `yaml:"environ"`
	User       string            `yaml:"user"`
	Command    string            `yaml:"command"`
	MemoryUsed *Value            `yaml:"memory_used"`
	// Utilization is the share of the device's SM time this process uses
	// while busy (0..1); NVML samples it per process. Unset: no samples.
	Utilization *Value `yaml:"utilization"`
	// Duty makes the process busy only part of the time, so that "busy
	// earlier, idle now" exists. Unset: always busy.
	Duty *DutySpec `yaml:"duty"`
	// Lists are NVML's process lists the process is in: compute (default),
	// mps (an MPS client) and graphics.
	Lists []string `yaml:"lists"`
	// DRMNode is the DRM node an AMD process's client is open on: render
	// (default, /dev/dri/renderD<n>, as ROCm opens it) or primary
	// (/dev/dri/card<n>, which amdgpu serves the same stats on).
	DRMNode string `yaml:"drm_node"`
	// EngineDip makes every third fdinfo write of an AMD process print its
	// engine time a millisecond below what it printed last, and the next
	// write the true value again: the kernel documentation allows it
	// ("Values are not required to be constantly monotonic if it makes
	// the driver implementation easier, but are required to catch up with
	// the previously reported larger value within a reasonable period",
	// "DRM client usage stats", drm-engine-<keystr>).
	EngineDip bool `yaml:"engine_dip"`
	// EngineDipToZero is EngineDip whose dip goes to 0, which amdgpu
	// prints as no drm-engine-gfx line at all (amdgpu_fdinfo.c,
	// amdgpu_show_fdinfo: "if (!usage[hw_ip]) continue;").
	EngineDipToZero bool `yaml:"engine_dip_to_zero"`
	// KFD makes an AMD process a ROCm (HIP) one: it has /dev/kfd open and
	// is listed under /sys/class/kfd/kfd/proc, and its work, on KFD
	// user-mode queues, keeps the GPU busy without any drm-engine line in
	// its fdinfo, which still shows its VRAM (amdgpu_top issue #49: "ROCm
	// uses /dev/kfd, so no usage is recorded in fdinfo"). Unset: a client
	// whose work the kernel schedules (graphics, video, Mesa compute).
	KFD bool `yaml:"kfd"`
	// ProcfsHidden leaves an NVIDIA process out of the simulated procfs
	// while NVML keeps listing it: another user's process under /proc
	// mounted with hidepid=2 or invisible ("/proc/[pid] directories
	// [...] invisible to other users", proc(5)), or a context the driver
	// keeps after its process ended. On any device, it hides the PID on
	// all of them.
	ProcfsHidden bool `yaml:"procfs_hidden"`
}

// DutySpec is a process's duty cycle: busy for Busy at the start of every
// Period, counted from Offset after the node booted.
type DutySpec struct {
	Period string `yaml:"period"`
	Busy   string `yaml:"busy"`
	Offset string `yaml:"offset"`

	period, busy, offset time.Duration
}

// busyAt says whether the process is in the busy part of its duty cycle at
// d after boot.
func (p *ProcessSpec) busyAt(d time.Duration) bool {
	if p.Duty == nil {
		return true
	}
	pos := (d - p.Duty.offset) % p.Duty.period
	if pos < 0 {
		pos += p.Duty.period
	}
	return pos < p.Duty.busy
}

func (p *ProcessSpec) inList(list string) bool {
	if len(p.Lists) == 0 {
		return list == "compute"
	}
	return slices.Contains(p.Lists, list)
}

var processListNames = []string{"compute", "mps", "graphics"}

// Faults are failures injected into one device's NVML answers. The names are
// metric keys (see MetricKeys) or one of the call groups in faultOnlyKeys.
type Faults struct {
	// Lost makes every call return GPU_IS_LOST, as a GPU that fell off the bus.
	Lost bool `yaml:"lost"`
	// LostAfter does so from this long after the node booted on: a GPU
	// that falls off the bus while the exporter runs, after it was read.
	LostAfter string `yaml:"lost_after"`
	// Unsupported calls return NOT_SUPPORTED, as on GPU models without them.
	Unsupported []string `yaml:"unsupported"`
	// Errors calls return ERROR_UNKNOWN.
	Errors []string `yaml:"errors"`
	// NoPermission calls return NO_PERMISSION, as nvml.h documents for
	// calls "if the user doesn't have permission to perform this
	// operation" (the process lists among them).
	NoPermission []string `yaml:"no_permission"`
	// Hang calls block for HangFor (default 1h) before answering.
	Hang    []string `yaml:"hang"`
	HangFor string   `yaml:"hang_for"`
	// Panic calls panic, as a broken binding would.
	Panic []string `yaml:"panic"`
	// FailingLinks are NVLinks whose state and counters fail to read
	// (ERROR_UNKNOWN) while the other links answer.
	FailingLinks []int `yaml:"failing_links"`
	// XGMIGaps are an AMD GPU's XGMI links (0..6) the firmware leaves out
	// of every other gpu_metrics table (AMDSim.xgmiLinks).
	XGMIGaps []int `yaml:"xgmi_gaps"`
	// RASInterrupt is an AMD GPU's fatal RAS interrupt, fired and not yet
	// cleared by a reset: the flag the driver raises is one for the whole
	// node (AMDSim.rasInterrupt).
	RASInterrupt bool `yaml:"ras_interrupt"`
	// Unlisted leaves a Gaudi out of hl-smi's table, from UnlistedAfter
	// after the node booted on if that is set, while the habanalabs driver
	// keeps its accel node and its holders keep it open: the exporter
	// sees the device in sysfs and procfs only.
	Unlisted      bool   `yaml:"unlisted"`
	UnlistedAfter string `yaml:"unlisted_after"`
	// NotAvailable are hl-smi fields (index, uuid, bus_id, serial, or a
	// reading's, such as memory.total) a Gaudi's row prints as N/A, as
	// hl-smi prints a value it cannot read.
	NotAvailable []string `yaml:"not_available"`

	hangFor, lostAfter, unlistedAfter time.Duration
}

// MetricKeys are the readings a scenario can drive, with their units.
var MetricKeys = map[string]string{
	"utilization":                 "ratio 0..1",
	"memory_utilization":          "ratio 0..1",
	"encoder_utilization":         "ratio 0..1",
	"decoder_utilization":         "ratio 0..1",
	"memory_used":                 "bytes",
	"memory_reserved":             "bytes",
	"temperature":                 "°C",
	"memory_temperature":          "°C",
	"fan_speed":                   "ratio 0..1",
	"power":                       "W",
	"energy":                      "J (counter)",
	"performance_state":           "0..15",
	"clock_graphics":              "MHz",
	"clock_sm":                    "MHz",
	"clock_memory":                "MHz",
	"pcie_tx":                     "bytes/s",
	"pcie_rx":                     "bytes/s",
	"pcie_replays":                "count (counter)",
	"pcie_generation":             "1..6",
	"pcie_width":                  "lanes",
	"pcie_max_generation":         "1..6",
	"pcie_max_width":              "lanes",
	"ecc_corrected":               "count (counter)",
	"ecc_uncorrected":             "count (counter)",
	"retired_pages_single_bit":    "count",
	"retired_pages_double_bit":    "count",
	"remapped_rows_correctable":   "count",
	"remapped_rows_uncorrectable": "count",
	"nvlink_replay_errors":        "count per link (counter)",
	"nvlink_recovery_errors":      "count per link (counter)",
	"nvlink_crc_flit_errors":      "count per link (counter)",
	"nvlink_crc_data_errors":      "count per link (counter)",
}

// ProfilingKeys are the GPM readings a scenario can drive: all ratios 0..1
// but nvlink_tx and nvlink_rx (bytes/s). GPM also reports PCIe throughput,
// taken from pcie_tx and pcie_rx.
var ProfilingKeys = []string{"graphics_active", "sm_active", "sm_occupancy", "tensor_active", "dram_active", "fp16_active", "fp32_active", "fp64_active", "nvlink_tx", "nvlink_rx"}

func init() {
	for _, k := range ProfilingKeys {
		MetricKeys[k] = "GPM profiling"
	}
	for k, unit := range gaudiOnlyKeys {
		MetricKeys[k] = unit
	}
}

// gaudiOnlyKeys are readings hl-smi gives and NVML does not.
var gaudiOnlyKeys = map[string]string{
	"clock_soc":            "MHz",
	"dram_ecc_corrected":   "count (counter)",
	"dram_ecc_uncorrected": "count (counter)",
}

// gaudiKeys are the readings a Gaudi device takes: what the demo's hl-smi
// prints (hl-smi's --query-aip fields, see vendors/gaudi/fields.go).
var gaudiKeys = []string{
	"utilization", "memory_used", "temperature", "power", "clock_soc",
	"pcie_generation", "pcie_width", "pcie_max_generation", "pcie_max_width",
	"ecc_corrected", "ecc_uncorrected", "dram_ecc_corrected", "dram_ecc_uncorrected",
}

// Vendors a scenario device may have.
const (
	VendorNVIDIA = "nvidia"
	VendorGaudi  = "gaudi"
	VendorAMD    = "amd"
)

// metricRange is what a reading can be on a real GPU: the scenario is
// refused outside it rather than served as a value NVML never gives (a
// negative power read as 4.29e6 W through NVML's unsigned types).
func metricRange(key string) (lo, hi float64) {
	unit := MetricKeys[key]
	switch {
	case strings.HasPrefix(unit, "ratio"), unit == "GPM profiling" && key != "nvlink_tx" && key != "nvlink_rx":
		return 0, 1
	case key == "performance_state":
		return 0, 15
	case key == "pcie_generation", key == "pcie_max_generation":
		return 1, 6
	case key == "pcie_width", key == "pcie_max_width":
		return 1, 32
	case unit == "°C":
		return -40, 150
	case strings.HasSuffix(unit, "(counter)"):
		return 0, counterMax(key)
	}
	return 0, math.Inf(1)
}

// counterMax is the most a counter can count before the integer its driver
// keeps it in, or the float64 the exporter serves it as, stops counting:
// a counter above it would be served wrapped, or stuck.
func counterMax(key string) float64 {
	switch key {
	case "energy":
		// amdgpu's energy_accumulator is 64 bits of 2^-16 J (NVML's 64
		// bits of mJ hold 64 times more).
		return 1 << 48
	case "pcie_replays":
		// nvmlDeviceGetPcieReplayCounter's unsigned int.
		return math.MaxUint32
	}
	// Above 2^53 a float64 no longer counts by one.
	return 1 << 53
}

// faultOnlyKeys name NVML calls that are not a single metric.
var faultOnlyKeys = []string{"identity", "serial", "memory", "power_limit", "max_clocks", "throttle_reasons", "supported_throttle_reasons", "mig", "mig_attributes", "processes", "processes_compute", "processes_mps", "processes_graphics", "process_utilization", "samples", "retired_pages_pending", "remapped_rows", "nvlink", "gpm", "events"}

var throttleNames = []string{"gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown", "sync_boost", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "display_clocks_setting"}

var clockKeys = []string{"graphics", "sm", "memory"}

// Parse reads a scenario, fills defaults and validates it. Errors name the
// offending device and field.
func Parse(b []byte) (*Scenario, error) {
	s := Scenario{stats: &simStats{}}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var errs []error
	if err := dec.Decode(&s); err != nil {
		// A TypeError lists values that could not be read, and the decoder
		// went on past them: validate the rest too, to name every problem.
		var te *yaml.TypeError
		if !errors.As(err, &te) {
			return nil, fmt.Errorf("parse: %w", err)
		}
		for _, e := range te.Errors {
			errs = append(errs, errors.New(e))
		}
	}
	if s.Node == "" {
		s.Node = "demo-node"
	}
	if s.DriverVersion == "" {
		s.DriverVersion = "550.90.07"
	}
	if s.CUDAVersion == "" {
		s.CUDAVersion = "12.4"
	}
	if s.GaudiDriverVersion == "" {
		s.GaudiDriverVersion = "1.18.0-ee698fb"
	}
	if err := s.HLSMI.validate(); err != nil {
		errs = append(errs, fmt.Errorf("hl_smi: %w", err))
	}
	if len(s.Devices) == 0 && !s.NoDriver {
		return nil, errors.Join(append(errs, errors.New("devices: a scenario needs at least one device"))...)
	}
	if len(s.Devices) > 64 {
		return nil, errors.Join(append(errs, fmt.Errorf("devices: %d devices; at most 64 are simulated", len(s.Devices)))...)
	}
	seen, seenPCI, seenMinor := map[string]string{}, map[string]string{}, map[int]string{}
	for i := range s.Devices {
		d := &s.Devices[i]
		d.inherit(s.Defaults)
		switch d.Vendor {
		case "":
			d.Vendor = VendorNVIDIA
		case VendorNVIDIA, VendorGaudi, VendorAMD:
		default:
			errs = append(errs, fmt.Errorf("devices[%d].vendor: %q is not nvidia, amd or gaudi", i, d.Vendor))
		}
		gaudi := d.Vendor == VendorGaudi
		pciGiven := d.PCIBusID != ""
		if d.isAMD() {
			d.amdDefaults(s.Node, i)
		}
		if d.UUID == "" {
			d.UUID = fmt.Sprintf("GPU-%08x-0000-4000-8000-%012x", hashString(s.Node), i)
			if gaudi {
				// In the style of the devices recorded in fixtures/gaudi.
				d.UUID = fmt.Sprintf("01P0-HL2080A0-15-%08X-%02d-04-03", hashString(s.Node), i)
			}
		}
		if d.PCIBusID == "" {
			bus, dev := pciSlot(0x18, i)
			d.PCIBusID = fmt.Sprintf("00000000:%02X:%02X.0", bus, dev)
			if gaudi {
				// hl-smi prints the sysfs form.
				bus, dev := pciSlot(0x19, i)
				d.PCIBusID = fmt.Sprintf("0000:%02x:%02x.0", bus, dev)
			}
		}
		// One PCI address is one function on the node, whatever the vendor
		// and form: two AMD GPUs at one would be written into one sysfs
		// directory, served as one GPU of mixed identity.
		pci := pciKey(d.PCIBusID)
		if prev, dup := seenPCI[pci]; dup {
			if pciGiven {
				errs = append(errs, fmt.Errorf("devices[%d]: pci_bus_id: %s is already used by %s", i, d.PCIBusID, prev))
			} else {
				errs = append(errs, fmt.Errorf("devices[%d]: pci_bus_id: %s, its default, is already used by %s; give it another", i, d.PCIBusID, prev))
			}
		} else {
			seenPCI[pci] = fmt.Sprintf("devices[%d]", i)
		}
		d.minor = i
		if d.MinorNumber != nil {
			d.minor = *d.MinorNumber
		}
		if prev, dup := seenMinor[d.minor]; dup && d.Vendor == VendorNVIDIA {
			errs = append(errs, fmt.Errorf("devices[%d]: minor_number: %d is already %s's", i, d.minor, prev))
		} else if d.minor < 0 || d.minor > 255 {
			errs = append(errs, fmt.Errorf("devices[%d]: minor_number: %d; the driver numbers /dev/nvidia0 to /dev/nvidia255", i, d.minor))
		} else if d.Vendor == VendorNVIDIA {
			seenMinor[d.minor] = fmt.Sprintf("devices[%d]", i)
		}
		if d.Serial == "" {
			d.Serial = fmt.Sprintf("16520%08d", i)
			if gaudi {
				d.Serial = fmt.Sprintf("AN15%06d", i)
			}
		}
		for j := range d.MIG {
			if d.MIG[j].UUID == "" {
				d.MIG[j].UUID = fmt.Sprintf("MIG-%08x-%04x-4000-8000-%012x", hashString(s.Node), i, j)
			}
		}
		for _, err := range d.validate(fmt.Sprintf("devices[%d]", i), seen) {
			errs = append(errs, fmt.Errorf("devices[%d]: %w", i, err))
		}
		if gaudi {
			for _, err := range d.validateGaudi() {
				errs = append(errs, fmt.Errorf("devices[%d]: %w", i, err))
			}
		} else {
			for _, k := range sortedKeys(d.Metrics) {
				if _, ok := gaudiOnlyKeys[k]; ok {
					errs = append(errs, fmt.Errorf("devices[%d]: metrics.%s: a Gaudi reading; NVML gives no such value", i, k))
				}
			}
		}
	}
	if k := s.Kubernetes; k != nil {
		if k.Node == "" {
			k.Node = s.Node
		}
		if err := k.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("kubernetes: %w", err))
		}
	}
	errs = append(errs, s.validateOwners()...)
	errs = append(errs, s.validateChurn()...)
	if s.PIDFDLimit < 0 {
		errs = append(errs, fmt.Errorf("pidfd_limit: %d; 0 for no bound, or the most processes watched at once", s.PIDFDLimit))
	}
	for i := range s.Events {
		if err := s.Events[i].validate(len(s.Devices)); err != nil {
			errs = append(errs, fmt.Errorf("events[%d]: %w", i, err))
		} else if s.Devices[s.Events[i].Device].Vendor != VendorNVIDIA {
			errs = append(errs, fmt.Errorf("events[%d].device: events are NVML's; device %d is not an NVIDIA GPU", i, s.Events[i].Device))
		} else if err := s.Events[i].validateInstance(&s.Devices[s.Events[i].Device]); err != nil {
			errs = append(errs, fmt.Errorf("events[%d]: %w", i, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	s.raw = b
	return &s, nil
}

func (e *EventSpec) validate(devices int) error {
	if e.Device < 0 || e.Device >= devices {
		return fmt.Errorf("device: %d is not a device index (0..%d)", e.Device, devices-1)
	}
	switch e.Type {
	case "":
		e.Type = "xid"
	case "xid", "double_bit_ecc", "single_bit_ecc":
	default:
		return fmt.Errorf("type: %q is not xid, double_bit_ecc or single_bit_ecc", e.Type)
	}
	if e.Type == "xid" && e.XID == 0 {
		return errors.New("xid: an xid event needs its code, e.g. 79 (GPU fell off the bus)")
	}
	var err error
	if e.at, err = parseDuration(e.At, 0); err != nil {
		return fmt.Errorf("at: %w", err)
	}
	if e.every, err = parseDuration(e.Every, 0); err != nil {
		return fmt.Errorf("every: %w", err)
	}
	if e.Every != "" && e.every < time.Second {
		return errors.New("every: events repeat at most once a second")
	}
	return nil
}

// validateInstance checks that the MIG instance an event names is one of
// its device's.
func (e *EventSpec) validateInstance(d *DeviceSpec) error {
	switch {
	case e.GPUInstance == nil && e.ComputeInstance == nil:
		return nil
	case e.GPUInstance == nil:
		return errors.New("compute_instance: needs the gpu_instance it is in")
	case e.Type != "xid":
		return errors.New("gpu_instance: NVML names MIG instances on Xid events only")
	}
	for _, m := range d.MIG {
		if m.GPUInstance == *e.GPUInstance && (e.ComputeInstance == nil || m.ComputeInstance == *e.ComputeInstance) {
			return nil
		}
	}
	if e.ComputeInstance != nil {
		return fmt.Errorf("gpu_instance %d, compute_instance %d: device %d has no such MIG instance", *e.GPUInstance, *e.ComputeInstance, e.Device)
	}
	return fmt.Errorf("gpu_instance %d: device %d has no such MIG instance", *e.GPUInstance, e.Device)
}

func parseDuration(s string, def time.Duration) (time.Duration, error) {
	if s == "" {
		return def, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%q is not a duration such as 30s or 5m", s)
	}
	return d, nil
}

// pciSlot is the bus and device number of the default PCI address of the
// scenario's device i: a bus every 0x10 from base, as behind a server's
// root ports, and past the 14 such buses a byte holds, the next device
// number, so that 64 devices have 64 addresses.
func pciSlot(base, i int) (bus, dev int) { return base + i%14*0x10, i / 14 }

// pciKey is a PCI address in one form: NVML prints an 8-digit domain and
// upper case, sysfs and hl-smi a 4-digit one and lower case. A string that
// is no address is its own key.
func pciKey(addr string) string {
	var domain, bus, dev, fn uint64
	if n, _ := fmt.Sscanf(addr, "%x:%x:%x.%x", &domain, &bus, &dev, &fn); n == 4 {
		return fmt.Sprintf("%x:%x:%x.%x", domain, bus, dev, fn)
	}
	return strings.ToLower(addr)
}

func hashString(s string) uint32 {
	var h uint32 = 2166136261
	for i := 0; i < len(s); i++ {
		h = (h ^ uint32(s[i])) * 16777619
	}
	return h
}

func (d *DeviceSpec) inherit(def DeviceSpec) {
	if d.Vendor == "" {
		d.Vendor = def.Vendor
	}
	if d.Model == "" {
		d.Model = def.Model
	}
	if d.VBIOSVersion == "" {
		d.VBIOSVersion = def.VBIOSVersion
	}
	if d.MemoryTotal == nil {
		d.MemoryTotal = def.MemoryTotal
	}
	if d.PowerLimitWatts == nil {
		d.PowerLimitWatts = def.PowerLimitWatts
	}
	d.MaxClocksMHz = mergeValues(def.MaxClocksMHz, d.MaxClocksMHz)
	d.Metrics = mergeValues(def.Metrics, d.Metrics)
	if d.ThrottleReasons == nil {
		d.ThrottleReasons = def.ThrottleReasons
	}
	if d.NVLinks == nil {
		d.NVLinks = def.NVLinks
	}
	if d.SamplePeriod == "" {
		d.SamplePeriod = def.SamplePeriod
	}
	if d.SampleBuffer == 0 {
		d.SampleBuffer = def.SampleBuffer
	}
	if d.ProcessSamples == "" {
		d.ProcessSamples = def.ProcessSamples
	}
	if d.CallLatency == "" {
		d.CallLatency = def.CallLatency
	}
}

// inMIGMode says the GPU is in MIG mode, with or without MIG instances.
func (d *DeviceSpec) inMIGMode() bool { return len(d.MIG) > 0 || d.MIGMode }

func mergeValues(def, own map[string]Value) map[string]Value {
	out := make(map[string]Value, len(def)+len(own))
	for k, v := range def {
		out[k] = v
	}
	for k, v := range own {
		out[k] = v
	}
	return out
}

// validate checks the device. self is its path in the scenario
// (devices[i]); seenUUIDs maps the UUIDs of the devices checked before to
// the path of the device or MIG instance that has each, by which a
// duplicate names the first.
func (d *DeviceSpec) validate(self string, seenUUIDs map[string]string) []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if d.Model == "" {
		bad("model: missing (set it on the device or in defaults)")
	}
	if d.MemoryTotal == nil {
		bad("memory_total: missing (set it on the device or in defaults)")
	}
	claim := func(uuid, where, path string) {
		if prev, dup := seenUUIDs[uuid]; dup {
			bad("%s: %s is already used by %s", where, uuid, prev)
			return
		}
		seenUUIDs[uuid] = path
	}
	claim(d.UUID, "uuid", self)
	if d.Vendor == VendorNVIDIA && !isNVMLUUID(d.UUID, "GPU-") {
		bad("uuid: %q is not an NVML GPU UUID (GPU-, then 8-4-4-4-12 hexadecimal digits)", d.UUID)
	}
	for _, k := range sortedKeys(d.Metrics) {
		if _, ok := MetricKeys[k]; !ok {
			bad("metrics.%s: unknown metric (known: %s)", k, strings.Join(sortedKeys(MetricKeys), ", "))
			continue
		}
		lo, hi := metricRange(k)
		if msg := d.Metrics[k].within(lo, hi); msg != "" {
			bad("metrics.%s: %s (%s)", k, msg, MetricKeys[k])
		}
	}
	inRange := func(field string, v *Value, lo, hi float64) {
		if v != nil {
			if msg := v.within(lo, hi); msg != "" {
				bad("%s: %s", field, msg)
			}
		}
	}
	inRange("memory_total", d.MemoryTotal, 1, 1<<50)
	inRange("power_limit_watts", d.PowerLimitWatts, 0, 10000)
	for _, k := range sortedKeys(d.MaxClocksMHz) {
		v := d.MaxClocksMHz[k]
		inRange("max_clocks_mhz."+k, &v, 0, 100000)
	}
	for _, k := range sortedKeys(d.MaxClocksMHz) {
		switch {
		case d.Vendor == VendorGaudi && k != "soc":
			bad("max_clocks_mhz.%s: unknown clock (a Gaudi's is soc)", k)
		case d.Vendor != VendorGaudi && !slices.Contains(clockKeys, k):
			bad("max_clocks_mhz.%s: unknown clock (want graphics, sm or memory)", k)
		}
	}
	for _, r := range d.ThrottleReasons {
		if !slices.Contains(throttleNames, r) {
			bad("throttle_reasons: unknown reason %q (known: %s)", r, strings.Join(throttleNames, ", "))
		}
	}
	f := &d.Faults
	for field, keys := range map[string][]string{"unsupported": f.Unsupported, "errors": f.Errors, "no_permission": f.NoPermission, "hang": f.Hang, "panic": f.Panic} {
		for _, k := range keys {
			if _, ok := MetricKeys[k]; !ok && !slices.Contains(faultOnlyKeys, k) && k != amdEmergencyFault {
				bad("faults.%s: unknown call %q (a metric key or one of %s)", field, k, strings.Join(faultOnlyKeys, ", "))
			}
		}
	}
	if f.LostAfter != "" {
		if dur, err := time.ParseDuration(f.LostAfter); err != nil || dur <= 0 {
			bad("faults.lost_after: %q is not a positive duration", f.LostAfter)
		} else {
			f.lostAfter = dur
		}
	}
	f.hangFor = time.Hour
	if f.HangFor != "" {
		dur, err := time.ParseDuration(f.HangFor)
		if err != nil || dur <= 0 {
			bad("faults.hang_for: %q is not a positive duration", f.HangFor)
		}
		f.hangFor = dur
	}
	d.samplePeriod = time.Second
	if d.SamplePeriod != "" {
		dur, err := time.ParseDuration(d.SamplePeriod)
		if err != nil || dur < time.Second/6 || dur > time.Second {
			bad("sample_period: %q is not a duration from 1/6 s to 1s, as NVML's sample periods are", d.SamplePeriod)
		}
		d.samplePeriod = dur
	}
	if lat, err := parseDuration(d.CallLatency, 0); err != nil || lat > time.Second {
		bad("call_latency: %q is not a duration from 0 to 1s", d.CallLatency)
	} else {
		d.callLatency = lat
	}
	switch {
	case d.SampleBuffer == 0:
		d.SampleBuffer = 100
	case d.SampleBuffer < 1 || d.SampleBuffer > 10000:
		bad("sample_buffer: %d; want 1 to 10000 periods", d.SampleBuffer)
	}
	switch d.ProcessSamples {
	case "":
		d.ProcessSamples = "buffered"
	case "buffered", "last_period", "latest":
	default:
		bad("process_samples: %q is not buffered, last_period or latest", d.ProcessSamples)
	}
	for _, l := range f.FailingLinks {
		if d.NVLinks == nil || l < 0 || l >= *d.NVLinks {
			bad("faults.failing_links: link %d does not exist", l)
		}
	}
	if !d.isGaudi() && (f.Unlisted || f.UnlistedAfter != "" || len(f.NotAvailable) > 0) {
		bad("faults: unlisted, unlisted_after and not_available are hl-smi's, for a Gaudi")
	}
	if f.RASInterrupt && !d.isAMD() {
		bad("faults.ras_interrupt: only an AMD GPU (vendor: amd) has amdgpu's RAS interrupt")
	}
	for _, l := range f.XGMIGaps {
		if !d.isAMD() || l < 0 || l >= amdXGMILinks {
			bad("faults.xgmi_gaps: link %d: an AMD GPU's XGMI links are 0..%d", l, amdXGMILinks-1)
		}
	}
	pids := map[uint32]bool{}
	checkProcs := func(where string, procs []ProcessSpec) {
		for i := range procs {
			p := &procs[i]
			if p.PID == 0 {
				bad("%s[%d].pid: missing", where, i)
			}
			if pids[p.PID] {
				bad("%s[%d].pid: %d listed twice on this device", where, i, p.PID)
			}
			pids[p.PID] = true
			for _, l := range p.Lists {
				if !slices.Contains(processListNames, l) {
					bad("%s[%d].lists: unknown list %q (want compute, mps or graphics)", where, i, l)
				}
			}
			if (p.DRMNode != "" || p.KFD || p.EngineDip || p.EngineDipToZero) && !d.isAMD() {
				bad("%s[%d]: drm_node, engine_dip, engine_dip_to_zero and kfd are for AMD processes", where, i)
			}
			if p.ProcfsHidden && (d.isAMD() || d.isGaudi()) {
				bad("%s[%d].procfs_hidden: only NVML lists a process procfs does not show; an AMD or Gaudi process is found through procfs", where, i)
			}
			if p.DRMNode != "" && p.DRMNode != "render" && p.DRMNode != "primary" {
				bad("%s[%d].drm_node: %q (want render or primary)", where, i, p.DRMNode)
			}
			if p.Duty != nil {
				if err := p.Duty.parse(); err != nil {
					bad("%s[%d].duty: %v", where, i, err)
				}
			}
			inRange(fmt.Sprintf("%s[%d].utilization", where, i), p.Utilization, 0, 1)
			inRange(fmt.Sprintf("%s[%d].memory_used", where, i), p.MemoryUsed, 0, 1<<50)
		}
	}
	checkProcs("processes", d.Processes)
	for j := range d.Partitions {
		checkProcs(fmt.Sprintf("partitions[%d].processes", j), d.Partitions[j].Processes)
	}
	errs = append(errs, d.validateVendor()...)
	if d.inMIGMode() && len(d.Processes) > 0 {
		bad("processes: a GPU in MIG mode runs processes in its MIG instances, not on the parent")
	}
	if len(d.MIG) > maxMIGDevices {
		bad("mig: %d instances; a GPU has at most %d", len(d.MIG), maxMIGDevices)
	}
	slicesUsed, gis, cis := 0, map[int]int{}, map[[2]int]bool{}
	nextSlot := 0
	for j := range d.MIG {
		m := &d.MIG[j]
		where := fmt.Sprintf("mig[%d]", j)
		m.slot = nextSlot
		if m.Slot != nil {
			m.slot = *m.Slot
		}
		if m.slot < nextSlot || m.slot >= maxMIGDevices {
			bad("%s.slot: %d; slots rise from entry to entry (from %d here) and a GPU has %d (0..%d)", where, m.slot, nextSlot, maxMIGDevices, maxMIGDevices-1)
		}
		nextSlot = m.slot + 1
		ci, g, gb, err := parseProfile(m.Profile)
		if err != nil {
			bad("%s.profile: %v", where, err)
		}
		m.ciSlices, m.giSlices, m.gb = ci, g, gb
		if prev, shared := gis[m.GPUInstance]; shared {
			if prev != g {
				bad("%s.profile: gpu_instance %d has %d slices in another entry", where, m.GPUInstance, prev)
			}
		} else {
			slicesUsed += g
			gis[m.GPUInstance] = g
		}
		if cis[[2]int{m.GPUInstance, m.ComputeInstance}] {
			bad("%s: gpu_instance %d, compute_instance %d used twice", where, m.GPUInstance, m.ComputeInstance)
		}
		cis[[2]int{m.GPUInstance, m.ComputeInstance}] = true
		claim(m.UUID, where+".uuid", self+"."+where)
		if !isNVMLUUID(m.UUID, "MIG-") {
			bad("%s.uuid: %q is not an NVML MIG device UUID (MIG-, then 8-4-4-4-12 hexadecimal digits, or MIG-GPU-<GPU UUID>/<gpu instance>/<compute instance> before R470)", where, m.UUID)
		}
		checkProcs(where+".processes", m.Processes)
		for _, k := range sortedKeys(m.Metrics) {
			if !slices.Contains(ProfilingKeys, k) {
				bad("%s.metrics.%s: a MIG instance takes only profiling metrics (%s)", where, k, strings.Join(ProfilingKeys, ", "))
			}
		}
	}
	if d.NVLinks != nil && (*d.NVLinks < 0 || *d.NVLinks > 36) {
		bad("nvlinks: %d; a GPU has 0 to 36", *d.NVLinks)
	}
	for _, l := range d.NVLinksDown {
		if d.NVLinks == nil || l < 0 || l >= *d.NVLinks {
			bad("nvlinks_down: link %d does not exist", l)
		}
	}
	if slicesUsed > 7 {
		bad("mig: the instances use %d compute slices; a GPU has 7", slicesUsed)
	}
	return append(errs, d.validateMemory()...)
}

// validateMemory refuses memory a device cannot hold: more used (with the
// driver's reserve) than it has, or processes holding more together. The
// simulation would cut the device's value to its total and serve the
// processes' as stated, above it.
//
// It also refuses a device using, at any instant, less than its processes
// hold: NVML's used memory is all the memory allocated on the device
// (nvml.h, nvmlMemory_v2_t: "Allocated device memory"), each process's
// included ("The usedGpuMemory field returned is all of the memory used by
// the application"). A scenario's memory_used is that whole, served as
// written, so its lowest value must be at least the most its processes can
// hold together (a GPU in MIG mode's, its instances'); above that is the
// driver's and the contexts' own. Checking the extremes rather than each
// instant keeps the rule one a scenario's author can work out by hand.
func (d *DeviceSpec) validateMemory() []error {
	if d.MemoryTotal == nil {
		return nil
	}
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	held, holders := processMemory(d.allProcesses()), "its processes'"
	if d.inMIGMode() {
		held, holders = 0, "its MIG instances'" // summed below
	}
	for j, m := range d.MIG {
		if m.gb == 0 {
			continue // not a profile, refused above
		}
		has := float64(m.gb) * (1 << 30) // what the simulated instance reports as its total
		inner := processMemory(m.Processes)
		if m.MemoryUsed != nil {
			lo, hi := m.MemoryUsed.bounds()
			switch {
			case lo < 0:
				bad("mig[%d].memory_used: as low as %s", j, gib(lo))
			case lo < inner:
				bad("mig[%d].memory_used: as low as %s, less than its processes' memory_used, up to %s together", j, gib(lo), gib(inner))
			}
			if hi > has {
				bad("mig[%d].memory_used: up to %s, more than a %s instance has (%s)", j, gib(hi), m.Profile, gib(has))
			}
			inner = hi
		} else if inner > has {
			bad("mig[%d]: a %s instance has %s, less than its processes' memory_used, up to %s together", j, m.Profile, gib(has), gib(inner))
		}
		held += inner
	}
	total, _ := d.MemoryTotal.bounds()
	if used, ok := d.Metrics["memory_used"]; ok {
		lo, hi := used.bounds()
		if lo < held {
			bad("metrics.memory_used: as low as %s, less than %s memory_used, up to %s together", gib(lo), holders, gib(held))
		}
		if reserved, ok := d.Metrics["memory_reserved"]; ok {
			if _, res := reserved.bounds(); hi+res > total {
				bad("metrics.memory_used: up to %s and memory_reserved up to %s, more than memory_total (%s)", gib(hi), gib(res), gib(total))
			}
		} else if hi > total {
			bad("metrics.memory_used: up to %s, more than memory_total (%s)", gib(hi), gib(total))
		}
	}
	if held > total {
		bad("memory_total: %s, less than %s memory_used, up to %s together", gib(total), holders, gib(held))
	}
	return errs
}

// processMemory is the most the processes hold together.
func processMemory(procs []ProcessSpec) float64 {
	held := 0.0
	for _, p := range procs {
		if p.MemoryUsed != nil {
			_, hi := p.MemoryUsed.bounds()
			held += hi
		}
	}
	return held
}

// gib writes bytes in GiB, as exactly as they are.
func gib(bytes float64) string {
	return strconv.FormatFloat(bytes/(1<<30), 'g', -1, 64) + " GiB"
}

// isNVMLUUID says whether uuid has the shape NVML gives a GPU (prefix GPU-)
// or a MIG device (MIG-), as the exporter's device-ID parser reads it: the
// demo's kubelet names devices by UUID, and an ID of another shape is
// joined to no device, so that its pod would never be attributed.
func isNVMLUUID(uuid, prefix string) bool {
	ref, err := kubernetes.NormalizeDeviceID("nvidia.com/gpu", uuid)
	return err == nil && ref.UUID == uuid && strings.HasPrefix(uuid, prefix)
}

// parseProfile reads "3g.40gb" into its slice count and memory in GiB, and
// a compute instance's "1c.3g.40gb" into its own slices as well.
func parseProfile(p string) (ci, gi, gb int, err error) {
	bad := fmt.Errorf("%q is not a MIG profile such as 1g.10gb, 3g.40gb or 1c.3g.40gb", p)
	if _, err := fmt.Sscanf(p, "%dc.%dg.%dgb", &ci, &gi, &gb); err == nil && fmt.Sprintf("%dc.%dg.%dgb", ci, gi, gb) == p {
		if ci < 1 || ci > gi || gi > 7 || gb < 1 {
			return 0, 0, 0, bad
		}
		return ci, gi, gb, nil
	}
	if _, err := fmt.Sscanf(p, "%dg.%dgb", &gi, &gb); err != nil || gi < 1 || gi > 7 || gb < 1 || fmt.Sprintf("%dg.%dgb", gi, gb) != p {
		return 0, 0, 0, bad
	}
	return gi, gi, gb, nil
}

// slices are the instance's compute slices, its GPU instance's, and the
// GPU instance's memory in GiB.
func (m *MIGSpec) slices() (ci, gi, gb int) { return m.ciSlices, m.giSlices, m.gb }

func (d *DutySpec) parse() error {
	var err error
	if d.period, err = parseDuration(d.Period, 0); err != nil || d.period <= 0 {
		return fmt.Errorf("period: %q is not a positive duration", d.Period)
	}
	if d.busy, err = parseDuration(d.Busy, 0); err != nil || d.busy > d.period {
		return fmt.Errorf("busy: %q is not a duration within the period", d.Busy)
	}
	if d.offset, err = parseDuration(d.Offset, 0); err != nil {
		return fmt.Errorf("offset: %w", err)
	}
	return nil
}

func sortedKeys[K cmp.Ordered, V any](m map[K]V) []K {
	return slices.Sorted(maps.Keys(m))
}
