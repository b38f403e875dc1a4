package kubelettest

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// corePod is the Pod the fake kubelet built with k8s.io/api before it
// wrote the encoding itself (Pod.protobuf), kept as the reference it must
// still match.
func corePod(p Pod, node string) *corev1.Pod {
	pod := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   p.Namespace,
			Name:        p.Name,
			UID:         types.UID(p.UID),
			Labels:      p.Labels,
			Annotations: p.Annotations,
		},
		Spec:   corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: p.IP},
	}
	if p.Phase != "" {
		pod.Status.Phase = corev1.PodPhase(p.Phase)
	}
	for _, o := range p.OwnerReferences {
		controller := o.Controller
		pod.OwnerReferences = append(pod.OwnerReferences, metav1.OwnerReference{
			APIVersion: o.APIVersion,
			Kind:       o.Kind,
			Name:       o.Name,
			UID:        types.UID(o.UID),
			Controller: &controller,
		})
	}
	for _, c := range p.Containers {
		status := corev1.ContainerStatus{
			Name: c.Name, Ready: true, ContainerID: "containerd://" + ContainerID(p.UID, c.Name),
		}
		ctr := corev1.Container{Name: c.Name, Image: c.Image}
		if ctr.Image == "" {
			ctr.Image = "registry.example/" + c.Name + ":latest"
		}
		for _, port := range c.Ports {
			ctr.Ports = append(ctr.Ports, corev1.ContainerPort{ContainerPort: port, Protocol: corev1.ProtocolTCP})
		}
		for _, d := range c.Devices {
			if ctr.Resources.Limits == nil {
				ctr.Resources.Limits = corev1.ResourceList{}
			}
			q := ctr.Resources.Limits[corev1.ResourceName(d.Resource)]
			q.Add(*resource.NewQuantity(int64(len(d.IDs)), resource.DecimalSI))
			ctr.Resources.Limits[corev1.ResourceName(d.Resource)] = q
		}
		if c.Ephemeral {
			pod.Spec.EphemeralContainers = append(pod.Spec.EphemeralContainers, corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon(ctr)})
			pod.Status.EphemeralContainerStatuses = append(pod.Status.EphemeralContainerStatuses, status)
			continue
		}
		if c.Sidecar {
			always := corev1.ContainerRestartPolicyAlways
			ctr.RestartPolicy = &always
			pod.Spec.InitContainers = append(pod.Spec.InitContainers, ctr)
			pod.Status.InitContainerStatuses = append(pod.Status.InitContainerStatuses, status)
			continue
		}
		pod.Spec.Containers = append(pod.Spec.Containers, ctr)
		pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, status)
	}
	return pod
}

func ids(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "GPU-" + strings.Repeat("x", i%7)
	}
	return out
}

// TestPodProtobufMatchesCorePod checks that a client decoding the fake's
// pods with k8s.io/api gets the Pod it got when the fake built them with
// k8s.io/api: the same Go value as the old encoding decodes to, and, but
// for the TypeMeta that no Pod encoding carries, the Pod corePod built.
func TestPodProtobufMatchesCorePod(t *testing.T) {
	pods := map[string]Pod{
		"bare": {Namespace: "a", Name: "b", UID: "c"},
		"everything": {
			Namespace: "inference", Name: "llm-0", UID: "3f6c2a1e-8b4d-4e2f-9a7c-1d5e8f0b2c61",
			Labels:      map[string]string{"team": "search", "app": "llm", "": "empty key"},
			Annotations: map[string]string{"prometheus.io/port": "8000", "empty": ""},
			OwnerReferences: []OwnerReference{
				{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "llm-7d9f", UID: "u1", Controller: true},
				{APIVersion: "v1", Kind: "Node", Name: "n1"},
			},
			IP:    "10.1.2.3",
			Phase: "Succeeded",
			Containers: []Container{
				{Name: "proxy", Sidecar: true, Ports: []int32{15001}, Devices: []Devices{{Resource: "nvidia.com/gpu", IDs: ids(1)}}},
				{Name: "init-weights", Sidecar: true},
				{Name: "server", Image: "vllm/vllm-openai:v0.9", Ports: []int32{8000, 8080, -1, 0},
					Devices: []Devices{
						{Resource: "nvidia.com/gpu", IDs: ids(2)},
						{Resource: "amd.com/gpu", IDs: ids(3)},
						{Resource: "nvidia.com/gpu", IDs: ids(1)},
					}},
				{Name: "many", Devices: []Devices{{Resource: "a/thousand", IDs: ids(1000)}, {Resource: "b/fifteen-hundred", IDs: ids(1500)}, {Resource: "c/none"}}},
				{Name: "debugger", Ephemeral: true, Image: "busybox"},
			},
		},
		"pending": {Namespace: "a", Name: "p", UID: "u", Phase: "Pending", Containers: []Container{{Name: "c"}}},
	}
	paths, err := filepath.Glob("../../../fixtures/kubelet/*.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	for _, path := range paths {
		fx, err := LoadFixture(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range fx.Pods {
			pods[filepath.Base(path)+"/"+p.Namespace+"/"+p.Name] = p
		}
	}
	for name, p := range pods {
		t.Run(name, func(t *testing.T) {
			ref := corePod(p, "node-1")
			old, err := ref.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			var want, got corev1.Pod
			if err := want.Unmarshal(old); err != nil {
				t.Fatal(err)
			}
			if err := got.Unmarshal(p.protobuf("node-1")); err != nil {
				t.Fatalf("decoding the fake's pod: %v", err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("decoded pod differs from the old encoding's:\n got %+v\nwant %+v", got, want)
			}
			ref.TypeMeta = metav1.TypeMeta{}
			if !equality.Semantic.DeepEqual(&got, ref) {
				t.Errorf("decoded pod differs from the one corePod built:\n got %+v\nwant %+v", got, *ref)
			}
		})
	}
}

func TestDecimalSI(t *testing.T) {
	for n, want := range map[int]string{
		0: "0", 1: "1", 8: "8", 999: "999", 1000: "1k", 1500: "1500", 2000: "2k",
		10000: "10k", 1001000: "1001k", 3000000: "3M", 1000000000: "1G",
	} {
		if got := decimalSI(n); got != want {
			t.Errorf("decimalSI(%d) = %q, want %q", n, got, want)
		}
		if q := resource.NewQuantity(int64(n), resource.DecimalSI); q.String() != want {
			t.Errorf("expected value %q for %d is not Quantity's %q", want, n, q.String())
		}
	}
}
