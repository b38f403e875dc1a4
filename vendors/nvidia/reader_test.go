package nvidia

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/xpu-exporter/xpu_exporter/vendors/reading"
)

func TestMIGProfile(t *testing.T) {
	for _, tc := range []struct {
		name  string
		attrs nvml.DeviceAttributes
		want  string
	}{
		{"NVIDIA A100-SXM4-40GB MIG 1g.5gb", nvml.DeviceAttributes{}, "1g.5gb"},
		{"NVIDIA H100 80GB HBM3 MIG 3g.40gb", nvml.DeviceAttributes{GpuInstanceSliceCount: 2}, "3g.40gb"},
		{"NVIDIA A100-SXM4-80GB MIG 1c.3g.40gb", nvml.DeviceAttributes{}, "1c.3g.40gb"},
		// Older drivers name MIG devices without the profile.
		{"A100-SXM4-40GB", nvml.DeviceAttributes{GpuInstanceSliceCount: 1, ComputeInstanceSliceCount: 1, MemorySizeMB: 4864}, "1g.5gb"},
		{"A100-SXM4-80GB", nvml.DeviceAttributes{GpuInstanceSliceCount: 3, ComputeInstanceSliceCount: 1, MemorySizeMB: 40192}, "1c.3g.40gb"},
		{"", nvml.DeviceAttributes{}, ""},
	} {
		if got := migProfile(tc.name, tc.attrs); got != tc.want {
			t.Errorf("migProfile(%q, %+v) = %q, want %q", tc.name, tc.attrs, got, tc.want)
		}
	}
}

func TestBusID(t *testing.T) {
	var raw [32]int8
	for i, c := range "00000000:3B:00.0" {
		raw[i] = int8(c)
	}
	if got := busID(raw); got != "00000000:3b:00.0" {
		t.Errorf("busID = %q", got)
	}
}

func TestFieldValue(t *testing.T) {
	f := func(typ nvml.ValueType, bits uint64) nvml.FieldValue {
		v := nvml.FieldValue{ValueType: uint32(typ)}
		binary.LittleEndian.PutUint64(v.Value[:], bits)
		return v
	}
	for _, tc := range []struct {
		v    nvml.FieldValue
		want float64
		ok   bool
	}{
		{f(nvml.VALUE_TYPE_DOUBLE, math.Float64bits(41.5)), 41.5, true},
		{f(nvml.VALUE_TYPE_UNSIGNED_INT, 0xFFFFFFFF00000051), 81, true}, // high bytes are not part of a 32-bit value
		{f(nvml.VALUE_TYPE_UNSIGNED_LONG_LONG, 1<<40), 1 << 40, true},
		{f(nvml.VALUE_TYPE_SIGNED_LONG_LONG, uint64(math.MaxUint64)), -1, true},
		{f(nvml.VALUE_TYPE_SIGNED_INT, 0xFFFFFFFE), -2, true},
		{f(nvml.VALUE_TYPE_UNSIGNED_SHORT, 0x10002), 2, true},
		{f(nvml.ValueType(99), 1), 0, false},
	} {
		got, ok := fieldValue(tc.v)
		if got != tc.want || ok != tc.ok {
			t.Errorf("fieldValue(type %d) = %v, %v; want %v, %v", tc.v.ValueType, got, ok, tc.want, tc.ok)
		}
	}
}

func TestReturnClassification(t *testing.T) {
	for _, tc := range []struct {
		ret      nvml.Return
		ok, lost bool
		errors   int
	}{
		{nvml.SUCCESS, true, false, 0},
		{nvml.ERROR_NOT_SUPPORTED, false, false, 0},
		{nvml.ERROR_NO_PERMISSION, false, false, 0},
		{nvml.ERROR_FUNCTION_NOT_FOUND, false, false, 0},
		{nvml.ERROR_GPU_IS_LOST, false, true, 0},
		{nvml.ERROR_UNKNOWN, false, false, 1},
		{nvml.ERROR_TIMEOUT, false, false, 1},
	} {
		r := &reader{}
		if ok := r.ok("Call", tc.ret); ok != tc.ok || r.lost != tc.lost || len(r.errs) != tc.errors {
			t.Errorf("%v: ok=%v lost=%v errors=%d; want %v %v %d", tc.ret, ok, r.lost, len(r.errs), tc.ok, tc.lost, tc.errors)
		}
	}
}

