package kubernetes

import (
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"
)

// mirrorPodAnnotation holds, on the API server's mirror of a static pod,
// the UID the kubelet knows the pod by, which is the one in its cgroup path.
const mirrorPodAnnotation = "kubernetes.io/config.mirror"

// PodMeta is what the exporter knows about a pod beyond its name.
type PodMeta struct {
	UID       string
	Namespace string
	Name      string
	// Labels are all the pod's labels. They are shared: do not modify.
	Labels map[string]string
	// Workload and WorkloadKind name what runs the pod (ResolveWorkload).
	Workload     string
	WorkloadKind string
	// Annotations are all the pod's annotations (shared: do not modify);
	// they say which pods serve an inference engine.
	Annotations map[string]string
	// IP is the pod's IP and Containers its containers' images and ports,
	// known from the kubelet Pods API only: the API server source watches
	// metadata, which has neither.
	IP         string
	Containers []ContainerMeta
	// Ended says the pod's phase is Succeeded or Failed: every container
	// has terminated for good ("Pod phase", Kubernetes pod lifecycle). The
	// kubelet Pods API tells; the API server source's metadata does not,
	// and leaves it false.
	Ended bool
}

// ContainerMeta is what engine discovery and process attribution need of a
// container.
type ContainerMeta struct {
	Name  string
	Image string
	Ports []int32
	// ID is the runtime's ID of the running container (status.
	// containerStatuses[].containerID without its "containerd://" or
	// "cri-o://" scheme), as it appears in its processes' cgroup paths;
	// empty before it runs.
	ID string
}

// MetadataSource is a cache of pod metadata for the node, kept current by a
// watch in the background, so lookups never wait on the network.
type MetadataSource interface {
	// Name names the source for logs and the source label of the
	// exporter's attribution self-metrics.
	Name() string
	// Pod looks a pod up by namespace and name.
	Pod(namespace, name string) (PodMeta, bool)
	// PodByUID looks a pod up by UID, as found in a process's cgroup path.
	PodByUID(uid string) (PodMeta, bool)
	// Pods lists every pod known, for discovering inference engines.
	Pods() []PodMeta
	// Healthy is nil while the cache is being kept current, else why not.
	Healthy() error
	// Close stops the watch.
	Close() error
}

var (
	_ MetadataSource = (*PodsAPISource)(nil)
	_ MetadataSource = (*APIServerSource)(nil)
	_ MetadataSource = NoMetadata{}
)

// Source names.
const (
	SourcePodsAPI   = "kubelet-pods-api"
	SourceAPIServer = "apiserver"
	SourceNone      = "none"
)

// MetadataConfig says where pod metadata may come from.
type MetadataConfig struct {
	// PodsAPISocket is the kubelet Pods API socket; empty skips the kubelet.
	PodsAPISocket string
	// Kubeconfig is a kubeconfig file for the API server. Empty means the
	// in-cluster configuration, when the exporter runs in a pod.
	Kubeconfig string
	// NodeName scopes the API server watch to this node's pods (normally
	// from the downward API, spec.nodeName). Without it the API server is
	// not used: the exporter never watches every pod of a cluster.
	NodeName string
	Logger   *slog.Logger
	// PodsAPIRecheck is how often a Pods API socket that is not there is
	// looked for again; 0 is every 10 s.
	PodsAPIRecheck time.Duration
}

// NewMetadataSource starts the first source that the configuration and the
// node allow, in this order:
//
//  1. the kubelet Pods API, when its socket exists: node-local, no RBAC;
//  2. a metadata-only watch of this node's pods through the API server,
//     when NodeName is set and a kubeconfig is given or the exporter runs
//     in a cluster;
//  3. none: namespace, pod and container still come from pod-resources.
//
// Where the Pods API socket is configured but not there, it is looked for
// again every PodsAPIRecheck, and used from when it appears: a kubelet
// upgraded under a running exporter (the node drained with
// --ignore-daemonsets) starts serving it, which the chart's empty socket
// directory is there for. A kubeconfig that is given but cannot be loaded
// is an error rather than a silent fall-through to no metadata.
func NewMetadataSource(cfg MetadataConfig) (MetadataSource, error) {
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if cfg.PodsAPISocket != "" {
		ok, err := isSocket(cfg.PodsAPISocket)
		switch {
		case ok:
			logger.Info("Pod metadata from the kubelet Pods API", "socket", cfg.PodsAPISocket)
			return StartPodsAPISource(cfg.PodsAPISocket, logger)
		case err != nil:
			logger.Info("Kubelet Pods API not available; looked for again until it is", "socket", cfg.PodsAPISocket, "err", err)
		}
		fallback, err := newFallbackMetadata(cfg, logger)
		if err != nil {
			return nil, err
		}
		return awaitPodsAPI(cfg, fallback, logger), nil
	}
	return newFallbackMetadata(cfg, logger)
}

