package kubernetes

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/xpu-exporter/xpu_exporter/internal/syncbuf"
)

// fakeAPIServer speaks just enough of the API server's pod list and watch,
// in JSON, as the Kubernetes API concepts page describes them: lists in
// pages (limit, continue), watches from a resource version that replay the
// changes after it, ERROR events with a Status, BOOKMARK events.
type fakeAPIServer struct {
	t        *testing.T
	node     string
	srv      *httptest.Server
	mu       sync.Mutex
	rv       int
	pods     map[types.UID]metav1.ObjectMeta
	history  []fakeEvent
	watchers map[chan []byte]struct{}
	failing  bool
	// compacted is the resource version the history starts after: a
	// watch from before it is answered 410 Gone.
	compacted int
	// pageSize, when set, is the most items a list page holds,
	// whatever limit asks.
	pageSize int
	// fullPods serves whole Pods, as a server that ignores as= does.
	fullPods bool
	requests int
	lists    []string // the resourceVersion and continue of each list request
	watches  []string // the resourceVersion of each watch request
	closed   chan struct{}
}

type fakeEvent struct {
	rv  int
	typ string
	obj metav1.ObjectMeta
}

func newFakeAPIServer(t *testing.T, node string) *fakeAPIServer {
	f := &fakeAPIServer{
		t:        t,
		node:     node,
		pods:     map[types.UID]metav1.ObjectMeta{},
		watchers: map[chan []byte]struct{}{},
		closed:   make(chan struct{}),
	}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(func() {
		close(f.closed)
		f.srv.Close()
	})
	return f
}

func (f *fakeAPIServer) config() *apiConfig { return &apiConfig{Host: f.srv.URL} }

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
	f.pods[m.UID] = m
	f.emitLocked(fakeEvent{rv: f.rv, typ: typ, obj: m})
}

func (f *fakeAPIServer) remove(uid types.UID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, ok := f.pods[uid]
	if !ok {
		return
	}
	delete(f.pods, uid)
	f.rv++
	m.ResourceVersion = strconv.Itoa(f.rv)
	f.emitLocked(fakeEvent{rv: f.rv, typ: "DELETED", obj: m})
}

func (f *fakeAPIServer) emitLocked(ev fakeEvent) {
	f.history = append(f.history, ev)
	f.sendLocked(f.eventLine(ev.typ, f.object(ev.obj)))
}

// sendLocked writes line to every open watch.
func (f *fakeAPIServer) sendLocked(line []byte) {
	for w := range f.watchers {
		w <- line
	}
}

// send writes line, as it is, to every open watch.
func (f *fakeAPIServer) send(line string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sendLocked([]byte(line))
}

// compact forgets the history up to now and deletes uid without an
// event, as if the DELETED had been compacted away while no watch was
// open; open watches are sent 410 Gone.
func (f *fakeAPIServer) compact(uid types.UID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.pods, uid)
	f.rv++
	f.compacted = f.rv
	f.history = nil
	f.sendLocked(goneLine)
}

// closeWatches ends every open watch, as the server does at its
// timeoutSeconds.
func (f *fakeAPIServer) closeWatches() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sendLocked(nil)
}

var goneLine = []byte(`{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 1 (5)","reason":"Expired","code":410}}` + "\n")

func (f *fakeAPIServer) object(m metav1.ObjectMeta) any {
	if f.fullPods {
		return corev1.Pod{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
			ObjectMeta: m,
			Spec:       corev1.PodSpec{NodeName: f.node, Containers: []corev1.Container{{Name: "main", Image: "registry.example/main:1"}}},
			Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.7"},
		}
	}
	return metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadata"},
		ObjectMeta: m,
	}
}

