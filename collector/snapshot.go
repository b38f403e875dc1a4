package collector

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xpu-exporter/xpu_exporter/attribution"
	"github.com/xpu-exporter/xpu_exporter/attribution/kubernetes"
	"github.com/xpu-exporter/xpu_exporter/internal/flight"
	"github.com/xpu-exporter/xpu_exporter/vendors/reading"
)

// Device is one accelerator (or MIG instance) of the node as seen in one
// scrape, in vendor-neutral terms. Collectors that need vendor readings keep
// them in vendorData.
type Device struct {
	Vendor   string // nvidia, amd, habana
	Index    string // node-local index, the `gpu` label
	UUID     string
	Model    string
	PCIBusID string
	// Serial is the board's serial number, which the Intel Gaudi device
	// plugin uses as its device IDs; "" when unknown.
	Serial string
	// Minor is the N of a GPU's device file, where read: an NVIDIA GPU's
	// /dev/nvidiaN, an AMD GPU's or compute partition's /dev/dri/renderDN.
	Minor reading.Opt[int]
	MIG   *MIGInstance // nil for a whole device
	// HasMIG is set on a GPU in MIG mode, whose instances are devices of
	// their own.
	HasMIG bool
	// MIGListed says the vendor listed every MIG instance of a GPU in MIG
	// mode, none perhaps: the node's devices are all there.
	MIGListed bool
	// MIGEmpty is set on a GPU in MIG mode, up, whose instances were all
	// listed and are none. No process can run on it, yet it can be held whole (a
	// Slurm GRES, as gres_gpu counts a GPU without MIG devices): its owners'
	// usage is its own, 0, where a GPU with instances leaves theirs to them.
	MIGEmpty bool
	// MIGModeKnown says whether the GPU is in MIG mode is known, from this
	// read or, for a GPU that stopped answering, an earlier one.
	MIGModeKnown bool
	Up           bool

	Processes []Process
	// Exited are processes that used the device earlier in the snapshot's
	// utilization window and have left it since: a part of the device's
	// utilization that is theirs, not a later owner's. They hold no memory
	// and get no series of their own. Only PID and Utilization are set;
	// Utilization is nil where the vendor cannot tell (an AMD client that
	// closed since the previous scrape).
	Exited []Process
	// ExitedUnnamed says a process left the device in the window that
	// Exited cannot name: its PID is another process's now (an AMD client
	// that closed since the previous scrape, whose process's PID was given
	// out again; an NVIDIA process whose PID another owner's process has
	// taken). Its part of the utilization and its owner are unknown.
	ExitedUnnamed bool
	// SamplesByPID says the vendor samples its processes' usage by PID
	// (NVML's process utilization samples), not by a client or file that
	// ends with the process: a PID given to another process within the
	// window has both processes' time (Process.Mixed).
	SamplesByPID bool
	// WindowEnd tells the utilization window apart from the last one: the
	// same end is the same window served again. 0 where unknown.
	WindowEnd uint64
	// ProcessesPartial says Processes may lack some of the device's
	// processes: a vendor's list call failed, or procfs could not be read
	// for every process of the node. The per-owner split is then left out,
	// since the missing processes' owners would show 0.
	ProcessesPartial bool
	// OwnersUnknown says Claims may lack owners (attribution.Ownership):
	// xpu_device_owners is left out rather than count only those seen.
	OwnersUnknown bool
	// OwnersAllocated says Claims come from an allocation, which names every
	// owner, not from the processes seen (attribution.Ownership.Allocated).
	OwnersAllocated bool
	// ProcessStrays are the own owners of the processes ProcessOwner marks
	// unattributed or leaves out (attribution.Ownership.Strays).
	ProcessStrays map[uint32]attribution.Owner
	// MemoryUsed and Utilization are the device readings attribution splits
	// between owners; nil when the vendor has none.
	MemoryUsed  *float64
	MemoryTotal *float64
	Utilization *float64
	// UtilizationOfTheMoment says Utilization is a reading of the moment
	// (AMD's gpu_busy_percent), not a mean over the window the processes'
	// utilization covers: the split takes the processes' own (Usage).
	UtilizationOfTheMoment bool

	// Claims are the device's owners and ProcessOwner says which process
	// runs for which of them (see attribution.Ownership).
	Claims       []attribution.Claim
	ProcessOwner map[uint32]int

	vendorData any
}

