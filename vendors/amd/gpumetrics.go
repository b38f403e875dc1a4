package amd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/xpu-exporter/xpu_exporter/vendors/reading"
)

// The gpu_metrics sysfs file holds one binary table whose layout is a
// versioned C struct, gpu_metrics_v<format>_<content>, defined in the
// kernel's drivers/gpu/drm/amd/include/kgd_pp_interface.h. Every version
// starts with struct metrics_table_header {uint16_t structure_size; uint8_t
// format_revision; uint8_t content_revision;}. The header has no packing
// attribute, so members sit at their natural (C, x86-64) alignment; the
// offsets below were worked out by hand from that header and are asserted
// in gpumetrics_test.go. The table is native-endian; amdgpu runs on
// little-endian hosts.
//
// The driver fills the whole struct with 0xFF before writing the fields the
// firmware provides (smu_cmn.c, smu_cmn_init_soft_gpu_metrics: memset to
// 0xFF, then the header), so an all-ones field means "not available" and is
// decoded as unset.
//
// Decoded: v1.1, v1.2 and v1.3 (v1.3 is what Aldebaran, MI200, reports:
// aldebaran_ppt.c, aldebaran_get_gpu_metrics; the first MI300 kernels
// reported it too), and v1.4 to v1.8, which smu_v13_0_6_ppt.c (MI300) has
// reported as kernels moved on. v1.6 to v1.8 add per-partition (XCP) blocks
// with per-XCC activity; their layouts are those of the header in mainline
// and in AMD's ROCm/amdgpu driver tree. The kernel tree has carried two
// v1.6 layouts under the same revision (a first one, 384 bytes, kept the
// VCN/JPEG arrays and throttle_status; the one decoded here, 1664 bytes,
// replaced them with num_partition and xcp_stats), so every table is checked
// against the size its revision has here and refused, never misread, when
// it differs. v1.9 onwards is a list of self-describing attributes (struct
// gpu_metrics_attr) and is not decoded.

// Sizes of the decoded layouts (sizeof, rounded up to the struct's 8-byte
// alignment).
const (
	sizeV1_1 = 96
	sizeV1_2 = 104
	sizeV1_3 = 120
	sizeV1_4 = 288
	sizeV1_5 = 360
	sizeV1_6 = 1664
	sizeV1_7 = 2208
	sizeV1_8 = 3872
)

// ErrMetricsShort is matched by a *MetricsError for a buffer shorter than
// the header or than the size the header declares.
var ErrMetricsShort = errors.New("gpu_metrics table truncated")

// ErrMetricsVersion is matched by a *MetricsError for a revision this
// package does not decode, or a known revision with an unexpected size.
var ErrMetricsVersion = errors.New("gpu_metrics revision not supported")

// MetricsError says why a gpu_metrics table was refused.
type MetricsError struct {
	Format, Content uint8
	StructureSize   uint16
	Len             int
	kind            error
	reason          string
}

func (e *MetricsError) Error() string {
	return fmt.Sprintf("gpu_metrics v%d.%d (structure_size %d, %d bytes read): %s",
		e.Format, e.Content, e.StructureSize, e.Len, e.reason)
}

// Unwrap makes the error match ErrMetricsShort or ErrMetricsVersion.
func (e *MetricsError) Unwrap() error { return e.kind }

