package collector

import (
	"context"
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xpu-exporter/xpu_exporter/attribution"
)

func init() {
	registerCollector("attribution", true, "Who uses each device: the xpu_workload_* families and attribution self-metrics", newAttributionCollector)
}

var (
	deviceOwners      = gauge("device_owners", "Number of owners (containers, Slurm jobs, units) of the device.")
	workloadInfo      = gauge("workload_info", "An owner of a device on this node, with its descriptive labels; always 1.")
	workloadAllocated = gauge("workload_allocated_devices", "Devices allocated to the owner: 1 for a whole device, 1/N for one of N time-slicing replicas, the slice fraction of a MIG instance.")
	workloadMemory    = gauge("workload_memory_used_bytes", "Device memory used by the owner's processes (0 for an owner without processes).")
	workloadUtil      = gauge("workload_utilization_ratio", "The owner's part of the device's utilization since the previous scrape, split in proportion to per-process samples of the same window; the parts of a device add up to xpu_utilization_ratio, but on AMD, whose device reading is of the moment: there each part is its processes' busy time over the window.")
	sourceUp          = gauge("attribution_source_up", "1 if the attribution source answered in this scrape, 0 if not (owner labels from it are missing).")
	unknownIDs        = gauge("attribution_unknown_device_ids", "Device-plugin IDs, and Slurm GRES indices held by running jobs, in this scrape that name no device of this node (in no known form, or no such device); such an ID is not attributed, the other devices of its container or job are.")
	unresolvedClaims  = gauge("attribution_unresolved_claim_devices", "DRA claim devices in this scrape that match no device of the node (CDI spec missing, malformed, oversized or stale); such a device is not attributed, the other devices of its container are.")
	slurmJobsRefused  = gauge("attribution_slurm_jobs_refused", "Slurm jobs in this scrape whose record scontrol gave but that could not be used, by reason: other_jobs_record (asked for by its ID, scontrol printed other jobs' records), too_large, forged_lines (its free text holds line breaks that forge record lines), incomplete (no UserId or JobState). Their processes keep the job's ID alone, and a GPU such a running job may hold has unknown owners.")
	endedPods         = gauge("attribution_ended_pods", "Pods the kubelet lists with devices in this scrape though they have ended (Succeeded or Failed, per the kubelet Pods API); their devices are not attributed to them.")
)

type attributionCollector struct {
	podLabels []string
}

func newAttributionCollector(cfg Config) (Collector, error) {
	c := &attributionCollector{}
	if cfg.Attribution != nil {
		c.podLabels = cfg.Attribution.PodLabelNames()
	}
	return c, nil
}

func (c *attributionCollector) Update(_ context.Context, snap *Snapshot, ch chan<- prometheus.Metric) error {
	if len(snap.Attribution) == 0 {
		return nil // attribution is off
	}
	e := newEmitter(ch)
	defer e.flush()
	for _, s := range snap.Attribution {
		e.emit(sourceUp, labels{names: []string{"source"}, values: []string{s.Name}}, boolValue(s.Err == nil))
		if s.Name == attribution.SourceSlurm {
			// Every reason, 0 included: an alert's series exists before
			// the first refusal.
			for _, r := range attribution.RefusedReasons {
				e.emit(slurmJobsRefused, labels{names: []string{"reason"}, values: []string{r}}, float64(snap.slurmJobsRefused[r]))
			}
		}
	}
	e.emit(unknownIDs, labels{}, float64(snap.unknownDeviceIDs))
	e.emit(unresolvedClaims, labels{}, float64(snap.unresolvedClaimDevices))
	e.emit(endedPods, labels{}, float64(snap.endedPods))
	// Owners in the order first met, not a map's: the exposition keeps a
	// family's order from one scrape to the next (family.order).
	var owners []*attribution.Owner // into the snapshot's claims, not copies
	seen := map[string]bool{}
	// Each owner's labels are built once for its three families: on a GPU
	// shared by hundreds of pods they were most of this work. One slice
	// for every device's: emit keeps no labels.
	var claimLabels []labels
	for _, d := range snap.Devices {
		if attributionKey(d) == "" {
			continue
		}
		id := identityLabels(d)
		if !d.OwnersUnknown {
			e.emit(deviceOwners, id, float64(len(d.Claims)))
		}
		claimLabels = slices.Grow(claimLabels[:0], len(d.Claims))[:len(d.Claims)]
		for i, cl := range d.Claims {
			claimLabels[i] = id.withOwner(cl.Owner)
			// One series of xpu_workload_info per owner and DRA claim: a
			// container may hold devices through several claims.
			if k := cl.Owner.Key() + "\xff" + cl.Owner.ClaimNamespace + "/" + cl.Owner.Claim; !seen[k] {
				seen[k] = true
				owners = append(owners, &d.Claims[i].Owner)
			}
			if v, ok := d.AllocatedDevices(cl); ok {
				e.emit(workloadAllocated, claimLabels[i], v)
			}
		}
		// Usage lists the claims' parts in their order, then the
		// unattributed processes' part, which has no owner.
		for i, u := range d.Usage() {
			l := id.with("workload_kind", "unattributed")
			if u.Owner != nil {
				l = claimLabels[i]
			}
			if u.MemoryUsed != nil {
				e.emit(workloadMemory, l, *u.MemoryUsed)
			}
			if u.Utilization != nil {
				e.emit(workloadUtil, l, *u.Utilization)
			}
		}
	}
	for _, o := range owners {
		e.emit(workloadInfo, c.infoLabels(*o), 1)
	}
	return nil
}

