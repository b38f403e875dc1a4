package attribution

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/xpu-exporter/xpu_exporter/attribution/kubernetes"
	"github.com/xpu-exporter/xpu_exporter/attribution/process"
	"github.com/xpu-exporter/xpu_exporter/attribution/slurm"
)

// Source names, the values of the exporter's source label.
const (
	SourceKubelet = "kubelet"
	SourceProcfs  = "procfs"
	SourceSlurm   = "slurm"
)

// Kubelet is the kubelet's pod-resources API.
type Kubelet interface {
	List(ctx context.Context) ([]kubernetes.PodResources, error)
	Allocatable(ctx context.Context) ([]kubernetes.ResourceDevices, error)
}

// Config says which sources the resolver asks. A nil source is not used.
type Config struct {
	Kubelet   Kubelet
	Metadata  kubernetes.MetadataSource
	Resources *kubernetes.ResourceMatcher
	PodLabels *kubernetes.LabelAllowList
	Procfs    *process.Reader
	Slurm     *slurm.Client
	// NodeName is this node's name in Slurm, to read the jobs' GRES.
	NodeName string
	Logger   *slog.Logger
}

// Resolver attributes devices to owners. It is safe for concurrent use.
type Resolver struct {
	cfg Config

	mu sync.Mutex
	// procs caches what procfs said of the PIDs seen in the previous
	// scrape: a GPU process lives for many scrapes, and reusing its PID
	// within one scrape interval would take the PID space wrapping around.
	procs map[uint32]procInfo
	// badIDs remembers the device-plugin IDs already logged as not
	// understood, so that each is logged once.
	badIDs map[string]bool
}

// procInfo is who a process runs for, as far as procfs tells.
type procInfo struct {
	info process.Info
	// job is the Slurm job of the process, from its cgroup, environment or
	// slurmd, when Slurm is in use.
	job string
}

// New returns a resolver over the configured sources.
func New(cfg Config) *Resolver {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Resources == nil {
		cfg.Resources, _ = kubernetes.NewResourceMatcher(kubernetes.DefaultResourcePatterns...)
	}
	return &Resolver{cfg: cfg, procs: map[uint32]procInfo{}, badIDs: map[string]bool{}}
}

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
	res := Result{Devices: make(map[string]*Ownership, len(devices))}
	for _, d := range devices {
		res.Devices[d.UUID] = &Ownership{Process: map[uint32]int{}}
	}
	procs, procErr := r.processes(devices)
	if r.cfg.Procfs != nil {
		res.Sources = append(res.Sources, Source{Name: SourceProcfs, Err: procErr})
	}

	var kube map[string][]Claim
	kubeDown := false
	if r.cfg.Kubelet != nil {
		var err error
		kube, res.UnknownDeviceIDs, err = r.kubernetesClaims(ctx, devices)
		kubeDown = kube == nil
		res.Sources = append(res.Sources, Source{Name: SourceKubelet, Err: err})
		if r.cfg.Metadata != nil {
			res.Sources = append(res.Sources, Source{Name: r.cfg.Metadata.Name(), Err: r.cfg.Metadata.Healthy()})
		}
	}
	var jobs map[string]slurm.Job
	var gres map[int][]string
	if r.cfg.Slurm != nil {
		var err error
		jobs, gres, err = r.slurmJobs(ctx, procs)
		res.Sources = append(res.Sources, Source{Name: SourceSlurm, Err: err})
	}

	for _, d := range devices {
		if d.ParentUUID != "" || len(d.PIDs) > 0 || kube[d.UUID] != nil || gres[d.Index] != nil {
			r.attribute(res.Devices[d.UUID], d, procs, kube[d.UUID], kubeDown, jobs, gres)
		}
	}
	r.mu.Lock()
	r.procs = procs
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
		for _, c := range res.Devices[d.UUID].Claims {
			if !slices.ContainsFunc(parent.Claims, func(p Claim) bool { return p.Owner.Key() == c.Owner.Key() }) {
				parent.Claims = append(parent.Claims, Claim{Owner: c.Owner})
			}
		}
	}
	return res
}

