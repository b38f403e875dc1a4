package kubernetes

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// corePodFields is what PodsAPISource read of a Pod that k8s.io/api
// decoded, before decodePod: the reference of the differential tests.
// Empty lists are nil, as decodePod leaves them.
func corePodFields(pod *corev1.Pod) podFields {
	out := podFields{
		meta: objectMeta{
			Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID),
			Labels: pod.Labels, Annotations: pod.Annotations,
			Created: pod.CreationTimestamp.Time,
		},
		phase: string(pod.Status.Phase),
		podIP: pod.Status.PodIP,
	}
	for _, o := range pod.OwnerReferences {
		out.meta.Owners = append(out.meta.Owners, Owner{
			APIVersion: o.APIVersion, Kind: o.Kind, Name: o.Name,
			Controller: o.Controller != nil && *o.Controller,
		})
	}
	st := pod.Status
	ids := map[string]string{}
	for _, statuses := range [][]corev1.ContainerStatus{st.InitContainerStatuses, st.ContainerStatuses, st.EphemeralContainerStatuses} {
		for _, st := range statuses {
			if _, id, ok := strings.Cut(st.ContainerID, "://"); ok {
				ids[st.Name] = id
			}
		}
	}
	containers := slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers)
	for _, e := range pod.Spec.EphemeralContainers {
		containers = append(containers, corev1.Container(e.EphemeralContainerCommon))
	}
	for _, c := range containers {
		cm := ContainerMeta{Name: c.Name, Image: c.Image, ID: ids[c.Name]}
		for _, p := range c.Ports {
			cm.Ports = append(cm.Ports, p.ContainerPort)
		}
		out.containers = append(out.containers, cm)
	}
	return out
}

