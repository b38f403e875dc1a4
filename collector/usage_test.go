package collector

import (
	"math"
	"testing"

	"github.com/xpu-exporter/xpu_exporter/attribution"
)

// TestUsage states Device.Usage's split from the raw readings, worked out
// by hand, and the cases where it must leave the split out because some of
// what it would divide is unknown.
func TestUsage(t *testing.T) {
	u := func(v uint64) *uint64 { return &v }
	const gib = 1 << 30
	a := attribution.Owner{Kind: attribution.Kubernetes, Namespace: "ml", Pod: "a", Container: "main"}
	b := attribution.Owner{Kind: attribution.Kubernetes, Namespace: "ml", Pod: "b", Container: "main"}
	two := []attribution.Claim{{Owner: a, Share: 0.5}, {Owner: b, Share: 0.5}}
	// Pod a runs 10 and 11, pod b runs 20.
	owners := map[uint32]int{10: 0, 11: 0, 20: 1}
	procs := func(u10, u11, u20 *float64) []Process {
		return []Process{
			{PID: 10, MemoryUsed: u(2 * gib), Utilization: u10},
			{PID: 11, MemoryUsed: u(1 * gib), Utilization: u11},
			{PID: 20, MemoryUsed: u(4 * gib), Utilization: u20},
		}
	}
	none := usageWant{}
	tests := []struct {
		name string
		d    Device
		want []usageWant
	}{{
		// Device 0.6 busy; processes' shares 0.2 + 0.1 (a) and 0.15 (b),
		// 0.45 in all: a 0.6 × 0.3/0.45 = 0.4, b 0.6 × 0.15/0.45 = 0.2.
		// Memory: a 2 + 1 = 3 GiB, b 4 GiB.
		name: "split by the processes' utilization",
		d:    Device{Utilization: some(0.6), Claims: two, ProcessOwner: owners, Processes: procs(some(0.2), some(0.1), some(0.15))},
		want: []usageWant{{some(3 * gib), some(0.4)}, {some(4 * gib), some(0.2)}},
	}, {
		// A process without samples (an AMD client first seen this
		// scrape): dividing 0.6 between the others would hand b all of it.
		name: "a process without utilization",
		d:    Device{Utilization: some(0.6), Claims: two, ProcessOwner: owners, Processes: procs(some(0.2), some(0.1), nil)},
		want: []usageWant{{some(3 * gib), nil}, {some(4 * gib), nil}},
	}, {
		// The same on a device idle over the window (utilization 0, as
		// AMD's gpu_busy_percent reads when the GPU has just gone idle
		// while fdinfo shows its clients busy earlier in the window):
		// every part of 0 is 0, a 0 × 0.3/0.45 = 0 and b 0, whatever b's
		// process did. The parts add up to the device's 0, and a's cannot
		// be more than it is when b's process is known (0.15 or 0: a 0 ×
		// 0.3/0.45 = 0, "split by the processes' utilization" with the
		// device at 0). Left out (nil) would do too; a's own 0.2 + 0.1 =
		// 0.3 would not: more than the whole device.
		name: "idle device, a process without utilization",
		d:    Device{Utilization: some(0), Claims: two, ProcessOwner: owners, Processes: procs(some(0.2), some(0.1), nil)},
		want: []usageWant{{some(3 * gib), some(0)}, {some(4 * gib), some(0)}},
	}, {
		// Idle device, every process known: 0 × 0.3/0.45 = 0 and
		// 0 × 0.15/0.45 = 0.
		name: "idle device, every process known",
		d:    Device{Utilization: some(0), Claims: two, ProcessOwner: owners, Processes: procs(some(0.2), some(0.1), some(0.15))},
		want: []usageWant{{some(3 * gib), some(0)}, {some(4 * gib), some(0)}},
	}, {
		// The vendor could not list every process: a's and b's memory
		// would be what was seen of them, 0 for an owner whose processes
		// were all missed.
		name: "a partial process list",
		d:    Device{Utilization: some(0.6), Claims: two, ProcessOwner: owners, Processes: procs(some(0.2), some(0.1), some(0.15)), ProcessesPartial: true},
		want: []usageWant{none, none},
	}, {
		name: "no process seen, list partial",
		d:    Device{Utilization: some(0.6), Claims: two, ProcessesPartial: true},
		want: []usageWant{none, none},
	}, {
		// Nothing listed and nothing failed: allocated but idle shares,
		// 0 bytes each; 0.6 busy with no process samples cannot be split.
		name: "no process, list whole",
		d:    Device{Utilization: some(0.6), Claims: two},
		want: []usageWant{{some(0), nil}, {some(0), nil}},
	}, {
		// A sole owner by allocation has the device's utilization whatever
		// its processes say; its memory is its processes', unknown here.
		name: "sole allocated owner, list partial",
		d:    Device{Utilization: some(0.6), Claims: two[:1], OwnersAllocated: true, ProcessesPartial: true},
		want: []usageWant{{nil, some(0.6)}},
	}, {
		// Found by probing: a bare-metal GPU whose owners come from its
		// processes, 0.4 busy: pid 10 of a (0.3, 2 GiB) and pid 11, which
		// exited before procfs was read (0.1, 1 GiB; no owner known). a
		// was handed the device's 0.4, its own 0.3 plus the 0.1 of a
		// process that may have been another unit's: left out instead.
		name: "sole owner from processes, another process unresolved",
		d: Device{Utilization: some(0.4), Claims: two[:1], ProcessOwner: map[uint32]int{10: 0},
			Processes: []Process{{PID: 10, MemoryUsed: u(2 * gib), Utilization: some(0.3)}, {PID: 11, MemoryUsed: u(1 * gib), Utilization: some(0.1)}}},
		want: []usageWant{none},
	}, {
		// The same with the GPU allocated to a (a pod's whole GPU): every
		// process on it is a's or unattributed, so the 0.4 is a's; its
		// memory, without pid 11's owner, is not known.
		name: "sole allocated owner, a process unresolved",
		d: Device{Utilization: some(0.4), Claims: two[:1], OwnersAllocated: true, ProcessOwner: map[uint32]int{10: 0},
			Processes: []Process{{PID: 10, MemoryUsed: u(2 * gib), Utilization: some(0.3)}, {PID: 11, MemoryUsed: u(1 * gib), Utilization: some(0.1)}}},
		want: []usageWant{{nil, some(0.4)}},
	}, {
		// Found with the simulator's buffered samples across a pod change:
		// pod a holds the GPU now (pid 20: 0.4 of the window, 4 GiB); pid
		// 10 of the pod that held it before ran in the window's first part
		// (0.2) and exited, and its pod holds it no more (unattributed).
		// The device's 0.6 splits 0.4 : 0.2, so a 0.6 × 0.4/0.6 = 0.4 and
		// unattributed 0.6 × 0.2/0.6 = 0.2; a was handed all 0.6 before.
		// Memory: a 4 GiB, the exited process none.
		name: "sole allocated owner after another's process exited",
		d: Device{Utilization: some(0.6), Claims: two[:1], OwnersAllocated: true, ProcessOwner: map[uint32]int{20: 0, 10: attribution.Unattributed},
			Processes: []Process{{PID: 20, MemoryUsed: u(4 * gib), Utilization: some(0.4)}}, Exited: []Process{{PID: 10, Utilization: some(0.2)}}},
		want: []usageWant{{some(4 * gib), some(0.4)}, {some(0), some(0.2)}},
	}, {
		// The exited process was a's own (a worker that ended): a keeps the
		// whole 0.6.
		name: "sole allocated owner after its own process exited",
		d: Device{Utilization: some(0.6), Claims: two[:1], OwnersAllocated: true, ProcessOwner: map[uint32]int{20: 0, 10: 0},
			Processes: []Process{{PID: 20, MemoryUsed: u(4 * gib), Utilization: some(0.4)}}, Exited: []Process{{PID: 10, Utilization: some(0.2)}}},
		want: []usageWant{{some(4 * gib), some(0.6)}},
	}, {
		// Nobody knows whose the exited process was (it ran between two
		// scrapes): the 0.6 may not all be a's, so no utilization; the
		// memory split stands, the exited process holding none.
		name: "sole allocated owner after an unknown process exited",
		d: Device{Utilization: some(0.6), Claims: two[:1], OwnersAllocated: true, ProcessOwner: map[uint32]int{20: 0},
			Processes: []Process{{PID: 20, MemoryUsed: u(4 * gib), Utilization: some(0.4)}}, Exited: []Process{{PID: 10, Utilization: some(0.2)}}},
		want: []usageWant{{some(4 * gib), nil}},
	}, {
		// Shared: a runs 10 (0.2), b runs 20 (0.1) and ran 30, exited
		// (0.1). Busy time a 0.2, b 0.2, of 0.4: a 0.6 × 0.2/0.4 = 0.3, b
		// 0.6 × 0.2/0.4 = 0.3. Without 30, b got 0.6 × 0.1/0.3 = 0.2 and a
		// 0.4. Memory a 2 GiB, b 4 GiB.
		name: "shared, an owner's process exited",
		d: Device{Utilization: some(0.6), Claims: two, ProcessOwner: map[uint32]int{10: 0, 20: 1, 30: 1},
			Processes: []Process{{PID: 10, MemoryUsed: u(2 * gib), Utilization: some(0.2)}, {PID: 20, MemoryUsed: u(4 * gib), Utilization: some(0.1)}},
			Exited:    []Process{{PID: 30, Utilization: some(0.1)}}},
		want: []usageWant{{some(2 * gib), some(0.3)}, {some(4 * gib), some(0.3)}},
	}, {
		// Pod b's process 20 has no memory reading (no permission): the
		// split of the device's memory is unknown, but pod a runs nothing
		// there and uses 0. Utilization: all 0.6 is b's (0.3 of 0.3), a's
		// 0 × 0.6/0.3 = 0.
		name: "an owner without process beside a process of unknown memory",
		d: Device{Utilization: some(0.6), Claims: two, ProcessOwner: map[uint32]int{20: 1},
			Processes: []Process{{PID: 20, Utilization: some(0.3)}}},
		want: []usageWant{{some(0), some(0)}, {nil, some(0.6)}},
	}, {
		// A Gaudi (hl-smi: no process's memory or utilization) held by pod
		// a, which runs nothing on it, and opened by a login shell's
		// process 30 (no owner): a uses 0 memory; its utilization is not
		// the device's, since the shell may have used it (found by
		// probe19-oracle D1: a's 0 was left out).
		name: "Gaudi: sole owner without process, a host process beside it",
		d: Device{Utilization: some(0.7), Claims: []attribution.Claim{{Owner: a, Share: 1}}, OwnersAllocated: true,
			ProcessOwner: map[uint32]int{30: attribution.Unattributed}, Processes: []Process{{PID: 30}}},
		want: []usageWant{{some(0), nil}, none},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { checkUsage(t, tc.d.Usage(), tc.want) })
	}
}