// owner is the device's owner when it has exactly one: only then do its
// series carry owner labels, so that sum() over a shared device stays right.
// A device whose owners are unknown has none, though one be seen: it may
// have others, and sum by (pod) would bill that one the whole device (a
// time-slicing replica the device plugin no longer advertises, probe B
// PB2).
func (d *Device) owner() (attribution.Owner, bool) {
	if len(d.Claims) == 0 || d.OwnersUnknown {
		return attribution.Owner{}, false
	}
	o := d.Claims[0].Owner
	if len(d.Claims) == 1 {
		return o, true
	}
	// Containers of one pod (a sidecar reusing the app's GPU, one DRA
	// claim in two containers) are one workload: the device is the pod's,
	// which of its containers not being one (found by probe18-multigpu:
	// an 8-GPU pod's per-pod views saw 6 of its GPUs).
	if o.Kind != attribution.Kubernetes {
		return attribution.Owner{}, false
	}
	for _, c := range d.Claims[1:] {
		if c.Owner.Kind != attribution.Kubernetes || c.Owner.Namespace != o.Namespace || c.Owner.Pod != o.Pod || c.Owner.PodUID != o.PodUID {
			return attribution.Owner{}, false
		}
	}
	o.Container = ""
	return o, true
}

// MIGInstance places a MIG device inside its parent GPU.
type MIGInstance struct {
	ParentUUID string
	Profile    string
	Instance   string // the GPU instance ID, the mig_instance label
	// ComputeInstance is the compute instance ID within Instance: a GPU
	// instance may be split into several, each its own MIG device.
	ComputeInstance int
	// Index is the MIG device's handle index in its GPU, as the device
	// plugins' index strategy names it ("<gpu>:<index>").
	Index int
	// Fraction is the share of the parent GPU's compute this instance
	// holds; 0 when it could not be read.
	Fraction float64
	// DevicePluginID is the ID the ROCm device plugin gives an AMD compute
	// partition (attribution.Device.Partition); empty for MIG.
	DevicePluginID string
}

// Process is a process that a vendor reports on a device.
type Process struct {
	PID uint32
	// MemoryUsed is nil when the vendor cannot tell.
	MemoryUsed *uint64
	// Utilization is the process's share of the device's time over the
	// snapshot's utilization window (0..1); nil when the vendor has none.
	Utilization *float64
	// Mixed says the PID named another process earlier in the window
	// (attribution.Ownership.Reused), whose time is in Utilization too:
	// their owner's part where both were that owner's, not this process's
	// own.
	Mixed bool
}

// Snapshot is everything one scrape read from the node. Every collector of
// that scrape reads the same snapshot, so the hardware is queried once.
type Snapshot struct {
	Time    time.Time
	Devices []*Device
	sources map[string]sourceResult
	// Attribution is the state of each attribution source; empty when
	// attribution is off.
	Attribution      []attribution.Source
	unknownDeviceIDs int
	// unresolvedClaimDevices counts the DRA claim devices not matched to
	// a device.
	unresolvedClaimDevices int
	// slurmJobsRefused counts the Slurm jobs whose record was refused, by
	// reason (attribution.Result.SlurmJobsRefused).
	slurmJobsRefused map[string]int
	// enginePods says which pods' inference engines this exporter serves
	// (attribution.Result.EnginePods); nil for every pod's.
	enginePods map[string]bool
	// engineSplitPods lists the pods whose devices this exporter reads
	// in part, another exporter of the node the rest
	// (attribution.Result.EngineSplitPods).
	engineSplitPods map[string]bool
	// engineOthers says whether this exporter serves the engines of no
	// pod in enginePods (attribution.Result.EngineOthers).
	engineOthers bool
	// endedPods counts the ended pods the kubelet listed with devices.
	endedPods int
}

type sourceResult struct {
	duration time.Duration
	err      error
}

// source reads devices into the snapshot. A collector that is also a source
// is asked for its devices before any collector runs. m says which window
// of readings averaged since an earlier read the snapshot moves on (see
// Exporter.Snapshot).
type source interface {
	readDevices(ctx context.Context, m move) ([]*Device, error)
}

// move is what a snapshot moves on of the windows that readings averaged
// since an earlier one cover (utilization samples, GPM, AMD engine time).
type move uint8

