package attribution

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/xpu-exporter/xpu_exporter/attribution/kubernetes"
	"github.com/xpu-exporter/xpu_exporter/attribution/kubernetes/kubelettest"
)

// The GPUs of fixtures/kubelet/a100-dra-node.yaml, by device minor; GPU 3
// is in MIG mode with GPU instances 1 and 2.
var draGPUs = []kubelettest.NVIDIAGPU{
	{Minor: 0, UUID: "GPU-5e2a7c91-3b4d-4f6e-8a1c-0d9e8f7a6b50", PCIBusID: "0000:07:00.0", Model: "NVIDIA A100-SXM4-80GB"},
	{Minor: 1, UUID: "GPU-7b3c9d02-1e4f-4a5b-9c6d-3e2f1a0b9c81", PCIBusID: "0000:0f:00.0", Model: "NVIDIA A100-SXM4-80GB"},
	{Minor: 2, UUID: "GPU-8c4d0e13-2f5a-4b6c-8d7e-4f3a2b1c0d92", PCIBusID: "0000:47:00.0", Model: "NVIDIA A100-SXM4-80GB"},
	{Minor: 3, UUID: "GPU-9d5e1f24-3a6b-4c7d-9e8f-5a4b3c2d1ea3", PCIBusID: "0000:4e:00.0", Model: "NVIDIA A100-SXM4-80GB"},
}

const (
	draMIG1 = "MIG-0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c41"
	draMIG2 = "MIG-0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c42"
)

func draDevices() []Device {
	var out []Device
	for i, g := range draGPUs {
		out = append(out, Device{UUID: g.UUID, Vendor: "nvidia", Index: i, PCIBusID: "0000" + g.PCIBusID, MIGInstance: -1})
	}
	return append(out,
		Device{UUID: draMIG1, Vendor: "nvidia", Index: 3, ParentUUID: draGPUs[3].UUID, MIGInstance: 1},
		Device{UUID: draMIG2, Vendor: "nvidia", Index: 3, ParentUUID: draGPUs[3].UUID, MIGInstance: 2},
	)
}

// draResolver runs the fake kubelet on the DRA fixture and a resolver over
// it, reading CDI specs from cdiDir; logs go to the returned buffer.
func draResolver(t *testing.T, cdiDir string) (*Resolver, *bytes.Buffer) {
	t.Helper()
	k := kubelettest.StartFile(t, "../fixtures/kubelet/a100-dra-node.yaml")
	c, err := kubernetes.Dial(k.PodResourcesSocket())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	proc := t.TempDir()
	if err := kubelettest.WriteNVIDIAProcfs(proc, draGPUs); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	r := New(Config{
		Kubelet: c,
		CDI:     &kubernetes.CDISpecs{Dir: cdiDir, ProcRoot: proc},
		Logger:  slog.New(slog.NewTextHandler(&logs, nil)),
	})
	return r, &logs
}

// owners renders a device's claims as "ns/pod/container claim=ns/name share".
func owners(own *Ownership) []string {
	var out []string
	for _, c := range own.Claims {
		s := c.Owner.Namespace + "/" + c.Owner.Pod + "/" + c.Owner.Container
		if c.Owner.Claim != "" {
			s += " claim=" + c.Owner.ClaimNamespace + "/" + c.Owner.Claim
		}
		out = append(out, s+" "+strconv.FormatFloat(c.Share, 'g', -1, 64))
	}
	return out
}

func TestResolveDevicePluginAndDRAOnOneNode(t *testing.T) {
	r, logs := draResolver(t, "../fixtures/cdi/a100-dra-node")
	res := r.Resolve(context.Background(), draDevices())

	want := map[string][]string{
		// Device plugin: the whole GPU, no claim.
		draGPUs[0].UUID: {"train/trainer-0/trainer 1"},
		// DRA, one consumer of claim single-gpu-x7k2p: the whole GPU.
		draGPUs[1].UUID: {"ml/dra-single/main claim=ml/single-gpu-x7k2p 1"},
		// DRA, claim shared-gpu used by two pods: 1/2 = 0.5 each.
		draGPUs[2].UUID: {"ml/shared-a/main claim=ml/shared-gpu 0.5", "ml/shared-b/main claim=ml/shared-gpu 0.5"},
		// A GPU in MIG mode is shared by the owners of its instances, with
		// no share of its own.
		draGPUs[3].UUID: {"ml/mig-worker/worker claim=ml/mig-worker-r4t9z 0"},
		// DRA, MIG GPU instance 1 of minor 3 (nvidia-cap417 in the spec).
		draMIG1: {"ml/mig-worker/worker claim=ml/mig-worker-r4t9z 1"},
		draMIG2: nil,
	}
	for uuid, w := range want {
		if got := owners(res.Devices[uuid]); strings.Join(got, ";") != strings.Join(w, ";") {
			t.Errorf("%s: owners %q, want %q", uuid, got, w)
		}
	}
	if res.UnresolvedClaimDevices != 0 || res.UnknownDeviceIDs != 0 {
		t.Errorf("unresolved %d, unknown %d; want 0, 0", res.UnresolvedClaimDevices, res.UnknownDeviceIDs)
	}
	for _, s := range res.Sources {
		if s.Err != nil {
			t.Errorf("source %s: %v", s.Name, s.Err)
		}
	}
	if !hasSource(res, SourceCDI) {
		t.Error("no cdi source reported")
	}
	if logs.Len() > 0 {
		t.Errorf("logged on a healthy node:\n%s", logs)
	}
}