// GPUMetrics is a decoded gpu_metrics table in base units. Readings a
// version lacks, or that the firmware marked unavailable, are unset;
// per-instance slices keep unset entries so that an index stays the
// instance number.
type GPUMetrics struct {
	FormatRevision, ContentRevision uint8
	// OutOfRange names the fields, with their values, that hold none the
	// kernel documents (an activity above 100 %): left unset.
	OutOfRange []string

	// Temperatures in °C. v1.1-v1.3 hold edge, hotspot, mem, VR and HBM
	// stack temperatures; v1.4+ only hotspot, mem and VR SoC.
	TemperatureEdge    Opt[float64]
	TemperatureHotspot Opt[float64]
	TemperatureMem     Opt[float64]
	TemperatureVRGFX   Opt[float64]
	TemperatureVRSoC   Opt[float64]
	TemperatureVRMem   Opt[float64]
	TemperatureHBM     []Opt[float64]

	// Activities as ratios 0..1 of the firmware's averaging window.
	GFXActivity Opt[float64]
	UMCActivity Opt[float64] // memory controller
	MMActivity  Opt[float64] // UVD or VCN, v1.1-v1.3
	VCNActivity []Opt[float64]
	// JPEGActivity is per JPEG engine, v1.5.
	JPEGActivity []Opt[float64]
	// GFXActivityAcc and MemActivityAcc are the firmware's running sums of
	// the activity percentage, one addend per firmware sample; the header
	// documents no sample rate, so they are raw.
	GFXActivityAcc Opt[uint32]
	MemActivityAcc Opt[uint32]

	// SocketPower is in watts: average_socket_power (v1.1-v1.3) or
	// curr_socket_power (v1.4+, "Power (Watts)").
	SocketPower Opt[float64]
	// Energy is the energy accumulator in joules, v1.4+ only, where the
	// header gives its unit ("Energy (15.259uJ (2^-16) units)"). v1.1-v1.3
	// state no unit, so their accumulator is not decoded.
	Energy Opt[float64]

	// SystemClockCounter is the driver's timestamp in ns, FirmwareTimestamp
	// the firmware's, converted from its 10 ns resolution to ns.
	SystemClockCounter Opt[uint64]
	FirmwareTimestamp  Opt[uint64]

	// ThrottleStatus is the ASIC-dependent throttler bit mask;
	// IndepThrottleStatus (v1.3) the ASIC-independent one.
	ThrottleStatus      Opt[uint32]
	IndepThrottleStatus Opt[uint64]
	// GFXClockLockStatus (v1.4+) has one bit per GFX clock instance.
	GFXClockLockStatus Opt[uint32]

	// Clocks in Hz (the header's MHz × 10^6). v1.1-v1.3 have one
	// instance of each clock, v1.4+ 8 GFX clocks (one per XCD) and 4 of
	// SoC, VCLK0 and DCLK0.
	AverageGFXClock Opt[float64]
	AverageSoCClock Opt[float64]
	AverageUClock   Opt[float64]
	CurrentGFXClock []Opt[float64]
	CurrentSoCClock []Opt[float64]
	CurrentVClock0  []Opt[float64]
	CurrentDClock0  []Opt[float64]
	CurrentUClock   Opt[float64]

	// FanSpeed is current_fan_speed, v1.1-v1.3, raw: the header states no
	// unit (the SMU firmware of most dGPUs reports RPM, but not all).
	FanSpeed Opt[uint16]
	// Voltages in volts, v1.3.
	VoltageSoC Opt[float64]
	VoltageGFX Opt[float64]
	VoltageMem Opt[float64]

	// PCIe link: lanes and GT/s (the header's 0.1 GT/s units / 10).
	PCIeLinkWidth Opt[int]
	PCIeLinkSpeed Opt[float64]
	// XGMI link (v1.4+): lanes and Gbit/s per the header.
	XGMILinkWidth Opt[int]
	XGMILinkSpeed Opt[float64]

	// PCIe counters (v1.4+). Bandwidths are in GB/s as the header states.
	PCIeBandwidthAcc      Opt[uint64]
	PCIeBandwidthInst     Opt[uint64]
	PCIeL0ToRecoveryCount Opt[uint64]
	PCIeReplayCount       Opt[uint64]
	PCIeReplayRollover    Opt[uint64]
	PCIeNAKSent           Opt[uint64] // v1.5
	PCIeNAKReceived       Opt[uint64] // v1.5

	// XGMI data per link in bytes (the header's "KiloBytes" × 1000), v1.4+.
	XGMIReadBytes  []Opt[uint64]
	XGMIWriteBytes []Opt[uint64]
	// XGMILinkStatus is per link, v1.7+: the header says "XGMI link
	// status(active/inactive)" without naming the values, so it is raw.
	XGMILinkStatus []Opt[uint16]

	// MemMaxBandwidth is the VRAM bandwidth at the maximum memory clock in
	// GB/s, v1.7+.
	MemMaxBandwidth Opt[uint64]
	// AccumulationCounter counts the firmware's accumulation cycles; each
	// *ResidencyAcc counts the cycles a throttler was active, so their ratio
	// is the share of time throttled by that cause (v1.6+).
	AccumulationCounter       Opt[uint32]
	ProchotResidencyAcc       Opt[uint32]
	PPTResidencyAcc           Opt[uint32]
	SocketThermalResidencyAcc Opt[uint32]
	VRThermalResidencyAcc     Opt[uint32]
	HBMThermalResidencyAcc    Opt[uint32]
	PCIeOtherEndRecoveries    Opt[uint32]
	// Partitions holds the first num_partition XCP blocks (v1.6+).
	Partitions []XCPMetrics
}

