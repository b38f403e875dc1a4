package kubernetes

import (
	"errors"
	"strings"
	"testing"
)

const (
	gpuUUID = "GPU-2b149611-0000-4000-8000-000000000002"
	migUUID = "MIG-2b149611-0004-4000-8000-000000000001"
)

func TestNormalizeDeviceID(t *testing.T) {
	tests := []struct {
		name     string
		resource string
		id       string
		want     DeviceRef
	}{
		{"nvidia GPU UUID", "nvidia.com/gpu", gpuUUID,
			DeviceRef{Vendor: VendorNVIDIA, ID: gpuUUID, UUID: gpuUUID}},
		{"nvidia MIG UUID", "nvidia.com/mig-2g.20gb", migUUID,
			DeviceRef{Vendor: VendorNVIDIA, ID: migUUID, UUID: migUUID}},
		{"nvidia legacy MIG", "nvidia.com/mig-1g.5gb", "MIG-GPU-" + gpuUUID[4:] + "/7/0",
			DeviceRef{Vendor: VendorNVIDIA, ID: "MIG-GPU-" + gpuUUID[4:] + "/7/0", UUID: "MIG-GPU-" + gpuUUID[4:] + "/7/0"}},
		{"nvidia time-slice replica", "nvidia.com/gpu", gpuUUID + "::2",
			DeviceRef{Vendor: VendorNVIDIA, ID: gpuUUID, UUID: gpuUUID, Shared: true, Replica: 2}},
		{"nvidia renamed shared resource", "nvidia.com/gpu.shared", gpuUUID + "::0",
			DeviceRef{Vendor: VendorNVIDIA, ID: gpuUUID, UUID: gpuUUID, Shared: true}},
		{"nvidia time-sliced MIG", "nvidia.com/mig-1g.10gb", migUUID + "::11",
			DeviceRef{Vendor: VendorNVIDIA, ID: migUUID, UUID: migUUID, Shared: true, Replica: 11}},
		{"nvidia upper-case UUID kept as written", "nvidia.com/gpu", "GPU-2B149611-0000-4000-8000-00000000000A",
			DeviceRef{Vendor: VendorNVIDIA, ID: "GPU-2B149611-0000-4000-8000-00000000000A", UUID: "GPU-2B149611-0000-4000-8000-00000000000A"}},
		{"nvidia index strategy", "nvidia.com/gpu", "3",
			DeviceRef{Vendor: VendorNVIDIA, ID: "3", Index: "3"}},
		{"nvidia index strategy MIG", "nvidia.com/mig-3g.40gb", "3:1",
			DeviceRef{Vendor: VendorNVIDIA, ID: "3:1", Index: "3:1"}},
		{"gke GPU", "nvidia.com/gpu", "nvidia3",
			DeviceRef{Vendor: VendorNVIDIA, ID: "nvidia3", DeviceName: "nvidia3"}},
		{"gke time-shared GPU", "nvidia.com/gpu", "nvidia0/vgpu12",
			DeviceRef{Vendor: VendorNVIDIA, ID: "nvidia0", DeviceName: "nvidia0", Shared: true, Replica: 12}},
		{"gke MIG GPU instance", "nvidia.com/gpu", "nvidia1/gi0",
			DeviceRef{Vendor: VendorNVIDIA, ID: "nvidia1/gi0", DeviceName: "nvidia1/gi0"}},
		{"gke time-shared MIG GPU instance", "nvidia.com/gpu", "nvidia1/gi13/vgpu0",
			DeviceRef{Vendor: VendorNVIDIA, ID: "nvidia1/gi13", DeviceName: "nvidia1/gi13", Shared: true}},
		{"amd PCI address", "amd.com/gpu", "0000:C1:00.0",
			DeviceRef{Vendor: VendorAMD, ID: "0000:c1:00.0", PCIBusID: "0000:c1:00.0"}},
		{"amd 8-digit domain", "amd.com/gpu", "00000000:c1:00.0",
			DeviceRef{Vendor: VendorAMD, ID: "0000:c1:00.0", PCIBusID: "0000:c1:00.0"}},
		{"amd PCI without domain", "amd.com/gpu", "c1:00.1",
			DeviceRef{Vendor: VendorAMD, ID: "0000:c1:00.1", PCIBusID: "0000:c1:00.1"}},
		{"amd time-slice replica", "amd.com/gpu", "0000:38:00.0-slice-3",
			DeviceRef{Vendor: VendorAMD, ID: "0000:38:00.0", PCIBusID: "0000:38:00.0", Shared: true, Replica: 3}},
		{"amd partition", "amd.com/cpx_nps4", "amdgpu_xcp_30",
			DeviceRef{Vendor: VendorAMD, ID: "amdgpu_xcp_30", Partition: "amdgpu_xcp_30"}},
		{"amd partition replica", "amd.com/gpu", "amdgpu_xcp_3-slice-1",
			DeviceRef{Vendor: VendorAMD, ID: "amdgpu_xcp_3", Partition: "amdgpu_xcp_3", Shared: true, Replica: 1}},
		{"gaudi hl name", "habana.ai/gaudi2", "hl5",
			DeviceRef{Vendor: VendorHabana, ID: "hl5", Index: "5"}},
		{"gaudi PCI address", "habana.ai/gaudi", "0000:33:00.0",
			DeviceRef{Vendor: VendorHabana, ID: "0000:33:00.0", PCIBusID: "0000:33:00.0"}},
		{"gaudi serial (the Habana device plugin's IDs)", "habana.ai/gaudi", "AN15000023",
			DeviceRef{Vendor: VendorHabana, ID: "AN15000023", Serial: "AN15000023"}},
		{"gaudi serial with a dash inside", "habana.ai/gaudi3", "AM3-0012345",
			DeviceRef{Vendor: VendorHabana, ID: "AM3-0012345", Serial: "AM3-0012345"}},
		{"custom resource, NVIDIA UUID", "example.com/vgpu", gpuUUID,
			DeviceRef{Vendor: VendorNVIDIA, ID: gpuUUID, UUID: gpuUUID}},
		{"custom resource, PCI address", "example.com/accel", "0000:17:00.0",
			DeviceRef{ID: "0000:17:00.0", PCIBusID: "0000:17:00.0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := NormalizeDeviceID(tt.resource, tt.id)
			if err != nil {
				t.Fatalf("NormalizeDeviceID(%q, %q): %v", tt.resource, tt.id, err)
			}
			if got != tt.want {
				t.Errorf("NormalizeDeviceID(%q, %q)\n got %+v\nwant %+v", tt.resource, tt.id, got, tt.want)
			}
		})
	}
}

