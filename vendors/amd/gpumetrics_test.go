package amd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

const fixtureSys = "../../fixtures/amd/sys"

func readFixture(t *testing.T, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(fixtureSys, rel))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// blank returns a table of size bytes filled with 0xFF, as the driver
// leaves it before writing the fields it has, with the header set.
func blank(size int, frev, crev uint8) []byte {
	b := make([]byte, size)
	for i := range b {
		b[i] = 0xFF
	}
	binary.LittleEndian.PutUint16(b, uint16(size))
	b[2], b[3] = frev, crev
	return b
}

func wantF(t *testing.T, name string, got Opt[float64], want float64) {
	t.Helper()
	if !got.OK || got.Value != want {
		t.Errorf("%s = %+v, want %v", name, got, want)
	}
}

func wantU(t *testing.T, name string, got Opt[uint64], want uint64) {
	t.Helper()
	if !got.OK || got.Value != want {
		t.Errorf("%s = %+v, want %d", name, got, want)
	}
}

func wantUnset[T any](t *testing.T, name string, got Opt[T]) {
	t.Helper()
	if got.OK {
		t.Errorf("%s = %+v, want unset", name, got.Value)
	}
}

// The layout sizes, worked out from kgd_pp_interface.h member by member
// (natural alignment, size rounded up to the 8-byte alignment of the
// uint64_t members):
//
//	v1.1: header 4 + 6 temps ×2 = 16; 3 activities + power ×2 → 24;
//	      energy u64 24..32; system clock u64 32..40; 14 clocks ×2 → 68;
//	      throttle u32 68..72; fan, width, speed, padding ×2 → 80;
//	      2 acc u32 → 88; temperature_hbm[4] ×2 → 96. sizeof = 96.
//	v1.2: + firmware_timestamp u64 96..104 → 104.
//	v1.3: + 3 voltages + padding1 ×2 104..112; indep_throttle u64 → 120.
//	v1.4: header 4 + 6 u16 → 16; vcn_activity[4] → 24; energy, system
//	      clock u64 → 40; throttle, lock u32 → 48; 4 link u16 → 56;
//	      2 acc u32 → 64; 5 PCIe u64 → 104; xgmi read/write [8] u64 →
//	      232; firmware_timestamp → 240; 8+4+4+4 clocks u16 → 280; uclk,
//	      padding → 284; rounded to 8 → 288.
//	v1.5: as v1.4 plus jpeg_activity[32] u16 (64 bytes) after vcn, so
//	      energy at 24+64 = 88, plus two NAK u32 (8 bytes) after the
//	      replay rollover counter: 284 + 64 + 8 = 356, rounded → 360.
func TestGPUMetricsSizes(t *testing.T) {
	for _, c := range []struct {
		crev uint8
		size int
	}{{1, 96}, {2, 104}, {3, 120}, {4, 288}, {5, 360}, {6, 1664}, {7, 2208}, {8, 3872}} {
		m, err := DecodeGPUMetrics(blank(c.size, 1, c.crev))
		if err != nil || m.ContentRevision != c.crev {
			t.Errorf("v1.%d of %d bytes: %v", c.crev, c.size, err)
		}
	}
}

