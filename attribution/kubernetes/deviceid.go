package kubernetes

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Vendor names, as the exporter's vendor label spells them.
const (
	VendorNVIDIA = "nvidia"
	VendorAMD    = "amd"
	VendorHabana = "habana"
)

// maxDeviceIDLen bounds a device-plugin ID. The longest real one is the
// legacy MIG form, under 60 bytes; anything far longer is not an ID.
const maxDeviceIDLen = 256

// ErrUnknownDeviceID is matched (errors.Is) by every error of
// NormalizeDeviceID: the ID has a shape this package does not know, so the
// device it names cannot be joined to a vendor's device.
var ErrUnknownDeviceID = errors.New("unknown device ID shape")

// DeviceIDError says which ID of which resource could not be normalised.
// Callers log each distinct one once: the kubelet repeats it every scrape.
type DeviceIDError struct {
	Resource string
	ID       string
	Reason   string
	// Held says a container holds the ID (Allocations), rather than a
	// device plugin only advertising it: some device of the resource's
	// vendor (ResourceVendor) is then allocated, and which is unknown.
	Held bool
}

func (e *DeviceIDError) Error() string {
	return fmt.Sprintf("device ID %q of resource %q: %s", e.ID, e.Resource, e.Reason)
}

// Unwrap makes every DeviceIDError match ErrUnknownDeviceID.
func (e *DeviceIDError) Unwrap() error { return ErrUnknownDeviceID }

// DeviceRef is what a device-plugin ID says about the device it names, in
// the terms a vendor library reports, so that an allocation can be joined to
// a device. Exactly one of UUID, PCIBusID, Index, Serial, Partition,
// DeviceName and MIGParentUUID is set.
type DeviceRef struct {
	// Vendor is VendorNVIDIA, VendorAMD or VendorHabana, taken from the
	// resource name's domain or, for a resource matched by a custom pattern,
	// from an ID shape only one vendor uses. Empty when neither tells.
	Vendor string
	// ID is the device-plugin ID without its sharing suffix: all replicas
	// of one device have the same ID.
	ID string
	// UUID is an NVIDIA GPU UUID ("GPU-…") or MIG device UUID ("MIG-…", or
	// the legacy "MIG-GPU-<uuid>/<gi>/<ci>" that drivers before R470 report
	// as the MIG device's UUID, so it matches as a UUID).
	UUID string
	// PCIBusID is the PCI address, domain:bus:device.function, lower case
	// with a 4-digit domain ("0000:c1:00.0"): AMD and Gaudi device plugins.
	PCIBusID string
	// Index is a node-local device index: an NVIDIA index ID ("3", or
	// "3:1" for MIG device 1 of GPU 3, the form of the NVIDIA device
	// plugin's deviceIDStrategy=index, which it passes into containers
	// while reporting UUIDs to the kubelet), or a Gaudi "hlN" device name
	// ("N").
	Index string
	// Serial is a Gaudi board serial number ("AN15000023"): the Intel
	// Gaudi device plugin advertises each device as the serial number HLML
	// reports for it, which hl-smi's serial field prints.
	Serial string
	// Partition is an AMD compute partition's platform device name,
	// "amdgpu_xcp_<n>", under which the ROCm device plugin advertises
	// every partition of a GPU but the first (which it advertises under
	// the GPU's PCI address).
	Partition string
	// DeviceName is how GKE's NVIDIA device plugin names a GPU: by its
	// device node, "nvidia<minor>" (/dev/nvidia<minor>), and a MIG GPU
	// instance by that and its GPU instance ID, "nvidia<minor>/gi<id>"
	// (container-engine-accelerators, pkg/gpu/nvidia/manager.go and
	// mig/mig.go, DiscoverAndMountMIGDevices).
	DeviceName string
	// Shared says the ID is one of several replicas of the device that the
	// device plugin advertises for time-slicing or MPS: NVIDIA "<id>::<n>",
	// AMD "<id>-slice-<n>", GKE "<name>/vgpu<n>".
	Shared bool
	// Replica is n of a shared ID.
	Replica int
	// MIGParentUUID and MIGGPUInstance name a MIG instance by its parent
	// GPU and GPU instance ID, where only device minors say which it is (a
	// DRA driver's CDI device nodes). UUID is then empty.
	MIGParentUUID  string
	MIGGPUInstance int
}

// Key identifies the physical (or MIG) device across all its replicas.
func (d DeviceRef) Key() string { return d.Vendor + "/" + d.ID }

