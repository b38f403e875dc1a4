package attribution

import (
	"context"
	"errors"
	"testing"

	"github.com/xpu-exporter/xpu_exporter/attribution/kubernetes"
)

// staleMetadata is a metadata source whose watch has failed: what it
// knows may be out of date.
type staleMetadata struct{ fakeMetadata }

func (staleMetadata) Healthy() error { return errors.New("watch failed") }

// TestProcessOfPodNoLongerListed: a process whose cgroup names a pod the
// kubelet and the metadata source no longer list (the pod ended or was
// force-deleted while its process still runs) belongs to none of its
// device's owners, and is shown apart as one (Unattributed) rather than
// left unresolved, where a sole owner would be given the device's whole
// usage (found by probing). Where the process might still be an owner's,
// it stays unresolved.
func TestProcessOfPodNoLongerListed(t *testing.T) {
	const (
		uidOld   = "0e000000-0000-4000-8000-0000000000a0" // ended: listed by nobody
		uidFresh = "0e000000-0000-4000-8000-0000000000b0"
		uidTS    = "0e000000-0000-4000-8000-0000000000b1"
	)
	known := fakeMetadata{
		uidFresh: {UID: uidFresh, Namespace: "ml", Name: "fresh"},
		uidTS:    {UID: uidTS, Namespace: "ml", Name: "ts"},
	}
	// One process of the ended pod on each device but the GPU in MIG mode;
	// pid 200 is the live pod ts's own.
	ended := map[string]uint32{gpuA: 100, gpuB: 101, mig1: 102, gpuIdle: 103}
	devices := []Device{
		{UUID: gpuA, Vendor: "nvidia", Index: 0, MIGIndex: -1, GRESIndex: -1, PIDs: []uint32{100}},                  // whole, held by fresh
		{UUID: gpuB, Vendor: "nvidia", Index: 1, MIGIndex: -1, GRESIndex: -1, PIDs: []uint32{200, 101}},             // ::0 ts, ::1 fresh
		{UUID: gpuM, Vendor: "nvidia", Index: 2, MIGIndex: -1, GRESIndex: -1},                                       // in MIG mode
		{UUID: mig1, Vendor: "nvidia", Index: 2, ParentUUID: gpuM, MIGIndex: 0, GRESIndex: -1, PIDs: []uint32{102}}, // held by fresh
		{UUID: gpuIdle, Vendor: "nvidia", Index: 3, MIGIndex: -1, GRESIndex: -1, PIDs: []uint32{103}},               // held by nobody
	}
	freshHolds := kubernetes.PodResources{Namespace: "ml", Name: "fresh", Containers: []kubernetes.ContainerResources{{
		Name: "c", Devices: []kubernetes.ResourceDevices{
			{Resource: "nvidia.com/gpu", IDs: []string{gpuA, gpuB + "::1"}},
			{Resource: "nvidia.com/mig-1g.10gb", IDs: []string{mig1}},
		},
	}}}
	kubelet := &fakeKubelet{
		pods: []kubernetes.PodResources{freshHolds, pod("ml", "ts", "c", "nvidia.com/gpu", gpuB+"::0")},
		allocatable: []kubernetes.ResourceDevices{
			{Resource: "nvidia.com/gpu", IDs: []string{gpuA, gpuB + "::0", gpuB + "::1", gpuIdle}},
			{Resource: "nvidia.com/mig-1g.10gb", IDs: []string{mig1}},
		},
	}
	procs := map[uint32]string{200: podCgroup(uidTS)}
	for _, pid := range ended {
		procs[pid] = podCgroup(uidOld)
	}
	const unresolved = -2 // want the PID absent from Ownership.Process
	all := func(i int) map[string]int { return map[string]int{gpuA: i, gpuB: i, mig1: i, gpuIdle: i} }
	for _, c := range []struct {
		name     string
		kubelet  Kubelet
		metadata kubernetes.MetadataSource
		// want is what Ownership.Process holds for the ended pod's process
		// on each device.
		want map[string]int
	}{
		{
			// Every holder's UID is known and is another pod's; the idle
			// GPU has no holder at all.
			name: "kubelet answers, metadata current", kubelet: kubelet, metadata: known,
			want: all(Unattributed),
		},
		{
			// fresh's UID is not known: the process may be fresh's. The
			// idle GPU has no pod holder it could be.
			name: "holder not yet in the metadata", kubelet: kubelet, metadata: fakeMetadata{uidTS: known[uidTS]},
			want: map[string]int{gpuA: unresolved, gpuB: unresolved, mig1: unresolved, gpuIdle: Unattributed},
		},
		{
			// A stale cache may give fresh a UID of the past.
			name: "metadata not current", kubelet: kubelet, metadata: staleMetadata{known},
			want: map[string]int{gpuA: unresolved, gpuB: unresolved, mig1: unresolved, gpuIdle: Unattributed},
		},
		{
			name: "no metadata source", kubelet: kubelet,
			want: map[string]int{gpuA: unresolved, gpuB: unresolved, mig1: unresolved, gpuIdle: Unattributed},
		},
		{
			// Nothing is known of what pods hold: the process waits.
			name: "kubelet down", kubelet: &fakeKubelet{err: errors.New("connection refused")}, metadata: known,
			want: all(unresolved),
		},
		{
			// Without Kubernetes attribution a pod process is no one's
			// stray: no source says which pods hold what.
			name: "no kubelet", metadata: known,
			want: all(unresolved),
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := New(Config{Kubelet: c.kubelet, Metadata: c.metadata, Procfs: procfs(t, procs)}).Resolve(context.Background(), devices)
			for uuid, pid := range ended {
				own := res.Devices[uuid]
				got, ok := own.Process[pid]
				if !ok {
					got = unresolved
				}
				if got != c.want[uuid] {
					t.Errorf("%s: ended pod's pid %d → %d, want %d (claims %+v)", uuid, pid, got, c.want[uuid], own.Claims)
				}
				if _, ok := own.Strays[pid]; ok {
					t.Errorf("%s: ended pod's pid %d has an owner of its own: %+v", uuid, pid, own.Strays[pid])
				}
			}
			// The live pod's process keeps its claim whenever it is known.
			if c.metadata != nil && c.kubelet == kubelet {
				if i, ok := res.Devices[gpuB].Process[200]; !ok || res.Devices[gpuB].Claims[i].Owner.Pod != "ts" {
					t.Errorf("ts's own process → %d, %v; want ts's claim", i, ok)
				}
			}
		})
	}
}