func marshal(t testing.TB, pod *corev1.Pod) []byte {
	t.Helper()
	b, err := pod.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// fullPod sets every field decodePod reads and many it does not.
func fullPod() *corev1.Pod {
	yes, no := true, false
	always := corev1.ContainerRestartPolicyAlways
	grace := int64(30)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:                       "llm-serve-7d9f8b6c5d-x2k4q",
			GenerateName:               "llm-serve-7d9f8b6c5d-",
			Namespace:                  "inference",
			UID:                        "3f6c2a1e-8b4d-4e2f-9a7c-1d5e8f0b2c61",
			ResourceVersion:            "4242",
			Generation:                 3,
			CreationTimestamp:          metav1.NewTime(time.Unix(1700000000, 999)),
			DeletionTimestamp:          &metav1.Time{Time: time.Unix(1700000100, 0)},
			DeletionGracePeriodSeconds: &grace,
			Labels:                     map[string]string{"app": "llm", "team": "search", "empty": ""},
			Annotations:                map[string]string{"prometheus.io/port": "8000"},
			OwnerReferences: []metav1.OwnerReference{
				{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "llm-serve-7d9f8b6c5d", UID: "rs-uid", Controller: &yes, BlockOwnerDeletion: &yes},
				{APIVersion: "v1", Kind: "Node", Name: "node-1", Controller: &no},
				{APIVersion: "example.com/v1", Kind: "Thing", Name: "t"},
			},
			Finalizers: []string{"example.com/keep"},
			ManagedFields: []metav1.ManagedFieldsEntry{{
				Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1",
				Time: &metav1.Time{Time: time.Unix(1700000000, 0)}, FieldsType: "FieldsV1",
				FieldsV1: metav1.NewFieldsV1(`{"f:metadata":{"f:labels":{}}}`),
			}},
		},
		Spec: corev1.PodSpec{
			Volumes: []corev1.Volume{{Name: "shm", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}}},
			InitContainers: []corev1.Container{
				{Name: "proxy", Image: "envoy:1.30", RestartPolicy: &always, Ports: []corev1.ContainerPort{{ContainerPort: 15001, Protocol: corev1.ProtocolTCP}}},
				{Name: "fetch-weights", Image: "fetch:1", Command: []string{"fetch", "--all"}},
			},
			Containers: []corev1.Container{
				{
					Name: "server", Image: "vllm/vllm-openai:v0.9",
					Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8000, Protocol: corev1.ProtocolTCP}, {ContainerPort: 8080, HostPort: 80}},
					Env:   []corev1.EnvVar{{Name: "MODEL", Value: "llama"}},
					Resources: corev1.ResourceRequirements{
						Limits:   corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("64Gi")},
						Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")},
					},
					LivenessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/health", Port: intstr.FromInt32(8000)}}},
					VolumeMounts:  []corev1.VolumeMount{{Name: "shm", MountPath: "/dev/shm"}},
				},
				{Name: "metrics", Image: "exporter:1"},
			},
			EphemeralContainers: []corev1.EphemeralContainer{{
				EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debugger", Image: "busybox", Ports: []corev1.ContainerPort{{ContainerPort: 9999}}},
				TargetContainerName:      "server",
			}},
			NodeName:     "node-1",
			NodeSelector: map[string]string{"gpu": "h100"},
			Tolerations:  []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
		},
		Status: corev1.PodStatus{
			Phase:      corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(time.Unix(1700000050, 0))}},
			HostIP:     "192.168.0.5",
			PodIP:      "10.1.2.3",
			PodIPs:     []corev1.PodIP{{IP: "10.1.2.3"}, {IP: "fd00::3"}},
			StartTime:  &metav1.Time{Time: time.Unix(1700000001, 0)},
			QOSClass:   corev1.PodQOSBurstable,
			InitContainerStatuses: []corev1.ContainerStatus{
				{Name: "proxy", ContainerID: "containerd://aaa", Ready: true, Started: &yes, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(time.Unix(1700000002, 0))}}},
				{Name: "fetch-weights", ContainerID: "containerd://bbb", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}}},
			},
			ContainerStatuses: []corev1.ContainerStatus{
				{Name: "server", ContainerID: "cri-o://ccc", Ready: true, RestartCount: 2, Image: "vllm/vllm-openai:v0.9", ImageID: "sha256:1234",
					AllocatedResources: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("2")}},
				{Name: "metrics", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}},
			},
			EphemeralContainerStatuses: []corev1.ContainerStatus{{Name: "debugger", ContainerID: "containerd://ddd"}},
		},
	}
}

type decodeCase struct {
	name string
	pod  *corev1.Pod
	// then is a second Pod whose encoding follows the first's, which
	// protobuf merges into it (encoding guide, "Last One Wins").
	then *corev1.Pod
	want podFields
}

