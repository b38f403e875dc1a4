// Package nvidia reads NVIDIA GPUs through NVML and returns plain Go values.
//
// Every NVML call may fail on some GPU model or driver: NOT_SUPPORTED and
// NO_PERMISSION leave one reading unset (the exporter then omits one series),
// GPU_IS_LOST marks the whole device down, and anything else is recorded in
// Device.Errors so that it can be counted, never silently dropped.
package nvidia

import (
	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/xpu-exporter/xpu_exporter/vendors/reading"
)

// Opt is a reading the device may not have given (reading.Opt).
type Opt[T any] = reading.Opt[T]

// Identity holds the static facts of a device. They are cached per index so
// that a device that stops answering can still be named in its down series.
type Identity struct {
	Index        int
	UUID         string
	Name         string
	PCIBusID     string
	Serial       string
	VBIOSVersion string
	// Minor is the minor number of the GPU's device file: nvml.h,
	// nvmlDeviceGetMinorNumber, "the Nvidia device node file for each GPU
	// will have the form /dev/nvidia[minor number]". Slurm numbers GRES by
	// these files when gres.conf lists them without Links.
	Minor Opt[int]
}

// MIG describes a MIG instance: a device of its own inside a parent GPU.
type MIG struct {
	ParentUUID  string
	ParentIndex int
	// Index is the handle index of nvmlDeviceGetMigDeviceHandleByIndex,
	// which the device plugins' index strategy uses ("<gpu>:<index>").
	Index             int
	Profile           string // e.g. "1g.10gb", or "1c.3g.40gb" for a compute instance
	GPUInstanceID     int
	ComputeInstanceID int
	// SliceFraction is the share of the parent's compute slices this instance
	// holds (1/7 for 1g on a 7-slice GPU), used to attribute a fraction of a
	// GPU; 0 when it could not be read.
	SliceFraction float64
}

// TempThreshold names a temperature limit the driver sets for a device.
type TempThreshold string

// The limits the exporter reads, in the order it reports them.
const (
	TempShutdown  TempThreshold = "shutdown"
	TempSlowdown  TempThreshold = "slowdown"
	TempGPUMax    TempThreshold = "gpu_max"
	TempMemoryMax TempThreshold = "memory_max"
)

// TempThresholds lists the limits in report order.
var TempThresholds = []TempThreshold{TempShutdown, TempSlowdown, TempGPUMax, TempMemoryMax}

// Clock names the clock domains the exporter reads.
type Clock string

const (
	ClockGraphics Clock = "graphics"
	ClockSM       Clock = "sm"
	ClockMemory   Clock = "memory"
)

// ECCCounter is one of NVML's four total ECC counters.
type ECCCounter struct {
	Type  string // "corrected" or "uncorrected"
	Scope string // "volatile" (since driver load) or "aggregate" (lifetime)
}

// RemappedRows is the row-remapping state of Ampere and later GPUs.
type RemappedRows struct {
	Correctable   int
	Uncorrectable int
	Pending       bool
	Failed        bool
}

// Process is a compute process running on a device.
type Process struct {
	PID uint32
	// UsedMemory is unset when NVML reports NVML_VALUE_NOT_AVAILABLE, as it
	// does without the permission to see other users' processes.
	UsedMemory Opt[uint64]
	// SMUtilization is this process's use of the device's SMs over the
	// read's window (see window.go): the time-weighted mean of NVML's
	// per-process samples, 0 for the periods it has none (ratio 0..1). Unset
	// when the driver gave no window or cannot sample per process (MIG).
	// The samples' memory, encoder and decoder values are not kept: no
	// series splits them between owners.
	SMUtilization Opt[float64]
}

// CallError is an unexpected NVML failure: one that is not the GPU model
// lacking the feature, and not the GPU being lost.
type CallError struct {
	Call   string
	Return nvml.Return
}

func (e CallError) Error() string { return e.Call + ": " + e.Return.Error() }

