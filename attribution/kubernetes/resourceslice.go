package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"time"
)

// SourceResourceSlices names the ResourceSlice fallback in the exporter's
// source label.
const SourceResourceSlices = "resourceslices"

// pciBusIDAttribute is the standard device attribute for a PCI address
// (KEP-4381; k8s.io/dynamic-resource-allocation/deviceattribute), which
// NVIDIA's DRA driver publishes for every GPU.
const pciBusIDAttribute = "resource.kubernetes.io/pciBusID"

var errSlicesNotListed = fmt.Errorf("ResourceSlice %w", ErrNotListedYet)

// claimAccessTTL is how long a claim's allocation, as read, is taken for
// its own: an allocated claim's results do not change while pods use it,
// but a claim deleted and made again under its name is another.
const claimAccessTTL = time.Minute

// ResourceSlice is what the exporter reads of a resource.k8s.io/v1
// ResourceSlice: the fields, by their JSON names, of
// k8s.io/api/resource/v1 types.go (ResourceSliceSpec, ResourcePool,
// Device, DeviceAttribute) that the index uses.
type ResourceSlice struct {
	Spec ResourceSliceSpec `json:"spec"`
}

// ResourceSliceSpec is a slice's spec: its driver, its pool, the node it
// is for (nil for a slice of several nodes) and its devices.
type ResourceSliceSpec struct {
	Driver   string        `json:"driver"`
	Pool     SlicePool     `json:"pool"`
	NodeName *string       `json:"nodeName"`
	Devices  []SliceDevice `json:"devices"`
}

// SlicePool is a slice's ResourcePool.
type SlicePool struct {
	Name               string `json:"name"`
	Generation         int64  `json:"generation"`
	ResourceSliceCount int64  `json:"resourceSliceCount"`
}

// SliceDevice is a device of a slice, with its attributes by their
// qualified names.
type SliceDevice struct {
	Name       string                          `json:"name"`
	Attributes map[string]SliceDeviceAttribute `json:"attributes"`
}

