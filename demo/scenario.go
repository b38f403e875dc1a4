// Package demo simulates a GPU node from a scenario file: hardware through
// go-nvml's mock package, so that the exporter's production code paths run
// unchanged in demo mode, in end-to-end tests and when replaying a node
// layout from a bug report.
package demo

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

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
	Node          string       `yaml:"node"`
	DriverVersion string       `yaml:"driver_version"`
	CUDAVersion   string       `yaml:"cuda_version"`
	NoDriver      bool         `yaml:"no_driver"`
	Defaults      DeviceSpec   `yaml:"defaults"`
	Devices       []DeviceSpec `yaml:"devices"`
	Events        []EventSpec  `yaml:"events"`
	// Kubernetes is the node as its kubelet reports it: pods with their
	// containers' device IDs, and the allocatable devices (the fake
	// kubelet's fixture format, see fixtures/kubelet/).
	Kubernetes yaml.Node  `yaml:"kubernetes"`
	Slurm      *SlurmSpec `yaml:"slurm"`
	// Engines are inference engines served by the scenario's pods.
	Engines []EngineSpec `yaml:"engines"`

	kube *kubelettest.Fixture
}

// EventSpec is an NVML event the simulated driver raises: once At after
// start, then, if Every is set, again every Every.
type EventSpec struct {
	Device int    `yaml:"device"` // index in devices
	Type   string `yaml:"type"`   // xid (default), double_bit_ecc, single_bit_ecc
	XID    uint64 `yaml:"xid"`
	At     string `yaml:"at"`
	Every  string `yaml:"every"`

	at, every time.Duration
}

// DeviceSpec is one simulated GPU. Unset fields take the scenario defaults.
type DeviceSpec struct {
	UUID            string           `yaml:"uuid"`
	Model           string           `yaml:"model"`
	Serial          string           `yaml:"serial"`
	PCIBusID        string           `yaml:"pci_bus_id"`
	VBIOSVersion    string           `yaml:"vbios_version"`
	MemoryTotal     *Value           `yaml:"memory_total"`
	PowerLimitWatts *Value           `yaml:"power_limit_watts"`
	MaxClocksMHz    map[string]Value `yaml:"max_clocks_mhz"`
	Metrics         map[string]Value `yaml:"metrics"`
	ThrottleReasons []string         `yaml:"throttle_reasons"`
	// NVLinks is the number of NVLinks (18 on H100 SXM); NVLinksDown lists
	// the ones that are down.
	NVLinks     *int          `yaml:"nvlinks"`
	NVLinksDown []int         `yaml:"nvlinks_down"`
	MIG         []MIGSpec     `yaml:"mig"`
	Processes   []ProcessSpec `yaml:"processes"`
	Faults      Faults        `yaml:"faults"`
}

// MIGSpec is one MIG instance of a GPU.
type MIGSpec struct {
	UUID            string        `yaml:"uuid"`
	Profile         string        `yaml:"profile"` // e.g. 3g.40gb
	GPUInstance     int           `yaml:"gpu_instance"`
	ComputeInstance int           `yaml:"compute_instance"`
	MemoryUsed      *Value        `yaml:"memory_used"`
	Processes       []ProcessSpec `yaml:"processes"`
	// Metrics takes the profiling keys (ProfilingKeys): GPM measures MIG
	// instances one by one.
	Metrics map[string]Value `yaml:"metrics"`
}

// ProcessSpec is a compute process on a device. It runs in at most one of a
// pod (namespace/name), a Slurm job or a systemd unit; with none it runs in
// a login session.
type ProcessSpec struct {
	PID        uint32 `yaml:"pid"`
	Pod        string `yaml:"pod"`
	SlurmJob   string `yaml:"slurm_job"`
	Unit       string `yaml:"unit"`
	User       string `yaml:"user"`
	Command    string `yaml:"command"`
	MemoryUsed *Value `yaml:"memory_used"`
	// Utilization is the share of the device's SM time this process uses
	// (0..1); NVML samples it per process. Unset: no samples.
	Utilization *Value `yaml:"utilization"`
}

// Faults are failures injected into one device's NVML answers. The names are
// metric keys (see MetricKeys) or one of the call groups in faultOnlyKeys.
type Faults struct {
	// Lost makes every call return GPU_IS_LOST, as a GPU that fell off the bus.
	Lost bool `yaml:"lost"`
	// Unsupported calls return NOT_SUPPORTED, as on GPU models without them.
	Unsupported []string `yaml:"unsupported"`
	// Errors calls return ERROR_UNKNOWN.
	Errors []string `yaml:"errors"`
	// Hang calls block for HangFor (default 1h) before answering.
	Hang    []string `yaml:"hang"`
	HangFor string   `yaml:"hang_for"`
	// Panic calls panic, as a broken binding would.
	Panic []string `yaml:"panic"`

	hangFor time.Duration
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
}

// faultOnlyKeys name NVML calls that are not a single metric.
var faultOnlyKeys = []string{"identity", "memory", "power_limit", "max_clocks", "throttle_reasons", "mig", "processes", "retired_pages_pending", "remapped_rows", "nvlink", "gpm", "events"}

var throttleNames = []string{"gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown", "sync_boost", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "display_clocks_setting"}

var clockKeys = []string{"graphics", "sm", "memory"}