// XCPMetrics is one compute partition's block of a v1.6+ table.
type XCPMetrics struct {
	// GFXBusy is the instantaneous activity of each XCC (compute die) of
	// the partition as a ratio; unset for the XCCs it does not have.
	GFXBusy []Opt[float64]
	// GFXBusyAcc is the firmware's running sum of each XCC's activity
	// percentage, to be divided by the AccumulationCounter delta.
	GFXBusyAcc []Opt[uint64]
	JPEGBusy   []Opt[float64]
	VCNBusy    []Opt[float64]
}

// table reads little-endian fields of one gpu_metrics buffer; the decoder
// checks the length once, so every offset used is within it.
type table []byte

func (t table) u16(off int) Opt[uint16] {
	v := binary.LittleEndian.Uint16(t[off:])
	if v == 0xFFFF {
		return Opt[uint16]{}
	}
	return reading.Some(v)
}

func (t table) u32(off int) Opt[uint32] {
	v := binary.LittleEndian.Uint32(t[off:])
	if v == 0xFFFFFFFF {
		return Opt[uint32]{}
	}
	return reading.Some(v)
}

func (t table) u64(off int) Opt[uint64] {
	v := binary.LittleEndian.Uint64(t[off:])
	if v == 0xFFFFFFFFFFFFFFFF {
		return Opt[uint64]{}
	}
	return reading.Some(v)
}

// scaled16 reads a uint16 and multiplies it by k.
func (t table) scaled16(off int, k float64) Opt[float64] {
	v := t.u16(off)
	if !v.OK {
		return Opt[float64]{}
	}
	return reading.Some(float64(v.Value) * k)
}

// percent16 reads a uint16 percentage as a ratio; a value above 100 is
// not a percentage and stays unset, named in m.OutOfRange.
func (t table) percent16(m *GPUMetrics, name string, off int) Opt[float64] {
	v := t.u16(off)
	if v.OK && v.Value > 100 {
		m.outOfRange(name, uint64(v.Value))
	}
	if !v.OK || v.Value > 100 {
		return Opt[float64]{}
	}
	return reading.Some(float64(v.Value) / 100)
}

// percents16 is percent16 of the field name, for array16.
func (t table) percents16(m *GPUMetrics, name string) func(int) Opt[float64] {
	return func(off int) Opt[float64] { return t.percent16(m, name, off) }
}

// outOfRange names a field whose value is none the kernel documents, as
// gpu_busy_percent's 101 is a file's error: counted and logged, where it
// was dropped without a word (probe G, PG6). One entry a field.
func (m *GPUMetrics) outOfRange(name string, v uint64) {
	for _, o := range m.OutOfRange {
		if strings.HasPrefix(o, name+" ") {
			return
		}
	}
	m.OutOfRange = append(m.OutOfRange, fmt.Sprintf("%s %d %%", name, v))
}

