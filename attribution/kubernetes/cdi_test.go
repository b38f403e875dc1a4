package kubernetes

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xpu-exporter/xpu_exporter/attribution/kubernetes/kubelettest"
)

const cdiFixtureDir = "../../fixtures/cdi"

// The GPUs of the CDI fixtures' node, by device minor.
var draGPUs = []kubelettest.NVIDIAGPU{
	{Minor: 0, UUID: "GPU-5e2a7c91-3b4d-4f6e-8a1c-0d9e8f7a6b50", PCIBusID: "0000:07:00.0", Model: "NVIDIA A100-SXM4-80GB"},
	{Minor: 1, UUID: "GPU-7b3c9d02-1e4f-4a5b-9c6d-3e2f1a0b9c81", PCIBusID: "0000:0f:00.0", Model: "NVIDIA A100-SXM4-80GB"},
	{Minor: 2, UUID: "GPU-8c4d0e13-2f5a-4b6c-8d7e-4f3a2b1c0d92", PCIBusID: "0000:47:00.0", Model: "NVIDIA A100-SXM4-80GB"},
	{Minor: 3, UUID: "GPU-9d5e1f24-3a6b-4c7d-9e8f-5a4b3c2d1ea3", PCIBusID: "0000:4e:00.0", Model: "NVIDIA A100-SXM4-80GB"},
}

func nvidiaProcfs(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	if err := kubelettest.WriteNVIDIAProcfs(root, draGPUs); err != nil {
		t.Fatal(err)
	}
	return root
}

