package kubernetes

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/xpu-exporter/xpu_exporter/internal/nvdriver"

	"sigs.k8s.io/yaml"
)

// DefaultCDISpecDir is where DRA drivers write the CDI specs of the devices
// they prepare. The CDI specification (cncf-tags/container-device-interface,
// SPEC.md and pkg/cdi/spec-dirs.go) names /etc/cdi and /var/run/cdi; NVIDIA's
// DRA driver writes its specs to /var/run/cdi (k8s-dra-driver-gpu,
// cmd/gpu-kubelet-plugin/cdi.go, defaultCDIRoot).
const DefaultCDISpecDir = "/var/run/cdi"

const (
	// MaxCDISpecBytes bounds one spec file. A per-claim spec of NVIDIA's
	// driver is a few KiB (device nodes, mounts and hooks of the driver
	// libraries); a spec far larger is not one we want to parse per scrape.
	MaxCDISpecBytes = 1 << 20
	// MaxCDISpecFiles bounds the files read per scrape. NVIDIA's driver
	// writes one file per prepared claim, so this is also a bound on the
	// claims of one node.
	MaxCDISpecFiles = 2048
	// maxCDIDirEntries bounds the directory entries listed per scrape, so
	// that a directory filled with other files cannot take unbounded memory.
	maxCDIDirEntries = 4 * MaxCDISpecFiles
	// maxCDIDevices bounds the devices of one spec.
	maxCDIDevices = 4096
	// maxProcFileBytes bounds a file of the NVIDIA driver's procfs tables.
	maxProcFileBytes = 64 << 10
)

// cdiSpec is the part of a CDI spec we read: the kind, which with a device
// name makes the device's fully qualified name "<kind>=<name>", and for each
// device what identifies the hardware. Fields and names follow
// tags.cncf.io/container-device-interface/specs-go (config.go: Spec, Device,
// ContainerEdits, DeviceNode); the rest of a spec is ignored.
type cdiSpec struct {
	Version string      `json:"cdiVersion"`
	Kind    string      `json:"kind"`
	Devices []cdiDevice `json:"devices"`
}

type cdiDevice struct {
	Name           string            `json:"name"`
	Annotations    map[string]string `json:"annotations"`
	ContainerEdits struct {
		Env         []string `json:"env"`
		DeviceNodes []struct {
			Path     string `json:"path"`
			HostPath string `json:"hostPath"`
		} `json:"deviceNodes"`
	} `json:"containerEdits"`
}

// CDISpecs reads the CDI specs on the node and tells which device each CDI
// device name stands for. It is safe for concurrent use and caches each
// file's parse until the file changes, so a scrape costs a directory listing
// and a stat per file.
type CDISpecs struct {
	// Dir is the spec directory; empty means DefaultCDISpecDir.
	Dir string
	// ProcRoot is the procfs mountpoint, where the NVIDIA driver's tables
	// map device minor numbers to GPUs; empty means /proc.
	ProcRoot string
	// SysRoot is the sysfs mountpoint, where a DRM render node's device
	// link names its PCI device; empty means /sys.
	SysRoot string

	mu    sync.Mutex
	files map[string]cdiFile
}

type cdiFile struct {
	size    int64
	modTime time.Time
	// devices are the spec's devices by fully qualified name.
	devices map[string]cdiDevice
	err     error
}

// CDIIndex maps fully qualified CDI device names to the devices they
// stand for.
type CDIIndex struct {
	devices map[string]DeviceRef
	// known holds the names that are in a spec but name no device we can
	// tell, with the reason.
	known map[string]string
}

// Lookup returns the device that the CDI device name stands for. The
// error says why there is none: the name is in no spec (the spec is
// missing, unreadable, or stale after the claim changed), or its spec
// entry names no device in a form we know.
func (x CDIIndex) Lookup(name string) (DeviceRef, error) {
	if ref, ok := x.devices[name]; ok {
		return ref, nil
	}
	if reason, ok := x.known[name]; ok {
		return DeviceRef{}, fmt.Errorf("CDI device %q: %s", name, reason)
	}
	return DeviceRef{}, fmt.Errorf("CDI device %q is in no readable CDI spec", name)
}

