package demo

// Gaudi devices of a scenario reach the exporter the way real ones do: an
// hl-smi binary that the Gaudi collector runs at every scrape, and a procfs
// and sysfs tree in which processes hold the devices' compute nodes open.
// The hl-smi is the exporter binary itself, run again with HLSMIEnv set
// (main.go), which prints the table of the scenario's values at the moment
// it runs, so that values move like NVML's.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/xpu-exporter/xpu_exporter/attribution/kubernetes"
	"github.com/xpu-exporter/xpu_exporter/demo/hlsmisim"
)

// HLSMIEnv is the environment variable that makes the exporter binary the
// demo's hl-smi: its value is the spec file StartAttribution wrote.
const HLSMIEnv = "XPU_DEMO_HLSMI"

// HLSMIFaults make the demo's hl-smi fail as a real one can.
type HLSMIFaults struct {
	// Mode is "" (answer), "hang" (never answer: a process stuck in the
	// driver), "exit" (print Stderr and exit 1), "garbage" (print what
	// is not the table asked for) or "cut" (print the table cut short
	// inside its last cell, with no line end after it, and exit 0, as a
	// run whose writing stopped early while its status said nothing).
	Mode   string `yaml:"mode"`
	Stderr string `yaml:"stderr"`
}

func (f *HLSMIFaults) validate() error {
	switch f.Mode {
	case "", "hang", "exit", "garbage", "cut":
		return nil
	}
	return fmt.Errorf("mode: %q is not hang, exit, garbage or cut", f.Mode)
}

func (d *DeviceSpec) isGaudi() bool { return d.Vendor == VendorGaudi }

// validateGaudi refuses what a Gaudi device cannot have: readings hl-smi
// does not print, NVIDIA's MIG, NVLink and faults, and per-process
// readings, which hl-smi has none of.
func (d *DeviceSpec) validateGaudi() []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	for _, k := range sortedKeys(d.Metrics) {
		if _, known := MetricKeys[k]; known && !slices.Contains(gaudiKeys, k) {
			bad("metrics.%s: hl-smi gives no such reading (a Gaudi takes %s)", k, strings.Join(gaudiKeys, ", "))
		}
	}
	// The Intel Gaudi device plugin names a device by its serial.
	if ref, err := kubernetes.NormalizeDeviceID("habana.ai/gaudi", d.Serial); err != nil || ref.Serial != d.Serial {
		bad("serial: %q is not a board serial the Gaudi device plugin can name (letters and digits, dashes inside, at most 64)", d.Serial)
	}
	if d.inMIGMode() {
		bad("mig: a Gaudi has no MIG")
	}
	if d.NVLinks != nil || len(d.NVLinksDown) > 0 {
		bad("nvlinks: a Gaudi has no NVLink")
	}
	if len(d.ThrottleReasons) > 0 {
		bad("throttle_reasons: hl-smi reports none")
	}
	f := d.Faults
	if f.Lost || len(f.Unsupported)+len(f.Errors)+len(f.NoPermission)+len(f.Hang)+len(f.Panic)+len(f.FailingLinks) > 0 {
		bad("faults: NVML faults; a Gaudi's failures are the scenario's hl_smi and the device's unlisted, unlisted_after and not_available")
	}
	if f.UnlistedAfter != "" {
		if dur, err := time.ParseDuration(f.UnlistedAfter); err != nil || dur <= 0 {
			bad("faults.unlisted_after: %q is not a positive duration", f.UnlistedAfter)
		} else {
			d.Faults.unlistedAfter = dur
		}
	}
	fields := make([]string, len(hlsmiColumns))
	for i, c := range hlsmiColumns {
		fields[i] = hlsmiField(c)
	}
	for _, name := range f.NotAvailable {
		if !slices.Contains(fields, name) {
			bad("faults.not_available: %q is not an hl-smi field the exporter asks for (%s)", name, strings.Join(fields, ", "))
		}
	}
	for i, p := range d.Processes {
		if p.Utilization != nil || p.MemoryUsed != nil {
			bad("processes[%d]: hl-smi reports no memory or utilization per process", i)
		}
		if p.Duty != nil || len(p.Lists) > 0 {
			bad("processes[%d]: duty and lists are NVML's per-process sampling and process lists", i)
		}
	}
	return errs
}