// attribute decides the owners of one device and which process runs for
// which of them. Allocation decides: Kubernetes' pod-resources, else the
// Slurm jobs whose GRES hold the device; only without either are owners
// taken from the processes themselves. On Kubernetes only the kubelet makes
// a pod an owner: while it is down (kubeDown), pod processes stay unresolved
// rather than guessed at.
func (r *Resolver) attribute(own *Ownership, d Device, procs map[uint32]procInfo, kube []Claim, kubeDown bool, jobs map[string]slurm.Job, gres map[int][]string) {
	switch {
	case len(kube) > 0:
		own.Claims = kube
	case d.ParentUUID == "" && len(gres[d.Index]) > 0:
		for _, id := range gres[d.Index] {
			own.Claims = append(own.Claims, Claim{Owner: slurmOwner(id, jobs), Share: 1})
		}
	}
	allocated := len(own.Claims) > 0
	for _, pid := range d.PIDs {
		p, ok := procs[pid]
		if !ok {
			continue
		}
		owner, known := r.processOwner(p, jobs)
		if !known || (kubeDown && owner.Kind == Kubernetes) {
			continue
		}
		i := slices.IndexFunc(own.Claims, func(c Claim) bool { return sameOwner(c.Owner, owner) })
		switch {
		case i >= 0:
			own.Process[pid] = i
		case (allocated && owner.Kind != Slurm) || (owner.Kind == Kubernetes && r.cfg.Kubelet != nil):
			// A process outside the allocation (a host daemon, a pod that
			// did not request the GPU) is shown apart, never added to an
			// owner; a job's own processes make it an owner, though,
			// whether or not Slurm gave it the device through GRES.
			// Where the kubelet answers, only it makes pods owners.
			own.Process[pid] = Unattributed
		case kubeDown:
			// Every device looks unallocated while the kubelet is down: a
			// host daemon must not become the owner of a pod's GPU.
		default:
			// A job running on a GPU that Slurm gave another job owns it
			// too, but was allocated none of it: share 0 keeps chargeback
			// from counting the GPU twice.
			share := 1.0
			if allocated {
				share = 0
			}
			own.Claims = append(own.Claims, Claim{Owner: owner, Share: share})
			own.Process[pid] = len(own.Claims) - 1
		}
	}
	// Devices owned through their processes are shared evenly between them.
	if !allocated && len(own.Claims) > 1 {
		for i := range own.Claims {
			own.Claims[i].Share = 1 / float64(len(own.Claims))
		}
	}
}

// sameOwner matches a process's owner to a claim. A process knows its pod
// but not which of the pod's containers was allocated the device, so any
// container of the same pod matches.
func sameOwner(claim, proc Owner) bool {
	if claim.Kind == Kubernetes && proc.Kind == Kubernetes {
		return claim.Namespace == proc.Namespace && claim.Pod == proc.Pod
	}
	return claim.Key() == proc.Key()
}

// processOwner is who a process runs for: its pod, else its Slurm job, else
// its systemd unit and user. It is unknown for a pod the metadata source
// does not know: a wrong guess would be worse than none.
func (r *Resolver) processOwner(p procInfo, jobs map[string]slurm.Job) (Owner, bool) {
	if uid := p.info.Cgroup.PodUID; uid != "" {
		if r.cfg.Metadata == nil {
			return Owner{}, false
		}
		meta, ok := r.cfg.Metadata.PodByUID(uid)
		if !ok {
			return Owner{}, false
		}
		o := r.podOwner(meta.Namespace, meta.Name, "")
		return o, true
	}
	if p.job != "" {
		return slurmOwner(p.job, jobs), true
	}
	unit := p.info.Cgroup.Unit
	if unit == "" {
		unit = p.info.Cgroup.Slice
	}
	return Owner{Kind: Process, Unit: unit, User: p.info.User, Command: p.info.Comm}, true
}

