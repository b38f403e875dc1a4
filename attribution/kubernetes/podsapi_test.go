package kubernetes

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/xpu-exporter/xpu_exporter/attribution/kubernetes/kubelettest"
)

// eventually polls cond until it holds or 10 seconds pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func startPodsAPI(t *testing.T, k *kubelettest.Server) *PodsAPISource {
	t.Helper()
	s, err := StartPodsAPISource(k.PodsAPISocket(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	eventually(t, "the first watch event", func() bool { return s.Healthy() == nil })
	return s
}

func TestPodsAPISourceFixture(t *testing.T) {
	k := kubelettest.StartFile(t, filepath.Join(fixtureDir, "h100-node.yaml"))
	s := startPodsAPI(t, k)
	eventually(t, "all pods", func() bool { return s.podCache.len() == 11 })

	tests := []struct {
		ns, name, uid, workload, kind string
	}{
		{"inference", "llm-serve-7d9f8b6c5d-x2k4q", "3f6c2a1e-8b4d-4e2f-9a7c-1d5e8f0b2c61", "llm-serve", "Deployment"},
		{"notebooks", "jupyter-alice", "7a2d9c4b-1e3f-4a5b-8c6d-2e7f9a0b1c32", "jupyter-alice", "Pod"},
		{"gpu-operator", "gpu-health-probe-7xk2m", "9c4f1e6d-3a5b-4c7d-8e9f-4a9b1c2d3e54", "gpu-health-probe", "DaemonSet"},
		{"search", "embeddings-0", "0d5a2f7e-4b6c-4d8e-9f0a-5b0c2d3e4f65", "embeddings", "StatefulSet"},
		{"ray", "raycluster-llm-gpu-group-worker-q8n4d", "1e6b3a8f-5c7d-4e9f-8a1b-6c1d3e4f5a76", "raycluster-llm", "RayCluster"},
		{"eval", "nightly-eval-29480160-5sx8k", "2f7c4b9a-6d8e-4f0a-9b2c-7d2e4f5a6b87", "nightly-eval", "CronJob"},
		{"training", "bert-finetune-worker-0", "3a8d5c0b-7e9f-4a1b-8c3d-8e3f5a6b7c98", "bert-finetune", "PyTorchJob"},
		{"batch", "data-prep-x7k2p", "4b9e6d1c-8f0a-4b2c-9d4e-9f4a6b7c8da9", "data-prep", "Job"},
		{"inference", "llama-405b-0", "5c0f7e2d-9a1b-4c3d-8e5f-0a5b7c8d9eba", "llama-405b", "LeaderWorkerSet"},
	}
	for _, tt := range tests {
		m, ok := s.Pod(tt.ns, tt.name)
		if !ok {
			t.Errorf("Pod(%s, %s) not found", tt.ns, tt.name)
			continue
		}
		if m.UID != tt.uid || m.Workload != tt.workload || m.WorkloadKind != tt.kind {
			t.Errorf("Pod(%s, %s) = %+v, want uid %s workload %s/%s", tt.ns, tt.name, m, tt.uid, tt.kind, tt.workload)
		}
		byUID, ok := s.PodByUID(tt.uid)
		if !ok || byUID.Name != tt.name || byUID.Namespace != tt.ns {
			t.Errorf("PodByUID(%s) = %+v, %v", tt.uid, byUID, ok)
		}
	}
	if m, _ := s.Pod("inference", "llm-serve-7d9f8b6c5d-x2k4q"); m.Labels["team"] != "search-ranking" {
		t.Errorf("labels = %v", m.Labels)
	}
	if _, ok := s.Pod("inference", "no-such-pod"); ok {
		t.Error("found a pod that does not exist")
	}
}

func TestPodsAPISourceWatchEvents(t *testing.T) {
	k := kubelettest.Start(t, &kubelettest.Fixture{Node: "n1"})
	s := startPodsAPI(t, k)

	pod := kubelettest.Pod{
		Namespace: "ml", Name: "trainer-0", UID: "11111111-2222-4333-8444-555555555555",
		Labels:          map[string]string{"team": "a"},
		OwnerReferences: []kubelettest.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "trainer", Controller: true}},
		Containers:      []kubelettest.Container{{Name: "main"}},
	}
	if err := k.SetPod(pod); err != nil {
		t.Fatal(err)
	}
	eventually(t, "ADDED", func() bool {
		m, ok := s.Pod("ml", "trainer-0")
		return ok && m.Workload == "trainer" && m.WorkloadKind == "StatefulSet"
	})

	pod.Labels = map[string]string{"team": "b"}
	if err := k.SetPod(pod); err != nil {
		t.Fatal(err)
	}
	eventually(t, "MODIFIED", func() bool {
		m, ok := s.PodByUID(pod.UID)
		return ok && m.Labels["team"] == "b"
	})

	// The StatefulSet replaces its pod: same name, new UID.
	replaced := pod
	replaced.UID = "66666666-7777-4888-8999-aaaaaaaaaaaa"
	if err := k.SetPod(replaced); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the replacement", func() bool {
		m, ok := s.Pod("ml", "trainer-0")
		_, oldFound := s.PodByUID(pod.UID)
		return ok && m.UID == replaced.UID && !oldFound
	})

	if !k.RemovePod("ml", "trainer-0") {
		t.Fatal("RemovePod: no such pod")
	}
	eventually(t, "DELETED", func() bool {
		_, byName := s.Pod("ml", "trainer-0")
		_, byUID := s.PodByUID(replaced.UID)
		return !byName && !byUID
	})
}

