package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	"sigs.k8s.io/yaml"
)

const sliceFixture = "../../fixtures/resourceslices/a100-dra-node.yaml"

func loadSlices(t *testing.T) *resourcev1.ResourceSliceList {
	t.Helper()
	b, err := os.ReadFile(sliceFixture)
	if err != nil {
		t.Fatal(err)
	}
	var list resourcev1.ResourceSliceList
	if err := yaml.UnmarshalStrict(b, &list); err != nil {
		t.Fatal(err)
	}
	return &list
}

// ourSlices are slices of k8s.io/api's types as the exporter reads their
// JSON: the exporter's types and their JSON names against the real ones.
func ourSlices(t *testing.T, slices ...*resourcev1.ResourceSlice) []*ResourceSlice {
	t.Helper()
	var out []*ResourceSlice
	for _, rs := range slices {
		b, err := json.Marshal(rs)
		if err != nil {
			t.Fatal(err)
		}
		ours := &ResourceSlice{}
		if err := json.Unmarshal(b, ours); err != nil {
			t.Fatalf("slice %s: %v", rs.Name, err)
		}
		out = append(out, ours)
	}
	return out
}

// wantSliceIndex is what a100-dra-node's slices say, worked out from the
// fixture: generation 2 is the pool's newest, so gpu-1 is the UUID there
// and not generation 1's; the VFIO device has only a PCI address; other-node
// is left out.
var wantSliceIndex = ResourceSliceIndex{
	"gpu.nvidia.com/a100-dra-node/gpu-1":                 {Vendor: VendorNVIDIA, ID: draGPUs[1].UUID, UUID: draGPUs[1].UUID},
	"gpu.nvidia.com/a100-dra-node/gpu-2":                 {Vendor: VendorNVIDIA, ID: draGPUs[2].UUID, UUID: draGPUs[2].UUID},
	"gpu.nvidia.com/a100-dra-node/gpu-3-mig-1g10gb-19-6": {Vendor: VendorNVIDIA, ID: "MIG-0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c41", UUID: "MIG-0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c41"},
	"gpu.nvidia.com/a100-dra-node/gpu-vfio-0":            {ID: "0000:07:00.0", PCIBusID: "0000:07:00.0"},
}

func TestNewResourceSliceIndex(t *testing.T) {
	list := loadSlices(t)
	var slices []*resourcev1.ResourceSlice
	for i := range list.Items {
		slices = append(slices, &list.Items[i])
	}
	got := NewResourceSliceIndex(ourSlices(t, slices...), "a100-dra-node")
	if len(got) != len(wantSliceIndex) {
		t.Errorf("%d devices, want %d: %v", len(got), len(wantSliceIndex), got)
	}
	for k, want := range wantSliceIndex {
		if got[k] != want {
			t.Errorf("%s = %+v, want %+v", k, got[k], want)
		}
	}
}

// fakeSliceServer answers list requests for resourceslices with the fixture
// (only for the field selector of the node), and holds watches open.
type fakeSliceServer struct {
	mu       sync.Mutex
	failing  bool
	selector string
	// extra are raw slices listed after the fixture's.
	extra []string
}

