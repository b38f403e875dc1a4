package kubernetes

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/xpu-exporter/xpu_exporter/internal/syncbuf"
)

// fakeAPIServer speaks just enough of the API server's pod list and watch,
// in JSON, to serve client-go's metadata informer: plain lists, watches from
// a resource version, and watch-lists (sendInitialEvents) that end their
// replay with the initial-events-end bookmark.
type fakeAPIServer struct {
	t        *testing.T
	node     string
	srv      *httptest.Server
	mu       sync.Mutex
	rv       int
	pods     map[types.UID]metav1.PartialObjectMetadata
	history  []watchEvent
	watchers map[chan watchEvent]struct{}
	failing  bool
	requests int
	closed   chan struct{}
}

type watchEvent struct {
	Type   string                       `json:"type"`
	Object metav1.PartialObjectMetadata `json:"object"`
}

func newFakeAPIServer(t *testing.T, node string) *fakeAPIServer {
	f := &fakeAPIServer{
		t:        t,
		node:     node,
		pods:     map[types.UID]metav1.PartialObjectMetadata{},
		watchers: map[chan watchEvent]struct{}{},
		closed:   make(chan struct{}),
	}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(func() {
		close(f.closed)
		f.srv.Close()
	})
	return f
}

func (f *fakeAPIServer) config() *rest.Config { return &rest.Config{Host: f.srv.URL} }

func (f *fakeAPIServer) setFailing(failing bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failing = failing
}

// put adds or updates a pod, and tells watchers.
func (f *fakeAPIServer) put(m metav1.ObjectMeta) {
	f.mu.Lock()
	defer f.mu.Unlock()
	typ := "ADDED"
	if _, ok := f.pods[m.UID]; ok {
		typ = "MODIFIED"
	}
	f.rv++
	m.ResourceVersion = strconv.Itoa(f.rv)
	obj := partial(m)
	f.pods[m.UID] = obj
	f.emitLocked(watchEvent{Type: typ, Object: obj})
}

func (f *fakeAPIServer) remove(uid types.UID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	obj, ok := f.pods[uid]
	if !ok {
		return
	}
	delete(f.pods, uid)
	f.rv++
	obj.ResourceVersion = strconv.Itoa(f.rv)
	f.emitLocked(watchEvent{Type: "DELETED", Object: obj})
}

func (f *fakeAPIServer) emitLocked(ev watchEvent) {
	f.history = append(f.history, ev)
	for w := range f.watchers {
		w <- ev
	}
}

func partial(m metav1.ObjectMeta) metav1.PartialObjectMetadata {
	return metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadata"},
		ObjectMeta: m,
	}
}

func (f *fakeAPIServer) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.requests++
	failing := f.failing
	f.mu.Unlock()
	if r.URL.Path != "/api/v1/pods" {
		f.t.Errorf("request for %s", r.URL)
		http.NotFound(w, r)
		return
	}
	// Metadata objects carry no spec.nodeName: every request must select
	// the node itself, or the exporter would watch the whole cluster.
	if got, want := r.URL.Query().Get("fieldSelector"), "spec.nodeName="+f.node; got != want {
		f.t.Errorf("request %s: fieldSelector %q, want %q", r.URL, got, want)
		http.Error(w, "bad field selector", http.StatusBadRequest)
		return
	}
	if failing {
		http.Error(w, "unavailable", http.StatusServiceUnavailable)
		return
	}
	if r.URL.Query().Get("watch") == "true" || r.URL.Query().Get("watch") == "1" {
		f.watch(w, r)
		return
	}
	f.mu.Lock()
	list := metav1.PartialObjectMetadataList{
		TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadataList"},
		ListMeta: metav1.ListMeta{ResourceVersion: strconv.Itoa(f.rv)},
	}
	for _, p := range f.pods {
		list.Items = append(list.Items, p)
	}
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(list)
}

func (f *fakeAPIServer) watch(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	events := make(chan watchEvent, 1024)
	var replay []watchEvent
	f.mu.Lock()
	if q.Get("sendInitialEvents") == "true" {
		for _, p := range f.pods {
			replay = append(replay, watchEvent{Type: "ADDED", Object: p})
		}
		replay = append(replay, watchEvent{Type: "BOOKMARK", Object: partial(metav1.ObjectMeta{
			ResourceVersion: strconv.Itoa(f.rv),
			Annotations:     map[string]string{metav1.InitialEventsAnnotationKey: "true"},
		})})
	} else {
		from, _ := strconv.Atoi(q.Get("resourceVersion"))
		for _, ev := range f.history {
			if rv, _ := strconv.Atoi(ev.Object.ResourceVersion); rv > from {
				replay = append(replay, ev)
			}
		}
	}
	f.watchers[events] = struct{}{}
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.watchers, events)
		f.mu.Unlock()
	}()

	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	flusher := w.(http.Flusher)
	for _, ev := range replay {
		if enc.Encode(ev) != nil {
			return
		}
	}
	flusher.Flush()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-f.closed:
			return
		case ev := <-events:
			if enc.Encode(ev) != nil {
				return
			}
			flusher.Flush()
		}
	}
}

