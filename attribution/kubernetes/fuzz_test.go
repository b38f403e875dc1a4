package kubernetes

import (
	"errors"
	"path/filepath"
	"regexp"
	"testing"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
	podsv1alpha1 "k8s.io/kubelet/pkg/apis/pods/v1alpha1"

	"github.com/xpu-exporter/xpu_exporter/attribution/kubernetes/kubelettest"
)

// kubeletFixtures are the recorded nodes whose kubelet answers seed the
// fuzz targets.
var kubeletFixtures = []string{"h100-node.yaml", "amd-mi300x-node.yaml", "gaudi2-node.yaml"}

func loadFixtures(f *testing.F) []*kubelettest.Fixture {
	var out []*kubelettest.Fixture
	for _, name := range kubeletFixtures {
		fx, err := kubelettest.LoadFixture(filepath.Join(fixtureDir, name))
		if err != nil {
			f.Fatal(err)
		}
		out = append(out, fx)
	}
	return out
}

// FuzzPodResources decodes hostile List and GetAllocatableResources
// responses as gRPC would (protobuf) and turns them into allocations: every
// device ID the kubelet sent is kept, and every allocation of a matched
// resource is either the normalised device with its replica count or an
// error.
func FuzzPodResources(f *testing.F) {
	for _, fx := range loadFixtures(f) {
		list := &podresourcesv1.ListPodResourcesResponse{}
		for _, p := range fx.Pods {
			pr := &podresourcesv1.PodResources{Namespace: p.Namespace, Name: p.Name}
			for _, c := range p.Containers {
				cr := &podresourcesv1.ContainerResources{Name: c.Name}
				for _, d := range c.Devices {
					cr.Devices = append(cr.Devices, &podresourcesv1.ContainerDevices{ResourceName: d.Resource, DeviceIds: d.IDs})
				}
				pr.Containers = append(pr.Containers, cr)
			}
			list.PodResources = append(list.PodResources, pr)
		}
		alloc := &podresourcesv1.AllocatableResourcesResponse{}
		for _, d := range fx.Allocatable {
			for _, id := range d.IDs {
				// The kubelet sends one entry per allocatable device.
				alloc.Devices = append(alloc.Devices, &podresourcesv1.ContainerDevices{ResourceName: d.Resource, DeviceIds: []string{id}})
			}
		}
		lb, err := proto.Marshal(list)
		if err != nil {
			f.Fatal(err)
		}
		ab, err := proto.Marshal(alloc)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(lb, ab)
	}
	matcher, err := NewResourceMatcher(DefaultResourcePatterns...)
	if err != nil {
		f.Fatal(err)
	}

	f.Fuzz(func(t *testing.T, listBytes, allocBytes []byte) {
		var list podresourcesv1.ListPodResourcesResponse
		var alloc podresourcesv1.AllocatableResourcesResponse
		if proto.Unmarshal(listBytes, &list) != nil || proto.Unmarshal(allocBytes, &alloc) != nil {
			return // the gRPC call fails; nothing is converted
		}
		pods := convertPods(list.GetPodResources())
		allocatable := convertDevices(alloc.GetDevices())

		sent, kept := 0, 0
		for _, d := range alloc.GetDevices() {
			sent += len(d.GetDeviceIds())
		}
		seen := map[string]bool{}
		for _, rd := range allocatable {
			if seen[rd.Resource] {
				t.Fatalf("resource %q listed twice after merging", rd.Resource)
			}
			seen[rd.Resource] = true
			kept += len(rd.IDs)
		}
		if sent != kept {
			t.Fatalf("%d allocatable IDs sent, %d kept", sent, kept)
		}

		// Replicas of each shared device, counted here from the
		// allocatable IDs: distinct replica numbers per device key.
		replicas := map[string]map[int]bool{}
		for _, rd := range allocatable {
			if !matcher.Match(rd.Resource) {
				continue
			}
			for _, id := range rd.IDs {
				if ref, err := NormalizeDeviceID(rd.Resource, id); err == nil && ref.Shared {
					if replicas[ref.Key()] == nil {
						replicas[ref.Key()] = map[int]bool{}
					}
					replicas[ref.Key()][ref.Replica] = true
				}
			}
		}

		allocs, errs := Allocations(pods, allocatable, matcher)
		matched := 0
		for _, p := range pods {
			for _, c := range p.Containers {
				for _, rd := range c.Devices {
					if matcher.Match(rd.Resource) {
						matched += len(rd.IDs)
					}
				}
			}
		}
		if len(allocs) > matched || len(allocs) < matched && len(errs) == 0 {
			t.Fatalf("%d allocations and %d errors for %d matched IDs", len(allocs), len(errs), matched)
		}
		for _, err := range errs {
			var de *DeviceIDError
			if !errors.As(err, &de) || !errors.Is(err, ErrUnknownDeviceID) {
				t.Fatalf("error %v is not a *DeviceIDError", err)
			}
		}
		for _, a := range allocs {
			ref, err := NormalizeDeviceID(a.Resource, a.DeviceID)
			if err != nil || ref != a.Device || !matcher.Match(a.Resource) {
				t.Fatalf("allocation %+v: device %+v, %v", a, ref, err)
			}
			want := 1
			if ref.Shared {
				want = len(replicas[ref.Key()])
			}
			share, known := a.Share()
			if a.Replicas != want || known != (want > 0) || known && share != 1/float64(want) {
				t.Fatalf("allocation %+v: replicas %d share %v/%v, want %d", a, a.Replicas, share, known, want)
			}
		}
	})
}

