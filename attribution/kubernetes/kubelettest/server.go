package kubelettest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"

	"google.golang.org/grpc"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
	podsv1alpha1 "k8s.io/kubelet/pkg/apis/pods/v1alpha1"
)

// Socket paths under the fake kubelet's directory, as under the kubelet's
// root directory (/var/lib/kubelet).
const (
	PodResourcesSocketPath = "pod-resources/kubelet.sock"
	PodsAPISocketPath      = "pods-api/pods-api.sock"
)

// maxSocketPath is the longest path a unix socket address can hold on
// Linux (sun_path is 108 bytes with its terminating NUL).
const maxSocketPath = 107

// watchBuffer is how many events a slow watcher may fall behind before its
// stream is ended. Ending it is what the client must cope with anyway (it
// re-watches and gets every pod again); dropping events would not be.
const watchBuffer = 1024

// Server is a fake kubelet. It is safe for concurrent use.
type Server struct {
	dir     string
	podsAPI bool

	mu       sync.Mutex
	node     string
	pods     []Pod
	alloc    []Devices
	watchers map[*watcher]struct{}
	hang     chan struct{} // non-nil while calls hang; closed to release them
	servers  []*grpc.Server
	running  bool
}

// Option configures a Server.
type Option func(*Server)

// WithoutPodsAPI serves pod-resources only, like a kubelet older than 1.37
// or one with the PodsAPI feature gate off.
func WithoutPodsAPI() Option { return func(s *Server) { s.podsAPI = false } }

// New starts a fake kubelet serving fx, with its sockets under dir (which
// must be short enough for unix socket paths: keep it near /tmp).
func New(dir string, fx *Fixture, opts ...Option) (*Server, error) {
	if err := fx.Validate(); err != nil {
		return nil, err
	}
	fx = fx.clone()
	s := &Server{
		dir:      dir,
		podsAPI:  true,
		node:     fx.Node,
		pods:     fx.Pods,
		alloc:    fx.Allocatable,
		watchers: map[*watcher]struct{}{},
	}
	for _, o := range opts {
		o(s)
	}
	if err := s.Restart(); err != nil {
		return nil, err
	}
	return s, nil
}

// PodResourcesSocket is the pod-resources socket's path.
func (s *Server) PodResourcesSocket() string { return filepath.Join(s.dir, PodResourcesSocketPath) }

// PodsAPISocket is the Pods API socket's path; nothing listens there when
// the server was made WithoutPodsAPI.
func (s *Server) PodsAPISocket() string { return filepath.Join(s.dir, PodsAPISocketPath) }

// Restart starts serving again after Stop, with the state the server had:
// the kubelet coming back. Calling it on a running server does nothing.
func (s *Server) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running {
		return nil
	}
	prLis, err := listen(s.PodResourcesSocket())
	if err != nil {
		return err
	}
	pr := grpc.NewServer()
	podresourcesv1.RegisterPodResourcesListerServer(pr, &podResourcesService{s: s})
	s.servers = []*grpc.Server{pr}
	go func() { _ = pr.Serve(prLis) }()

	if s.podsAPI {
		podsLis, err := listen(s.PodsAPISocket())
		if err != nil {
			pr.Stop()
			return err
		}
		pods := grpc.NewServer()
		podsv1alpha1.RegisterPodsServer(pods, &podsService{s: s})
		s.servers = append(s.servers, pods)
		go func() { _ = pods.Serve(podsLis) }()
	}
	s.running = true
	return nil
}

// Stop stops serving and removes the sockets, ending every call and watch
// in flight: the kubelet going away. It also ends SetHang. Restart brings
// the kubelet back.
func (s *Server) Stop() {
	s.mu.Lock()
	servers := s.servers
	s.servers, s.running = nil, false
	s.releaseHangLocked()
	s.mu.Unlock()
	// Outside the lock: stopping waits for handlers, which take it.
	for _, srv := range servers {
		srv.Stop()
	}
}

