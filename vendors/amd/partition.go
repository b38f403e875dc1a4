package amd

import (
	"bytes"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/xpu-exporter/xpu_exporter/vendors/reading"
)

// Compute partitions (MI300 in DPX, QPX or CPX mode) are separate DRM
// devices. The first partition of a GPU keeps the GPU's own PCI function
// and card; every further one is a platform device that the amdxcp driver
// registers as "amdgpu_xcp_<n>" (drivers/gpu/drm/amd/amdxcp/
// amdgpu_xcp_drv.c, amdgpu_xcp_drm_dev_alloc: snprintf(dev_name, …,
// "amdgpu_xcp_%d", …); platform_device_register_simple(dev_name, -1, …)),
// numbered across all GPUs of the node, under
// /sys/devices/platform/amdgpu_xcp_<n>/drm/{cardN,renderDM}.
//
// The ROCm k8s-device-plugin (internal/pkg/amdgpu/amdgpu.go, GetAMDGPUs)
// advertises a GPU, or its first partition, under its PCI address, and every
// further partition under the platform device's name, "amdgpu_xcp_<n>".
// attribution/kubernetes (NormalizeDeviceID) already turns both into a
// DeviceRef: PCIBusID "0000:0c:00.0" or Partition "amdgpu_xcp_30". So a
// Partition's DevicePluginID is the PCI address for partition 0 and the
// platform device name otherwise.
//
// The amdgpu_xcp_<n> number says nothing about the parent GPU. The parent
// comes from KFD's topology: each partition is a KFD node whose properties
// file (/sys/class/kfd/kfd/topology/nodes/<id>/properties, kfd_topology.c,
// node_show) prints "drm_render_minor", "domain" (pci_domain_nr) and
// "location_id" (pci_dev_id of the parent GPU: bus << 8 | devfn). The
// render minor joins the platform device to its KFD node, and domain and
// location_id give the parent's PCI address, but for its function bits: on
// a GPU of several KFD nodes the kernel ORs the partition's number into
// location_id (kfd_topology.c, kfd_topology_add_device: "if
// (gpu->kfd->num_nodes > 1) dev->node_props.location_id |=
// dev->gpu->node_id", "to differentiate" the nodes; before kernel 6.12 on
// GC 9.4.3, MI300, alone), so partition 3 of a GPU at 0c:00.0 says
// 0c:00.3. The parent is the GPU at that domain, bus and device.
//
// The kernel registers the platform devices for every partition a GPU
// could have when the driver loads (amdgpu_xcp.c, amdgpu_xcp_dev_register),
// whatever the current mode; only those backing a live partition have a
// KFD node. A platform device whose render minor no KFD node names is
// therefore idle and skipped, as the device plugin skips it
// (renderNodeSetFromTopology).

// Partition is one compute partition of a GPU.
type Partition struct {
	// Name is "amdgpu_xcp_<n>" for a platform partition, or the parent's PCI
	// address for partition 0.
	Name string
	// DevicePluginID is the ID the ROCm device plugin advertises for it.
	DevicePluginID string
	// ParentPCIBusID is the GPU that holds the partition.
	ParentPCIBusID string
	// Card and RenderMinor are the partition's DRM nodes, -1 when absent.
	// DRM fdinfo names a client's device by drm-pdev, which for every
	// partition is the parent's PCI address (amdgpu_xcp.c,
	// amdgpu_xcp_dev_alloc: "Redirect all IOCTLs to the primary device",
	// p_ddev->render->drm = ddev); the render node a client's fd is open on
	// (Client.RenderMinor) tells the partitions apart.
	Card        int
	RenderMinor int
	// Number is the partition's number in its GPU (its KFD node's node_id,
	// which the kernel ORs into the function bits of location_id, see
	// above): 0 for partition 0; unset where the KFD node does not tell
	// it (its GPU's own function is not 0, so the OR cannot be undone).
	// Numbering the partitions found one after another gave, in a listing
	// in part (a mode switch under way), one partition another's number
	// (probe G, PG3).
	Number Opt[int]
}

// kfdNode is what a KFD topology node says about its GPU.
type kfdNode struct {
	pciBusID string
}

