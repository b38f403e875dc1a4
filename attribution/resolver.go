package attribution

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unique"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/xpu-exporter/xpu_exporter/attribution/kubernetes"
	"github.com/xpu-exporter/xpu_exporter/attribution/process"
	"github.com/xpu-exporter/xpu_exporter/attribution/slurm"
	"github.com/xpu-exporter/xpu_exporter/internal/grace"
	"github.com/xpu-exporter/xpu_exporter/internal/pciaddr"
	"github.com/xpu-exporter/xpu_exporter/internal/validutf8"
)

// Source names, the values of the exporter's source label.
const (
	SourceKubelet = "kubelet"
	SourceProcfs  = "procfs"
	SourceSlurm   = "slurm"
	// SourceCDI is the CDI specs that identify DRA-allocated devices.
	SourceCDI = "cdi"
)

// Reasons a Slurm job's record is refused (Result.SlurmJobsRefused), the
// values of the exporter's reason label.
const (
	// RefusedOtherJobsRecord: asked for a job by its ID, scontrol printed
	// other jobs' records (an array's ID whose own task was purged).
	RefusedOtherJobsRecord = "other_jobs_record"
	// RefusedTooLarge: the record is larger than the exporter reads.
	RefusedTooLarge = "too_large"
	// RefusedForgedLines: the job's free text (name, comment, paths) holds
	// line breaks that forge record lines.
	RefusedForgedLines = "forged_lines"
	// RefusedIncomplete: the record lacks UserId or JobState, which
	// scontrol prints in every record.
	RefusedIncomplete = "incomplete"
)

// RefusedReasons are the Refused* reasons, in the order served.
var RefusedReasons = []string{RefusedOtherJobsRecord, RefusedTooLarge, RefusedForgedLines, RefusedIncomplete}

// Kubelet is the kubelet's pod-resources API: its List and
// GetAllocatableResources, asked together (kubernetes.Client makes them
// one round trip), each answer with its own error. A slice it returns is
// never modified, by it or by the Resolver, which keeps what it worked
// out of the slices for as long as it is given the same ones again.
type Kubelet interface {
	ListAllocatable(ctx context.Context) (pods []kubernetes.PodResources, podsErr error, allocatable []kubernetes.ResourceDevices, allocatableErr error)
}

// ExitWatcher tells whether processes exited since they were read
// (process.Exits).
type ExitWatcher interface {
	// Watch starts watching pid, and says whether it does.
	Watch(pid uint32) bool
	// Poll stops watching the processes that exited, and says how many:
	// 0 when no watched process has exited since the last Poll, on which
	// a scrape that sees the same PIDs as the last relies to look none up.
	Poll() (int, error)
	// Watching says whether pid is watched and had not exited at the
	// last Poll.
	Watching(pid uint32) bool
	// Retain stops watching the processes keep does not want.
	Retain(keep func(pid uint32) bool)
}

// ResourceSlices is this node's ResourceSlices, kept by a watch.
type ResourceSlices interface {
	Index() (kubernetes.ResourceSliceIndex, error)
}

// ClaimAccess tells the devices of a ResourceClaim allocated with admin
// access (kubernetes.ResourceSliceSource.AdminDevices), by
// kubernetes.AdminKey.
type ClaimAccess interface {
	AdminDevices(ctx context.Context, namespace, name string) (map[string]bool, error)
}

// Config says which sources the resolver asks. A nil source is not used.
type Config struct {
	Kubelet   Kubelet
	Metadata  kubernetes.MetadataSource
	Resources *kubernetes.ResourceMatcher
	// CDI identifies the devices of DRA claims; nil leaves them
	// unattributed (and counted).
	CDI *kubernetes.CDISpecs
	// DRADrivers are the DRA drivers whose claims hold accelerators; nil
	// means kubernetes.DefaultDRADrivers.
	DRADrivers []string
	// ResourceSlices identifies, from this node's ResourceSlices, the DRA
	// devices the CDI specs do not; nil without API access.
	ResourceSlices ResourceSlices
	// ClaimAccess tells which DRA claim devices were allocated with admin
	// access (a monitoring service's, no allocation); nil without API
	// access, and such claims then count as any other.
	ClaimAccess ClaimAccess
	// VendorExporters are the vendors whose devices exporters of this
	// node serve, where several split them (the chart's DaemonSet per
	// vendor): an inference engine is then served by one of them
	// (Result.EnginePods). Empty: this exporter is the node's only one.
	VendorExporters []string
	PodLabels       *kubernetes.LabelAllowList
	Procfs          *process.Reader
	// Exits tells which cached processes exited (process.Exits), so that
	// a PID given to a new process is read anew at the next scrape; nil
	// where pidfds cannot be had, and then the start times of a few
	// cached PIDs are read at every scrape instead (startChecks).
	Exits ExitWatcher
	Slurm *slurm.Client
	// NodeName is this node's name in Slurm, to read the jobs' GRES.
	NodeName string
	// LearnNodeName says NodeName is the host's name, not one given: where
	// Slurm knows the node by another (NodeName apart from NodeHostname,
	// as cloud clusters name their nodes), the name is learnt from the
	// running jobs squeue lists here (Resolver.slurmNodeName).
	LearnNodeName bool
	Logger        *slog.Logger
}

// Resolver attributes devices to owners. It is safe for concurrent use.
type Resolver struct {
	cfg Config
	now func() time.Time
	// served are the vendors whose devices the exporter reads, nil for
	// every vendor (ServeVendors). Set before the first Resolve.
	served atomic.Pointer[map[string]bool]
	// engines is which engines this exporter served at the kubelet's last
	// answer (enginePods), nil before one.
	engines atomic.Pointer[engineShare]

	// allocsMu guards allocs, the allocations of the kubelet's last answer.
	allocsMu sync.Mutex
	allocs   allocationsMemo

	// initOnce reads once whether the node's init is systemd (initSystemd).
	initOnce    sync.Once
	initSystemd bool

	mu sync.Mutex
	// exactPIDs is the devices' PIDs, in order, at the scrape that made
	// procs, when procs holds those processes and no other, each watched
	// for its exit; nil otherwise. While the devices list the same PIDs
	// and no watched process has exited since, procs is this scrape's too
	// (processes). exitGen counts the Polls that found an exit or failed,
	// and the Retains that stopped watching a process: a scrape that
	// polled before another did either keeps neither procs nor exactPIDs,
	// which may hold a process that exited, or one no longer watched.
	exactPIDs []uint32
	exitGen   uint64
	// procs caches what procfs said of the PIDs seen in the previous
	// scrape: a GPU process lives for many scrapes. A PID is given to a new
	// process only once the PID space has wrapped around, which a busy
	// node with pid_max 32768 does in minutes; so a cached process is
	// watched for its exit (Config.Exits), or failing that its start time
	// is read again (startChecks), and a PID that started anew is read
	// anew.
	procs map[uint32]procInfo
	// round counts the scrapes, to spread the start time checks over them.
	round uint64
	// unshown are the devices' PIDs that procfs did not show at the last
	// read, each with the round that had begun when the read that first
	// found it missing ended (noteUnshown). Only PIDs still listed are
	// kept.
	unshown map[uint32]uint64
	// badIDs remembers the device-plugin IDs already logged as not
	// understood, so that each is logged once.
	badIDs map[string]bool
	// replicas is, for each time-slicing replica held, how many
	// replicas its device plugin advertised when the hold was first seen
	// (see keepReplicas).
	replicas map[replicaHold]heldReplica
	// keptIn and keptOut are keepReplicas' last list and its answer, and
	// keptUIDs its pods' UIDs: the same list again (kept by allocations),
	// its pods the same, gets the same answer.
	keptIn, keptOut []kubernetes.Allocation
	keptUIDs        []string
	// unresolvedClaims are the DRA claim devices not identified at the
	// last scrape, whose messages are forgotten once they are.
	unresolvedClaims map[string]bool
	// cdiState is the CDI specs' problems in the previous scrape, so that
	// each change is logged once.
	cdiState string
	// down holds the sources that failed when last asked, so that a
	// failure and a recovery are logged once each; the state of every
	// scrape is in the sources' up metric.
	down map[string]sourceState
	// lateSince are the sources that answered and miss the scrapes'
	// deadlines, not logged yet (logChanges).
	lateSince grace.Holds
	// slurmHidden says Slurm hid other users' jobs in the previous scrape
	// (slurm.Client.JobsHidden), so that a change is logged once.
	slurmHidden bool
	// slurmNode is this node's Slurm name learnt from its jobs, "" while
	// none is (Config.LearnNodeName); nodeCandidate the name the jobs tell
	// since nodeCandidateSince, not yet confirmed.
	slurmNode          string
	nodeCandidate      string
	nodeCandidateSince time.Time
	// slurmPods are the pods seen running Slurm jobs (slurmInPods), by
	// namespace and name, for as long as they hold devices.
	slurmPods map[podRef]bool
}

// procInfo is who a process runs for, as far as procfs tells. It is two
// pointers, read-only once set, so that the map of a busy node's thousand
// processes, built anew at every scrape, stays small, and carrying a
// process over from the previous scrape allocates nothing.
type procInfo struct {
	info *procRead
	// slurm is what is known of the process's Slurm job, when Slurm is in
	// use and there is something to know.
	slurm *slurmProc
}

type slurmProc struct {
	// job is the Slurm job of the process, from its cgroup, environment or
	// slurmd; environ says from its environment.
	job     string
	environ bool
	// slurmdJob says job is slurmd's answer, which stands for the life of
	// the process: a process is put in a job step when it starts and never
	// moves to another. askedSlurmd is when slurmd last listed no job for
	// the process.
	slurmdJob   bool
	askedSlurmd time.Time
	// twoJobs says slurmd listed the process under two jobs at its last
	// answer: its job is unknown.
	twoJobs bool
	// stepdChecked says whether the process descends from slurmstepd
	// (underStepd) was read: asked of a process in a container's cgroup
	// before its environment is believed (Resolver.outsideSystemd).
	stepdChecked, underStepd bool
	// jobSeen is when job was first seen for the process, on the wall
	// clock the Slurm client times squeue's answers with: a list of the
	// node's running jobs from before it may predate the job.
	jobSeen time.Time
}

// procRead is what was read of a process, once in its life.
type procRead struct {
	process.Info
	// pod is the process's pod and container, from its cgroup, made
	// unique when it is read: a busy node's processes are looked up by
	// it at every scrape (podOwners), a pointer's hash instead of a
	// hundred bytes'.
	pod unique.Handle[podProcess]
	// watched says Config.Exits watched the process when it was read.
	watched bool
}

// job is the process's Slurm job, "" for none known.
func (p procInfo) job() string {
	if p.slurm == nil {
		return ""
	}
	return p.slurm.job
}

// slurmdRecheck is how long slurmd's "in no job" stands for a process
// before slurmd is asked again: each question is a run of scontrol, and
// a GPU process outside every job (a host service) would otherwise cost
// one at every scrape.
const slurmdRecheck = time.Minute

// ServeVendors names the vendors whose devices the exporter reads
// (kubernetes.VendorNVIDIA, VendorAMD, VendorHabana). A device-plugin ID
// or DRA claim of another vendor is another exporter's to place (the chart
// runs one per vendor on a node of two), not an ID naming no device here.
// Without it every vendor is the exporter's.
func (r *Resolver) ServeVendors(vendors []string) {
	served := make(map[string]bool, len(vendors))
	for _, v := range vendors {
		served[v] = true
	}
	r.served.Store(&served)
}

// othersVendor says vendor is known and not one the exporter serves.
func (r *Resolver) othersVendor(vendor string) bool {
	served := r.served.Load()
	return served != nil && vendor != "" && !(*served)[vendor]
}

// New returns a resolver over the configured sources.
func New(cfg Config) *Resolver {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Resources == nil {
		cfg.Resources, _ = kubernetes.NewResourceMatcher(kubernetes.DefaultResourcePatterns...)
	}
	if cfg.DRADrivers == nil {
		cfg.DRADrivers = kubernetes.DefaultDRADrivers
	}
	return &Resolver{cfg: cfg, now: time.Now, procs: map[uint32]procInfo{}, badIDs: map[string]bool{}, down: map[string]sourceState{}}
}

// UsesSlurm says whether Slurm is asked who holds the devices.
func (r *Resolver) UsesSlurm() bool { return r.cfg.Slurm != nil }

// PodLabelNames are the label names of the allow-listed pod labels, in the
// order of Owner.PodLabels.
func (r *Resolver) PodLabelNames() []string {
	if r.cfg.PodLabels == nil {
		return nil
	}
	return r.cfg.PodLabels.Names()
}

// Resolve attributes devices. It never fails: a source that fails is
// reported in Result.Sources and the devices it would have attributed are
// returned with the owners the other sources found, or none.
func (r *Resolver) Resolve(ctx context.Context, devices []Device) Result {
	return r.ResolveRead(ctx, devices, nil)
}

