package kubernetes

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
	// the kubelet no longer lists it as allocatable (the plugin reported it
	// unhealthy), which leaves the share unknown.
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
// *DeviceIDError, once per distinct resource and ID).
func Allocations(pods []PodResources, allocatable []ResourceDevices, m *ResourceMatcher) ([]Allocation, []error) {
	replicas, errs := countReplicas(allocatable, m)
	var out []Allocation
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
						a.Replicas = replicas[ref.Key()]
					}
					out = append(out, a)
				}
			}
		}
	}
	return out, errs.list
}

// countReplicas counts the distinct replica IDs advertised per device.
func countReplicas(allocatable []ResourceDevices, m *ResourceMatcher) (map[string]int, idErrors) {
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
	return counts, errs
}

// idErrors collects normalisation errors once per resource and ID: an ID
// that is both allocatable and allocated would otherwise be reported twice.
type idErrors struct {
	seen map[[2]string]bool
	list []error
}

func (e idErrors) add(resource, id string, err error) idErrors {
	k := [2]string{resource, id}
	if e.seen[k] {
		return e
	}
	if e.seen == nil {
		e.seen = map[[2]string]bool{}
	}
	e.seen[k] = true
	e.list = append(e.list, err)
	return e
}