func decodeCases() []decodeCase {
	return []decodeCase{
		{
			name: "every field read, and many not",
			pod:  fullPod(),
			want: podFields{
				meta: objectMeta{
					Namespace: "inference", Name: "llm-serve-7d9f8b6c5d-x2k4q", UID: "3f6c2a1e-8b4d-4e2f-9a7c-1d5e8f0b2c61",
					Labels:      map[string]string{"app": "llm", "team": "search", "empty": ""},
					Annotations: map[string]string{"prometheus.io/port": "8000"},
					Owners: []Owner{
						{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "llm-serve-7d9f8b6c5d", Controller: true},
						{APIVersion: "v1", Kind: "Node", Name: "node-1"},
						{APIVersion: "example.com/v1", Kind: "Thing", Name: "t"},
					},
					// Seconds alone, as apimachinery's Time.Unmarshal.
					Created: time.Unix(1700000000, 0),
				},
				phase: "Running",
				podIP: "10.1.2.3",
				containers: []ContainerMeta{
					{Name: "proxy", Image: "envoy:1.30", Ports: []int32{15001}, ID: "aaa"},
					{Name: "fetch-weights", Image: "fetch:1", ID: "bbb"},
					{Name: "server", Image: "vllm/vllm-openai:v0.9", Ports: []int32{8000, 8080}, ID: "ccc"},
					{Name: "metrics", Image: "exporter:1"},
					{Name: "debugger", Image: "busybox", Ports: []int32{9999}, ID: "ddd"},
				},
			},
		},
		{
			name: "empty pod",
			pod:  &corev1.Pod{},
			want: podFields{},
		},
		{
			name: "ended pod without containers",
			pod: &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Namespace: "batch", Name: "job-x", UID: "u1", CreationTimestamp: metav1.NewTime(time.Unix(1, 0))},
				Status:     corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted"},
			},
			want: podFields{meta: objectMeta{Namespace: "batch", Name: "job-x", UID: "u1", Created: time.Unix(1, 0)}, phase: "Failed"},
		},
		{
			name: "a phase core/v1 does not define is kept",
			pod:  &corev1.Pod{Status: corev1.PodStatus{Phase: "Hibernating"}},
			want: podFields{phase: "Hibernating"},
		},
		{
			// containerMeta's map: the last status of a name with a
			// "<runtime>://" ID wins, across the three lists in order.
			name: "container IDs",
			pod: &corev1.Pod{
				Spec: corev1.PodSpec{
					InitContainers:      []corev1.Container{{Name: "x"}},
					Containers:          []corev1.Container{{Name: "x"}, {Name: "no-scheme"}, {Name: "empty-id"}, {Name: "no-status"}},
					EphemeralContainers: []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "e"}}},
				},
				Status: corev1.PodStatus{
					InitContainerStatuses: []corev1.ContainerStatus{{Name: "x", ContainerID: "containerd://1"}, {Name: "empty-id", ContainerID: "containerd://9"}},
					ContainerStatuses: []corev1.ContainerStatus{
						{Name: "x", ContainerID: "containerd://2"}, {Name: "no-scheme", ContainerID: "abcdef"},
						{Name: "empty-id", ContainerID: "containerd://"}, {Name: "not-in-spec", ContainerID: "containerd://3"},
					},
					EphemeralContainerStatuses: []corev1.ContainerStatus{{Name: "x", ContainerID: "docker"}, {Name: "e", ContainerID: "cri-o://a://b"}},
				},
			},
			want: podFields{containers: []ContainerMeta{
				{Name: "x", ID: "2"}, {Name: "x", ID: "2"}, {Name: "no-scheme"}, {Name: "empty-id"}, {Name: "no-status"}, {Name: "e", ID: "a://b"},
			}},
		},
		{
			// k8s.io/api writes every non-pointer field, empty or not: the
			// second pod's empty creationTimestamp resets the first's.
			name: "two encodings merged",
			pod: &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{
					Namespace: "a", Name: "first", UID: "u1", CreationTimestamp: metav1.NewTime(time.Unix(5, 0)),
					Labels:          map[string]string{"team": "a", "app": "x"},
					OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "n1"}},
				},
				Spec:   corev1.PodSpec{InitContainers: []corev1.Container{{Name: "i1"}}, Containers: []corev1.Container{{Name: "c1"}}},
				Status: corev1.PodStatus{Phase: corev1.PodPending, PodIP: "10.0.0.1", ContainerStatuses: []corev1.ContainerStatus{{Name: "c2", ContainerID: "containerd://2"}}},
			},
			then: &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{
					Namespace: "b", Name: "second", UID: "u2",
					Labels:          map[string]string{"team": "b", "new": "y"},
					Annotations:     map[string]string{"k": "v"},
					OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "s"}},
				},
				Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "c2", Image: "img"}}},
				Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.2", InitContainerStatuses: []corev1.ContainerStatus{{Name: "i1", ContainerID: "containerd://1"}}},
			},
			want: podFields{
				meta: objectMeta{
					Namespace: "b", Name: "second", UID: "u2",
					Labels:      map[string]string{"team": "b", "app": "x", "new": "y"},
					Annotations: map[string]string{"k": "v"},
					Owners:      []Owner{{APIVersion: "v1", Kind: "Node", Name: "n1"}, {APIVersion: "apps/v1", Kind: "StatefulSet", Name: "s"}},
				},
				phase: "Running",
				podIP: "10.0.0.2",
				containers: []ContainerMeta{
					{Name: "i1", ID: "1"}, {Name: "c1"}, {Name: "c2", Image: "img", ID: "2"},
				},
			},
		},
	}
}

