package demo

import (
	"crypto/sha256"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/xpu-exporter/xpu_exporter/attribution/kubernetes/kubelettest"
)

// nvidiaDRADriver is the driver name of NVIDIA's DRA driver, the one whose
// claims the demo prepares.
const nvidiaDRADriver = "gpu.nvidia.com"

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
// prepares (driver gpu.nvidia.com, no CDI devices given).
func (s *Scenario) validateClaims() []error {
	var errs []error
	if s.Kubernetes == nil {
		return nil
	}
	for _, p := range s.Kubernetes.Pods {
		for _, c := range p.Containers {
			for _, cl := range c.Claims {
				for _, d := range cl.Devices {
					if d.Driver != nvidiaDRADriver || len(d.CDIDevices) > 0 {
						continue
					}
					if _, err := s.draDevice(d.Device); err != nil {
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
// the driver's procfs tables under procRoot, and fills in the CDI device
// names the kubelet then reports. A claim's UID is derived from its
// namespace and name, so that reruns give the same names.
func (s *Scenario) prepareClaims(cdiDir, procRoot string) error {
	var gpus []kubelettest.NVIDIAGPU
	for i, d := range s.Devices {
		bus := d.PCIBusID
		if bus == "" {
			bus = fmt.Sprintf("0000:%02x:00.0", 0x10+i)
		}
		gpus = append(gpus, kubelettest.NVIDIAGPU{Minor: d.minor, UUID: d.UUID, PCIBusID: bus, Model: d.Model})
	}
	if err := kubelettest.WriteNVIDIAProcfs(procRoot, gpus); err != nil {
		return err
	}
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
	names := map[string]string{} // claim namespace/name/device → CDI name
	for _, k := range order {
		uid := claimUID(k.namespace, k.name)
		cdi, err := kubelettest.WriteClaimSpec(cdiDir, uid, devices[k])
		if err != nil {
			return err
		}
		for i, d := range devices[k] {
			names[k.namespace+"/"+k.name+"/"+d.Name] = cdi[i]
		}
	}
	for _, p := range s.Kubernetes.Pods {
		for _, c := range p.Containers {
			for _, cl := range c.Claims {
				for i, d := range cl.Devices {
					if n, ok := names[cl.Namespace+"/"+cl.Name+"/"+d.Device]; ok && len(d.CDIDevices) == 0 {
						cl.Devices[i].CDIDevices = []string{n}
					}
				}
			}
		}
	}
	return nil
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
