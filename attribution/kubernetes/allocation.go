package kubernetes

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Allocation is one accelerator held by one container.
type Allocation struct {
	Namespace string
	Pod       string
	Container string
	Resource  string
	// DeviceID is the ID as the device plugin wrote it.
	DeviceID string
	Device   DeviceRef
	// Replicas is how many replicas of Device the device plugin advertises,
	// so that this container's share of the device is 1/Replicas. It is 1
	// for a device that is not shared, and 0 when the device is shared but
	// the kubelet does not list the replica held as allocatable (the plugin
	// reported the device unhealthy, or its sharing was reconfigured to
	// fewer replicas since the container got it), which leaves the share
	// unknown: the replica was given out under a count not advertised now.
	//
	// The number of containers that hold replicas is no substitute: with
	// four replicas advertised and three allocated, each holder still gets
	// a quarter of the device's time, not a third.
	Replicas int
}

// Share is the fraction of the device the container was allocated, and
// false when it is unknown (see Replicas).
func (a Allocation) Share() (float64, bool) {
	if a.Replicas <= 0 {
		return 0, false
	}
	return 1 / float64(a.Replicas), true
}

// Allocations lists the accelerators the containers in pods hold, for the
// resources that match m. allocatable is the kubelet's list of allocatable
// devices (Client.Allocatable), from which the replicas of shared devices
// are counted; when it could not be read, pass nil and shared devices get
// Replicas 0.
//
// IDs that cannot be normalised are left out and returned as errors (each a
// *DeviceIDError, once per distinct resource and ID, Held where a
// container holds it).
func Allocations(pods []PodResources, allocatable []ResourceDevices, m *ResourceMatcher) ([]Allocation, []error) {
	replicas, listed, errs := countReplicas(allocatable, m)
	// Sized once: this runs at every scrape, over every pod of the node.
	n := 0
	for _, p := range pods {
		for _, c := range p.Containers {
			for _, rd := range c.Devices {
				n += len(rd.IDs)
			}
		}
	}
	out := make([]Allocation, 0, n)
	for _, p := range pods {
		for _, c := range p.Containers {
			for _, rd := range c.Devices {
				if !m.Match(rd.Resource) {
					continue
				}
				for _, id := range rd.IDs {
					ref, err := NormalizeDeviceID(rd.Resource, id)
					if err != nil {
						errs = errs.add(rd.Resource, id, err)
						errs.held(rd.Resource, id)
						continue
					}
					a := Allocation{
						Namespace: p.Namespace,
						Pod:       p.Name,
						Container: c.Name,
						Resource:  rd.Resource,
						DeviceID:  id,
						Device:    ref,
						Replicas:  1,
					}
					if ref.Shared {
						a.Replicas = 0
						if _, ok := listed[ref.Key()][ref.Replica]; ok {
							a.Replicas = replicas[ref.Key()]
						}
					}
					out = append(out, a)
				}
			}
		}
	}
	return out, errs.list
}

// countReplicas counts the distinct replica IDs advertised per device, and
// returns them.
func countReplicas(allocatable []ResourceDevices, m *ResourceMatcher) (map[string]int, map[string]map[int]struct{}, idErrors) {
	var errs idErrors
	seen := map[string]map[int]struct{}{}
	for _, rd := range allocatable {
		if !m.Match(rd.Resource) {
			continue
		}
		for _, id := range rd.IDs {
			ref, err := NormalizeDeviceID(rd.Resource, id)
			if err != nil {
				errs = errs.add(rd.Resource, id, err)
				continue
			}
			if !ref.Shared {
				continue
			}
			k := ref.Key()
			if seen[k] == nil {
				seen[k] = map[int]struct{}{}
			}
			seen[k][ref.Replica] = struct{}{}
		}
	}
	counts := make(map[string]int, len(seen))
	for k, s := range seen {
		counts[k] = len(s)
	}
	return counts, seen, errs
}

// idErrors collects normalisation errors once per resource and ID: an ID
// that is both allocatable and allocated would otherwise be reported twice.
type idErrors struct {
	seen map[[2]string]int // index in list
	list []error
}

func (e idErrors) add(resource, id string, err error) idErrors {
	k := [2]string{resource, id}
	if _, ok := e.seen[k]; ok {
		return e
	}
	if e.seen == nil {
		e.seen = map[[2]string]int{}
	}
	e.seen[k] = len(e.list)
	e.list = append(e.list, err)
	return e
}

// held marks the error of an ID a container holds, which add recorded.
func (e idErrors) held(resource, id string) {
	var de *DeviceIDError
	if errors.As(e.list[e.seen[[2]string{resource, id}]], &de) {
		de.Held = true
	}
}

// ClaimAllocation is one device held by one container through a DRA
// ResourceClaim.
type ClaimAllocation struct {
	Namespace string
	Pod       string
	Container string
	Claim     ClaimDevice
	Device    DeviceRef
	// Consumers is how many containers use the claim's device, so that
	// this container's share is 1/Consumers: a claim shared by several
	// pods or containers (with time-slicing or MPS configured on the
	// claim) gives each the same part of the device. It is 0 when several
	// claims share the device through consumable capacity: their parts
	// follow the capacity each requested, which pod-resources does not
	// report, so the share is unknown.
	Consumers int
}

