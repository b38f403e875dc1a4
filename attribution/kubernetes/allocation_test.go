package kubernetes

import (
	"errors"
	"strconv"
	"testing"
)

func mustMatcher(t *testing.T) *ResourceMatcher {
	t.Helper()
	m, err := NewResourceMatcher(DefaultResourcePatterns...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func replicaIDs(base string, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = base + "::" + strconv.Itoa(i)
	}
	return ids
}

func TestAllocations(t *testing.T) {
	const exclusive = "GPU-2b149611-0000-4000-8000-000000000000"
	pods := []PodResources{
		{Namespace: "inference", Name: "llm", Containers: []ContainerResources{
			{Name: "vllm", Devices: []ResourceDevices{{Resource: "nvidia.com/gpu", IDs: []string{exclusive}}}},
			{Name: "sidecar"},
		}},
		// Three holders of a GPU that is advertised as four replicas.
		{Namespace: "nb", Name: "a", Containers: []ContainerResources{
			{Name: "c", Devices: []ResourceDevices{{Resource: "nvidia.com/gpu.shared", IDs: []string{gpuUUID + "::0"}}}}}},
		{Namespace: "nb", Name: "b", Containers: []ContainerResources{
			{Name: "c", Devices: []ResourceDevices{{Resource: "nvidia.com/gpu.shared", IDs: []string{gpuUUID + "::1"}}}}}},
		{Namespace: "nb", Name: "c", Containers: []ContainerResources{
			{Name: "c", Devices: []ResourceDevices{
				{Resource: "nvidia.com/gpu.shared", IDs: []string{gpuUUID + "::2"}},
				// Not an accelerator resource: ignored, whatever its IDs.
				{Resource: "rdma/hca", IDs: []string{"mlx5_0"}},
			}}}},
		{Namespace: "ml", Name: "mig", Containers: []ContainerResources{
			{Name: "c", Devices: []ResourceDevices{{Resource: "nvidia.com/mig-2g.20gb", IDs: []string{migUUID}}}}}},
	}
	allocatable := []ResourceDevices{
		{Resource: "nvidia.com/gpu", IDs: []string{exclusive}},
		{Resource: "nvidia.com/gpu.shared", IDs: replicaIDs(gpuUUID, 4)},
		{Resource: "nvidia.com/mig-2g.20gb", IDs: []string{migUUID}},
		{Resource: "rdma/hca", IDs: []string{"mlx5_0", "mlx5_1"}},
	}
	got, errs := Allocations(pods, allocatable, mustMatcher(t))
	if len(errs) != 0 {
		t.Fatalf("errors: %v", errs)
	}
	type row struct {
		ns, pod, ctr, id string
		replicas         int
		share            float64
	}
	want := []row{
		{"inference", "llm", "vllm", exclusive, 1, 1},
		{"nb", "a", "c", gpuUUID + "::0", 4, 0.25},
		{"nb", "b", "c", gpuUUID + "::1", 4, 0.25},
		{"nb", "c", "c", gpuUUID + "::2", 4, 0.25},
		{"ml", "mig", "c", migUUID, 1, 1},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d allocations, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		a := got[i]
		share, ok := a.Share()
		if a.Namespace != w.ns || a.Pod != w.pod || a.Container != w.ctr || a.DeviceID != w.id ||
			a.Replicas != w.replicas || !ok || share != w.share {
			t.Errorf("allocation %d = %+v (share %v, %v), want %+v", i, a, share, ok, w)
		}
	}
	if got[1].Device.Key() != got[3].Device.Key() {
		t.Errorf("replicas of one GPU have different keys: %q, %q", got[1].Device.Key(), got[3].Device.Key())
	}
}

// A shared device the kubelet no longer lists as allocatable (its plugin
// reported it unhealthy) has an unknown share: no made-up fraction.
func TestAllocationsSharedDeviceNotAllocatable(t *testing.T) {
	pods := []PodResources{{Namespace: "nb", Name: "a", Containers: []ContainerResources{
		{Name: "c", Devices: []ResourceDevices{{Resource: "nvidia.com/gpu", IDs: []string{gpuUUID + "::3"}}}}}}}
	for name, allocatable := range map[string][]ResourceDevices{
		"allocatable unreadable":   nil,
		"device missing from it":   {{Resource: "nvidia.com/gpu", IDs: replicaIDs("GPU-2b149611-0000-4000-8000-000000000009", 2)}},
		"only unmatched resources": {{Resource: "example.com/gpu", IDs: replicaIDs(gpuUUID, 2)}},
	} {
		t.Run(name, func(t *testing.T) {
			got, errs := Allocations(pods, allocatable, mustMatcher(t))
			if len(errs) != 0 || len(got) != 1 {
				t.Fatalf("got %+v, %v", got, errs)
			}
			if share, ok := got[0].Share(); ok || got[0].Replicas != 0 {
				t.Errorf("share = %v, %v with Replicas %d; want unknown", share, ok, got[0].Replicas)
			}
		})
	}
}

func TestAllocationsReportsUnknownIDsOnce(t *testing.T) {
	pods := []PodResources{
		{Namespace: "a", Name: "p", Containers: []ContainerResources{
			{Name: "c", Devices: []ResourceDevices{{Resource: "nvidia.com/gpu", IDs: []string{"weird-id", gpuUUID}}}}}},
		{Namespace: "a", Name: "q", Containers: []ContainerResources{
			{Name: "c", Devices: []ResourceDevices{{Resource: "nvidia.com/gpu", IDs: []string{"weird-id"}}}}}},
	}
	allocatable := []ResourceDevices{{Resource: "nvidia.com/gpu", IDs: []string{"weird-id", gpuUUID}}}
	got, errs := Allocations(pods, allocatable, mustMatcher(t))
	if len(got) != 1 || got[0].DeviceID != gpuUUID {
		t.Errorf("allocations = %+v, want only %s", got, gpuUUID)
	}
	if len(errs) != 1 {
		t.Fatalf("errors = %v, want one", errs)
	}
	var idErr *DeviceIDError
	if !errors.As(errs[0], &idErr) || idErr.ID != "weird-id" || idErr.Resource != "nvidia.com/gpu" {
		t.Errorf("error = %v", errs[0])
	}
}