const (
	// moveNone: /devices, event owner look-ups, pushes while Prometheus
	// scrapes. They cover the time since the last scrape.
	moveNone move = iota
	// movePush: a push with no Prometheus scraping covers the time since
	// the previous such push (or the last scrape, if later) and moves that
	// window alone: the next scrape's still starts at the last scrape, or
	// at the warm-up, as with the bridge off.
	movePush
	// moveScrape: a scrape, or the warm-up that starts the first scrape's
	// window. The pushes' window starts here too.
	moveScrape
)

// snapshotter builds snapshots and coalesces concurrent scrapes (an HA pair
// of Prometheus servers) onto one build, so hardware is queried once.
type snapshotter struct {
	sources  map[string]source
	resolver *attribution.Resolver // nil: no attribution
	now      func() time.Time
	logger   *slog.Logger
	// gresByFile is Config.GRESByDeviceFile; fileOrderTold says the
	// warning that the device files are not in NVML's order was logged.
	gresByFile    bool
	fileOrderTold atomic.Bool

	mu     sync.Mutex
	builds flight.Group[struct{}, build]
	stuck  map[string]*read // sources whose read outlived its build
	// vendors are the vendors of every device seen since start: a node
	// that has shown devices of several is numbered as such (gresIndices)
	// while one vendor's tool fails, not as a node of the others alone.
	vendors map[string]bool
	// coalesced counts scrapes served from another scrape's snapshot.
	coalesced atomic.Uint64
	// reused are the PIDs found given to another process (markReused) in
	// the window each device's last snapshot served, by device: a snapshot
	// serving that window again has them too, though the resolver, whose
	// processes are those of the last snapshot by then, finds none.
	reused map[string]reusedIn
}

// reusedIn is what a device's PIDs found reused say of one window
// (attribution.Ownership's Reused and ReusedByOther).
type reusedIn struct {
	end     uint64 // Device.WindowEnd
	pids    []uint32
	byOther bool
	// pending says a read that moved no scrape window found them (a
	// /devices read): they are in the next scrape's window, which starts
	// at the last scrape as that read's did, whatever its end.
	pending bool
}

// build is a snapshot being built, and what it moves on.
type build struct {
	snap *Snapshot
	move move
}

// get returns a snapshot: the one being built right now if it will be done
// by ctx's deadline, and not more than flight.ScrapeSlack sooner, else a new
// one built under ctx. A caller whose ctx ends first gets nil. A build that
// moves a window is shared only by callers moving the same one; one that
// moves none shares a scrape's too, whose window is the scrapes'.
//
// A build due later than this caller (the warm-up at start, a scrape with a
// longer timeout) is not joined but built anew, nor is one due much sooner,
// whose devices not read by its deadline this caller had time to wait for
// (a scrape with a shorter timeout, the warm-up for a first scrape with a
// longer one). The two builds share each device's read in flight
// (nvidia.Client, the Gaudi collector's hl-smi run), so no device is read
// twice at once, nor reported down for the other build's deadline.
func (s *snapshotter) get(ctx context.Context, m move) *Snapshot {
	b, leader := s.builds.Join(struct{}{}, flight.Deadline(ctx), build{move: m},
		func(b *build) bool { return b.move == m || (m == moveNone && b.move == moveScrape) })
	if leader {
		b.Val.snap = s.build(ctx, m)
		s.builds.Finish(struct{}{}, b)
		return b.Val.snap
	}
	s.coalesced.Add(1)
	if !b.Wait(ctx) {
		return nil
	}
	return b.Val.snap
}

