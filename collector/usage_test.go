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
	f := func(v float64) *float64 { return &v }
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
	type want struct{ mem, util *float64 }
	none := want{}
	tests := []struct {
		name string
		d    Device
		want []want
	}{{
		// Device 0.6 busy; processes' shares 0.2 + 0.1 (a) and 0.15 (b),
		// 0.45 in all: a 0.6 × 0.3/0.45 = 0.4, b 0.6 × 0.15/0.45 = 0.2.
		// Memory: a 2 + 1 = 3 GiB, b 4 GiB.
		name: "split by the processes' utilization",
		d:    Device{Utilization: f(0.6), Claims: two, ProcessOwner: owners, Processes: procs(f(0.2), f(0.1), f(0.15))},
		want: []want{{f(3 * gib), f(0.4)}, {f(4 * gib), f(0.2)}},
	}, {
		// A process without samples (an AMD client first seen this
		// scrape): dividing 0.6 between the others would hand b all of it.
		name: "a process without utilization",
		d:    Device{Utilization: f(0.6), Claims: two, ProcessOwner: owners, Processes: procs(f(0.2), f(0.1), nil)},
		want: []want{{f(3 * gib), nil}, {f(4 * gib), nil}},
	}, {
		// The vendor could not list every process: a's and b's memory
		// would be what was seen of them, 0 for an owner whose processes
		// were all missed.
		name: "a partial process list",
		d:    Device{Utilization: f(0.6), Claims: two, ProcessOwner: owners, Processes: procs(f(0.2), f(0.1), f(0.15)), ProcessesPartial: true},
		want: []want{none, none},
	}, {
		name: "no process seen, list partial",
		d:    Device{Utilization: f(0.6), Claims: two, ProcessesPartial: true},
		want: []want{none, none},
	}, {
		// Nothing listed and nothing failed: allocated but idle shares,
		// 0 bytes each; 0.6 busy with no process samples cannot be split.
		name: "no process, list whole",
		d:    Device{Utilization: f(0.6), Claims: two},
		want: []want{{f(0), nil}, {f(0), nil}},
	}, {
		// A sole owner has the device's utilization whatever its
		// processes say; its memory is its processes', unknown here.
		name: "sole owner, list partial",
		d:    Device{Utilization: f(0.6), Claims: two[:1], ProcessesPartial: true},
		want: []want{{nil, f(0.6)}},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.d.Usage()
			if len(got) != len(tc.want) {
				t.Fatalf("%d parties, want %d: %+v", len(got), len(tc.want), got)
			}
			for i, w := range tc.want {
				check := func(what string, g, w *float64) {
					t.Helper()
					switch {
					case (g == nil) != (w == nil):
						t.Errorf("party %d %s = %v, want %v", i, what, deref(g), deref(w))
					case g != nil && math.Abs(*g-*w) > 1e-12:
						t.Errorf("party %d %s = %v, want %v", i, what, *g, *w)
					}
				}
				check("memory", got[i].MemoryUsed, w.mem)
				check("utilization", got[i].Utilization, w.util)
			}
		})
	}
}

// deref shows a nil reading as such in a failure message.
func deref(v *float64) any {
	if v == nil {
		return "absent"
	}
	return *v
}