// A device whose handle cannot be had is reported down, with the reason.
func TestReadHandleFailure(t *testing.T) {
	lib := &mock.Interface{
		InitFunc: func() nvml.Return { return nvml.SUCCESS },
		ExtensionsFunc: func() nvml.ExtendedInterface {
			return &mock.ExtendedInterface{LookupSymbolFunc: func(string) error { return nil }}
		},
		DeviceGetCountFunc:             func() (int, nvml.Return) { return 1, nvml.SUCCESS },
		DeviceGetHandleByIndexFunc:     func(int) (nvml.Device, nvml.Return) { return nil, nvml.ERROR_UNKNOWN },
		SystemGetDriverVersionFunc:     func() (string, nvml.Return) { return "", nvml.ERROR_NOT_SUPPORTED },
		SystemGetCudaDriverVersionFunc: func() (int, nvml.Return) { return 12080, nvml.SUCCESS },
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	node, err := New(lib).Read(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	if node.CUDAVersion != "12.8" || len(node.Devices) != 1 || node.Devices[0].Up || node.Devices[0].Down != "get handle: ERROR_UNKNOWN" {
		t.Errorf("got %+v", node)
	}
}

func TestInitRetriesUntilDriverAppears(t *testing.T) {
	ret := nvml.ERROR_LIBRARY_NOT_FOUND
	calls := 0
	lib := &mock.Interface{
		InitFunc: func() nvml.Return { calls++; return ret },
		ExtensionsFunc: func() nvml.ExtendedInterface {
			return &mock.ExtendedInterface{LookupSymbolFunc: func(string) error { return nil }}
		},
	}
	c := New(lib)
	if err := c.Init(); err != ErrNoDriver {
		t.Fatalf("Init = %v, want ErrNoDriver", err)
	}
	ret = nvml.SUCCESS
	if err := c.Init(); err != nil {
		t.Fatalf("Init after the driver appeared = %v", err)
	}
	if err := c.Init(); err != nil || calls != 2 {
		t.Fatalf("Init once initialised = %v after %d NVML calls, want nil after 2", err, calls)
	}
}

// A library the operator named that cannot be loaded is an error naming
// it, not ErrNoDriver: a typo in --nvidia.nvml-library must not pass for
// a node without NVIDIA GPUs. Each Init tries again, for a library that
// appears later.
func TestNamedLibraryThatDoesNotLoad(t *testing.T) {
	notELF := filepath.Join(t.TempDir(), "libnvidia-ml.so.1")
	if err := os.WriteFile(notELF, []byte("not a shared library"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, path, want string
	}{
		{"missing", "/nonexistent/libnvidia-ml.so.1", "stat /nonexistent/libnvidia-ml.so.1: no such file or directory"},
		{"not a library", notELF, notELF + ": not a shared library"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := New(Library(tc.path))
			for range 2 {
				err := c.Init()
				if err == nil || errors.Is(err, ErrNoDriver) || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("Init = %v, want an error with %q", err, tc.want)
				}
			}
		})
	}
}

// On an old driver that lacks newer entry points, they are not called: a
// call through go-nvml's lazy binding would kill the process.
func TestOldDriverSymbolsAreNotCalled(t *testing.T) {
	missing := map[string]bool{"nvmlDeviceGetRemappedRows": true, "nvmlGpmMetricsGet": true, "nvmlDeviceGetMemoryInfo_v2": true}
	lib := &mock.Interface{
		ExtensionsFunc: func() nvml.ExtendedInterface {
			return &mock.ExtendedInterface{LookupSymbolFunc: func(name string) error {
				if missing[name] {
					return nvml.ERROR_FUNCTION_NOT_FOUND
				}
				return nil
			}}
		},
	}
	s := lookupSymbols(lib)
	if s.remappedRows || s.gpm || s.memoryV2 {
		t.Fatalf("symbols %+v: the missing entry points must be off", s)
	}
	// A device mock whose newer methods are unset panics if they are called.
	r := &reader{symbols: s, gpm: &gpmDevice{states: map[string]*gpmState{}, seen: map[string]bool{}}}
	d := &Device{}
	dev := &mock.Device{
		GetRetiredPagesFunc:              func(nvml.PageRetirementCause) ([]uint64, nvml.Return) { return nil, nvml.SUCCESS },
		GetRetiredPagesPendingStatusFunc: func() (nvml.EnableState, nvml.Return) { return nvml.FEATURE_DISABLED, nvml.SUCCESS },
		GetMemoryInfoFunc:                func() (nvml.Memory, nvml.Return) { return nvml.Memory{Total: 1}, nvml.SUCCESS },
	}
	r.retirement(d, dev)
	r.memory(d, dev)
	r.profiling(d, dev)
	if d.RemappedRows.OK || d.GPM || !d.MemoryTotal.OK {
		t.Errorf("device %+v", d)
	}
}

// Each limit NVML gives is kept under our name; NOT_SUPPORTED leaves one
// out without an error, an answer of 0 °C is no limit, and an unexpected
// failure is filed.
func TestTemperatureThresholds(t *testing.T) {
	answers := map[nvml.TemperatureThresholds]struct {
		v   uint32
		ret nvml.Return
	}{
		nvml.TEMPERATURE_THRESHOLD_SHUTDOWN: {92, nvml.SUCCESS},
		nvml.TEMPERATURE_THRESHOLD_SLOWDOWN: {89, nvml.SUCCESS},
		nvml.TEMPERATURE_THRESHOLD_GPU_MAX:  {0, nvml.SUCCESS},
		nvml.TEMPERATURE_THRESHOLD_MEM_MAX:  {0, nvml.ERROR_NOT_SUPPORTED},
	}
	dev := &mock.Device{
		GetTemperatureFunc: func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 70, nvml.SUCCESS },
		GetFieldValuesFunc: func(v []nvml.FieldValue) nvml.Return { return nvml.ERROR_NOT_SUPPORTED },
		GetFanSpeedFunc:    func() (uint32, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED },
		GetTemperatureThresholdFunc: func(t nvml.TemperatureThresholds) (uint32, nvml.Return) {
			a := answers[t]
			return a.v, a.ret
		},
	}
	r := &reader{}
	d := &Device{}
	r.thermal(d, dev)
	want := map[TempThreshold]float64{TempShutdown: 92, TempSlowdown: 89}
	if len(d.TempLimits) != len(want) || d.TempLimits[TempShutdown] != 92 || d.TempLimits[TempSlowdown] != 89 {
		t.Errorf("limits %v, want %v", d.TempLimits, want)
	}
	if len(r.errs) != 0 {
		t.Errorf("errors %v, want none", r.errs)
	}

	answers[nvml.TEMPERATURE_THRESHOLD_SHUTDOWN] = struct {
		v   uint32
		ret nvml.Return
	}{0, nvml.ERROR_UNKNOWN}
	r, d = &reader{}, &Device{}
	r.thermal(d, dev)
	if _, ok := d.TempLimits[TempShutdown]; ok || len(r.errs) != 1 || r.errs[0].Call != "GetTemperatureThreshold" {
		t.Errorf("after ERROR_UNKNOWN: limits %v, errors %v; want no shutdown limit and one GetTemperatureThreshold error", d.TempLimits, r.errs)
	}
}