// ResolveRead is Resolve where the devices of the vendors in unread could
// not be read at all this time (their collector failed): an ID of theirs
// that names no device served names none for that reason, which the
// collector's failure tells once, and is not counted in UnknownDeviceIDs.
func (r *Resolver) ResolveRead(ctx context.Context, devices []Device, unread map[string]bool) Result {
	res := Result{Devices: make(map[string]*Ownership, len(devices))}
	for _, d := range devices {
		res.Devices[d.UUID] = &Ownership{Process: make(map[uint32]int, len(d.PIDs))}
	}
	r.mu.Lock()
	prev := r.procs // the previous scrape's, for exited processes
	r.mu.Unlock()
	procs, hidden, same, reused, procErr := r.processes(devices)
	if same.shared && r.cfg.Slurm != nil {
		// slurmJobs writes procs, which is the last scrape's, while a
		// concurrent scrape may be reading it.
		procs, same.shared = maps.Clone(procs), false
	}
	procSource := -1
	if r.cfg.Procfs != nil {
		procSource = len(res.Sources)
		res.Sources = append(res.Sources, Source{Name: SourceProcfs, Err: procErr})
	}

	// Before slurmJobs, which writes procs from its goroutine.
	podProcs := r.cfg.Kubelet != nil && podProcesses(procs)
	// Slurm is asked beside the kubelet, not after it: each has the
	// scrape's whole deadline, and a kubelet that stalls does not leave
	// squeue no time, failing a source that answers (probe7-faults D1).
	var sl slurmState
	var slurmErr error
	slurmDone := make(chan struct{})
	if r.cfg.Slurm != nil {
		go func() {
			defer close(slurmDone)
			sl, slurmErr = r.slurmJobs(ctx, procs)
		}()
	} else {
		close(slurmDone)
	}

	var kube map[string][]Claim
	var unplaced unplacedHolds
	var shareUnknown map[string]bool
	kubeDown := false
	if r.cfg.Kubelet != nil {
		var err error
		var cdi *Source
		kube, unplaced, shareUnknown, cdi, err = r.kubernetesClaims(ctx, devices, unread, podProcs, &res)
		kubeDown = kube == nil
		res.Sources = append(res.Sources, Source{Name: SourceKubelet, Err: err})
		if cdi != nil {
			res.Sources = append(res.Sources, *cdi)
		}
		if r.cfg.Metadata != nil && r.cfg.Metadata.Name() != kubernetes.SourceNone {
			res.Sources = append(res.Sources, Source{Name: r.cfg.Metadata.Name(), Err: r.cfg.Metadata.Healthy()})
		}
	}
	inheritWholeAllocations(devices, kube)
	<-slurmDone
	r.slurmInPods(procs, kube)
	slurmDown := false
	if r.cfg.Slurm != nil {
		res.Sources = append(res.Sources, Source{Name: SourceSlurm, Err: slurmErr})
		slurmDown = slurmErr != nil
		if !slurmDown {
			if highest, ok := gresHighest(devices, unread); ok {
				res.UnknownDeviceIDs += r.gresNamingNoDevice(devices, sl, highest)
				if r.gresShort(sl, highest) {
					devices = withoutGRESPlaces(devices)
				}
			}
		}
		res.SlurmJobsRefused = sl.refused
	}
	if len(sl.environUnread) > 0 {
		// A file of procfs that could not be read, as a hidden process's.
		if hidden == nil {
			hidden = map[uint32]bool{}
		}
		maps.Copy(hidden, sl.environUnread)
		res.Sources[procSource].Err = cmpErr(res.Sources[procSource].Err, sl.environErr)
	}

	pods := podOwners{}
	// GPUs whose MIG instances or compute partitions are devices: handed
	// out by their instances, whose owners are theirs.
	parents := map[string]bool{}
	for _, d := range devices {
		if d.ParentUUID != "" {
			parents[d.ParentUUID] = true
		}
	}
	for _, d := range devices {
		own := res.Devices[d.UUID]
		partial := d.PIDsPartial || (len(hidden) > 0 && slices.ContainsFunc(d.PIDs, func(pid uint32) bool { return hidden[pid] }))
		// A pod holds a device of this vendor that could not be told: any
		// one not allocated to a known owner may be it, but for a GPU
		// whose instances are devices, which may be held only through an
		// instance (its owners unknown then as the instance's are).
		heldUnseen := len(kube[d.UUID]) == 0 && !parents[d.UUID] && unplaced.mayHold(d)
		if d.ParentUUID != "" || len(d.PIDs) > 0 || len(d.ExitedPIDs) > 0 || kube[d.UUID] != nil || sl.gres[d.GRESIndex] != nil {
			r.attribute(own, d, procs, prev, reused, partial, kube[d.UUID], kubeDown, heldUnseen, sl, pods)
		} else {
			// No allocation and no process seen: none, unless the list of
			// processes is not whole.
			own.OwnersUnknown = partial
		}
		// While a source that hands out devices fails, a device's owners
		// may be missing, whatever else was found: its count is unknown,
		// not the owners seen (0 for a GPU a Slurm job holds through GRES
		// while scontrol fails would read as idle).
		if kubeDown || heldUnseen || shareUnknown[d.UUID] || (slurmDown || sl.unseenHolder(d) || sl.mayHoldUnplaced(d)) && len(kube[d.UUID]) == 0 {
			own.OwnersUnknown = true
		}
	}
	// An exited process stays known while the vendor's samples still name
	// it, which they do until a scrape moves the window past it: a
	// /devices read between two scrapes must not make it unknown.
	for _, d := range devices {
		for _, pid := range d.ExitedPIDs {
			if p, ok := prev[pid]; ok {
				if _, running := procs[pid]; !running {
					if same.shared {
						procs, same.shared = maps.Clone(procs), false
					}
					procs[pid] = p
					same.pids = nil // procs holds more than the devices' PIDs
				}
			}
		}
	}
	r.mu.Lock()
	if same.exitGen == r.exitGen {
		r.procs, r.exactPIDs = procs, same.pids
	}
	// Else a concurrent scrape (a /devices read beside a scrape) found
	// processes that exited since this one looked: some of this one's may
	// be those, and what that scrape keeps is the newer.
	r.logChanges(res.Sources, ctx.Err() != nil)
	r.mu.Unlock()
	// A GPU in MIG mode is shared by the owners of its instances.
	for _, d := range devices {
		if d.ParentUUID == "" {
			continue
		}
		parent := res.Devices[d.ParentUUID]
		if parent == nil {
			continue
		}
		own := res.Devices[d.UUID]
		for _, c := range own.Claims {
			if !slices.ContainsFunc(parent.Claims, func(p Claim) bool { return p.Owner.Key() == c.Owner.Key() }) {
				parent.Claims = append(parent.Claims, Claim{Owner: c.Owner})
			}
		}
		// Owners an instance may be missing are the GPU's too.
		parent.OwnersUnknown = parent.OwnersUnknown || own.OwnersUnknown
	}
	return res
}

// inheritWholeAllocations gives the MIG instances (or compute partitions)
// of a GPU allocated whole the owners of that allocation. Under the NVIDIA
// device plugin's default MIG strategy, none, a GPU in MIG mode is
// advertised and allocated as one device by its UUID or index, and the
// pod's processes run in its instances, which the kubelet never names. The
// inherited claims have share 0: the allocation is the parent's, counted
// there once, while an instance's usage is split between its owners as
// always rather than shown unattributed.
func inheritWholeAllocations(devices []Device, kube map[string][]Claim) {
	for _, d := range devices {
		parent := kube[d.ParentUUID]
		if d.ParentUUID == "" || len(parent) == 0 || len(kube[d.UUID]) > 0 {
			continue
		}
		inherited := make([]Claim, len(parent))
		for i, c := range parent {
			inherited[i] = Claim{Owner: c.Owner}
		}
		kube[d.UUID] = inherited
	}
}

// runningRecord is a job squeue lists as running on this node, with its
// record.
type runningRecord struct {
	id  string
	job slurm.Job
}

// slurmNodeName is this node's name in Slurm: the one configured, or where
// it was not given and no running job's record names the host's name, the
// one node of the jobs squeue lists here that run on one node alone. squeue
// -w maps a host name to its node (NodeHostname), and a job that runs on
// one node and is listed on this one runs here; their records name the
// node as Slurm does, which is how its GRES are keyed. Jobs that disagree,
// or only jobs of several nodes, teach nothing: the host's name stays, and
// the GPUs no job is seen to hold have unknown owners. What is learnt is
// kept, and said once.
func (r *Resolver) slurmNodeName(here []runningRecord) string {
	node := r.cfg.NodeName
	if !r.cfg.LearnNodeName {
		return node
	}
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.slurmNode != "" {
		node = r.slurmNode
	}
	learnt := ""
	if !slices.ContainsFunc(here, func(rr runningRecord) bool { return rr.job.NamesNode(node) }) {
		for _, rr := range here {
			one, ok := rr.job.OneNode()
			if !ok {
				continue
			}
			if learnt != "" && one != learnt {
				learnt = ""
				break
			}
			learnt = one
		}
	}
	// A name is taken only once the jobs have told it, and nothing else,
	// at every scrape for longer than squeue's list is reused: a job
	// requeued or resized off this node is listed here until the list is
	// asked again, and its fresh record names the node it went to. A
	// scrape that does not tell it starts the wait again.
	if learnt == "" || learnt != r.nodeCandidate {
		r.nodeCandidate, r.nodeCandidateSince = learnt, now
		return node
	}
	if now.Sub(r.nodeCandidateSince) < nodeNameConfirm {
		return node
	}
	r.slurmNode, r.nodeCandidate = learnt, ""
	if learnt != r.cfg.NodeName {
		r.cfg.Logger.Info("Slurm knows this node by another name than its host's, learnt from the one-node jobs running here; --slurm.node-name gives it", "host", r.cfg.NodeName, "node", learnt)
	}
	return learnt
}

// nodeNameConfirm is how long running jobs must tell one node name before
// it is taken: longer than the slurm client reuses squeue's list of the
// node's jobs (10 s).
const nodeNameConfirm = 30 * time.Second

// logHidden logs once that Slurm starts, or stops, hiding jobs.
func (r *Resolver) logHidden(hidden bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case hidden && !r.slurmHidden:
		r.cfg.Logger.Warn("Slurm hides other users' jobs from the exporter (PrivateData=jobs): the GPUs no job is seen to hold have unknown owners; run the exporter as SlurmUser or root")
	case !hidden && r.slurmHidden:
		r.cfg.Logger.Info("Slurm shows the exporter every job again")
	}
	r.slurmHidden = hidden
}

// logChanges logs a source that starts failing, with why, and one that
// answers again. r.mu must be held. A source that answered and then misses
// the deadline of a scrape whose time ran out (late) is logged once it has
// not answered in time for grace.Period: one scrape asking for a
// millisecond (any client may) logged the kubelet failing and back (probe
// H, PH4). A source's own timeout (scontrol's) is its failure at once.
func (r *Resolver) logChanges(sources []Source, late bool) {
	for _, s := range sources {
		if s.Name == SourceCDI {
			continue // logCDIState names the CDI specs' problems as they change.
		}
		was, now := r.down[s.Name], stateOf(s.Err)
		if late && was == sourceUp && now == sourceFailing && pastDeadline(s.Err) && r.lateSince.Hold(s.Name, time.Now()) {
			continue
		}
		delete(r.lateSince, s.Name)
		if now == was {
			continue
		}
		if now == sourceUp {
			delete(r.down, s.Name)
		} else {
			r.down[s.Name] = now
		}
		switch {
		case now == sourceFailing && watched(s.Name):
			r.cfg.Logger.Warn("attribution source failing; what it said last is used until it answers", "source", s.Name, "err", s.Err)
		case now == sourceFailing:
			r.cfg.Logger.Warn("attribution source failing; owners it tells are missing until it answers", "source", s.Name, "err", s.Err)
		case now == sourcePending && was == sourceUp:
			r.cfg.Logger.Info("attribution source has not listed yet; owners it tells are missing until it does", "source", s.Name)
		case now == sourceUp:
			r.cfg.Logger.Info("attribution source answering again", "source", s.Name)
		}
	}
}

// pastDeadline says err is the scrape's deadline passing, as the context
// or as the kubelet's gRPC status tells it.
func pastDeadline(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || status.Code(err) == codes.DeadlineExceeded
}

// watched says the source is a watch whose cache, what it said last,
// stays in use while it fails (pod metadata, ResourceSlices), where the
// others are asked at every scrape (probe23-k8sapi D4: the log said its
// labels were missing while they were served).
func watched(source string) bool {
	switch source {
	case kubernetes.SourceAPIServer, kubernetes.SourcePodsAPI, kubernetes.SourceResourceSlices:
		return true
	}
	return false
}

// sourceState is how an attribution source answered, as logged.
type sourceState int

const (
	sourceUp sourceState = iota
	// sourcePending is a watch source whose first list has not completed:
	// at start, where the first scrape comes before any answer of the
	// API server. Its cause, if it fails, is logged when it does: logged
	// as the failure, "not completed yet" hid the 403 of missing RBAC
	// that followed (probe23-k8sapi D1).
	sourcePending
	sourceFailing
)

func stateOf(err error) sourceState {
	switch {
	case err == nil:
		return sourceUp
	case errors.Is(err, kubernetes.ErrNotListedYet):
		return sourcePending
	}
	return sourceFailing
}

