package demo

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/xpu-exporter/xpu_exporter/attribution/kubernetes/kubelettest"
	"github.com/xpu-exporter/xpu_exporter/internal/pciaddr"
)

// The DRA drivers whose claims the demo prepares, each as the driver does.
const (
	nvidiaDRADriver = "gpu.nvidia.com"
	amdDRADriver    = "gpu.amd.com"
	gaudiDRADriver  = "gaudi.intel.com"
)

// draNodes are the device nodes a device of AMD's or Intel's Gaudi DRA
// driver gives a container, by its name there. AMD's driver names a GPU or
// a compute partition "gpu-<card>-<render>" after its DRM nodes and gives
// /dev/kfd, /dev/dri/card<N> and /dev/dri/renderD<M> (ROCm
// k8s-gpu-dra-driver, docs/driver-attributes.md and
// cmd/gpu-kubeletplugin/state.go); Intel's names a Gaudi by its PCI
// address and device ID, "0000-b3-00-0-0x1020", and gives
// /dev/accel/accel<N> and /dev/accel/accel_controlD<N>
// (intel-resource-drivers-for-kubernetes, pkg/gaudi/device DeviceInfo.UID,
// pkg/gaudi/cdihelpers).
func (s *Scenario) draNodes(driver, name string) ([]string, error) {
	switch driver {
	case amdDRADriver:
		layout := s.newAMDSim("", "", time.Time{})
		for _, g := range layout.gpus {
			nodes := []amdPart{{card: g.card, render: g.render}}
			if len(g.parts) > 0 {
				nodes = g.parts
			}
			for _, p := range nodes {
				if name == fmt.Sprintf("gpu-%d-%d", p.card, p.render) {
					return []string{"/dev/kfd", fmt.Sprintf("/dev/dri/card%d", p.card), fmt.Sprintf("/dev/dri/renderD%d", p.render)}, nil
				}
			}
		}
		return nil, fmt.Errorf("device %q: no AMD GPU or partition of the demo has card and render node gpu-<card>-<render> (GPU j is card j+1, renderD 128+j; further partitions follow)", name)
	case gaudiDRADriver:
		for k, d := range s.gaudiDevices() {
			if name == gaudiUID(d) {
				return gaudiNodes(k), nil
			}
		}
		return nil, fmt.Errorf("device %q: no Gaudi of the demo is named so (<domain>-<bus>-<device>-<function>-<PCI device ID>: 0x1020 for a Gaudi 2, 0x1060 for a Gaudi 3)", name)
	}
	return nil, nil
}

// gaudiUID is how Intel's Gaudi DRA driver names a device: its PCI address
// with "-" for ":" and "." and its PCI device ID (pkg/gaudi/device,
// DeviceInfo.UID: "0000-01-02-0-0x1234"; ModelNames: 0x1020 Gaudi2, 0x1060
// Gaudi3).
func gaudiUID(d *DeviceSpec) string {
	id := "0x1020"
	if strings.Contains(d.Model, "325") || strings.Contains(d.Model, "Gaudi 3") || strings.Contains(d.Model, "Gaudi3") {
		id = "0x1060"
	}
	return strings.NewReplacer(":", "-", ".", "-").Replace(strings.ToLower(d.PCIBusID)) + "-" + id
}

// gaudiNodes are the device nodes Intel's Gaudi DRA driver gives the
// container for the node's k-th Gaudi, accel<k> in the demo.
func gaudiNodes(k int) []string {
	return []string{fmt.Sprintf("/dev/accel/accel%d", k), fmt.Sprintf("/dev/accel/accel_controlD%d", k)}
}