// SliceDeviceAttribute is a DeviceAttribute: one of its values is set.
type SliceDeviceAttribute struct {
	Int     *int64  `json:"int"`
	Bool    *bool   `json:"bool"`
	String  *string `json:"string"`
	Version *string `json:"version"`
}

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
func NewResourceSliceIndex(slices []*ResourceSlice, node string) ResourceSliceIndex {
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

func sliceDeviceRef(driver string, d SliceDevice) (DeviceRef, bool) {
	str := func(name string) string {
		if a, ok := d.Attributes[name]; ok && a.String != nil {
			return strings.TrimSpace(*a.String)
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
	node      string
	client    *apiClient
	slices    *sliceStore
	reflector *reflector

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
func StartResourceSliceSource(cfg *apiConfig, node string, logger *slog.Logger) (*ResourceSliceSource, error) {
	if node == "" {
		return nil, errors.New("ResourceSlice watch: no node name")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	client, err := newAPIClient(cfg)
	if err != nil {
		return nil, err
	}
	s := &ResourceSliceSource{node: node, client: client, slices: &sliceStore{byName: map[string]*ResourceSlice{}},
		lastErr: errSlicesNotListed, access: map[string]claimAccess{}}
	slices := collection{
		path:          "/apis/resource.k8s.io/v1/resourceslices",
		fieldSelector: "spec.nodeName=" + node,
		listAccept:    "application/json",
		watchAccept:   "application/json",
	}
	s.reflector = startReflector(client, slices, s.slices, s.record, logger, "ResourceSlice watch")
	return s, nil
}

// Index returns the node's devices as the slices last seen publish them,
// and an error while the watch has not listed yet or its last request
// failed (the index then holds what was seen before).
func (s *ResourceSliceSource) Index() (ResourceSliceIndex, error) {
	slices, bad := s.slices.list()
	s.mu.Lock()
	err := s.lastErr
	s.mu.Unlock()
	if err == nil && bad > 0 {
		err = fmt.Errorf("ResourceSlice watch for node %s: %d slices not decodable as resource.k8s.io/v1", s.node, bad)
	}
	if err == nil && !s.reflector.hasListed() {
		err = errSlicesNotListed
	}
	return NewResourceSliceIndex(slices, s.node), err
}

// sliceStore keeps the slices a reflector reads, by name; nil for a slice
// whose JSON does not fit ResourceSlice, which Index counts.
type sliceStore struct {
	mu     sync.Mutex
	byName map[string]*ResourceSlice
}

// decodeSlice reads a slice's name and, if it fits, the slice.
func decodeSlice(raw json.RawMessage) (string, *ResourceSlice, error) {
	var named struct {
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(raw, &named); err != nil {
		return "", nil, fmt.Errorf("ResourceSlice metadata: %w", err)
	}
	if named.Metadata.Name == "" {
		return "", nil, errors.New("ResourceSlice without a name")
	}
	rs := &ResourceSlice{}
	if json.Unmarshal(raw, rs) != nil {
		rs = nil
	}
	return named.Metadata.Name, rs, nil
}

func (st *sliceStore) replace(objects []json.RawMessage) error {
	byName := make(map[string]*ResourceSlice, len(objects))
	for _, raw := range objects {
		name, rs, err := decodeSlice(raw)
		if err != nil {
			return err
		}
		byName[name] = rs
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.byName = byName
	return nil
}

func (st *sliceStore) update(raw json.RawMessage) error {
	name, rs, err := decodeSlice(raw)
	if err != nil {
		return err
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.byName[name] = rs
	return nil
}

func (st *sliceStore) remove(raw json.RawMessage) error {
	name, _, err := decodeSlice(raw)
	if err != nil {
		return err
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	delete(st.byName, name)
	return nil
}

// list returns the slices held, and how many of them are not decodable.
func (st *sliceStore) list() ([]*ResourceSlice, int) {
	st.mu.Lock()
	defer st.mu.Unlock()
	out := make([]*ResourceSlice, 0, len(st.byName))
	bad := 0
	for _, rs := range st.byName {
		if rs == nil {
			bad++
			continue
		}
		out = append(out, rs)
	}
	return out, bad
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

// resourceClaim is what the exporter reads of a resource.k8s.io/v1
// ResourceClaim (k8s.io/api/resource/v1 types.go: ResourceClaimStatus,
// AllocationResult, DeviceAllocationResult, DeviceRequestAllocationResult).
type resourceClaim struct {
	Status struct {
		Allocation *struct {
			Devices struct {
				Results []struct {
					Driver      string `json:"driver"`
					Pool        string `json:"pool"`
					Device      string `json:"device"`
					AdminAccess *bool  `json:"adminAccess"`
				} `json:"results"`
			} `json:"devices"`
		} `json:"allocation"`
	} `json:"status"`
}

func (s *ResourceSliceSource) readAdminDevices(ctx context.Context, namespace, name string) (map[string]bool, error) {
	key := namespace + "/" + name
	// Names from the kubelet, put in a path: nothing but a name.
	for _, n := range []string{namespace, name} {
		if n == "" || n == "." || n == ".." || strings.Contains(n, "/") {
			return nil, fmt.Errorf("ResourceClaim %q: not a namespace and name", key)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	var claim resourceClaim
	path := "/apis/resource.k8s.io/v1/namespaces/" + namespace + "/resourceclaims/" + name
	if err := s.client.getJSON(ctx, path, url.Values{}, "application/json", maxObjectBytes, &claim); err != nil {
		return nil, fmt.Errorf("ResourceClaim %s: %w", key, err)
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
	s.reflector.close()
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
	cfg, err := apiServerConfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	if cfg == nil {
		return nil, errors.New("ResourceSlice watch: no kubeconfig and not in a cluster")
	}
	return StartResourceSliceSource(cfg, node, logger)
}