// newFallbackMetadata is the source without the kubelet Pods API: the API
// server's, or none.
func newFallbackMetadata(cfg MetadataConfig, logger *slog.Logger) (MetadataSource, error) {
	if cfg.NodeName == "" {
		logger.Info("No pod metadata: no kubelet Pods API, and no node name to scope an API server watch to")
		return NoMetadata{}, nil
	}
	apiCfg, err := apiServerConfig(cfg.Kubeconfig)
	if err != nil {
		return nil, err
	}
	if apiCfg == nil {
		logger.Info("No pod metadata: no kubelet Pods API, not in a cluster and no kubeconfig given")
		return NoMetadata{}, nil
	}
	logger.Info("Pod metadata from the API server", "host", apiCfg.Host, "node", cfg.NodeName)
	return StartAPIServerSource(apiCfg, cfg.NodeName, logger)
}

// laterPodsAPI is the metadata of another source until the kubelet Pods
// API socket appears, then the Pods API's.
type laterPodsAPI struct {
	mu    sync.Mutex
	cur   MetadataSource
	stop  chan struct{}
	done  chan struct{}
	close sync.Once
}

func awaitPodsAPI(cfg MetadataConfig, fallback MetadataSource, logger *slog.Logger) *laterPodsAPI {
	every := cfg.PodsAPIRecheck
	if every <= 0 {
		every = 10 * time.Second
	}
	l := &laterPodsAPI{cur: fallback, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-l.stop:
				return
			case <-t.C:
			}
			if ok, _ := isSocket(cfg.PodsAPISocket); !ok {
				continue
			}
			s, err := StartPodsAPISource(cfg.PodsAPISocket, logger)
			if err != nil {
				logger.Warn("Kubelet Pods API socket appeared but cannot be used; looked at again", "socket", cfg.PodsAPISocket, "err", err)
				continue
			}
			// The old source serves until the new one has listed the
			// pods: swapped at once, a scrape between lost the pods'
			// metadata (review13 R13-4). A socket no kubelet answers
			// on (left by one restarting) is given up on, and looked
			// at again.
			if !l.synced(s, every) {
				_ = s.Close()
				continue
			}
			l.mu.Lock()
			old := l.cur
			l.cur = s
			l.mu.Unlock()
			logger.Info("Kubelet Pods API appeared: pod metadata from it now", "socket", cfg.PodsAPISocket, "was", old.Name())
			_ = old.Close()
			return
		}
	}()
	return l
}

// synced waits up to every for s to have listed the pods; false when it
// has not, or the source is being closed.
func (l *laterPodsAPI) synced(s MetadataSource, every time.Duration) bool {
	deadline := time.After(every)
	poll := time.NewTicker(every / 20)
	defer poll.Stop()
	for s.Healthy() != nil {
		select {
		case <-l.stop:
			return false
		case <-deadline:
			return false
		case <-poll.C:
		}
	}
	return true
}

func (l *laterPodsAPI) current() MetadataSource {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cur
}

// Name implements MetadataSource: the source in use.
func (l *laterPodsAPI) Name() string { return l.current().Name() }

// Pod implements MetadataSource.
func (l *laterPodsAPI) Pod(namespace, name string) (PodMeta, bool) {
	return l.current().Pod(namespace, name)
}

// PodByUID implements MetadataSource.
func (l *laterPodsAPI) PodByUID(uid string) (PodMeta, bool) { return l.current().PodByUID(uid) }

// Pods implements MetadataSource.
func (l *laterPodsAPI) Pods() []PodMeta { return l.current().Pods() }

// Healthy implements MetadataSource.
func (l *laterPodsAPI) Healthy() error { return l.current().Healthy() }

// Close implements MetadataSource: it stops looking for the socket, and
// the source in use.
func (l *laterPodsAPI) Close() error {
	var err error
	l.close.Do(func() {
		close(l.stop)
		<-l.done
		err = l.current().Close()
	})
	return err
}

// apiServerConfig loads kubeconfig, or the in-cluster configuration when
// it is empty. It returns nil, nil when there is no kubeconfig and no
// cluster.
func apiServerConfig(kubeconfig string) (*apiConfig, error) {
	if kubeconfig != "" {
		c, err := loadKubeconfig(kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig %q: %w", kubeconfig, err)
		}
		return c, nil
	}
	return inClusterConfig()
}

func isSocket(path string) (bool, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return false, err
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return false, fmt.Errorf("%s is not a socket", path)
	}
	return true, nil
}

// NoMetadata is the source used when there is none: it knows no pod.
type NoMetadata struct{}

// Name implements MetadataSource.
func (NoMetadata) Name() string { return SourceNone }

// Pod implements MetadataSource: no pod is known.
func (NoMetadata) Pod(string, string) (PodMeta, bool) { return PodMeta{}, false }

// PodByUID implements MetadataSource: no pod is known.
func (NoMetadata) PodByUID(string) (PodMeta, bool) { return PodMeta{}, false }

// Pods implements MetadataSource: no pod is known.
func (NoMetadata) Pods() []PodMeta { return nil }

// Healthy implements MetadataSource: having no source is not a failure.
func (NoMetadata) Healthy() error { return nil }