func startAPIServerSource(t *testing.T, f *fakeAPIServer) *APIServerSource {
	t.Helper()
	s, err := StartAPIServerSource(f.config(), f.node, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestAPIServerSource(t *testing.T) {
	f := newFakeAPIServer(t, "node1")
	controller := true
	f.put(metav1.ObjectMeta{
		Namespace: "inference", Name: "llm-serve-7d9f8b6c5d-x2k4q", UID: "3f6c2a1e-8b4d-4e2f-9a7c-1d5e8f0b2c61",
		Labels:          map[string]string{"pod-template-hash": "7d9f8b6c5d", "team": "search"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "llm-serve-7d9f8b6c5d", Controller: &controller}},
	})
	// The mirror of a static pod: its cgroup path carries the kubelet's UID.
	f.put(metav1.ObjectMeta{
		Namespace: "kube-system", Name: "etcd-node1", UID: "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9",
		Annotations:     map[string]string{"kubernetes.io/config.mirror": "5b8f3e2c9a0d4e7f8a1b2c3d4e5f6a7b"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "node1", Controller: &controller}},
	})

	s := startAPIServerSource(t, f)
	eventually(t, "the initial list", func() bool { return s.Healthy() == nil && s.podCache.len() == 2 })

	m, ok := s.Pod("inference", "llm-serve-7d9f8b6c5d-x2k4q")
	if !ok || m.Workload != "llm-serve" || m.WorkloadKind != "Deployment" || m.Labels["team"] != "search" {
		t.Errorf("Pod = %+v, %v", m, ok)
	}
	if m, ok := s.PodByUID("5B8F3E2C9A0D4E7F8A1B2C3D4E5F6A7B"); !ok || m.Name != "etcd-node1" {
		t.Errorf("static pod by its kubelet UID = %+v, %v", m, ok)
	}

	f.put(metav1.ObjectMeta{Namespace: "ml", Name: "trainer-0", UID: "11111111-2222-4333-8444-555555555555", Labels: map[string]string{"team": "a"}})
	eventually(t, "ADDED", func() bool { _, ok := s.Pod("ml", "trainer-0"); return ok })
	f.put(metav1.ObjectMeta{Namespace: "ml", Name: "trainer-0", UID: "11111111-2222-4333-8444-555555555555", Labels: map[string]string{"team": "b"}})
	eventually(t, "MODIFIED", func() bool { m, _ := s.Pod("ml", "trainer-0"); return m.Labels["team"] == "b" })
	f.remove("11111111-2222-4333-8444-555555555555")
	eventually(t, "DELETED", func() bool { _, ok := s.PodByUID("11111111-2222-4333-8444-555555555555"); return !ok })
}

// The API server fails: the source says so, keeps what it had, and is
// healthy again once a request succeeds.
func TestAPIServerSourceFailure(t *testing.T) {
	f := newFakeAPIServer(t, "node1")
	f.setFailing(true)
	f.put(metav1.ObjectMeta{Namespace: "a", Name: "p", UID: "00000000-0000-4000-8000-000000000001"})

	s := startAPIServerSource(t, f)
	eventually(t, "a failed request", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.requests > 0
	})
	if s.Healthy() == nil {
		t.Error("healthy before any list succeeded")
	}
	f.setFailing(false)
	eventually(t, "recovery", func() bool { _, ok := s.Pod("a", "p"); return s.Healthy() == nil && ok })
}

// TestAPIServerSourceFailureLoggedByTheResolver: a failing watch is
// retried with backoff; the retries are not logged as warnings, one a
// retry for as long as RBAC was missing (probe14-k8s D4), since the
// resolver logs the source's failure and recovery once each.
func TestAPIServerSourceFailureLoggedByTheResolver(t *testing.T) {
	f := newFakeAPIServer(t, "node1")
	f.setFailing(true)
	var logs syncbuf.Buffer
	s, err := StartAPIServerSource(f.config(), "node1", slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	eventually(t, "two failed requests", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.requests > 1
	})
	if strings.Contains(logs.String(), "level=WARN") {
		t.Errorf("retries logged as warnings:\n%s", logs.String())
	}
}

func TestStartAPIServerSourceNeedsNode(t *testing.T) {
	if _, err := StartAPIServerSource(&rest.Config{Host: "http://127.0.0.1:1"}, "", nil); err == nil {
		t.Error("started without a node name")
	}
}
