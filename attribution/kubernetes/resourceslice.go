package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// SourceResourceSlices names the ResourceSlice fallback in the exporter's
// source label.
const SourceResourceSlices = "resourceslices"

// pciBusIDAttribute is the standard device attribute for a PCI address
// (KEP-4381; k8s.io/dynamic-resource-allocation/deviceattribute), which
// NVIDIA's DRA driver publishes for every GPU.
const pciBusIDAttribute = "resource.kubernetes.io/pciBusID"

var errSlicesNotListed = errors.New("ResourceSlice list has not completed yet")

var (
	resourceSlicesResource = schema.GroupVersionResource{Group: "resource.k8s.io", Version: "v1", Resource: "resourceslices"}
	resourceClaimsResource = schema.GroupVersionResource{Group: "resource.k8s.io", Version: "v1", Resource: "resourceclaims"}
)

// claimAccessTTL is how long a claim's allocation, as read, is taken for
// its own: an allocated claim's results do not change while pods use it,
// but a claim deleted and made again under its name is another.
const claimAccessTTL = time.Minute

// ResourceSliceIndex maps a DRA device, "<driver>/<pool>/<device>", to the
// device it is, as the driver published it in this node's ResourceSlices.
type ResourceSliceIndex map[string]DeviceRef

func sliceKey(driver, pool, device string) string { return driver + "/" + pool + "/" + device }

// NewResourceSliceIndex indexes the devices of node's ResourceSlices by
// their attributes: a GPU or MIG UUID in the attribute "uuid" (the driver's
// own domain, written bare or "<driver>/uuid"; NVIDIA's driver sets it on
// GPUs and MIG devices, k8s-dra-driver-gpu cmd/gpu-kubelet-plugin
// deviceinfo.go), else the standard PCI address, or AMD's driver's
// "pciAddr", where it is one device's alone. Only the pool generation
// that is highest counts: resource.k8s.io/v1 ResourcePool.Generation says
// "Consumers of ResourceSlices should only consider resources from the pool
// with the highest generation number".
func NewResourceSliceIndex(slices []*resourcev1.ResourceSlice, node string) ResourceSliceIndex {
	newest := map[string]int64{}
	for _, s := range slices {
		if s.Spec.NodeName == nil || *s.Spec.NodeName != node {
			continue
		}
		k := s.Spec.Driver + "/" + s.Spec.Pool.Name
		if g, ok := newest[k]; !ok || s.Spec.Pool.Generation > g {
			newest[k] = s.Spec.Pool.Generation
		}
	}
	idx := ResourceSliceIndex{}
	// A PCI address that several of a driver's devices publish is their
	// GPU's, and names none of them: AMD's driver gives every partition of
	// a GPU, and in its auto-partition mode every partition layout it
	// offers, the GPU's address (k8s-gpu-dra-driver docs/driver-attributes.md:
	// a partition's resource.kubernetes.io/pciBusID is the "PCI bus address
	// of the parent GPU. Identical for all partitions from the same physical
	// device"). Taken for a device, it would be partition 0.
	byAddress := map[string][]string{}
	for _, s := range slices {
		if s.Spec.NodeName == nil || *s.Spec.NodeName != node || newest[s.Spec.Driver+"/"+s.Spec.Pool.Name] != s.Spec.Pool.Generation {
			continue
		}
		for _, d := range s.Spec.Devices {
			ref, ok := sliceDeviceRef(s.Spec.Driver, d)
			if !ok {
				continue
			}
			key := sliceKey(s.Spec.Driver, s.Spec.Pool.Name, d.Name)
			idx[key] = ref
			if ref.PCIBusID != "" {
				a := s.Spec.Driver + "/" + ref.PCIBusID
				byAddress[a] = append(byAddress[a], key)
			}
		}
	}
	for _, keys := range byAddress {
		if len(keys) > 1 {
			for _, k := range keys {
				delete(idx, k)
			}
		}
	}
	return idx
}

// amdPartitionType is the "type" attribute AMD's DRA driver gives a GPU
// partition (k8s-gpu-dra-driver docs/driver-attributes.md, "Device types":
// "Partition: type = amdgpu-partition"), whose PCI address is its GPU's.
const amdPartitionType = "amdgpu-partition"