// gaudiDevices are the scenario's Gaudi devices in hl-smi's order, which
// gives their index.
func (s *Scenario) gaudiDevices() []*DeviceSpec {
	var out []*DeviceSpec
	for i := range s.Devices {
		if s.Devices[i].Vendor == VendorGaudi {
			out = append(out, &s.Devices[i])
		}
	}
	return out
}

// hlsmiColumns is the header of the table the demo's hl-smi answers from:
// the fields the exporter asks for, with the units hl-smi's header names
// them in, as in the recorded outputs of fixtures/gaudi/SOURCES.md.
var hlsmiColumns = []string{
	"index", "module_id", "uuid", "name", "bus_id", "serial", "driver_version",
	"utilization.aip [%]", "memory.total [MiB]", "memory.used [MiB]", "memory.free [MiB]",
	"temperature.aip [C]", "power.draw [W]", "power.max [W]",
	"clocks.current.soc [MHz]", "clocks.max.soc [MHz]", "clocks.limit.soc [MHz]", "clocks.limit.tpc [MHz]",
	"ecc.errors.corrected.aggregate.total", "ecc.errors.corrected.volatile.total",
	"ecc.errors.uncorrected.aggregate.total", "ecc.errors.uncorrected.volatile.total",
	"ecc.errors.dram-corrected.aggregate.total", "ecc.errors.dram-corrected.volatile.total",
	"ecc.errors.dram.aggregate.total", "ecc.errors.dram.volatile.total",
	"pcie.link.gen.current", "pcie.link.gen.max", "pcie.link.width.current", "pcie.link.width.max",
}

// notAvailable is what hl-smi prints for a reading it does not have.
const notAvailable = "N/A"

// hlsmiField is a header cell's field name, its unit left off.
func hlsmiField(column string) string {
	name, _, _ := strings.Cut(column, " [")
	return name
}

// listed tells whether hl-smi lists the device at now, for a node booted
// at start (Faults.Unlisted, Faults.UnlistedAfter).
func (d *DeviceSpec) listed(start, now time.Time) bool {
	f := &d.Faults
	return !f.Unlisted && (f.unlistedAfter == 0 || now.Sub(start) < f.unlistedAfter)
}

// HLSMITable is the scenario's Gaudi devices as hl-smi would list them at
// now, for a node booted at start: a CSV table with hl-smi's header and
// values without units. A reading the scenario does not set is "N/A", as
// hl-smi prints one the device lacks. The ECC totals since the driver was
// loaded (volatile) and over the device's life (aggregate) are the same,
// the simulated device being new at boot.
func (s *Scenario) HLSMITable(start, now time.Time) []byte {
	var b bytes.Buffer
	b.WriteString(strings.Join(hlsmiColumns, ", ") + "\n")
	for k, d := range s.gaudiDevices() {
		if !d.listed(start, now) {
			continue
		}
		at := func(key string) (float64, bool) {
			v, ok := d.Metrics[key]
			if !ok {
				return 0, false
			}
			return v.At(s.origin(key, start), now), true
		}
		whole := func(key string, scale float64) string {
			v, ok := at(key)
			if !ok {
				return notAvailable
			}
			return strconv.FormatFloat(math.Round(v*scale), 'f', 0, 64)
		}
		count := func(key string) string {
			v, ok := at(key)
			if !ok {
				return notAvailable
			}
			return strconv.FormatFloat(math.Floor(v), 'f', 0, 64)
		}
		const mib = 1 << 20
		total := math.Floor(d.MemoryTotal.At(start, now) / mib)
		used, free := notAvailable, notAvailable
		if v, ok := at("memory_used"); ok {
			u := math.Min(math.Floor(v/mib), total)
			used = strconv.FormatFloat(u, 'f', 0, 64)
			free = strconv.FormatFloat(total-u, 'f', 0, 64)
		}
		powerMax, maxSoC := notAvailable, notAvailable
		if d.PowerLimitWatts != nil {
			powerMax = strconv.FormatFloat(math.Round(d.PowerLimitWatts.At(start, now)), 'f', 0, 64)
		}
		if v, ok := d.MaxClocksMHz["soc"]; ok {
			maxSoC = strconv.FormatFloat(math.Round(v.At(start, now)), 'f', 0, 64)
		}
		row := []string{
			strconv.Itoa(k), strconv.Itoa(k), d.UUID, d.Model, d.PCIBusID, d.Serial, s.GaudiDriverVersion,
			whole("utilization", 100), strconv.FormatFloat(total, 'f', 0, 64), used, free,
			whole("temperature", 1), whole("power", 1), powerMax,
			whole("clock_soc", 1), maxSoC, maxSoC, notAvailable,
			count("ecc_corrected"), count("ecc_corrected"),
			count("ecc_uncorrected"), count("ecc_uncorrected"),
			count("dram_ecc_corrected"), count("dram_ecc_corrected"),
			count("dram_ecc_uncorrected"), count("dram_ecc_uncorrected"),
			whole("pcie_generation", 1), whole("pcie_max_generation", 1), whole("pcie_width", 1), whole("pcie_max_width", 1),
		}
		for i, c := range hlsmiColumns {
			if slices.Contains(d.Faults.NotAvailable, hlsmiField(c)) {
				row[i] = notAvailable
			}
		}
		b.WriteString(strings.Join(row, ", ") + "\n")
	}
	return b.Bytes()
}