// Close implements MetadataSource.
func (NoMetadata) Close() error { return nil }

// objectMeta is what the exporter reads of a pod's object metadata
// (k8s.io/apimachinery's ObjectMeta), from either source.
type objectMeta struct {
	Namespace, Name, UID string
	Labels, Annotations  map[string]string
	Owners               []Owner // metadata.ownerReferences
	Created              time.Time
}

// podMeta builds a PodMeta from a pod's object metadata and IP.
func podMeta(m *objectMeta, ip string, containers []ContainerMeta, ended bool) PodMeta {
	workload, kind := ResolveWorkload(m.Name, m.Labels, m.Owners)
	return PodMeta{
		UID:          m.UID,
		Namespace:    m.Namespace,
		Name:         m.Name,
		Labels:       m.Labels,
		Workload:     workload,
		WorkloadKind: kind,
		Annotations:  m.Annotations,
		IP:           ip,
		Containers:   containers,
		Ended:        ended,
	}
}

type podKey struct{ namespace, name string }

type cachedPod struct {
	meta    PodMeta
	created time.Time
	// altUID is the kubelet's UID of a static pod's mirror.
	altUID string
	// generation is the watch stream that last reported the pod.
	generation uint64
}

// podCache indexes pods by UID and by namespace/name. A StatefulSet pod
// that is replaced keeps its name under a new UID, and the kubelet may
// still be reporting the old one, terminating, after the new one arrives.
// So the name index points at the most recently created of them, and a
// deletion clears it only if it is still the deleted pod's.
type podCache struct {
	mu     sync.RWMutex
	byUID  map[string]*cachedPod
	byName map[podKey]string
	alias  map[string]string // static pod UID → mirror pod UID
}

func newPodCache() *podCache {
	return &podCache{
		byUID:  map[string]*cachedPod{},
		byName: map[podKey]string{},
		alias:  map[string]string{},
	}
}

func (c *podCache) upsert(m *objectMeta, ip string, containers []ContainerMeta, ended bool, generation uint64) {
	if m.UID == "" {
		return
	}
	// Keyed in lower case, as PodByUID looks UIDs up: a cgroup path may
	// spell one in either case, and a UID that is not lower case (none
	// the API server makes is) was never found.
	p := &cachedPod{
		meta:       podMeta(m, ip, containers, ended),
		created:    m.Created,
		altUID:     strings.ToLower(m.Annotations[mirrorPodAnnotation]),
		generation: generation,
	}
	uid := strings.ToLower(m.UID)
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.byUID[uid]; ok && old.altUID != "" {
		delete(c.alias, old.altUID)
	}
	c.byUID[uid] = p
	key := podKey{m.Namespace, m.Name}
	if other, ok := c.byUID[c.byName[key]]; !ok || other == p || !other.created.After(p.created) {
		c.byName[key] = uid
	}
	if p.altUID != "" && p.altUID != uid {
		c.alias[p.altUID] = uid
	}
}

func (c *podCache) remove(uid string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.removeLocked(strings.ToLower(uid))
}

func (c *podCache) removeLocked(uid string) {
	p, ok := c.byUID[uid]
	if !ok {
		return
	}
	delete(c.byUID, uid)
	k := podKey{p.meta.Namespace, p.meta.Name}
	if c.byName[k] == uid {
		delete(c.byName, k)
	}
	if p.altUID != "" && c.alias[p.altUID] == uid {
		delete(c.alias, p.altUID)
	}
}

// sweep removes the pods no stream since generation has reported: after a
// re-watch has replayed every pod, those are the ones deleted while the
// watch was down.
func (c *podCache) sweep(generation uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for uid, p := range c.byUID {
		if p.generation < generation {
			c.removeLocked(uid)
		}
	}
}

// Pods, Pod and PodByUID implement MetadataSource for the sources that
// embed the cache.

// Pods lists every pod known.
func (c *podCache) Pods() []PodMeta {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]PodMeta, 0, len(c.byName))
	for _, uid := range c.byName {
		out = append(out, c.byUID[uid].meta)
	}
	return out
}

// Pod looks a pod up by namespace and name.
func (c *podCache) Pod(namespace, name string) (PodMeta, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	uid, ok := c.byName[podKey{namespace, name}]
	if !ok {
		return PodMeta{}, false
	}
	return c.byUID[uid].meta, true
}

// PodByUID accepts a UID in any letter case, as cgroup paths may carry it.
// For a static pod, the UID in its cgroup path is the kubelet's, which the
// API server's mirror pod carries in an annotation; both find the pod.
func (c *podCache) PodByUID(uid string) (PodMeta, bool) {
	uid = strings.ToLower(uid)
	c.mu.RLock()
	defer c.mu.RUnlock()
	if p, ok := c.byUID[uid]; ok {
		return p.meta, true
	}
	if mirror, ok := c.alias[uid]; ok {
		return c.byUID[mirror].meta, true
	}
	return PodMeta{}, false
}

func (c *podCache) len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.byUID)
}