// attribute decides the owners of one device and which process runs for
// which of them. Allocation decides: Kubernetes' pod-resources, else the
// Slurm jobs whose GRES hold the device; only without either are owners
// taken from the processes themselves. On Kubernetes only the kubelet makes
// a pod an owner: while it is down (kubeDown), pod processes stay unresolved
// rather than guessed at. Nor are owners taken from a partial list of the
// device's processes (partial): the owners seen need not be all of them,
// and one alone would be taken for the device's sole owner.
func (r *Resolver) attribute(own *Ownership, d Device, procs, prev, reused map[uint32]procInfo, partial bool, kube []Claim, kubeDown, heldUnseen bool, sl slurmState, pods podOwners) {
	switch {
	case len(kube) > 0:
		own.Claims = kube
	case d.GRESIndex >= 0 && len(sl.gres[d.GRESIndex]) > 0:
		for _, h := range sl.gres[d.GRESIndex] {
			own.Claims = append(own.Claims, Claim{Owner: slurmOwner(h.job, sl.jobs), Share: h.share})
		}
	}
	allocated := len(own.Claims) > 0
	own.Allocated = allocated
	scaleShares(own.Claims)
	own.OwnersUnknown = partial && !allocated
	idx := newClaims(own.Claims)
	var scratch Owner // processOwner's
	// Only while the kubelet is down, or not asked, does it matter whether
	// pods' processes run on the device: a lookup per process saved at
	// every other scrape. Not asked (Kubernetes attribution off, or no
	// socket where the exporter looks), a pod's process whose pod no
	// metadata names has an owner nobody can tell.
	podOnDevice := (kubeDown || r.cfg.Kubelet == nil) && slices.ContainsFunc(d.PIDs, func(pid uint32) bool {
		p, ok := procs[pid]
		if !ok || p.info.Cgroup.PodUID == "" || r.jobInPod(p) {
			return false
		}
		if kubeDown {
			return true
		}
		_, known := r.processOwner(p, sl, pods, &scratch)
		return !known
	})
	if podOnDevice && r.cfg.Kubelet == nil {
		r.logOnceMsg(errors.New("processes of Kubernetes pods use GPUs, and Kubernetes attribution is off"),
			"the owners of GPUs that pods use are unknown: enable --attribution.kubernetes, with --kubernetes.pod-resources-socket where the kubelet's socket is (microk8s: /var/snap/microk8s/common/var/lib/kubelet/pod-resources/kubelet.sock)")
	}
	if podOnDevice && !allocated {
		own.OwnersUnknown = true
	}
	for _, pid := range d.PIDs {
		p, ok := procs[pid]
		if !ok {
			continue
		}
		owner, known := r.processOwner(p, sl, pods, &scratch)
		if former, ok := reused[pid]; ok {
			own.Reused = append(own.Reused, pid)
			own.ReusedByOther = own.ReusedByOther || !r.sameOwner(former, owner, known, sl, pods)
		}
		if !known && (p.info.Cgroup.SlurmSLUID != "" || p.slurm != nil && p.slurm.twoJobs) {
			// A Slurm task of a job that could not be told (an unresolved
			// SLUID, a PID slurmd lists under two jobs) may be another
			// job's than the GRES holders' (a GPU Slurm does not fence
			// with ConstrainDevices): the allocation does not name every
			// owner of the device's processes, and the holder is not
			// handed its usage.
			own.Allocated = false
		}
		if !known && !kubeDown && r.cfg.Kubelet != nil && !r.jobInPod(p) && r.podOfNoClaim(p.info.Cgroup.PodUID, own.Claims) {
			// A pod the kubelet no longer lists (it ended, or was
			// force-deleted while its process still runs), on a device
			// now held by others or by nobody: its usage is shown apart,
			// not handed to the device's owner, though who ran it is
			// unknown.
			own.Process[pid] = Unattributed
		}
		if !known || (kubeDown && owner.Kind == Kubernetes) {
			continue
		}
		i, ambiguous := idx.ofProcess(owner, p, pods)
		switch {
		case ambiguous:
			// Which of its pod's containers runs the process is unknown:
			// left unresolved, so the split is left out rather than all
			// usage handed to one container.
		case i >= 0:
			own.Process[pid] = i
		case ((allocated || heldUnseen) && owner.Kind != Slurm) || (owner.Kind == Kubernetes && r.cfg.Kubelet != nil):
			// A process outside the allocation (a host daemon, a pod that
			// did not request the GPU) is shown apart, never added to an
			// owner, also where the device may be held by an allocation
			// that could not be told; a job's own processes make it an
			// owner, though, whether or not Slurm gave it the device
			// through GRES. Where the kubelet answers, only it makes pods
			// owners.
			own.Process[pid] = Unattributed
			if own.Strays == nil {
				own.Strays = map[uint32]Owner{}
			}
			own.Strays[pid] = *owner
		case partial:
			// Left unresolved for the device's split (see above), but
			// the process's own series still say whose it is.
			if own.Strays == nil {
				own.Strays = map[uint32]Owner{}
			}
			own.Strays[pid] = *owner
		case podOnDevice: // the kubelet is down
			// Every device looks unallocated while the kubelet is down; a
			// GPU that pods' processes run on is theirs, and a host daemon
			// on it must not become its owner. Elsewhere Slurm jobs and
			// units own their GPUs as always: only pod owners wait for the
			// kubelet.
		default:
			// A job running on a GPU that Slurm did not give it, whether
			// it gave it another job or none, owns its usage there but
			// was allocated none of it: share 0 keeps chargeback from
			// counting a GPU of its allocation twice.
			share := 1.0
			if allocated || owner.Kind == Slurm {
				share = 0
			}
			idx.add(Claim{Owner: *owner, Share: share})
			own.Process[pid] = len(idx.list) - 1
		}
	}
	r.attributeExited(own, d.ExitedPIDs, prev, idx, kubeDown, sl, pods, &scratch)
	own.Claims = idx.list
	if allocated {
		return
	}
	// Devices owned through their processes are shared evenly between the
	// owners that take a share.
	n := 0
	for _, c := range own.Claims {
		if c.Share > 0 {
			n++
		}
	}
	for i := range own.Claims {
		if own.Claims[i].Share > 0 {
			own.Claims[i].Share = 1 / float64(n)
		}
	}
}

// sameOwner says whether the process former, which a PID named at the
// previous scrape, ran for the known owner of the process the PID names now:
// then the PID's samples over the window, both processes' time, are that
// owner's all the same. A pod's container restarted in place, a job's next
// step, a unit's worker.
func (r *Resolver) sameOwner(former procInfo, owner *Owner, known bool, sl slurmState, pods podOwners) bool {
	if !known {
		return false
	}
	key := owner.Key() // owner may be processOwner's scratch
	var scratch Owner
	was, wasKnown := r.processOwner(former, sl, pods, &scratch)
	return wasKnown && was.Key() == key
}

// attributeExited maps the processes that used the device earlier in the
// window to the claims of their owners, by what procfs said of them at the
// previous scrape. They make no owner: one that holds the device no more
// (the pod it ran in ended, a job finished) is Unattributed, so that its
// time is not handed to whoever holds the device now. A process not seen
// at the previous scrape (it ran between two scrapes) stays unresolved.
func (r *Resolver) attributeExited(own *Ownership, exited []uint32, prev map[uint32]procInfo, idx *claims, kubeDown bool, sl slurmState, pods podOwners, scratch *Owner) {
	for _, pid := range exited {
		p, ok := prev[pid]
		if !ok {
			continue
		}
		owner, known := r.processOwner(p, sl, pods, scratch)
		switch {
		case !known && !kubeDown && r.cfg.Kubelet != nil && !r.jobInPod(p) && r.podOfNoClaim(p.info.Cgroup.PodUID, own.Claims):
			own.Process[pid] = Unattributed // a pod the kubelet lists no more
		case !known || (kubeDown && owner.Kind == Kubernetes):
		default:
			if i, ambiguous := idx.of(owner); !ambiguous {
				own.Process[pid] = i // Unattributed when it is no claim
			}
		}
	}
}

// scaleShares makes the shares of one device's allocations add up to at most
// the device. The kubelet can list one whole device in two containers of a
// pod (a device an init container held, reused by the app container), and
// Slurm can give one GPU to several jobs (OverSubscribe, shared GRES): each
// holder then has it all, and chargeback summing the shares would count the
// device once per holder. Such holders get the device's parts in proportion
// to their shares.
func scaleShares(claims []Claim) {
	total := 0.0
	for _, c := range claims {
		total += c.Share
	}
	// Replica shares (1/N each) add up to 1 only up to rounding.
	if total <= 1+1e-9 {
		return
	}
	for i := range claims {
		claims[i].Share /= total
	}
}

// claims finds the claim a process's owner runs under, -1 for none. A
// process knows its pod, and its container where the pod metadata has the
// containers' runtime IDs (the kubelet Pods API); without its container, a
// process of a pod whose several containers hold the device is ambiguous.
//
// Claims are indexed by pod and by owner key, so that a process is not
// compared with every claim: hundreds of pods may share one GPU that
// thousands of processes run on.
type claims struct {
	list  []Claim
	byPod map[podRef][]int // Kubernetes claims, in list order
	byKey map[string]int   // other owners' first claim
}

type podRef struct{ namespace, pod string }

func newClaims(list []Claim) *claims {
	c := &claims{list: list, byPod: make(map[podRef][]int, len(list)), byKey: map[string]int{}}
	for i, cl := range list {
		c.index(i, cl)
	}
	return c
}

func (c *claims) add(cl Claim) {
	c.list = append(c.list, cl)
	c.index(len(c.list)-1, cl)
}

func (c *claims) index(i int, cl Claim) {
	if cl.Owner.Kind == Kubernetes {
		ref := podRef{cl.Owner.Namespace, cl.Owner.Pod}
		c.byPod[ref] = append(c.byPod[ref], i)
		return
	}
	if _, ok := c.byKey[cl.Owner.Key()]; !ok {
		c.byKey[cl.Owner.Key()] = i
	}
}

func (c *claims) of(proc *Owner) (index int, ambiguous bool) {
	if proc.Kind != Kubernetes {
		if i, ok := c.byKey[proc.Key()]; ok {
			return i, false
		}
		return -1, false
	}
	index = -1
	for _, i := range c.byPod[podRef{proc.Namespace, proc.Pod}] {
		if proc.Container != "" {
			if c.list[i].Owner.Container == proc.Container {
				return i, false
			}
			continue
		}
		if index >= 0 {
			return -1, true
		}
		index = i
	}
	return index, false
}

// ofProcess is of for the owner of process p: a pod's owner keeps its
// answer for these claims while no claim is added, as its processes ask
// again and again (a thousand processes of a few dozen pods on one GPU:
// looking each up by namespace and pod name was a tenth of attribute).
func (c *claims) ofProcess(owner *Owner, p procInfo, pods podOwners) (index int, ambiguous bool) {
	var a *podOwnerAnswer
	if p.info.Cgroup.PodUID != "" {
		a = pods[p.info.pod]
	}
	if a == nil || &a.owner != owner {
		return c.of(owner)
	}
	if a.at != c || a.n != len(c.list) {
		a.index, a.ambiguous = c.of(owner)
		a.at, a.n = c, len(c.list)
	}
	return a.index, a.ambiguous
}

// processOwner is who a process runs for: its pod (but a Slurm job's task
// in a pod's cgroup is its job's, jobInPod), else its Slurm job, else
// its systemd unit (the stable one: process.Cgroup.OwnerUnit) and user. It
// is unknown for a pod the metadata source does not know, and for a job
// cgroup named by a SLUID that could not be resolved: a wrong guess would
// be worse than none. A job Slurm does not know is the process's owner,
// labelled with its ID alone, when the process's cgroup or slurmd names
// it; named only by the process's environment, it is no owner.
//
// The owner is returned by pointer, into pods or into scratch (which the
// next call overwrites), as an Owner is two dozen strings and a busy node
// asks this for every process at every scrape: copying it each time was
// most of the time attribution spent on each process.
func (r *Resolver) processOwner(p procInfo, sl slurmState, pods podOwners, scratch *Owner) (*Owner, bool) {
	if p.info.Cgroup.PodUID != "" && !r.jobInPod(p) {
		a := pods[p.info.pod]
		if a == nil {
			a = &podOwnerAnswer{}
			a.owner, a.known = r.podProcessOwner(p.info.pod.Value())
			pods[p.info.pod] = a
		}
		return &a.owner, a.known
	}
	if p.slurm != nil && p.slurm.twoJobs {
		*scratch = Owner{}
		return scratch, false
	}
	if job := p.job(); job != "" && !(p.slurm.environ && sl.unknown[job]) {
		*scratch = slurmOwner(job, sl.jobs)
		return scratch, true
	}
	if p.info.Cgroup.SlurmSLUID != "" {
		*scratch = Owner{}
		return scratch, false
	}
	// Transient units (a container's scope, a login session) would make an
	// owner per container or login: OwnerUnit names what is stable.
	*scratch = Owner{Kind: Process, Unit: p.info.Cgroup.OwnerUnit(), User: p.info.User, Command: p.info.Comm}
	return scratch, true
}

// jobInPod says the process is a Slurm job's task whose cgroup nests under a
// pod's (slurmd in a pod, as Slinky's slurm-operator runs it), and Slurm is
// asked: the job owns it, not the pod, which is infrastructure like slurmd
// on a host (slurmInPods).
func (r *Resolver) jobInPod(p procInfo) bool {
	cg := p.info.Cgroup
	return r.cfg.Slurm != nil && cg.PodUID != "" && (cg.SlurmJobID != "" || cg.SlurmSLUID != "")
}