// The MI210 fixture is a v1.3 table; fixtures/amd/SOURCES.md lists the
// bytes written. Every value below is the fixture's raw field converted
// by hand.
func TestDecodeGPUMetricsV1_3(t *testing.T) {
	m, err := DecodeGPUMetrics(readFixture(t, "devices/pci0000:80/0000:80:01.1/0000:83:00.0/gpu_metrics"))
	if err != nil {
		t.Fatal(err)
	}
	wantF(t, "edge", m.TemperatureEdge, 35)
	wantF(t, "hotspot", m.TemperatureHotspot, 52)
	wantF(t, "mem", m.TemperatureMem, 60)
	wantF(t, "vrgfx", m.TemperatureVRGFX, 40)
	wantF(t, "vrsoc", m.TemperatureVRSoC, 38)
	wantUnset(t, "vrmem (0xFFFF)", m.TemperatureVRMem)
	wantF(t, "gfx activity (100 %)", m.GFXActivity, 1)
	wantF(t, "umc activity (55 %)", m.UMCActivity, 0.55)
	wantUnset(t, "mm activity", m.MMActivity)
	wantF(t, "socket power", m.SocketPower, 150)
	wantUnset(t, "energy (no unit in v1.3)", m.Energy)
	wantU(t, "system clock", m.SystemClockCounter, 5000000000)
	wantF(t, "avg gfxclk (1650 MHz)", m.AverageGFXClock, 1650e6)
	wantF(t, "current gfxclk (1700 MHz)", m.CurrentGFXClock[0], 1700e6)
	wantF(t, "current uclk (1600 MHz)", m.CurrentUClock, 1600e6)
	wantUnset(t, "vclk0", m.CurrentVClock0[0])
	if !m.ThrottleStatus.OK || m.ThrottleStatus.Value != 4 {
		t.Errorf("throttle = %+v, want 4", m.ThrottleStatus)
	}
	wantUnset(t, "fan (passive card)", m.FanSpeed)
	if !m.PCIeLinkWidth.OK || m.PCIeLinkWidth.Value != 16 {
		t.Errorf("width = %+v", m.PCIeLinkWidth)
	}
	wantF(t, "pcie speed (160 × 0.1 GT/s)", m.PCIeLinkSpeed, 16)
	if len(m.TemperatureHBM) != 4 {
		t.Fatalf("hbm = %v", m.TemperatureHBM)
	}
	wantF(t, "hbm3", m.TemperatureHBM[3], 61)
	wantU(t, "firmware timestamp (250 × 10 ns)", m.FirmwareTimestamp, 2500)
	wantF(t, "voltage soc (900 mV)", m.VoltageSoC, 0.9)
	wantF(t, "voltage mem (1200 mV)", m.VoltageMem, 1.2)
	wantU(t, "indep throttle", m.IndepThrottleStatus, 0)
}

// The MI300X fixture is a v1.5 table.
func TestDecodeGPUMetricsV1_5(t *testing.T) {
	m, err := DecodeGPUMetrics(readFixture(t, "devices/pci0000:00/0000:00:01.1/0000:0c:00.0/gpu_metrics"))
	if err != nil {
		t.Fatal(err)
	}
	wantUnset(t, "edge (not in v1.4+)", m.TemperatureEdge)
	wantF(t, "hotspot", m.TemperatureHotspot, 48)
	wantF(t, "mem", m.TemperatureMem, 41)
	wantF(t, "vrsoc", m.TemperatureVRSoC, 39)
	wantF(t, "socket power", m.SocketPower, 312)
	wantF(t, "gfx activity (37 %)", m.GFXActivity, 0.37)
	wantF(t, "umc activity (12 %)", m.UMCActivity, 0.12)
	if len(m.VCNActivity) != 4 || len(m.JPEGActivity) != 32 {
		t.Fatalf("vcn %d, jpeg %d entries", len(m.VCNActivity), len(m.JPEGActivity))
	}
	wantF(t, "vcn0", m.VCNActivity[0], 0)
	wantUnset(t, "vcn1", m.VCNActivity[1])
	wantF(t, "jpeg0", m.JPEGActivity[0], 0)
	// 65536 × 10^6 units of 2^-16 J = 10^6 J.
	wantF(t, "energy", m.Energy, 1e6)
	wantU(t, "system clock", m.SystemClockCounter, 123456789000)
	if !m.ThrottleStatus.OK || m.ThrottleStatus.Value != 0 {
		t.Errorf("throttle = %+v", m.ThrottleStatus)
	}
	wantUnset(t, "gfxclk lock", m.GFXClockLockStatus)
	wantF(t, "pcie speed (320 × 0.1 GT/s)", m.PCIeLinkSpeed, 32)
	wantF(t, "xgmi speed", m.XGMILinkSpeed, 32)
	if !m.XGMILinkWidth.OK || m.XGMILinkWidth.Value != 16 {
		t.Errorf("xgmi width = %+v", m.XGMILinkWidth)
	}
	if !m.GFXActivityAcc.OK || m.GFXActivityAcc.Value != 5000 || m.MemActivityAcc.Value != 1200 {
		t.Errorf("acc = %+v %+v", m.GFXActivityAcc, m.MemActivityAcc)
	}
	wantUnset(t, "pcie bandwidth acc", m.PCIeBandwidthAcc)
	wantU(t, "pcie bandwidth inst", m.PCIeBandwidthInst, 12)
	wantU(t, "l0 to recovery", m.PCIeL0ToRecoveryCount, 3)
	wantU(t, "replay", m.PCIeReplayCount, 7)
	wantU(t, "replay rollover", m.PCIeReplayRollover, 0)
	wantU(t, "nak sent", m.PCIeNAKSent, 1)
	wantUnset(t, "nak received", m.PCIeNAKReceived)
	// 2048 KB × 1000 = 2 048 000 bytes; 1024 KB × 1000 = 1 024 000.
	wantU(t, "xgmi read link 0", m.XGMIReadBytes[0], 2048000)
	wantU(t, "xgmi write link 0", m.XGMIWriteBytes[0], 1024000)
	wantUnset(t, "xgmi read link 7", m.XGMIReadBytes[7])
	wantU(t, "firmware timestamp (100 × 10 ns)", m.FirmwareTimestamp, 1000)
	wantF(t, "gfxclk xcd0", m.CurrentGFXClock[0], 1300e6)
	wantF(t, "gfxclk xcd7", m.CurrentGFXClock[7], 2100e6)
	wantF(t, "socclk0", m.CurrentSoCClock[0], 1000e6)
	wantUnset(t, "socclk1", m.CurrentSoCClock[1])
	wantF(t, "uclk", m.CurrentUClock, 1300e6)
}