// build reads every source in parallel. A source that has not answered when
// ctx ends is reported failed and left to finish in the background; it is
// not read again until it has, so a hung driver cannot pile up goroutines.
// Sources that honour their context may be read by two builds at once.
func (s *snapshotter) build(ctx context.Context, m move) *Snapshot {
	snap := &Snapshot{Time: s.now(), sources: make(map[string]sourceResult, len(s.sources))}
	type answer struct {
		name string
		devs []*Device
		res  sourceResult
	}
	answers := make(chan answer, len(s.sources))
	reads := map[string]*read{}
	srcCtx, cancel := sourceContext(ctx)
	defer cancel()
	s.mu.Lock()
	for name, src := range s.sources {
		if s.stuck[name] != nil {
			snap.sources[name] = sourceResult{err: errors.New("previous read still running")}
			if u, ok := src.(interface{ unanswered() []*Device }); ok {
				snap.Devices = append(snap.Devices, u.unanswered()...)
			}
			continue
		}
		r := &read{}
		reads[name] = r
		go func() {
			defer s.finish(name, r)
			start := time.Now()
			devs, err := src.readDevices(srcCtx, m)
			answers <- answer{name, devs, sourceResult{duration: time.Since(start), err: err}}
		}()
	}
	s.mu.Unlock()
	started := time.Now()
	for waiting := len(reads); waiting > 0; waiting-- {
		select {
		case a := <-answers:
			snap.Devices = append(snap.Devices, a.devs...)
			snap.sources[a.name] = a.res
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.Canceled) {
				// Cancelled (the exporter stopping, the caller gone), the
				// sources' context ended at the same instant, not ahead as
				// at a deadline (sourceContext): each reports what it has
				// not read down at once, given a moment to say so, or a
				// device that had answered would be served down with them.
				grace := time.NewTimer(cancelGrace)
			wait:
				for ; waiting > 0; waiting-- {
					select {
					case a := <-answers:
						snap.Devices = append(snap.Devices, a.devs...)
						snap.sources[a.name] = a.res
					case <-grace.C:
						break wait
					}
				}
				grace.Stop()
			}
			// select picks among ready cases at random: answers already
			// in as the deadline passed still count.
			for more := true; more; {
				select {
				case a := <-answers:
					snap.Devices = append(snap.Devices, a.devs...)
					snap.sources[a.name] = a.res
				default:
					more = false
				}
			}
			s.mu.Lock()
			for name, r := range reads {
				if _, ok := snap.sources[name]; ok {
					continue
				}
				snap.sources[name] = sourceResult{duration: time.Since(started), err: fmt.Errorf("no answer before the scrape deadline: %w", ctx.Err())}
				if u, ok := s.sources[name].(interface{ unanswered() []*Device }); ok {
					snap.Devices = append(snap.Devices, u.unanswered()...)
				}
				if !r.done {
					s.stuck[name] = r
				}
			}
			s.mu.Unlock()
			waiting = 0
		}
	}
	sortDevices(snap.Devices)
	if s.resolver != nil {
		s.attribute(ctx, snap, m)
	}
	return snap
}