// maxKFDNodes bounds the topology scan: a node has a few CPU nodes and at
// most 8 GPUs × 8 partitions.
const maxKFDNodes = 256

// Partitions lists the compute partitions of the node: partition 0 of each
// partitioned GPU in gpus (their ComputePartition set and not "SPX"), then
// every live amdgpu_xcp_<n> platform device with its parent from KFD's
// topology.
// Errors are per file and do not stop the scan.
func (r Reader) Partitions(gpus []Device) ([]Partition, []ReadError) {
	var out []Partition
	var errs []ReadError
	for _, d := range gpus {
		if d.ComputePartition.OK && d.ComputePartition.Value != "SPX" && d.PCIBusID != "" {
			out = append(out, firstPartition(d))
		}
	}

	platform := filepath.Join(r.root(), "devices", "platform")
	names, err := r.Files.listDir(platform, 4096)
	if err != nil {
		if !absent(err) {
			errs = append(errs, ReadError{File: "devices/platform", Err: err})
		}
		return out, errs
	}
	var nodes map[int]kfdNode
	for _, name := range names {
		n, ok := strings.CutPrefix(name, "amdgpu_xcp_")
		if _, err := strconv.Atoi(n); !ok || err != nil {
			continue
		}
		if nodes == nil {
			nodes, errs = r.kfdNodes(errs)
		}
		p := Partition{Name: name, DevicePluginID: name, Card: -1, RenderMinor: -1}
		drm, err := readDirNames(filepath.Join(platform, name, "drm"), 16)
		if err != nil && !absent(err) {
			errs = append(errs, ReadError{File: filepath.Join("devices/platform", name, "drm"), Err: err})
		}
		if m := renderMinor(drm); m.OK {
			p.RenderMinor = m.Value
		}
		for _, e := range drm {
			if v, ok := strings.CutPrefix(e, "card"); ok {
				if m, err := strconv.Atoi(v); err == nil {
					p.Card = m
				}
			}
		}
		node, ok := nodes[p.RenderMinor]
		if !ok {
			continue
		}
		p.ParentPCIBusID = parentOf(node.pciBusID, gpus)
		p.Number = partitionNumber(node.pciBusID, p.ParentPCIBusID)
		out = append(out, p)
	}
	// A GPU whose mode could not be read ("UNKNOWN" while a mode switch is
	// under way, amdgpu_gfx.c, amdgpu_gfx_compute_mode_desc; an unreadable
	// file) but which has a live platform partition is partitioned: its
	// first partition is on its own function, as in any mode but SPX.
	// Without it every partition would take the next one's number.
	for _, d := range gpus {
		if d.ComputePartition.OK || d.PCIBusID == "" {
			continue
		}
		if slices.ContainsFunc(out, func(p Partition) bool { return p.ParentPCIBusID == d.PCIBusID }) {
			out = append(out, firstPartition(d))
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return partitionLess(out[i], out[j]) })
	return out, errs
}

// parentOf is the PCI address of the GPU a KFD node's address names: the
// GPU at that address, else the one GPU at its domain, bus and device
// (the function bits carry the partition's number). An address no GPU, or
// several, may have is returned as it is, and names no GPU.
func parentOf(kfdBusID string, gpus []Device) string {
	slot, _, ok := strings.Cut(kfdBusID, ".")
	if !ok {
		return kfdBusID
	}
	found := ""
	for _, d := range gpus {
		switch {
		case d.PCIBusID == kfdBusID:
			return kfdBusID
		case strings.HasPrefix(d.PCIBusID, slot+"."):
			if found != "" {
				return kfdBusID
			}
			found = d.PCIBusID
		}
	}
	if found == "" {
		return kfdBusID
	}
	return found
}

// partitionNumber is the number of a platform partition whose KFD node
// says kfdBusID, of the GPU at parent: the function bits the kernel ORed
// the node's node_id into, where the GPU's own are 0. A platform partition
// is never partition 0, which is on the GPU's own function; unset for an
// address that does not tell.
func partitionNumber(kfdBusID, parent string) Opt[int] {
	slot, fn, ok := strings.Cut(kfdBusID, ".")
	if !ok || parent != slot+".0" {
		return Opt[int]{}
	}
	n, err := strconv.Atoi(fn)
	if err != nil || n < 1 || n > 7 {
		return Opt[int]{}
	}
	return reading.Some(n)
}

