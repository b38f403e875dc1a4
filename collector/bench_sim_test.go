package collector

import (
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
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
//
// The clock reads are system calls (the vDSO serves only the wall clocks),
// 1–2 µs each on a virtual machine, and a scrape of 8 GPUs makes 32 timed
// calls: without meterCost, the meter's own cost would be reported as the
// exporter's and the simulator's.
type simMeter struct {
	ns      atomic.Int64
	windows atomic.Int64
}

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
	m.windows.Add(1)
}

// simCost is what a stretch of scrapes cost the simulator and the meter.
type simCost struct{ sim, meter float64 }

// since is the simulator's time and the meter's own cost, in ns, per scrape
// over the n scrapes since ns0 and windows0 were read. What a window metered
// includes the half of its clock reads that fell inside it: that part is
// the meter's, not the simulator's.
func (m *simMeter) since(ns0, windows0 int64, n int) simCost {
	w, c := float64(m.windows.Load()-windows0), meterCost()
	metered := float64(m.ns.Load() - ns0)
	return simCost{
		sim:   max(metered-w*c.inside, 0) / float64(n),
		meter: w * (c.inside + c.outside) / float64(n),
	}
}

// windowCost is the CPU, in ns, of one timed call's clock reads: the part
// its window metered and the part outside it.
type windowCost struct{ inside, outside float64 }

var meterCost = sync.OnceValue(calibrateMeter)

// calibrateMeter times empty windows: what they metered is the inside part,
// the CPU of the thread that ran them less that the outside part (the
// thread's, not the process's, which other goroutines' work would add to).
// Measured hot, in a loop, it is the least a window costs, so
// own-cpu-ns/op still errs high.
func calibrateMeter() windowCost {
	const n = 20000
	var m simMeter
	total := emptyWindows(&m, n)
	inside := float64(m.ns.Load()) / n
	return windowCost{inside: inside, outside: max(float64(total)/n-inside, 0)}
}

// emptyWindows meters n empty calls on one thread and returns that
// thread's CPU for them, clock reads included.
func emptyWindows(m *simMeter, n int) time.Duration {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	t0 := threadCPU()
	for range n {
		m.time(func() {})
	}
	return threadCPU() - t0
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

// TestMeterCost: scrapes that are nothing but metered empty calls cost the
// exporter and the simulator nothing, so the CPU left after the simulator's
// and the meter's share is near zero, and so is the simulator's: within
// half the smaller part of a window's cost per call each, where without the
// correction the exporter's is the window's outside part and the
// simulator's its inside.
// CPU time on a shared machine is noisy, so one of three tries must hold;
// a broken correction misses by as much in all three.
func TestMeterCost(t *testing.T) {
	c := meterCost()
	if c.inside <= 0 || c.outside <= 0 || c.inside+c.outside > float64(time.Millisecond) {
		t.Fatalf("meter cost %+v ns a window, want both parts above 0 (each holds part of a system call) and below 1 ms together", c)
	}
	const calls = 20000
	bound := min(c.inside, c.outside) / 2
	var misses []string
	for range 3 {
		var m simMeter
		cpu := float64(emptyWindows(&m, calls))
		got := m.since(0, 0, 1)
		own, sim := (cpu-got.sim-got.meter)/calls, got.sim/calls
		if math.Abs(own) <= bound && sim <= bound {
			return
		}
		misses = append(misses, fmt.Sprintf("exporter %.0f ns, simulator %.0f ns a call (meter %.0f)", own, sim, got.meter/calls))
	}
	t.Errorf("%s; want each within %.0f", strings.Join(misses, "; "), bound)
}