// The GPU's slice count is its full profile's, the largest profile it
// supports, as NVML answers for each (SliceCount of
// nvmlDeviceGetGpuInstanceProfileInfo; NOT_SUPPORTED for a profile the GPU
// lacks). Models and profiles from NVIDIA's MIG user guide ("Supported
// GPUs", "Supported MIG Profiles").
func TestMaxSlices(t *testing.T) {
	for _, tc := range []struct {
		name string
		// profiles are the GPU instance profiles the GPU supports, by
		// slice count: each answers with its own count.
		profiles []int
		want     int
	}{
		{"H100: 1g, 2g, 3g, 4g, 7g", []int{1, 2, 3, 4, 7}, 7},
		{"A30: 1g, 2g, 4g", []int{1, 2, 4}, 4},
		{"RTX PRO 6000 Blackwell: 1g.24gb, 2g.48gb, 4g.96gb", []int{1, 2, 4}, 4},
		{"RTX PRO 5000 Blackwell: 1g, 2g", []int{1, 2}, 2},
		{"MIG not supported", nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bySlices := map[int]int{
				nvml.GPU_INSTANCE_PROFILE_1_SLICE: 1, nvml.GPU_INSTANCE_PROFILE_2_SLICE: 2, nvml.GPU_INSTANCE_PROFILE_3_SLICE: 3,
				nvml.GPU_INSTANCE_PROFILE_4_SLICE: 4, nvml.GPU_INSTANCE_PROFILE_7_SLICE: 7,
			}
			dev := &mock.Device{GetGpuInstanceProfileInfoFunc: func(profile int) (nvml.GpuInstanceProfileInfo, nvml.Return) {
				if n := bySlices[profile]; slices.Contains(tc.profiles, n) {
					return nvml.GpuInstanceProfileInfo{Id: uint32(profile), SliceCount: uint32(n)}, nvml.SUCCESS
				}
				return nvml.GpuInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
			}}
			if got := maxSlices(dev); got != tc.want {
				t.Errorf("maxSlices = %d, want %d", got, tc.want)
			}
		})
	}
}