func (f *fakeAPIServer) eventLine(typ string, obj any) []byte {
	b, err := json.Marshal(map[string]any{"type": typ, "object": obj})
	if err != nil {
		f.t.Error(err)
	}
	return append(b, '\n')
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
	q := r.URL.Query()
	// Metadata objects carry no spec.nodeName: every request must select
	// the node itself, or the exporter would watch the whole cluster.
	if got, want := q.Get("fieldSelector"), "spec.nodeName="+f.node; got != want {
		f.t.Errorf("request %s: fieldSelector %q, want %q", r.URL, got, want)
		http.Error(w, "bad field selector", http.StatusBadRequest)
		return
	}
	if got := r.Header.Get("User-Agent"); got != "xpu_exporter" {
		f.t.Errorf("request %s: User-Agent %q", r.URL, got)
	}
	if failing {
		http.Error(w, "unavailable", http.StatusServiceUnavailable)
		return
	}
	if q.Get("watch") == "true" {
		if got, want := r.Header.Get("Accept"), "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"; got != want {
			f.t.Errorf("watch Accept %q, want %q", got, want)
		}
		f.watch(w, r)
		return
	}
	if got, want := r.Header.Get("Accept"), "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"; got != want {
		f.t.Errorf("list Accept %q, want %q", got, want)
	}
	// Paged, but for a list at a version of its own, which would be an
	// Exact read with a limit (KEP-2523), not one from the watch cache.
	wantLimit := "500"
	if rv := q.Get("resourceVersion"); rv != "" && rv != "0" {
		wantLimit = ""
	}
	if got := q.Get("limit"); got != wantLimit {
		f.t.Errorf("list at resourceVersion %q: limit %q, want %q", q.Get("resourceVersion"), got, wantLimit)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists = append(f.lists, fmt.Sprintf("rv=%s continue=%s", q.Get("resourceVersion"), q.Get("continue")))
	if q.Get("continue") != "" && q.Get("resourceVersion") != "" {
		// As the API server refuses it.
		f.t.Errorf("list %s: a resourceVersion with a continue token", r.URL)
	}
	uids := make([]string, 0, len(f.pods))
	for uid := range f.pods {
		uids = append(uids, string(uid))
	}
	slices.Sort(uids)
	from, _ := strconv.Atoi(q.Get("continue"))
	to := len(uids)
	if f.pageSize > 0 {
		to = min(from+f.pageSize, len(uids))
	}
	kind, apiVersion := "PartialObjectMetadataList", "meta.k8s.io/v1"
	if f.fullPods {
		kind, apiVersion = "PodList", "v1"
	}
	meta := map[string]string{"resourceVersion": strconv.Itoa(f.rv)}
	if to < len(uids) {
		meta["continue"] = strconv.Itoa(to)
	}
	items := []any{}
	for _, uid := range uids[from:to] {
		items = append(items, f.object(f.pods[types.UID(uid)]))
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"kind": kind, "apiVersion": apiVersion, "metadata": meta, "items": items})
}

func (f *fakeAPIServer) watch(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if q.Get("allowWatchBookmarks") != "true" {
		f.t.Errorf("watch %s without allowWatchBookmarks=true", r.URL)
	}
	if s, err := strconv.Atoi(q.Get("timeoutSeconds")); err != nil || s < 300 || s >= 600 {
		f.t.Errorf("watch %s: timeoutSeconds %q, want 300 to 599", r.URL, q.Get("timeoutSeconds"))
	}
	events := make(chan []byte, 1024)
	var replay [][]byte
	f.mu.Lock()
	f.watches = append(f.watches, q.Get("resourceVersion"))
	from, _ := strconv.Atoi(q.Get("resourceVersion"))
	if from < f.compacted {
		replay = append(replay, goneLine)
	} else {
		for _, ev := range f.history {
			if ev.rv > from {
				replay = append(replay, f.eventLine(ev.typ, f.object(ev.obj)))
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
	flusher := w.(http.Flusher)
	for _, line := range replay {
		if _, err := w.Write(line); err != nil {
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
		case line := <-events:
			if line == nil {
				return
			}
			if _, err := w.Write(line); err != nil {
				return
			}
			flusher.Flush()
		}
	}
}

// watching is the number of watches open, to which send writes.
func (f *fakeAPIServer) watching() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.watchers)
}

func (f *fakeAPIServer) counts() (lists []string, watches []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.lists), slices.Clone(f.watches)
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
	for _, full := range []bool{false, true} {
		t.Run(fmt.Sprintf("full pods %v", full), func(t *testing.T) {
			f := newFakeAPIServer(t, "node1")
			f.fullPods = full
			controller := true
			created := metav1.Date(2026, 3, 1, 12, 30, 5, 0, time.UTC)
			f.put(metav1.ObjectMeta{
				Namespace: "inference", Name: "llm-serve-7d9f8b6c5d-x2k4q", UID: "3f6c2a1e-8b4d-4e2f-9a7c-1d5e8f0b2c61",
				CreationTimestamp: created,
				Labels:            map[string]string{"pod-template-hash": "7d9f8b6c5d", "team": "search"},
				OwnerReferences:   []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "llm-serve-7d9f8b6c5d", UID: "9", Controller: &controller}},
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
			if !ok || m.Workload != "llm-serve" || m.WorkloadKind != "Deployment" || m.Labels["team"] != "search" ||
				m.UID != "3f6c2a1e-8b4d-4e2f-9a7c-1d5e8f0b2c61" || m.IP != "" || m.Containers != nil {
				t.Errorf("Pod = %+v, %v", m, ok)
			}
			s.podCache.mu.RLock()
			got := s.podCache.byUID["3f6c2a1e-8b4d-4e2f-9a7c-1d5e8f0b2c61"].created
			s.podCache.mu.RUnlock()
			if want := time.Date(2026, 3, 1, 12, 30, 5, 0, time.UTC); !got.Equal(want) {
				t.Errorf("created %v, want %v", got, want)
			}
			if m, ok := s.PodByUID("5B8F3E2C9A0D4E7F8A1B2C3D4E5F6A7B"); !ok || m.Name != "etcd-node1" || m.WorkloadKind != "Node" {
				t.Errorf("static pod by its kubelet UID = %+v, %v", m, ok)
			}

			f.put(metav1.ObjectMeta{Namespace: "ml", Name: "trainer-0", UID: "11111111-2222-4333-8444-555555555555", Labels: map[string]string{"team": "a"}})
			eventually(t, "ADDED", func() bool { _, ok := s.Pod("ml", "trainer-0"); return ok })
			f.put(metav1.ObjectMeta{Namespace: "ml", Name: "trainer-0", UID: "11111111-2222-4333-8444-555555555555", Labels: map[string]string{"team": "b"}})
			eventually(t, "MODIFIED", func() bool { m, _ := s.Pod("ml", "trainer-0"); return m.Labels["team"] == "b" })
			f.remove("11111111-2222-4333-8444-555555555555")
			eventually(t, "DELETED", func() bool { _, ok := s.PodByUID("11111111-2222-4333-8444-555555555555"); return !ok })
		})
	}
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
	if err := s.Healthy(); err == nil || !strings.Contains(err.Error(), "503 Service Unavailable: unavailable") {
		t.Errorf("Healthy() = %v, want the server's 503 and its message", err)
	}
}

