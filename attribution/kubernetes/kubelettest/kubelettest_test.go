package kubelettest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
	podsv1alpha1 "k8s.io/kubelet/pkg/apis/pods/v1alpha1"
)

func TestLoadFixtures(t *testing.T) {
	paths, err := filepath.Glob("../../../fixtures/kubelet/*.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	for _, p := range paths {
		fx, err := LoadFixture(p)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		if fx.Node == "" || len(fx.Pods) == 0 || len(fx.Allocatable) == 0 {
			t.Errorf("%s: node %q, %d pods, %d allocatable resources", p, fx.Node, len(fx.Pods), len(fx.Allocatable))
		}
	}
}

func TestLoadFixtureRejects(t *testing.T) {
	for name, body := range map[string]string{
		"unknown field":  "node: n\npods:\n  - {namespace: a, name: b, uid: c, labls: {x: y}}\n",
		"missing uid":    "node: n\npods:\n  - {namespace: a, name: b}\n",
		"duplicate name": "node: n\npods:\n  - {namespace: a, name: b, uid: c}\n  - {namespace: a, name: b, uid: d}\n",
		"duplicate uid":  "node: n\npods:\n  - {namespace: a, name: b, uid: c}\n  - {namespace: a, name: e, uid: c}\n",
		"unnamed ctr":    "node: n\npods:\n  - {namespace: a, name: b, uid: c, containers: [{}]}\n",
		"unnamed claim":  "node: n\npods:\n  - {namespace: a, name: b, uid: c, containers: [{name: x, claims: [{namespace: a}]}]}\n",
		"claim device":   "node: n\npods:\n  - {namespace: a, name: b, uid: c, containers: [{name: x, claims: [{namespace: a, name: c, devices: [{driver: d}]}]}]}\n",
		"not yaml":       "node: [\n",
		"unknown phase":  "node: n\npods:\n  - {namespace: a, name: b, uid: c, phase: Done}\n",
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "fx.yaml")
			if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := LoadFixture(path); err == nil {
				t.Error("accepted")
			}
		})
	}
}

func conn(t *testing.T, socket string) *grpc.ClientConn {
	t.Helper()
	c, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

var testFixture = &Fixture{
	Node: "n1",
	Pods: []Pod{{
		Namespace: "ml", Name: "p0", UID: "00000000-0000-4000-8000-000000000001",
		Labels:          map[string]string{"team": "a"},
		OwnerReferences: []OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "p", Controller: true}},
		Containers: []Container{{Name: "main", Devices: []Devices{
			{Resource: "nvidia.com/gpu", IDs: []string{"GPU-a", "GPU-b"}},
		}}},
	}},
	Allocatable: []Devices{{Resource: "nvidia.com/gpu", IDs: []string{"GPU-a", "GPU-b", "GPU-c"}}},
}

func TestPodResourcesService(t *testing.T) {
	s := Start(t, testFixture)
	api := podresourcesv1.NewPodResourcesListerClient(conn(t, s.PodResourcesSocket()))
	ctx := context.Background()

	list, err := api.List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.PodResources) != 1 || list.PodResources[0].Name != "p0" ||
		strings.Join(list.PodResources[0].Containers[0].Devices[0].DeviceIds, ",") != "GPU-a,GPU-b" {
		t.Errorf("List = %v", list)
	}

	get, err := api.Get(ctx, &podresourcesv1.GetPodResourcesRequest{PodNamespace: "ml", PodName: "p0"})
	if err != nil || get.PodResources.Containers[0].Name != "main" {
		t.Errorf("Get = %v, %v", get, err)
	}
	if _, err := api.Get(ctx, &podresourcesv1.GetPodResourcesRequest{PodNamespace: "ml", PodName: "nope"}); status.Code(err) != codes.NotFound {
		t.Errorf("Get of a missing pod: %v", err)
	}

	alloc, err := api.GetAllocatableResources(ctx, &podresourcesv1.AllocatableResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// One entry per device, as the kubelet sends them.
	if len(alloc.Devices) != 3 || alloc.Devices[2].DeviceIds[0] != "GPU-c" {
		t.Errorf("GetAllocatableResources = %v", alloc)
	}
	s.SetAllocatable(nil)
	if alloc, err := api.GetAllocatableResources(ctx, &podresourcesv1.AllocatableResourcesRequest{}); err != nil || len(alloc.Devices) != 0 {
		t.Errorf("after SetAllocatable(nil): %v, %v", alloc, err)
	}
}