func (c decodeCase) encode(t testing.TB) []byte {
	b := marshal(t, c.pod)
	if c.then != nil {
		b = append(b, marshal(t, c.then)...)
	}
	return b
}

func TestDecodePod(t *testing.T) {
	for _, tt := range decodeCases() {
		t.Run(tt.name, func(t *testing.T) {
			b := tt.encode(t)
			got, err := decodePod(b)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("decodePod =\n %+v\nwant\n %+v", got, tt.want)
			}
			// The expected values are k8s.io/api's too.
			var pod corev1.Pod
			if err := pod.Unmarshal(b); err != nil {
				t.Fatal(err)
			}
			if ref := corePodFields(&pod); !reflect.DeepEqual(ref, tt.want) {
				t.Errorf("k8s.io/api decodes\n %+v\nwant\n %+v", ref, tt.want)
			}
		})
	}
}

// Hand-written encodings: a field is a tag and its value (encoding guide,
// "Message Structure").
func fieldBytes(num protowire.Number, b []byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), b)
}

func fieldVarint(num protowire.Number, v uint64) []byte {
	return protowire.AppendVarint(protowire.AppendTag(nil, num, protowire.VarintType), v)
}

func fieldFixed32(num protowire.Number) []byte {
	return protowire.AppendFixed32(protowire.AppendTag(nil, num, protowire.Fixed32Type), 7)
}

func fieldFixed64(num protowire.Number) []byte {
	return protowire.AppendFixed64(protowire.AppendTag(nil, num, protowire.Fixed64Type), 7)
}

// group is a group field (the deprecated wire types 3 and 4) holding fields.
func group(num protowire.Number, fields ...[]byte) []byte {
	b := protowire.AppendTag(nil, num, protowire.StartGroupType)
	b = append(b, slices.Concat(fields...)...)
	return protowire.AppendTag(b, num, protowire.EndGroupType)
}

func msg(num protowire.Number, fields ...[]byte) []byte {
	return fieldBytes(num, slices.Concat(fields...))
}

func str(num protowire.Number, s string) []byte { return fieldBytes(num, []byte(s)) }

// unknown is a field of every wire type that no message decodePod reads
// declares.
func unknown() []byte {
	return slices.Concat(fieldVarint(900, 1), fieldFixed32(901), fieldFixed64(902), str(903, "x"),
		group(904, fieldVarint(1, 2), str(2, "y"), group(3, fieldFixed32(4))))
}