// usageWant is one party's expected memory and utilization, nil for absent.
type usageWant struct{ mem, util *float64 }

func some(v float64) *float64 { return &v }

// checkUsage compares each party's memory and utilization with want, to
// 1e-12, and that a reading absent from want is absent.
func checkUsage(t *testing.T, got []Usage, want []usageWant) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d parties, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		name := "unattributed"
		if got[i].Owner != nil {
			name = got[i].Owner.Pod
		}
		for _, c := range []struct {
			what string
			g, w *float64
		}{{"memory", got[i].MemoryUsed, w.mem}, {"utilization", got[i].Utilization, w.util}} {
			switch {
			case (c.g == nil) != (c.w == nil):
				t.Errorf("party %d (%s) %s = %v, want %v", i, name, c.what, deref(c.g), deref(c.w))
			case c.g != nil && math.Abs(*c.g-*c.w) > 1e-12:
				t.Errorf("party %d (%s) %s = %v, want %v", i, name, c.what, *c.g, *c.w)
			}
		}
	}
}

// deref shows a nil reading as such in a failure message.
func deref(v *float64) any {
	if v == nil {
		return "absent"
	}
	return *v
}

// TestUsageExactWhereSamplesAddUp: where the processes' samples add up to
// the device's reading, each owner's part is exactly its samples' sum,
// not a float a hair off it (0.7 × 0.4 / 0.7 = 0.39999999999999997 was
// served for a job whose one process read 0.4).
func TestUsageExactWhereSamplesAddUp(t *testing.T) {
	a := attribution.Owner{Kind: attribution.Slurm, SlurmJobID: "10"}
	d := Device{
		Utilization:  some(0.7),
		Claims:       []attribution.Claim{{Owner: a, Share: 1}},
		ProcessOwner: map[uint32]int{1: 0, 2: attribution.Unattributed},
		Processes:    []Process{{PID: 1, Utilization: some(0.4)}, {PID: 2, Utilization: some(0.3)}},
	}
	got := d.Usage()
	if len(got) != 2 || got[0].Utilization == nil || *got[0].Utilization != 0.4 || got[1].Utilization == nil || *got[1].Utilization != 0.3 {
		t.Fatalf("parts %+v, want exactly 0.4 (job 10) and 0.3 (unattributed)", got)
	}
}

