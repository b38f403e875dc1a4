// Package attribution tells who owns each device of the node at scrape time:
// the Kubernetes containers it is allocated to, the Slurm jobs that hold it,
// or on bare metal the systemd units and users of its processes. Its
// subpackages read the sources; this package applies the ownership rules of
// the design: allocation decides who owns a device, processes only refine
// the split between co-owners, and a process that belongs to no owner is
// never counted as one.
package attribution

import "strings"

// Kind is the kind of an owner.
type Kind string

// The kinds of owners.
const (
	Kubernetes Kind = "kubernetes"
	Slurm      Kind = "slurm"
	Process    Kind = "process"
)

// Owner is who holds a device. Only the fields of its Kind are set.
type Owner struct {
	Kind Kind

	// Kubernetes: the container the device is allocated to.
	Namespace    string
	Pod          string
	Container    string
	Workload     string
	WorkloadKind string
	PodUID       string
	// PodLabels are the values of the allow-listed pod labels, in the order
	// of Resolver.PodLabelNames.
	PodLabels []string
	// ClaimNamespace and Claim name the DRA ResourceClaim through which the
	// container holds the device; empty for a device-plugin allocation.
	// They describe the hold, not the owner: Labels and Key leave them out.
	ClaimNamespace string
	Claim          string

	// Slurm: the job.
	SlurmJobID string
	// SlurmArrayJobID and SlurmHetJobID are the array or heterogeneous job
	// the job is a task or component of (Job.ArrayJobID, Job.HetJobID):
	// like the job name, they describe the owner on its info series alone.
	SlurmArrayJobID string
	SlurmHetJobID   string
	SlurmJobName    string
	SlurmUser       string
	SlurmAccount    string
	SlurmPartition  string
	SlurmQOS        string

	// Process (bare metal): the systemd unit, user and command.
	Unit    string
	User    string
	Command string
}

// Labels returns the owner labels of the design that device series carry,
// in a fixed order. Values that are unknown are left out, never empty.
func (o Owner) Labels() (names, values []string) {
	pairs, n := o.LabelPairs()
	names, values = make([]string, n), make([]string, n)
	for i, p := range pairs[:n] {
		names[i], values[i] = p[0], p[1]
	}
	return names, values
}

// Key identifies the owner among others.
func (o Owner) Key() string {
	pairs, n := o.LabelPairs()
	size := len(o.Kind)
	for _, p := range pairs[:n] {
		size += 1 + len(p[1])
	}
	var b strings.Builder
	b.Grow(size)
	b.WriteString(string(o.Kind))
	for _, p := range pairs[:n] {
		b.WriteByte('\xff')
		b.WriteString(p[1])
	}
	return b.String()
}

// MaxLabelPairs is the most label pairs an owner has.
const MaxLabelPairs = 5

// LabelPairs are Labels' name and value pairs in an array, so that Key,
// asked for every process at every scrape, allocates only the key, and a
// series' labels can be looked up before they are copied anywhere.
func (o Owner) LabelPairs() (pairs [MaxLabelPairs][2]string, n int) {
	add := func(name, value string) {
		if value != "" {
			pairs[n] = [2]string{name, value}
			n++
		}
	}
	switch o.Kind {
	case Kubernetes:
		add("namespace", o.Namespace)
		add("pod", o.Pod)
		add("container", o.Container)
		add("workload", o.Workload)
		add("workload_kind", o.WorkloadKind)
	case Slurm:
		add("slurm_job_id", o.SlurmJobID)
		add("slurm_user", o.SlurmUser)
		add("slurm_account", o.SlurmAccount)
		add("slurm_partition", o.SlurmPartition)
		add("slurm_qos", o.SlurmQOS)
	case Process:
		add("unit", o.Unit)
		add("user", o.User)
		add("command", o.Command)
	}
	return pairs, n
}

// Claim is an owner's hold on one device.
type Claim struct {
	Owner Owner
	// Share is the fraction of the device allocated to the owner: 1, or 1/N
	// for one of N time-slicing replicas; 0 when it is not known.
	Share float64
}

// Ownership is who owns one device in this scrape.
type Ownership struct {
	Claims []Claim
	// Process maps each process of the device whose owner is known to the
	// index of its claim in Claims, or to Unattributed when the process
	// belongs to none of them (a host daemon on an allocated GPU, a process
	// of a pod the kubelet no longer lists). Processes that could not be
	// resolved (they exited, or their pod is unknown and may be an owner)
	// are absent. The device's exited processes (Device.ExitedPIDs) are
	// mapped likewise where their owner is known: to its claim, or to
	// Unattributed when it holds the device no more.
	Process map[uint32]int
	// Strays are the own owners (unit, user, job or pod) of the processes
	// Process marks Unattributed, or leaves out because the device's list
	// of processes is partial, by PID: per-process series name who runs a
	// host daemon on an allocated GPU, or a process whose device's owners
	// are unknown. Nil when there are none; a process of a pod the kubelet
	// no longer lists has none either.
	Strays map[uint32]Owner
	// OwnersUnknown says Claims may lack owners: no allocation names the
	// device's owners, so they come from its processes, and the list of
	// those is not whole (Device.PIDsPartial, or a PID procfs hides).
	OwnersUnknown bool
	// Allocated says Claims come from an allocation (the kubelet's, Slurm's
	// GRES), which names every owner, not from the processes seen; not
	// where a Slurm task whose job could not be told uses the device, which
	// may be another job's.
	Allocated bool
	// Reused are the device's PIDs that named another process at the
	// previous scrape (its pidfd said it exited, or its start time
	// changed): a vendor that samples usage by PID (NVML) has both
	// processes' time in that PID's samples over the window, and nothing
	// says where one ends.
	Reused []uint32
	// ReusedByOther says a Reused PID's former process was another owner's,
	// or one whose owner is not known: the device's split between its
	// owners, a sole owner's included, cannot be told for this window.
	ReusedByOther bool
}