func (f *fakeSliceServer) ServeHTTP(w http.ResponseWriter, r *http.Request, list *resourcev1.ResourceSliceList) {
	f.mu.Lock()
	failing := f.failing
	f.selector = r.URL.Query().Get("fieldSelector")
	extra := f.extra
	f.mu.Unlock()
	if r.URL.Path != "/apis/resource.k8s.io/v1/resourceslices" {
		http.NotFound(w, r)
		return
	}
	if r.Header.Get("Accept") != "application/json" {
		http.Error(w, "not acceptable", http.StatusNotAcceptable)
		return
	}
	if failing {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403,"message":"resourceslices.resource.k8s.io is forbidden"}`))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if r.URL.Query().Get("watch") == "true" {
		// Nothing changes.
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		return
	}
	items := []json.RawMessage{}
	for _, item := range list.Items {
		b, _ := json.Marshal(item)
		items = append(items, b)
	}
	for _, e := range extra {
		items = append(items, json.RawMessage(e))
	}
	json.NewEncoder(w).Encode(map[string]any{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSliceList",
		"metadata": map[string]string{"resourceVersion": "1"}, "items": items})
}

func TestResourceSliceSource(t *testing.T) {
	list := loadSlices(t)
	f := &fakeSliceServer{failing: true}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { f.ServeHTTP(w, r, list) }))
	defer srv.Close()
	s, err := StartResourceSliceSource(&apiConfig{Host: srv.URL}, "a100-dra-node", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	selector := func() string {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.selector
	}
	// The error is the server's Status.
	eventually(t, "a forbidden list", func() bool {
		_, err := s.Index()
		return err != nil && strings.Contains(err.Error(), "403 Forbidden: resourceslices.resource.k8s.io is forbidden")
	})
	if got := selector(); got != "spec.nodeName=a100-dra-node" {
		t.Errorf("field selector %q", got)
	}
	f.mu.Lock()
	f.failing = false
	f.mu.Unlock()
	eventually(t, "the list", func() bool { idx, err := s.Index(); return err == nil && len(idx) == len(wantSliceIndex) })
	idx, _ := s.Index()
	if idx["gpu.nvidia.com/a100-dra-node/gpu-1"] != wantSliceIndex["gpu.nvidia.com/a100-dra-node/gpu-1"] {
		t.Errorf("gpu-1 = %+v", idx["gpu.nvidia.com/a100-dra-node/gpu-1"])
	}
}

// A slice whose JSON does not fit resource.k8s.io/v1 is counted, and
// reported, and the others are indexed.
func TestResourceSliceSourceNotDecodable(t *testing.T) {
	list := loadSlices(t)
	f := &fakeSliceServer{extra: []string{`{"apiVersion":"resource.k8s.io/v1","kind":"ResourceSlice","metadata":{"name":"bad"},
"spec":{"driver":"gpu.nvidia.com","nodeName":"a100-dra-node","pool":{"name":"a100-dra-node","generation":"three","resourceSliceCount":1}}}`}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { f.ServeHTTP(w, r, list) }))
	defer srv.Close()
	s, err := StartResourceSliceSource(&apiConfig{Host: srv.URL}, "a100-dra-node", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// Until the list has completed, the slices stored so far are indexed
	// and the error is that one: waited out, not taken for the answer.
	eventually(t, "the list", func() bool {
		idx, err := s.Index()
		return len(idx) == len(wantSliceIndex) && !errors.Is(err, errSlicesNotListed)
	})
	idx, err := s.Index()
	if err == nil || err.Error() != "ResourceSlice watch for node a100-dra-node: 1 slices not decodable as resource.k8s.io/v1" {
		t.Errorf("Index error %v", err)
	}
	for k, want := range wantSliceIndex {
		if idx[k] != want {
			t.Errorf("%s = %+v, want %+v", k, idx[k], want)
		}
	}
}

// AMD's DRA driver (gpu.amd.com) names a whole GPU's PCI address
// "pciAddr" and a partition's parent's "parentPciAddr" (ROCm
// k8s-gpu-dra-driver, deviceinfo.go): the GPU is told by its address (found
// by probe8-k8s: never identified); a partition, which its parent's address
// does not single out, is not.
func TestResourceSliceIndexAMD(t *testing.T) {
	node := "mi300x-node"
	str := func(v string) resourcev1.DeviceAttribute { return resourcev1.DeviceAttribute{StringValue: &v} }
	slice := &resourcev1.ResourceSlice{Spec: resourcev1.ResourceSliceSpec{
		Driver: "gpu.amd.com", NodeName: &node, Pool: resourcev1.ResourcePool{Name: node, Generation: 1},
		Devices: []resourcev1.Device{
			{Name: "gpu-1-128", Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
				"uuid": str("6f1b0e46-3c5e-5d8a-9f3c-2b7e9d1a4c21"), "pciAddr": str("0000:0c:00.0")}},
			{Name: "gpu-9-136", Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
				"uuid": str("0d2c9a7e-1b4f-5e3a-8c6d-4f2a1b9e7c53"), "parentPciAddr": str("0000:22:00.0")}},
		},
	}}
	got := NewResourceSliceIndex(ourSlices(t, slice), node)
	want := ResourceSliceIndex{"gpu.amd.com/mi300x-node/gpu-1-128": {ID: "0000:0c:00.0", PCIBusID: "0000:0c:00.0"}}
	if len(got) != len(want) || got["gpu.amd.com/mi300x-node/gpu-1-128"] != want["gpu.amd.com/mi300x-node/gpu-1-128"] {
		t.Errorf("index %+v, want %+v", got, want)
	}
}

// TestResourceSliceIndexAMDPartitions: AMD's DRA driver gives every
// partition of a GPU, type amdgpu-partition, the GPU's own
// resource.kubernetes.io/pciBusID, and in its auto-partition mode every
// layout it offers of a GPU (gpu-<i>-<compute>-<memory>) the GPU's address
// too (k8s-gpu-dra-driver docs/driver-attributes.md). Such an address names
// the GPU, which on a partitioned GPU is partition 0: taken for the claimed
// partition it gave partition 2's claim to partition 0 (probe17-amdpart
// D1). Only a device alone at its address is told by it.
func TestResourceSliceIndexAMDPartitions(t *testing.T) {
	node := "mi300x-node"
	str := func(v string) resourcev1.DeviceAttribute { return resourcev1.DeviceAttribute{StringValue: &v} }
	dev := func(name, typ, addr string) resourcev1.Device {
		return resourcev1.Device{Name: name, Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
			"type": str(typ), "productName": str("AMD Instinct MI300X OAM"), pciBusIDAttribute: str(addr)}}
	}
	slice := &resourcev1.ResourceSlice{Spec: resourcev1.ResourceSliceSpec{
		Driver: "gpu.amd.com", NodeName: &node, Pool: resourcev1.ResourcePool{Name: node, Generation: 1},
		Devices: []resourcev1.Device{
			// GPU 0 in QPX: four partitions at its address.
			dev("gpu-1-128", "amdgpu-partition", "0000:05:00.0"),
			dev("gpu-2-129", "amdgpu-partition", "0000:05:00.0"),
			dev("gpu-3-130", "amdgpu-partition", "0000:05:00.0"),
			dev("gpu-4-131", "amdgpu-partition", "0000:05:00.0"),
			// GPU 1 whole.
			dev("gpu-9-136", "amdgpu", "0000:15:00.0"),
			// GPU 2 in DPX with one partition listed: its type says so.
			dev("gpu-17-144", "amdgpu-partition", "0000:25:00.0"),
			// GPU 3 in auto-partition mode: the whole-GPU layout (type
			// amdgpu; one layout of a GPU is allocated at a time, so a
			// claim of it has the GPU whole) beside a partitioned one.
			dev("gpu-3-spx-nps1", "amdgpu", "0000:35:00.0"),
			dev("gpu-3-cpx-nps4", "amdgpu-partition", "0000:35:00.0"),
			// GPU 4: two devices without a type at one address (a
			// release or driver that does not say): neither is told.
			dev("gpu-33-160", "", "0000:45:00.0"),
			dev("gpu-34-161", "", "0000:45:00.0"),
		},
	}}
	got := NewResourceSliceIndex(ourSlices(t, slice), node)
	want := ResourceSliceIndex{
		"gpu.amd.com/mi300x-node/gpu-9-136":      {ID: "0000:15:00.0", PCIBusID: "0000:15:00.0"},
		"gpu.amd.com/mi300x-node/gpu-3-spx-nps1": {ID: "0000:35:00.0", PCIBusID: "0000:35:00.0"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("index %+v, want %+v", got, want)
	}
}

// TestAdminDevices reads a ResourceClaim as the API server returns it
// (resource.k8s.io/v1; status.allocation.devices.results[].adminAccess)
// and names its admin-access devices; an ordinary result is not one. A
// claim is read once within claimAccessTTL; a forbidden read is an error.
func TestAdminDevices(t *testing.T) {
	var mu sync.Mutex
	gets, forbidden := 0, 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/apis/resource.k8s.io/v1/namespaces/monitoring/resourceclaims/admin":
			mu.Lock()
			gets++
			mu.Unlock()
			w.Write([]byte(`{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaim","metadata":{"name":"admin","namespace":"monitoring"},
"spec":{"devices":{"requests":[{"name":"gpus","exactly":{"deviceClassName":"gpu.nvidia.com","allocationMode":"All","adminAccess":true}}]}},
"status":{"allocation":{"devices":{"results":[
 {"request":"gpus","driver":"gpu.nvidia.com","pool":"node1","device":"gpu-1","adminAccess":true},
 {"request":"gpus","driver":"gpu.nvidia.com","pool":"node1","device":"gpu-2","adminAccess":false}]}}}}`))
		default:
			if strings.Contains(r.URL.Path, "resourceclaims") {
				mu.Lock()
				forbidden++
				mu.Unlock()
			}
			w.WriteHeader(http.StatusForbidden)
			w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403,"message":"forbidden"}`))
		}
	}))
	defer srv.Close()
	s, err := StartResourceSliceSource(&apiConfig{Host: srv.URL}, "node1", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for range 2 {
		admin, err := s.AdminDevices(context.Background(), "monitoring", "admin")
		if err != nil || len(admin) != 1 || !admin[AdminKey(ClaimDevice{Driver: "gpu.nvidia.com", Pool: "node1", Device: "gpu-1"})] {
			t.Fatalf("admin devices %v, %v; want gpu-1 alone", admin, err)
		}
	}
	mu.Lock()
	if gets != 1 {
		t.Errorf("claim read %d times, want once", gets)
	}
	mu.Unlock()
	for range 2 {
		if _, err := s.AdminDevices(context.Background(), "ml", "other"); err == nil {
			t.Error("a forbidden claim read no error")
		}
	}
	mu.Lock()
	if forbidden != 1 {
		t.Errorf("forbidden claim asked %d times, want once within a minute", forbidden)
	}
	mu.Unlock()
}