// A GPU busy in the window with no process listed now was used by
// processes that exited: their samples are read and kept as Exited, so
// that the time is not a later owner's. An idle window costs no call.
func TestBusyWindowWithoutProcessesReadsTheExited(t *testing.T) {
	none := func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS }
	refused := func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.ERROR_NO_PERMISSION }
	for _, tc := range []struct {
		name     string
		percent  uint64
		graphics func() ([]nvml.ProcessInfo, nvml.Return)
		want     []Process
	}{
		// Periods of 1 s ending at 2, 3 and 4 s; PID 42 has entries of 60 %
		// in the first two: (60 × 1 + 60 × 1 + 0 × 1) / (100 × 3) = 0.4.
		{"busy", 60, none, []Process{{PID: 42, SMUtilization: reading.Some(0.4)}}},
		{"idle", 0, none, nil},
		// A list refused: PID 42 may be a process it hides, not one that
		// exited.
		{"busy, a list refused", 60, refused, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			periods := []period{{2e6, 1e6, tc.percent}, {3e6, 1e6, tc.percent}, {4e6, 1e6, 0}}
			w := newWindow(periods, nil, false)
			r := &reader{periods: periods, win: &w}
			dev := &mock.Device{
				GetComputeRunningProcessesFunc: none, GetMPSComputeRunningProcessesFunc: none, GetGraphicsRunningProcessesFunc: tc.graphics,
			}
			if tc.percent > 0 { // unset, a call panics
				dev.GetProcessUtilizationFunc = func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
					return []nvml.ProcessUtilizationSample{{Pid: 42, TimeStamp: 3e6, SmUtil: 60}, {Pid: 42, TimeStamp: 2e6, SmUtil: 60}}, nvml.SUCCESS
				}
			}
			d := &Device{}
			r.processes(d, dev)
			if len(d.Processes) != 0 || !reflect.DeepEqual(d.Exited, tc.want) {
				t.Errorf("processes %+v, exited %+v; want none and %+v", d.Processes, d.Exited, tc.want)
			}
		})
	}
}