func (t table) width16(off int) Opt[int] {
	v := t.u16(off)
	if !v.OK {
		return Opt[int]{}
	}
	return reading.Some(int(v.Value))
}

func (t table) array16(off, n int, f func(int) Opt[float64]) []Opt[float64] {
	out := make([]Opt[float64], n)
	for i := range out {
		out[i] = f(off + 2*i)
	}
	return out
}

func (t table) array64(off, n int, k uint64) []Opt[uint64] {
	out := make([]Opt[uint64], n)
	for i := range out {
		v := t.u64(off + 8*i)
		if v.OK && v.Value <= ^uint64(0)/k {
			out[i] = reading.Some(v.Value * k)
		}
	}
	return out
}

// percent32 reads a uint32 percentage as a ratio (see percent16).
func (t table) percent32(m *GPUMetrics, name string, off int) Opt[float64] {
	v := t.u32(off)
	if v.OK && v.Value > 100 {
		m.outOfRange(name, uint64(v.Value))
	}
	if !v.OK || v.Value > 100 {
		return Opt[float64]{}
	}
	return reading.Some(float64(v.Value) / 100)
}

func widen(v Opt[uint32]) Opt[uint64] { return Opt[uint64]{Value: uint64(v.Value), OK: v.OK} }

func mhz(t table) func(int) Opt[float64] {
	return func(off int) Opt[float64] { return t.scaled16(off, 1e6) }
}

// layoutSizes is the size of each gpu_metrics v1.x layout, by content
// revision.
var layoutSizes = [...]int{1: sizeV1_1, 2: sizeV1_2, 3: sizeV1_3, 4: sizeV1_4, 5: sizeV1_5, 6: sizeV1_6, 7: sizeV1_7, 8: sizeV1_8}

// DecodeGPUMetrics decodes one gpu_metrics table. It returns a
// *MetricsError for a buffer shorter than the header or than the size the
// header declares, for a revision it does not know, and for a known
// revision whose declared size is not that revision's.
func DecodeGPUMetrics(b []byte) (*GPUMetrics, error) {
	if len(b) < 4 {
		return nil, &MetricsError{Len: len(b), kind: ErrMetricsShort, reason: "shorter than the 4-byte header"}
	}
	size := binary.LittleEndian.Uint16(b)
	m := &GPUMetrics{FormatRevision: b[2], ContentRevision: b[3]}
	fail := func(kind error, reason string) (*GPUMetrics, error) {
		return nil, &MetricsError{Format: b[2], Content: b[3], StructureSize: size, Len: len(b), kind: kind, reason: reason}
	}
	if b[2] != 1 || b[3] == 0 || int(b[3]) >= len(layoutSizes) {
		return fail(ErrMetricsVersion, "revision not decoded")
	}
	want := layoutSizes[b[3]]
	if int(size) != want {
		return fail(ErrMetricsVersion, fmt.Sprintf("this revision's layout is %d bytes", want))
	}
	if len(b) < want {
		return fail(ErrMetricsShort, "shorter than structure_size")
	}
	t := table(b[:want])
	if b[2] == 1 && b[3] <= 3 {
		decodeV1_1(t, m)
		if b[3] >= 2 {
			m.FirmwareTimestamp = timestamp10ns(t.u64(96))
		}
		if b[3] >= 3 {
			m.VoltageSoC = t.scaled16(104, 1e-3)
			m.VoltageGFX = t.scaled16(106, 1e-3)
			m.VoltageMem = t.scaled16(108, 1e-3)
			m.IndepThrottleStatus = t.u64(112)
		}
		return m, nil
	}
	if b[3] <= 5 {
		decodeV1_4(t, m, b[3] == 5)
		return m, nil
	}
	decodeV1_6(t, m, b[3])
	return m, nil
}