func listen(path string) (net.Listener, error) {
	if len(path) > maxSocketPath {
		return nil, fmt.Errorf("socket path %s is longer than %d bytes", path, maxSocketPath)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	return net.Listen("unix", path)
}

// SetHang makes every unary call block until its deadline passes (or until
// SetHang(false)): a kubelet that accepts connections but does not answer.
func (s *Server) SetHang(hang bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case hang && s.hang == nil:
		s.hang = make(chan struct{})
	case !hang:
		s.releaseHangLocked()
	}
}

func (s *Server) releaseHangLocked() {
	if s.hang != nil {
		close(s.hang)
		s.hang = nil
	}
}

// wait blocks while the server hangs.
func (s *Server) wait(ctx context.Context) error {
	s.mu.Lock()
	hang := s.hang
	s.mu.Unlock()
	if hang == nil {
		return nil
	}
	select {
	case <-hang:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// SetPod adds p, or replaces the pod of the same namespace and name, and
// tells watchers (ADDED, or MODIFIED when the UID is unchanged; a new UID
// under an old name is a new pod, so the old one is DELETED first).
func (s *Server) SetPod(p Pod) error {
	if err := p.validate(); err != nil {
		return err
	}
	p = p.clone()
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, old := range s.pods {
		if old.UID == p.UID && (old.Namespace != p.Namespace || old.Name != p.Name) {
			return fmt.Errorf("uid %s is already pod %s/%s", p.UID, old.Namespace, old.Name)
		}
		if old.Namespace != p.Namespace || old.Name != p.Name {
			continue
		}
		if old.UID == p.UID {
			s.pods[i] = p
			s.broadcastLocked(podsv1alpha1.EventType_MODIFIED, p)
			return nil
		}
		s.pods = append(s.pods[:i], s.pods[i+1:]...)
		s.broadcastLocked(podsv1alpha1.EventType_DELETED, old)
		break
	}
	s.pods = append(s.pods, p)
	s.broadcastLocked(podsv1alpha1.EventType_ADDED, p)
	return nil
}

// RemovePod removes a pod and tells watchers (DELETED). It reports whether
// the pod existed.
func (s *Server) RemovePod(namespace, name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, p := range s.pods {
		if p.Namespace == namespace && p.Name == name {
			s.pods = append(s.pods[:i], s.pods[i+1:]...)
			s.broadcastLocked(podsv1alpha1.EventType_DELETED, p)
			return true
		}
	}
	return false
}

// SetAllocatable replaces the devices the device plugins advertise.
func (s *Server) SetAllocatable(devices []Devices) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.alloc = cloneDevices(devices)
}

// snapshot copies the state under the lock, for a call to answer from.
func (s *Server) snapshot() (node string, pods []Pod, alloc []Devices) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.node, append([]Pod(nil), s.pods...), s.alloc
}

// watcher is one WatchPods stream's queue of events.
type watcher struct {
	events chan *podsv1alpha1.WatchPodsEvent
	// overflow is closed when the watcher fell too far behind.
	overflow chan struct{}
}

// subscribe registers a watcher and returns the pods it must first be sent,
// atomically, so that no change is missed or seen twice.
func (s *Server) subscribe() (*watcher, string, []Pod) {
	w := &watcher{
		events:   make(chan *podsv1alpha1.WatchPodsEvent, watchBuffer),
		overflow: make(chan struct{}),
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.watchers[w] = struct{}{}
	return w, s.node, append([]Pod(nil), s.pods...)
}

func (s *Server) unsubscribe(w *watcher) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.watchers, w)
}

func (s *Server) broadcastLocked(t podsv1alpha1.EventType, p Pod) {
	b := p.protobuf(s.node)
	for w := range s.watchers {
		select {
		case w.events <- &podsv1alpha1.WatchPodsEvent{Type: t, Pod: b}:
		default:
			s.dropLocked(w)
		}
	}
}

func (s *Server) dropLocked(w *watcher) {
	delete(s.watchers, w)
	close(w.overflow)
}