// Parse reads a scenario, fills defaults and validates it. Errors name the
// offending device and field.
func Parse(b []byte) (*Scenario, error) {
	var s Scenario
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("parse: %w", err)
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
	if len(s.Devices) == 0 && !s.NoDriver {
		return nil, errors.New("devices: a scenario needs at least one device")
	}
	if len(s.Devices) > 64 {
		return nil, fmt.Errorf("devices: %d devices; at most 64 are simulated", len(s.Devices))
	}
	seen := map[string]string{}
	var errs []error
	for i := range s.Devices {
		d := &s.Devices[i]
		d.inherit(s.Defaults)
		if d.UUID == "" {
			d.UUID = fmt.Sprintf("GPU-%08x-0000-4000-8000-%012x", hashString(s.Node), i)
		}
		if d.PCIBusID == "" {
			d.PCIBusID = fmt.Sprintf("00000000:%02X:00.0", 0x18+i*0x10%0xe0)
		}
		if d.Serial == "" {
			d.Serial = fmt.Sprintf("16520%08d", i)
		}
		for j := range d.MIG {
			if d.MIG[j].UUID == "" {
				d.MIG[j].UUID = fmt.Sprintf("MIG-%08x-%04x-4000-8000-%012x", hashString(s.Node), i, j)
			}
		}
		for _, err := range d.validate(seen) {
			errs = append(errs, fmt.Errorf("devices[%d]: %w", i, err))
		}
	}
	var err error
	if s.kube, err = kubernetesFixture(&s.Kubernetes, s.Node); err != nil {
		errs = append(errs, fmt.Errorf("kubernetes: %w", err))
	}
	errs = append(errs, s.validateOwners()...)
	for i := range s.Events {
		if err := s.Events[i].validate(len(s.Devices)); err != nil {
			errs = append(errs, fmt.Errorf("events[%d]: %w", i, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
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

func hashString(s string) uint32 {
	var h uint32 = 2166136261
	for i := 0; i < len(s); i++ {
		h = (h ^ uint32(s[i])) * 16777619
	}
	return h
}

func (d *DeviceSpec) inherit(def DeviceSpec) {
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
}

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

func (d *DeviceSpec) validate(seenUUIDs map[string]string) []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if d.Model == "" {
		bad("model: missing (set it on the device or in defaults)")
	}
	if d.MemoryTotal == nil {
		bad("memory_total: missing (set it on the device or in defaults)")
	}
	claim := func(uuid, where string) {
		if prev, dup := seenUUIDs[uuid]; dup {
			bad("%s: uuid %s is already used by %s", where, uuid, prev)
		}
		seenUUIDs[uuid] = where
	}
	claim(d.UUID, "uuid")
	for _, k := range sortedKeys(d.Metrics) {
		if _, ok := MetricKeys[k]; !ok {
			bad("metrics.%s: unknown metric (known: %s)", k, strings.Join(sortedKeys(MetricKeys), ", "))
		}
	}
	for _, k := range sortedKeys(d.MaxClocksMHz) {
		if !slices.Contains(clockKeys, k) {
			bad("max_clocks_mhz.%s: unknown clock (want graphics, sm or memory)", k)
		}
	}
	for _, r := range d.ThrottleReasons {
		if !slices.Contains(throttleNames, r) {
			bad("throttle_reasons: unknown reason %q (known: %s)", r, strings.Join(throttleNames, ", "))
		}
	}
	f := &d.Faults
	for field, keys := range map[string][]string{"unsupported": f.Unsupported, "errors": f.Errors, "hang": f.Hang, "panic": f.Panic} {
		for _, k := range keys {
			if _, ok := MetricKeys[k]; !ok && !slices.Contains(faultOnlyKeys, k) {
				bad("faults.%s: unknown call %q (a metric key or one of %s)", field, k, strings.Join(faultOnlyKeys, ", "))
			}
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
	pids := map[uint32]bool{}
	checkProcs := func(where string, procs []ProcessSpec) {
		for i, p := range procs {
			if p.PID == 0 {
				bad("%s[%d].pid: missing", where, i)
			}
			if pids[p.PID] {
				bad("%s[%d].pid: %d listed twice on this device", where, i, p.PID)
			}
			pids[p.PID] = true
		}
	}
	checkProcs("processes", d.Processes)
	if len(d.MIG) > 0 && len(d.Processes) > 0 {
		bad("processes: a GPU in MIG mode runs processes in its MIG instances, not on the parent")
	}
	if len(d.MIG) > 7 {
		bad("mig: %d instances; a GPU has at most 7", len(d.MIG))
	}
	slicesUsed, gis := 0, map[int]bool{}
	for j, m := range d.MIG {
		where := fmt.Sprintf("mig[%d]", j)
		g, _, err := parseProfile(m.Profile)
		if err != nil {
			bad("%s.profile: %v", where, err)
		}
		slicesUsed += g
		if gis[m.GPUInstance] {
			bad("%s.gpu_instance: %d used twice", where, m.GPUInstance)
		}
		gis[m.GPUInstance] = true
		claim(m.UUID, where+".uuid")
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
	return errs
}

// parseProfile reads "3g.40gb" into its slice count and memory in GiB.
func parseProfile(p string) (slices, gb int, err error) {
	_, err = fmt.Sscanf(p, "%dg.%dgb", &slices, &gb)
	if err != nil || slices < 1 || slices > 7 || gb < 1 || fmt.Sprintf("%dg.%dgb", slices, gb) != p {
		return 0, 0, fmt.Errorf("%q is not a MIG profile such as 1g.10gb or 3g.40gb", p)
	}
	return slices, gb, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