// v1.4 shares v1.5's fields without jpeg_activity and the NAK counters;
// each field is placed at its v1.4 offset from the size comment above.
func TestDecodeGPUMetricsV1_4(t *testing.T) {
	b := blank(288, 1, 4)
	put16 := func(off int, v uint16) { binary.LittleEndian.PutUint16(b[off:], v) }
	put64 := func(off int, v uint64) { binary.LittleEndian.PutUint64(b[off:], v) }
	put16(10, 700)   // curr_socket_power
	put64(24, 98304) // energy: 98304 / 65536 = 1.5 J
	put16(50, 160)   // pcie_link_speed: 16 GT/s
	put64(88, 9)     // pcie_replay_count_acc at 64 + 3 × 8
	put64(104, 5)    // xgmi_read_data_acc[0]
	put64(232, 7)    // firmware_timestamp
	put16(240, 2100) // current_gfxclk[0]
	put16(280, 900)  // current_uclk
	m, err := DecodeGPUMetrics(b)
	if err != nil {
		t.Fatal(err)
	}
	wantF(t, "power", m.SocketPower, 700)
	wantF(t, "energy", m.Energy, 1.5)
	wantF(t, "pcie speed", m.PCIeLinkSpeed, 16)
	wantU(t, "replay", m.PCIeReplayCount, 9)
	wantU(t, "xgmi read 0 (5 KB)", m.XGMIReadBytes[0], 5000)
	wantU(t, "firmware timestamp", m.FirmwareTimestamp, 70)
	wantF(t, "gfxclk0", m.CurrentGFXClock[0], 2100e6)
	wantF(t, "uclk", m.CurrentUClock, 900e6)
	if m.JPEGActivity != nil {
		t.Errorf("v1.4 has no JPEG activity, got %v", m.JPEGActivity)
	}
	wantUnset(t, "nak sent", m.PCIeNAKSent)
	wantUnset(t, "hotspot", m.TemperatureHotspot)
}

func TestDecodeGPUMetricsRefuses(t *testing.T) {
	truncated := blank(360, 1, 5)[:200]
	for _, c := range []struct {
		name string
		in   []byte
		want error
	}{
		{"empty", nil, ErrMetricsShort},
		{"header only in part", []byte{0x78, 0}, ErrMetricsShort},
		{"shorter than structure_size", truncated, ErrMetricsShort},
		{"v1.0 (unaligned, never on Instinct)", blank(80, 1, 0), ErrMetricsVersion},
		// The first v1.6 layout (VCN/JPEG arrays, no xcp_stats): 384 bytes.
		{"v1.6 first layout", blank(384, 1, 6), ErrMetricsVersion},
		{"v1.9 (attribute list)", blank(64, 1, 9), ErrMetricsVersion},
		{"v2.1 (APU)", blank(160, 2, 1), ErrMetricsVersion},
		{"v3.0", blank(264, 3, 0), ErrMetricsVersion},
		// 328 would be v1.5 with jpeg_activity miscounted as 32 bytes.
		{"v1.5 with another size", blank(328, 1, 5), ErrMetricsVersion},
		{"v1.3 with v1.2's size", blank(104, 1, 3), ErrMetricsVersion},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, err := DecodeGPUMetrics(c.in)
			var me *MetricsError
			if m != nil || !errors.Is(err, c.want) || !errors.As(err, &me) {
				t.Fatalf("got %v, %v; want %v", m, err, c.want)
			}
		})
	}
}