// NormalizeDeviceID parses the device-plugin ID id of resource (for example
// "nvidia.com/gpu" and "GPU-1d2e…::2"). The ID shapes are those the device
// plugins create:
//
//   - NVIDIA k8s-device-plugin: GPU and MIG UUIDs with the default ID
//     strategy, "<gpu index>" and "<gpu index>:<mig index>" with the index
//     strategy, and "<id>::<n>" for replica n when time-slicing or MPS
//     sharing is configured (internal/rm AnnotatedID).
//   - GKE's NVIDIA device plugin (GoogleCloudPlatform
//     container-engine-accelerators): "nvidia<minor>" for a GPU,
//     "nvidia<minor>/gi<id>" for a MIG GPU instance, and "<name>/vgpu<n>"
//     for replica n when GPU time-sharing or MPS is configured
//     (pkg/gpu/nvidia/gpusharing, VirtualToPhysicalDeviceID).
//   - ROCm k8s-device-plugin: the GPU's PCI address, "amdgpu_xcp_<n>" for
//     a compute partition after the first (internal/pkg/amdgpu/amdgpu.go,
//     GetAMDGPUs), and "<id>-slice-<n>" for time-slicing replicas.
//   - Intel Gaudi device plugin (HabanaAI, habanalabs-k8s-device-plugin):
//     the device's serial number, which its DeviceManager.Devices sets as
//     pluginapi.Device.ID from HLML's SerialNumber() and its Allocate turns
//     back into a device with DeviceHandleBySerial. PCI addresses and
//     "hl<n>" names are accepted as well.
//
// An ID of another shape gives a *DeviceIDError.
func NormalizeDeviceID(resource, id string) (DeviceRef, error) {
	fail := func(reason string) (DeviceRef, error) {
		return DeviceRef{}, &DeviceIDError{Resource: resource, ID: id, Reason: reason}
	}
	if id == "" {
		return fail("empty")
	}
	if len(id) > maxDeviceIDLen {
		return fail(fmt.Sprintf("longer than %d bytes", maxDeviceIDLen))
	}
	for i := 0; i < len(id); i++ {
		if id[i] <= ' ' || id[i] >= 0x7f {
			return fail("contains a space, control or non-ASCII byte")
		}
	}

	base, replica, shared, err := splitReplica(id)
	if err != nil {
		return fail(err.Error())
	}
	if base == "" {
		return fail("nothing before the replica suffix")
	}
	ref := DeviceRef{ID: base, Shared: shared, Replica: replica}

	var ok bool
	switch vendor := ResourceVendor(resource); vendor {
	case VendorNVIDIA:
		ok = parseNVIDIA(&ref, base)
	case VendorAMD:
		ok = parsePCI(&ref, base) || parseAMDPartition(&ref, base)
	case VendorHabana:
		ok = parsePCI(&ref, base) || parseHabanaName(&ref, base) || parseSerial(&ref, base)
	default:
		// A resource from a custom pattern: only shapes that cannot be
		// mistaken for another vendor's, since a bare index or serial
		// could be anything.
		ok = parseNVIDIAUUID(&ref, base) || parsePCI(&ref, base)
	}
	if !ok {
		return fail("not an ID its device plugin creates")
	}
	if ref.Vendor == "" {
		ref.Vendor = ResourceVendor(resource)
	}
	// PCI addresses are written in several ways; replicas must share a key.
	if ref.PCIBusID != "" {
		ref.ID = ref.PCIBusID
	}
	return ref, nil
}

// ResourceVendor maps a resource name's domain to its vendor: "" for a
// resource of another domain (one matched by a custom pattern).
func ResourceVendor(resource string) string {
	domain, _, _ := strings.Cut(resource, "/")
	switch domain {
	case "nvidia.com":
		return VendorNVIDIA
	case "amd.com":
		return VendorAMD
	case "habana.ai":
		return VendorHabana
	}
	return ""
}

// splitReplica removes a sharing suffix: NVIDIA's "::<n>", the ROCm
// plugin's "-slice-<n>" or, after a GKE device name, "/vgpu<n>".
func splitReplica(id string) (base string, replica int, shared bool, err error) {
	if i := strings.LastIndex(id, "/vgpu"); i >= 0 && strings.HasPrefix(id, "nvidia") {
		base, shared = id[:i], true
		replica, err = parseReplica(id[i+len("/vgpu"):])
	} else if b, n, found := strings.Cut(id, "::"); found {
		base, shared = b, true
		replica, err = parseReplica(n)
	} else if i := strings.LastIndex(id, "-slice-"); i >= 0 {
		base, shared = id[:i], true
		replica, err = parseReplica(id[i+len("-slice-"):])
	} else {
		return id, 0, false, nil
	}
	if err == nil && (strings.Contains(base, "::") || strings.Contains(base, "-slice-") || strings.Contains(base, "/vgpu")) {
		err = errors.New("more than one replica suffix")
	}
	return base, replica, shared, err
}

func parseReplica(s string) (int, error) {
	if !isDigits(s) || len(s) > 6 {
		return 0, fmt.Errorf("replica %q is not a small decimal number", s)
	}
	n, _ := strconv.Atoi(s)
	return n, nil
}