// Device is one GPU or MIG instance as read in one scrape.
type Device struct {
	Identity
	MIG *MIG // nil for a whole GPU

	// Up is false when the device is lost or did not answer in time; Down
	// then says why and no readings are set.
	Up   bool
	Down string

	// Utilization is the mean over the read's window where the driver keeps
	// samples (window.go), else its latest sample period. Ratios 0..1.
	Utilization        Opt[float64]
	MemoryUtilization  Opt[float64]
	EncoderUtilization Opt[float64]
	DecoderUtilization Opt[float64]
	// WindowEnd is the timestamp (µs) of the newest device sample the
	// window ends at: a read that ended no sample period since the last
	// one serves that window again, with its end. 0 without a window.
	WindowEnd uint64

	MemoryTotal    Opt[uint64] // bytes
	MemoryUsed     Opt[uint64]
	MemoryReserved Opt[uint64]

	Temperature       Opt[float64] // °C
	MemoryTemperature Opt[float64]
	// TempLimits are the device's own limits in °C; a limit NVML does not
	// give is absent.
	TempLimits map[TempThreshold]float64

	Power      Opt[float64] // W
	PowerLimit Opt[float64]
	Energy     Opt[float64] // J since driver load
	FanSpeed   Opt[float64] // ratio of maximum
	PState     Opt[int]
	Clocks     map[Clock]float64 // Hz
	MaxClocks  map[Clock]float64
	Throttle   map[string]bool // nil when the reasons cannot be read
	MIGEnabled Opt[bool]       // on MIG-capable whole GPUs only
	// MIGListed says every MIG device of a GPU in MIG mode was listed (the
	// devices that follow it in the read, none perhaps): none failed to
	// answer.
	MIGListed   bool
	PCIeTX      Opt[float64] // bytes/s
	PCIeRX      Opt[float64]
	PCIeReplays Opt[uint64]

	PCIeLinkGeneration    Opt[int]
	PCIeLinkWidth         Opt[int]
	PCIeLinkMaxGeneration Opt[int]
	PCIeLinkMaxWidth      Opt[int]

	ECC                 map[ECCCounter]uint64
	RetiredPages        map[string]uint64 // by cause
	RetiredPagesPending Opt[bool]
	RemappedRows        Opt[RemappedRows]

	NVLinks []NVLink
	// GPM says the device supports GPM profiling; Profiling holds its
	// readings by the Prof* names (none on the first scrape).
	GPM       bool
	Profiling map[string]float64

	Processes []Process
	// ProcessesPartial says a process list call failed with an error that
	// may hide processes (processList).
	ProcessesPartial bool
	// Exited are the PIDs with SM utilization samples in the read's window
	// that no list names any more: processes that used the device in the
	// window and have exited since (or left it). Only PID and
	// SMUtilization are set; they hold no memory now.
	Exited []Process
	Errors []CallError
}

// NVLinkErrorTypes name NVLink.Errors: nvmlDeviceGetNvLinkErrorCounter's
// NVML_NVLINK_ERROR_DL_REPLAY, _RECOVERY, _CRC_FLIT and _CRC_DATA.
var NVLinkErrorTypes = [...]string{"replay", "recovery", "crc_flit", "crc_data"}

// NVLink is one NVLink of a GPU.
type NVLink struct {
	Link int
	// Up is unset when the link's state could not be read; nothing else of
	// the link is known then.
	Up Opt[bool]
	// Errors are the link's error counters, in the order of
	// NVLinkErrorTypes; a fixed array, not a map: 18 links on each of 8
	// GPUs were 144 maps a scrape.
	Errors [len(NVLinkErrorTypes)]Opt[uint64]
	// TXBytes and RXBytes count the data (payload) bytes the link carried
	// since the driver was loaded.
	TXBytes Opt[float64]
	RXBytes Opt[float64]
}

// Node is what one scrape read from NVML.
type Node struct {
	DriverVersion string
	CUDAVersion   string // e.g. "12.4"
	Devices       []Device
}

// ThrottleReasons maps NVML's clock throttle (event) reason bits to the
// label values the exporter emits. A bit NVML does not know is not listed.
var ThrottleReasons = []struct {
	Bit  uint64
	Name string
}{
	{nvml.ClocksThrottleReasonGpuIdle, "gpu_idle"},
	{nvml.ClocksThrottleReasonApplicationsClocksSetting, "applications_clocks_setting"},
	{nvml.ClocksThrottleReasonSwPowerCap, "sw_power_cap"},
	{nvml.ClocksThrottleReasonHwSlowdown, "hw_slowdown"},
	{nvml.ClocksThrottleReasonSyncBoost, "sync_boost"},
	{nvml.ClocksThrottleReasonSwThermalSlowdown, "sw_thermal_slowdown"},
	{nvml.ClocksThrottleReasonHwThermalSlowdown, "hw_thermal_slowdown"},
	{nvml.ClocksThrottleReasonHwPowerBrakeSlowdown, "hw_power_brake_slowdown"},
	{nvml.ClocksThrottleReasonDisplayClockSetting, "display_clocks_setting"},
}