// infoLabels are the owner labels plus what describes an owner but would
// multiply series if it were on every one: allow-listed pod labels, the DRA
// claim, the Slurm job name.
func (c *attributionCollector) infoLabels(o attribution.Owner) labels {
	l := labels{}.withOwner(o)
	switch o.Kind {
	case attribution.Kubernetes:
		if o.Claim != "" {
			l = l.with("claim", o.Claim).with("claim_namespace", o.ClaimNamespace)
		}
		for i, name := range c.podLabels {
			if i < len(o.PodLabels) && o.PodLabels[i] != "" {
				l = l.with(name, o.PodLabels[i])
			}
		}
	case attribution.Slurm:
		if o.SlurmJobName != "" {
			l = l.with("slurm_job_name", o.SlurmJobName)
		}
		if o.SlurmArrayJobID != "" {
			l = l.with("slurm_array_job_id", o.SlurmArrayJobID)
		}
		if o.SlurmHetJobID != "" {
			l = l.with("slurm_het_job_id", o.SlurmHetJobID)
		}
	}
	return l
}

// AllocatedDevices is how much of a whole device the claim holds: its share
// of the device (1, 1/N of N replicas), times the instance's fraction of
// its GPU for a MIG instance. It is unknown (false) when the share is, and
// when a MIG instance's fraction could not be read (a whole GPU would be a
// made-up value). On a GPU in MIG mode the owners its instances lend it
// have share 0 (their instances carry their allocations); an owner the
// GPU was allocated to whole (MIG strategy none) has its share.
func (d *Device) AllocatedDevices(cl attribution.Claim) (float64, bool) {
	switch {
	case cl.Share <= 0:
		return 0, false
	case d.MIG == nil:
		return cl.Share, true
	case d.MIG.Fraction > 0:
		return cl.Share * d.MIG.Fraction, true
	}
	return 0, false
}

// Usage is one party's part of a device: an owner, or the processes that
// belong to none (Owner nil).
type Usage struct {
	Owner *attribution.Owner
	// MemoryUsed and Utilization are nil where the split cannot be made.
	MemoryUsed  *float64
	Utilization *float64
}

