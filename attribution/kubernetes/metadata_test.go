package kubernetes

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/xpu-exporter/xpu_exporter/attribution/kubernetes/kubelettest"
)

func writeKubeconfig(t *testing.T, server string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster: {server: %q}
users:
- name: exporter
  user: {token: test-token}
contexts:
- name: test
  context: {cluster: test, user: exporter}
current-context: test
`, server)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func startMetadata(t *testing.T, cfg MetadataConfig) MetadataSource {
	t.Helper()
	s, err := NewMetadataSource(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// The kubelet Pods API wins whenever its socket exists; the API server is
// used only without it, and only scoped to a node; else there is none.
func TestNewMetadataSourceOrder(t *testing.T) {
	// Not in a cluster, whatever the machine running the tests says.
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")

	api := newFakeAPIServer(t, "node1")
	api.put(metav1.ObjectMeta{Namespace: "a", Name: "from-apiserver", UID: "00000000-0000-4000-8000-0000000000a1"})
	kubeconfig := writeKubeconfig(t, api.srv.URL)

	kubelet := kubelettest.Start(t, &kubelettest.Fixture{Node: "node1", Pods: []kubelettest.Pod{
		{Namespace: "a", Name: "from-kubelet", UID: "00000000-0000-4000-8000-0000000000b1"},
	}})
	noPodsAPI := kubelettest.Start(t, &kubelettest.Fixture{Node: "node1"}, kubelettest.WithoutPodsAPI())
	notASocket := filepath.Join(t.TempDir(), "pods-api.sock")
	if err := os.WriteFile(notASocket, nil, 0o600); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name    string
		cfg     MetadataConfig
		want    string
		wantPod string
	}{
		{"pods API socket present", MetadataConfig{PodsAPISocket: kubelet.PodsAPISocket(), Kubeconfig: kubeconfig, NodeName: "node1"},
			SourcePodsAPI, "from-kubelet"},
		{"no pods API: API server", MetadataConfig{PodsAPISocket: noPodsAPI.PodsAPISocket(), Kubeconfig: kubeconfig, NodeName: "node1"},
			SourceAPIServer, "from-apiserver"},
		{"pods API path is not a socket", MetadataConfig{PodsAPISocket: notASocket, Kubeconfig: kubeconfig, NodeName: "node1"},
			SourceAPIServer, "from-apiserver"},
		{"pods API disabled", MetadataConfig{Kubeconfig: kubeconfig, NodeName: "node1"},
			SourceAPIServer, "from-apiserver"},
		{"no node name to scope a watch", MetadataConfig{PodsAPISocket: noPodsAPI.PodsAPISocket(), Kubeconfig: kubeconfig},
			SourceNone, ""},
		{"not in a cluster, no kubeconfig", MetadataConfig{PodsAPISocket: noPodsAPI.PodsAPISocket(), NodeName: "node1"},
			SourceNone, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := startMetadata(t, tt.cfg)
			if s.Name() != tt.want {
				t.Fatalf("source %q, want %q", s.Name(), tt.want)
			}
			if tt.wantPod == "" {
				if err := s.Healthy(); err != nil {
					t.Errorf("no source is not a failure, got %v", err)
				}
				return
			}
			eventually(t, "pod "+tt.wantPod, func() bool {
				_, ok := s.Pod("a", tt.wantPod)
				return ok && s.Healthy() == nil
			})
		})
	}
}

// TestPodsAPIThatAppearsLaterIsUsed: a kubelet upgraded under a running
// exporter starts serving the Pods API where there was none: the exporter
// uses it from then on, where the choice made at start held for the
// exporter's life (found by probing: probe14-k8s D3, no workload labels
// and no ended pods until a restart).
func TestPodsAPIThatAppearsLaterIsUsed(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	socket := filepath.Join(t.TempDir(), "pods-api.sock")
	s := startMetadata(t, MetadataConfig{PodsAPISocket: socket, PodsAPIRecheck: 20 * time.Millisecond})
	if s.Name() != SourceNone {
		t.Fatalf("source %q before the socket, want %q", s.Name(), SourceNone)
	}
	kubelet := kubelettest.Start(t, &kubelettest.Fixture{Node: "node1", Pods: []kubelettest.Pod{
		{Namespace: "a", Name: "from-kubelet", UID: "00000000-0000-4000-8000-0000000000b1"},
	}})
	if err := os.Symlink(kubelet.PodsAPISocket(), socket); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the Pods API in use", func() bool {
		_, ok := s.Pod("a", "from-kubelet")
		return s.Name() == SourcePodsAPI && ok && s.Healthy() == nil
	})
}

func TestNewMetadataSourceBadKubeconfig(t *testing.T) {
	_, err := NewMetadataSource(MetadataConfig{Kubeconfig: filepath.Join(t.TempDir(), "missing"), NodeName: "node1"})
	if err == nil {
		t.Error("a kubeconfig that cannot be loaded was accepted")
	}
}

func TestNoMetadata(t *testing.T) {
	var s MetadataSource = NoMetadata{}
	if _, ok := s.Pod("a", "b"); ok {
		t.Error("NoMetadata found a pod")
	}
	if _, ok := s.PodByUID("x"); ok {
		t.Error("NoMetadata found a pod by UID")
	}
	if s.Healthy() != nil || s.Close() != nil || s.Name() != SourceNone {
		t.Error("NoMetadata is not a quiet no-op")
	}
}

func TestPodCache(t *testing.T) {
	c := newPodCache()
	at := func(min int) time.Time { return time.Date(2026, 1, 1, 0, min, 0, 0, time.UTC) }
	old := &objectMeta{Namespace: "ml", Name: "trainer-0", UID: "old", Created: at(0)}
	replacement := &objectMeta{Namespace: "ml", Name: "trainer-0", UID: "new", Created: at(5)}

	c.upsert(old, "", nil, false, 1)
	c.upsert(replacement, "", nil, false, 1)
	// The old pod, still terminating, reports a status change afterwards.
	c.upsert(old, "", nil, false, 1)
	if m, ok := c.Pod("ml", "trainer-0"); !ok || m.UID != "new" {
		t.Errorf("by name = %+v, %v; want the newer pod", m, ok)
	}
	c.remove("old")
	if m, ok := c.Pod("ml", "trainer-0"); !ok || m.UID != "new" {
		t.Errorf("after removing the old pod, by name = %+v, %v", m, ok)
	}
	if _, ok := c.PodByUID("old"); ok {
		t.Error("removed pod still found by UID")
	}

	static := &objectMeta{Namespace: "kube-system", Name: "etcd-n1", UID: "mirror-uid",
		Annotations: map[string]string{mirrorPodAnnotation: "abcdef0123456789abcdef0123456789"}}
	c.upsert(static, "", nil, false, 2)
	if m, ok := c.PodByUID("ABCDEF0123456789ABCDEF0123456789"); !ok || m.Name != "etcd-n1" {
		t.Errorf("static pod by kubelet UID = %+v, %v", m, ok)
	}

	// A re-watch (generation 2) replays only the static pod: the rest was
	// deleted while the watch was down.
	c.sweep(2)
	if _, ok := c.Pod("ml", "trainer-0"); ok {
		t.Error("sweep kept a pod the re-watch did not report")
	}
	if _, ok := c.PodByUID("abcdef0123456789abcdef0123456789"); !ok {
		t.Error("sweep dropped a pod the re-watch reported")
	}
	c.remove("mirror-uid")
	if _, ok := c.PodByUID("abcdef0123456789abcdef0123456789"); ok || c.len() != 0 {
		t.Errorf("cache not empty: %d pods", c.len())
	}
	// A UID in upper case (none the API server makes) is found in any
	// case, and removed by it.
	c.upsert(&objectMeta{Namespace: "a", Name: "upper", UID: "A1B2C3D4-0000-4000-8000-0000000000AA"}, "", nil, false, 3)
	if m, ok := c.PodByUID("a1b2c3d4-0000-4000-8000-0000000000aa"); !ok || m.Name != "upper" || m.UID != "A1B2C3D4-0000-4000-8000-0000000000AA" {
		t.Errorf("pod with an upper-case UID by UID = %+v, %v; want it, its UID as given", m, ok)
	}
	c.remove("A1B2C3D4-0000-4000-8000-0000000000AA")
	if c.len() != 0 {
		t.Errorf("cache not empty after removing the upper-case UID: %d pods", c.len())
	}
	c.upsert(&objectMeta{Namespace: "a", Name: "no-uid"}, "", nil, false, 3)
	if c.len() != 0 {
		t.Error("cached a pod without a UID")
	}
}
