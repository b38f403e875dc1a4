package nvidia

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/xpu-exporter/xpu_exporter/demo"
)

func mustScenario(t *testing.T, y string) *demo.Scenario {
	t.Helper()
	s, err := demo.Parse([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Two reads at once (an HA pair of Prometheus servers, or /devices during a
// scrape) share the device's read in flight: neither reports a healthy GPU
// down.
func TestConcurrentReadsShareTheDeviceRead(t *testing.T) {
	s := mustScenario(t, `
devices:
  - {model: X, memory_total: 1GiB, metrics: {power: 100}, faults: {hang: [power], hang_for: 300ms}}
  - {model: X, memory_total: 1GiB, metrics: {power: 100}}
`)
	c := New(s.NVML(time.Now(), time.Now))
	var wg sync.WaitGroup
	nodes := make([]Node, 2)
	for i := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			var err error
			if nodes[i], err = c.Read(ctx, i == 0); err != nil {
				t.Error(err)
			}
		}()
		time.Sleep(50 * time.Millisecond) // the second starts while the first reads GPU 0
	}
	wg.Wait()
	for i, n := range nodes {
		for _, d := range n.Devices {
			if !d.Up {
				t.Errorf("read %d: GPU %d down (%q) though it answered", i, d.Index, d.Down)
			}
		}
	}
}

// A scrape that starts while a push's read of the device is under way (a
// slow device: 300 ms a read) does not share it: that read covers the time
// since the previous push, the scrape's must cover the time since the
// previous scrape. Busy 5 s of every 10 from the start: the scrape's window
// 100 … 108 s holds 5 busy periods of 8, 0.625; the push's 105 … 108 s is
// idle, 0. Unless its deadline leaves too little to wait for the push's
// read and then read the device itself (450 ms: 250 ms more of the push's
// read, then 300 ms of its own): it then shares the push's read and serves
// the push's window, the GPU up at 0, where it was reported down for want
// of time (found by probing: probe13-otlpscrape D4).
func TestScrapeDuringPushRead(t *testing.T) {
	for _, tc := range []struct {
		name     string
		deadline time.Duration
		want     float64
	}{
		{"time to read after the push", 10 * time.Second, 0.625},
		{"no time to read after the push", 450 * time.Millisecond, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := mustScenario(t, `
devices:
  - model: X
    memory_total: 1GiB
    sample_period: 1s
    metrics: {power: 100}
    faults: {hang: [power], hang_for: 300ms}
    processes:
      - {pid: 10, memory_used: 1GiB, utilization: 1.0, duty: {period: 10s, busy: 5s}}
`)
			start := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
			var mu sync.Mutex
			now := start.Add(100 * time.Second)
			clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
			set := func(d time.Duration) { mu.Lock(); now = start.Add(100*time.Second + d); mu.Unlock() }
			c := New(s.NVML(start, clock))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := c.Read(ctx, true); err != nil {
				t.Fatal(err)
			}
			set(5 * time.Second)
			if _, err := c.ReadPush(ctx); err != nil {
				t.Fatal(err)
			}
			set(8 * time.Second)
			pushed := make(chan struct{})
			go func() {
				defer close(pushed)
				c.ReadPush(ctx)
			}()
			time.Sleep(50 * time.Millisecond) // the push's read waits on power
			scrape, cancelScrape := context.WithTimeout(context.Background(), tc.deadline)
			defer cancelScrape()
			n, err := c.Read(scrape, true)
			<-pushed
			if err != nil {
				t.Fatal(err)
			}
			d := n.Devices[0]
			if u := d.Utilization; !d.Up || !u.OK || math.Abs(u.Value-tc.want) > 1e-9 {
				t.Errorf("scrape: up %v (%q), utilization %+v; want up, %v", d.Up, d.Down, u, tc.want)
			}
		})
	}
}

// A read that has already run longer than a later read's whole budget is
// stuck in the driver: that read reports the device down at once rather
// than wait on it, and the other devices are read as usual.
func TestStuckReadIsNotWaitedOn(t *testing.T) {
	s := mustScenario(t, `
devices:
  - {model: X, memory_total: 1GiB, metrics: {power: 100}, faults: {hang: [power], hang_for: 3s}}
  - {model: X, memory_total: 1GiB, metrics: {power: 100}}
`)
	c := New(s.NVML(time.Now(), time.Now))
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	n, _ := c.Read(ctx, true)
	if n.Devices[0].Up || n.Devices[0].Down != "timeout" || !n.Devices[1].Up {
		t.Fatalf("first read: %+v", n.Devices)
	}
	// GPU 0's read has run over 1.2 s, more than the next read's 1 s.
	time.Sleep(1100 * time.Millisecond)
	ctx2, cancel2 := context.WithTimeout(context.Background(), time.Second)
	defer cancel2()
	start := time.Now()
	n, _ = c.Read(ctx2, true)
	if n.Devices[0].Down != "previous query still running" || !n.Devices[1].Up || time.Since(start) > 500*time.Millisecond {
		t.Errorf("second read after %v: %+v", time.Since(start), n.Devices)
	}
}

// TestSlowReadIsWaitedOn: a read that has run less than a later read's
// budget is a slow device, not a stuck one, however short the budget of
// the read that started it: the later read waits for it and reports the
// device up, as a second Prometheus server with a longer scrape timeout
// would (found by probing: a scrape with a 1 s timeout, or any client
// sending a 1 ms one, made the next 10 s scrape report the GPU down).
func TestSlowReadIsWaitedOn(t *testing.T) {
	// 30 ms per call: a full read of GPU 0 takes over a second.
	s := mustScenario(t, `
devices:
  - {model: X, memory_total: 1GiB, metrics: {power: 100, temperature: 40}, call_latency: 30ms}
  - {model: X, memory_total: 1GiB, metrics: {power: 100}}
`)
	for _, tc := range []struct {
		name          string
		budget, pause time.Duration
	}{
		{"a little past the first deadline", 300 * time.Millisecond, 20 * time.Millisecond},
		{"past the first deadline by more than its budget", 100 * time.Millisecond, 400 * time.Millisecond},
		{"started by a 1 ms budget", time.Millisecond, 300 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := New(s.NVML(time.Now(), time.Now))
			ctx, cancel := context.WithTimeout(context.Background(), tc.budget)
			defer cancel()
			n, _ := c.Read(ctx, true)
			if n.Devices[0].Up {
				t.Fatalf("GPU 0 answered within %v: the test proves nothing", tc.budget)
			}
			time.Sleep(tc.pause)
			ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel2()
			n, _ = c.Read(ctx2, true)
			if !n.Devices[0].Up || !n.Devices[1].Up {
				t.Errorf("second read: GPU 0 %q, GPU 1 %q; want both up", n.Devices[0].Down, n.Devices[1].Down)
			}
		})
	}
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

// boot is when the simulated node of the clocked tests booted.
var boot = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// clockedClient is a client over the scenario's simulated driver on a clock
// of the test's, at first `at` after boot.
func clockedClient(s *demo.Scenario, at time.Duration) (*Client, *clock) {
	clk := &clock{t: boot.Add(at)}
	return New(s.NVML(boot, clk.now)), clk
}

// scrapeRead reads every device as a scrape does.
func scrapeRead(t *testing.T, c *Client) []Device {
	t.Helper()
	n, err := c.Read(context.Background(), true)
	if err != nil {
		t.Fatal(err)
	}
	return n.Devices
}

// Only reads that say they are a scrape's move the window on: a read for
// /devices in between leaves the next scrape's window whole.
func TestOnlyScrapesAdvanceTheWindow(t *testing.T) {
	// One process at full load for the first 5 s of every 10 s.
	s := mustScenario(t, `
devices:
  - model: X
    memory_total: 1GiB
    processes:
      - {pid: 7, utilization: 1, duty: {period: 10s, busy: 5s}}
`)
	c, clk := clockedClient(s, 100*time.Second)
	read := func(advance bool) Device {
		t.Helper()
		n, err := c.Read(context.Background(), advance)
		if err != nil || !n.Devices[0].Up {
			t.Fatalf("read: %v %+v", err, n.Devices)
		}
		return n.Devices[0]
	}
	read(true) // the previous scrape, at 100 s
	clk.set(boot.Add(105 * time.Second))
	// /devices at 105 s: the periods (100,101] … (104,105]. In the middle
	// of each, t − boot is 100.5 … 104.5 and (t − boot) mod 10 < 5: busy in
	// all five → 5/5 = 1.
	if d := read(false); !near(d.Utilization.Value, 1) {
		t.Errorf("/devices at 105 s: utilization %v, want 5/5", d.Utilization.Value)
	}
	clk.set(boot.Add(110 * time.Second))
	// The scrape at 110 s covers (100, 110]: busy in the five periods up to
	// 105 s, idle in the five after (middles 105.5 … 109.5) → 5/10 = 0.5.
	// Had /devices moved the window to 105 s, it would read 0/5 = 0.
	d := read(true)
	if !near(d.Utilization.Value, 0.5) {
		t.Errorf("scrape at 110 s: utilization %v, want 5/10", d.Utilization.Value)
	}
	if p := d.Processes[0].SMUtilization; !p.OK || !near(p.Value, 0.5) {
		t.Errorf("process: %+v, want 5/10", p)
	}
	// A second scrape half a second later: no driver period has ended since,
	// so the window of the scrape at 110 s is reported again (5/10), not the
	// newest period alone (idle: 0).
	clk.set(boot.Add(110*time.Second + 500*time.Millisecond))
	d = read(true)
	if !near(d.Utilization.Value, 0.5) || !near(d.Processes[0].SMUtilization.Value, 0.5) {
		t.Errorf("scrape at 110.5 s: utilization %v, process %+v; want the last window's 5/10", d.Utilization.Value, d.Processes[0].SMUtilization)
	}
}

// Shutdown while a device read is stuck in the driver leaves that read's
// state to the read itself, which releases it when it returns (run with
// -race: nothing is swept while the read still writes).
func TestShutdownWithAStuckRead(t *testing.T) {
	s := mustScenario(t, `
devices:
  - {model: X, memory_total: 1GiB, metrics: {power: 100, sm_active: 0.5}, faults: {hang: [power], hang_for: 300ms}}
`)
	c := New(s.NVML(time.Now(), time.Now))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if n, _ := c.Read(ctx, true); n.Devices[0].Up {
		t.Fatal("the hung device answered")
	}
	c.Shutdown()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c.mu.Lock()
		_, kept := c.gpm[0]
		busy := c.inflight[0] != nil
		c.mu.Unlock()
		if !busy {
			if kept {
				t.Error("the stuck read's GPM state outlived it after Shutdown")
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the stuck read never returned")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestHungLateCallKeepsIdentity: a GPU whose read hangs after its identity
// was read (in the process list) is reported down under its UUID, by which
// its owners are found, not unnamed (found by probing).
func TestHungLateCallKeepsIdentity(t *testing.T) {
	s := mustScenario(t, `
devices:
  - {model: X, memory_total: 1GiB, metrics: {power: 100}, faults: {hang: [processes], hang_for: 1s}}
`)
	c := New(s.NVML(time.Now(), time.Now))
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	n, _ := c.Read(ctx, true)
	if d := n.Devices[0]; d.Up || d.UUID != s.Devices[0].UUID {
		t.Errorf("GPU 0 up %v, UUID %q; want down under %q", d.Up, d.UUID, s.Devices[0].UUID)
	}
	time.Sleep(time.Second) // the hung read ends before the test does
}

// A GPU in MIG mode says whether its MIG devices were all listed, none
// perhaps, so that Slurm's GRES numbering can count it as one GPU when it
// has none (collector gresIndices).
func TestMIGListed(t *testing.T) {
	s := mustScenario(t, `
devices:
  - {model: X, memory_total: 80GiB, mig_mode: true}
  - {model: X, memory_total: 80GiB, mig: [{profile: 3g.40gb, gpu_instance: 1}]}
  - {model: X, memory_total: 80GiB}
`)
	c := New(s.NVML(time.Now(), time.Now))
	n, err := c.Read(context.Background(), true)
	if err != nil {
		t.Fatal(err)
	}
	var gpus []Device
	migs := 0
	for _, d := range n.Devices {
		if d.MIG != nil {
			migs++
			continue
		}
		gpus = append(gpus, d)
	}
	if len(gpus) != 3 || migs != 1 {
		t.Fatalf("%d GPUs and %d MIG devices, want 3 and 1", len(gpus), migs)
	}
	for i, want := range []struct{ mig, listed bool }{{true, true}, {true, true}, {false, false}} {
		d := gpus[i]
		if got := d.MIGEnabled.OK && d.MIGEnabled.Value; got != want.mig || d.MIGListed != want.listed {
			t.Errorf("GPU %d: MIG mode %v, listed %v; want %v, %v", i, got, d.MIGListed, want.mig, want.listed)
		}
	}
}

// Once a committed read showed the driver keeping entries per period, a
// later window with one entry per process is still a mean over the
// window: the process was idle in the periods it has no entry in.
func TestBufferedDriverIsRemembered(t *testing.T) {
	// Busy at full load for the first second of every 10 s.
	s := mustScenario(t, `
devices:
  - model: X
    memory_total: 1GiB
    processes:
      - {pid: 7, utilization: 1, duty: {period: 10s, busy: 1s}}
`)
	c, clk := clockedClient(s, 100*time.Second)
	// The first read takes the driver's whole buffer (100 periods to
	// 100 s): PID 7 has entries in ten of them, so the buffer shows.
	if _, err := c.Read(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	clk.set(boot.Add(110 * time.Second))
	n, err := c.Read(context.Background(), true)
	if err != nil || len(n.Devices) != 1 || len(n.Devices[0].Processes) != 1 {
		t.Fatalf("read: %v %+v", err, n)
	}
	// (100, 110]: one entry, in the period ending 101 s (middle 100.5 s,
	// busy): 1 of 10 periods → 0.1; taken as the newest entry it would be 1.
	if p := n.Devices[0].Processes[0].SMUtilization; !p.OK || !near(p.Value, 0.1) {
		t.Errorf("process: %+v, want 1/10", p)
	}
}

// A GPU that falls off the bus while the exporter runs keeps the identity
// an earlier read gave it: GPU_IS_LOST answers every call, its UUID's
// included, and without it the GPU's owners, capacity and alerts lost it
// (found by probing: xpu_device_up{gpu="1"} 0 alone, its pod's device
// plugin ID "naming no device").
func TestLostGPUKeepsItsIdentity(t *testing.T) {
	s := mustScenario(t, `
devices:
  - {uuid: GPU-10000000-0000-4000-8000-000000000000, model: X, memory_total: 1GiB, faults: {lost_after: 10s}}
`)
	c, clk := clockedClient(s, 5*time.Second)
	read := func() Device {
		t.Helper()
		if devs := scrapeRead(t, c); len(devs) == 1 {
			return devs[0]
		}
		t.Fatal("want one device")
		return Device{}
	}
	if d := read(); !d.Up || d.UUID != "GPU-10000000-0000-4000-8000-000000000000" {
		t.Fatalf("before: %+v", d)
	}
	clk.set(boot.Add(15 * time.Second))
	d := read()
	if d.Up || d.Down != "GPU is lost" || d.UUID != "GPU-10000000-0000-4000-8000-000000000000" || d.Name != "X" {
		t.Errorf("after: up %v, down %q, identity %+v; want lost with the identity read before", d.Up, d.Down, d.Identity)
	}
}

// A GPU in MIG mode that is lost keeps the MIG instances its last read
// listed, down, with their identity and placement: the pods that hold them
// keep their allocations (found by probing: the instances vanished and
// their pods' device-plugin IDs named no device).
func TestLostMIGGPUKeepsItsInstances(t *testing.T) {
	s := mustScenario(t, `
devices:
  - uuid: GPU-20000000-0000-4000-8000-000000000000
    model: NVIDIA A100-SXM4-80GB
    memory_total: 80GiB
    faults: {lost_after: 10s}
    mig:
      - {uuid: MIG-20000000-0000-4000-8000-000000000001, profile: 3g.40gb, gpu_instance: 2}
      - {uuid: MIG-20000000-0000-4000-8000-000000000002, profile: 3g.40gb, gpu_instance: 1}
  - {uuid: GPU-20000000-0000-4000-8000-000000000009, model: NVIDIA A100-SXM4-80GB, memory_total: 80GiB, mig_mode: true, faults: {lost_after: 10s}}
`)
	c, clk := clockedClient(s, 5*time.Second)
	read := func() []Device { t.Helper(); return scrapeRead(t, c) }
	before := read()
	if len(before) != 4 || !before[1].Up {
		t.Fatalf("before: %+v", before)
	}
	clk.set(boot.Add(15 * time.Second))
	after := read()
	if len(after) != 4 {
		t.Fatalf("after: %d devices, want the GPUs and the first one's two instances: %+v", len(after), after)
	}
	// The second GPU had no instance: still in MIG mode, with none.
	if gpu := after[3]; gpu.Up || gpu.UUID != before[3].UUID || !gpu.MIGEnabled.Value || !gpu.MIGListed {
		t.Errorf("GPU without instances: %+v, want it down, in MIG mode, listed", gpu)
	}
	if gpu := after[0]; gpu.Up || gpu.UUID != before[0].UUID || !gpu.MIGEnabled.Value || !gpu.MIGListed {
		t.Errorf("GPU: %+v, want it down, named, in MIG mode with its instances listed", gpu)
	}
	for i, d := range after[1:3] {
		want := before[i+1]
		if d.Up || d.Down != "GPU is lost" || d.UUID != want.UUID || d.MIG == nil || *d.MIG != *want.MIG {
			t.Errorf("instance %d: %+v (MIG %+v), want %s down as it was placed (%+v)", i, d.Identity, d.MIG, want.UUID, want.MIG)
		}
	}
}