func TestPodsService(t *testing.T) {
	s := Start(t, testFixture)
	api := podsv1alpha1.NewPodsClient(conn(t, s.PodsAPISocket()))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	list, err := api.ListPods(ctx, &podsv1alpha1.ListPodsRequest{})
	if err != nil || len(list.Pods) != 1 {
		t.Fatalf("ListPods = %v, %v", list, err)
	}
	var pod corev1.Pod
	if err := pod.Unmarshal(list.Pods[0]); err != nil {
		t.Fatal(err)
	}
	limit := pod.Spec.Containers[0].Resources.Limits["nvidia.com/gpu"]
	if pod.Name != "p0" || pod.Spec.NodeName != "n1" || pod.Labels["team"] != "a" ||
		pod.OwnerReferences[0].Kind != "StatefulSet" || limit.Value() != 2 {
		t.Errorf("pod = %+v", pod)
	}
	if _, err := api.GetPod(ctx, &podsv1alpha1.GetPodRequest{PodUID: "00000000-0000-4000-8000-000000000001"}); err != nil {
		t.Errorf("GetPod: %v", err)
	}
	if _, err := api.GetPod(ctx, &podsv1alpha1.GetPodRequest{PodUID: "nope"}); status.Code(err) != codes.NotFound {
		t.Errorf("GetPod of a missing pod: %v", err)
	}

	stream, err := api.WatchPods(ctx, &podsv1alpha1.WatchPodsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	next := func() (podsv1alpha1.EventType, string) {
		t.Helper()
		ev, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		var p corev1.Pod
		if len(ev.Pod) > 0 {
			if err := p.Unmarshal(ev.Pod); err != nil {
				t.Fatal(err)
			}
		}
		return ev.Type, p.Name + "/" + string(p.UID)
	}
	expect := func(wantType podsv1alpha1.EventType, wantPod string) {
		t.Helper()
		if typ, pod := next(); typ != wantType || pod != wantPod {
			t.Errorf("event %v %s, want %v %s", typ, pod, wantType, wantPod)
		}
	}
	expect(podsv1alpha1.EventType_ADDED, "p0/00000000-0000-4000-8000-000000000001")
	expect(podsv1alpha1.EventType_INITIAL_SYNC_COMPLETE, "/")

	p1 := Pod{Namespace: "ml", Name: "p1", UID: "00000000-0000-4000-8000-000000000002"}
	if err := s.SetPod(p1); err != nil {
		t.Fatal(err)
	}
	expect(podsv1alpha1.EventType_ADDED, "p1/00000000-0000-4000-8000-000000000002")
	p1.Labels = map[string]string{"x": "y"}
	if err := s.SetPod(p1); err != nil {
		t.Fatal(err)
	}
	expect(podsv1alpha1.EventType_MODIFIED, "p1/00000000-0000-4000-8000-000000000002")
	p1.UID = "00000000-0000-4000-8000-000000000003"
	if err := s.SetPod(p1); err != nil {
		t.Fatal(err)
	}
	expect(podsv1alpha1.EventType_DELETED, "p1/00000000-0000-4000-8000-000000000002")
	expect(podsv1alpha1.EventType_ADDED, "p1/00000000-0000-4000-8000-000000000003")
	if !s.RemovePod("ml", "p1") || s.RemovePod("ml", "p1") {
		t.Error("RemovePod did not report existence")
	}
	expect(podsv1alpha1.EventType_DELETED, "p1/00000000-0000-4000-8000-000000000003")

	if err := s.SetPod(Pod{Namespace: "ml", Name: "other", UID: "00000000-0000-4000-8000-000000000001"}); err == nil {
		t.Error("SetPod accepted a UID that another pod has")
	}
	s.Stop()
	if _, err := stream.Recv(); err == nil {
		t.Error("watch survived Stop")
	}
}

func TestStopRestartHang(t *testing.T) {
	s := Start(t, testFixture, WithoutPodsAPI())
	if _, err := os.Stat(s.PodsAPISocket()); !os.IsNotExist(err) {
		t.Errorf("pods API socket exists WithoutPodsAPI: %v", err)
	}
	api := podresourcesv1.NewPodResourcesListerClient(conn(t, s.PodResourcesSocket()))

	s.SetHang(true)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	_, err := api.List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	cancel()
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("hanging List: %v", err)
	}
	s.SetHang(false)

	s.Stop()
	if _, err := os.Stat(s.PodResourcesSocket()); !os.IsNotExist(err) {
		t.Errorf("socket still there after Stop: %v", err)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	// A new connection: the old one may not have noticed the restart yet.
	api = podresourcesv1.NewPodResourcesListerClient(conn(t, s.PodResourcesSocket()))
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := api.List(ctx, &podresourcesv1.ListPodResourcesRequest{}); err != nil {
		t.Errorf("List after Restart: %v", err)
	}
}

func TestNewRejectsLongSocketDir(t *testing.T) {
	if _, err := New("/tmp/"+strings.Repeat("d", 120), testFixture); err == nil {
		t.Error("accepted a socket path too long for a unix socket")
	}
}