func TestDecodeGPUMetricsAllUnavailable(t *testing.T) {
	m, err := DecodeGPUMetrics(blank(360, 1, 5))
	if err != nil {
		t.Fatal(err)
	}
	wantUnset(t, "hotspot", m.TemperatureHotspot)
	wantUnset(t, "power", m.SocketPower)
	wantUnset(t, "energy", m.Energy)
	wantUnset(t, "throttle", m.ThrottleStatus)
	for i, v := range append(m.CurrentGFXClock, m.JPEGActivity...) {
		wantUnset(t, fmt.Sprint("entry ", i), v)
	}
}

func FuzzDecodeGPUMetrics(f *testing.F) {
	for _, c := range []struct{ size, crev int }{{96, 1}, {104, 2}, {120, 3}, {288, 4}, {360, 5}, {1664, 6}, {2208, 7}, {3872, 8}} {
		f.Add(blank(c.size, 1, uint8(c.crev)))
	}
	f.Add([]byte{4, 0, 1, 5})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeGPUMetrics(b)
		if err != nil {
			var me *MetricsError
			if m != nil || !errors.As(err, &me) {
				t.Fatalf("error %v with result %v", err, m)
			}
			return
		}
		size := int(binary.LittleEndian.Uint16(b))
		if len(b) < size || b[2] != 1 || b[3] < 1 || b[3] > 8 {
			t.Fatalf("accepted v%d.%d of %d bytes (structure_size %d)", b[2], b[3], len(b), size)
		}
		for _, v := range append(append([]Opt[float64]{m.GFXActivity, m.UMCActivity}, m.VCNActivity...), m.JPEGActivity...) {
			if v.OK && (v.Value < 0 || v.Value > 1) {
				t.Fatalf("activity %v out of 0..1", v.Value)
			}
		}
	})
}

// v1.6 to v1.8, with each value at the offset worked out in decodeV1_6's
// comment. Two partitions are declared, so a third block's values must not
// appear.
func TestDecodeGPUMetricsV1_6toV1_8(t *testing.T) {
	for _, c := range []struct {
		crev                 uint8
		size                 int
		energy, fw, uclk     int // offsets
		numPartition, xcp    int
		xcpSize, jpeg, other int
	}{
		{crev: 6, size: 1664, energy: 16, fw: 256, uclk: 304, numPartition: 306, xcp: 312, xcpSize: 168, jpeg: 32, other: 1656},
		{crev: 7, size: 2208, energy: 24, fw: 288, uclk: 336, numPartition: 338, xcp: 344, xcpSize: 232, jpeg: 32, other: 2200},
		{crev: 8, size: 3872, energy: 24, fw: 288, uclk: 336, numPartition: 338, xcp: 344, xcpSize: 440, jpeg: 40, other: 3864},
	} {
		t.Run(fmt.Sprintf("v1.%d", c.crev), func(t *testing.T) {
			b := blank(c.size, 1, c.crev)
			put16 := func(off int, v uint16) { binary.LittleEndian.PutUint16(b[off:], v) }
			put32 := func(off int, v uint32) { binary.LittleEndian.PutUint32(b[off:], v) }
			put64 := func(off int, v uint64) { binary.LittleEndian.PutUint64(b[off:], v) }
			put16(4, 55)                // hotspot
			put16(10, 640)              // curr_socket_power
			put16(12, 80)               // average_gfx_activity
			put64(c.energy, 3*65536)    // 3 J
			put32(c.energy+16, 1000)    // accumulation_counter
			put32(c.energy+24, 250)     // ppt_residency_acc
			put16(c.energy+46, 320)     // pcie_link_speed: 32 GT/s
			put64(c.energy+64+24, 11)   // pcie_replay_count_acc
			put64(c.energy+64+48+8, 40) // xgmi_read_data_acc[1]: 40 KB
			put64(c.fw, 30)             // firmware_timestamp: 300 ns
			put16(c.fw+8+14, 2100)      // current_gfxclk[7]
			put16(c.uclk, 1300)
			put16(c.numPartition, 2)
			for p := 0; p < 3; p++ {
				base := c.xcp + p*c.xcpSize
				put32(base, uint32(10*(p+1)))                 // gfx_busy_inst[0]
				put32(base+4, uint32(10*(p+1)+5))             // gfx_busy_inst[1]
				put16(base+32+2*c.jpeg, 7)                    // vcn_busy[0]
				put64(base+32+2*c.jpeg+8, uint64(1000*(p+1))) // gfx_busy_acc[0]
			}
			put32(c.other, 4)
			m, err := DecodeGPUMetrics(b)
			if err != nil {
				t.Fatal(err)
			}
			wantF(t, "hotspot", m.TemperatureHotspot, 55)
			wantF(t, "power", m.SocketPower, 640)
			wantF(t, "gfx activity (80 %)", m.GFXActivity, 0.8)
			wantF(t, "energy (3 × 65536 × 2^-16 J)", m.Energy, 3)
			if m.AccumulationCounter.Value != 1000 || m.PPTResidencyAcc.Value != 250 || m.ProchotResidencyAcc.OK {
				t.Errorf("residencies %+v %+v %+v", m.AccumulationCounter, m.PPTResidencyAcc, m.ProchotResidencyAcc)
			}
			wantF(t, "pcie speed", m.PCIeLinkSpeed, 32)
			wantU(t, "replay", m.PCIeReplayCount, 11)
			wantU(t, "xgmi read link 1 (40 KB)", m.XGMIReadBytes[1], 40000)
			wantU(t, "firmware timestamp", m.FirmwareTimestamp, 300)
			wantF(t, "gfxclk xcc7", m.CurrentGFXClock[7], 2100e6)
			wantF(t, "uclk", m.CurrentUClock, 1300e6)
			if !m.PCIeOtherEndRecoveries.OK || m.PCIeOtherEndRecoveries.Value != 4 {
				t.Errorf("other end recoveries %+v", m.PCIeOtherEndRecoveries)
			}
			if len(m.Partitions) != 2 {
				t.Fatalf("%d partitions, want 2", len(m.Partitions))
			}
			for p, x := range m.Partitions {
				// Partition p has 10(p+1) % on XCC 0 and 10(p+1)+5 % on XCC 1.
				wantF(t, fmt.Sprint("partition ", p, " xcc0"), x.GFXBusy[0], float64(10*(p+1))/100)
				wantF(t, fmt.Sprint("partition ", p, " xcc1"), x.GFXBusy[1], float64(10*(p+1)+5)/100)
				wantUnset(t, "xcc2", x.GFXBusy[2])
				wantU(t, "busy acc", x.GFXBusyAcc[0], uint64(1000*(p+1)))
				wantF(t, "vcn0 (7 %)", x.VCNBusy[0], 0.07)
				if len(x.JPEGBusy) != c.jpeg {
					t.Errorf("%d JPEG engines, want %d", len(x.JPEGBusy), c.jpeg)
				}
			}
			if c.crev >= 7 && len(m.XGMILinkStatus) != 8 || c.crev == 6 && m.XGMILinkStatus != nil {
				t.Errorf("xgmi link status %v", m.XGMILinkStatus)
			}
		})
	}
}

