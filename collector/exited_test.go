package collector

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xpu-exporter/xpu_exporter/attribution"
	"github.com/xpu-exporter/xpu_exporter/demo"
	"github.com/xpu-exporter/xpu_exporter/vendors/nvidia"
)

// TestPodChangeMidWindow: a GPU allocated whole to one pod, replaced by a
// new pod (new PID) in the middle of a scrape interval. The driver's buffer
// still holds the old process's samples for the periods before the change;
// that time is the old pod's, which holds the GPU no more, so it is
// unattributed, not billed to the new pod (which had the whole device's
// utilization before).
func TestPodChangeMidWindow(t *testing.T) {
	const gpu = "GPU-e0000000-0000-4000-8000-000000000000"
	e, clk, replace := podReplacedExporter(t, `node: exit-node
churn_every: 1h
defaults: {model: NVIDIA H100 80GB HBM3, memory_total: 80GiB, metrics: {temperature: 50}}
devices:
  - uuid: `+gpu+`
    processes: [{pid: 700, pod: ml/a, memory_used: 4GiB, utilization: 0.6}]
kubernetes:
  pods:
    - {namespace: ml, name: a, uid: 0a000000-0000-4000-8000-000000000001, containers: [{name: main, devices: [{resource: nvidia.com/gpu, ids: [`+gpu+`]}]}]}
  allocatable: [{resource: nvidia.com/gpu, ids: [`+gpu+`]}]
`)
	scrapeText(t, e, 10*time.Second) // at 5,400 s after boot

	// The pod is replaced 5.5 s later: pod a-g1, PID 700 + 100,000.
	replace()
	clk.set(testNow.Add(15 * time.Second))
	out := scrapeText(t, e, 10*time.Second)
	check, absent := oracleChecks(out)
	// The window is the fifteen 1 s periods ending 5,401 … 5,415 s, each
	// 0.6 busy: the device 0.6. The simulated driver names the process of
	// the generation running in each period's middle: 5,400.5 … 5,404.5 s,
	// five periods, PID 700; 5,405.5 … 5,414.5 s, ten periods, PID 100,700.
	// PID 700: 5 × 0.6 / 15 = 0.2; PID 100,700: 10 × 0.6 / 15 = 0.4.
	check(t, "xpu_utilization_ratio", 0.6, `uuid="`+gpu+`"`)
	check(t, "xpu_process_utilization_ratio", 0.4, `pid="100700"`)
	// Split 0.6 in proportion to 0.4 : 0.2: the new pod 0.4, the old
	// pod's exited process 0.2, unattributed.
	check(t, "xpu_workload_utilization_ratio", 0.4, `pod="a-g1"`)
	check(t, "xpu_workload_utilization_ratio", 0.2, `workload_kind="unattributed"`)
	absent(t, "xpu_process_utilization_ratio", `pid="700"`) // exited: no series of its own
	// Memory: the new pod's process, 4 GiB; the exited process none.
	check(t, "xpu_workload_memory_used_bytes", 4<<30, `pod="a-g1"`)
	check(t, "xpu_workload_memory_used_bytes", 0, `workload_kind="unattributed"`)

	// A window after the change is the new pod's alone.
	clk.set(testNow.Add(30 * time.Second))
	check, absent = oracleChecks(scrapeText(t, e, 10*time.Second))
	check(t, "xpu_workload_utilization_ratio", 0.6, `pod="a-g1"`)
	absent(t, "xpu_workload_utilization_ratio", `workload_kind="unattributed"`)
}