func TestStartAPIServerSourceNeedsNode(t *testing.T) {
	if _, err := StartAPIServerSource(&apiConfig{Host: "http://127.0.0.1:1"}, "", nil); err == nil {
		t.Error("started without a node name")
	}
}

// A list comes in pages: each request after the first carries the
// continue of the page before, until a page has none.
func TestAPIServerSourceListPages(t *testing.T) {
	f := newFakeAPIServer(t, "node1")
	f.pageSize = 2
	for i := 1; i <= 5; i++ {
		f.put(metav1.ObjectMeta{Namespace: "a", Name: fmt.Sprintf("p%d", i), UID: types.UID(fmt.Sprintf("00000000-0000-4000-8000-00000000000%d", i))})
	}
	s := startAPIServerSource(t, f)
	eventually(t, "the list", func() bool { return s.Healthy() == nil && s.podCache.len() == 5 })
	lists, _ := f.counts()
	// The first page from the watch cache, at any version; the others
	// continue it.
	if want := []string{"rv=0 continue=", "rv= continue=2", "rv= continue=4"}; !slices.Equal(lists, want) {
		t.Errorf("list requests %q, want %q", lists, want)
	}
	eventually(t, "the watch", func() bool { _, w := f.counts(); return len(w) > 0 })
	_, watches := f.counts()
	if watches[0] != "5" {
		t.Errorf("watch from %q, want the list's resourceVersion 5", watches[0])
	}
}

// A watch answered 410 Gone (its resource version compacted away) is
// followed by a list, which drops a pod deleted while no event could
// tell.
func TestAPIServerSourceGoneRelists(t *testing.T) {
	f := newFakeAPIServer(t, "node1")
	f.put(metav1.ObjectMeta{Namespace: "a", Name: "stays", UID: "00000000-0000-4000-8000-000000000001"})
	f.put(metav1.ObjectMeta{Namespace: "a", Name: "goes", UID: "00000000-0000-4000-8000-000000000002"})
	s := startAPIServerSource(t, f)
	eventually(t, "the list and a watch", func() bool { return s.podCache.len() == 2 && f.watching() == 1 })

	f.compact("00000000-0000-4000-8000-000000000002")
	eventually(t, "the pod gone", func() bool { _, ok := s.Pod("a", "goes"); return !ok })
	if _, ok := s.Pod("a", "stays"); !ok {
		t.Error("the pod still there was dropped")
	}
	// After 410 Gone, the newest: a consistent read.
	lists, watches := f.counts()
	if want := []string{"rv=0 continue=", "rv= continue="}; !slices.Equal(lists, want) {
		t.Errorf("list requests %q, want %q", lists, want)
	}
	eventually(t, "a watch from the new list", func() bool { _, watches = f.counts(); return len(watches) == 2 })
	if watches[1] != "3" {
		t.Errorf("watch after the relist from %q, want 3", watches[1])
	}
	if err := s.Healthy(); err != nil {
		t.Errorf("410 Gone left the source unhealthy: %v", err)
	}
}