func TestCDISpecsFixtures(t *testing.T) {
	proc := nvidiaProcfs(t)
	nodeIdx, problems, err := (&CDISpecs{Dir: filepath.Join(cdiFixtureDir, "a100-dra-node"), ProcRoot: proc}).Load()
	if err != nil || len(problems) > 0 {
		t.Fatalf("Load: %v %v", err, problems)
	}
	otherIdx, problems, err := (&CDISpecs{Dir: filepath.Join(cdiFixtureDir, "other"), ProcRoot: proc}).Load()
	if err != nil || len(problems) > 0 {
		t.Fatalf("Load: %v %v", err, problems)
	}
	const (
		claim    = "k8s.gpu.nvidia.com/claim=6c1f0d2e-4b8a-4e7c-9f3d-2a5b8c7e1d90-"
		migClaim = "k8s.gpu.nvidia.com/claim=7d2a1e3f-5c9b-4f8d-a04e-3b6c9d8f2ea1-"
	)
	for _, tc := range []struct {
		name    string
		want    DeviceRef
		wantErr string
	}{
		// /dev/nvidia1 is minor 1 in driver/nvidia/gpus/0000:0f:00.0/information.
		{name: claim + "gpu-1", want: DeviceRef{Vendor: VendorNVIDIA, ID: draGPUs[1].UUID, UUID: draGPUs[1].UUID}},
		// nvidia-cap417 is gpu3/gi1/access in mig-minors: 3 + 3*135 + 1*9 = 417
		// (and 418 is gpu3/gi1/ci0/access), so GPU instance 1 of minor 3.
		{name: migClaim + "gpu-3-mig-1g10gb-19-6", want: DeviceRef{Vendor: VendorNVIDIA, ID: draGPUs[3].UUID + "/gi1", MIGParentUUID: draGPUs[3].UUID, MIGGPUInstance: 1}},
		// nvidia-ctk's uuid device-name strategy: the name is the UUID.
		{name: "nvidia.com/gpu=" + draGPUs[0].UUID, want: DeviceRef{Vendor: VendorNVIDIA, ID: draGPUs[0].UUID, UUID: draGPUs[0].UUID}},
		{name: "nvidia.com/gpu=all", wantErr: "has 2 /dev/nvidia<minor> device nodes"},
		{name: "example.com/accel=accel-0", want: DeviceRef{Vendor: VendorNVIDIA, ID: draGPUs[1].UUID, UUID: draGPUs[1].UUID}},
		{name: "example.com/accel=accel-both", wantErr: "names 2 different GPUs"},
		{name: "k8s.gpu.nvidia.com/claim=00000000-0000-4000-8000-000000000000-gpu-0", wantErr: "in no readable CDI spec"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			idx := nodeIdx
			if !strings.HasPrefix(tc.name, "k8s.gpu.nvidia.com/") {
				idx = otherIdx
			}
			got, err := idx.Lookup(tc.name)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestCDISpecsBadInput(t *testing.T) {
	proc := nvidiaProcfs(t)

	t.Run("missing directory", func(t *testing.T) {
		_, _, err := (&CDISpecs{Dir: filepath.Join(t.TempDir(), "nope"), ProcRoot: proc}).Load()
		if err == nil {
			t.Fatal("no error for a missing directory")
		}
	})

	t.Run("malformed", func(t *testing.T) {
		idx, problems, err := (&CDISpecs{Dir: filepath.Join(cdiFixtureDir, "bad"), ProcRoot: proc}).Load()
		if err != nil || len(problems) != 2 {
			t.Fatalf("want 2 problems, got %v %v", err, problems)
		}
		for _, p := range problems {
			if !strings.Contains(p.Error(), "malformed") {
				t.Errorf("problem %v does not say malformed", p)
			}
		}
		if _, err := idx.Lookup("nokind=gpu-0"); err == nil {
			t.Error("a device of a spec with a bad kind was indexed")
		}
	})

	t.Run("oversized", func(t *testing.T) {
		dir := t.TempDir()
		big := "cdiVersion: 0.5.0\nkind: k8s.gpu.nvidia.com/claim\ndevices:\n" + strings.Repeat("# padding\n", MaxCDISpecBytes/10+1)
		os.WriteFile(filepath.Join(dir, "big.yaml"), []byte(big), 0o644)
		_, problems, err := (&CDISpecs{Dir: dir, ProcRoot: proc}).Load()
		if err != nil || len(problems) != 1 || !strings.Contains(problems[0].Error(), "larger than") {
			t.Fatalf("got %v %v", err, problems)
		}
	})

	t.Run("stale minor", func(t *testing.T) {
		// The spec of a claim whose GPU is gone (or a procfs that is not
		// the host's): minor 7 is no GPU of the node.
		dir := t.TempDir()
		names, err := kubelettest.WriteClaimSpec(dir, "11111111-2222-4333-8444-555555555555", []kubelettest.ClaimSpecDevice{{Name: "gpu-7", Minor: 7}})
		if err != nil {
			t.Fatal(err)
		}
		idx, problems, err := (&CDISpecs{Dir: dir, ProcRoot: proc}).Load()
		if err != nil || len(problems) > 0 {
			t.Fatal(err, problems)
		}
		if _, err := idx.Lookup(names[0]); err == nil || !strings.Contains(err.Error(), "/dev/nvidia7 is no GPU") {
			t.Fatalf("err = %v", err)
		}
	})

	t.Run("defined twice", func(t *testing.T) {
		dir := t.TempDir()
		uid := "11111111-2222-4333-8444-555555555555"
		names, _ := kubelettest.WriteClaimSpec(dir, uid, []kubelettest.ClaimSpecDevice{{Name: "gpu-1", Minor: 1}})
		b, _ := os.ReadFile(filepath.Join(dir, "k8s.gpu.nvidia.com-claim_"+uid+".yaml"))
		os.WriteFile(filepath.Join(dir, "copy.yaml"), b, 0o644)
		idx, _, _ := (&CDISpecs{Dir: dir, ProcRoot: proc}).Load()
		if _, err := idx.Lookup(names[0]); err == nil || !strings.Contains(err.Error(), "more than one spec") {
			t.Fatalf("err = %v", err)
		}
	})
}

// TestCDISpecsCacheFollowsChanges: a spec rewritten for another device is
// read again, and a removed spec no longer resolves.
func TestCDISpecsCacheFollowsChanges(t *testing.T) {
	dir := t.TempDir()
	s := &CDISpecs{Dir: dir, ProcRoot: nvidiaProcfs(t)}
	uid := "11111111-2222-4333-8444-555555555555"
	names, _ := kubelettest.WriteClaimSpec(dir, uid, []kubelettest.ClaimSpecDevice{{Name: "dev", Minor: 1}})
	if idx, _, _ := s.Load(); mustLookup(t, idx, names[0]).UUID != draGPUs[1].UUID {
		t.Fatal("first load")
	}
	kubelettest.WriteClaimSpec(dir, uid, []kubelettest.ClaimSpecDevice{{Name: "dev", Minor: 2}})
	path := filepath.Join(dir, "k8s.gpu.nvidia.com-claim_"+uid+".yaml")
	later := time.Now().Add(time.Minute)
	os.Chtimes(path, later, later)
	if idx, _, _ := s.Load(); mustLookup(t, idx, names[0]).UUID != draGPUs[2].UUID {
		t.Fatal("rewritten spec not read again")
	}
	os.Remove(path)
	if idx, _, _ := s.Load(); func() error { _, err := idx.Lookup(names[0]); return err }() == nil {
		t.Fatal("removed spec still resolves")
	}
}

func mustLookup(t *testing.T, idx CDIIndex, name string) DeviceRef {
	t.Helper()
	ref, err := idx.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	return ref
}

// FuzzReadCDISpec: no spec, however broken, makes the reader panic.
func FuzzReadCDISpec(f *testing.F) {
	for _, p := range []string{
		"a100-dra-node/k8s.gpu.nvidia.com-claim_7d2a1e3f-5c9b-4f8d-a04e-3b6c9d8f2ea1.yaml", "other/nvidia-ctk-uuid.json",
		"other/example-annotated.yaml", "bad/malformed.yaml", "bad/no-class.json",
	} {
		b, err := os.ReadFile(filepath.Join(cdiFixtureDir, p))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	proc := f.TempDir()
	kubelettest.WriteNVIDIAProcfs(proc, draGPUs)
	nv := readNVIDIAProc(proc)
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(t.TempDir(), "spec.yaml")
		os.WriteFile(path, b, 0o644)
		devs, err := readCDISpec(path)
		if err != nil {
			return
		}
		for _, d := range devs {
			nv.identify(d)
		}
	})
}

// AMD's DRA driver writes a "common" device of /dev/kfd alone and one
// device per GPU of /dev/kfd, /dev/dri/card<N> and /dev/dri/renderD<M>, no
// PCI address (ROCm k8s-gpu-dra-driver, gpu-kubeletplugin state.go): the
// GPU device is told by its render node's PCI device in sysfs (found by
// probe8-k8s: every AMD claim unresolved); the common device names none.
func TestCDIAMDDeviceByRenderNode(t *testing.T) {
	// sysfs as the kernel lays it out: the node under its PCI device's
	// drm/, linked from class/drm, with a device link back to the PCI
	// device; a compute partition after the first under the amdgpu_xcp_<n>
	// platform device amdgpu registers for it.
	sys := t.TempDir()
	node := classNode(t, sys, "drm", "renderD128", "pci0000:00/0000:00:01.1/0000:0c:00.0")
	classNode(t, sys, "drm", "renderD130", "platform/amdgpu_xcp_1")
	spec := `cdiVersion: 0.6.0
kind: k8s.gpu.amd.com/gpu
devices:
  - name: common
    containerEdits:
      deviceNodes: [{path: /dev/kfd}]
  - name: 5b1f2c3d-0000-4000-8000-000000000001-gpu-1-128
    containerEdits:
      deviceNodes: [{path: /dev/kfd}, {path: /dev/dri/card1}, {path: /dev/dri/renderD128}]
  - name: 5b1f2c3d-0000-4000-8000-000000000001-gpu-2-129
    containerEdits:
      deviceNodes: [{path: /dev/dri/renderD129}]
  - name: 5b1f2c3d-0000-4000-8000-000000000002-gpu-3-130
    containerEdits:
      deviceNodes: [{path: /dev/kfd}, {path: /dev/dri/card3}, {path: /dev/dri/renderD130}]
`
	dir := t.TempDir()
	idx := loadSpec(t, dir, sys, "amd.yaml", spec)
	ref, err := idx.Lookup("k8s.gpu.amd.com/gpu=5b1f2c3d-0000-4000-8000-000000000001-gpu-1-128")
	if err != nil || ref.PCIBusID != "0000:0c:00.0" || ref.ID != "0000:0c:00.0" {
		t.Errorf("GPU device: %+v, %v; want PCI 0000:0c:00.0", ref, err)
	}
	// probe17-amdpart D2: a partition's render node is under no PCI
	// device; the claim of partition 2 was never resolved.
	ref, err = idx.Lookup("k8s.gpu.amd.com/gpu=5b1f2c3d-0000-4000-8000-000000000002-gpu-3-130")
	if err != nil || ref.Partition != "amdgpu_xcp_1" || ref.ID != "amdgpu_xcp_1" || ref.PCIBusID != "" {
		t.Errorf("partition device: %+v, %v; want partition amdgpu_xcp_1", ref, err)
	}
	// Each says why it names none, in its own terms: the common device
	// has no node of a GPU, renderD129 is not in sysfs.
	for name, why := range map[string]string{
		"k8s.gpu.amd.com/gpu=common":                                         "/dev/dri/renderD<M> or /dev/accel/accel<N> device node",
		"k8s.gpu.amd.com/gpu=5b1f2c3d-0000-4000-8000-000000000001-gpu-2-129": "drm node renderD129",
	} {
		if ref, err := idx.Lookup(name); err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("%s is told as %+v, %v; it names no GPU here, and the error should say %q", name, ref, err, why)
		}
	}
	// A claim device's error gives every CDI device's reason, not only
	// that of the common device the driver lists first.
	_, err = identifyClaimDevice(ClaimDevice{ClaimNamespace: "ml", ClaimName: "c", Driver: "gpu.amd.com", Pool: "n1", Device: "gpu-2-129",
		CDIDevices: []string{"k8s.gpu.amd.com/gpu=common", "k8s.gpu.amd.com/gpu=5b1f2c3d-0000-4000-8000-000000000001-gpu-2-129"}}, idx)
	if err == nil || !strings.Contains(err.Error(), `"k8s.gpu.amd.com/gpu=common"`) || !strings.Contains(err.Error(), "renderD129") {
		t.Errorf("claim device error %v: want both CDI devices' reasons", err)
	}
	// Without the device link (as the demo's tree has it), the node's own
	// place under its PCI device tells the same.
	if err := os.Remove(filepath.Join(node, "device")); err != nil {
		t.Fatal(err)
	}
	idx, _, _ = (&CDISpecs{Dir: dir, ProcRoot: t.TempDir(), SysRoot: sys}).Load()
	if ref, err := idx.Lookup("k8s.gpu.amd.com/gpu=5b1f2c3d-0000-4000-8000-000000000001-gpu-1-128"); err != nil || ref.PCIBusID != "0000:0c:00.0" {
		t.Errorf("GPU device without a device link: %+v, %v; want PCI 0000:0c:00.0", ref, err)
	}
}

// Intel's Gaudi DRA driver (gaudi.intel.com) writes one spec of kind
// intel.com/gaudi whose devices, named by PCI address and model
// ("0000-b3-00-0-0x1020"), give /dev/accel/accel<N>, its
// accel_controlD<N> and, with a NIC, /dev/infiniband/uverbs<M>; a claim adds
// a device named by its UID of hooks and mounts alone
// (intel-resource-drivers-for-kubernetes, pkg/gaudi/cdihelpers). The device
// is told by its accel node's PCI device in sysfs, as the habanalabs
// driver registers it under the accel class (every Gaudi claim was
// unresolved).
func TestCDIGaudiDeviceByAccelNode(t *testing.T) {
	sys := t.TempDir()
	classNode(t, sys, "accel", "accel2", "pci0000:b0/0000:b0:01.0/0000:b3:00.0")
	spec := `cdiVersion: 0.5.0
kind: intel.com/gaudi
devices:
  - name: 0000-b3-00-0-0x1020
    containerEdits:
      deviceNodes:
        - {path: /dev/accel/accel2, hostPath: /dev/accel/accel2, type: c}
        - {path: /dev/accel/accel_controlD2, hostPath: /dev/accel/accel_controlD2, type: c}
        - {path: /dev/infiniband/uverbs2, hostPath: /dev/infiniband/uverbs2, type: c}
  - name: 7c1d2e3f-0000-4000-8000-000000000001
    containerEdits:
      hooks: [{hookName: createRuntime, path: /usr/bin/habana-container-hook, args: [habana-container-hook, createRuntime]}]
`
	idx := loadSpec(t, t.TempDir(), sys, "intel.com-gaudi.yaml", spec)
	ref, err := idx.Lookup("intel.com/gaudi=0000-b3-00-0-0x1020")
	if err != nil || ref.PCIBusID != "0000:b3:00.0" || ref.ID != "0000:b3:00.0" {
		t.Errorf("Gaudi device: %+v, %v; want PCI 0000:b3:00.0", ref, err)
	}
	if ref, err := idx.Lookup("intel.com/gaudi=7c1d2e3f-0000-4000-8000-000000000001"); err == nil {
		t.Errorf("the claim's device of hooks is told as %+v; it names no device", ref)
	}
}

// classNode lays out a device node of class (drm, accel) in the sysfs tree
// sys as the kernel does: its directory under its device's (dev, relative
// to devices/), a device link back to that device, and a link from
// class/<class>/<name>. It returns the node's directory.
func classNode(t *testing.T, sys, class, name, dev string) string {
	t.Helper()
	node := filepath.Join(sys, "devices", filepath.FromSlash(dev), class, name)
	for _, d := range []string{node, filepath.Join(sys, "class", class)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{
		filepath.Join(node, "device"):            "../../../" + filepath.Base(dev),
		filepath.Join(sys, "class", class, name): "../../devices/" + dev + "/" + class + "/" + name,
	} {
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
	}
	return node
}

// loadSpec writes spec as file in dir and loads the CDI specs there, with
// the sysfs tree sys; a problem with them fails the test.
func loadSpec(t *testing.T, dir, sys, file, spec string) CDIIndex {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, file), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	idx, problems, err := (&CDISpecs{Dir: dir, ProcRoot: t.TempDir(), SysRoot: sys}).Load()
	if err != nil || len(problems) != 0 {
		t.Fatal(err, problems)
	}
	return idx
}