// TestUsageOfAMomentsReading: where the device's utilization is a reading
// of the moment (AMD's gpu_busy_percent) and its processes' are over the
// window (fdinfo engine time between scrapes), the parts are the
// processes' own window values, scaled down only where they add up to
// more than the whole device; the moment's reading, multiplied by the
// window's shares, gave a pod steady at 0.5 0.85 when a second pod had
// just started (found by probing: probe13-otlpscrape D1, D2).
func TestUsageOfAMomentsReading(t *testing.T) {
	a := attribution.Owner{Kind: attribution.Kubernetes, Namespace: "ml", Pod: "a", Container: "main"}
	b := attribution.Owner{Kind: attribution.Kubernetes, Namespace: "ml", Pod: "b", Container: "main"}
	two := []attribution.Claim{{Owner: a, Share: 0.5}, {Owner: b, Share: 0.5}}
	owners := map[uint32]int{10: 0, 20: 1}
	for _, tc := range []struct {
		name     string
		now      float64
		u10, u20 *float64
		want     [2]*float64
	}{
		// The probe's window: a 0.5 all along, b 0.4 for its last 0.5 s
		// of 5.2 s (0.4 × 0.5 / 5.2 = 0.038461538461538464); the GPU
		// reads 0.9 now. 0.5 + 0.0385 <= 1: each its own.
		{"parts within the device", 0.9, some(0.5), some(0.038461538461538464), [2]*float64{some(0.5), some(0.038461538461538464)}},
		// Rings busy at once: 0.8 + 0.6 = 1.4 of a device that cannot be
		// more than 1: a 0.8/1.4 = 0.5714285714285714, b 0.6/1.4 =
		// 0.4285714285714286.
		{"parts beyond the device", 0.5, some(0.8), some(0.6), [2]*float64{some(0.8 / 1.4), some(0.6 / 1.4)}},
		// Idle now, busy in the window: the window's parts.
		{"idle now", 0, some(0.3), some(0.2), [2]*float64{some(0.3), some(0.2)}},
		// A process of unknown utilization (a KFD one): no split, not 0
		// for every part because the moment's reading is 0.
		{"a process unknown, idle now", 0, some(0.3), nil, [2]*float64{nil, nil}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Device{Utilization: some(tc.now), UtilizationOfTheMoment: true, Claims: two, ProcessOwner: owners,
				Processes: []Process{{PID: 10, Utilization: tc.u10}, {PID: 20, Utilization: tc.u20}}}
			got := d.Usage()
			for i, w := range tc.want {
				g := got[i].Utilization
				if (g == nil) != (w == nil) || (g != nil && math.Abs(*g-*w) > 1e-15) {
					t.Errorf("part %d: %v, want %v", i, deref(g), deref(w))
				}
			}
		})
	}
	// A sole owner has the device's value, as its device series say.
	d := Device{Utilization: some(0.9), UtilizationOfTheMoment: true, Claims: two[:1], ProcessOwner: map[uint32]int{10: 0}, OwnersAllocated: true,
		Processes: []Process{{PID: 10, Utilization: some(0.5)}}}
	if got := d.Usage(); *got[0].Utilization != 0.9 {
		t.Errorf("sole owner %v, want the device's 0.9", *got[0].Utilization)
	}
	// Idle all window, each process known at 0 (or none at all on an
	// allocated GPU): each part is 0, whatever the moment's reading, not
	// left out, which took the owners' series and their idle cost away
	// (review13 R13-1).
	for _, now := range []float64{0, 0.4} {
		for name, d := range map[string]Device{
			"idle processes": {Utilization: some(now), UtilizationOfTheMoment: true, Claims: two, ProcessOwner: owners,
				Processes: []Process{{PID: 10, Utilization: some(0)}, {PID: 20, Utilization: some(0)}}},
			"no process": {Utilization: some(now), UtilizationOfTheMoment: true, Claims: two, OwnersAllocated: true},
		} {
			for i, u := range d.Usage() {
				if u.Utilization == nil || *u.Utilization != 0 {
					t.Errorf("%s, the device at %v now: part %d %v, want 0", name, now, i, deref(u.Utilization))
				}
			}
		}
	}
}