// TestPIDReusedMidWindow is TestPodChangeMidWindow where the new pod's
// process is given the old one's PID: the demo's churn hands PIDs out again
// after 40 generations, as a PID space that wraps does. The driver's
// samples name PID 700 all through the window, five periods for the old
// pod and ten for the new one, and nothing in them says which: the new pod
// was billed the whole 0.6 (probe27 PB1). Whether the exporter learns of
// the reuse from a pidfd or from the start time, the split is left out
// for that window, and so is the PID's own utilization, which is both
// processes', also by a scrape that serves that window again.
func TestPIDReusedMidWindow(t *testing.T) {
	const gpu = "GPU-e0000000-0000-4000-8000-000000000001"
	for _, tc := range []struct {
		pidfd bool
		// devicesFirst reads /devices at 12 s, after the reuse and before
		// the scrape: the resolver finds the new process there, and only
		// there.
		devicesFirst bool
	}{{true, false}, {false, false}, {true, true}, {false, true}} {
		pidfd := tc.pidfd
		t.Run(fmt.Sprintf("pidfd=%v,devices-first=%v", pidfd, tc.devicesFirst), func(t *testing.T) {
			e, clk, replace := podReplacedBy(t, fmt.Sprintf(`node: reuse-node
churn_every: 1h
pidfd: %v
defaults: {model: NVIDIA H100 80GB HBM3, memory_total: 80GiB, metrics: {temperature: 50}}
devices:
  - uuid: %s
    processes: [{pid: 700, pod: ml/a, memory_used: 4GiB, utilization: 0.6}]
kubernetes:
  pods:
    - {namespace: ml, name: a, uid: 0a000000-0000-4000-8000-000000000002, containers: [{name: main, devices: [{resource: nvidia.com/gpu, ids: [%s]}]}]}
  allocatable: [{resource: nvidia.com/gpu, ids: [%s]}]
`, pidfd, gpu, gpu, gpu), 40)
			scrapeText(t, e, 10*time.Second)

			// Generation 40: pod a-g40, PID 700 + (40 mod 40) × 100,000 =
			// 700 again, 5.5 s later.
			replace()
			if tc.devicesFirst {
				clk.set(testNow.Add(12 * time.Second))
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				if snap := e.Snapshot(ctx); snap == nil {
					t.Fatal("no /devices snapshot")
				}
				cancel()
			}
			clk.set(testNow.Add(15 * time.Second))
			check, absent := oracleChecks(scrapeText(t, e, 10*time.Second))
			// Fifteen periods at 0.6: the device 0.6. The right split,
			// a-g40 10 × 0.6 / 15 = 0.4 and its predecessor's 0.2
			// unattributed, cannot be told from PID 700's samples.
			check(t, "xpu_utilization_ratio", 0.6, `uuid="`+gpu+`"`)
			absent(t, "xpu_workload_utilization_ratio", `pod="a-g40"`)
			absent(t, "xpu_workload_utilization_ratio", `workload_kind="unattributed"`)
			absent(t, "xpu_process_utilization_ratio", `pid="700"`)
			// Memory is of the moment: the new pod's process's 4 GiB.
			check(t, "xpu_workload_memory_used_bytes", 4<<30, `pod="a-g40"`)
			check(t, "xpu_process_memory_used_bytes", 4<<30, `pid="700"`, `pod="a-g40"`)

			// A scrape 0.1 s later, before the driver ends another sample
			// period, serves that window again, and so leaves out what
			// that scrape left out, though the resolver sees the new
			// process at both.
			clk.set(testNow.Add(15*time.Second + 100*time.Millisecond))
			check, absent = oracleChecks(scrapeText(t, e, 10*time.Second))
			check(t, "xpu_utilization_ratio", 0.6, `uuid="`+gpu+`"`)
			absent(t, "xpu_workload_utilization_ratio", `pod="a-g40"`)
			absent(t, "xpu_process_utilization_ratio", `pid="700"`)

			// The next window is the new process's alone.
			clk.set(testNow.Add(30 * time.Second))
			check, _ = oracleChecks(scrapeText(t, e, 10*time.Second))
			check(t, "xpu_workload_utilization_ratio", 0.6, `pod="a-g40"`)
			check(t, "xpu_process_utilization_ratio", 0.6, `pid="700"`)
		})
	}
}

// The driver's garbage beside zombie processes (garbage_samples: zero-filled
// entries, a PID in no list at 37,100 %) is no process that ran: the sole
// owner keeps the device's utilization, and nothing is unattributed.
func TestGarbageSamplesAreNoExitedProcess(t *testing.T) {
	const gpu = "GPU-e1000000-0000-4000-8000-000000000000"
	s, err := demo.Parse([]byte(`node: garbage-node
defaults: {model: NVIDIA H100 80GB HBM3, memory_total: 80GiB, metrics: {temperature: 50}}
devices:
  - uuid: ` + gpu + `
    garbage_samples: true
    processes: [{pid: 700, unit: train.service, memory_used: 4GiB, utilization: 0.6}]
`))
	if err != nil {
		t.Fatal(err)
	}
	check, absent := oracleChecks(secondScrape(t, s))
	// Fifteen periods at 0.6, PID 700 in each: the device and its one
	// owner 0.6.
	check(t, "xpu_utilization_ratio", 0.6, `uuid="`+gpu+`"`)
	check(t, "xpu_workload_utilization_ratio", 0.6, `unit="train.service"`)
	absent(t, "xpu_workload_utilization_ratio", `workload_kind="unattributed"`)
}