// Load reads every spec and resolves its devices. err is set when the
// directory cannot be listed (then the index is empty); problems is one
// error per spec file that could not be used, whose devices are then
// missing from the index.
func (s *CDISpecs) Load() (idx CDIIndex, problems []error, err error) {
	idx = CDIIndex{devices: map[string]DeviceRef{}, known: map[string]string{}}
	dir := s.Dir
	if dir == "" {
		dir = DefaultCDISpecDir
	}
	entries, more, err := readDirBounded(dir, maxCDIDirEntries)
	if err != nil {
		return idx, nil, fmt.Errorf("CDI spec directory: %w", err)
	}
	if more {
		problems = append(problems, fmt.Errorf("CDI spec directory %s: more than %d entries, only some are read", dir, maxCDIDirEntries))
	}
	var paths []string
	for _, e := range entries {
		// pkg/cdi/spec-dirs.go: "all files with a '.json' or '.yaml'
		// suffix" are specs.
		if ext := filepath.Ext(e.Name()); (ext == ".json" || ext == ".yaml") && !e.IsDir() {
			paths = append(paths, filepath.Join(dir, e.Name()))
		}
	}
	if len(paths) > MaxCDISpecFiles {
		problems = append(problems, fmt.Errorf("CDI spec directory %s: %d specs, only the first %d are read", dir, len(paths), MaxCDISpecFiles))
		paths = paths[:MaxCDISpecFiles]
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	next := make(map[string]cdiFile, len(paths))
	defined := map[string]cdiDevice{}
	for _, p := range paths {
		f := s.readCached(p)
		next[p] = f
		if f.err != nil {
			problems = append(problems, f.err)
			continue
		}
		for name, d := range f.devices {
			// Two specs defining one device name make it unusable, as in
			// the CDI cache (pkg/cdi/cache.go, conflict resolution).
			if _, dup := defined[name]; dup {
				idx.known[name] = "defined by more than one spec"
				continue
			}
			defined[name] = d
		}
	}
	s.files = next

	nv := readNVIDIAProc(s.procRoot())
	for name, d := range defined {
		if _, conflict := idx.known[name]; conflict {
			continue
		}
		ref, why := nv.identify(d)
		if why != "" {
			drm, ok, drmWhy := s.identifyDRM(d)
			switch {
			case ok:
				ref = drm
			case drmWhy != "":
				// A DRM device: what NVIDIA's forms lack does not matter.
				idx.known[name] = drmWhy
				continue
			default:
				idx.known[name] = why
				continue
			}
		}
		idx.devices[name] = ref
	}
	return idx, problems, nil
}

// deviceNodeKinds are the device nodes a CDI device of another vendor's
// than NVIDIA's may name its device by: the DRM render node, and the accel
// subsystem's compute node (Documentation/accel/introduction.rst:
// /dev/accel/accel<N>, whose sysfs device is /sys/class/accel/accel<N>).
var deviceNodeKinds = []struct{ dev, class, node string }{
	{"/dev/dri/renderD", "drm", "renderD"},
	{"/dev/accel/accel", "accel", "accel"},
}

// identifyDRM tells the device a CDI device stands for by its one DRM
// render node or accel node, where it names no NVIDIA GPU. AMD's DRA driver
// gives each GPU and each compute partition a device of /dev/kfd,
// /dev/dri/card<N> and /dev/dri/renderD<M> and no PCI address (ROCm
// k8s-gpu-dra-driver, cmd/gpu-kubeletplugin/state.go); Intel's Gaudi DRA
// driver a device of /dev/accel/accel<N> and /dev/accel/accel_controlD<N>
// (intel-resource-drivers-for-kubernetes, pkg/gaudi/cdihelpers,
// newContainerEditsDeviceNodes). sysfs links each node to its device
// (/sys/class/drm/renderD<M>/device, /sys/class/accel/accel<N>/device):
// the PCI function of a GPU or Gaudi, also for a partitioned AMD GPU's
// first partition, whose DRM device is the GPU's own, and for each further
// partition the amdgpu_xcp_<n> platform device amdgpu registers for it
// (amdxcp, amdgpu_xcp_drv.c, amdgpu_xcp_drm_dev_alloc), the name the ROCm
// device plugin gives it too. ok is false, with why empty, for a device
// without such a node, such as AMD's "common" device of /dev/kfd alone or
// Intel's per-claim device of hooks and mounts; why says what is wrong with
// one that has nodes but is none.
func (s *CDISpecs) identifyDRM(d cdiDevice) (ref DeviceRef, ok bool, why string) {
	type found struct{ class, node string }
	var nodes []found
	for _, n := range d.ContainerEdits.DeviceNodes {
		p := n.Path
		if n.HostPath != "" {
			p = n.HostPath
		}
		for _, k := range deviceNodeKinds {
			if m, ok := strings.CutPrefix(p, k.dev); ok && isDigits(m) && !slices.Contains(nodes, found{k.class, k.node + m}) {
				nodes = append(nodes, found{k.class, k.node + m})
			}
		}
	}
	switch len(nodes) {
	case 0:
		return DeviceRef{}, false, ""
	case 1:
	default:
		var names []string
		for _, n := range nodes {
			names = append(names, n.node)
		}
		return DeviceRef{}, false, fmt.Sprintf("has %d render or accel nodes (%s); want exactly one", len(nodes), strings.Join(names, ", "))
	}
	root := s.SysRoot
	if root == "" {
		root = "/sys"
	}
	identify := func(name string) bool { return parsePCI(&ref, name) || parseAMDPartition(&ref, name) }
	// The node's device link, or the node's own directory, which sysfs
	// keeps under its device's class directory (…/0000:0c:00.0/drm/renderD128,
	// …/platform/amdgpu_xcp_1/drm/renderD130, …/0000:b3:00.0/accel/accel0).
	node := filepath.Join(root, "class", nodes[0].class, nodes[0].node)
	dev, err := filepath.EvalSymlinks(filepath.Join(node, "device"))
	if err != nil || !identify(filepath.Base(dev)) {
		dir, err := filepath.EvalSymlinks(node)
		if err != nil {
			return DeviceRef{}, false, fmt.Sprintf("%s node %s: %v", nodes[0].class, nodes[0].node, err)
		}
		if !identify(filepath.Base(filepath.Dir(filepath.Dir(dir)))) {
			return DeviceRef{}, false, fmt.Sprintf("%s node %s (%s) is of neither a PCI device nor an amdgpu_xcp partition", nodes[0].class, nodes[0].node, dir)
		}
	}
	ref.ID = ref.PCIBusID
	if ref.ID == "" {
		ref.ID = ref.Partition
	}
	return ref, true, ""
}

func (s *CDISpecs) procRoot() string {
	if s.ProcRoot == "" {
		return "/proc"
	}
	return s.ProcRoot
}

// readCached returns the parse of one spec file, from the cache while the
// file's size and modification time are unchanged. Caller holds s.mu.
func (s *CDISpecs) readCached(path string) cdiFile {
	fi, err := os.Stat(path)
	if err != nil {
		return cdiFile{err: fmt.Errorf("CDI spec %s: %w", path, err)}
	}
	// A file that could not be used is read again at every scrape: its
	// problem (a permission, say) can go away without the file changing.
	if old, ok := s.files[path]; ok && old.err == nil && old.size == fi.Size() && old.modTime.Equal(fi.ModTime()) {
		return old
	}
	f := cdiFile{size: fi.Size(), modTime: fi.ModTime()}
	f.devices, f.err = readCDISpec(path)
	if f.err != nil {
		f.err = fmt.Errorf("CDI spec %s: %w", path, f.err)
	}
	return f
}

// readCDISpec reads one spec file, YAML or JSON (YAML is a superset of JSON,
// which is how the CDI library reads both, pkg/cdi/spec.go).
func readCDISpec(path string) (map[string]cdiDevice, error) {
	b, err := readBounded(path, MaxCDISpecBytes)
	if err != nil {
		return nil, err
	}
	var spec cdiSpec
	if err := yaml.Unmarshal(b, &spec); err != nil {
		return nil, fmt.Errorf("malformed: %w", err)
	}
	// SPEC.md: kind is "vendor/class", and a device's fully qualified
	// name is "vendor/class=name".
	vendor, class, ok := strings.Cut(spec.Kind, "/")
	if !ok || vendor == "" || class == "" || strings.ContainsAny(spec.Kind, "= \n") {
		return nil, fmt.Errorf("malformed: kind %q is not vendor/class", spec.Kind)
	}
	if len(spec.Devices) > maxCDIDevices {
		return nil, fmt.Errorf("%d devices, more than %d", len(spec.Devices), maxCDIDevices)
	}
	out := make(map[string]cdiDevice, len(spec.Devices))
	for _, d := range spec.Devices {
		if d.Name == "" || strings.ContainsAny(d.Name, "= \n") {
			return nil, fmt.Errorf("malformed: device name %q", d.Name)
		}
		out[spec.Kind+"="+d.Name] = d
	}
	return out, nil
}

// readDirBounded lists at most limit entries of dir, sorted by name, and
// says whether there were more.
func readDirBounded(dir string, limit int) (entries []os.DirEntry, more bool, err error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	entries, err = f.ReadDir(limit)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, false, err
	}
	if len(entries) == limit {
		next, _ := f.ReadDir(1)
		more = len(next) > 0
	}
	slices.SortFunc(entries, func(a, b os.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return entries, more, nil
}

// readBounded reads a whole file of at most limit bytes.
func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("larger than %d bytes", limit)
	}
	return b, nil
}