func timestamp10ns(v Opt[uint64]) Opt[uint64] {
	if !v.OK || v.Value > ^uint64(0)/10 {
		return Opt[uint64]{}
	}
	return reading.Some(v.Value * 10)
}

// decodeV1_1 decodes the prefix v1.1, v1.2 and v1.3 share (offsets from
// struct gpu_metrics_v1_1).
func decodeV1_1(t table, m *GPUMetrics) {
	m.TemperatureEdge = t.scaled16(4, 1)
	m.TemperatureHotspot = t.scaled16(6, 1)
	m.TemperatureMem = t.scaled16(8, 1)
	m.TemperatureVRGFX = t.scaled16(10, 1)
	m.TemperatureVRSoC = t.scaled16(12, 1)
	m.TemperatureVRMem = t.scaled16(14, 1)
	m.GFXActivity = t.percent16(m, "average_gfx_activity", 16)
	m.UMCActivity = t.percent16(m, "average_umc_activity", 18)
	m.MMActivity = t.percent16(m, "average_mm_activity", 20)
	// average_socket_power is 0 on an MI250X's secondary die, which has no
	// power data (aldebaran_ppt.c, aldebaran_get_gpu_metrics: "Valid
	// power data is available only from primary die"): no reading.
	if p := t.scaled16(22, 1); p.OK && p.Value > 0 {
		m.SocketPower = p
	}
	// 24: energy_accumulator, whose unit v1.1-v1.3 do not state.
	m.SystemClockCounter = t.u64(32)
	m.AverageGFXClock = t.scaled16(40, 1e6)
	m.AverageSoCClock = t.scaled16(42, 1e6)
	m.AverageUClock = t.scaled16(44, 1e6)
	// 46-52: average VCLK0/DCLK0/VCLK1/DCLK1.
	m.CurrentGFXClock = []Opt[float64]{t.scaled16(54, 1e6)}
	m.CurrentSoCClock = []Opt[float64]{t.scaled16(56, 1e6)}
	m.CurrentUClock = t.scaled16(58, 1e6)
	m.CurrentVClock0 = []Opt[float64]{t.scaled16(60, 1e6)}
	m.CurrentDClock0 = []Opt[float64]{t.scaled16(62, 1e6)}
	// 64, 66: current VCLK1/DCLK1.
	m.ThrottleStatus = t.u32(68)
	m.FanSpeed = t.u16(72)
	m.PCIeLinkWidth = t.width16(74)
	m.PCIeLinkSpeed = t.scaled16(76, 0.1)
	// 78: padding.
	m.GFXActivityAcc = t.u32(80)
	m.MemActivityAcc = t.u32(84)
	m.TemperatureHBM = t.array16(88, 4, func(off int) Opt[float64] { return t.scaled16(off, 1) })
}

