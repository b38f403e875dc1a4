package attribution

import (
	"slices"
	"testing"
)

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
			i, amb := c.of(&tc.proc)
			if i != tc.index || amb != tc.ambiguous {
				t.Errorf("of(%+v) = %d, %v; want %d, %v", tc.proc, i, amb, tc.index, tc.ambiguous)
			}
		})
	}
	if len(c.list) != 6 {
		t.Errorf("%d claims, want the 4 given and 2 added", len(c.list))
	}
}

// TestOwnerLabelsAndKey: unknown values are left out of both, and the key
// is the kind and the values joined by 0xff, so that owners that differ in
// one value never share a key.
func TestOwnerLabelsAndKey(t *testing.T) {
	for _, c := range []struct {
		owner         Owner
		names, values []string
		key           string
	}{
		{Owner{Kind: Kubernetes, Namespace: "ml", Pod: "train-0", Workload: "train", WorkloadKind: "Job"},
			[]string{"namespace", "pod", "workload", "workload_kind"}, []string{"ml", "train-0", "train", "Job"},
			string(Kubernetes) + "\xffml\xfftrain-0\xfftrain\xffJob"},
		{Owner{Kind: Slurm, SlurmJobID: "42", SlurmUser: "ana", SlurmQOS: "normal", SlurmJobName: "not a label"},
			[]string{"slurm_job_id", "slurm_user", "slurm_qos"}, []string{"42", "ana", "normal"},
			string(Slurm) + "\xff42\xffana\xffnormal"},
		{Owner{Kind: Process, Unit: "a.service", User: "root", Command: "python3"},
			[]string{"unit", "user", "command"}, []string{"a.service", "root", "python3"},
			string(Process) + "\xffa.service\xffroot\xffpython3"},
		{Owner{Kind: Process}, []string{}, []string{}, string(Process)},
	} {
		names, values := c.owner.Labels()
		if !slices.Equal(names, c.names) || !slices.Equal(values, c.values) {
			t.Errorf("%+v: Labels() = %q, %q; want %q, %q", c.owner, names, values, c.names, c.values)
		}
		if key := c.owner.Key(); key != c.key {
			t.Errorf("%+v: Key() = %q, want %q", c.owner, key, c.key)
		}
	}
}