func parseNVIDIA(ref *DeviceRef, s string) bool {
	if parseNVIDIAUUID(ref, s) || parseGKEName(ref, s) {
		return true
	}
	// An index ID: "3" or, for a MIG device, "3:1".
	gpu, mig, isMIG := strings.Cut(s, ":")
	if isIndex(gpu) && (!isMIG || isIndex(mig)) {
		ref.Index, ref.Vendor = s, VendorNVIDIA
		return true
	}
	return false
}

// parseNVIDIAUUID accepts "GPU-<uuid>", "MIG-<uuid>" and the legacy
// "MIG-GPU-<uuid>/<gi>/<ci>".
func parseNVIDIAUUID(ref *DeviceRef, s string) bool {
	switch {
	case strings.HasPrefix(s, "MIG-GPU-"):
		parent, rest, _ := strings.Cut(s[len("MIG-"):], "/")
		gi, ci, found := strings.Cut(rest, "/")
		if !found || !isUUID(parent[len("GPU-"):]) || !isIndex(gi) || !isIndex(ci) {
			return false
		}
	case strings.HasPrefix(s, "GPU-"), strings.HasPrefix(s, "MIG-"):
		if !isUUID(s[len("GPU-"):]) {
			return false
		}
	default:
		return false
	}
	ref.UUID, ref.Vendor = s, VendorNVIDIA
	return true
}

// parseGKEName accepts GKE's "nvidia<minor>" and "nvidia<minor>/gi<id>".
func parseGKEName(ref *DeviceRef, s string) bool {
	n, ok := strings.CutPrefix(s, "nvidia")
	if !ok {
		return false
	}
	minor, gi, isMIG := strings.Cut(n, "/gi")
	if !isIndex(minor) || isMIG && !isIndex(gi) {
		return false
	}
	ref.DeviceName, ref.Vendor = s, VendorNVIDIA
	return true
}

// parsePCI accepts [domain:]bus:device.function in hexadecimal, with a
// domain of up to 8 digits (NVML writes 8, sysfs 4).
func parsePCI(ref *DeviceRef, s string) bool {
	parts := strings.Split(s, ":")
	domain := "0"
	switch len(parts) {
	case 3:
		domain = parts[0]
		if len(domain) < 4 || len(domain) > 8 || !isHex(domain) {
			return false
		}
		parts = parts[1:]
	case 2:
	default:
		return false
	}
	bus := parts[0]
	dev, fn, found := strings.Cut(parts[1], ".")
	if !found || len(bus) != 2 || !isHex(bus) || len(dev) != 2 || !isHex(dev) ||
		len(fn) != 1 || fn[0] < '0' || fn[0] > '7' {
		return false
	}
	d, _ := strconv.ParseUint(domain, 16, 32)
	ref.PCIBusID = fmt.Sprintf("%04x:%s:%s.%s", d, strings.ToLower(bus), strings.ToLower(dev), fn)
	return true
}

// parseAMDPartition accepts the amdxcp driver's platform device names,
// "amdgpu_xcp_<n>" (amdgpu_xcp_drv.c, amdgpu_xcp_drm_dev_alloc).
func parseAMDPartition(ref *DeviceRef, s string) bool {
	n, ok := strings.CutPrefix(s, "amdgpu_xcp_")
	if !ok || !isIndex(n) {
		return false
	}
	ref.Partition = s
	return true
}

func parseHabanaName(ref *DeviceRef, s string) bool {
	n, ok := strings.CutPrefix(s, "hl")
	if !ok || !isIndex(n) {
		return false
	}
	ref.Index = n
	return true
}

// parseSerial accepts a board serial number: letters and digits, with
// dashes inside, at most 64 bytes (an underscore is no serial's: it marks
// other plugins' names, such as AMD's amdgpu_xcp_<n>). Only a habana.ai resource
// is read this way: elsewhere a serial cannot be told from another
// vendor's ID.
func parseSerial(ref *DeviceRef, s string) bool {
	if len(s) > 64 || !isAlnum(s[0]) || !isAlnum(s[len(s)-1]) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isAlnum(s[i]) && s[i] != '-' {
			return false
		}
	}
	ref.Serial = s
	return true
}

func isAlnum(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

// isUUID accepts the 8-4-4-4-12 hexadecimal form NVML prints.
func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch i {
		case 8, 13, 18, 23:
			if s[i] != '-' {
				return false
			}
		default:
			if !isHex(s[i : i+1]) {
				return false
			}
		}
	}
	return true
}

// isIndex accepts a decimal device or instance index without a sign or
// leading zeros.
func isIndex(s string) bool {
	return isDigits(s) && len(s) <= 4 && (s == "0" || s[0] != '0')
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func isHex(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') && (c < 'A' || c > 'F') {
			return false
		}
	}
	return true
}
