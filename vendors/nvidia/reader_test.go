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