// hlsmiSpec is what the demo's hl-smi needs to print the node as it is now.
type hlsmiSpec struct {
	Scenario string    `json:"scenario"`        // the scenario's text, in a file
	Start    time.Time `json:"start"`           // when the simulation started
	Loaded   time.Time `json:"loaded,omitzero"` // Scenario.DriverLoaded
}

// ServeHLSMI is the demo's hl-smi: it answers args as hl-smi would for the
// scenario of the spec file at this moment, and returns the exit status.
func ServeHLSMI(spec string, args []string, stdout, stderr io.Writer) int {
	fail := func(err error) int {
		fmt.Fprintln(stderr, "hl-smi:", err)
		return 1
	}
	b, err := os.ReadFile(spec)
	if err != nil {
		return fail(err)
	}
	var sp hlsmiSpec
	if err := json.Unmarshal(b, &sp); err != nil {
		return fail(fmt.Errorf("spec %s: %w", spec, err))
	}
	s, err := Load(sp.Scenario)
	if err != nil {
		return fail(err)
	}
	s.DriverLoaded = sp.Loaded
	switch s.HLSMI.Mode {
	case "hang":
		for {
			time.Sleep(time.Hour)
		}
	case "exit":
		fmt.Fprintln(stderr, s.HLSMI.Stderr)
		return 1
	case "garbage":
		_, err := io.WriteString(stdout, "hl-smi: internal error \x01\x02 ((\n")
		if err != nil {
			return 1
		}
		return 0
	}
	var out bytes.Buffer
	if err := hlsmisim.Answer(bytes.NewReader(s.HLSMITable(sp.Start, time.Now())), args, &out); err != nil {
		return fail(err)
	}
	table := out.Bytes()
	if s.HLSMI.Mode == "cut" {
		table = bytes.TrimSuffix(table, []byte("\n"))
		table = table[:max(len(table)-1, 0)]
	}
	if _, err := stdout.Write(table); err != nil {
		return 1
	}
	return 0
}

