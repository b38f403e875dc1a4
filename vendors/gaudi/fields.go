package gaudi

// Field names, units and meanings come from Intel Gaudi's manual, "System
// Management Interface Tool (hl-smi)", option "-Q, --query-aip <types>":
// https://docs.habana.ai/en/latest/Management_and_Monitoring/Embedded_System_Tools_Guide/System_Management_Interface_Tool.html
// Its list of possible queries: timestamp, name, bus_id, driver_version,
// temperature.aip, module_id, utilization.aip, memory.total, memory.free,
// memory.used, index, serial, uuid, power.draw, ecc.errors.{uncorrected,
// corrected}.{aggregate,volatile}.total, ecc.errors.dram{,-corrected}.
// {aggregate,volatile}.total, ecc.mode.current, ecc.mode.pending,
// stats.violation.power, stats.violation.thermal, clocks.current.soc,
// clocks.max.soc, clocks.limit.soc, clocks.limit.tpc, pcie.link.gen.{max,
// current}, pcie.link.width.{max,current}, pcie.link.speed.{max,current}.
//
// Units: as with nvidia-smi, the CSV header names the unit in brackets
// ("memory.used [MiB]") and keeps it under nounits, which only drops the
// unit after each value ("672 MiB" becomes "672"); see fixtures/gaudi/SOURCES.md
// for recorded output of hl-smi 1.18 and 1.22.
//
// power.max is not in the manual's list, but hl-smi 1.22 on Gaudi 3 answers
// it with the power cap ("850 W", recorded in fixtures/gaudi/SOURCES.md); it is
// the reading behind the manual's "-p, --power-max <watts>: Sets maximum power
// limit". ecc.mode.*, stats.violation.* and pcie.link.speed.* are not read:
// the manual gives no format or unit for them. Row replacement is no
// --query-aip field: the manual offers it through --query-row-replacement,
// a second command, so one run per scrape cannot read it.

import (
	"strconv"
	"strings"

	"github.com/xpu-exporter/xpu_exporter/internal/pciaddr"
	"github.com/xpu-exporter/xpu_exporter/vendors/reading"
)

// DefaultFields is what a Runner asks for unless told otherwise: the
// fields whose readings are served. memory.free and clocks.limit.* are
// understood (recorded outputs carry them) but not asked for: nothing
// serves them (memory.total and memory.used give the memory; the manual
// does not say how a clock limit differs from clocks.max), and an hl-smi
// that lacks one would fail every run for a reading nobody sees.
var DefaultFields = []string{
	"index", "module_id", "uuid", "name", "bus_id", "serial", "driver_version",
	"utilization.aip", "memory.total", "memory.used",
	"temperature.aip", "power.draw", "power.max",
	"clocks.current.soc", "clocks.max.soc",
	"ecc.errors.corrected.aggregate.total", "ecc.errors.corrected.volatile.total",
	"ecc.errors.uncorrected.aggregate.total", "ecc.errors.uncorrected.volatile.total",
	"ecc.errors.dram-corrected.aggregate.total", "ecc.errors.dram-corrected.volatile.total",
	"ecc.errors.dram.aggregate.total", "ecc.errors.dram.volatile.total",
	"pcie.link.gen.current", "pcie.link.gen.max", "pcie.link.width.current", "pcie.link.width.max",
}

const (
	mib = 1 << 20 // memory.* are in MiB
	mhz = 1e6     // clocks.* are in MHz
)

// field says how to read one hl-smi field into a Device.
type field struct {
	unit string // as printed in the header and after values; "" for none
	set  func(d *Device, v string) bool
}