func TestNormalizeDeviceIDRejects(t *testing.T) {
	tests := []struct {
		name, resource, id string
	}{
		{"empty", "nvidia.com/gpu", ""},
		{"only a replica suffix", "nvidia.com/gpu", "::3"},
		{"replica not a number", "nvidia.com/gpu", gpuUUID + "::x"},
		{"replica too large", "nvidia.com/gpu", gpuUUID + "::1234567"},
		{"negative replica", "nvidia.com/gpu", gpuUUID + "::-1"},
		{"short UUID", "nvidia.com/gpu", "GPU-2b149611"},
		{"UUID with a non-hex digit", "nvidia.com/gpu", "GPU-2b149611-0000-4000-8000-00000000000g"},
		{"UUID with misplaced dashes", "nvidia.com/gpu", "GPU-2b1496110-000-4000-8000-000000000002"},
		{"unknown prefix", "nvidia.com/gpu", "XPU-2b149611-0000-4000-8000-000000000002"},
		{"legacy MIG without instances", "nvidia.com/mig-1g.5gb", "MIG-" + gpuUUID},
		{"legacy MIG with a bad instance", "nvidia.com/mig-1g.5gb", "MIG-" + gpuUUID + "/a/0"},
		{"legacy MIG with extra part", "nvidia.com/mig-1g.5gb", "MIG-" + gpuUUID + "/1/0/2"},
		{"index with leading zero", "nvidia.com/gpu", "03"},
		{"gke name without a minor", "nvidia.com/gpu", "nvidia"},
		{"gke minor with a leading zero", "nvidia.com/gpu", "nvidia01"},
		{"gke GPU instance without an ID", "nvidia.com/gpu", "nvidia0/gi"},
		{"gke compute instance", "nvidia.com/gpu", "nvidia0/gi1/ci0"},
		{"gke replica without a number", "nvidia.com/gpu", "nvidia0/vgpu"},
		{"gke replica twice", "nvidia.com/gpu", "nvidia0/vgpu1/vgpu2"},
		{"gke replica of a UUID", "nvidia.com/gpu", gpuUUID + "/vgpu1"},
		{"gke name of a custom resource", "example.com/accel", "nvidia0"},
		{"index with sign", "nvidia.com/gpu", "-1"},
		{"amd GPU index", "amd.com/gpu", "0"},
		{"amd PCI function out of range", "amd.com/gpu", "0000:c1:00.8"},
		{"amd PCI short bus", "amd.com/gpu", "0000:c:00.0"},
		{"amd PCI domain too long", "amd.com/gpu", "000000000:c1:00.0"},
		{"gaudi serial with a dot", "habana.ai/gaudi", "AM3.0012345"},
		{"gaudi serial ending in a dash", "habana.ai/gaudi", "AM30012345-"},
		{"custom resource, bare index", "example.com/accel", "0"},
		{"space", "nvidia.com/gpu", "GPU-2b149611-0000-4000-8000 000000000002"},
		{"non-ASCII", "habana.ai/gaudi", "AM3001234é"},
		{"amd partition with a sign", "amd.com/cpx_nps4", "amdgpu_xcp_-1"},
		{"amd partition on another vendor", "habana.ai/gaudi", "amdgpu_xcp_3"},
		// No collector reports devices these can be joined to yet: counted
		// as unknown rather than accepted and silently never matched.
		{"serial of a custom resource", "example.com/accel", "AM30012345"},
		{"too long", "habana.ai/gaudi", strings.Repeat("A", maxDeviceIDLen+1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := NormalizeDeviceID(tt.resource, tt.id)
			if err == nil {
				t.Fatalf("NormalizeDeviceID(%q, %q) = %+v, want an error", tt.resource, tt.id, got)
			}
			if !errors.Is(err, ErrUnknownDeviceID) {
				t.Errorf("error %v does not match ErrUnknownDeviceID", err)
			}
			var idErr *DeviceIDError
			if !errors.As(err, &idErr) || idErr.Resource != tt.resource || idErr.ID != tt.id {
				t.Errorf("error %#v does not name resource %q and ID %q", err, tt.resource, tt.id)
			}
		})
	}
}