// attribute resolves the owners of every device that answered.
func (s *snapshotter) attribute(ctx context.Context, snap *Snapshot, m move) {
	devs := make([]attribution.Device, 0, len(snap.Devices))
	several := s.severalVendors(snap.Devices)
	gres := gresIndices(snap.Devices, several, s.gresByFile)
	unplaced := gresUnplaced(snap.Devices, gres)
	if !s.gresByFile && s.logger != nil && !s.fileOrderTold.Load() && s.resolver.UsesSlurm() {
		switch v := filesOutOfOrder(snap.Devices); {
		case v == "nvidia" && s.fileOrderTold.CompareAndSwap(false, true):
			s.logger.Warn("the NVIDIA GPUs' device files (/dev/nvidiaN) are not in NVML's order; Slurm numbers GRES by device file where gres.conf lists File= without Links= or AutoDetect=nvml: set --slurm.gres-order=device-file if yours does")
		case v == "amd" && s.fileOrderTold.CompareAndSwap(false, true):
			s.logger.Warn("the AMD GPUs' render nodes (/dev/dri/renderDN) are not in PCI address order; Slurm numbers GRES by PCI address with AutoDetect=rsmi on ROCm 6.0 and later, by render node where gres.conf lists File= lines or ROCm is older: set --slurm.gres-order=device-file if yours does")
		}
	}
	minors := nvidiaMinors(snap.Devices)
	for _, d := range snap.Devices {
		key := attributionKey(d)
		if key == "" {
			// Never identified: neither an allocation nor the resolver's
			// memory of it can be tied to it, so who holds it is unknown,
			// on /devices as on /metrics, not "nobody".
			d.OwnersUnknown = true
			continue
		}
		ad := attribution.Device{UUID: key, Vendor: d.Vendor, Index: atoi(d.Index), PCIBusID: d.PCIBusID, Serial: d.Serial, MIGIndex: -1, MIGInstance: -1, GRESIndex: -1}
		if i, ok := gres[d]; ok {
			ad.GRESIndex = i
		}
		ad.GRESUnplaced = unplaced[d]
		ad.DeviceName = gkeName(d, minors)
		if d.MIG != nil {
			ad.ParentUUID, ad.MIGIndex, ad.MIGInstance, ad.Partition = d.MIG.ParentUUID, d.MIG.Index, atoi(d.MIG.Instance), d.MIG.DevicePluginID
		}
		if len(d.Processes) > 0 {
			ad.PIDs = make([]uint32, 0, len(d.Processes))
		}
		for _, p := range d.Processes {
			ad.PIDs = append(ad.PIDs, p.PID)
		}
		for _, p := range d.Exited {
			ad.ExitedPIDs = append(ad.ExitedPIDs, p.PID)
		}
		if !d.Up && !d.HasMIG {
			// A device that did not answer (hung, lost, failed) has had
			// its processes read in part or not at all: owners taken from
			// them may be missing, and none seen is not "idle". A GPU in
			// MIG mode has no processes of its own: its instances' say.
			d.ProcessesPartial = true
		}
		ad.PIDsPartial = d.ProcessesPartial
		devs = append(devs, ad)
	}
	// The vendors whose collector failed: their pods' IDs name no device
	// served for that reason, which the collector's failure tells.
	var unread map[string]bool
	for name, vendor := range sourceVendors {
		if r, ok := snap.sources[name]; ok && r.err != nil {
			if unread == nil {
				unread = map[string]bool{}
			}
			unread[vendor] = true
		}
	}
	start := time.Now()
	res := s.resolver.ResolveRead(ctx, devs, unread)
	// Counted as the attribution collector's time; a failing source shows in
	// xpu_attribution_source_up, not as a failed collector.
	snap.sources["attribution"] = sourceResult{duration: time.Since(start)}
	for _, d := range snap.Devices {
		if own := res.Devices[attributionKey(d)]; own != nil {
			d.Claims, d.ProcessOwner, d.OwnersUnknown, d.OwnersAllocated = own.Claims, own.Process, own.OwnersUnknown, own.Allocated
			d.ProcessStrays = own.Strays
		}
	}
	s.carryReused(snap.Devices, res.Devices, m)
	// An instance nothing can be tied to may be held: so may its GPU, as
	// the resolver has it for the instances it sees (an instance's unknown
	// owners are its GPU's).
	for _, d := range snap.Devices {
		if d.MIG == nil || attributionKey(d) != "" {
			continue
		}
		for _, p := range snap.Devices {
			if p.MIG == nil && p.UUID != "" && p.UUID == d.MIG.ParentUUID {
				p.OwnersUnknown = true
			}
		}
	}
	snap.Attribution, snap.unknownDeviceIDs = res.Sources, res.UnknownDeviceIDs
	snap.unresolvedClaimDevices = res.UnresolvedClaimDevices
	snap.endedPods, snap.slurmJobsRefused = res.EndedPods, res.SlurmJobsRefused
	snap.enginePods, snap.engineSplitPods, snap.engineOthers = res.EnginePods, res.EngineSplitPods, res.EngineOthers
}

// carryReused marks the devices' reused PIDs (markReused): those the
// resolver found, and a window's served again, whose PIDs it found before.
// What was found is kept, while the device is there, until the resolver
// finds more on it: a read that serves another window (a /devices read
// between scrapes, over the time since the last) does not make the next
// scrape, which may serve the last one's again, forget it. The resolver
// finds a reused PID once, at whichever read comes first; found by a read
// that moved no scrape window (m), it is the next scrape's too.
func (s *snapshotter) carryReused(devs []*Device, owners map[string]*attribution.Ownership, m move) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var next map[string]reusedIn
	for _, d := range devs {
		if !d.SamplesByPID {
			continue
		}
		key := attributionKey(d)
		r, ok := s.reused[key]
		switch own := owners[key]; {
		case own != nil && len(own.Reused) > 0:
			r, ok = reusedIn{end: d.WindowEnd, pids: own.Reused, byOther: own.ReusedByOther, pending: m != moveScrape}, true
			markReused(d, r)
		case ok && r.pending:
			markReused(d, r)
			if m == moveScrape {
				r.end, r.pending = d.WindowEnd, false
			}
		case ok && d.WindowEnd != 0 && r.end == d.WindowEnd:
			markReused(d, r)
		}
		if ok && (r.end != 0 || r.pending) {
			if next == nil {
				next = map[string]reusedIn{}
			}
			next[key] = r
		}
	}
	s.reused = next
}