// draDevice is what a DRA device name of NVIDIA's driver says: the GPU
// (by the minor number of its device file, minor_number) and, for a MIG device,
// its profile without dots ("gpu-<minor>-mig-<profile>-<profile id>-<placement
// start>", k8s-dra-driver-gpu cmd/gpu-kubelet-plugin mig.go).
func (s *Scenario) draDevice(name string) (kubelettest.ClaimSpecDevice, error) {
	rest, ok := strings.CutPrefix(name, "gpu-")
	if !ok {
		return kubelettest.ClaimSpecDevice{}, fmt.Errorf("device %q: want gpu-<minor> or gpu-<minor>-mig-<profile>-<id>-<start>", name)
	}
	idx, mig, isMIG := strings.Cut(rest, "-mig-")
	minor, err := strconv.Atoi(idx)
	at := slices.IndexFunc(s.Devices, func(d DeviceSpec) bool { return d.Vendor == VendorNVIDIA && d.minor == minor })
	if err != nil || at < 0 {
		return kubelettest.ClaimSpecDevice{}, fmt.Errorf("device %q: %q is no NVIDIA GPU's minor number", name, idx)
	}
	d := kubelettest.ClaimSpecDevice{Name: name, Minor: minor}
	if !isMIG {
		return d, nil
	}
	profile, _, _ := strings.Cut(mig, "-")
	var found []MIGSpec
	for _, m := range s.Devices[at].MIG {
		if strings.ReplaceAll(m.Profile, ".", "") == profile {
			found = append(found, m)
		}
	}
	if len(found) != 1 {
		return d, fmt.Errorf("device %q: GPU %d has %d MIG instances of profile %q, want exactly one", name, minor, len(found), profile)
	}
	d.MIG = &kubelettest.MIGPlacement{GPUInstance: found[0].GPUInstance, ComputeInstance: found[0].ComputeInstance}
	return d, nil
}

// validateClaims checks the DRA claims of the scenario's pods that the demo
// prepares (drivers gpu.nvidia.com, gpu.amd.com and gaudi.intel.com, no CDI
// devices given).
func (s *Scenario) validateClaims() []error {
	var errs []error
	if s.Kubernetes == nil {
		return nil
	}
	for _, p := range s.Kubernetes.Pods {
		for _, c := range p.Containers {
			for _, cl := range c.Claims {
				for _, d := range cl.Devices {
					if len(d.CDIDevices) > 0 {
						continue
					}
					var err error
					switch d.Driver {
					case nvidiaDRADriver:
						_, err = s.draDevice(d.Device)
					case amdDRADriver, gaudiDRADriver:
						_, err = s.draNodes(d.Driver, d.Device)
					}
					if err != nil {
						errs = append(errs, fmt.Errorf("kubernetes: pod %s/%s claim %s: %w", p.Namespace, p.Name, cl.Name, err))
					}
				}
			}
		}
	}
	return errs
}

// hasClaims says whether a pod of the scenario uses a DRA claim.
func (s *Scenario) hasClaims() bool {
	if s.Kubernetes == nil {
		return false
	}
	for _, p := range s.Kubernetes.Pods {
		for _, c := range p.Containers {
			if len(c.Claims) > 0 {
				return true
			}
		}
	}
	return false
}