// TestReadingsInBaseUnits states, for each NVML reading the exporter
// converts, the value in base units worked out by hand from what NVML
// answers (nvml.h's units: mW for power and its limit, mJ for energy, MHz
// for clocks, KB/s for PCIe throughput, KiB for the NVLink data counters,
// percent for the fan). The goldens and the demo only round-trip the demo's
// own conversion; here each raw answer is written out.
func TestReadingsInBaseUnits(t *testing.T) {
	mhz := map[nvml.ClockType]uint32{nvml.CLOCK_GRAPHICS: 1980, nvml.CLOCK_SM: 1755, nvml.CLOCK_MEM: 2619}
	maxMHz := map[nvml.ClockType]uint32{nvml.CLOCK_GRAPHICS: 1980, nvml.CLOCK_SM: 1980, nvml.CLOCK_MEM: 2619}
	// NVLink data counters in KiB, per link and direction, each different
	// so that a counter put on the wrong link or direction shows.
	nvlinkKiB := map[[2]uint32]uint64{
		{nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 0}: 5, {nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_RX, 0}: 7,
		{nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 1}: 11, {nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_RX, 1}: 3_000_000,
	}
	dev := &mock.Device{
		GetPowerUsageFunc:             func() (uint32, nvml.Return) { return 312_456, nvml.SUCCESS },
		GetEnforcedPowerLimitFunc:     func() (uint32, nvml.Return) { return 700_000, nvml.SUCCESS },
		GetTotalEnergyConsumptionFunc: func() (uint64, nvml.Return) { return 98_765_432_100, nvml.SUCCESS },
		GetPerformanceStateFunc:       func() (nvml.Pstates, nvml.Return) { return nvml.PSTATE_0, nvml.SUCCESS },
		GetClockInfoFunc:              func(c nvml.ClockType) (uint32, nvml.Return) { return mhz[c], nvml.SUCCESS },
		GetMaxClockInfoFunc:           func(c nvml.ClockType) (uint32, nvml.Return) { return maxMHz[c], nvml.SUCCESS },
		GetPcieThroughputFunc: func(c nvml.PcieUtilCounter) (uint32, nvml.Return) {
			if c == nvml.PCIE_UTIL_TX_BYTES {
				return 2048, nvml.SUCCESS
			}
			return 300, nvml.SUCCESS
		},
		GetPcieReplayCounterFunc:      func() (int, nvml.Return) { return 0, nvml.SUCCESS },
		GetCurrPcieLinkGenerationFunc: func() (int, nvml.Return) { return 5, nvml.SUCCESS },
		GetCurrPcieLinkWidthFunc:      func() (int, nvml.Return) { return 16, nvml.SUCCESS },
		GetMaxPcieLinkGenerationFunc:  func() (int, nvml.Return) { return 5, nvml.SUCCESS },
		GetMaxPcieLinkWidthFunc:       func() (int, nvml.Return) { return 16, nvml.SUCCESS },
		GetTemperatureFunc:            func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 70, nvml.SUCCESS },
		GetFanSpeedFunc:               func() (uint32, nvml.Return) { return 45, nvml.SUCCESS },
		GetTemperatureThresholdFunc:   func(nvml.TemperatureThresholds) (uint32, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED },
		GetFieldValuesFunc: func(values []nvml.FieldValue) nvml.Return {
			for i := range values {
				v := &values[i]
				kib, ok := nvlinkKiB[[2]uint32{v.FieldId, v.ScopeId}]
				if !ok {
					v.NvmlReturn = uint32(nvml.ERROR_NOT_SUPPORTED)
					continue
				}
				v.NvmlReturn, v.ValueType = uint32(nvml.SUCCESS), uint32(nvml.VALUE_TYPE_UNSIGNED_LONG_LONG)
				binary.LittleEndian.PutUint64(v.Value[:], kib)
			}
			return nvml.SUCCESS
		},
	}
	r := &reader{}
	d := &Device{NVLinks: []NVLink{{Link: 0}, {Link: 1}}}
	r.power(d, dev)
	r.clocks(d, dev)
	r.pcie(d, dev)
	r.thermal(d, dev)
	r.nvlinkTraffic(d, dev)
	if len(r.errs) != 0 {
		t.Fatalf("errors %v", r.errs)
	}
	for _, c := range []struct {
		name string
		got  reading.Opt[float64]
		want float64
	}{
		// 312,456 mW / 1000 = 312.456 W; 700,000 mW / 1000 = 700 W.
		{"power", d.Power, 312.456},
		{"power limit", d.PowerLimit, 700},
		// 98,765,432,100 mJ / 1000 = 98,765,432.1 J (the counter kWh and
		// CO2 are made of: 98,765,432.1 J / 3.6e6 = 27.43 kWh).
		{"energy", d.Energy, 98_765_432.1},
		// 2048 KB/s × 1024 = 2,097,152 B/s; 300 KB/s × 1024 = 307,200 B/s.
		{"pcie tx", d.PCIeTX, 2_097_152},
		{"pcie rx", d.PCIeRX, 307_200},
		// 45 % / 100 = 0.45.
		{"fan", d.FanSpeed, 0.45},
		// Link 0: 5 KiB × 1024 = 5120 B out, 7 KiB × 1024 = 7168 B in;
		// link 1: 11 KiB × 1024 = 11,264 B out, 3,000,000 KiB × 1024 =
		// 3,072,000,000 B in.
		{"link 0 tx", d.NVLinks[0].TXBytes, 5120},
		{"link 0 rx", d.NVLinks[0].RXBytes, 7168},
		{"link 1 tx", d.NVLinks[1].TXBytes, 11_264},
		{"link 1 rx", d.NVLinks[1].RXBytes, 3_072_000_000},
	} {
		if !c.got.OK || math.Abs(c.got.Value-c.want) > 1e-9*c.want {
			t.Errorf("%s = %+v, want %v", c.name, c.got, c.want)
		}
	}
	// 1980 MHz × 1e6 = 1.98e9 Hz, 1755 MHz = 1.755e9 Hz, 2619 MHz =
	// 2.619e9 Hz; the SM's maximum 1980 MHz = 1.98e9 Hz.
	if want := map[Clock]float64{ClockGraphics: 1.98e9, ClockSM: 1.755e9, ClockMemory: 2.619e9}; !reflect.DeepEqual(d.Clocks, want) {
		t.Errorf("clocks %v, want %v", d.Clocks, want)
	}
	if got := d.MaxClocks[ClockSM]; got != 1.98e9 {
		t.Errorf("maximum SM clock %v, want 1.98e9", got)
	}
}