// A bookmark moves the resource version on and nothing else; a watch the
// server ends is started again from the last resource version, without a
// list.
func TestAPIServerSourceBookmarkAndRewatch(t *testing.T) {
	f := newFakeAPIServer(t, "node1")
	f.put(metav1.ObjectMeta{Namespace: "a", Name: "p", UID: "00000000-0000-4000-8000-000000000001"})
	s := startAPIServerSource(t, f)
	eventually(t, "the list and a watch", func() bool { _, w := f.counts(); return s.podCache.len() == 1 && len(w) == 1 })

	f.put(metav1.ObjectMeta{Namespace: "a", Name: "q", UID: "00000000-0000-4000-8000-000000000002"})
	eventually(t, "ADDED", func() bool { _, ok := s.Pod("a", "q"); return ok && f.watching() == 1 })
	f.closeWatches()
	eventually(t, "a second watch", func() bool { _, w := f.counts(); return len(w) == 2 && f.watching() == 1 })
	lists, watches := f.counts()
	if watches[1] != "2" {
		t.Errorf("watch again from %q, want 2, the last event's", watches[1])
	}

	f.send(`{"type":"BOOKMARK","object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"12746"}}}` + "\n")
	f.closeWatches()
	eventually(t, "a third watch", func() bool { _, w := f.counts(); return len(w) == 3 })
	lists2, watches := f.counts()
	if watches[2] != "12746" {
		t.Errorf("watch after the bookmark from %q, want 12746", watches[2])
	}
	if len(lists2) != len(lists) || len(lists) != 1 {
		t.Errorf("%d lists, want 1: a watch the server ends is not a list again", len(lists2))
	}
	if s.podCache.len() != 2 || s.Healthy() != nil {
		t.Errorf("after the bookmark: %d pods, Healthy %v; want 2, nil", s.podCache.len(), s.Healthy())
	}
}

// A list that fails for another reason than its resource version (a
// 503 of an API server restarting) is retried at that version, from the
// watch cache, not as a consistent read, which is what a fleet of
// exporters recovering at once would all send to etcd (review23 F10).
func TestAPIServerSourceFailedListKeepsItsVersion(t *testing.T) {
	f := newFakeAPIServer(t, "node1")
	f.put(metav1.ObjectMeta{Namespace: "a", Name: "p", UID: "00000000-0000-4000-8000-000000000001"})
	s := startAPIServerSource(t, f)
	eventually(t, "the list and a watch", func() bool { return s.podCache.len() == 1 && f.watching() == 1 })
	f.mu.Lock()
	before := f.requests
	f.mu.Unlock()
	f.setFailing(true)
	f.send("not json\n")
	eventually(t, "a failed list", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.requests > before
	})
	f.setFailing(false)
	eventually(t, "recovery", func() bool { lists, _ := f.counts(); return len(lists) == 2 && s.Healthy() == nil })
	if lists, _ := f.counts(); !slices.Equal(lists, []string{"rv=0 continue=", "rv=1 continue="}) {
		t.Errorf("list requests %q, want the first, then the retry at the last version seen", lists)
	}
}

// Watch events may not make the objects held larger than a list may be:
// a server streaming pods without end made the heap grow without end
// (probe23-k8sapi D2). The event past the bound is not applied; the
// relist is refused as too large too, and the source reports it.
func TestAPIServerSourceWatchBounded(t *testing.T) {
	old := maxHeldBytes
	maxHeldBytes = 4 << 10
	t.Cleanup(func() { maxHeldBytes = old })
	f := newFakeAPIServer(t, "node1")
	f.put(metav1.ObjectMeta{Namespace: "a", Name: "p0", UID: "00000000-0000-4000-8000-000000000000"})
	s := startAPIServerSource(t, f)
	eventually(t, "the list and a watch", func() bool { _, w := f.counts(); return s.podCache.len() == 1 && len(w) == 1 })
	big := strings.Repeat("x", 1000)
	for i := 1; i <= 10; i++ {
		f.put(metav1.ObjectMeta{Namespace: "a", Name: fmt.Sprintf("p%d", i), UID: types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", i)),
			Annotations: map[string]string{"big": big}})
	}
	eventually(t, "the bound", func() bool {
		err := s.Healthy()
		return err != nil && strings.Contains(err.Error(), "larger than 4096 bytes")
	})
	// The relist is refused too, and the source stays down. Each object
	// is about 1.2 KB: at most 4 KiB of them are held.
	eventually(t, "the relist refused", func() bool {
		err := s.Healthy()
		return err != nil && strings.Contains(err.Error(), "list /api/v1/pods: larger than 4096 bytes")
	})
	if n := s.podCache.len(); n > 4 {
		t.Errorf("%d pods held, want at most 4 within the 4 KiB bound", n)
	}
}