// Replicas of one device, however the plugin spells its address, must share
// a key, or they would not be counted together.
func TestDeviceRefKeySharedByReplicas(t *testing.T) {
	a, err := NormalizeDeviceID("amd.com/gpu", "0000:C1:00.0-slice-0")
	if err != nil {
		t.Fatal(err)
	}
	b, err := NormalizeDeviceID("amd.com/gpu", "c1:00.0-slice-1")
	if err != nil {
		t.Fatal(err)
	}
	if a.Key() != b.Key() {
		t.Errorf("keys differ: %q and %q", a.Key(), b.Key())
	}
	n, err := NormalizeDeviceID("nvidia.com/gpu", gpuUUID+"::3")
	if err != nil {
		t.Fatal(err)
	}
	if want := "nvidia/" + gpuUUID; n.Key() != want {
		t.Errorf("key %q, want %q", n.Key(), want)
	}
}

func FuzzNormalizeDeviceID(f *testing.F) {
	for _, seed := range [][2]string{
		{"nvidia.com/gpu", gpuUUID},
		{"nvidia.com/gpu", gpuUUID + "::3"},
		{"nvidia.com/mig-1g.10gb", migUUID},
		{"nvidia.com/mig-1g.5gb", "MIG-" + gpuUUID + "/7/0"},
		{"nvidia.com/gpu", "3:1"},
		{"amd.com/gpu", "0000:c1:00.0-slice-2"},
		{"amd.com/cpx_nps4", "amdgpu_xcp_30"},
		{"habana.ai/gaudi", "AM30012345"},
		{"habana.ai/gaudi", "hl0"},
		{"example.com/x", "::"},
		{"", "-slice-"},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, resource, id string) {
		ref, err := NormalizeDeviceID(resource, id)
		if err != nil {
			if !errors.Is(err, ErrUnknownDeviceID) {
				t.Fatalf("error %v does not match ErrUnknownDeviceID", err)
			}
			return
		}
		set := 0
		for _, s := range []string{ref.UUID, ref.PCIBusID, ref.Index, ref.Serial, ref.Partition} {
			if s != "" {
				set++
			}
		}
		if set != 1 {
			t.Fatalf("NormalizeDeviceID(%q, %q) = %+v: %d identities set, want 1", resource, id, ref, set)
		}
		if ref.ID == "" || ref.Replica < 0 || (!ref.Shared && ref.Replica != 0) {
			t.Fatalf("NormalizeDeviceID(%q, %q) = %+v: inconsistent", resource, id, ref)
		}
		// Normalising is stable: a shared ID's base names the same device.
		again, err := NormalizeDeviceID(resource, ref.ID)
		if err != nil || again.Key() != ref.Key() {
			t.Fatalf("re-normalising %q of %q: %+v, %v; want key %q", ref.ID, id, again, err, ref.Key())
		}
	})
}