func hasSource(res Result, name string) bool {
	for _, s := range res.Sources {
		if s.Name == name {
			return true
		}
	}
	return false
}

// Without readable CDI specs, DRA devices are unowned and counted, the
// device plugin's GPU keeps its owner, and each problem is logged once.
func TestResolveDRAWithoutCDISpecs(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cdi")
	r, logs := draResolver(t, dir)
	var res Result
	for range 2 {
		res = r.Resolve(context.Background(), draDevices())
	}
	// dra-single, shared-a, shared-b and mig-worker each hold one device.
	if res.UnresolvedClaimDevices != 4 {
		t.Errorf("unresolved claim devices = %d, want 4", res.UnresolvedClaimDevices)
	}
	for _, uuid := range []string{draGPUs[1].UUID, draGPUs[2].UUID, draGPUs[3].UUID, draMIG1} {
		if got := owners(res.Devices[uuid]); len(got) > 0 {
			t.Errorf("%s owned by %q without CDI specs", uuid, got)
		}
	}
	if got := owners(res.Devices[draGPUs[0].UUID]); len(got) != 1 {
		t.Errorf("device-plugin GPU owners %q", got)
	}
	if cdiErr(res) == nil {
		t.Error("cdi source up without a spec directory")
	}
	// Two scrapes, one warning for the directory and one per device (the
	// shared claim's device is one CDI device for both pods).
	if n := strings.Count(logs.String(), "CDI specs not fully readable"); n != 1 {
		t.Errorf("directory problem logged %d times:\n%s", n, logs)
	}
	if n := strings.Count(logs.String(), "DRA claim device not identified"); n != 3 {
		t.Errorf("devices logged %d times, want 3:\n%s", n, logs)
	}

	// The specs appear: devices are owned again, recovery logged once.
	if err := os.CopyFS(dir, os.DirFS("../fixtures/cdi/a100-dra-node")); err != nil {
		t.Fatal(err)
	}
	res = r.Resolve(context.Background(), draDevices())
	if res.UnresolvedClaimDevices != 0 || cdiErr(res) != nil || len(res.Devices[draGPUs[1].UUID].Claims) != 1 {
		t.Errorf("after the specs appeared: unresolved %d, cdi %v", res.UnresolvedClaimDevices, cdiErr(res))
	}
	if n := strings.Count(logs.String(), "CDI specs readable again"); n != 1 {
		t.Errorf("recovery logged %d times", n)
	}

	// The shared claim's spec goes stale (deleted while pods still list
	// it): its two consumers are unresolved, the rest stays.
	os.Remove(filepath.Join(dir, "k8s.gpu.nvidia.com-claim_8e3b2f40-6dac-4a9e-b15f-4c7dae903fb2.yaml"))
	res = r.Resolve(context.Background(), draDevices())
	if res.UnresolvedClaimDevices != 2 || len(res.Devices[draGPUs[2].UUID].Claims) != 0 || len(res.Devices[draGPUs[1].UUID].Claims) != 1 {
		t.Errorf("stale spec: unresolved %d, GPU 2 owners %q", res.UnresolvedClaimDevices, owners(res.Devices[draGPUs[2].UUID]))
	}
	// Identified in between, its failing again is told again, once
	// (probe8-k8s D2: told once for the exporter's life).
	r.Resolve(context.Background(), draDevices())
	if n := strings.Count(logs.String(), "DRA claim device not identified"); n != 4 {
		t.Errorf("devices logged %d times, want 4 (the shared claim's again):\n%s", n, logs)
	}
}