// Unattributed marks a process that belongs to no owner of its device.
const Unattributed = -1

// Device is what attribution needs to know of a device.
type Device struct {
	UUID     string
	Vendor   string
	Index    int    // node-local index of the whole GPU
	PCIBusID string // any form NVML or sysfs uses
	// Serial is the board's serial number: the Intel Gaudi device plugin
	// names devices by it. "" when unknown.
	Serial     string
	ParentUUID string // the GPU of a MIG instance
	// MIGIndex is a MIG device's handle index within its GPU, which an
	// index device ID names as "<gpu>:<index>"; -1 for a whole GPU.
	MIGIndex int
	// MIGInstance is a MIG device's GPU instance ID, which DRA drivers name
	// it by (with its parent); -1 for a whole GPU.
	MIGInstance int
	// Partition is the ID the ROCm device plugin advertises an AMD compute
	// partition under: "amdgpu_xcp_<n>", or for a GPU's first partition the
	// GPU's PCI address, which then names the partition rather than the
	// GPU (a partitioned GPU is not advertised whole). Empty otherwise.
	Partition string
	// DeviceName is the name GKE's NVIDIA device plugin gives the device:
	// "nvidia<minor>" after a GPU's /dev/nvidia<minor>, "nvidia<minor>/gi<id>"
	// for a MIG GPU instance of it. "" when the minor is unknown.
	DeviceName string
	// GRESIndex is the device's index among the node's GPUs as Slurm counts
	// them: whole GPUs and, on a GPU in MIG mode, each MIG device instead of
	// the GPU. -1 for a GPU in MIG mode with MIG devices, which Slurm does
	// not hand out itself.
	GRESIndex int
	// GRESUnplaced says Slurm numbers the device but its GRES index could
	// not be worked out: while jobs hold GRES on the node, its owners are
	// unknown rather than none.
	GRESUnplaced bool
	PIDs         []uint32
	// ExitedPIDs used the device earlier in the current utilization window
	// but run on it no more (the vendor's samples name them, its process
	// list does not). Their owners come from what procfs said of them at
	// the previous scrape, which is never read again: the PID may be
	// another process's by now.
	ExitedPIDs []uint32
	// PIDsPartial says PIDs may lack some of the device's processes (the
	// vendor could not list them all): owners are then not taken from the
	// processes, since those seen need not be all of them.
	PIDsPartial bool
}

// Source is the state of one attribution source in a scrape.
type Source struct {
	Name string
	Err  error // nil when the source answered
}

// Result is the ownership of every device, by UUID.
type Result struct {
	Devices map[string]*Ownership
	Sources []Source
	// UnknownDeviceIDs counts the device-plugin IDs in this scrape that name
	// no device in a form the resolver understands, and the GRES indices
	// Slurm's running jobs hold that no device here has, one per job; such
	// an ID is not attributed, the other devices of its container or job
	// are.
	UnknownDeviceIDs int
	// EndedPods counts the pods the kubelet listed with devices though
	// they have ended (Resolver.withoutEnded); their devices are not
	// attributed to them.
	EndedPods int
	// SlurmJobsRefused counts, by reason (Refused*), the jobs of this
	// scrape whose record scontrol gave but that could not be used: their
	// processes keep the job's ID alone, and a GPU such a running job may
	// hold has unknown owners. Nil when Slurm is not a source.
	SlurmJobsRefused map[string]int
	// EnginePods says, by "namespace/name" of the pods the kubelet lists,
	// whether this exporter serves a pod's inference engine (see
	// Resolver.enginePods); nil where every pod's is (one exporter serves
	// every vendor, or the kubelet has not answered yet). While the kubelet
	// fails, those of its last answer.
	EnginePods map[string]bool
	// EngineSplitPods lists, by "namespace/name", the pods in EnginePods
	// that hold devices of several vendors whose exporters split this
	// node: each exporter reads some of their engine's devices.
	EngineSplitPods map[string]bool
	// EngineOthers says, where EnginePods is not nil, whether this
	// exporter serves the engines that are no listed pod's: configured
	// targets of a systemd unit, of no owner, or of a pod the kubelet does
	// not list (which the collector leaves to the pod's node where pod
	// metadata tells it is elsewhere). Like a pod holding no device, they
	// are the node's first vendor exporter's (Resolver.enginePods).
	EngineOthers bool
	// UnresolvedClaimDevices counts the DRA claim devices in this scrape
	// that could not be matched to a device (their CDI spec is missing,
	// unreadable or stale); such a device is not attributed, the other
	// devices of its container are.
	UnresolvedClaimDevices int
}