// Share is the fraction of the device the container holds, and false when
// it is unknown (see Consumers).
func (a ClaimAllocation) Share() (float64, bool) {
	if a.Consumers <= 0 {
		return 0, false
	}
	return 1 / float64(a.Consumers), true
}

// UnresolvedClaimDevice is a DRA device of a container that could not be
// matched to a device: its CDI spec is missing, unreadable or stale.
type UnresolvedClaimDevice struct {
	Claim ClaimDevice
	Err   error
}

// DriverVendor is the vendor whose devices a DRA driver hands out, "" for a
// driver not known here.
func DriverVendor(driver string) string {
	switch driver {
	case "gpu.nvidia.com":
		return VendorNVIDIA
	case "gpu.amd.com":
		return VendorAMD
	case "gaudi.intel.com":
		return VendorHabana
	case "gpu.intel.com":
		return "intel" // GPUs no collector reads
	}
	return ""
}

// DefaultDRADrivers are the DRA drivers whose devices are accelerators:
// NVIDIA's (k8s-dra-driver-gpu, DriverName "gpu.nvidia.com"), AMD's
// (ROCm k8s-gpu-dra-driver), and Intel's GPU and Gaudi drivers
// (intel-resource-drivers-for-kubernetes). Other drivers' claims, such as
// NVIDIA's "compute-domain.nvidia.com" (IMEX channels) or network drivers,
// hold no accelerator and are ignored.
var DefaultDRADrivers = []string{"gpu.nvidia.com", "gpu.amd.com", "gpu.intel.com", "gaudi.intel.com"}

// ClaimAllocations lists the devices the containers in pods hold through
// DRA claims of the drivers in drivers, identified through the CDI specs of
// the node (idx): by the first of its CDI devices that the index knows, else
// by the node's ResourceSlices (sliceIdx, nil without them). The rest are
// left out and returned.
func ClaimAllocations(pods []PodResources, idx CDIIndex, drivers []string, sliceIdx ResourceSliceIndex) ([]ClaimAllocation, []UnresolvedClaimDevice) {
	var out []ClaimAllocation
	var unresolved []UnresolvedClaimDevice
	// claims counts the claims (and shares of consumable capacity) on
	// each device, consumers the containers of each of them.
	claims := map[string]map[string]bool{}
	consumers := map[string]map[string]bool{}
	for _, p := range pods {
		for _, c := range p.Containers {
			for _, cd := range c.Claims {
				if !slices.Contains(drivers, cd.Driver) {
					continue
				}
				ref, err := identifyClaimDevice(cd, idx)
				if sref, ok := sliceIdx[sliceKey(cd.Driver, cd.Pool, cd.Device)]; err != nil && ok {
					ref, err = sref, nil
				}
				if err != nil {
					unresolved = append(unresolved, UnresolvedClaimDevice{Claim: cd, Err: err})
					continue
				}
				out = append(out, ClaimAllocation{Namespace: p.Namespace, Pod: p.Name, Container: c.Name, Claim: cd, Device: ref})
				dev := ref.Key()
				claim := dev + "\xff" + cd.ClaimNamespace + "/" + cd.ClaimName + "\xff" + cd.ShareID
				if claims[dev] == nil {
					claims[dev] = map[string]bool{}
				}
				claims[dev][claim] = true
				if consumers[claim] == nil {
					consumers[claim] = map[string]bool{}
				}
				consumers[claim][p.Namespace+"/"+p.Name+"/"+c.Name] = true
			}
		}
	}
	for i, a := range out {
		dev := a.Device.Key()
		if len(claims[dev]) == 1 {
			claim := dev + "\xff" + a.Claim.ClaimNamespace + "/" + a.Claim.ClaimName + "\xff" + a.Claim.ShareID
			out[i].Consumers = len(consumers[claim])
		}
	}
	return out, unresolved
}

func identifyClaimDevice(cd ClaimDevice, idx CDIIndex) (DeviceRef, error) {
	if len(cd.CDIDevices) == 0 {
		return DeviceRef{}, fmt.Errorf("claim %s/%s device %s/%s/%s: the driver gave no CDI device", cd.ClaimNamespace, cd.ClaimName, cd.Driver, cd.Pool, cd.Device)
	}
	// Each CDI device's reason: the one that names nothing (AMD's
	// environment-only "common" device, listed first) says nothing of the
	// one that should have named the device.
	var errs []any
	for _, name := range cd.CDIDevices {
		ref, err := idx.Lookup(name)
		if err == nil {
			return ref, nil
		}
		errs = append(errs, err)
	}
	format := "claim %s/%s device %s/%s/%s: " + strings.TrimSuffix(strings.Repeat("%w; ", len(errs)), "; ")
	return DeviceRef{}, fmt.Errorf(format, append([]any{cd.ClaimNamespace, cd.ClaimName, cd.Driver, cd.Pool, cd.Device}, errs...)...)
}