func TestDecodePodSkipsFieldsItDoesNotRead(t *testing.T) {
	// Unknown fields at every level, known ones that decodePod does not
	// read with a wire type k8s.io/api refuses (spec.volumes as a varint,
	// ContainerPort.hostPort as bytes), and a creationTimestamp with nanos,
	// which apimachinery's Time.Unmarshal drops.
	b := slices.Concat(
		unknown(),
		msg(1, unknown(), str(1, "p"), unknown(), str(3, "ns"),
			msg(8, fieldVarint(1, 60), fieldVarint(2, 999), unknown()),
			msg(11, unknown(), str(1, "k"), str(2, "v"), unknown()),
			msg(13, unknown(), str(1, "Job"), fieldVarint(6, 1))),
		msg(2, fieldVarint(1, 5), unknown(),
			msg(2, str(1, "c"), unknown(), msg(6, str(2, "hostPort as bytes"), fieldVarint(3, 80), unknown())),
			msg(34, unknown(), msg(1, str(1, "e"), unknown()))),
		msg(3, unknown(), str(1, "Running"), str(6, "10.0.0.1"),
			msg(8, unknown(), str(1, "c"), str(8, "containerd://id"))),
		unknown(),
	)
	got, err := decodePod(b)
	if err != nil {
		t.Fatal(err)
	}
	want := podFields{
		meta:  objectMeta{Namespace: "ns", Name: "p", Labels: map[string]string{"k": "v"}, Owners: []Owner{{Kind: "Job", Controller: true}}, Created: time.Unix(60, 0)},
		phase: "Running", podIP: "10.0.0.1",
		containers: []ContainerMeta{{Name: "c", Ports: []int32{80}, ID: "id"}, {Name: "e"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("decodePod =\n %+v\nwant\n %+v", got, want)
	}
}

func TestDecodePodWrongWireType(t *testing.T) {
	tests := []struct {
		name string
		b    []byte
		// k8s.io/api does not check the wire type of a map entry's key
		// and value (generated.pb.go, ObjectMeta.Unmarshal): it reads
		// any as a string; decodePod refuses them.
		core1Accepts bool
	}{
		{name: "metadata", b: fieldVarint(1, 5)},
		{name: "spec", b: fieldFixed64(2)},
		{name: "status", b: fieldFixed32(3)},
		{name: "metadata.name", b: msg(1, fieldVarint(1, 1))},
		{name: "metadata.namespace", b: msg(1, fieldFixed32(3))},
		{name: "metadata.uid", b: msg(1, fieldFixed64(5))},
		{name: "metadata.creationTimestamp", b: msg(1, fieldVarint(8, 1))},
		{name: "creationTimestamp.seconds", b: msg(1, msg(8, str(1, "1")))},
		{name: "creationTimestamp.nanos", b: msg(1, msg(8, fieldFixed32(2)))},
		{name: "metadata.labels", b: msg(1, fieldVarint(11, 1))},
		{name: "labels key", b: msg(1, msg(11, fieldVarint(1, 0))), core1Accepts: true},
		{name: "annotations value", b: msg(1, msg(12, str(1, "k"), fieldVarint(2, 0))), core1Accepts: true},
		{name: "metadata.ownerReferences", b: msg(1, fieldFixed32(13))},
		{name: "ownerReferences.kind", b: msg(1, msg(13, fieldVarint(1, 1)))},
		{name: "ownerReferences.name", b: msg(1, msg(13, fieldVarint(3, 1)))},
		{name: "ownerReferences.apiVersion", b: msg(1, msg(13, fieldVarint(5, 1)))},
		{name: "ownerReferences.controller", b: msg(1, msg(13, str(6, "")))},
		{name: "spec.containers", b: msg(2, fieldVarint(2, 1))},
		{name: "spec.initContainers", b: msg(2, fieldVarint(20, 1))},
		{name: "spec.ephemeralContainers", b: msg(2, fieldVarint(34, 1))},
		{name: "ephemeralContainerCommon", b: msg(2, msg(34, fieldVarint(1, 1)))},
		{name: "ephemeralContainerCommon.name", b: msg(2, msg(34, msg(1, fieldVarint(1, 1))))},
		{name: "container.name", b: msg(2, msg(2, fieldVarint(1, 1)))},
		{name: "container.image", b: msg(2, msg(20, fieldFixed32(2)))},
		{name: "container.ports", b: msg(2, msg(2, fieldVarint(6, 80)))},
		{name: "ports.containerPort", b: msg(2, msg(2, msg(6, str(3, "80"))))},
		{name: "status.phase", b: msg(3, fieldVarint(1, 1))},
		{name: "status.podIP", b: msg(3, fieldFixed64(6))},
		{name: "status.containerStatuses", b: msg(3, fieldVarint(8, 1))},
		{name: "status.initContainerStatuses", b: msg(3, fieldVarint(10, 1))},
		{name: "status.ephemeralContainerStatuses", b: msg(3, fieldVarint(13, 1))},
		{name: "containerStatus.name", b: msg(3, msg(8, fieldVarint(1, 1)))},
		{name: "containerStatus.containerID", b: msg(3, msg(13, fieldFixed32(8)))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodePod(tt.b)
			if !errors.Is(err, errWireType) {
				t.Errorf("decodePod(% x) = %v, want a wire type error", tt.b, err)
			}
			var pod corev1.Pod
			if coreErr := pod.Unmarshal(tt.b); (coreErr == nil) != tt.core1Accepts {
				t.Errorf("k8s.io/api: %v", coreErr)
			}
		})
	}
}

// protowireErr is protowire's error for what b starts with.
func protowireErr(b []byte) error {
	_, _, n := protowire.ConsumeField(b)
	return protowire.ParseError(n)
}

var (
	errFieldNumber = protowireErr([]byte{0x02, 0x00})
	errOverflow    = protowireErr(slices.Repeat([]byte{0xff}, 11))
	errEndGroup    = protowireErr(protowire.AppendTag(nil, 1, protowire.EndGroupType))
	errReserved    = protowireErr(protowire.AppendTag(nil, 1, 6))
	errRecursion   = protowireErr(slices.Repeat(protowire.AppendTag(nil, 1, protowire.StartGroupType), 2*protowire.DefaultRecursionLimit))
	errTruncated   = protowireErr([]byte{0x0a, 0x01})
)

func TestDecodePodMalformed(t *testing.T) {
	errs := []error{errFieldNumber, errOverflow, errEndGroup, errReserved, errRecursion, errTruncated}
	for i, err := range errs {
		if err == nil || slices.Contains(errs[:i], err) {
			t.Fatalf("protowire's errors %v are not distinct", errs)
		}
	}
	overlong := slices.Concat(slices.Repeat([]byte{0x80}, 9), []byte{0x02})
	tests := []struct {
		name string
		b    []byte
		want error
		// k8s.io/api's generated code reads varints and skips groups
		// more loosely than protowire: it keeps the low 64 bits of an
		// overlong varint and the low 32 of a field number, and matches
		// no end group marker to its start.
		core1Accepts bool
	}{
		{name: "field number 0", b: []byte{0x02, 0x00}, want: errFieldNumber},
		{name: "field number 0 in metadata", b: msg(1, []byte{0x02, 0x00}), want: errFieldNumber},
		{name: "reserved wire type", b: msg(2, protowire.AppendTag(nil, 900, 6)), want: errReserved},
		{name: "end group alone", b: msg(3, protowire.AppendTag(nil, 900, protowire.EndGroupType)), want: errEndGroup},
		{name: "mismatched end group", b: slices.Concat(protowire.AppendTag(nil, 900, protowire.StartGroupType), protowire.AppendTag(nil, 901, protowire.EndGroupType)), want: errEndGroup, core1Accepts: true},
		{name: "unterminated group", b: msg(1, protowire.AppendTag(nil, 900, protowire.StartGroupType)), want: errTruncated},
		{name: "groups too deep", b: slices.Repeat(protowire.AppendTag(nil, 900, protowire.StartGroupType), 20000), want: errRecursion, core1Accepts: false},
		{name: "length past the end", b: []byte{0x0a, 0x05, 0x0a, 0x00}, want: errTruncated},
		{name: "string past its message", b: msg(1, []byte{0x0a, 0x05, 'a'}), want: errTruncated},
		{name: "varint truncated", b: msg(1, msg(13, []byte{0x30, 0x80})), want: errTruncated},
		{name: "tag truncated", b: msg(3, []byte{0x80}), want: errTruncated},
		{name: "varint overflow", b: msg(2, msg(2, msg(6, []byte{0x18}, overlong))), want: errOverflow, core1Accepts: true},
		{name: "field number overflows int32", b: slices.Concat(protowire.AppendVarint(nil, 1<<35|protowire.EncodeTag(1, protowire.BytesType)), []byte{0}), want: errFieldNumber, core1Accepts: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodePod(tt.b)
			if !errors.Is(err, tt.want) {
				t.Errorf("decodePod(% x) = %v, want %v", tt.b, err, tt.want)
			}
			var pod corev1.Pod
			if coreErr := pod.Unmarshal(tt.b); (coreErr == nil) != tt.core1Accepts {
				t.Errorf("k8s.io/api: %v", coreErr)
			}
		})
	}
}