func sliceDeviceRef(driver string, d resourcev1.Device) (DeviceRef, bool) {
	str := func(name string) string {
		if a, ok := d.Attributes[resourcev1.QualifiedName(name)]; ok && a.StringValue != nil {
			return strings.TrimSpace(*a.StringValue)
		}
		return ""
	}
	var ref DeviceRef
	for _, name := range []string{"uuid", driver + "/uuid"} {
		if parseNVIDIAUUID(&ref, str(name)) {
			ref.ID = ref.UUID
			return ref, true
		}
	}
	// AMD's DRA driver publishes a whole GPU's address as the standard
	// attribute, as "pciAddr" in earlier releases and its auto-partition
	// devices; a partition's address, in either, is its GPU's (or, earlier,
	// only "parentPciAddr"), which names no one partition:
	// ROCm/k8s-gpu-dra-driver, cmd/gpu-kubeletplugin/deviceinfo.go.
	for _, name := range []string{"type", driver + "/type"} {
		if str(name) == amdPartitionType {
			return DeviceRef{}, false
		}
	}
	for _, name := range []string{pciBusIDAttribute, "pciAddr"} {
		if parsePCI(&ref, str(name)) {
			ref.ID = ref.PCIBusID
			return ref, true
		}
	}
	return DeviceRef{}, false
}

// ResourceSliceSource keeps this node's ResourceSlices from a watch through
// the API server: the fallback that identifies DRA devices whose CDI spec
// does not. It needs RBAC for resourceslices list and watch (a
// cluster-scoped resource) and asks only for the node's own slices, by the
// field selector spec.nodeName that ResourceSliceSpec.NodeName documents.
type ResourceSliceSource struct {
	node     string
	informer cache.SharedIndexInformer
	cancel   context.CancelFunc
	done     chan struct{}
	claims   dynamic.NamespaceableResourceInterface

	mu      sync.Mutex
	lastErr error
	// access is, by claim (namespace/name), its devices allocated with
	// admin access, as last read.
	access map[string]claimAccess
}

type claimAccess struct {
	admin map[string]bool // sliceKey
	err   error           // why the claim could not be read
	read  time.Time
}

// StartResourceSliceSource starts the watch of node's ResourceSlices. It
// returns at once; until the first list completes, Index reports an error.
// The dynamic client keeps client-go's typed clientsets (and their OpenAPI
// dependencies) out of the binary.
func StartResourceSliceSource(cfg *rest.Config, node string, logger *slog.Logger) (*ResourceSliceSource, error) {
	if node == "" {
		return nil, errors.New("ResourceSlice watch: no node name")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	cfg = rest.CopyConfig(cfg)
	if cfg.UserAgent == "" {
		cfg.UserAgent = "xpu_exporter"
	}
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("API server client for %s: %w", cfg.Host, err)
	}
	s := &ResourceSliceSource{node: node, done: make(chan struct{}), lastErr: errSlicesNotListed,
		claims: client.Resource(resourceClaimsResource), access: map[string]claimAccess{}}
	slices := client.Resource(resourceSlicesResource)
	selector := fields.OneTermEqualSelector("spec.nodeName", node).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = selector
			list, err := slices.List(ctx, opts)
			s.record(err)
			return list, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = selector
			w, err := slices.Watch(ctx, opts)
			s.record(err)
			return w, err
		},
	}
	s.informer = cache.NewSharedIndexInformer(lw, &unstructured.Unstructured{}, 0, cache.Indexers{})
	if err := s.informer.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		s.record(err)
		// At every retry: the resolver logs the source's failure and
		// recovery once each.
		logger.Debug("ResourceSlice watch failed, retrying", "err", err)
	}); err != nil {
		return nil, fmt.Errorf("ResourceSlice watch: %w", err)
	}
	ctx := klog.NewContext(context.Background(), logr.FromSlogHandler(logger.Handler()))
	ctx, s.cancel = context.WithCancel(ctx)
	go func() {
		defer close(s.done)
		s.informer.RunWithContext(ctx)
	}()
	return s, nil
}