// markReused marks the processes of d whose PID named another process at
// the previous scrape: the vendor's samples of that PID over the window are
// both processes' (found by probing: probe27 PB1, a reused PID billed its
// new pod for its predecessor's time). Where the former process was another
// owner's, that owner's part is unknown, as an exited process's whose PID
// is another's now.
func markReused(d *Device, r reusedIn) {
	for i := range d.Processes {
		if slices.Contains(r.pids, d.Processes[i].PID) {
			d.Processes[i].Mixed = true
		}
	}
	d.ExitedUnnamed = d.ExitedUnnamed || r.byOther
}

// nvidiaMinors maps each NVIDIA GPU's UUID to the N of its /dev/nvidiaN,
// where read.
func nvidiaMinors(devs []*Device) map[string]int {
	m := map[string]int{}
	for _, d := range devs {
		if d.Vendor == "nvidia" && d.MIG == nil && d.UUID != "" && d.Minor.OK {
			m[d.UUID] = d.Minor.Value
		}
	}
	return m
}

// gkeName is the name GKE's device plugin gives d ("nvidia<minor>", or
// "nvidia<minor>/gi<id>" for a MIG device): its GPU's minor number and,
// for a MIG device, its GPU instance ID. "" when either is unknown. The
// plugin gives a pod holding a GPU instance its compute instance 0 alone
// (pkg/gpu/nvidia/mig/mig.go, DiscoverAndMountMIGDevices: the access file
// of "ci0"), so only that compute instance bears the name.
func gkeName(d *Device, minors map[string]int) string {
	if d.Vendor != "nvidia" {
		return ""
	}
	if d.MIG == nil {
		if !d.Minor.OK {
			return ""
		}
		return "nvidia" + strconv.Itoa(d.Minor.Value)
	}
	minor, ok := minors[d.MIG.ParentUUID]
	gi := atoi(d.MIG.Instance)
	if !ok || gi < 0 || d.MIG.ComputeInstance != 0 {
		return ""
	}
	return "nvidia" + strconv.Itoa(minor) + "/gi" + strconv.Itoa(gi)
}

// attributionKey names d to the resolver: its uuid, else (a Gaudi whose
// hl-smi prints uuid N/A, a GPU whose identity calls NVML answers
// NOT_SUPPORTED) its PCI address or serial, by which device plugins name
// it, or last its node-local index: its processes are read from the device
// itself, so they still name their owners, and an allocation naming a
// device by an ID nothing here has is unplaced, which leaves the owners of
// the vendor's unclaimed devices unknown (attribution.Resolve). "" for a
// MIG device or partition without a uuid, which its parent's index does not
// name. Such a key never reaches a label: the device's series carry no
// uuid.
func attributionKey(d *Device) string {
	switch {
	case d.UUID != "":
		return d.UUID
	case d.MIG != nil:
		return ""
	case d.PCIBusID != "":
		return d.Vendor + "/pci/" + d.PCIBusID
	case d.Serial != "":
		return d.Vendor + "/serial/" + d.Serial
	case d.Index != "":
		return d.Vendor + "/index/" + d.Index
	}
	return ""
}

// severalVendors adds the vendors of devs, and of the sources that know
// their devices are there though they list none now (hl-smi found but
// failing), to those seen, and says whether they are more than one.
func (s *snapshotter) severalVendors(devs []*Device) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.vendors == nil {
		s.vendors = map[string]bool{}
	}
	for _, d := range devs {
		s.vendors[d.Vendor] = true
	}
	for _, src := range s.sources {
		if p, ok := src.(interface{ vendorPresent() (string, bool) }); ok {
			if vendor, present := p.vendorPresent(); present {
				s.vendors[vendor] = true
			}
		}
	}
	return len(s.vendors) > 1
}