// stricterThanCore1 says whether err is decodePod refusing what k8s.io/api
// accepts, where decodePod is stricter on purpose: the wire types and
// bounds of map entries, which k8s.io/api does not check, and the varints,
// field numbers and groups that protowire reads strictly
// (TestDecodePodWrongWireType, TestDecodePodMalformed).
func stricterThanCore1(err error) bool {
	if s := err.Error(); strings.Contains(s, "labels: ") || strings.Contains(s, "annotations: ") {
		return true
	}
	for _, e := range []error{errOverflow, errFieldNumber, errEndGroup, errRecursion} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// checkAgainstCore1 decodes b with decodePod and with k8s.io/api: where
// k8s.io/api accepts it, decodePod reads the same fields or refuses it in
// one of the ways it is stricter.
func checkAgainstCore1(t *testing.T, b []byte) (accepted bool) {
	t.Helper()
	got, err := decodePod(b)
	var pod corev1.Pod
	if pod.Unmarshal(b) != nil {
		return err == nil
	}
	if err != nil {
		if !stricterThanCore1(err) {
			t.Fatalf("k8s.io/api decodes % x, decodePod: %v", b, err)
		}
		return false
	}
	if want := corePodFields(&pod); !reflect.DeepEqual(got, want) {
		t.Fatalf("decodePod(% x) =\n %+v\nk8s.io/api read\n %+v", b, got, want)
	}
	return true
}

// TestDecodePodTruncated cuts a pod at every byte: decodePod refuses it,
// or, cut between two of the Pod's fields, reads the fields before the cut
// as k8s.io/api does.
func TestDecodePodTruncated(t *testing.T) {
	b := marshal(t, fullPod())
	var prefixes []int
	for i := range len(b) + 1 {
		if checkAgainstCore1(t, b[:i]) {
			prefixes = append(prefixes, i)
		}
	}
	// Whole: nothing, metadata, metadata and spec, the pod.
	if len(prefixes) != 4 || prefixes[0] != 0 || prefixes[3] != len(b) {
		t.Errorf("prefixes accepted at %v of %d bytes, want 0, after metadata, after spec and %d", prefixes, len(b), len(b))
	}
}

// TestDecodePodCorrupted overwrites each byte of a pod in turn with values
// that change tags, wire types and lengths.
func TestDecodePodCorrupted(t *testing.T) {
	b := marshal(t, fullPod())
	c := make([]byte, len(b))
	for i := range b {
		for _, v := range []byte{0x00, 0x01, 0x07, 0x7f, 0x80, 0xff, b[i] ^ 0x07} {
			copy(c, b)
			c[i] = v
			checkAgainstCore1(t, c)
		}
	}
}

// FuzzDecodePod decodes hostile pods: decodePod never panics, and reads
// what k8s.io/api reads wherever that accepts the pod but for the ways it
// is stricter.
func FuzzDecodePod(f *testing.F) {
	for _, tt := range decodeCases() {
		f.Add(tt.encode(f))
	}
	for _, fx := range loadFixtures(f) {
		for _, p := range fx.Pods {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name, UID: types.UID(p.UID), Labels: p.Labels, Annotations: p.Annotations}}
			for _, c := range p.Containers {
				var ports []corev1.ContainerPort
				for _, port := range c.Ports {
					ports = append(ports, corev1.ContainerPort{ContainerPort: port})
				}
				pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: c.Name, Image: c.Image, Ports: ports})
				pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, corev1.ContainerStatus{Name: c.Name, ContainerID: "containerd://" + c.Name})
			}
			f.Add(marshal(f, pod))
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkAgainstCore1(t, b)
	})
}

func BenchmarkDecodePod(b *testing.B) {
	raw := marshal(b, fullPod())
	b.Run("decodePod", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decodePod(raw); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("corev1", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var pod corev1.Pod
			if err := pod.Unmarshal(raw); err != nil {
				b.Fatal(err)
			}
			corePodFields(&pod)
		}
	})
}