// A malformed spec costs only the devices it describes.
func TestResolveDRAMalformedSpec(t *testing.T) {
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS("../fixtures/cdi/a100-dra-node")); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "k8s.gpu.nvidia.com-claim_6c1f0d2e-4b8a-4e7c-9f3d-2a5b8c7e1d90.yaml"), []byte("kind: [\n"), 0o644)
	r, _ := draResolver(t, dir)
	res := r.Resolve(context.Background(), draDevices())
	if res.UnresolvedClaimDevices != 1 || cdiErr(res) == nil || !strings.Contains(cdiErr(res).Error(), "malformed") {
		t.Errorf("unresolved %d, cdi %v; want 1 and malformed", res.UnresolvedClaimDevices, cdiErr(res))
	}
	if len(res.Devices[draGPUs[2].UUID].Claims) != 2 {
		t.Errorf("GPU 2 owners %q", owners(res.Devices[draGPUs[2].UUID]))
	}
}

func cdiErr(res Result) error {
	for _, s := range res.Sources {
		if s.Name == SourceCDI {
			return s.Err
		}
	}
	return nil
}

type fakeSlices struct {
	idx kubernetes.ResourceSliceIndex
	err error
}

func (f fakeSlices) Index() (kubernetes.ResourceSliceIndex, error) { return f.idx, f.err }

// Without CDI specs, the node's ResourceSlices identify the devices by the
// uuid attribute the driver publishes.
func TestResolveDRAResourceSliceFallback(t *testing.T) {
	r, _ := draResolver(t, filepath.Join(t.TempDir(), "no-cdi"))
	r.cfg.ResourceSlices = fakeSlices{idx: kubernetes.ResourceSliceIndex{
		"gpu.nvidia.com/a100-dra-node/gpu-1":                 {Vendor: "nvidia", ID: draGPUs[1].UUID, UUID: draGPUs[1].UUID},
		"gpu.nvidia.com/a100-dra-node/gpu-2":                 {Vendor: "nvidia", ID: draGPUs[2].UUID, UUID: draGPUs[2].UUID},
		"gpu.nvidia.com/a100-dra-node/gpu-3-mig-1g10gb-19-6": {Vendor: "nvidia", ID: draMIG1, UUID: draMIG1},
	}}
	res := r.Resolve(context.Background(), draDevices())
	if res.UnresolvedClaimDevices != 0 {
		t.Errorf("unresolved %d, want 0", res.UnresolvedClaimDevices)
	}
	// As with CDI specs: shared-gpu's two pods hold 1/2 each.
	if got := owners(res.Devices[draGPUs[2].UUID]); strings.Join(got, ";") != "ml/shared-a/main claim=ml/shared-gpu 0.5;ml/shared-b/main claim=ml/shared-gpu 0.5" {
		t.Errorf("GPU 2 owners %q", got)
	}
	if got := owners(res.Devices[draMIG1]); len(got) != 1 {
		t.Errorf("MIG owners %q", got)
	}
	if cdiErr(res) == nil || !hasSource(res, kubernetes.SourceResourceSlices) {
		t.Errorf("sources %+v: want cdi down and resourceslices reported", res.Sources)
	}
}

type fakeClaimAccess struct {
	admin map[string]map[string]bool // namespace/name → admin devices
	err   error
	asked int
}

func (f *fakeClaimAccess) AdminDevices(_ context.Context, ns, name string) (map[string]bool, error) {
	f.asked++
	return f.admin[ns+"/"+name], f.err
}