func slurmOwner(id string, jobs map[string]slurm.Job) Owner {
	j := jobs[id]
	return Owner{
		Kind: Slurm, SlurmJobID: id, SlurmJobName: j.Name, SlurmUser: j.User,
		SlurmAccount: j.Account, SlurmPartition: j.Partition, SlurmQOS: j.QOS,
	}
}

func (r *Resolver) podOwner(namespace, pod, container string) Owner {
	o := Owner{Kind: Kubernetes, Namespace: namespace, Pod: pod, Container: container}
	if r.cfg.Metadata == nil {
		return o
	}
	if meta, ok := r.cfg.Metadata.Pod(namespace, pod); ok {
		o.PodUID, o.Workload, o.WorkloadKind = meta.UID, meta.Workload, meta.WorkloadKind
		if r.cfg.PodLabels != nil {
			o.PodLabels = r.cfg.PodLabels.Values(meta.Labels)
		}
	}
	return o
}

// processes reads procfs for every PID on the devices. The error says why
// processes could not be attributed at all, such as not seeing the host's
// PIDs from a container.
func (r *Resolver) processes(devices []Device) (map[uint32]procInfo, error) {
	out := map[uint32]procInfo{}
	if r.cfg.Procfs == nil {
		return out, nil
	}
	r.mu.Lock()
	prev := r.procs
	r.mu.Unlock()
	var seen, missing int
	var firstErr error
	for _, d := range devices {
		for _, pid := range d.PIDs {
			if _, done := out[pid]; done {
				continue
			}
			seen++
			if p, ok := prev[pid]; ok {
				out[pid] = p
				continue
			}
			info, err := r.cfg.Procfs.Process(int(pid))
			switch {
			case errors.Is(err, fs.ErrNotExist):
				missing++
				continue
			case err != nil:
				firstErr = cmpErr(firstErr, err)
				continue
			}
			out[pid] = procInfo{info: info}
		}
	}
	if seen > 0 && missing == seen {
		return out, fmt.Errorf("none of the %d GPU processes is in %s: the exporter must see the host's PIDs (hostPID: true)", seen, r.procRoot())
	}
	return out, firstErr
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

// kubernetesClaims maps each device to the containers the kubelet allocated
// it to.
func (r *Resolver) kubernetesClaims(ctx context.Context, devices []Device) (map[string][]Claim, int, error) {
	pods, err := r.cfg.Kubelet.List(ctx)
	if err != nil {
		return nil, 0, err
	}
	// Allocatable lists every replica a device plugin advertises, which is
	// what a replica's share depends on; without it the share is unknown.
	allocatable, allocErr := r.cfg.Kubelet.Allocatable(ctx)
	allocs, idErrs := kubernetes.Allocations(pods, allocatable, r.cfg.Resources)
	for _, e := range idErrs {
		r.logOnce(e)
	}
	byRef := indexDevices(devices)
	claims := map[string][]Claim{}
	for _, a := range allocs {
		uuid, ok := byRef(a.Device)
		if !ok {
			continue
		}
		share, _ := a.Share()
		owner := r.podOwner(a.Namespace, a.Pod, a.Container)
		i := slices.IndexFunc(claims[uuid], func(c Claim) bool { return c.Owner.Key() == owner.Key() })
		if i >= 0 {
			// One container holding several replicas of one device.
			claims[uuid][i].Share += share
			continue
		}
		claims[uuid] = append(claims[uuid], Claim{Owner: owner, Share: share})
	}
	if allocErr != nil {
		return claims, len(idErrs), fmt.Errorf("allocatable devices (shares of shared GPUs unknown): %w", allocErr)
	}
	return claims, len(idErrs), nil
}

func (r *Resolver) logOnce(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.badIDs[err.Error()] || len(r.badIDs) > 1000 {
		return
	}
	r.badIDs[err.Error()] = true
	r.cfg.Logger.Warn("device plugin ID not understood; its container is not attributed", "err", err)
}

// indexDevices returns a lookup from a device plugin's reference to the
// UUID of the device it names.
func indexDevices(devices []Device) func(kubernetes.DeviceRef) (string, bool) {
	byUUID := map[string]string{}
	byBus := map[string]string{}
	byIndex := map[string]string{}
	for _, d := range devices {
		byUUID[d.UUID] = d.UUID
		if d.ParentUUID == "" {
			if d.PCIBusID != "" {
				byBus[normalizeBusID(d.PCIBusID)] = d.UUID
			}
			byIndex[strconv.Itoa(d.Index)] = d.UUID
		} else if d.MIGInstance >= 0 {
			byIndex[strconv.Itoa(d.Index)+":"+strconv.Itoa(d.MIGInstance)] = d.UUID
		}
	}
	return func(ref kubernetes.DeviceRef) (string, bool) {
		var uuid string
		var ok bool
		switch {
		case ref.UUID != "":
			uuid, ok = byUUID[ref.UUID]
		case ref.PCIBusID != "":
			uuid, ok = byBus[normalizeBusID(ref.PCIBusID)]
		case ref.Index != "":
			uuid, ok = byIndex[ref.Index]
		}
		return uuid, ok
	}
}

// normalizeBusID turns NVML's "00000000:3B:00.0" and sysfs' "0000:3b:00.0"
// into one form.
func normalizeBusID(id string) string {
	id = strings.ToLower(id)
	domain, rest, ok := strings.Cut(id, ":")
	if !ok {
		return id
	}
	domain = strings.TrimLeft(domain, "0")
	return fmt.Sprintf("%04s:%s", domain, rest)
}

// slurmJobs finds the Slurm job of every process and the jobs' metadata,
// and which jobs hold which GPU of this node through GRES.
func (r *Resolver) slurmJobs(ctx context.Context, procs map[uint32]procInfo) (map[string]slurm.Job, map[int][]string, error) {
	c := r.cfg.Slurm
	var errs []error
	var listed map[int]string // PID → job, from slurmd, asked only if needed
	ids := map[string]bool{}
	for pid, p := range procs {
		cg := p.info.Cgroup
		job := cg.SlurmJobID
		if job == "" && cg.SlurmSLUID != "" {
			id, err := c.ResolveSLUID(ctx, cg.SlurmSLUID)
			if err != nil {
				errs = append(errs, err)
			}
			job = id
		}
		if job == "" && cg.PodUID == "" {
			// The cgroup says nothing (proctrack/linuxproc): ask slurmd,
			// whose answer the job cannot forge, then the environment.
			if listed == nil {
				listed = map[int]string{}
				steps, err := c.ListPIDs(ctx)
				if err != nil {
					errs = append(errs, err)
				}
				for _, s := range steps {
					listed[s.PID] = s.JobID
				}
			}
			job = listed[int(pid)]
			if job == "" && r.cfg.Procfs != nil {
				job, _ = r.cfg.Procfs.SlurmJobFromEnviron(int(pid))
			}
		}
		if job != "" {
			p.job = job
			procs[pid] = p
			ids[job] = true
		}
	}
	gres := map[int][]string{}
	if r.cfg.NodeName != "" {
		running, err := c.NodeJobs(ctx, r.cfg.NodeName)
		if err != nil {
			errs = append(errs, err)
		}
		for _, id := range running {
			ids[id] = true
		}
	}
	jobs := map[string]slurm.Job{}
	for id := range ids {
		j, err := c.Job(ctx, id)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		jobs[id] = j
		for _, idx := range j.GPUs[r.cfg.NodeName] {
			gres[idx] = append(gres[idx], id)
		}
	}
	for _, list := range gres {
		slices.Sort(list)
	}
	return jobs, gres, errors.Join(errs...)
}