// TestDecodeGPUMetricsActivityOutOfRange: a v1.4 table whose
// average_gfx_activity (offset 12) is 101 and UMC activity (14) 40: the
// GFX activity is left unset and named with its value, the UMC one read
// (0.4), and the table's other fields too; an activity of 100 is read.
// Read from a card, the file is then counted as malformed, its readings
// kept (probe G, PG6: dropped without a word).
func TestDecodeGPUMetricsActivityOutOfRange(t *testing.T) {
	b := blank(288, 1, 4)
	put16 := func(off int, v uint16) { binary.LittleEndian.PutUint16(b[off:], v) }
	put16(10, 700) // curr_socket_power
	put16(12, 101) // average_gfx_activity
	put16(14, 40)  // average_umc_activity
	m, err := DecodeGPUMetrics(b)
	if err != nil {
		t.Fatal(err)
	}
	wantUnset(t, "gfx activity", m.GFXActivity)
	wantF(t, "umc activity", m.UMCActivity, 0.4)
	wantF(t, "power", m.SocketPower, 700)
	if want := []string{"average_gfx_activity 101 %"}; !slices.Equal(m.OutOfRange, want) {
		t.Errorf("out of range %q, want %q", m.OutOfRange, want)
	}
	put16(12, 100)
	if m, _ := DecodeGPUMetrics(b); len(m.OutOfRange) != 0 || !m.GFXActivity.OK {
		t.Errorf("100 %%: out of range %q, gfx activity %+v", m.OutOfRange, m.GFXActivity)
	}
	put16(12, 101)
	root := buildCard(t, map[string]string{"gpu_metrics": string(b)})
	d := Reader{SysfsRoot: root}.ReadDevice("card0")
	if d.Metrics == nil || !d.Metrics.SocketPower.OK {
		t.Fatalf("the table's readings dropped: %+v", d.Metrics)
	}
	if got := errorFiles(d); !slices.Equal(got, []string{"gpu_metrics"}) || !errors.Is(d.Errors[0].Err, ErrMalformed) {
		t.Errorf("errors %v (%v), want gpu_metrics malformed", got, d.Errors)
	}
}