// gresIndices numbers the devices as Slurm's GRES indices count a node's
// GPUs: in the order NVML enumerates them (sorted devices: by vendor, GPU
// index, then MIG handle index), each GPU in MIG mode replaced by its MIG
// devices, which Slurm's NVML autodetection lists as GPUs of their own
// (slurm.conf gres.conf "MultipleFiles"/MIG support: one GRES per MIG
// device). A GPU in MIG mode without MIG devices is one GRES, as a GPU
// outside MIG mode: Slurm's gpu_nvml.c adds the GPU itself when it added
// no MIG device ("if (!added_mig)"). A GPU whose MIG instances were not all
// read has no index, and neither have the GPUs after it, whose numbers
// would be off.
//
// Slurm's documentation (gres.html, "MIG Support") says only that MIG
// devices are GPUs of their own to it; the order is that of its NVML
// autodetection, which walks GPUs by index and their MIG devices by handle.
//
// A Gaudi node is numbered the same way, by hl-smi's index: Intel's Slurm
// fork detects Gaudi devices through HLML (docs.habana.ai, "Using Slurm
// Workload Manager with Intel Gaudi"), and hl-smi is HLML's tool. That
// HLML's detection order is hl-smi's index is assumed, not documented; a
// gres.conf that lists /dev/accel files by hand in another order differs.
//
// A node with devices of several vendors gets no indices: whether Slurm
// numbers them in one gpu GRES list or per type, and in which order, is up
// to each site's gres.conf, and an index that named the wrong vendor's
// device would give it the wrong job. Processes still name their jobs.
// several says the node has shown devices of several vendors before, though
// devs may now lack one's (its tool failing): the jobs' GPUs must not
// change with the health of another vendor's tool.
//
// byFile numbers NVIDIA GPUs by their device files instead, as Slurm does
// where gres.conf lists them without Links= and without AutoDetect=nvml:
// it sorts its GPUs "by device file first, in case no links", then "by
// links, which is a stand-in for PCI bus ID order", in natural order of the
// file names (src/plugins/gres/gpu/gres_gpu.c, slurm-25-11-0-1, l.613-616),
// and autodetection writes links in NVML's order (src/interfaces/gres.c,
// gres_links_create_empty). A GPU whose file is not known then leaves
// every GPU without an index.
func gresIndices(devs []*Device, several, byFile bool) map[*Device]int {
	out := map[*Device]int{}
	if several || len(devs) == 0 {
		return out
	}
	for _, d := range devs {
		if d.Vendor != devs[0].Vendor {
			return out
		}
	}
	if devs[0].Vendor == kubernetes.VendorHabana {
		// hl-smi's index is the GRES index (see above), gaps included: a
		// device hl-smi leaves out keeps its number, and numbering those
		// listed one after another gave the devices after it their
		// neighbours' jobs (probe I, PI1).
		for _, d := range devs {
			if n := atoi(d.Index); n >= 0 {
				out[d] = n
			}
		}
		return out
	}
	place := func(d *Device) int { return atoi(d.Index) }
	switch vendor := devs[0].Vendor; {
	case byFile && vendor == "amd":
		// Each compute partition has a render node of its own, which a
		// gres.conf File= line names: sorted by device file, a partition
		// is in its node's place, not its GPU's (probe I, PI5). The GPU
		// of its partitions and partition 0 share one node, the GPU
		// first (migIndex).
		for _, d := range devs {
			if !d.Minor.OK {
				return out
			}
		}
		place = func(d *Device) int { return d.Minor.Value }
	case byFile && vendor == "nvidia":
		minor := map[string]int{} // GPU index → its device file's minor
		for _, d := range devs {
			if d.MIG == nil {
				if !d.Minor.OK {
					return out
				}
				minor[d.Index] = d.Minor.Value
			}
		}
		place = func(d *Device) int { return minor[d.Index] }
	case vendor == "amd":
		// AutoDetect=rsmi numbers GPUs in ROCm SMI's order (gpu_rsmi.c,
		// _get_system_gpu_list_rsmi: links in device index order, which
		// gres_gpu.c sorts by), which since ROCm 6.0 is by PCI address
		// (rocm_smi_lib, RocmSMI::Initialize: "Sort index based on the
		// BDF"); a GPU's partitions stay in its place.
		var pcis []string
		for _, d := range devs {
			if d.MIG == nil {
				if d.PCIBusID == "" {
					return out
				}
				pcis = append(pcis, d.PCIBusID)
			}
		}
		slices.SortFunc(pcis, comparePCI)
		rank := map[string]int{} // GPU index → its place by PCI address
		for _, d := range devs {
			if d.MIG == nil {
				rank[d.Index], _ = slices.BinarySearchFunc(pcis, d.PCIBusID, comparePCI)
			}
		}
		place = func(d *Device) int { return rank[d.Index] }
	}
	next := map[string]int{}
	broken := map[string]bool{}
	anyMIG := slices.ContainsFunc(devs, func(d *Device) bool { return d.HasMIG })
	sorted := slices.Clone(devs)
	slices.SortStableFunc(sorted, func(a, b *Device) int {
		if a.Vendor != b.Vendor {
			return strings.Compare(a.Vendor, b.Vendor)
		}
		if c := cmp.Compare(place(a), place(b)); c != 0 {
			return c
		}
		return cmp.Compare(migIndex(a), migIndex(b))
	})
	for i, d := range sorted {
		if broken[d.Vendor] {
			continue
		}
		switch {
		case d.HasMIG:
			if !d.MIGListed {
				// Some instances may be missing: those read would take
				// the numbers of those that were not.
				broken[d.Vendor] = true
				continue
			}
			instances := i+1 < len(sorted) && sorted[i+1].MIG != nil && sorted[i+1].Index == d.Index
			if instances {
				continue // they are numbered in its place
			}
			// In MIG mode without MIG devices: one GRES.
		case !d.Up && d.MIG == nil && anyMIG && !d.MIGModeKnown:
			// On a node with MIG, a GPU down may be in MIG mode with
			// instances unknown now, unless an earlier read found it
			// outside MIG mode (a change needs a GPU reset, and Slurm
			// numbers its GRES when slurmd starts); elsewhere it keeps its
			// place.
			broken[d.Vendor] = true
			continue
		}
		out[d] = next[d.Vendor]
		next[d.Vendor]++
	}
	return out
}

