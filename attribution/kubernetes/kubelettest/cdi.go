package kubelettest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// NVIDIAGPU is a GPU as the NVIDIA kernel driver lists it in procfs.
type NVIDIAGPU struct {
	Minor    int
	UUID     string
	PCIBusID string // "0000:07:00.0"
	Model    string
}

// WriteNVIDIAProcfs writes, under the procfs mountpoint root, the NVIDIA
// driver's tables that map device minors to GPUs: one
// driver/nvidia/gpus/<bus id>/information per GPU and
// driver/nvidia-caps/mig-minors. The layouts are those of the driver's
// README ("Using the /proc File System Interface") and of the mig-minors
// sample quoted in NVIDIA/k8s-dra-driver-gpu internal/common/nvcaps.go.
func WriteNVIDIAProcfs(root string, gpus []NVIDIAGPU) error {
	var minors strings.Builder
	minors.WriteString("config 1\nmonitor 2\n")
	for _, g := range gpus {
		dir := filepath.Join(root, "driver", "nvidia", "gpus", g.PCIBusID)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		info := fmt.Sprintf("Model: \t\t %s\nIRQ:   \t\t None\nGPU UUID: \t %s\nVideo BIOS: \t 92.00.45.00.06\nBus Type: \t PCIe\n"+
			"DMA Size: \t 47 bits\nDMA Mask: \t 0x7fffffffffff\nBus Location: \t %s\nDevice Minor: \t %d\nGPU Excluded:\t No\n",
			g.Model, g.UUID, g.PCIBusID, g.Minor)
		if err := os.WriteFile(filepath.Join(dir, "information"), []byte(info), 0o644); err != nil {
			return err
		}
		for gi := 0; gi < migGPUInstances; gi++ {
			giMinor, _ := MIGCapMinors(g.Minor, gi, 0)
			fmt.Fprintf(&minors, "gpu%d/gi%d/access %d\n", g.Minor, gi, giMinor)
			for ci := 0; ci < migComputeInstances; ci++ {
				_, ciMinor := MIGCapMinors(g.Minor, gi, ci)
				fmt.Fprintf(&minors, "gpu%d/gi%d/ci%d/access %d\n", g.Minor, gi, ci, ciMinor)
			}
		}
	}
	dir := filepath.Join(root, "driver", "nvidia-caps")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "mig-minors"), []byte(minors.String()), 0o644)
}

// The driver reserves 15 GPU instances per GPU and 8 compute instances per
// GPU instance in mig-minors.
const (
	migGPUInstances     = 15
	migComputeInstances = 8
)

// MIGCapMinors are the minors of the /dev/nvidia-caps/nvidia-cap<N> nodes
// that grant access to GPU instance gi, and compute instance ci in it, of
// the GPU with minor gpu. The numbering fits every line of the sample in
// k8s-dra-driver-gpu internal/common/nvcaps.go: "gpu0/gi0/access 3",
// "gpu3/gi3/ci3/access 439", "gpu6/gi11/ci5/access 918"
// (3 + 6*135 + 11*9 + 1 + 5 = 918).
func MIGCapMinors(gpu, gi, ci int) (giMinor, ciMinor int) {
	giMinor = 3 + gpu*migGPUInstances*(migComputeInstances+1) + gi*(migComputeInstances+1)
	return giMinor, giMinor + 1 + ci
}

// ClaimSpecDevice is one device that NVIDIA's DRA driver prepared for a
// claim.
type ClaimSpecDevice struct {
	// Name is the device's name in the ResourceSlice: "gpu-<minor>", or
	// "gpu-<minor>-mig-<profile>-<profile id>-<placement start>".
	Name  string
	Minor int
	// MIG is set for a MIG device: its GPU and compute instance IDs.
	MIG *MIGPlacement
}

// MIGPlacement is a MIG device's GPU and compute instance.
type MIGPlacement struct {
	GPUInstance, ComputeInstance int
}

// WriteClaimSpec writes the CDI spec that NVIDIA's DRA driver writes when it
// prepares a claim, and returns the fully qualified CDI device names the
// kubelet then reports. As in k8s-dra-driver-gpu cmd/gpu-kubelet-plugin/cdi.go
// (CreateClaimSpecFile): one transient spec per claim,
// "k8s.gpu.nvidia.com-claim_<claim uid>.yaml", of kind
// "k8s.gpu.nvidia.com/claim", one device "<claim uid>-<device name>" per
// prepared device with the device node of its GPU (and, for MIG, the
// capability nodes of its GPU and compute instance), and the driver's
// common edits at the top level.
func WriteClaimSpec(dir, claimUID string, devs []ClaimSpecDevice) ([]string, error) {
	var b strings.Builder
	b.WriteString("---\ncdiVersion: 0.5.0\nkind: k8s.gpu.nvidia.com/claim\ndevices:\n")
	var names []string
	for _, d := range devs {
		name := claimUID + "-" + d.Name
		names = append(names, "k8s.gpu.nvidia.com/claim="+name)
		fmt.Fprintf(&b, "- name: %s\n  containerEdits:\n    deviceNodes:\n    - path: /dev/nvidia%d\n", name, d.Minor)
		if d.MIG != nil {
			gi, ci := MIGCapMinors(d.Minor, d.MIG.GPUInstance, d.MIG.ComputeInstance)
			for _, m := range []int{gi, ci} {
				fmt.Fprintf(&b, "    - path: /dev/nvidia-caps/nvidia-cap%d\n      type: c\n      major: 238\n      minor: %d\n", m, m)
			}
		}
	}
	b.WriteString(`containerEdits:
  deviceNodes:
  - path: /dev/nvidiactl
  - path: /dev/nvidia-uvm
  - path: /dev/nvidia-uvm-tools
  hooks:
  - hookName: createContainer
    path: /usr/bin/nvidia-cdi-hook
    args:
    - nvidia-cdi-hook
    - update-ldcache
    - --folder
    - /usr/lib/x86_64-linux-gnu
  mounts:
  - hostPath: /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580.95.05
    containerPath: /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580.95.05
    options:
    - ro
    - nosuid
    - nodev
    - rbind
    - rprivate
`)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "k8s.gpu.nvidia.com-claim_"+claimUID+".yaml")
	return names, os.WriteFile(path, []byte(b.String()), 0o644)
}