// A GPU in MIG mode lost while the exporter runs keeps its instances, their
// owners and allocations, and the GPU its owner count (found by probing:
// the instances vanished, their pods' device-plugin IDs named no device,
// and the GPU's owners were left out as unknown).
func TestLostMIGGPUKeepsOwners(t *testing.T) {
	const gpu, mig1, mig2 = "GPU-e3000000-0000-4000-8000-000000000000", "MIG-e3000000-0000-4000-8000-000000000001", "MIG-e3000000-0000-4000-8000-000000000002"
	s, err := demo.Parse([]byte(`node: lost-mig-node
devices:
  - uuid: ` + gpu + `
    model: NVIDIA A100-SXM4-80GB
    memory_total: 80GiB
    faults: {lost_after: 5410s}
    mig:
      - {uuid: ` + mig1 + `, profile: 3g.40gb, gpu_instance: 2}
      - {uuid: ` + mig2 + `, profile: 3g.40gb, gpu_instance: 1}
kubernetes:
  pods:
    - {namespace: ml, name: mig-a, uid: 0a000000-0000-4000-8000-0000000000a1, containers: [{name: main, devices: [{resource: nvidia.com/mig-3g.40gb, ids: [` + mig1 + `]}]}]}
    - {namespace: ml, name: mig-b, uid: 0a000000-0000-4000-8000-0000000000a2, containers: [{name: main, devices: [{resource: nvidia.com/mig-3g.40gb, ids: [` + mig2 + `]}]}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	// Read at 5,400 s after boot, then at 5,415 s, 5 s after the GPU fell
	// off the bus.
	out := secondScrape(t, s)
	check, absent := oracleChecks(out)
	parent := `uuid="` + gpu + `",vendor=` // not its instances' parent_uuid
	check(t, "xpu_device_up", 0, parent)
	check(t, "xpu_device_owners", 2, parent)
	for pod, mig := range map[string]string{"mig-a": mig1, "mig-b": mig2} {
		check(t, "xpu_device_up", 0, `uuid="`+mig+`"`, `pod="`+pod+`"`)
		// A 3g instance of a 7-slice A100: 3/7 of the GPU.
		check(t, "xpu_workload_allocated_devices", 3.0/7, `uuid="`+mig+`"`, `pod="`+pod+`"`)
	}
	if !strings.Contains(out, "\nxpu_attribution_unknown_device_ids 0\n") {
		t.Error("the instances' device-plugin IDs are counted as naming no device")
	}
	absent(t, "xpu_workload_utilization_ratio", `pod="mig-a"`)
}

// TestPodChangeMidWindowOnMIG: a MIG instance allocated to one pod, replaced
// by a new pod (new PID) in the middle of a scrape interval. NVML keeps no
// per-process samples on a MIG device, so what part of the window was the
// old pod's is unknown: the process seen at the previous scrape and gone
// now makes the new pod no sole owner, and the split is left out rather
// than the instance's whole 0.5 billed to the new pod (probe18-nvidia D2).
// The window after is the new pod's alone.
func TestPodChangeMidWindowOnMIG(t *testing.T) {
	const mig = "MIG-ee000000-0001-4000-8000-000000000001"
	e, clk, replace := podReplacedExporter(t, `node: exit-node
churn_every: 1h
defaults: {model: NVIDIA A100-SXM4-80GB, memory_total: 80GiB, metrics: {temperature: 50}}
devices:
  - uuid: GPU-ee000000-0000-4000-8000-000000000001
    mig:
      - {uuid: `+mig+`, profile: 3g.40gb, gpu_instance: 1, metrics: {graphics_active: 0.5}, processes: [{pid: 8101, pod: ml/a, memory_used: 6GiB}]}
kubernetes:
  pods:
    - {namespace: ml, name: a, uid: 0a000000-0000-4000-8000-000000000011, containers: [{name: main, devices: [{resource: nvidia.com/mig-3g.40gb, ids: [`+mig+`]}]}]}
  allocatable: [{resource: nvidia.com/mig-3g.40gb, ids: [`+mig+`]}]
`)
	// GPM's activity is between two samples: the second scrape has it.
	scrapeText(t, e, 10*time.Second)
	clk.set(testNow.Add(5 * time.Second))
	check, _ := oracleChecks(scrapeText(t, e, 10*time.Second))
	check(t, "xpu_workload_utilization_ratio", 0.5, `pod="a"`)

	replace()
	clk.set(testNow.Add(15 * time.Second))
	check, absent := oracleChecks(scrapeText(t, e, 10*time.Second))
	check(t, "xpu_utilization_ratio", 0.5, `uuid="`+mig+`"`)
	absent(t, "xpu_workload_utilization_ratio", `pod="a-g1"`)
	check(t, "xpu_workload_allocated_devices", 3.0/7, `pod="a-g1"`)

	clk.set(testNow.Add(30 * time.Second))
	check, _ = oracleChecks(scrapeText(t, e, 10*time.Second))
	check(t, "xpu_workload_utilization_ratio", 0.5, `pod="a-g1"`)
}

// What a MIG device's processes were is kept by read: a read that ends
// after a newer one (it was slow) neither names exits from older lists nor
// forgets a device it did not list (review18 R18-3).
func TestMIGExitsFollowReadOrder(t *testing.T) {
	c := &nvidiaCollector{logger: slog.New(slog.DiscardHandler), logged: map[string]uint64{}, down: map[string]string{}, partial: map[string]bool{}}
	mig := func(pids ...uint32) nvidia.Device {
		d := nvidia.Device{Identity: nvidia.Identity{UUID: "MIG-1"}, Up: true, MIG: &nvidia.MIG{ParentUUID: "GPU-1"}}
		for _, pid := range pids {
			d.Processes = append(d.Processes, nvidia.Process{PID: pid})
		}
		return d
	}
	exited := func(devs []*Device) []uint32 {
		var pids []uint32
		for _, p := range devs[0].Exited {
			pids = append(pids, p.PID)
		}
		return pids
	}
	c.devices([]nvidia.Device{mig(10)}, 1)
	if got := exited(c.devices([]nvidia.Device{mig(20)}, 3)); !slices.Equal(got, []uint32{10}) {
		t.Errorf("read 3: exited %v, want [10]", got)
	}
	// Read 2 ends late, without the device (its GPU down then): read 3's
	// list stays.
	c.devices(nil, 2)
	if got := exited(c.devices([]nvidia.Device{mig(30)}, 4)); !slices.Equal(got, []uint32{20}) {
		t.Errorf("read 4 after a late read 2: exited %v, want [20]", got)
	}
}

// podReplacedExporter serves the scenario, whose pod ml/a the demo churns,
// on a test clock at testNow; replace replaces its pods and processes
// 5.5 s later (ml/a by ml/a-g1) and waits, bounded, until the Pods API
// lists the new pod.
func podReplacedExporter(t *testing.T, scenario string) (e *Exporter, clk *testClock, replace func()) {
	t.Helper()
	return podReplacedBy(t, scenario, 1)
}

// podReplacedBy is podReplacedExporter whose replace moves the node to
// churn generation gen (ml/a by ml/a-g<gen>).
func podReplacedBy(t *testing.T, scenario string, gen uint64) (e *Exporter, clk *testClock, replace func()) {
	t.Helper()
	s, err := demo.Parse([]byte(scenario))
	if err != nil {
		t.Fatal(err)
	}
	clk = &testClock{t: testNow}
	cfg, sim := simulatedAttribution(t, s)
	e = newExporterWith(t, s, sim, attribution.New(cfg), nil, clk.now)
	return e, clk, func() {
		t.Helper()
		sim.Churn(gen, testNow.Add(5500*time.Millisecond))
		name := fmt.Sprintf("a-g%d", gen)
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if _, ok := cfg.Metadata.Pod("ml", name); ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the Pods API never listed the new pod ml/%s", name)
			}
		}
	}
}
