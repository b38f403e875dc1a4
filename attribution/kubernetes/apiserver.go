package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

var podsResource = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

var errNotListed = errors.New("API server pod list has not completed yet")

// APIServerSource keeps pod metadata from a watch of this node's pods
// through the API server. It asks for metadata only (PartialObjectMetadata:
// no specs, no status), which needs RBAC for pods get, list and watch and
// nothing else. Metadata carries no spec.nodeName, so the node is selected
// by a field selector on the list and watch requests themselves.
type APIServerSource struct {
	node   string
	logger *slog.Logger
	*podCache
	informer cache.SharedIndexInformer
	cancel   context.CancelFunc
	done     chan struct{}

	mu      sync.Mutex
	lastErr error
}

// StartAPIServerSource starts a metadata-only watch of the pods on node.
// It returns at once; until the first list completes, Healthy reports an
// error.
func StartAPIServerSource(cfg *rest.Config, node string, logger *slog.Logger) (*APIServerSource, error) {
	if node == "" {
		return nil, errors.New("API server pod watch: no node name")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	cfg = rest.CopyConfig(cfg)
	if cfg.UserAgent == "" {
		cfg.UserAgent = "xpu_exporter"
	}
	client, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("API server client for %s: %w", cfg.Host, err)
	}
	s := &APIServerSource{
		node:     node,
		logger:   logger,
		podCache: newPodCache(),
		done:     make(chan struct{}),
		lastErr:  errNotListed,
	}
	pods := client.Resource(podsResource)
	selector := fields.OneTermEqualSelector("spec.nodeName", node).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = selector
			list, err := pods.List(ctx, opts)
			s.record(err)
			return list, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = selector
			w, err := pods.Watch(ctx, opts)
			s.record(err)
			return w, err
		},
	}
	s.informer = cache.NewSharedIndexInformer(
		cache.ToListWatcherWithWatchListSemantics(lw, client),
		&metav1.PartialObjectMetadata{}, 0, cache.Indexers{})
	if err := s.informer.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		s.record(err)
		// At every retry of client-go's backoff: the resolver logs the
		// source's failure and its recovery once each (Healthy), where
		// this logged two lines a minute for as long as RBAC was missing
		// (probe14-k8s D4).
		logger.Debug("Pod metadata watch failed, retrying", "err", err)
	}); err != nil {
		return nil, fmt.Errorf("API server pod watch: %w", err)
	}
	if _, err := s.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    s.upsert,
		UpdateFunc: func(_, obj any) { s.upsert(obj) },
		DeleteFunc: s.delete,
	}); err != nil {
		return nil, fmt.Errorf("API server pod watch: %w", err)
	}
	// client-go logs through klog; give this informer the exporter's logger.
	ctx := klog.NewContext(context.Background(), logr.FromSlogHandler(logger.Handler()))
	ctx, cancel := context.WithCancel(ctx)
	s.cancel = cancel
	go func() {
		defer close(s.done)
		s.informer.RunWithContext(ctx)
	}()
	return s, nil
}

// Name implements MetadataSource.
func (s *APIServerSource) Name() string { return SourceAPIServer }

// Healthy implements MetadataSource: an error until the first list has
// completed, and after any list or watch request fails until one succeeds.
func (s *APIServerSource) Healthy() error {
	s.mu.Lock()
	err := s.lastErr
	s.mu.Unlock()
	if !s.informer.HasSynced() && err == nil {
		return errNotListed
	}
	return err
}

// Close stops the watch and waits for it to end.
func (s *APIServerSource) Close() error {
	s.cancel()
	<-s.done
	return nil
}

func (s *APIServerSource) record(err error) {
	if err != nil {
		err = fmt.Errorf("API server pod watch for node %s: %w", s.node, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastErr = err
}

func (s *APIServerSource) upsert(obj any) {
	if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
		s.podCache.upsert(objectMetaOf(&m.ObjectMeta), "", nil, false, 0)
	}
}

func (s *APIServerSource) delete(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
		s.podCache.remove(string(m.UID))
	}
}

// objectMetaOf is what the exporter reads of m.
func objectMetaOf(m *metav1.ObjectMeta) *objectMeta {
	owners := make([]Owner, 0, len(m.OwnerReferences))
	for _, o := range m.OwnerReferences {
		owners = append(owners, Owner{
			APIVersion: o.APIVersion,
			Kind:       o.Kind,
			Name:       o.Name,
			Controller: o.Controller != nil && *o.Controller,
		})
	}
	return &objectMeta{
		Namespace: m.Namespace, Name: m.Name, UID: string(m.UID),
		Labels: m.Labels, Annotations: m.Annotations,
		Owners: owners, Created: m.CreationTimestamp.Time,
	}
}
