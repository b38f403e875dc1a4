package attribution

import "testing"

// The claim index answers as a walk over the claims would: a process with
// its container takes that container's claim; without it, its pod's only
// claim, or none when the pod holds the device through several containers;
// other owners take their first equal claim.
func TestClaimsOf(t *testing.T) {
	pod := func(ns, name, container string) Owner {
		return Owner{Kind: Kubernetes, Namespace: ns, Pod: name, Container: container}
	}
	unit := Owner{Kind: Process, Unit: "train.service", User: "alice", Command: "python"}
	c := newClaims([]Claim{
		{Owner: pod("ml", "a", "main")},    // 0
		{Owner: pod("ml", "b", "main")},    // 1
		{Owner: pod("ml", "b", "sidecar")}, // 2
		{Owner: pod("web", "a", "main")},   // 3: another namespace's pod a
	})
	c.add(Claim{Owner: unit}) // 4
	c.add(Claim{Owner: unit}) // 5: a second equal owner is never chosen
	for _, tc := range []struct {
		name      string
		proc      Owner
		index     int
		ambiguous bool
	}{
		{"container known", pod("ml", "b", "sidecar"), 2, false},
		{"container unknown, one claim", pod("ml", "a", ""), 0, false},
		{"container unknown, two claims", pod("ml", "b", ""), -1, true},
		{"container not among the claims", pod("ml", "b", "init"), -1, false},
		{"same pod name, other namespace", pod("web", "a", ""), 3, false},
		{"pod without a claim", pod("ml", "c", ""), -1, false},
		{"unit", unit, 4, false},
		{"other unit", Owner{Kind: Process, Unit: "other.service"}, -1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			i, amb := c.of(tc.proc)
			if i != tc.index || amb != tc.ambiguous {
				t.Errorf("of(%+v) = %d, %v; want %d, %v", tc.proc, i, amb, tc.index, tc.ambiguous)
			}
		})
	}
	if len(c.list) != 6 {
		t.Errorf("%d claims, want the 4 given and 2 added", len(c.list))
	}
}
