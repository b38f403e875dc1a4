package collector

import (
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// The simulated NVML runs in the benchmark's process, and its per-process
// samples (15 s of them for each of up to 10,000 processes) cost as much as
// the exporter's reading of them. simMeter times the simulator's costly
// calls on the calling thread's own CPU clock, so that benchmarks report
// the exporter's own CPU as the rest. Calls it does not wrap count as the
// exporter's, and so does the in-process fake kubelet: the own figure errs
// high, never low.
type simMeter struct{ ns atomic.Int64 }

// clockThreadCPUTime is CLOCK_THREAD_CPUTIME_ID of clock_gettime(2): "This
// clock measures the CPU time consumed by this thread."
const clockThreadCPUTime = 3

func threadCPU() time.Duration {
	var ts syscall.Timespec
	if _, _, errno := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTime, uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
		return 0
	}
	return time.Duration(ts.Nano())
}

// time runs f on one locked thread and adds the thread's CPU time to m.
func (m *simMeter) time(f func()) {
	runtime.LockOSThread()
	t0 := threadCPU()
	f()
	m.ns.Add(int64(threadCPU() - t0))
	runtime.UnlockOSThread()
}

// wrap returns lib with its devices' costly calls timed.
func (m *simMeter) wrap(lib nvml.Interface) nvml.Interface { return meteredLib{lib, m} }

type meteredLib struct {
	nvml.Interface
	m *simMeter
}

func (l meteredLib) DeviceGetHandleByIndex(i int) (nvml.Device, nvml.Return) {
	d, ret := l.Interface.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		return d, ret
	}
	return meteredDevice{d, l.m}, ret
}

type meteredDevice struct {
	nvml.Device
	m *simMeter
}

func (d meteredDevice) GetProcessUtilization(lastSeen uint64) (out []nvml.ProcessUtilizationSample, ret nvml.Return) {
	d.m.time(func() { out, ret = d.Device.GetProcessUtilization(lastSeen) })
	return out, ret
}

func (d meteredDevice) GetSamples(t nvml.SamplingType, lastSeen uint64) (vt nvml.ValueType, out []nvml.Sample, ret nvml.Return) {
	d.m.time(func() { vt, out, ret = d.Device.GetSamples(t, lastSeen) })
	return vt, out, ret
}

func (d meteredDevice) GetComputeRunningProcesses() (out []nvml.ProcessInfo, ret nvml.Return) {
	d.m.time(func() { out, ret = d.Device.GetComputeRunningProcesses() })
	return out, ret
}

func (d meteredDevice) GetGraphicsRunningProcesses() (out []nvml.ProcessInfo, ret nvml.Return) {
	d.m.time(func() { out, ret = d.Device.GetGraphicsRunningProcesses() })
	return out, ret
}

func (d meteredDevice) GetMPSComputeRunningProcesses() (out []nvml.ProcessInfo, ret nvml.Return) {
	d.m.time(func() { out, ret = d.Device.GetMPSComputeRunningProcesses() })
	return out, ret
}

// spinDevice is a device whose GetSamples burns cpu of its thread's CPU
// time, measured on the clock simMeter reads.
type spinDevice struct {
	nvml.Device
	cpu time.Duration
}

func (d spinDevice) GetSamples(nvml.SamplingType, uint64) (nvml.ValueType, []nvml.Sample, nvml.Return) {
	t0 := threadCPU()
	for threadCPU()-t0 < d.cpu {
	}
	return nvml.VALUE_TYPE_UNSIGNED_INT, nil, nvml.SUCCESS
}

// TestSimMeter: two calls that each burn 20 ms of their thread's CPU are
// metered at 2 × 20 = 40 ms at least (the clock reads around the call count
// too), and at most what the whole process used meanwhile.
func TestSimMeter(t *testing.T) {
	var m simMeter
	d := meteredDevice{spinDevice{cpu: 20 * time.Millisecond}, &m}
	cpu0 := cpuTime()
	for range 2 {
		if _, _, ret := d.GetSamples(nvml.TOTAL_POWER_SAMPLES, 0); ret != nvml.SUCCESS {
			t.Fatal(ret)
		}
	}
	process := cpuTime() - cpu0
	got := time.Duration(m.ns.Load())
	if got < 40*time.Millisecond || got > process {
		t.Errorf("metered %v, want at least 40ms and at most the process's %v", got, process)
	}
}