// FuzzPodsAPIEvent applies hostile Pods API events (a v1.Pod in protobuf,
// as the kubelet sends it) to an empty cache. An added pod with a UID is
// found by UID and by name with the metadata it came with; deleting it
// leaves the cache empty. What decodes is decodePod's to say, checked
// against k8s.io/api by FuzzDecodePod.
func FuzzPodsAPIEvent(f *testing.F) {
	for _, fx := range loadFixtures(f) {
		for _, p := range fx.Pods {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
				Namespace: p.Namespace, Name: p.Name, UID: types.UID(p.UID), Labels: p.Labels, Annotations: p.Annotations,
			}}
			for _, o := range p.OwnerReferences {
				controller := o.Controller
				pod.OwnerReferences = append(pod.OwnerReferences, metav1.OwnerReference{APIVersion: o.APIVersion, Kind: o.Kind, Name: o.Name, Controller: &controller})
			}
			for _, c := range p.Containers {
				pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: c.Name, Image: c.Image})
				pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, corev1.ContainerStatus{Name: c.Name, ContainerID: "containerd://" + kubelettest.ContainerID(p.UID, c.Name)})
			}
			b, err := pod.Marshal()
			if err != nil {
				f.Fatal(err)
			}
			f.Add(int32(podsv1alpha1.EventType_ADDED), b)
		}
	}
	f.Add(int32(podsv1alpha1.EventType_INITIAL_SYNC_COMPLETE), []byte{})
	f.Add(int32(99), []byte{0x0a, 0x02, 0x32, 0x00})

	f.Fuzz(func(t *testing.T, typ int32, raw []byte) {
		s := &PodsAPISource{podCache: newPodCache()}
		ev := &podsv1alpha1.WatchPodsEvent{Type: podsv1alpha1.EventType(typ), Pod: raw}
		err := s.apply(ev, 1)
		pod, decodeErr := decodePod(raw)
		decoded := decodeErr == nil
		uid := pod.meta.UID
		added := ev.GetType() == podsv1alpha1.EventType_ADDED || ev.GetType() == podsv1alpha1.EventType_MODIFIED
		if !added || !decoded || uid == "" {
			if err == nil && ev.GetType() != podsv1alpha1.EventType_DELETED && ev.GetType() != podsv1alpha1.EventType_INITIAL_SYNC_COMPLETE && decoded && uid != "" {
				t.Fatalf("event type %d accepted", typ)
			}
			if s.len() != 0 {
				t.Fatalf("%d pods cached from event %v (decoded %v, uid %q)", s.len(), ev.GetType(), decoded, uid)
			}
			return
		}
		if err != nil {
			t.Fatalf("a decodable pod was refused: %v", err)
		}
		ns, name := pod.meta.Namespace, pod.meta.Name
		m, ok := s.PodByUID(uid)
		if !ok || m.Namespace != ns || m.Name != name || m.UID != uid || len(m.Containers) != len(pod.containers) {
			t.Fatalf("PodByUID(%q) = %+v, %v", uid, m, ok)
		}
		if m.WorkloadKind == "" || m.Workload == "" && name != "" {
			t.Fatalf("pod %s/%s has workload %q of kind %q", ns, name, m.Workload, m.WorkloadKind)
		}
		if byName, ok := s.Pod(ns, name); !ok || byName.UID != uid {
			t.Fatalf("Pod(%q, %q) = %+v, %v", ns, name, byName, ok)
		}
		if err := s.apply(&podsv1alpha1.WatchPodsEvent{Type: podsv1alpha1.EventType_DELETED, Pod: raw}, 2); err != nil {
			t.Fatal(err)
		}
		if _, ok := s.PodByUID(uid); ok || s.len() != 0 || len(s.byName) != 0 || len(s.alias) != 0 {
			t.Fatalf("pod %s still cached after its deletion: %d pods, %d names, %d aliases", uid, s.len(), len(s.byName), len(s.alias))
		}
	})
}