// slurmInPods finds the pods whose cgroups hold Slurm jobs' GPU processes.
// With Slurm asked, their devices are the jobs' to hold, by GRES, as on a
// node where slurmd runs on the host: the pods' own claims (slurmd's
// device-plugin allocation of every GPU of the node) are left out of kube.
// The sites that run Slurm this way bill Slurm accounts. A pod is known to
// be one from the first job process seen in it, and remembered while it
// holds devices, so that its GPUs stay the jobs' while their processes
// come and go. Without Slurm the pod keeps its claims, and is billed for
// its jobs. Logged once each time a pod becomes known as one.
func (r *Resolver) slurmInPods(procs map[uint32]procInfo, kube map[string][]Claim) {
	if r.cfg.Kubelet == nil || r.cfg.Metadata == nil {
		return
	}
	seen := map[podRef]string{} // a job of each pod
	for _, p := range procs {
		cg := p.info.Cgroup
		if cg.PodUID == "" || cg.SlurmJobID == "" && cg.SlurmSLUID == "" {
			continue
		}
		if meta, ok := r.cfg.Metadata.PodByUID(cg.PodUID); ok {
			seen[podRef{meta.Namespace, meta.Name}] = cg.SlurmJobID + cg.SlurmSLUID
		}
	}
	r.mu.Lock()
	none := len(seen) == 0 && len(r.slurmPods) == 0
	r.mu.Unlock()
	if none {
		return
	}
	holding := map[podRef]bool{}
	for _, list := range kube {
		for _, c := range list {
			if c.Owner.Kind == Kubernetes {
				holding[podRef{c.Owner.Namespace, c.Owner.Pod}] = true
			}
		}
	}
	var fresh []podRef
	r.mu.Lock()
	for ref := range r.slurmPods {
		if kube != nil && !holding[ref] && seen[ref] == "" {
			delete(r.slurmPods, ref)
		}
	}
	for ref := range seen {
		if r.slurmPods == nil {
			r.slurmPods = map[podRef]bool{}
		}
		if !r.slurmPods[ref] {
			r.slurmPods[ref] = true
			fresh = append(fresh, ref)
		}
	}
	slurmPods := maps.Clone(r.slurmPods)
	r.mu.Unlock()
	for _, ref := range fresh {
		if r.cfg.Slurm == nil {
			r.cfg.Logger.Warn("a pod runs Slurm jobs (slurmd in a pod), and Slurm attribution is off: the pod is billed for the GPUs it holds and for its jobs' processes; enable --attribution.slurm to bill the jobs",
				"pod", ref.namespace+"/"+ref.pod, "slurm_job", seen[ref])
		} else {
			r.cfg.Logger.Info("a pod runs Slurm jobs (slurmd in a pod): the GPUs it holds are attributed to the jobs, by their GRES and processes, not to the pod",
				"pod", ref.namespace+"/"+ref.pod, "slurm_job", seen[ref])
		}
	}
	if r.cfg.Slurm == nil || kube == nil {
		return
	}
	isSlurmPod := func(c Claim) bool {
		return c.Owner.Kind == Kubernetes && slurmPods[podRef{c.Owner.Namespace, c.Owner.Pod}]
	}
	for uuid, list := range kube {
		if !slices.ContainsFunc(list, isSlurmPod) {
			continue
		}
		if list = slices.DeleteFunc(slices.Clone(list), isSlurmPod); len(list) == 0 {
			delete(kube, uuid)
		} else {
			kube[uuid] = list
		}
	}
}

// podOfNoClaim says a process of the pod uid, which the metadata source does
// not know, runs for none of a device's claims while the kubelet answers.
// It cannot run for a Slurm job's or a unit's claim, nor for a pod's whose
// UID the metadata source gives and is another (pod UIDs are never
// reused). A pod's UID that is not known (no metadata source, or a pod it
// has not seen yet) may be uid, and so may any while the source is not
// current: its pods by name may be stale, such as a StatefulSet pod
// replaced under the same name. The process then stays unresolved.
func (r *Resolver) podOfNoClaim(uid string, claims []Claim) bool {
	if uid == "" {
		return false
	}
	current := r.cfg.Metadata != nil && r.cfg.Metadata.Name() != kubernetes.SourceNone && r.cfg.Metadata.Healthy() == nil
	return !slices.ContainsFunc(claims, func(c Claim) bool {
		return c.Owner.Kind == Kubernetes && (!current || c.Owner.PodUID == "" || strings.EqualFold(c.Owner.PodUID, uid))
	})
}

// podOwners holds the owners of pod processes found in one Resolve: a pod's
// processes, hundreds of them on a busy node, share a UID and mostly a
// container, and would each repeat the same metadata lookups.
type podOwners map[unique.Handle[podProcess]]*podOwnerAnswer

// podProcess is what a process's cgroup says of its pod.
type podProcess struct{ podUID, containerID string }

type podOwnerAnswer struct {
	owner Owner
	known bool
	// index and ambiguous are claims.of(&owner) for the claims at while
	// they had n (claims.ofProcess).
	at        *claims
	n, index  int
	ambiguous bool
}

func (r *Resolver) podProcessOwner(p podProcess) (Owner, bool) {
	if r.cfg.Metadata == nil {
		return Owner{}, false
	}
	meta, ok := r.cfg.Metadata.PodByUID(p.podUID)
	if !ok {
		return Owner{}, false
	}
	container := ""
	if p.containerID != "" {
		for _, c := range meta.Containers {
			if c.ID == p.containerID {
				container = c.Name
			}
		}
	}
	return r.podOwner(meta.Namespace, meta.Name, container), true
}

func slurmOwner(id string, jobs map[string]slurm.Job) Owner {
	j := jobs[id]
	return Owner{
		Kind: Slurm, SlurmJobID: id, SlurmArrayJobID: j.ArrayJobID, SlurmHetJobID: j.HetJobID, SlurmJobName: validutf8.String(j.Name), SlurmUser: validutf8.String(j.User),
		SlurmAccount: validutf8.String(j.Account), SlurmPartition: validutf8.String(j.Partition), SlurmQOS: validutf8.String(j.QOS),
	}
}

func (r *Resolver) podOwner(namespace, pod, container string) Owner {
	o, meta, known := PodOwner(r.cfg.Metadata, namespace, pod, container)
	if known && r.cfg.PodLabels != nil {
		o.PodLabels = r.cfg.PodLabels.Values(meta.Labels)
	}
	return o
}

// PodOwner is the owner that a container of a pod is, with the workload
// that md, the pod metadata, names; namespace and pod alone where md (which
// may be nil) does not know the pod. meta is the pod's metadata, where
// known.
func PodOwner(md kubernetes.MetadataSource, namespace, pod, container string) (o Owner, meta kubernetes.PodMeta, known bool) {
	o = Owner{Kind: Kubernetes, Namespace: namespace, Pod: pod, Container: container}
	if md == nil {
		return o, meta, false
	}
	if meta, known = md.Pod(namespace, pod); known {
		o.PodUID, o.Workload, o.WorkloadKind = meta.UID, meta.Workload, meta.WorkloadKind
	}
	return o, meta, known
}

// processes reads procfs for every PID on the devices. hidden are the PIDs
// procfs has but would not show (no permission, a malformed file, a PID
// missing read after read: noteUnshown): unlike a process that exited,
// such a process still uses its device. The error says why processes
// could not be attributed at all, such as not seeing the host's PIDs from
// a container.
func (r *Resolver) processes(devices []Device) (out map[uint32]procInfo, hidden map[uint32]bool, same sameProcs, reused map[uint32]procInfo, err error) {
	n := 0
	for _, d := range devices {
		n += len(d.PIDs)
	}
	if r.cfg.Procfs == nil {
		return make(map[uint32]procInfo), nil, sameProcs{}, nil, nil
	}
	exits := r.cfg.Exits
	var pollErr error
	r.mu.Lock()
	if exits != nil {
		// Polled under mu, counted in exitGen: see exactPIDs.
		exited, err := exits.Poll()
		if exited > 0 || err != nil {
			r.exitGen++
			r.exactPIDs = nil
		}
		pollErr = err
	}
	prev, exact := r.procs, r.exactPIDs
	same.exitGen = r.exitGen
	r.round++
	round := r.round
	r.mu.Unlock()
	if pollErr != nil {
		// Nothing is known of this scrape's exits: every cached process
		// is read anew.
		r.logOnceMsg(pollErr, "cannot tell which GPU processes exited; each is read anew")
		prev = nil
	}
	if exact != nil && sameOrder(devices, exact) {
		// The same processes as at the last scrape, none of which has
		// exited (pidfd_open(2): a watched process that "terminates"
		// makes its descriptor readable, which Poll would have found):
		// there is nothing to read, and the last scrape's map is this
		// one's, shared (ResolveRead copies it before writing to it).
		same.pids, same.shared = exact, true
		return prev, nil, same, nil, nil
	}
	out = make(map[uint32]procInfo, n)
	// Each scrape checks the start of at most startChecks cached PIDs
	// that no pidfd watches, every one when there are no more than that,
	// else each one scrape in period.
	unwatched := 0
	for _, p := range prev {
		if !p.info.watched {
			unwatched++
		}
	}
	period := uint64(max(1, (unwatched+startChecks-1)/startChecks))
	var seen, missing int
	var gone []uint32
	var firstErr error
	for _, d := range devices {
		for _, pid := range d.PIDs {
			if _, done := out[pid]; done {
				continue
			}
			seen++
			former, known := prev[pid]
			if known && r.same(pid, former, round, period) {
				out[pid] = former
				continue
			}
			// Watched before it is read: what is read is then of the
			// watched process, or of a later one, once it has exited.
			watched := exits != nil && exits.Watch(pid)
			info, err := r.cfg.Procfs.Process(int(pid))
			switch {
			case errors.Is(err, fs.ErrNotExist):
				missing++
				gone = append(gone, pid)
				continue
			case err != nil:
				firstErr = cmpErr(firstErr, err)
				if hidden == nil {
					hidden = map[uint32]bool{}
				}
				hidden[pid] = true
				continue
			}
			read := &procRead{Info: info, watched: watched}
			if info.Cgroup.PodUID != "" {
				read.pod = unique.Make(podProcess{info.Cgroup.PodUID, info.Cgroup.ContainerID})
			}
			out[pid] = procInfo{info: read}
			if known {
				// Another process than the previous scrape's has this
				// PID now.
				if reused == nil {
					reused = map[uint32]procInfo{}
				}
				reused[pid] = former
			}
		}
	}
	if unshown := r.noteUnshown(gone, round); len(unshown) > 0 {
		if hidden == nil {
			hidden = make(map[uint32]bool, len(unshown))
		}
		for _, pid := range unshown {
			hidden[pid] = true
		}
		firstErr = cmpErr(firstErr, fmt.Errorf("procfs %s does not show GPU process %d (%d in all), which the GPU driver still lists: procfs is mounted with hidepid=2 or invisible (proc(5); its gid= option lets a group see every process), or the driver keeps a context whose process has ended", r.procRoot(), unshown[0], len(unshown)))
	}
	if exits != nil {
		dropped := false
		exits.Retain(func(pid uint32) bool {
			_, ok := out[pid]
			dropped = dropped || !ok
			return ok
		})
		if dropped {
			// A process no longer watched may exit unseen: the
			// processes a concurrent scrape keeps, which may hold it,
			// are not the next scrape's (see exactPIDs).
			r.mu.Lock()
			r.exitGen++
			r.exactPIDs = nil
			same.exitGen = r.exitGen
			r.mu.Unlock()
		}
		if missing == 0 && hidden == nil && firstErr == nil && len(out) > 0 && allWatched(out) {
			same.pids = make([]uint32, 0, n)
			for _, d := range devices {
				same.pids = append(same.pids, d.PIDs...)
			}
		}
	}
	if seen == 0 {
		// Nothing to read, but a procfs that is not there (a wrong
		// --path.procfs) must not pass for one with nothing to show: an
		// AMD or Gaudi node finds its GPU processes in it before they get
		// here.
		if _, err := os.Stat(r.procRoot()); err != nil {
			return out, hidden, same, reused, fmt.Errorf("procfs %s: %w", r.procRoot(), err)
		}
	}
	if seen > 0 && missing == seen {
		// Not that they all exited: procfs is not the host's. Their
		// devices have owners no one can tell, not none.
		if hidden == nil {
			hidden = make(map[uint32]bool, len(gone))
		}
		for _, pid := range gone {
			hidden[pid] = true
		}
		return out, hidden, same, reused, fmt.Errorf("none of the %d GPU processes is in %s: the exporter must see the host's PIDs (hostPID: true)", seen, r.procRoot())
	}
	return out, hidden, same, reused, firstErr
}

// noteUnshown remembers gone, the PIDs procfs did not show at the read of
// round, and returns those it did not show at an earlier read either, one
// that ended before this one began. A process that exited between the
// driver's list and procfs is missing once: the driver lists it no more at
// the next read. One the driver lists read after read while procfs will
// not show it (hidepid, a context the driver keeps after its process) is
// no exit: it still uses its device, for an owner nobody can tell. Reads
// that overlap (a /devices read beside a scrape) may share the driver's
// list, so they do not confirm each other.
func (r *Resolver) noteUnshown(gone []uint32, round uint64) (unshown []uint32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(gone) == 0 {
		r.unshown = nil
		return nil
	}
	next := make(map[uint32]uint64, len(gone))
	for _, pid := range gone {
		if _, dup := next[pid]; dup {
			continue // on several devices
		}
		since, ok := r.unshown[pid]
		if !ok {
			since = r.round
		} else if round > since {
			unshown = append(unshown, pid)
		}
		next[pid] = since
	}
	r.unshown = next
	return unshown
}

// sameProcs is what a scrape's processes tell the next (Resolver.exactPIDs):
// the devices' PIDs in order when the processes read are those and no
// other, each watched for its exit, nil otherwise; and the exit
// generation they were read in.
type sameProcs struct {
	pids    []uint32
	exitGen uint64
	// shared says the processes returned are the last scrape's map
	// itself, which a concurrent scrape may be reading: not to be
	// written to.
	shared bool
}

// sameOrder says whether devices list pids, in that order.
func sameOrder(devices []Device, pids []uint32) bool {
	for _, d := range devices {
		if len(d.PIDs) > len(pids) || !slices.Equal(d.PIDs, pids[:len(d.PIDs)]) {
			return false
		}
		pids = pids[len(d.PIDs):]
	}
	return len(pids) == 0
}

// allWatched says whether every process in procs was watched for its exit
// when it was read.
func allWatched(procs map[uint32]procInfo) bool {
	for _, p := range procs {
		if !p.info.watched {
			return false
		}
	}
	return true
}