// Index returns the node's devices as the slices last seen publish them,
// and an error while the watch has not listed yet or its last request
// failed (the index then holds what was seen before).
func (s *ResourceSliceSource) Index() (ResourceSliceIndex, error) {
	var slices []*resourcev1.ResourceSlice
	var bad int
	for _, o := range s.informer.GetStore().List() {
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		rs := &resourcev1.ResourceSlice{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, rs); err != nil {
			bad++
			continue
		}
		slices = append(slices, rs)
	}
	s.mu.Lock()
	err := s.lastErr
	s.mu.Unlock()
	if err == nil && bad > 0 {
		err = fmt.Errorf("ResourceSlice watch for node %s: %d slices not decodable as resource.k8s.io/v1", s.node, bad)
	}
	if err == nil && !s.informer.HasSynced() {
		err = errSlicesNotListed
	}
	return NewResourceSliceIndex(slices, s.node), err
}

// AdminDevices are the devices of the ResourceClaim namespace/name
// allocated with admin access, by "<driver>/<pool>/<device>": the claim's
// status.allocation.devices.results[].adminAccess (resource.k8s.io/v1
// DeviceRequestAllocationResult: "AdminAccess indicates that this device
// was allocated for administrative access"). Such a device is a monitoring
// or management service's, and "ignore[s] all ordinary claims to the
// device with respect to access modes and any resource allocations"
// (DeviceRequest.adminAccess): it is no allocation. The kubelet's
// pod-resources API does not say, so each claim is read from the API
// server (RBAC: get resourceclaims), once a minute at most.
func (s *ResourceSliceSource) AdminDevices(ctx context.Context, namespace, name string) (map[string]bool, error) {
	key := namespace + "/" + name
	now := time.Now()
	s.mu.Lock()
	a, ok := s.access[key]
	s.mu.Unlock()
	if ok && now.Sub(a.read) < claimAccessTTL {
		// A failure too: a claim RBAC forbids is not asked for again at
		// every scrape.
		return a.admin, a.err
	}
	admin, err := s.readAdminDevices(ctx, namespace, name)
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, v := range s.access {
		if now.Sub(v.read) > 10*claimAccessTTL {
			delete(s.access, k) // claims no pod has used for long
		}
	}
	s.access[key] = claimAccess{admin: admin, err: err, read: now}
	return admin, err
}

func (s *ResourceSliceSource) readAdminDevices(ctx context.Context, namespace, name string) (map[string]bool, error) {
	key := namespace + "/" + name
	u, err := s.claims.Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("ResourceClaim %s: %w", key, err)
	}
	claim := &resourcev1.ResourceClaim{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, claim); err != nil {
		return nil, fmt.Errorf("ResourceClaim %s: not decodable as resource.k8s.io/v1: %w", key, err)
	}
	admin := map[string]bool{}
	if al := claim.Status.Allocation; al != nil {
		for _, r := range al.Devices.Results {
			if r.AdminAccess != nil && *r.AdminAccess {
				admin[sliceKey(r.Driver, r.Pool, r.Device)] = true
			}
		}
	}
	return admin, nil
}

// AdminKey is how AdminDevices names a claim's device.
func AdminKey(cd ClaimDevice) string { return sliceKey(cd.Driver, cd.Pool, cd.Device) }

// Close stops the watch and waits for it to end.
func (s *ResourceSliceSource) Close() error {
	s.cancel()
	<-s.done
	return nil
}

func (s *ResourceSliceSource) record(err error) {
	if err != nil {
		err = fmt.Errorf("ResourceSlice watch for node %s: %w", s.node, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastErr = err
}

// NewResourceSliceSource watches node's ResourceSlices through the API
// server of kubeconfig, or of the cluster the exporter runs in when it is
// empty.
func NewResourceSliceSource(kubeconfig, node string, logger *slog.Logger) (*ResourceSliceSource, error) {
	cfg, err := restConfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	if cfg == nil {
		return nil, errors.New("ResourceSlice watch: no kubeconfig and not in a cluster")
	}
	return StartResourceSliceSource(cfg, node, logger)
}