// Usage divides the device's memory and utilization between its owners and
// the processes that belong to none.
//
// Processes that used the device earlier in the window and exited since
// (Device.Exited) count in the utilization split with the owner they had,
// or as unattributed when that owner holds the device no more; one whose
// owner is unknown leaves the utilization split out, and makes no owner
// sole: its time may have been anyone's. They hold no memory.
//
// Memory is, for every party alike, the memory its processes use (NVML's
// per-process usedGpuMemory): an owner without processes uses 0, and what
// the driver holds for no process is in no party's part. Utilization is the
// device's over the snapshot's window, split in proportion to the
// processes' utilization over the same window; a sole owner with no other
// party has the whole device's, as its device series say, and an owner
// without processes on a shared device 0, which is what an allocated but
// idle share looks like. Where a split cannot be made right (processes
// whose owner is unknown, a process without its memory or samples, a
// process list the vendor could not read whole, no samples on a busy
// shared device) it is left out rather than guessed. A GPU in MIG mode has
// none: its instances carry the usage; one without instances is a device
// nothing runs on.
func (d *Device) Usage() []Usage {
	unattributed := hasUnattributed(d)
	if (d.HasMIG && !d.MIGEmpty) || (len(d.Claims) == 0 && !unattributed) {
		return nil
	}
	parties := make([]Usage, 0, len(d.Claims)+1)
	for i := range d.Claims {
		parties = append(parties, Usage{Owner: &d.Claims[i].Owner})
	}
	if unattributed {
		parties = append(parties, Usage{})
	}
	// party maps a process's owner index to its place in parties.
	party := func(i int) int {
		if i == attribution.Unattributed {
			return len(d.Claims)
		}
		return i
	}
	resolved, memKnown, utilKnown := !d.ProcessesPartial, true, true
	mem := make([]float64, len(parties))
	util := make([]float64, len(parties))
	// runs says which parties have a process on the device: one that has
	// none uses 0 memory, whatever the others' memory (unknown on a Gaudi:
	// found by probe19-oracle, a pod beside a host process lost its 0).
	runs := make([]bool, len(parties))
	utilTotal := 0.0
	for _, p := range d.Processes {
		i, ok := d.ProcessOwner[p.PID]
		if !ok {
			resolved = false
			continue
		}
		runs[party(i)] = true
		if p.MemoryUsed != nil {
			mem[party(i)] += float64(*p.MemoryUsed)
		} else {
			memKnown = false
		}
		if p.Utilization != nil {
			util[party(i)] += *p.Utilization
			utilTotal += *p.Utilization
		} else {
			utilKnown = false
		}
	}
	exitedKnown := !d.ExitedUnnamed
	for _, p := range d.Exited {
		i, ok := d.ProcessOwner[p.PID]
		switch {
		case !ok:
			exitedKnown = false
		case p.Utilization == nil:
			// Its owner's part is unknown; a sole owner's is still the
			// device's.
			utilKnown = false
		default:
			util[party(i)] += *p.Utilization
			utilTotal += *p.Utilization
		}
	}
	// The device's whole utilization is a sole owner's when nothing else
	// can have used it: the allocation names every owner, or every process
	// was resolved, and no process of an unknown owner ran earlier in the
	// window. Owners found from processes, one of which could not be
	// resolved (it exited, or hides), may be missing one.
	sole := len(d.Claims) == 1 && !unattributed && (d.OwnersAllocated || resolved) && exitedKnown
	// The whole the parts divide: the device's over the window, or, where
	// the device's reading is of the moment (AMD), its processes' over the
	// window, no more than the whole device: a moment's reading times the
	// window's shares is neither (a pod steady at 0.5 was 0.85 when
	// another had just started, probe13-otlpscrape D1).
	var whole float64
	switch {
	case d.UtilizationOfTheMoment:
		whole = min(1, utilTotal)
	case d.Utilization != nil:
		whole = *d.Utilization
	}
	for i := range parties {
		if resolved && (memKnown || !runs[i]) {
			parties[i].MemoryUsed = &mem[i]
		}
		if d.Utilization == nil {
			continue
		}
		switch {
		case sole:
			parties[i].Utilization = d.Utilization
		case resolved && utilKnown && exitedKnown && utilTotal > 0:
			// The factor first: where the processes' samples add up to
			// the device's reading to the last bit (as one process's
			// does, or 0.4 + 0.3 = 0.7), it is exactly 1 and each part is
			// its samples' sum (0.4, not 0.7 × 0.4 / 0.7 =
			// 0.39999999999999997); elsewhere it is as near as before.
			v := util[i] * (whole / utilTotal)
			parties[i].Utilization = &v
		case resolved && utilKnown && exitedKnown && utilTotal == 0 && d.UtilizationOfTheMoment:
			// Every process idle over the window, or none: every part is
			// 0, whatever the moment's reading.
			zero := 0.0
			parties[i].Utilization = &zero
		case resolved && exitedKnown && *d.Utilization == 0 && !d.UtilizationOfTheMoment:
			// Every part of an idle device is 0, whatever its processes'
			// samples say; not their sum, which a process of unknown
			// utilization (a KFD one, a dipped counter) leaves above the
			// device's whole.
			zero := 0.0
			parties[i].Utilization = &zero
		}
	}
	return parties
}

func hasUnattributed(d *Device) bool {
	for _, i := range d.ProcessOwner {
		if i == attribution.Unattributed {
			return true
		}
	}
	return false
}