// decodeV1_4 decodes struct gpu_metrics_v1_4, or v1_5 which inserts
// jpeg_activity[32] (64 bytes) after vcn_activity and the two NAK counters
// (8 bytes) after pcie_replay_rover_count_acc.
func decodeV1_4(t table, m *GPUMetrics, v15 bool) {
	m.TemperatureHotspot = t.scaled16(4, 1)
	m.TemperatureMem = t.scaled16(6, 1)
	m.TemperatureVRSoC = t.scaled16(8, 1)
	m.SocketPower = t.scaled16(10, 1)
	m.GFXActivity = t.percent16(m, "average_gfx_activity", 12)
	m.UMCActivity = t.percent16(m, "average_umc_activity", 14)
	m.VCNActivity = t.array16(16, 4, t.percents16(m, "vcn_activity"))
	o := 24 // after vcn_activity[4]
	if v15 {
		m.JPEGActivity = t.array16(24, 32, t.percents16(m, "jpeg_activity"))
		o = 88
	}
	if e := t.u64(o); e.OK {
		m.Energy = reading.Some(float64(e.Value) / 65536)
	}
	m.SystemClockCounter = t.u64(o + 8)
	m.ThrottleStatus = t.u32(o + 16)
	m.GFXClockLockStatus = t.u32(o + 20)
	m.PCIeLinkWidth = t.width16(o + 24)
	m.PCIeLinkSpeed = t.scaled16(o+26, 0.1)
	m.XGMILinkWidth = t.width16(o + 28)
	m.XGMILinkSpeed = t.scaled16(o+30, 1)
	m.GFXActivityAcc = t.u32(o + 32)
	m.MemActivityAcc = t.u32(o + 36)
	m.PCIeBandwidthAcc = t.u64(o + 40)
	m.PCIeBandwidthInst = t.u64(o + 48)
	m.PCIeL0ToRecoveryCount = t.u64(o + 56)
	m.PCIeReplayCount = t.u64(o + 64)
	m.PCIeReplayRollover = t.u64(o + 72)
	o += 80
	if v15 {
		m.PCIeNAKSent = widen(t.u32(o))
		m.PCIeNAKReceived = widen(t.u32(o + 4))
		o += 8
	}
	m.XGMIReadBytes = t.array64(o, 8, 1000)
	m.XGMIWriteBytes = t.array64(o+64, 8, 1000)
	m.FirmwareTimestamp = timestamp10ns(t.u64(o + 128))
	o += 136
	m.CurrentGFXClock = t.array16(o, 8, mhz(t))
	m.CurrentSoCClock = t.array16(o+16, 4, mhz(t))
	m.CurrentVClock0 = t.array16(o+24, 4, mhz(t))
	m.CurrentDClock0 = t.array16(o+32, 4, mhz(t))
	m.CurrentUClock = t.scaled16(o+40, 1e6)
}