// same says whether the process behind pid is still the one cached as p:
// surely when a pidfd has watched it since it was read and it has not
// exited, else by its start time, when this is its scrape to be checked.
func (r *Resolver) same(pid uint32, p procInfo, round, period uint64) bool {
	if p.info.watched {
		return r.cfg.Exits.Watching(pid)
	}
	return !r.restarted(pid, p, round, period)
}

// startChecks bounds the cached PIDs whose start time one scrape reads
// again: a read of /proc/<pid>/stat costs several microseconds, and a node
// running a thousand GPU processes must not pay for all of them at every
// scrape. A PID given to another process between two scrapes keeps the old
// owner for at most period scrapes.
const startChecks = 32

// restarted says whether the process now behind pid, cached as p, is
// another one than p: its turn has come (round, period) and its start time
// differs. A start that cannot be read (the process just exited, a procfs
// without stat) keeps what is cached.
func (r *Resolver) restarted(pid uint32, p procInfo, round, period uint64) bool {
	if p.info.StartTicks == 0 || (uint64(pid)+round)%period != 0 {
		return false
	}
	ticks, err := r.cfg.Procfs.StartTicks(int(pid))
	return err == nil && ticks != p.info.StartTicks
}

func (r *Resolver) procRoot() string {
	if r.cfg.Procfs.Root == "" {
		return "/proc"
	}
	return r.cfg.Procfs.Root
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// unplacedHolds are the devices containers may hold that could not be
// told. vendors are the vendors of a device plugin ID of a shape not
// understood, or of a DRA claim device not identified ("" where the vendor
// is unknown too): any of their devices may be it. devices are those an ID
// naming no device of this node may name all the same, since they lack
// what it names a device by (a Gaudi whose serial hl-smi prints N/A). An
// ID naming no device otherwise (a GPU gone) is none of these devices.
type unplacedHolds struct {
	vendors map[string]bool
	devices map[string]bool
}

// errCDIOff is why DRA claim devices go unidentified when no CDI spec
// directory is configured.
var errCDIOff = errors.New("CDI specs are not read (--kubernetes.cdi-spec-dir is empty)")

// errKubeletEmpty is a kubelet's answer that lists no pod while pods'
// processes use the devices.
var errKubeletEmpty = errors.New("the kubelet lists no pod while GPU processes run in pods (restarting, its pods not listed yet)")

// podProcesses says whether a process of procs runs in a pod's cgroup.
func podProcesses(procs map[uint32]procInfo) bool {
	for _, p := range procs {
		if p.info.Cgroup.PodUID != "" {
			return true
		}
	}
	return false
}

// keepReplicas gives each held time-slicing replica the share it was
// allocated: 1/N of the N replicas the device plugin advertised when the
// hold was first seen, which the container keeps while it holds the
// replica. The plugin's sharing can be reconfigured (more or fewer
// replicas) or the device turn unhealthy (its replicas no longer listed)
// while pods run; the device plugin allocates a container's devices once,
// when it starts (the kubelet's Allocate call), so the pods keep the
// replicas they were given, and with them their shares: a replica held
// under 8 advertised is 1/8 whatever is advertised since. A hold first
// seen of a replica the kubelet does not list was allocated under a
// configuration the exporter never saw: its share is unknown (Replicas 0).
//
// pod-resources names pods, not their UIDs: a pod deleted and created
// again under its name (a StatefulSet's) holding the same replica is told
// from the one before by its UID in the pod metadata, where the metadata
// knows both; where it knows neither, the two are one hold.
//
// allocs is not modified (it is kept for the next scrape, allocations):
// where a count is given, the list returned is a copy.
func (r *Resolver) keepReplicas(allocs []kubernetes.Allocation) []kubernetes.Allocation {
	uids := r.podUIDs(allocs)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.keptIn != nil && sameSlice(allocs, r.keptIn) && slices.Equal(uids, r.keptUIDs) {
		// Its holds are those remembered, each with the count it was
		// given last time.
		return r.keptOut
	}
	held := make(map[replicaHold]heldReplica, len(r.replicas))
	in, copied := allocs, false
	for i := range allocs {
		a := &allocs[i]
		if !a.Device.Shared {
			continue
		}
		h := replicaHold{device: a.Device.Key(), replica: a.Device.Replica, namespace: a.Namespace, pod: a.Pod, container: a.Container}
		uid := ""
		if uids != nil {
			uid = uids[i]
		}
		was, seen := r.replicas[h]
		if seen && was.uid != "" && uid != "" && was.uid != uid {
			seen = false // another pod of the same name
		}
		now := heldReplica{n: a.Replicas, uid: uid}
		if seen {
			now.n = was.n
			if now.uid == "" {
				now.uid = was.uid
			}
		}
		if now.n != a.Replicas {
			if !copied {
				allocs, copied = slices.Clone(allocs), true
				a = &allocs[i]
			}
			a.Replicas = now.n
		}
		if now.n > 0 {
			held[h] = now
		}
	}
	r.replicas, r.keptIn, r.keptUIDs, r.keptOut = held, in, uids, allocs
	return allocs
}

// podUIDs is, for each shared allocation of allocs, its pod's UID as the
// pod metadata has it ("" where it has none, and for the others).
func (r *Resolver) podUIDs(allocs []kubernetes.Allocation) []string {
	md := r.cfg.Metadata
	if md == nil || md.Name() == kubernetes.SourceNone {
		return nil
	}
	var uids []string
	for i, a := range allocs {
		if !a.Device.Shared {
			continue
		}
		if meta, ok := md.Pod(a.Namespace, a.Pod); ok && meta.UID != "" {
			if uids == nil {
				uids = make([]string, len(allocs))
			}
			uids[i] = meta.UID
		}
	}
	return uids
}

// replicaHold is one container's hold of one time-slicing replica.
type replicaHold struct {
	device                    string // kubernetes.DeviceRef.Key
	replica                   int
	namespace, pod, container string
}

// heldReplica is what is remembered of a hold: the replicas advertised
// when it was first seen, and its pod's UID where known.
type heldReplica struct {
	n   int
	uid string
}

// allocations is kubernetes.Allocations of the kubelet's answer, kept for
// as long as the answer is the same slices: a busy node's kubelet answers
// the same at nearly every scrape (its Client then returns the slices it
// returned before), and working the allocations out again was a tenth of
// a scrape. No side modifies a slice once returned (Kubelet).
func (r *Resolver) allocations(pods []kubernetes.PodResources, allocatable []kubernetes.ResourceDevices) ([]kubernetes.Allocation, []error) {
	r.allocsMu.Lock()
	defer r.allocsMu.Unlock()
	m := &r.allocs
	if m.valid && sameSlice(m.pods, pods) && sameSlice(m.allocatable, allocatable) {
		return m.out, m.errs
	}
	out, errs := kubernetes.Allocations(pods, allocatable, r.cfg.Resources)
	*m = allocationsMemo{pods: pods, allocatable: allocatable, out: out, errs: errs, valid: true}
	return out, errs
}

// allocationsMemo is the last kubernetes.Allocations and its arguments.
type allocationsMemo struct {
	pods        []kubernetes.PodResources
	allocatable []kubernetes.ResourceDevices
	out         []kubernetes.Allocation
	errs        []error
	valid       bool
}

// sameSlice says whether a and b are the same elements of the same array.
// Two empty slices are the same: nothing is in either.
func sameSlice[T any](a, b []T) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// mayHold says whether d may be such a device.
func (u unplacedHolds) mayHold(d Device) bool {
	return u.vendors[""] || u.vendors[d.Vendor] || u.devices[d.UUID]
}

func (u *unplacedHolds) addVendor(vendor string) {
	if u.vendors == nil {
		u.vendors = map[string]bool{}
	}
	u.vendors[vendor] = true
}

func (u *unplacedHolds) addDevices(uuids []string) {
	for _, uuid := range uuids {
		if u.devices == nil {
			u.devices = map[string]bool{}
		}
		u.devices[uuid] = true
	}
}

// engineShare is which engines an exporter serves: Result's EnginePods,
// EngineSplitPods and EngineOthers. Read-only once made.
type engineShare struct {
	serve, split map[string]bool
	others       bool
}

// vendorOrder is the order in which the vendors' exporters of one node
// take the engines that several of them could (enginePods).
var vendorOrder = []string{kubernetes.VendorNVIDIA, kubernetes.VendorAMD, kubernetes.VendorHabana}

// enginePods says which pods' inference engines this exporter serves where
// the node's devices are split between exporters (Config.VendorExporters:
// the chart's DaemonSet per vendor, two of which run on a node labelled
// for two vendors, both discovering every pod's engine), so that each
// engine is served once. A pod's engine is served by the exporter of the
// first vendor, in vendorOrder, whose devices it holds and which has an
// exporter here; a pod holding none of those (no accelerator, or another
// vendor's) by the exporter of the first vendor with an exporter that the
// kubelet lists allocatable devices of on the node; where none is, by
// every exporter, rather than by none. Nil when this exporter is the
// node's only one. split lists the pods that hold devices of two or more
// vendors with an exporter here: each of those exporters names the pod's
// devices it reads for the engine (collector's xpu_inference_device_info).
// others says whether this exporter serves the engines that are no listed
// pod's, by the rule for a pod that holds no device: every exporter of the
// node is given the same configured targets (the chart's extraArgs), and
// each served them, counting their tokens once per exporter (found by
// probing: probe22-mixed D1).
func (r *Resolver) enginePods(pods []kubernetes.PodResources, allocatable []kubernetes.ResourceDevices) (serve, split map[string]bool, others bool) {
	served := r.served.Load()
	if served == nil || !slices.ContainsFunc(r.cfg.VendorExporters, func(v string) bool { return !(*served)[v] }) {
		return nil, nil, true
	}
	hasExporter := func(v string) bool { return slices.Contains(r.cfg.VendorExporters, v) }
	onNode := ""
	for _, v := range vendorOrder {
		if hasExporter(v) && slices.ContainsFunc(allocatable, func(rd kubernetes.ResourceDevices) bool {
			return len(rd.IDs) > 0 && r.cfg.Resources.Match(rd.Resource) && kubernetes.ResourceVendor(rd.Resource) == v
		}) {
			onNode = v
			break
		}
	}
	out := make(map[string]bool, len(pods))
	for _, p := range pods {
		var holds []string
		for _, c := range p.Containers {
			for _, rd := range c.Devices {
				if len(rd.IDs) > 0 && r.cfg.Resources.Match(rd.Resource) {
					holds = append(holds, kubernetes.ResourceVendor(rd.Resource))
				}
			}
			for _, cd := range c.Claims {
				if slices.Contains(r.cfg.DRADrivers, cd.Driver) {
					holds = append(holds, kubernetes.DriverVendor(cd.Driver))
				}
			}
		}
		lead := onNode
		exporters := 0
		for _, v := range vendorOrder {
			if hasExporter(v) && slices.Contains(holds, v) {
				if exporters == 0 {
					lead = v
				}
				exporters++
			}
		}
		key := p.Namespace + "/" + p.Name
		out[key] = lead == "" || (*served)[lead]
		if exporters > 1 {
			if split == nil {
				split = map[string]bool{}
			}
			split[key] = true
		}
	}
	return out, split, onNode == "" || (*served)[onNode]
}

// kubernetesClaims maps each device to the containers the kubelet allocated
// it to, by device plugins and by DRA claims. It counts what it could not
// identify in res, and returns the vendors of what it could not place, and
// the state of the CDI specs when there were DRA claims to identify and a
// CDI source is configured.
func (r *Resolver) kubernetesClaims(ctx context.Context, devices []Device, unread map[string]bool, podProcs bool, res *Result) (map[string][]Claim, unplacedHolds, map[string]bool, *Source, error) {
	pods, err, allocatable, allocErr := r.cfg.Kubelet.ListAllocatable(ctx)
	if err == nil && len(pods) == 0 && podProcs {
		// A kubelet that lists no pod at all while GPU processes run in
		// pods' cgroups has not listed them yet (restarted, its pod
		// manager not yet filled), rather than every pod having gone:
		// the devices' owners are unknown, not none (found by probing:
		// probe14-k8s D5).
		err = errKubeletEmpty
	}
	if err != nil {
		// The pods the kubelet last listed run on while it is down (a
		// restart in a node upgrade takes minutes): without it, none starts
		// or stops. So this exporter keeps to the engines it served, where
		// every exporter of the node served every engine, counting the
		// tokens once per exporter for the outage (review22 F4).
		if last := r.engines.Load(); last != nil {
			res.EnginePods, res.EngineSplitPods, res.EngineOthers = last.serve, last.split, last.others
		}
		return nil, unplacedHolds{}, nil, nil, err
	}
	pods = r.withoutEnded(pods, res)
	// Allocatable lists every replica a device plugin advertises, which is
	// what a replica's share depends on; without it the share is unknown.
	allocs, idErrs := r.allocations(pods, allocatable)
	allocs = r.keepReplicas(allocs)
	res.EnginePods, res.EngineSplitPods, res.EngineOthers = r.enginePods(pods, allocatable)
	r.engines.Store(&engineShare{serve: res.EnginePods, split: res.EngineSplitPods, others: res.EngineOthers})
	var shareUnknown map[string]bool // by device UUID
	var unplaced unplacedHolds
	for _, e := range idErrs {
		var de *kubernetes.DeviceIDError
		isID := errors.As(e, &de)
		if isID && r.othersVendor(kubernetes.ResourceVendor(de.Resource)) {
			continue
		}
		r.logOnce(e)
		res.UnknownDeviceIDs++
		if isID && de.Held {
			unplaced.addVendor(kubernetes.ResourceVendor(de.Resource))
		}
	}
	byRef, unnamed := indexDevices(devices)
	// Each device's claims are sized before they are filled: a GPU shared
	// by hundreds of pods would otherwise grow its list of large Claims
	// many times over at every scrape.
	uuids := make([]string, len(allocs))
	perDevice := make(map[string]int, len(devices))
	for i, a := range allocs {
		if uuid, ok := byRef(a.Device); ok {
			uuids[i] = uuid
			perDevice[uuid]++
		}
	}
	claims := make(map[string][]Claim, len(perDevice))
	for uuid, n := range perDevice {
		claims[uuid] = make([]Claim, 0, n)
	}
	// at finds an owner's claim on a device without comparing it with every
	// other claim: hundreds of pods may share one GPU.
	type claimKey struct{ uuid, owner string }
	at := make(map[claimKey]int, len(allocs))
	add := func(uuid string, owner Owner, share float64) {
		k := claimKey{uuid, owner.Key()}
		if i, ok := at[k]; ok {
			// One container holding several replicas of one device.
			claims[uuid][i].Share += share
			return
		}
		at[k] = len(claims[uuid])
		claims[uuid] = append(claims[uuid], Claim{Owner: owner, Share: share})
	}
	// One replica of a shared device listed in several containers (as the
	// kubelet reuses an init container's device) is one replica: its
	// holders split its 1/N, as holders of one whole device split it
	// (scaleShares), rather than each being billed 1/N.
	type replica struct{ uuid, id string }
	var holders map[replica]int
	for i, a := range allocs {
		if share, _ := a.Share(); uuids[i] != "" && share < 1 {
			if holders == nil {
				holders = map[replica]int{}
			}
			holders[replica{uuids[i], a.DeviceID}]++
		}
	}
	for i, a := range allocs {
		uuid := uuids[i]
		if v := kubernetes.ResourceVendor(a.Resource); uuid == "" && (r.othersVendor(v) || unread[v]) {
			continue
		}
		if uuid == "" {
			// Well formed, but no device of this node: a GPU that is gone
			// or was never identified, the NVIDIA collector finding no
			// driver; or one of those that lack what it names a device by.
			unplaced.addDevices(unnamed(a.Device))
			res.UnknownDeviceIDs++
			r.logOnceMsg(fmt.Errorf("%s %q (pod %s/%s)", a.Resource, a.DeviceID, a.Namespace, a.Pod), "device plugin ID names no device of this node; that ID is not attributed (the container's other devices are)")
			continue
		}
		share, known := a.Share()
		if !known {
			// Its holders' shares, and so who holds how much of it, are
			// unknown: its owners are unknown.
			if shareUnknown == nil {
				shareUnknown = map[string]bool{}
			}
			// Logged once per device, made once per scrape at most.
			if !shareUnknown[uuid] && allocErr == nil {
				r.logOnceMsg(fmt.Errorf("%s %q", a.Resource, a.Device.Key()), "a time-slicing replica is held of a device whose replicas the device plugin does not advertise (sharing reconfigured since before this exporter started, or the device unhealthy): its holders' shares are unknown, and so are the device's owners")
			}
			shareUnknown[uuid] = true
		}
		if n := holders[replica{uuid, a.DeviceID}]; n > 1 {
			share /= float64(n)
		}
		add(uuid, r.podOwner(a.Namespace, a.Pod, a.Container), share)
	}
	cdi := r.draClaims(ctx, pods, byRef, unnamed, add, &unplaced, unread, res)
	if allocErr != nil {
		return claims, unplaced, shareUnknown, cdi, fmt.Errorf("allocatable devices (shares of shared GPUs unknown): %w", allocErr)
	}
	return claims, unplaced, shareUnknown, cdi, nil
}

// withoutEnded leaves out the pods that the metadata source says have
// ended (Succeeded, Failed), counting them in res. Kubelets have listed
// such a pod's devices in pod-resources List after handing them to another
// pod (kubernetes/kubernetes#119423: "The
// internal managers reassign resources assigned to pods in terminal
// phase"): a finished Job's pod, kept until it is deleted, would be an
// owner of an idle GPU, or share a busy one with the pod that has it now.
// pods is not modified: the kubelet client may hold it.
func (r *Resolver) withoutEnded(pods []kubernetes.PodResources, res *Result) []kubernetes.PodResources {
	if r.cfg.Metadata == nil {
		return pods
	}
	var out []kubernetes.PodResources // made at the first ended pod
	for i, p := range pods {
		meta, ok := r.cfg.Metadata.Pod(p.Namespace, p.Name)
		switch {
		case ok && meta.Ended:
			if out == nil {
				out = append(make([]kubernetes.PodResources, 0, len(pods)-1), pods[:i]...)
			}
			// The kubelet lists every pod, a finished CPU-only Job's too:
			// counted are those it lists with devices, the case of
			// kubernetes#119423 (probe I, PI6).
			if slices.ContainsFunc(p.Containers, func(c kubernetes.ContainerResources) bool { return len(c.Devices) > 0 || len(c.Claims) > 0 }) {
				res.EndedPods++
			}
		case out != nil:
			out = append(out, p)
		}
	}
	if out == nil {
		return pods
	}
	return out
}

// draClaims adds the devices held through DRA claims. The CDI specs are
// read only when some container has a claim of an accelerator driver.
func (r *Resolver) draClaims(ctx context.Context, pods []kubernetes.PodResources, byRef func(kubernetes.DeviceRef) (string, bool), unnamed func(kubernetes.DeviceRef) []string, add func(string, Owner, float64), unplaced *unplacedHolds, unread map[string]bool, res *Result) *Source {
	if !slices.ContainsFunc(pods, func(p kubernetes.PodResources) bool {
		return slices.ContainsFunc(p.Containers, func(c kubernetes.ContainerResources) bool {
			return slices.ContainsFunc(c.Claims, func(cd kubernetes.ClaimDevice) bool { return slices.Contains(r.cfg.DRADrivers, cd.Driver) })
		})
	}) {
		r.noteUnresolvedClaims(nil)
		return nil
	}
	var idx kubernetes.CDIIndex
	var src *Source
	if r.cfg.CDI != nil {
		var problems []error
		var err error
		idx, problems, err = r.cfg.CDI.Load()
		if err == nil {
			err = errors.Join(problems...)
		}
		r.logCDIState(err)
		src = &Source{Name: SourceCDI, Err: err}
	}
	var sliceIdx kubernetes.ResourceSliceIndex
	if r.cfg.ResourceSlices != nil {
		var err error
		sliceIdx, err = r.cfg.ResourceSlices.Index()
		res.Sources = append(res.Sources, Source{Name: kubernetes.SourceResourceSlices, Err: err})
	}
	if r.cfg.ClaimAccess != nil {
		var err error
		pods, err = r.withoutAdminAccess(ctx, pods)
		if err != nil {
			r.logOnceMsg(err, "cannot tell whether a DRA claim has admin access (RBAC: get resourceclaims); its devices are taken for allocations")
		}
	}
	allocs, unresolved := kubernetes.ClaimAllocations(pods, idx, r.cfg.DRADrivers, sliceIdx)
	unresolved = slices.DeleteFunc(unresolved, func(u kubernetes.UnresolvedClaimDevice) bool {
		return r.othersVendor(kubernetes.DriverVendor(u.Claim.Driver))
	})
	now := make(map[string]bool, len(unresolved))
	for _, u := range unresolved {
		now[u.Err.Error()] = true
	}
	r.noteUnresolvedClaims(now)
	for _, u := range unresolved {
		if r.cfg.CDI == nil {
			// Off by choice: one line says so, rather than one per
			// device blaming specs that were never to be read.
			r.logOnceMsg(errCDIOff, "DRA claim devices not identified; they are not attributed (the containers' other devices are)")
		} else {
			r.logOnceMsg(u.Err, "DRA claim device not identified; that device is not attributed (the container's other devices are)")
		}
		unplaced.addVendor(kubernetes.DriverVendor(u.Claim.Driver))
	}
	res.UnresolvedClaimDevices = len(unresolved)
	for _, a := range allocs {
		uuid, ok := byRef(a.Device)
		if v := kubernetes.DriverVendor(a.Claim.Driver); !ok && (r.othersVendor(v) || unread[v]) {
			// Another exporter's, or a vendor whose collector failed:
			// its failure says why no device is served (as for device
			// plugin IDs, review13 R13-3).
			continue
		}
		if !ok {
			unplaced.addDevices(unnamed(a.Device))
			res.UnresolvedClaimDevices++
			r.logOnceMsg(fmt.Errorf("claim %s/%s device %s: its CDI spec names %s, which is no device of this node",
				a.Claim.ClaimNamespace, a.Claim.ClaimName, a.Claim.Device, a.Device.ID), "DRA claim device not identified; that device is not attributed (the container's other devices are)")
			continue
		}
		owner := r.podOwner(a.Namespace, a.Pod, a.Container)
		owner.ClaimNamespace, owner.Claim = a.Claim.ClaimNamespace, a.Claim.ClaimName
		share, _ := a.Share()
		add(uuid, owner, share)
	}
	return src
}

// withoutAdminAccess leaves out of pods the DRA claim devices allocated
// with admin access (a monitoring DaemonSet's, KEP-5018): they are no
// allocation, and counted as one they billed the monitor for every GPU no
// one else held and, as a second claim on a held one, hid its owner's
// allocation (probe14-k8s D1). pods is not modified; the first error is
// returned, and that claim's devices kept.
func (r *Resolver) withoutAdminAccess(ctx context.Context, pods []kubernetes.PodResources) ([]kubernetes.PodResources, error) {
	var firstErr error
	asked := map[string]map[string]bool{}
	admin := func(cd kubernetes.ClaimDevice) bool {
		if !slices.Contains(r.cfg.DRADrivers, cd.Driver) {
			return false
		}
		key := cd.ClaimNamespace + "/" + cd.ClaimName
		devs, ok := asked[key]
		if !ok {
			var err error
			devs, err = r.cfg.ClaimAccess.AdminDevices(ctx, cd.ClaimNamespace, cd.ClaimName)
			if err != nil {
				firstErr, devs = cmpErr(firstErr, err), nil
			}
			asked[key] = devs
		}
		return devs[kubernetes.AdminKey(cd)]
	}
	var out []kubernetes.PodResources // made at the first admin claim
	for i, p := range pods {
		cloned := false
		for j, c := range p.Containers {
			if !slices.ContainsFunc(c.Claims, admin) {
				continue
			}
			if out == nil {
				out = slices.Clone(pods)
			}
			if !cloned {
				out[i].Containers, cloned = slices.Clone(p.Containers), true
			}
			out[i].Containers[j].Claims = slices.DeleteFunc(slices.Clone(c.Claims), admin)
		}
	}
	if out == nil {
		return pods, firstErr
	}
	return out, firstErr
}

// logCDIState logs the CDI specs' problems once per change.
func (r *Resolver) logCDIState(err error) {
	state := ""
	if err != nil {
		state = err.Error()
	}
	r.mu.Lock()
	changed := state != r.cdiState
	r.cdiState = state
	r.mu.Unlock()
	switch {
	case !changed:
	case err != nil:
		r.cfg.Logger.Warn("CDI specs not fully readable; DRA-allocated devices they describe are not attributed", "err", err)
	default:
		r.cfg.Logger.Info("CDI specs readable again")
	}
}

func (r *Resolver) logOnce(err error) {
	r.logOnceMsg(err, "device plugin ID not understood; that ID is not attributed (the container's other devices are)")
}

// logOnceMsg logs each distinct error once, up to a bound that keeps a
// hostile kubelet from growing the set without end.
// noteUnresolvedClaims forgets, as told, the claim devices that were not
// identified at the previous scrape and are now (or are gone), so that
// failing again is told again; now holds this scrape's failures.
func (r *Resolver) noteUnresolvedClaims(now map[string]bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k := range r.unresolvedClaims {
		if !now[k] {
			delete(r.badIDs, k)
			delete(r.unresolvedClaims, k)
		}
	}
	for k := range now {
		if r.unresolvedClaims == nil {
			r.unresolvedClaims = map[string]bool{}
		}
		r.unresolvedClaims[k] = true
	}
}

// maxLoggedOnce bounds the messages logOnceMsg remembers as told.
const maxLoggedOnce = 1000

func (r *Resolver) logOnceMsg(err error, msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.badIDs[err.Error()] {
		return
	}
	if len(r.badIDs) >= maxLoggedOnce {
		// Forgotten all at once rather than kept full: a full set silenced
		// every later message of every kind (churning DRA claims name a
		// new claim in each), while a forgotten one is at worst told again.
		clear(r.badIDs)
	}
	r.badIDs[err.Error()] = true
	r.cfg.Logger.Warn(msg, "err", err)
}

// indexDevices returns a lookup from a device plugin's reference to the
// UUID of the device it names. Indexes and serials are keyed with the
// vendor: on a node with NVIDIA and Gaudi devices, NVIDIA's index "3" and
// Gaudi's "hl3" name different devices. A PCI address names one device
// whatever the vendor, but only a device of the resource's vendor: an
// amd.com/gpu ID holding an NVIDIA GPU's address is a plugin's mistake,
// not an allocation of that GPU.
//
// unnamed lists, for a reference that names no device, the devices it may
// name all the same: those of its vendor (any, where it has none) that
// lack what it names a device by, a serial number or PCI address the
// vendor's tool did not give, or a GKE device name whose minor is unknown.
func indexDevices(devices []Device) (byRef func(kubernetes.DeviceRef) (string, bool), unnamed func(kubernetes.DeviceRef) []string) {
	type byVendor struct{ uuid, vendor string }
	byUUID := map[string]string{}
	byBus := map[string]byVendor{}
	byIndex := map[string]string{}
	byMIG := map[string]string{}
	bySerial := map[string]string{}
	byPartition := map[string]byVendor{}
	byName := map[string]string{}
	for _, d := range devices {
		if d.DeviceName != "" {
			// One name on two devices (a misread) names neither.
			if _, dup := byName[d.DeviceName]; dup {
				byName[d.DeviceName] = ""
			} else {
				byName[d.DeviceName] = d.UUID
			}
		}
		byUUID[foldUUID(d.UUID)] = d.UUID
		if d.Partition != "" {
			// A PCI address in either form; an amdgpu_xcp_<n> name is
			// left as it is (normalizeBusID only lower-cases it).
			byPartition[normalizeBusID(d.Partition)] = byVendor{d.UUID, d.Vendor}
		}
		if d.ParentUUID == "" {
			if d.PCIBusID != "" {
				byBus[normalizeBusID(d.PCIBusID)] = byVendor{d.UUID, d.Vendor}
			}
			if d.Serial != "" {
				bySerial[d.Vendor+"/"+d.Serial] = d.UUID
			}
			byIndex[d.Vendor+"/"+strconv.Itoa(d.Index)] = d.UUID
		} else if d.MIGIndex >= 0 {
			byIndex[d.Vendor+"/"+strconv.Itoa(d.Index)+":"+strconv.Itoa(d.MIGIndex)] = d.UUID
		}
		if d.ParentUUID != "" && d.MIGInstance >= 0 {
			// Compute instances sharing a GPU instance cannot be told apart
			// by it: such a name matches none of them.
			key := foldUUID(d.ParentUUID) + "/" + strconv.Itoa(d.MIGInstance)
			if _, dup := byMIG[key]; dup {
				byMIG[key] = ""
			} else {
				byMIG[key] = d.UUID
			}
		}
	}
	// A reference of a resource no vendor is known for (a custom pattern)
	// may name any vendor's device.
	ofVendor := func(e byVendor, found bool, vendor string) (string, bool) {
		if !found || vendor != "" && e.vendor != vendor {
			return "", false
		}
		return e.uuid, true
	}
	unnamed = func(ref kubernetes.DeviceRef) []string {
		var lacks func(Device) bool
		switch {
		case ref.Serial != "":
			// A serial that matches only without regard to case may be
			// this board's, written by another tool, or another board's:
			// nothing says two boards' serials cannot differ only in
			// case. It names no board, and may name this one.
			lacks = func(d Device) bool { return d.Serial == "" || strings.EqualFold(d.Serial, ref.Serial) }
		case ref.PCIBusID != "":
			lacks = func(d Device) bool { return d.PCIBusID == "" }
		case ref.DeviceName != "":
			// "nvidia<minor>/gi<id>" names a MIG GPU instance <id>, of a
			// GPU whose minor may be the unknown one.
			_, gi, instance := strings.Cut(ref.DeviceName, "/gi")
			lacks = func(d Device) bool {
				return d.DeviceName == "" && (d.ParentUUID != "") == instance && (!instance || strconv.Itoa(d.MIGInstance) == gi)
			}
		default:
			return nil
		}
		var out []string
		for _, d := range devices {
			if (ref.DeviceName != "" || d.ParentUUID == "") && (ref.Vendor == "" || d.Vendor == ref.Vendor) && lacks(d) {
				out = append(out, d.UUID)
			}
		}
		return out
	}
	byRef = func(ref kubernetes.DeviceRef) (string, bool) {
		var uuid string
		var ok bool
		switch {
		case ref.UUID != "":
			uuid, ok = byUUID[foldUUID(ref.UUID)]
		case ref.PCIBusID != "":
			bus := normalizeBusID(ref.PCIBusID)
			e, found := byPartition[bus]
			if !found {
				e, found = byBus[bus]
			}
			uuid, ok = ofVendor(e, found, ref.Vendor)
		case ref.Partition != "":
			e, found := byPartition[normalizeBusID(ref.Partition)]
			uuid, ok = ofVendor(e, found, ref.Vendor)
		case ref.Index != "":
			uuid, ok = byIndex[ref.Vendor+"/"+ref.Index]
		case ref.Serial != "":
			uuid, ok = bySerial[ref.Vendor+"/"+ref.Serial]
		case ref.DeviceName != "":
			uuid, ok = byName[ref.DeviceName]
		case ref.MIGParentUUID != "":
			uuid, ok = byMIG[foldUUID(ref.MIGParentUUID)+"/"+strconv.Itoa(ref.MIGGPUInstance)]
		}
		return uuid, ok && uuid != ""
	}
	return byRef, unnamed
}

// foldUUID is a GPU or MIG UUID in lower case: its digits are hexadecimal,
// which NVML prints in lower case and a device plugin or CDI spec may not.
func foldUUID(uuid string) string {
	return strings.ToLower(uuid)
}

// normalizeBusID turns NVML's "00000000:3B:00.0" and sysfs' "0000:3b:00.0"
// into one form; an ID that is no address (a partition's amdgpu_xcp_<n>)
// stays itself, in lower case.
func normalizeBusID(id string) string {
	if addr := pciaddr.Canonical(id); addr != "" {
		return addr
	}
	return strings.ToLower(id)
}

// slurmState is what Slurm said in one Resolve.
type slurmState struct {
	// jobs holds the metadata of the jobs of the node and of its processes.
	jobs map[string]slurm.Job
	// unknown are the job IDs Slurm answered it knows no job by ("Invalid
	// job id specified"): the job ended longer ago than MinJobAge, or the
	// ID, read from an environment, names none.
	unknown map[string]bool
	// gres lists the jobs whose GRES hold each GRES index of this node.
	gres map[int][]gresHold
	// holdersUnseen says a job may hold GPUs of this node that gres does
	// not show: the record of a job squeue lists here could not be read.
	// A GPU no job is seen to hold whole then has unknown owners.
	holdersUnseen bool
	// environUnread are the processes whose job only their environment
	// could tell, which could not be read; environErr says why. Their
	// jobs are unknown, not none.
	environUnread map[uint32]bool
	environErr    error
	// refused counts the jobs whose record Slurm gave but that could not
	// be used, by reason (Refused*): logged once each, counted here so
	// that an alert can tell why GPUs have unknown owners.
	refused map[string]int
	// nodeGPUs is how many GPUs Slurm numbers on the node (GRES indices),
	// where nodeGPUsKnown.
	nodeGPUs      int
	nodeGPUsKnown bool
}

// unseenHolder says whether a device may be held by a job the state does
// not show: some job's GRES are unknown, and no job is seen to hold the
// device whole (GPUs are not handed out twice; a shared GRES' other parts
// may be that job's).
func (sl slurmState) unseenHolder(d Device) bool {
	return sl.holdersUnseen && d.GRESIndex >= 0 &&
		!slices.ContainsFunc(sl.gres[d.GRESIndex], func(h gresHold) bool { return h.share == 1 })
}

// mayHoldUnplaced says whether a device whose GRES index could not be
// worked out may be a job's: jobs hold GRES on the node, seen or hidden.
func (sl slurmState) mayHoldUnplaced(d Device) bool {
	return d.GRESUnplaced && (len(sl.gres) > 0 || sl.holdersUnseen)
}

// gresNamingNoDevice counts the GRES indices running jobs hold on this node
// that no device here has, one for each job holding one, and logs each
// once, naming the job and the index: a GPU the vendor's library does not
// list (fallen off the bus, never identified). Such a job's billed share
// misses that GPU, as a pod's misses the device a device-plugin ID names
// that is not here (UnknownDeviceIDs); past the last GPU, no index is
// trusted (gresShort). Not counted where an index may name a device
// read here after all: one whose GRES index could not be worked out, or
// none, the vendors whose devices could not be read this time (unread,
// which their collector's failure tells), or no device read at all: the
// caller asks only where gresHighest gives highest.
func (r *Resolver) gresNamingNoDevice(devices []Device, sl slurmState, highest int) int {
	if len(sl.gres) == 0 {
		return 0
	}
	placed := make(map[int]bool, highest+1)
	for _, d := range devices {
		if d.GRESIndex >= 0 {
			placed[d.GRESIndex] = true
		}
	}
	n := 0
	for idx, holds := range sl.gres {
		if placed[idx] {
			continue
		}
		for _, h := range holds {
			n++
			r.logOnceMsg(fmt.Errorf("job %s holds GRES index %d, which no GPU read on this node has", h.job, idx),
				"Slurm job's GRES index names no GPU of this node (a GPU the vendor's library does not list, or one lost before the exporter started); that index is not attributed to the job")
		}
	}
	return n
}

// gresHighest is the highest GRES index of the devices, which are
// numbered to it; ok is false where it tells nothing: some device's index
// is unknown, a vendor's devices could not be read, or none is placed.
func gresHighest(devices []Device, unread map[string]bool) (highest int, ok bool) {
	if len(unread) > 0 {
		return -1, false
	}
	highest = -1
	for _, d := range devices {
		if d.GRESUnplaced {
			return -1, false
		}
		highest = max(highest, d.GRESIndex)
	}
	return highest, highest >= 0
}

// gresShort says whether Slurm numbers more GPUs on the node than the
// devices read here are numbered to: its gres/gpu count (scontrol show
// node) is larger, or a job holds an index past the last. A GPU it
// numbered is then not read here, and wherever it was in the order (not
// known), every index from its place on names its neighbour (probe I,
// PI2; probe J, PJ2: jobs billed their neighbours' GPUs). An index in a
// gap between devices' (hl-smi's, of which a device hl-smi does not list
// keeps its own) names that device alone and is no such sign.
func (r *Resolver) gresShort(sl slurmState, highest int) bool {
	held := -1
	for idx := range sl.gres {
		held = max(held, idx)
	}
	var err error
	switch {
	case sl.nodeGPUsKnown && sl.nodeGPUs > highest+1:
		err = fmt.Errorf("gres/gpu count %d in scontrol show node, %d GPUs read here", sl.nodeGPUs, highest+1)
	case held > highest:
		err = fmt.Errorf("GRES index %d held by a job, %d GPUs read here", held, highest+1)
	default:
		return false
	}
	r.logOnceMsg(err, "Slurm numbered more GPUs on this node than are read here (a GPU the vendor's library does not list, lost before the exporter started), so which GRES index names which GPU is not known; no GPU is attributed by GRES index while it lasts (owners unknown where jobs hold GRES; processes still name their jobs)")
	return true
}

// withoutGRESPlaces returns a copy of devices none of which has a GRES
// index: a job holds an index no device has, so Slurm numbered a GPU that
// is not read here, and every index from that GPU's place on names the
// next GPU (probe I, PI1, PI2: jobs billed their neighbours' GPUs). Which
// place that is cannot be told, so no index is trusted: a device jobs may
// hold is GRESUnplaced, its owners unknown (slurmState.mayHoldUnplaced).
func withoutGRESPlaces(devices []Device) []Device {
	out := slices.Clone(devices)
	for i := range out {
		if out[i].GRESIndex >= 0 {
			out[i].GRESIndex, out[i].GRESUnplaced = -1, true
		}
	}
	return out
}

// gresHold is a job's hold on a GPU through GRES: the whole GPU (share 1),
// or through a shared GRES (gres/shard, gres/mps) the part Slurm says it
// holds, 0 where Slurm does not say (before 23.11.2).
type gresHold struct {
	job   string
	share float64
}

// jobsSeenSince is the latest time a process's job that list does not
// name was first seen; zero when list names every process's job.
func jobsSeenSince(list []slurm.RunningJob, procs map[uint32]procInfo) time.Time {
	listed := make(map[string]bool, len(list))
	for _, j := range list {
		listed[j.ID] = true
	}
	var since time.Time
	for _, p := range procs {
		if p.slurm != nil && p.slurm.job != "" && !listed[p.slurm.job] && p.slurm.jobSeen.After(since) {
			since = p.slurm.jobSeen
		}
	}
	return since
}

// outsideSystemd says a process in no unit is where systemd would not have
// put it on a node systemd runs, where slurmd runs in a unit: a container
// runtime's cgroup with the cgroupfs driver (/docker/<id>), or someone's
// own. On a v1 or hybrid node systemd's own hierarchy says so (a path
// there other than its root); on a v2 node the unified path does, where
// PID 1 is systemd. A root cgroup is not: processes started outside any
// unit on a node without systemd are there (fixtures/slurm/22.05/linuxproc,
// name=systemd at "/").
func (r *Resolver) outsideSystemd(cg process.Cgroup) bool {
	switch {
	case cg.Unit != "":
		return false
	case cg.SystemdPath != "":
		return cg.SystemdPath != "/"
	default:
		return cg.Path != "/" && r.nodeRunsSystemd()
	}
}

// nodeRunsSystemd says the node's init, PID 1 in procfs, is systemd. It is
// read once: init does not change. Where PID 1 cannot be read (procfs not
// the host's) it says false, and the process's own cgroup file is the only
// evidence.
func (r *Resolver) nodeRunsSystemd() bool {
	r.initOnce.Do(func() {
		if info, err := r.cfg.Procfs.Process(1); err == nil {
			r.initSystemd = info.Comm == "systemd"
		}
	})
	return r.initSystemd
}

// slurmJobs finds the Slurm job of every process and the jobs' metadata,
// and which jobs hold which GPU of this node through GRES. Slurm's answer
// that it knows no such job is an answer, not a failure of the source.
func (r *Resolver) slurmJobs(ctx context.Context, procs map[uint32]procInfo) (slurmState, error) {
	c := r.cfg.Slurm
	var errs []error
	var listed map[int]string // PID → job, from slurmd, asked only if needed
	// twoJobs are the PIDs slurmd lists under two jobs, naming them: a
	// task that exited and whose PID another job's task took between
	// scontrol's questions to their steps' slurmstepds.
	var twoJobs map[int]string
	listFailed := false
	stepsElsewhere := false // listpids found no step while squeue lists jobs here
	var environUnread map[uint32]bool
	var environErr error
	now := r.now()
	ids := map[string]bool{}
	for pid, p := range procs {
		cg := p.info.Cgroup
		var old slurmProc
		if p.slurm != nil {
			old = *p.slurm
		}
		sp := old
		job := cg.SlurmJobID
		// askSlurmd asks slurmd which job's step the process is in (one
		// listpids a scrape for all processes), whose answer the job
		// cannot forge and which stands for the process's life; a "none"
		// is asked again after slurmdRecheck. container says the process
		// is in a container's cgroup (outsideSystemd), where a slurmd of
		// the container's own may run its steps.
		askSlurmd := func(container bool) string {
			switch {
			case sp.slurmdJob:
				return sp.job
			case !sp.askedSlurmd.IsZero() && now.Sub(sp.askedSlurmd) < slurmdRecheck:
				return ""
			}
			if listed == nil {
				listed = map[int]string{}
				steps, err := c.ListPIDs(ctx)
				switch {
				case errors.Is(err, slurm.ErrNoSteps):
					// Where squeue lists jobs running on this node (or
					// cannot say), the slurmd running their steps may not
					// be the one scontrol asks: Slurm in a container, whose
					// spool directory is its own (found by probe17-slurm: a
					// container's slurmstepd's task was taken for no task,
					// its usage unattributed). That is no answer for a
					// process in a container's cgroup; elsewhere a job
					// without a step yet (an salloc allocation, a prolog
					// running) would let a login shell's SLURM_JOB_ID
					// bill it (review17 R1), and slurmd's "none" stands.
					if r.cfg.NodeName == "" {
						break
					}
					if jobs, jerr := c.NodeJobs(ctx, r.cfg.NodeName); jerr != nil || len(jobs) > 0 {
						stepsElsewhere = true
					}
				case errors.Is(err, slurm.ErrUnreachableSteps):
					// The steps it reached are known; the processes of
					// those it did not are asked about again at the next
					// scrape.
					r.logOnceMsg(err, "scontrol listpids could not reach every job step; the processes of the others are attributed")
					listFailed = true
				case err != nil:
					errs = append(errs, err)
					listFailed = true
				}
				for _, s := range steps {
					switch other, ok := listed[s.PID]; {
					case !ok:
						listed[s.PID] = s.JobID
					case other != s.JobID && twoJobs[s.PID] == "":
						if twoJobs == nil {
							twoJobs = map[int]string{}
						}
						twoJobs[s.PID] = other + " and " + s.JobID
					}
				}
			}
			id := listed[int(pid)]
			sp.twoJobs = twoJobs[int(pid)] != ""
			switch {
			case sp.twoJobs:
				// Which of the two is the process's cannot be told: it is
				// some job's, unknown, as a task whose SLUID could not be
				// resolved, never the last row's. Asked again at the next
				// scrape, when the PID's former task is gone from slurmd's
				// answer.
				r.logOnceMsg(fmt.Errorf("scontrol listpids lists GPU process %d under jobs %s", pid, twoJobs[int(pid)]),
					"slurmd gives one process to two Slurm jobs (its PID reused between scontrol's questions to their steps); its owner is unknown, and its GPU's split leaves it out")
				return ""
			case id != "":
				sp.slurmdJob = true
			case stepsElsewhere && container:
				r.logOnceMsg(errors.New("scontrol listpids finds no job step on this node while squeue lists jobs running on it"),
					"the slurmd running this node's jobs is not the one scontrol asks (Slurm in a container?): the environment of processes in containers that descend from a slurmstepd is read instead")
			case !listFailed:
				sp.askedSlurmd = now
			}
			return id
		}
		if job == "" && cg.SlurmSLUID != "" {
			id, err := c.ResolveSLUID(ctx, cg.SlurmSLUID)
			if err != nil && !errors.Is(err, slurm.ErrJobNotFound) {
				errs = append(errs, err)
			}
			job = id
			if job == "" {
				// scontrol before 25.11 takes no SLUID ("Invalid job id
				// specified" for any ID not a number: scontrol_print_job),
				// nor shows a job past MinJobAge or hidden from the
				// exporter; slurmd knows its steps' processes all the
				// same (found by probe17-slurm: never asked, the
				// process's usage went to the GPU's GRES holder).
				job = askSlurmd(false)
			}
		}
		environ := false
		if job == "" && cg.SlurmdCgroup() {
			// The process is where proctrack/linuxproc leaves a job's
			// tasks, whose cgroups name no job: ask slurmd, whose answer
			// the job cannot forge, then the environment. Elsewhere (a
			// login session, a service) a process outside every job
			// cgroup is in no job, whatever its environment says.
			container := r.outsideSystemd(cg)
			job = askSlurmd(container)
			// The environment is believed only where slurmd could not be
			// asked: where it answered, a process it does not list is no
			// task of any job's, as proctrack counts it (linuxproc counts
			// a slurmstepd's descendants, so a daemon that left it is
			// none, and Slurm does not account it either), whatever
			// SLURM_JOB_ID a login shell exported (found by probe17-slurm
			// on a node without systemd, where both are in the root
			// cgroup). In a container's cgroup, where anyone who may
			// start one can set SLURM_JOB_ID and name a process
			// slurmstepd, it is believed only of a process that descends
			// from a slurmstepd, as linuxproc tells its tasks. Asked
			// once: a process keeps its ancestors.
			slurmdSaidNo := sp.twoJobs || !sp.askedSlurmd.IsZero() && now.Sub(sp.askedSlurmd) < slurmdRecheck
			if job == "" && r.cfg.Procfs != nil && container && !slurmdSaidNo && !sp.stepdChecked {
				under, err := r.cfg.Procfs.DescendsFrom(int(pid), "slurmstepd")
				if err != nil {
					r.logOnceMsg(err, "cannot tell whether a GPU process in a container's cgroup is a Slurm task; its environment is not read")
				} else {
					sp.stepdChecked, sp.underStepd = true, under
				}
			}
			if job == "" && r.cfg.Procfs != nil && !slurmdSaidNo && (!container || sp.underStepd) {
				var err error
				job, err = r.cfg.Procfs.SlurmJobFromEnviron(int(pid))
				if err != nil && !errors.Is(err, fs.ErrNotExist) {
					// environ is its owner's alone (fs/proc/base.c:
					// REG("environ", S_IRUSR, ...)) and read through
					// mm_access's PTRACE_MODE_READ_FSCREDS: another
					// user's takes both capabilities. An exited process
					// (not found) has no job to tell.
					if environUnread == nil {
						environUnread = map[uint32]bool{}
					}
					environUnread[pid] = true
					environErr = cmpErr(environErr, fmt.Errorf("a GPU process's Slurm job is in its environment, which cannot be read (another user's needs CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH): %w", err))
				}
				environ = job != ""
			}
		}
		switch {
		case job != "":
			if sp.job != job {
				sp.jobSeen = time.Now()
			}
			sp.job, sp.environ = job, environ
			ids[job] = true
		case sp.twoJobs:
			sp.job, sp.environ = "", false
		}
		// A new value rather than a change in place: the previous scrape's
		// map, which a concurrent Resolve may be reading, shares it.
		if sp != old {
			p.slurm = &sp
			procs[pid] = p
		}
	}
	gres := map[int][]gresHold{}
	running := map[string]slurm.RunningJob{}
	st := slurmState{jobs: map[string]slurm.Job{}, unknown: map[string]bool{}, gres: gres, environUnread: environUnread, environErr: environErr, refused: map[string]int{}}
	if r.cfg.NodeName != "" {
		list, err := c.NodeJobs(ctx, r.cfg.NodeName)
		if since := jobsSeenSince(list, procs); err == nil && !since.IsZero() {
			// A process names a job the list does not, and was first seen
			// after the list was asked for (cached for nodeJobsTTL): the
			// job may have started since, and its GRES hold GPUs now.
			list, err = c.NodeJobsSince(ctx, r.cfg.NodeName, since)
		}
		if err != nil {
			// Which jobs run on the node now is not known: a job's record,
			// cached from when it ran, would make an ended job the holder of
			// the GPU another holds now, and give its labels while Slurm
			// gives none. Processes keep their job's ID alone.
			return st, errors.Join(append(errs, err)...)
		}
		for _, j := range list {
			running[j.ID] = j
			ids[j.ID] = true
		}
		if len(list) > 0 {
			n, err := c.NodeGPUs(ctx, r.cfg.NodeName)
			if err != nil {
				r.logOnceMsg(err, "cannot read how many GPUs Slurm numbers on this node (scontrol show node); a GPU it numbered that is not read here is told only by a job holding an index past the last")
			}
			st.nodeGPUs, st.nodeGPUsKnown = n, err == nil
		}
		// Jobs squeue did not list may hold GPUs here: their owners are
		// unknown, not none.
		hidden, err := c.JobsHidden(ctx)
		if err != nil {
			r.logOnceMsg(err, "cannot read Slurm's configuration to tell whether it hides other users' jobs (PrivateData=jobs); taken as not")
		}
		st.holdersUnseen = hidden
		r.logHidden(hidden)
	}
	var here []runningRecord // the running jobs' records, for their GRES
	for id := range ids {
		var j slurm.Job
		var err error
		if rj, ok := running[id]; ok {
			j, err = c.JobOf(ctx, rj)
		} else {
			j, err = c.Job(ctx, id)
		}
		switch {
		case errors.Is(err, slurm.ErrJobNotFound):
			st.unknown[id] = true
			continue
		case errors.Is(err, slurm.ErrOtherJobsRecord):
			st.refused[RefusedOtherJobsRecord]++
			// Asked for by its number, the job was answered with others'
			// records (an array's ID whose own task was purged): no job of
			// that ID is known, and if it runs here its GPUs are not.
			r.logOnceMsg(err, "scontrol answered for a Slurm job with another job's record; the job is taken as unknown: its processes are labelled with its ID alone, and GPUs no other job holds have unknown owners")
			st.unknown[id] = true
			if _, ok := running[id]; ok {
				st.holdersUnseen = true
			}
			continue
		case errors.Is(err, slurm.ErrOutputTooLarge):
			st.refused[RefusedTooLarge]++
			// One job's record too large to read (an array task asked
			// by its array's ID: squeue did not list it on this node, so
			// it holds none of its GPUs): its processes keep its ID,
			// and the other jobs are as known as ever. The client
			// remembers the failure; it is logged once per job.
			r.logOnceMsg(err, "Slurm job's record too large to read; its processes are labelled with its ID alone")
			if _, ok := running[id]; ok {
				st.holdersUnseen = true
			}
			continue
		case errors.Is(err, slurm.ErrUntrustedRecord):
			st.refused[RefusedForgedLines]++
			// Its free text wrote lines into its record (slurm's
			// ParseJobText): its GPUs are not known, the other jobs'
			// are. Remembered by the client, logged once per job.
			r.logOnceMsg(err, "Slurm job's record refused: its free text (name, comment, paths) holds line breaks that forge record lines; its processes are labelled with its ID alone, and GPUs no other job holds have unknown owners")
			if _, ok := running[id]; ok {
				st.holdersUnseen = true
			}
			continue
		case errors.Is(err, slurm.ErrIncompleteRecord):
			st.refused[RefusedIncomplete]++
			// Handled as a forged record, which may have cut it short,
			// but told apart: the operator has no line break to look for
			// where the record is merely not whole.
			r.logOnceMsg(err, "Slurm job's record refused: it lacks UserId or JobState, which scontrol prints in every record (cut short by a line its free text forged, or not scontrol's output); its processes are labelled with its ID alone, and GPUs no other job holds have unknown owners")
			if _, ok := running[id]; ok {
				st.holdersUnseen = true
			}
			continue
		case err != nil:
			errs = append(errs, err)
			continue
		}
		st.jobs[id] = j
		// Only the node's running jobs' GRES hold its GPUs: a job not
		// among them (it ended, or runs elsewhere; its process lives on)
		// holds none here now, whatever its record says.
		if _, ok := running[id]; ok {
			here = append(here, runningRecord{id, j})
		}
	}
	node := r.slurmNodeName(here)
	for _, rr := range here {
		id, j := rr.id, rr.job
		switch {
		case !j.NamesNode(node):
			// squeue -w lists it here (squeue maps a host name to its
			// node), yet its record names other nodes only: Slurm's name
			// for this node is not ours (NodeName set apart from
			// NodeHostname), so which GPUs any job holds here is unknown.
			st.holdersUnseen = true
			r.logOnceMsg(fmt.Errorf("job %s runs on node %q by squeue, but its record's nodes are %s", id, node, j.NodeList),
				"Slurm knows this node by another name: set --slurm.node-name to its NodeName; GPUs no job is seen to hold have unknown owners meanwhile")
		case j.Unplaced[node]:
			// GPUs held by a count alone (gres.conf without File=): any
			// GPU no job is seen to hold may be one of them.
			st.holdersUnseen = true
			r.logOnceMsg(fmt.Errorf("job %s holds GPUs on node %q by a count, without indices", id, node),
				"Slurm gives a job's GPUs on this node by count alone (gres.conf without File=): which GPUs it holds is unknown, and GPUs no job is seen to hold have unknown owners")
		}
		for _, idx := range j.GPUs[node] {
			gres[idx] = append(gres[idx], gresHold{job: id, share: 1})
		}
		for _, g := range j.Shared[node] {
			gres[g.Index] = append(gres[g.Index], gresHold{job: id, share: g.Share()})
		}
	}
	for _, list := range gres {
		slices.SortFunc(list, func(a, b gresHold) int { return strings.Compare(a.job, b.job) })
	}
	return st, errors.Join(errs...)
}