// prepareClaims does on the demo node what NVIDIA's DRA driver does when the
// kubelet prepares a claim: it writes the claim's CDI spec into cdiDir and
// fills in the CDI device names the kubelet then reports; the driver's
// procfs tables that turn the spec's device nodes into GPUs are the
// driver's, written with the node (writeNVIDIADriverTable). A claim's UID
// is derived from its namespace and name, so that reruns give the same
// names.
func (s *Scenario) prepareClaims(cdiDir string) error {
	type claimKey struct{ namespace, name string }
	devices := map[claimKey][]kubelettest.ClaimSpecDevice{}
	var order []claimKey
	for _, p := range s.Kubernetes.Pods {
		for _, c := range p.Containers {
			for _, cl := range c.Claims {
				k := claimKey{cl.Namespace, cl.Name}
				for _, d := range cl.Devices {
					if d.Driver != nvidiaDRADriver || len(d.CDIDevices) > 0 {
						continue
					}
					dev, err := s.draDevice(d.Device)
					if err != nil {
						return err
					}
					if _, seen := devices[k]; !seen {
						order = append(order, k)
					}
					if !containsDevice(devices[k], dev.Name) {
						devices[k] = append(devices[k], dev)
					}
				}
			}
		}
	}
	names := map[string][]string{} // claim namespace/name/device → CDI names
	for _, k := range order {
		uid := claimUID(k.namespace, k.name)
		cdi, err := kubelettest.WriteClaimSpec(cdiDir, uid, devices[k])
		if err != nil {
			return err
		}
		for i, d := range devices[k] {
			names[k.namespace+"/"+k.name+"/"+d.Name] = []string{cdi[i]}
		}
	}
	if err := s.prepareOtherClaims(cdiDir, names); err != nil {
		return err
	}
	for _, p := range s.Kubernetes.Pods {
		for _, c := range p.Containers {
			for _, cl := range c.Claims {
				for i, d := range cl.Devices {
					if n, ok := names[cl.Namespace+"/"+cl.Name+"/"+d.Device]; ok && len(d.CDIDevices) == 0 {
						cl.Devices[i].CDIDevices = n
					}
				}
			}
		}
	}
	return nil
}