// writeGaudi lays out what the Gaudi collector reads besides hl-smi: a sysfs
// tree with a habanalabs accel node per device (its "dev" number and its PCI
// device's pci_addr, as sysfs-driver-habanalabs documents them), and, in
// procfs, a descriptor per process and device that points at the device's
// compute node. It returns the sysfs root and the hl-smi spec file.
//
// The scanner identifies a node by the device number of the file a
// descriptor leads to, and creating a character device needs privileges a
// demo does not have. So each simulated node, dev/accel/accel<n> in the
// demo's directory, is a symbolic link to a distinct character device that
// already exists in /dev (/dev/null, /dev/zero, …), and sysfs gives that
// device's number: the scanner's code runs unchanged.
func (s *Scenario) writeGaudi(dir, procfs string, start time.Time) (sysfs, spec string, err error) {
	devs := s.gaudiDevices()
	sysfs = filepath.Join(dir, "sys")
	targets := charDevices(len(devs))
	driver := filepath.Join(sysfs, "bus", "pci", "drivers", "habanalabs")
	if err := os.MkdirAll(driver, 0o755); err != nil {
		return "", "", err
	}
	nextFD := map[uint32]int{}
	for k, d := range devs {
		name := fmt.Sprintf("accel%d", k)
		node := filepath.Join(dir, "dev", "accel", name)
		if k >= len(targets) {
			// Not enough distinct character devices on this machine:
			// this device's processes are not seen.
			continue
		}
		if err := os.MkdirAll(filepath.Dir(node), 0o755); err != nil {
			return "", "", err
		}
		if err := os.Symlink(targets[k].path, node); err != nil {
			return "", "", err
		}
		pci := filepath.Join(sysfs, "devices", "pci0000:00", d.PCIBusID)
		class := filepath.Join(sysfs, "class", "accel", name)
		for _, p := range []string{pci, class} {
			if err := os.MkdirAll(p, 0o755); err != nil {
				return "", "", err
			}
		}
		files := map[string]string{
			filepath.Join(pci, "pci_addr"):  d.PCIBusID + "\n",
			filepath.Join(pci, "module_id"): strconv.Itoa(k) + "\n",
			filepath.Join(class, "dev"):     targets[k].dev + "\n",
		}
		for path, content := range files {
			if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
				return "", "", err
			}
		}
		for link, target := range map[string]string{
			filepath.Join(pci, "driver"):   driver,
			filepath.Join(class, "device"): pci,
		} {
			if err := os.Symlink(target, link); err != nil {
				return "", "", err
			}
		}
		for _, p := range d.Processes {
			fds := filepath.Join(procfs, strconv.FormatUint(uint64(p.PID), 10), "fd")
			if err := os.MkdirAll(fds, 0o755); err != nil {
				return "", "", err
			}
			// 0, 1 and 2 are the standard streams; the nodes come after.
			fd := 3 + nextFD[p.PID]
			nextFD[p.PID]++
			if err := os.Symlink(node, filepath.Join(fds, strconv.Itoa(fd))); err != nil {
				return "", "", err
			}
		}
	}
	scenario := filepath.Join(dir, "scenario.yaml")
	if err := os.WriteFile(scenario, s.raw, 0o644); err != nil {
		return "", "", err
	}
	b, err := json.Marshal(hlsmiSpec{Scenario: scenario, Start: start, Loaded: s.DriverLoaded})
	if err != nil {
		return "", "", err
	}
	spec = filepath.Join(dir, "hl-smi.json")
	return sysfs, spec, os.WriteFile(spec, b, 0o644)
}

type charDevice struct {
	path string
	dev  string // "major:minor", as a sysfs dev attribute
}

// charDevices finds up to n character devices in /dev with distinct device
// numbers, in name order.
func charDevices(n int) []charDevice {
	entries, err := os.ReadDir("/dev")
	if err != nil {
		return nil
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	seen := map[uint64]bool{}
	var out []charDevice
	for _, name := range names {
		if len(out) == n {
			break
		}
		path := filepath.Join("/dev", name)
		var st syscall.Stat_t
		if err := syscall.Lstat(path, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFCHR || seen[st.Rdev] {
			continue
		}
		seen[st.Rdev] = true
		major := (st.Rdev>>8)&0xfff | (st.Rdev>>32)&^0xfff
		minor := st.Rdev&0xff | (st.Rdev>>12)&^0xff
		out = append(out, charDevice{path: path, dev: fmt.Sprintf("%d:%d", major, minor)})
	}
	return out
}
