package kubernetes

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// ErrNotListedYet is what a watch source reports until its first list
// has completed: a state at start, not yet a failure with a cause.
var ErrNotListedYet = errors.New("list has not completed yet")

var errNotListed = fmt.Errorf("API server pod %w", ErrNotListedYet)

// Metadata-only pods: the server answers these with
// meta.k8s.io/v1 PartialObjectMetadataList and PartialObjectMetadata, the
// objects' metadata alone, as client-go's metadata client asks for them
// (k8s.io/client-go/metadata/metadata.go, whose Client "uses the
// meta.k8s.io/v1 PartialObjectMetadata resource to more efficiently
// retrieve just the necessary metadata"). The media type parameters
// as, g and v pick the representation, and plain application/json after
// it is the fallback of a server that has none: whole Pods, whose
// metadata is the same JSON (Kubernetes API concepts, "Receiving resources
// as Tables": "specify multiple content types in their Accept header to
// support fallback").
const (
	partialListAccept   = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
	partialObjectAccept = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
)

// APIServerSource keeps pod metadata from a watch of this node's pods
// through the API server. It asks for metadata only (PartialObjectMetadata:
// no specs, no status), which needs RBAC for pods list and watch and
// nothing else. Metadata carries no spec.nodeName, so the node is selected
// by a field selector on the list and watch requests themselves.
type APIServerSource struct {
	node string
	*podCache
	reflector *reflector

	mu      sync.Mutex
	lastErr error
}

// StartAPIServerSource starts a metadata-only watch of the pods on node.
// It returns at once; until the first list completes, Healthy reports an
// error.
func StartAPIServerSource(cfg *apiConfig, node string, logger *slog.Logger) (*APIServerSource, error) {
	if node == "" {
		return nil, errors.New("API server pod watch: no node name")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	client, err := newAPIClient(cfg)
	if err != nil {
		return nil, err
	}
	s := &APIServerSource{node: node, podCache: newPodCache(), lastErr: errNotListed}
	pods := collection{
		path:          "/api/v1/pods",
		fieldSelector: "spec.nodeName=" + node,
		listAccept:    partialListAccept,
		watchAccept:   partialObjectAccept,
	}
	s.reflector = startReflector(client, pods, &podStore{cache: s.podCache}, s.record, logger, "Pod metadata watch")
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
	if !s.reflector.hasListed() && err == nil {
		return errNotListed
	}
	return err
}

// Close stops the watch and waits for it to end.
func (s *APIServerSource) Close() error {
	s.reflector.close()
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

// podStore keeps the pods a reflector reads in the cache. Each list is a
// generation: the pods no list since has reported are swept.
type podStore struct {
	cache      *podCache
	generation uint64
}

func (p *podStore) replace(objects []json.RawMessage) error {
	metas := make([]*objectMeta, 0, len(objects))
	for _, raw := range objects {
		m, err := decodeObjectMeta(raw)
		if err != nil {
			return err
		}
		metas = append(metas, m)
	}
	p.generation++
	for _, m := range metas {
		p.cache.upsert(m, "", nil, false, p.generation)
	}
	p.cache.sweep(p.generation)
	return nil
}

func (p *podStore) update(raw json.RawMessage) error {
	m, err := decodeObjectMeta(raw)
	if err != nil {
		return err
	}
	p.cache.upsert(m, "", nil, false, p.generation)
	return nil
}

func (p *podStore) remove(raw json.RawMessage) error {
	m, err := decodeObjectMeta(raw)
	if err != nil {
		return err
	}
	p.cache.remove(m.UID)
	return nil
}

// wireObjectMeta is what the exporter reads of an object's metadata, by
// the JSON names of k8s.io/apimachinery's ObjectMeta and OwnerReference
// (pkg/apis/meta/v1/types.go).
type wireObjectMeta struct {
	Metadata struct {
		Namespace         string            `json:"namespace"`
		Name              string            `json:"name"`
		UID               string            `json:"uid"`
		Labels            map[string]string `json:"labels"`
		Annotations       map[string]string `json:"annotations"`
		CreationTimestamp string            `json:"creationTimestamp"`
		OwnerReferences   []struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Name       string `json:"name"`
			Controller *bool  `json:"controller"`
		} `json:"ownerReferences"`
	} `json:"metadata"`
}

// decodeObjectMeta reads the metadata of a pod, whole or partial.
func decodeObjectMeta(raw json.RawMessage) (*objectMeta, error) {
	var w wireObjectMeta
	if err := json.Unmarshal(raw, &w); err != nil {
		return nil, fmt.Errorf("pod metadata: %w", err)
	}
	md := &w.Metadata
	m := &objectMeta{
		Namespace: md.Namespace, Name: md.Name, UID: md.UID,
		Labels: md.Labels, Annotations: md.Annotations,
		Owners: make([]Owner, 0, len(md.OwnerReferences)),
	}
	for _, o := range md.OwnerReferences {
		m.Owners = append(m.Owners, Owner{
			APIVersion: o.APIVersion,
			Kind:       o.Kind,
			Name:       o.Name,
			Controller: o.Controller != nil && *o.Controller,
		})
	}
	// metav1.Time is RFC 3339 in JSON, at a second's precision
	// (pkg/apis/meta/v1/time.go, MarshalJSON).
	if md.CreationTimestamp != "" {
		t, err := time.Parse(time.RFC3339, md.CreationTimestamp)
		if err != nil {
			return nil, fmt.Errorf("pod %s/%s: creationTimestamp: %w", md.Namespace, md.Name, err)
		}
		m.Created = t
	}
	return m, nil
}