// nvidiaProc is what the NVIDIA kernel driver's procfs tables say about
// device minor numbers.
type nvidiaProc struct {
	// gpuByMinor maps /dev/nvidia<minor> to the GPU's UUID.
	gpuByMinor map[int]string
	// giByCapMinor maps /dev/nvidia-caps/nvidia-cap<minor> to the GPU minor
	// and GPU instance whose access capability it is.
	giByCapMinor map[int][2]int
}

// readNVIDIAProc reads the driver's tables. A missing table leaves its map
// empty: the devices that need it stay unidentified, with a reason.
//
//   - /proc/driver/nvidia/gpus/<pci bus id>/information has one "Key: value"
//     line per fact, among them "GPU UUID: GPU-…" and "Device Minor: 0"
//     (the minor of /dev/nvidia<N>; NVIDIA driver README, "Using the
//     /proc File System Interface"; nvidia-smi -q calls it "Minor Number").
//   - /proc/driver/nvidia-caps/mig-minors lists "gpu<M>/gi<G>/access <minor>"
//     and "gpu<M>/gi<G>/ci<C>/access <minor>": the minor of the
//     /dev/nvidia-caps/nvidia-cap<minor> node that grants access to GPU
//     instance G of GPU minor M (NVIDIA MIG user guide, "Device Nodes and
//     Capabilities"; quoted in k8s-dra-driver-gpu internal/common/nvcaps.go).
func readNVIDIAProc(root string) nvidiaProc {
	nv := nvidiaProc{gpuByMinor: map[int]string{}, giByCapMinor: map[int][2]int{}}
	infos, _ := filepath.Glob(filepath.Join(root, "driver", "nvidia", "gpus", "*", "information"))
	for _, p := range infos {
		b, err := readBounded(p, maxProcFileBytes)
		if err != nil {
			continue
		}
		g := nvdriver.Parse(b)
		var ref DeviceRef
		if g.Minor >= 0 && parseNVIDIAUUID(&ref, g.UUID) {
			nv.gpuByMinor[g.Minor] = g.UUID
		}
	}
	if b, err := readBounded(filepath.Join(root, "driver", "nvidia-caps", "mig-minors"), maxProcFileBytes); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) != 2 {
				continue
			}
			parts := strings.Split(f[0], "/")
			minor, err := strconv.Atoi(f[1])
			if len(parts) != 3 || parts[2] != "access" || err != nil {
				continue
			}
			gpu, err1 := strconv.Atoi(strings.TrimPrefix(parts[0], "gpu"))
			gi, err2 := strconv.Atoi(strings.TrimPrefix(parts[1], "gi"))
			if err1 == nil && err2 == nil && strings.HasPrefix(parts[0], "gpu") && strings.HasPrefix(parts[1], "gi") {
				nv.giByCapMinor[minor] = [2]int{gpu, gi}
			}
		}
	}
	return nv
}