// TestDRAAdminAccessIsNoAllocation: a monitoring DaemonSet's claim with
// admin access (KEP-5018) lists GPU 1, which pod dra-single's ordinary
// claim holds, and GPU 2, which no one holds. The kubelet reports it as
// any claim; the claim's allocation says adminAccess. It is no allocation:
// dra-single keeps GPU 1 whole (1), GPU 2 has no owner, the monitor none
// (found by probing: probe14-k8s D1, dra-single's series gone as one of
// two claims of unknown shares, and the monitor billed GPU 2). Where the
// claim cannot be read its devices count as before, with one log line.
func TestDRAAdminAccessIsNoAllocation(t *testing.T) {
	claim := func(ns, name, device string) kubernetes.ClaimDevice {
		return kubernetes.ClaimDevice{ClaimNamespace: ns, ClaimName: name, Driver: "gpu.nvidia.com", Pool: "node1", Device: device}
	}
	pods := []kubernetes.PodResources{
		{Namespace: "ml", Name: "dra-single", Containers: []kubernetes.ContainerResources{{Name: "main", Claims: []kubernetes.ClaimDevice{claim("ml", "single", "gpu-1")}}}},
		{Namespace: "monitoring", Name: "dcgm-x9z8y", Containers: []kubernetes.ContainerResources{{Name: "dcgm", Claims: []kubernetes.ClaimDevice{
			claim("monitoring", "admin", "gpu-1"), claim("monitoring", "admin", "gpu-2"),
		}}}},
	}
	slices := fakeSlices{idx: kubernetes.ResourceSliceIndex{
		"gpu.nvidia.com/node1/gpu-1": {Vendor: "nvidia", ID: draGPUs[1].UUID, UUID: draGPUs[1].UUID},
		"gpu.nvidia.com/node1/gpu-2": {Vendor: "nvidia", ID: draGPUs[2].UUID, UUID: draGPUs[2].UUID},
	}}
	access := &fakeClaimAccess{admin: map[string]map[string]bool{
		"monitoring/admin": {"gpu.nvidia.com/node1/gpu-1": true, "gpu.nvidia.com/node1/gpu-2": true},
	}}
	var logs bytes.Buffer
	r := New(Config{Kubelet: &fakeKubelet{pods: pods}, ResourceSlices: slices, ClaimAccess: access, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	res := r.Resolve(context.Background(), draDevices())
	if got := owners(res.Devices[draGPUs[1].UUID]); strings.Join(got, ";") != "ml/dra-single/main claim=ml/single 1" {
		t.Errorf("GPU 1 owners %q, want dra-single's whole", got)
	}
	if got := owners(res.Devices[draGPUs[2].UUID]); len(got) != 0 {
		t.Errorf("GPU 2 owners %q, want none", got)
	}
	if access.asked != 2 {
		t.Errorf("claims asked %d times, want once each of 2", access.asked)
	}
	if pods[1].Containers[0].Claims[0].ClaimName != "admin" || len(pods[1].Containers[0].Claims) != 2 {
		t.Errorf("the kubelet's answer was changed: %+v", pods[1])
	}

	access.err = errors.New("resourceclaims.resource.k8s.io \"admin\" is forbidden")
	res = r.Resolve(context.Background(), draDevices())
	if got := owners(res.Devices[draGPUs[2].UUID]); strings.Join(got, ";") != "monitoring/dcgm-x9z8y/dcgm claim=monitoring/admin 1" {
		t.Errorf("claim unreadable: GPU 2 owners %q, want the monitor's as before", got)
	}
	if !strings.Contains(logs.String(), "admin access") {
		t.Errorf("no log line for the unreadable claim:\n%s", logs.String())
	}
}

// TestDRAClaimsOfAVendorNotRead: while the NVIDIA collector fails, a DRA
// claim's GPU is served by no device for that reason alone: it is not
// counted in UnresolvedClaimDevices nor logged as not identified, as a
// device plugin ID is not (review13 R13-3).
func TestDRAClaimsOfAVendorNotRead(t *testing.T) {
	pods := []kubernetes.PodResources{{Namespace: "ml", Name: "dra-single", Containers: []kubernetes.ContainerResources{{Name: "main", Claims: []kubernetes.ClaimDevice{
		{ClaimNamespace: "ml", ClaimName: "single", Driver: "gpu.nvidia.com", Pool: "node1", Device: "gpu-1"},
	}}}}}
	slices := fakeSlices{idx: kubernetes.ResourceSliceIndex{"gpu.nvidia.com/node1/gpu-1": {Vendor: "nvidia", ID: draGPUs[1].UUID, UUID: draGPUs[1].UUID}}}
	var logs bytes.Buffer
	r := New(Config{Kubelet: &fakeKubelet{pods: pods}, ResourceSlices: slices, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if res := r.ResolveRead(context.Background(), nil, map[string]bool{"nvidia": true}); res.UnresolvedClaimDevices != 0 || logs.Len() > 0 {
		t.Errorf("NVIDIA not read: %d unresolved claim devices, logs %q; want 0, none", res.UnresolvedClaimDevices, logs.String())
	}
	if res := r.Resolve(context.Background(), nil); res.UnresolvedClaimDevices != 1 {
		t.Errorf("NVIDIA read, the GPU not there: %d unresolved claim devices, want 1", res.UnresolvedClaimDevices)
	}
}