// A line of the watch that is not an event is an error the source
// reports, and it recovers by listing again.
func TestAPIServerSourceMalformedEvent(t *testing.T) {
	f := newFakeAPIServer(t, "node1")
	f.put(metav1.ObjectMeta{Namespace: "a", Name: "p", UID: "00000000-0000-4000-8000-000000000001"})
	s := startAPIServerSource(t, f)
	// send writes to the watches open: a line sent before the source's
	// watch is, is lost, and the test waited for an error that never came.
	eventually(t, "the list and a watch", func() bool { return s.podCache.len() == 1 && f.watching() == 1 })

	f.send("{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"labels\":[1]}}}\n")
	eventually(t, "the error", func() bool { return s.Healthy() != nil })
	if err := s.Healthy(); !strings.Contains(err.Error(), "ADDED event: pod metadata: json: cannot unmarshal") {
		t.Errorf("Healthy() = %v", err)
	}
	f.put(metav1.ObjectMeta{Namespace: "a", Name: "q", UID: "00000000-0000-4000-8000-000000000002"})
	eventually(t, "recovery and a watch", func() bool { _, ok := s.Pod("a", "q"); return ok && s.Healthy() == nil && f.watching() == 1 })

	// The error of this one may last no longer than the relist it starts,
	// too short to be seen by polling on a busy machine: the relist it
	// asks for is what shows it was taken for one.
	f.send("not json\n")
	eventually(t, "the relist and recovery", func() bool {
		lists, _ := f.counts()
		return len(lists) == 3 && s.Healthy() == nil
	})
	// The first, and one after each bad event from the last resource
	// version seen.
	if lists, _ := f.counts(); !slices.Equal(lists, []string{"rv=0 continue=", "rv=1 continue=", "rv=2 continue="}) {
		t.Errorf("list requests %q, want the first and one after each bad event, not older than the last version seen", lists)
	}
}

// A pod whose metadata does not decode fails the list it is in: the
// source reports it rather than serving part of the node's pods.
func TestDecodeObjectMeta(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want *objectMeta
		err  bool
	}{
		{"partial object", `{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"p","namespace":"a","uid":"u1",
			"creationTimestamp":"2026-03-01T12:30:05Z","labels":{"k":"v"},"annotations":{"x":"y"},
			"ownerReferences":[{"apiVersion":"batch/v1","kind":"Job","name":"j","uid":"u0","controller":true},{"apiVersion":"v1","kind":"ConfigMap","name":"c","uid":"u2"}]}}`,
			&objectMeta{Namespace: "a", Name: "p", UID: "u1", Labels: map[string]string{"k": "v"}, Annotations: map[string]string{"x": "y"},
				Owners:  []Owner{{APIVersion: "batch/v1", Kind: "Job", Name: "j", Controller: true}, {APIVersion: "v1", Kind: "ConfigMap", Name: "c"}},
				Created: time.Date(2026, 3, 1, 12, 30, 5, 0, time.UTC)}, false},
		{"whole pod", `{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p","namespace":"a","uid":"u1","creationTimestamp":null},"spec":{"nodeName":"n"},"status":{"phase":"Running"}}`,
			&objectMeta{Namespace: "a", Name: "p", UID: "u1", Owners: []Owner{}}, false},
		{"bad timestamp", `{"metadata":{"uid":"u1","creationTimestamp":"yesterday"}}`, nil, true},
		{"labels not strings", `{"metadata":{"uid":"u1","labels":{"k":1}}}`, nil, true},
		{"not an object", `[]`, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodeObjectMeta(json.RawMessage(tt.in))
			if (err != nil) != tt.err {
				t.Fatalf("error %v, want error %v", err, tt.err)
			}
			if tt.err {
				return
			}
			if got.Namespace != tt.want.Namespace || got.Name != tt.want.Name || got.UID != tt.want.UID ||
				!got.Created.Equal(tt.want.Created) || fmt.Sprint(got.Labels, got.Annotations) != fmt.Sprint(tt.want.Labels, tt.want.Annotations) ||
				!slices.Equal(got.Owners, tt.want.Owners) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}