// prepareOtherClaims writes the CDI specs AMD's and Intel's Gaudi DRA
// drivers write for the scenario's claims of theirs, and adds the CDI
// device names the kubelet reports for each claim device to names, in the
// drivers' order.
//
// AMD's driver writes one spec of kind k8s.gpu.amd.com/gpu of its own, the
// "common" device of environment alone, and a spec per claim of the
// claim's devices, "<claim UID>-gpu-<card>-<render>"; it reports the
// common device first (ROCm k8s-gpu-dra-driver, cmd/gpu-kubeletplugin
// cdi.go and state.go). Intel's writes one spec of kind intel.com/gaudi of
// every Gaudi the node has, claimed or not, by its UID, and adds to it per
// claim a device of hooks alone named by the claim's UID, reported after
// the Gaudis (intel-resource-drivers-for-kubernetes, pkg/gaudi/cdihelpers).
func (s *Scenario) prepareOtherClaims(cdiDir string, names map[string][]string) error {
	specs := map[string]string{} // file name → content
	var amdClaims []string       // claim UIDs, in order
	amdDevices := map[string][]string{}
	var gaudiClaims []string
	for _, p := range s.Kubernetes.Pods {
		for _, c := range p.Containers {
			for _, cl := range c.Claims {
				uid := claimUID(cl.Namespace, cl.Name)
				for _, d := range cl.Devices {
					if len(d.CDIDevices) > 0 || (d.Driver != amdDRADriver && d.Driver != gaudiDRADriver) {
						continue
					}
					nodes, err := s.draNodes(d.Driver, d.Device)
					if err != nil {
						return err
					}
					key := cl.Namespace + "/" + cl.Name + "/" + d.Device
					if d.Driver == gaudiDRADriver {
						if !slices.Contains(gaudiClaims, uid) {
							gaudiClaims = append(gaudiClaims, uid)
						}
						names[key] = []string{"intel.com/gaudi=" + d.Device, "intel.com/gaudi=" + uid}
						continue
					}
					name := uid + "-" + d.Device
					if _, ok := amdDevices[uid]; !ok {
						amdClaims = append(amdClaims, uid)
					}
					if _, done := names[key]; !done {
						amdDevices[uid] = append(amdDevices[uid], cdiDeviceEntry(name, nodes, false))
					}
					names[key] = []string{"k8s.gpu.amd.com/gpu=common", "k8s.gpu.amd.com/gpu=" + name}
				}
			}
		}
	}
	if len(amdClaims) > 0 {
		specs["k8s.gpu.amd.com-gpu_common.yaml"] = "cdiVersion: 0.5.0\nkind: k8s.gpu.amd.com/gpu\ndevices:\n  - name: common\n    containerEdits:\n      env: [DRA_RESOURCE_DRIVER_NAME=gpu.amd.com]\n"
	}
	for _, uid := range amdClaims {
		specs["k8s.gpu.amd.com-gpu_"+uid+".yaml"] = "cdiVersion: 0.5.0\nkind: k8s.gpu.amd.com/gpu\ndevices:\n" + strings.Join(amdDevices[uid], "")
	}
	if len(gaudiClaims) > 0 {
		var b strings.Builder
		b.WriteString("cdiVersion: 0.5.0\nkind: intel.com/gaudi\ndevices:\n")
		for k, d := range s.gaudiDevices() {
			b.WriteString(cdiDeviceEntry(gaudiUID(d), gaudiNodes(k), true))
		}
		for _, uid := range gaudiClaims {
			fmt.Fprintf(&b, "  - name: %s\n    containerEdits:\n      hooks: [{hookName: createRuntime, path: /usr/bin/habana-container-hook, args: [habana-container-hook, createRuntime]}]\n", uid)
		}
		specs["intel.com-gaudi.yaml"] = b.String()
	}
	if len(specs) == 0 {
		return nil
	}
	if err := os.MkdirAll(cdiDir, 0o755); err != nil {
		return err
	}
	for file, content := range specs {
		if err := os.WriteFile(filepath.Join(cdiDir, file), []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// cdiDeviceEntry is one device of a CDI spec's YAML device list, giving the
// container nodes (at the same host path where hostPath is set).
func cdiDeviceEntry(name string, nodes []string, hostPath bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  - name: %s\n    containerEdits:\n      deviceNodes:\n", name)
	for _, n := range nodes {
		if hostPath {
			fmt.Fprintf(&b, "        - {path: %s, hostPath: %s, type: c}\n", n, n)
		} else {
			fmt.Fprintf(&b, "        - {path: %s, type: c}\n", n)
		}
	}
	return b.String()
}

func containsDevice(ds []kubelettest.ClaimSpecDevice, name string) bool {
	for _, d := range ds {
		if d.Name == name {
			return true
		}
	}
	return false
}

// claimUID makes a UUID-shaped claim UID from the claim's name.
func claimUID(namespace, name string) string {
	h := fmt.Sprintf("%x", sha256.Sum256([]byte(namespace+"/"+name)))
	return h[0:8] + "-" + h[8:12] + "-4" + h[13:16] + "-8" + h[17:20] + "-" + h[20:32]
}

// cdiDir is where the demo writes its CDI specs, under its directory.
func cdiDir(dir string) string { return filepath.Join(dir, "cdi") }

// writeNVIDIADriverTable writes the NVIDIA kernel driver's procfs tables of
// the node's NVIDIA GPUs (internal/nvdriver): one
// driver/nvidia/gpus/<bus id>/information per GPU, which the driver keeps
// whatever state the GPU is in, a lost one's included, and the MIG
// capability minors. The driver prints the bus location as "%04x:%02x:
// %02x.%x" (nv-procfs.c), not in NVML's 8-digit upper-case form the
// scenario holds.
func (s *Scenario) writeNVIDIADriverTable(procRoot string) error {
	var gpus []kubelettest.NVIDIAGPU
	for _, d := range s.Devices {
		if d.Vendor != VendorNVIDIA {
			continue
		}
		bus := pciaddr.Canonical(d.PCIBusID)
		if bus == "" {
			bus = d.PCIBusID // no address: written as the scenario says
		}
		gpus = append(gpus, kubelettest.NVIDIAGPU{Minor: d.minor, UUID: d.UUID, PCIBusID: bus, Model: d.Model})
	}
	if len(gpus) == 0 {
		return nil
	}
	return kubelettest.WriteNVIDIAProcfs(procRoot, gpus)
}
