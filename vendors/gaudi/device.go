// Package gaudi reads Intel Gaudi accelerators through hl-smi and procfs and
// returns plain Go values.
//
// One hl-smi run per query reads every device. A reading hl-smi prints as
// "N/A", or leaves out because it was not asked for, is left unset (the
// exporter then omits one series). A run that fails (missing binary, non-zero
// exit, timeout, output that is too large, not UTF-8, or not the table that
// was asked for) fails the whole query with an *Error whose Reason says why;
// the Runner counts every failure by Reason. A single value that is present
// but unreadable unsets that reading only and is listed in Device.Problems
// and counted as ReasonBadValue, so that one odd cell never hides a device.
package gaudi

import "github.com/xpu-exporter/xpu_exporter/vendors/reading"

// Opt is a reading the device may not have given (reading.Opt).
type Opt[T any] = reading.Opt[T]

// Clock names a clock domain hl-smi reports.
type Clock string

const (
	// ClockSoC is the SoC clock (clocks.*.soc).
	ClockSoC Clock = "soc"
	// ClockTPC is the tensor processor cores' clock (clocks.limit.tpc).
	ClockTPC Clock = "tpc"
)

// ECCCounter names one of hl-smi's ECC error totals.
type ECCCounter struct {
	Type string // "corrected" or "uncorrected"
	// Scope is "aggregate" or "volatile". The hl-smi manual pairs them like
	// nvidia-smi does; third-party summaries of it read "aggregate" as since
	// driver load and "volatile" as since the device was last opened.
	Scope string
	// Memory is "" for the device-wide totals (ecc.errors.<type>.<scope>.total)
	// and "dram" for the DRAM (HBM) totals (ecc.errors.dram*.<scope>.total).
	Memory string
}

// NoIndex is the Index of a row whose index cell hl-smi printed
// unreadably (N/A, empty, not a number). Its device can be told only by
// its identity cells (BusID, UUID, Serial); numbering it by its row would
// be a guess.
const NoIndex = -1

// Device is one Gaudi device as read in one hl-smi run.
type Device struct {
	// Index is hl-smi's index column: the order in which hl-smi lists the
	// devices, which is not the OAM module slot (ModuleID). NoIndex when
	// the row's cell could not be read (listed in Problems).
	Index    int
	ModuleID Opt[int]

	UUID          string
	Name          string // product name, e.g. "HL-225" (Gaudi 2), "HL-325L" (Gaudi 3)
	BusID         string // PCI address, lower case, "0000:19:00.0"
	Serial        string
	DriverVersion string

	Utilization Opt[float64] // ratio 0..1 of utilization.aip

	MemoryTotal Opt[uint64] // bytes
	MemoryUsed  Opt[uint64]
	MemoryFree  Opt[uint64]

	Temperature Opt[float64] // °C, temperature.aip

	// Power is power.draw in W. The manual notes that -Q power.draw covers
	// the 54 V rail only, while the "Pwr" figure of hl-smi's summary table
	// adds the 12 V rail, so the two differ.
	Power      Opt[float64]
	PowerLimit Opt[float64] // W, power.max

	Clocks      map[Clock]float64 // Hz, clocks.current.*
	MaxClocks   map[Clock]float64 // Hz, clocks.max.*
	ClockLimits map[Clock]float64 // Hz, clocks.limit.*

	ECC map[ECCCounter]uint64

	PCIeLinkGeneration    Opt[int]
	PCIeLinkMaxGeneration Opt[int]
	PCIeLinkWidth         Opt[int]
	PCIeLinkMaxWidth      Opt[int]

	// Processes are the PIDs that hold the device's node open, filled by
	// AttachProcesses.
	Processes []int

	// Problems lists the cells that were present but unreadable; each left
	// its reading unset.
	Problems []*Error
}