// decodeV1_6 decodes struct gpu_metrics_v1_6 (its second, shipped-with-
// xcp_stats form), v1_7 and v1_8. Offsets, worked out by hand:
//
//	v1.6: six u16 4..16; energy 16, system clock 24 (u64); accumulation
//	      counter and five residencies 32..56, gfxclk_lock 56 (u32);
//	      link widths/speeds 60..68 (u16); activity accumulators 68..76;
//	      PCIe u64 counters from 80 (76 aligned to 8); NAKs 120, 124;
//	      XGMI read 128, write 192; firmware_timestamp 256; clocks 264..304,
//	      uclk 304, num_partition 306; xcp_stats at 312 (308 aligned),
//	      8 × 168 bytes → 1656; other-end recovery 1656 → size 1664.
//	v1.7: mem_max_bandwidth u64 at 16 shifts everything after it by 8
//	      (energy 24 … activity accumulators ending 84, PCIe from 88);
//	      XGMI read 136, write 200; xgmi_link_status[8] 264..280 and
//	      padding 280; firmware_timestamp 288; clocks 296..336, uclk 336,
//	      num_partition 338; xcp_stats (v1_1, 232 bytes) at 344 → 2200;
//	      other-end recovery 2200 → size 2208.
//	v1.8: as v1.7 with xcp_stats v1_2 (440 bytes: 40 JPEG engines and four
//	      more accumulators) → 344 + 3520 = 3864, size 3872.
//
// An XCP block is gfx_busy_inst[8] u32 at 0, jpeg_busy[J] u16 at 32,
// vcn_busy[4] u16 at 32+2J, gfx_busy_acc[8] u64 at 32+2J+8 (J = 32: 104;
// J = 40: 120).
func decodeV1_6(t table, m *GPUMetrics, crev uint8) {
	m.TemperatureHotspot = t.scaled16(4, 1)
	m.TemperatureMem = t.scaled16(6, 1)
	m.TemperatureVRSoC = t.scaled16(8, 1)
	m.SocketPower = t.scaled16(10, 1)
	m.GFXActivity = t.percent16(m, "average_gfx_activity", 12)
	m.UMCActivity = t.percent16(m, "average_umc_activity", 14)
	e := 16
	if crev >= 7 {
		m.MemMaxBandwidth = t.u64(16)
		e = 24
	}
	if v := t.u64(e); v.OK {
		m.Energy = reading.Some(float64(v.Value) / 65536)
	}
	m.SystemClockCounter = t.u64(e + 8)
	m.AccumulationCounter = t.u32(e + 16)
	m.ProchotResidencyAcc = t.u32(e + 20)
	m.PPTResidencyAcc = t.u32(e + 24)
	m.SocketThermalResidencyAcc = t.u32(e + 28)
	m.VRThermalResidencyAcc = t.u32(e + 32)
	m.HBMThermalResidencyAcc = t.u32(e + 36)
	m.GFXClockLockStatus = t.u32(e + 40)
	m.PCIeLinkWidth = t.width16(e + 44)
	m.PCIeLinkSpeed = t.scaled16(e+46, 0.1)
	m.XGMILinkWidth = t.width16(e + 48)
	m.XGMILinkSpeed = t.scaled16(e+50, 1)
	m.GFXActivityAcc = t.u32(e + 52)
	m.MemActivityAcc = t.u32(e + 56)
	o := e + 64
	m.PCIeBandwidthAcc = t.u64(o)
	m.PCIeBandwidthInst = t.u64(o + 8)
	m.PCIeL0ToRecoveryCount = t.u64(o + 16)
	m.PCIeReplayCount = t.u64(o + 24)
	m.PCIeReplayRollover = t.u64(o + 32)
	m.PCIeNAKSent = widen(t.u32(o + 40))
	m.PCIeNAKReceived = widen(t.u32(o + 44))
	m.XGMIReadBytes = t.array64(o+48, 8, 1000)
	m.XGMIWriteBytes = t.array64(o+112, 8, 1000)
	fw := o + 176
	if crev >= 7 {
		m.XGMILinkStatus = make([]Opt[uint16], 8)
		for i := range m.XGMILinkStatus {
			m.XGMILinkStatus[i] = t.u16(fw + 2*i)
		}
		fw += 24 // 16 bytes of link status, 2 of padding, 6 to align
	}
	m.FirmwareTimestamp = timestamp10ns(t.u64(fw))
	m.CurrentGFXClock = t.array16(fw+8, 8, mhz(t))
	m.CurrentSoCClock = t.array16(fw+24, 4, mhz(t))
	m.CurrentVClock0 = t.array16(fw+32, 4, mhz(t))
	m.CurrentDClock0 = t.array16(fw+40, 4, mhz(t))
	m.CurrentUClock = t.scaled16(fw+48, 1e6)
	xcp := (fw + 52 + 7) &^ 7
	size, jpeg := 168, 32
	switch crev {
	case 7:
		size = 232
	case 8:
		size, jpeg = 440, 40
	}
	if n := t.u16(fw + 50); n.OK && n.Value <= 8 {
		for p := 0; p < int(n.Value); p++ {
			base := xcp + p*size
			acc := base + 32 + 2*jpeg + 8
			x := XCPMetrics{
				GFXBusy:    make([]Opt[float64], 8),
				GFXBusyAcc: make([]Opt[uint64], 8),
				JPEGBusy:   t.array16(base+32, jpeg, t.percents16(m, "jpeg_busy")),
				VCNBusy:    t.array16(base+32+2*jpeg, 4, t.percents16(m, "vcn_busy")),
			}
			for i := 0; i < 8; i++ {
				x.GFXBusy[i] = t.percent32(m, "gfx_busy_inst", base+4*i)
				x.GFXBusyAcc[i] = t.u64(acc + 8*i)
			}
			m.Partitions = append(m.Partitions, x)
		}
	}
	m.PCIeOtherEndRecoveries = t.u32(xcp + 8*size)
}