// gresUnplaced are the devices Slurm numbers whose GRES index gresIndices
// could not work out (a GPU before them whose MIG instances are unknown,
// a device file not read, every device of a node of several vendors, whose
// numbering is gres.conf's): a job may hold them though none is seen to. A
// GPU in MIG mode whose instances are numbered in its place is not one.
func gresUnplaced(devs []*Device, idx map[*Device]int) map[*Device]bool {
	if len(devs) == 0 {
		return nil
	}
	out := map[*Device]bool{}
	for _, d := range devs {
		if _, ok := idx[d]; ok {
			continue
		}
		if d.HasMIG && slices.ContainsFunc(devs, func(m *Device) bool { return m.MIG != nil && m.Index == d.Index }) {
			continue
		}
		out[d] = true
	}
	return out
}

// filesOutOfOrder names the vendor whose GPUs' device files are not in the
// order its library numbers them, "" when none's: NVIDIA's /dev/nvidiaN
// against NVML's index, AMD's /dev/dri/renderDN against PCI address order
// (ROCm SMI's). Where they differ, which one Slurm numbers GRES by depends
// on gres.conf.
func filesOutOfOrder(devs []*Device) string {
	// Pairwise, not sorted copies: it runs at every scrape until told,
	// over a node's few GPUs.
	for _, a := range devs {
		for _, b := range devs {
			if a.Vendor != b.Vendor || a.MIG != nil || b.MIG != nil || !a.Minor.OK || !b.Minor.OK {
				continue
			}
			var before bool
			switch a.Vendor {
			case "nvidia":
				before = atoi(a.Index) < atoi(b.Index)
			case "amd":
				before = comparePCI(a.PCIBusID, b.PCIBusID) < 0
			default:
				continue
			}
			if before && a.Minor.Value > b.Minor.Value {
				return a.Vendor
			}
		}
	}
	return ""
}

// comparePCI orders PCI addresses of one form (sysfs', "0000:0c:00.0") by
// domain, bus, device and function.
func comparePCI(a, b string) int {
	return strings.Compare(strings.ToLower(a), strings.ToLower(b))
}

func migIndex(d *Device) int {
	if d.MIG == nil {
		return -1
	}
	return d.MIG.Index
}

// read is one source read; a read that outlives its build is stuck until it
// returns.
type read struct{ done bool }

func (s *snapshotter) finish(name string, r *read) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r.done = true
	if s.stuck[name] == r {
		delete(s.stuck, name)
	}
}

// cancelGrace is how long a cancelled build waits for its sources, whose
// context ended with its own, to report what they did not read.
const cancelGrace = 250 * time.Millisecond

// sourceContext gives sources a deadline a little before the scrape's, so
// that a source that honours its context (reporting late devices down)
// answers before the snapshot stops waiting for it. A quarter of the time
// left, up to 250 ms: a source waiting on a device read in flight uses its
// whole deadline, and what it does after (building the devices) must fit
// in the rest even on a loaded machine.
func sourceContext(ctx context.Context) (context.Context, context.CancelFunc) {
	deadline, ok := ctx.Deadline()
	if !ok {
		return context.WithCancel(ctx)
	}
	grace := min(250*time.Millisecond, time.Until(deadline)/4)
	return context.WithDeadline(ctx, deadline.Add(-grace))
}