// firstPartition is partition 0 of a partitioned GPU: the GPU's own PCI
// function and DRM nodes.
func firstPartition(d Device) Partition {
	card := -1
	if n, err := strconv.Atoi(strings.TrimPrefix(d.Card, "card")); err == nil {
		card = n
	}
	minor := -1
	if d.RenderMinor.OK {
		minor = d.RenderMinor.Value
	}
	return Partition{Name: d.PCIBusID, DevicePluginID: d.PCIBusID, ParentPCIBusID: d.PCIBusID, Card: card, RenderMinor: minor, Number: reading.Some(0)}
}

// partitionLess orders by parent, then partition 0 first, then by
// amdgpu_xcp number.
func partitionLess(a, b Partition) bool {
	if a.ParentPCIBusID != b.ParentPCIBusID {
		return a.ParentPCIBusID < b.ParentPCIBusID
	}
	an, aok := strings.CutPrefix(a.Name, "amdgpu_xcp_")
	bn, bok := strings.CutPrefix(b.Name, "amdgpu_xcp_")
	if aok != bok {
		return bok
	}
	ai, _ := strconv.Atoi(an)
	bi, _ := strconv.Atoi(bn)
	return ai < bi
}

// kfdNodes maps DRM render minors to the PCI address of the GPU each KFD
// node belongs to.
func (r Reader) kfdNodes(errs []ReadError) (map[int]kfdNode, []ReadError) {
	nodes := map[int]kfdNode{}
	dir := filepath.Join(r.root(), "class", "kfd", "kfd", "topology", "nodes")
	ids, err := readDirNames(dir, maxKFDNodes)
	if err != nil {
		if !absent(err) {
			errs = append(errs, ReadError{File: "class/kfd/kfd/topology/nodes", Err: err})
		}
		return nodes, errs
	}
	for _, id := range ids {
		rel := filepath.Join("class/kfd/kfd/topology/nodes", id, "properties")
		b, err := readFile(filepath.Join(dir, id, "properties"), maxValueSize)
		if err != nil {
			if !absent(err) {
				errs = append(errs, ReadError{File: rel, Err: err})
			}
			continue
		}
		minor, bus, err := parseKFDProperties(b)
		if err != nil {
			errs = append(errs, ReadError{File: rel, Err: err})
			continue
		}
		if minor > 0 {
			nodes[minor] = kfdNode{pciBusID: bus}
		}
	}
	return nodes, errs
}

// parseKFDProperties reads drm_render_minor, domain and location_id from a
// KFD topology node's properties ("<name> <value>" per line). A CPU node
// has drm_render_minor 0 and no GPU; it returns minor 0.
func parseKFDProperties(b []byte) (minor int, pciBusID string, err error) {
	props := map[string]uint64{}
	for _, line := range bytes.Split(b, []byte("\n")) {
		f := strings.Fields(string(line))
		if len(f) != 2 {
			continue
		}
		switch f[0] {
		case "drm_render_minor", "domain", "location_id":
			v, err := strconv.ParseUint(f[1], 10, 32)
			if err != nil {
				return 0, "", fmt.Errorf("%w: %s %q", ErrMalformed, f[0], truncate(f[1]))
			}
			props[f[0]] = v
		}
	}
	m, ok := props["drm_render_minor"]
	if !ok || m == 0 {
		return 0, "", nil
	}
	loc, okLoc := props["location_id"]
	dom, okDom := props["domain"]
	if !okLoc || !okDom || loc > 0xffff || dom > 0xffff {
		return 0, "", fmt.Errorf("%w: GPU node without a PCI location", ErrMalformed)
	}
	bus, devfn := loc>>8, loc&0xff
	return int(m), fmt.Sprintf("%04x:%02x:%02x.%d", dom, bus, devfn>>3, devfn&7), nil
}
