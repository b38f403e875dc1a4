package kubernetes

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc"
	podsv1alpha1 "k8s.io/kubelet/pkg/apis/pods/v1alpha1"

	"github.com/xpu-exporter/xpu_exporter/attribution/kubernetes/internal/podwire"
)

// DefaultPodsAPISocket is where the kubelet serves its Pods API (KEP-4188,
// feature gate PodsAPI, beta and on by default since 1.37): the kubelet's
// pods-api directory under its root directory, socket name "pods-api"
// (pkg/kubelet/apis/pods), beside the pod-resources socket. The 1.35 alpha
// documentation named /var/lib/kubelet/pods/kubelet.sock instead.
const DefaultPodsAPISocket = "/var/lib/kubelet/pods-api/pods-api.sock"

// Re-watch backoff after the stream to the kubelet fails.
const (
	minRewatchDelay = 500 * time.Millisecond
	maxRewatchDelay = 30 * time.Second
)

// errNotSynced is the source's state until its watch has delivered: not
// listed yet, as the API server's before its first list, which the
// resolver does not log as a failure (a first read at start comes before
// any answer; found when it did, with the exporter on one CPU).
var errNotSynced = fmt.Errorf("kubelet Pods API pod %w", ErrNotListedYet)

// PodsAPISource keeps pod metadata from the kubelet Pods API WatchPods
// stream. The kubelet replays every pod as ADDED when a watch starts, so a
// broken stream is simply re-opened; pods deleted while it was down are
// dropped when the replay ends (INITIAL_SYNC_COMPLETE). A kubelet that
// predates that event leaves them cached, which costs memory but no wrong
// label: the cache is only asked about pods that pod-resources or a
// process's cgroup still shows.
type PodsAPISource struct {
	socket string
	logger *slog.Logger
	conn   *grpc.ClientConn
	api    podsv1alpha1.PodsClient
	*podCache
	cancel context.CancelFunc
	done   chan struct{}

	mu  sync.Mutex
	err error
}

// StartPodsAPISource starts watching the kubelet Pods API at socketPath.
// It returns at once; until the first event arrives, Healthy reports an
// error.
func StartPodsAPISource(socketPath string, logger *slog.Logger) (*PodsAPISource, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	conn, err := dialUnix(socketPath)
	if err != nil {
		return nil, fmt.Errorf("kubelet Pods API socket %q: %w", socketPath, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &PodsAPISource{
		socket:   socketPath,
		logger:   logger,
		conn:     conn,
		api:      podsv1alpha1.NewPodsClient(conn),
		podCache: newPodCache(),
		cancel:   cancel,
		done:     make(chan struct{}),
		err:      errNotSynced,
	}
	go s.run(ctx)
	return s, nil
}

// Name implements MetadataSource.
func (s *PodsAPISource) Name() string { return SourcePodsAPI }

// Healthy implements MetadataSource.
func (s *PodsAPISource) Healthy() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Close stops the watch and waits for it to end.
func (s *PodsAPISource) Close() error {
	s.cancel()
	<-s.done
	return s.conn.Close()
}

func (s *PodsAPISource) setErr(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err = err
}

func (s *PodsAPISource) run(ctx context.Context) {
	defer close(s.done)
	delay := minRewatchDelay
	var generation uint64
	failing := false
	for ctx.Err() == nil {
		generation++
		delivered, err := s.watch(ctx, generation)
		if ctx.Err() != nil {
			return
		}
		err = fmt.Errorf("kubelet Pods API watch on %s: %w", s.socket, err)
		s.setErr(err)
		if delivered {
			delay = minRewatchDelay
		}
		// A watch that fails again without having delivered anything is
		// the same outage: one warning for it, the retries at debug level.
		level := slog.LevelWarn
		if failing && !delivered {
			level = slog.LevelDebug
		}
		failing = true
		s.logger.Log(ctx, level, "Pod metadata watch failed, retrying", "err", err, "retry_in", delay)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		delay = min(delay*2, maxRewatchDelay)
	}
}

// watch runs one WatchPods stream until it fails, and says whether it
// delivered anything (so that the retry backoff starts over).
func (s *PodsAPISource) watch(ctx context.Context, generation uint64) (delivered bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Wait for the kubelet to be back rather than failing at once: this
	// is a background stream, and the backoff in run paces the retries.
	stream, err := s.api.WatchPods(ctx, &podsv1alpha1.WatchPodsRequest{}, grpc.WaitForReady(true))
	if err != nil {
		return false, err
	}
	for {
		ev, err := stream.Recv()
		if err != nil {
			return delivered, err
		}
		if !delivered {
			delivered = true
			s.setErr(nil)
		}
		if err := s.apply(ev, generation); err != nil {
			// One undecodable pod loses only that pod's metadata.
			s.logger.Warn("Ignoring a kubelet Pods API event", "err", err)
		}
	}
}

func (s *PodsAPISource) apply(ev *podsv1alpha1.WatchPodsEvent, generation uint64) error {
	if ev.GetType() == podsv1alpha1.EventType_INITIAL_SYNC_COMPLETE {
		s.podCache.sweep(generation)
		return nil
	}
	pod, err := decodePod(ev.GetPod())
	if err != nil {
		return fmt.Errorf("%s event: decoding pod: %w", ev.GetType(), err)
	}
	switch ev.GetType() {
	case podsv1alpha1.EventType_ADDED, podsv1alpha1.EventType_MODIFIED:
		ended := pod.phase == podwire.PhaseSucceeded || pod.phase == podwire.PhaseFailed
		s.podCache.upsert(&pod.meta, pod.podIP, pod.containers, ended, generation)
	case podsv1alpha1.EventType_DELETED:
		s.podCache.remove(pod.meta.UID)
	default:
		return fmt.Errorf("unknown event type %v for pod %s/%s", ev.GetType(), pod.meta.Namespace, pod.meta.Name)
	}
	return nil
}