// identify tells which device a CDI device stands for, or why it cannot.
// In order:
//
//  1. An NVIDIA GPU or MIG UUID as the device name, as nvidia-ctk names
//     devices with --device-name-strategy=uuid (nvidia-container-toolkit,
//     "Support for Container Device Interface").
//  2. One UUID among the device's annotation values and environment
//     values, for drivers that pass it that way (NVIDIA_VISIBLE_DEVICES in
//     legacy-mode specs). Several different UUIDs are ambiguous.
//  3. The device nodes: NVIDIA's DRA driver names devices "<claim
//     uid>-gpu-<minor>" or "gpu-<minor>-mig-…" and gives no UUID in the spec,
//     but each device's edits add /dev/nvidia<minor> and, for a MIG device,
//     the /dev/nvidia-caps/nvidia-cap<minor> nodes of its GPU and compute
//     instance (k8s-dra-driver-gpu cmd/gpu-kubelet-plugin/cdi.go,
//     CreateClaimSpecFile and GetDevNodesForMigDevice). The driver's procfs
//     tables turn those minors into a GPU UUID and a GPU instance.
func (nv nvidiaProc) identify(d cdiDevice) (DeviceRef, string) {
	var ref DeviceRef
	if parseNVIDIAUUID(&ref, d.Name) {
		ref.ID = ref.UUID
		return ref, ""
	}
	var values []string
	for _, k := range slices.Sorted(maps.Keys(d.Annotations)) {
		values = append(values, d.Annotations[k])
	}
	for _, e := range d.ContainerEdits.Env {
		if _, v, ok := strings.Cut(e, "="); ok {
			values = append(values, v)
		}
	}
	var uuids []string
	for _, v := range values {
		for _, tok := range strings.Split(v, ",") {
			var r DeviceRef
			if tok = strings.TrimSpace(tok); parseNVIDIAUUID(&r, tok) && !slices.Contains(uuids, tok) {
				uuids = append(uuids, tok)
			}
		}
	}
	switch len(uuids) {
	case 1:
		parseNVIDIAUUID(&ref, uuids[0])
		ref.ID = ref.UUID
		return ref, ""
	case 0:
	default:
		return DeviceRef{}, fmt.Sprintf("names %d different GPUs (%s)", len(uuids), strings.Join(uuids, ", "))
	}

	gpuMinors, capMinors := map[int]bool{}, map[int]bool{}
	for _, n := range d.ContainerEdits.DeviceNodes {
		p := n.Path
		if n.HostPath != "" {
			p = n.HostPath
		}
		base := filepath.Base(p)
		if m, ok := strings.CutPrefix(base, "nvidia-cap"); ok && isDigits(m) {
			v, _ := strconv.Atoi(m)
			capMinors[v] = true
		} else if m, ok := strings.CutPrefix(base, "nvidia"); ok && isDigits(m) && len(m) <= 4 {
			v, _ := strconv.Atoi(m)
			gpuMinors[v] = true
		}
	}
	if len(gpuMinors) != 1 {
		if len(gpuMinors) == 0 {
			// Load asks for a DRM render node after this.
			return DeviceRef{}, "names no device: no GPU UUID, no /dev/nvidia<minor>, /dev/dri/renderD<M> or /dev/accel/accel<N> device node"
		}
		return DeviceRef{}, fmt.Sprintf("has %d /dev/nvidia<minor> device nodes and no GPU UUID; want exactly one", len(gpuMinors))
	}
	var minor int
	for m := range gpuMinors {
		minor = m
	}
	uuid, ok := nv.gpuByMinor[minor]
	if !ok {
		return DeviceRef{}, fmt.Sprintf("/dev/nvidia%d is no GPU in driver/nvidia/gpus/*/information (stale spec, or procfs not the host's)", minor)
	}
	ref.Vendor = VendorNVIDIA
	if len(capMinors) == 0 {
		ref.UUID, ref.ID = uuid, uuid
		return ref, ""
	}
	gi := -1
	for c := range capMinors {
		if g, ok := nv.giByCapMinor[c]; ok && g[0] == minor {
			if gi >= 0 && gi != g[1] {
				return DeviceRef{}, fmt.Sprintf("grants access to two GPU instances of /dev/nvidia%d", minor)
			}
			gi = g[1]
		}
	}
	if gi < 0 {
		return DeviceRef{}, fmt.Sprintf("MIG capability nodes of /dev/nvidia%d are no GPU instance in driver/nvidia-caps/mig-minors", minor)
	}
	ref.MIGParentUUID, ref.MIGGPUInstance = uuid, gi
	ref.ID = uuid + "/gi" + strconv.Itoa(gi)
	return ref, ""
}