// The kubelet goes away: the source says so and keeps what it knew; a pod
// deleted meanwhile is gone once the kubelet is back and has replayed its
// pods.
func TestPodsAPISourceKubeletRestart(t *testing.T) {
	fx := &kubelettest.Fixture{Node: "n1", Pods: []kubelettest.Pod{
		{Namespace: "a", Name: "stays", UID: "00000000-0000-4000-8000-000000000001"},
		{Namespace: "a", Name: "goes", UID: "00000000-0000-4000-8000-000000000002"},
	}}
	k := kubelettest.Start(t, fx)
	s := startPodsAPI(t, k)
	eventually(t, "both pods", func() bool { return s.podCache.len() == 2 })

	k.Stop()
	eventually(t, "unhealthy", func() bool { return s.Healthy() != nil })
	if _, ok := s.Pod("a", "goes"); !ok {
		t.Error("metadata was dropped while the kubelet was away")
	}
	k.RemovePod("a", "goes")
	if err := k.SetPod(kubelettest.Pod{Namespace: "a", Name: "new", UID: "00000000-0000-4000-8000-000000000003"}); err != nil {
		t.Fatal(err)
	}
	if err := k.Restart(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the resync", func() bool {
		_, gone := s.Pod("a", "goes")
		_, stays := s.Pod("a", "stays")
		_, added := s.Pod("a", "new")
		return s.Healthy() == nil && !gone && stays && added
	})
}

func TestPodsAPISourceNoKubelet(t *testing.T) {
	s, err := StartPodsAPISource(filepath.Join(t.TempDir(), "pods-api.sock"), nil)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if s.Healthy() == nil {
		t.Error("healthy without a kubelet")
	}
	done := make(chan error)
	go func() { done <- s.Close() }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close hangs while the watch waits for a kubelet")
	}
}

// Engine discovery reads annotations and the pod IP, which only the Pods
// API carries.
func TestPodsAPISourceAnnotationsAndIP(t *testing.T) {
	fx := &kubelettest.Fixture{Node: "n1", Pods: []kubelettest.Pod{{
		Namespace: "inference", Name: "vllm-0", UID: "00000000-0000-4000-8000-0000000000e1", IP: "10.1.2.3",
		Annotations: map[string]string{"xpu-exporter.io/engine": "vllm", "xpu-exporter.io/port": "8000"},
		Containers:  []kubelettest.Container{{Name: "vllm", Image: "vllm/vllm-openai:v0.10.0", Ports: []int32{8000}}},
	}}}
	s := startPodsAPI(t, kubelettest.Start(t, fx))
	eventually(t, "the pod", func() bool { return len(s.Pods()) == 1 })
	p := s.Pods()[0]
	if p.IP != "10.1.2.3" || p.Annotations["xpu-exporter.io/engine"] != "vllm" || p.Annotations["xpu-exporter.io/port"] != "8000" {
		t.Errorf("pod %+v, want its IP and engine annotations", p)
	}
	if len(p.Containers) != 1 || p.Containers[0].Image != "vllm/vllm-openai:v0.10.0" || len(p.Containers[0].Ports) != 1 || p.Containers[0].Ports[0] != 8000 {
		t.Errorf("containers %+v, want the image and its declared port", p.Containers)
	}
}