// promLabelName is a valid Prometheus label name (the classic character set,
// which every Prometheus version accepts).
var promLabelName = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// FuzzLabelAllowList checks that whatever pod label keys are allowed, the
// label names built from them are valid, distinct and stable.
func FuzzLabelAllowList(f *testing.F) {
	f.Add("app.kubernetes.io/name", "app_kubernetes_io/name", "team")
	f.Add("topologyKey", "topology-key", "ÄÖ/ü")
	f.Fuzz(func(t *testing.T, a, b, c string) {
		l, err := NewLabelAllowList(a, b, c)
		if err != nil {
			return
		}
		names := map[string]bool{}
		for _, n := range l.Names() {
			if !promLabelName.MatchString(n) || names[n] {
				t.Fatalf("label names %q: %q invalid or repeated", l.Names(), n)
			}
			names[n] = true
		}
		for _, k := range []string{a, b, c} {
			if s := SanitizeLabelName(k); SanitizeLabelName(s) != s {
				t.Fatalf("SanitizeLabelName(%q) = %q is not stable", k, s)
			}
		}
	})
}

// FuzzResolveWorkload checks that a pod always gets a workload kind, and a
// workload name whenever it has a name.
func FuzzResolveWorkload(f *testing.F) {
	f.Add("llm-serve-7d9f8b6c5d-x2k4q", "apps/v1", "ReplicaSet", "llm-serve-7d9f8b6c5d", true, "7d9f8b6c5d", "")
	f.Add("nightly-eval-29480160-5sx8k", "batch/v1", "Job", "nightly-eval-29480160", true, "", "")
	f.Add("w-0", "apps/v1", "StatefulSet", "w", false, "", "lws")
	f.Add("p", "", "", "", false, "", "")
	f.Fuzz(func(t *testing.T, pod, apiVersion, kind, name string, controller bool, hash, setName string) {
		labels := map[string]string{
			labelPodTemplateHash: hash, labelRolloutsPodTemplateHash: hash,
			labelJobSetName: setName, labelLeaderWorkerSetName: setName,
		}
		w, k := ResolveWorkload(pod, labels, []Owner{{APIVersion: apiVersion, Kind: kind, Name: name, Controller: controller}})
		if k == "" || w == "" && pod != "" {
			t.Fatalf("ResolveWorkload(%q, owner %s %s/%s) = %q, %q", pod, apiVersion, kind, name, w, k)
		}
	})
}