var fieldSpecs = map[string]field{
	"index":          {"", func(d *Device, v string) bool { return setInt(&d.Index, v) }},
	"module_id":      {"", func(d *Device, v string) bool { return setOptInt(&d.ModuleID, v) }},
	"uuid":           {"", func(d *Device, v string) bool { return setText(&d.UUID, v) }},
	"name":           {"", func(d *Device, v string) bool { return setText(&d.Name, v) }},
	"bus_id":         {"", func(d *Device, v string) bool { d.BusID = pciaddr.Canonical(v); return d.BusID != "" }},
	"serial":         {"", func(d *Device, v string) bool { return setText(&d.Serial, v) }},
	"driver_version": {"", func(d *Device, v string) bool { return setText(&d.DriverVersion, v) }},
	"utilization.aip": {"%", func(d *Device, v string) bool {
		f, ok := parseFloat(v)
		if !ok || f < 0 || f > 100 {
			return false
		}
		d.Utilization = reading.Some(f / 100)
		return true
	}},
	"memory.total":    {"MiB", func(d *Device, v string) bool { return setBytes(&d.MemoryTotal, v) }},
	"memory.used":     {"MiB", func(d *Device, v string) bool { return setBytes(&d.MemoryUsed, v) }},
	"memory.free":     {"MiB", func(d *Device, v string) bool { return setBytes(&d.MemoryFree, v) }},
	"temperature.aip": {"C", func(d *Device, v string) bool { return setFloat(&d.Temperature, v, 1) }},
	"power.draw":      {"W", func(d *Device, v string) bool { return setNonNeg(&d.Power, v) }},
	"power.max":       {"W", func(d *Device, v string) bool { return setNonNeg(&d.PowerLimit, v) }},

	"clocks.current.soc": clock(func(d *Device) map[Clock]float64 { return mapOf(&d.Clocks) }, ClockSoC),
	"clocks.max.soc":     clock(func(d *Device) map[Clock]float64 { return mapOf(&d.MaxClocks) }, ClockSoC),
	"clocks.limit.soc":   clock(func(d *Device) map[Clock]float64 { return mapOf(&d.ClockLimits) }, ClockSoC),
	"clocks.limit.tpc":   clock(func(d *Device) map[Clock]float64 { return mapOf(&d.ClockLimits) }, ClockTPC),

	"ecc.errors.corrected.aggregate.total":      ecc("corrected", "aggregate", ""),
	"ecc.errors.corrected.volatile.total":       ecc("corrected", "volatile", ""),
	"ecc.errors.uncorrected.aggregate.total":    ecc("uncorrected", "aggregate", ""),
	"ecc.errors.uncorrected.volatile.total":     ecc("uncorrected", "volatile", ""),
	"ecc.errors.dram-corrected.aggregate.total": ecc("corrected", "aggregate", "dram"),
	"ecc.errors.dram-corrected.volatile.total":  ecc("corrected", "volatile", "dram"),
	"ecc.errors.dram.aggregate.total":           ecc("uncorrected", "aggregate", "dram"),
	"ecc.errors.dram.volatile.total":            ecc("uncorrected", "volatile", "dram"),

	"pcie.link.gen.current":   {"", func(d *Device, v string) bool { return setOptInt(&d.PCIeLinkGeneration, v) }},
	"pcie.link.gen.max":       {"", func(d *Device, v string) bool { return setOptInt(&d.PCIeLinkMaxGeneration, v) }},
	"pcie.link.width.current": {"", func(d *Device, v string) bool { return setOptInt(&d.PCIeLinkWidth, v) }},
	"pcie.link.width.max":     {"", func(d *Device, v string) bool { return setOptInt(&d.PCIeLinkMaxWidth, v) }},
}

// KnownField says whether the reader can read the named hl-smi field.
func KnownField(name string) bool {
	_, ok := fieldSpecs[name]
	return ok
}

func clock(m func(*Device) map[Clock]float64, c Clock) field {
	return field{"MHz", func(d *Device, v string) bool {
		f, ok := parseFloat(v)
		if !ok || f < 0 {
			return false
		}
		m(d)[c] = f * mhz
		return true
	}}
}

func ecc(typ, scope, memory string) field {
	return field{"", func(d *Device, v string) bool {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return false
		}
		mapOf(&d.ECC)[ECCCounter{Type: typ, Scope: scope, Memory: memory}] = n
		return true
	}}
}

func mapOf[K comparable, V any](m *map[K]V) map[K]V {
	if *m == nil {
		*m = map[K]V{}
	}
	return *m
}

// setText sets a text reading, refusing a bracketed placeholder such as
// nvidia-smi's "[N/A]" or "[Not Supported]": hl-smi's manual prints "N/A"
// for a reading it lacks (read as absent), and a tool printing another
// form must not name a device "[N/A]", nor two devices alike by it.
func setText(dst *string, v string) bool {
	if strings.HasPrefix(v, "[") && strings.HasSuffix(v, "]") {
		return false
	}
	*dst = v
	return true
}

func setInt(dst *int, v string) bool {
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return false
	}
	*dst = n
	return true
}

func setOptInt(dst *Opt[int], v string) bool {
	var n int
	if !setInt(&n, v) {
		return false
	}
	*dst = reading.Some(n)
	return true
}

func setFloat(dst *Opt[float64], v string, scale float64) bool {
	f, ok := parseFloat(v)
	if !ok {
		return false
	}
	*dst = reading.Some(f * scale)
	return true
}

func setNonNeg(dst *Opt[float64], v string) bool {
	f, ok := parseFloat(v)
	if !ok || f < 0 {
		return false
	}
	*dst = reading.Some(f)
	return true
}

func setBytes(dst *Opt[uint64], v string) bool {
	f, ok := parseFloat(v)
	// 1<<43 MiB is 8 EiB, beyond uint64 bytes after scaling.
	if !ok || f < 0 || f >= 1<<43 {
		return false
	}
	*dst = reading.Some(uint64(f * mib))
	return true
}

// parseFloat accepts finite decimal numbers only: hl-smi prints no
// hexadecimal, infinities or NaN, so such a cell is garbage.
func parseFloat(v string) (float64, bool) {
	if v == "" || strings.ContainsAny(v, "xXpPnNiI_") {
		return 0, false
	}
	f, err := strconv.ParseFloat(v, 64)
	return f, err == nil
}
