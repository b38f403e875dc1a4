package collector

import (
	"sort"
	"time"

	"github.com/xpu-exporter/xpu_exporter/vendors/amd"
)

// amdRASEvents is AMD's counterpart of xpu_xid_errors_total: a family of
// its own, because Xid codes are NVIDIA's catalogue (the mixin sorts them
// into hardware and application Xids by code) and an AMD RAS error has a
// block and a type instead. It keeps what makes the Xid family useful: the
// owner labels of the device when the errors were seen, kept after the
// owner is gone.
var amdRASEvents = counter("amd_ras_events_total", "amdgpu RAS errors by block and type (corrected, uncorrected, deferred) that the exporter saw the driver count, each credited to the owner the device had at the scrape that first served it: AMD's counterpart of xpu_xid_errors_total.")

// amdRASTypes names the counts of a ras/<block>_err_count file.
var amdRASTypes = []string{"corrected", "uncorrected", "deferred"}

func rasCounts(c amd.RASCount) [3]amd.Opt[uint64] {
	return [3]amd.Opt[uint64]{c.Correctable, c.Uncorrectable, c.Deferred}
}

type rasKey struct{ block, typ string }

// amdRAS turns the driver's RAS error counts into events with an owner.
//
// The kernel offers no RAS event stream to read: Documentation/gpu/amdgpu/
// ras.rst says "The AMDGPU RAS interfaces are exposed via sysfs (for
// informational queries) and debugfs (for error injection)", the debugfs
// ras_ctrl being a write-only control to enable, disable or inject errors.
// (KFD's SMI events, read through an ioctl on /dev/kfd, report VM faults,
// throttling and resets, not RAS errors.) So the events are the increases
// of ras/<block>_err_count between two reads:
//   - the first count seen of a block and type is the baseline, not events:
//     what happened before the exporter watched has no owner it can name;
//   - a count that went down is a driver reload (the counts live in the
//     driver's RAS objects and start at 0 when it loads), and the new count
//     is what happened since, as Prometheus' rate() reads a counter reset;
//   - a count missing from a read (file absent, "Query currently
//     inaccessible", device down or late) keeps its baseline, so the errors
//     counted meanwhile are seen when it is back.
//
// A reload that leaves a count higher than before is read as an increase:
// the driver gives nothing that says it reloaded.
//
// Increases wait until the next scrape that serves the device, and are
// credited to the owner the device has in that scrape's snapshot; the
// first Update to serve them drains them, so a coalesced scrape served
// from the same snapshot counts nothing twice. Reads for /devices and Xid
// owner look-ups move the baseline too; their increases wait the same way.
//
// The counts are kept by PCI address, not uuid: unique_id comes from the
// board's firmware, and two boards reporting one would alternate their
// counts in one baseline, every step read as new errors.
type amdRAS struct {
	base    map[string]map[rasKey]rasSeen // GPU PCI address → last count seen
	pending map[string]*rasPending        // GPU PCI address → increases not yet served
	series  map[string]*xidSeries
	trimmed time.Time
}

// rasSeen is a count and the time of the read that saw it.
type rasSeen struct {
	count uint64
	at    time.Time
}

// rasPending are increases of one GPU's counts not yet served, and since
// when: the earliest of the reads before them, after which they happened.
type rasPending struct {
	counts map[rasKey]float64
	since  time.Time
}

func newAMDRAS() amdRAS {
	return amdRAS{base: map[string]map[rasKey]rasSeen{}, pending: map[string]*rasPending{}, series: map[string]*xidSeries{}}
}

// observe takes the counts of the GPU at PCI address pci from a read at
// time at.
func (r *amdRAS) observe(pci string, counts map[string]amd.RASCount, at time.Time) {
	base := r.base[pci]
	if base == nil {
		base = map[rasKey]rasSeen{}
		r.base[pci] = base
	}
	for block, c := range counts {
		for i, v := range rasCounts(c) {
			if !v.OK {
				continue
			}
			k := rasKey{block, amdRASTypes[i]}
			prev, seen := base[k]
			base[k] = rasSeen{v.Value, at}
			var n uint64
			switch {
			case !seen:
			case v.Value >= prev.count:
				n = v.Value - prev.count
			default:
				n = v.Value
			}
			if n == 0 {
				continue
			}
			p := r.pending[pci]
			if p == nil {
				p = &rasPending{counts: map[rasKey]float64{}, since: prev.at}
				r.pending[pci] = p
			}
			p.counts[k] += float64(n)
			if prev.at.Before(p.since) {
				p.since = prev.at
			}
		}
	}
}

// moved follows the GPU that was at PCI address from to address to, first
// seen at this read: its counts start a new baseline there (so nothing is
// pending there yet), and increases not yet served at the old address (a
// read for /devices is not followed by a scrape's serve) are served at
// the new one.
func (r *amdRAS) moved(from, to string) {
	delete(r.base, from)
	if p := r.pending[from]; p != nil {
		delete(r.pending, from)
		r.pending[to] = p
	}
}

// serve credits the pending increases of d, a whole GPU of a scrape's
// snapshot, to its owner in that snapshot. A series it makes starts (its
// created timestamp) at the read before the errors, not at now.
func (r *amdRAS) serve(d *Device, now time.Time) {
	p := r.pending[d.PCIBusID]
	if p == nil {
		return
	}
	delete(r.pending, d.PCIBusID)
	l := deviceLabels(d)
	for k, n := range p.counts {
		sl := l.with("block", k.block).with("type", k.typ)
		key := sl.key()
		s := r.series[key]
		if s == nil {
			s = &xidSeries{labels: sl, created: p.since}
			r.series[key] = s
		}
		s.count += n
		s.last = now
	}
	if len(r.series) > maxEventSeries || now.Sub(r.trimmed) > time.Minute {
		r.trim(now)
	}
}

// trim drops counters past eventRetention, and the oldest beyond
// maxEventSeries, as the Xid counters are trimmed.
func (r *amdRAS) trim(now time.Time) {
	r.trimmed = now
	for k, s := range r.series {
		if now.Sub(s.last) > eventRetention {
			delete(r.series, k)
		}
	}
	if len(r.series) <= maxEventSeries {
		return
	}
	keys := make([]string, 0, len(r.series))
	for k := range r.series {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return r.series[keys[i]].last.Before(r.series[keys[j]].last) })
	for _, k := range keys[:len(keys)-maxEventSeries*9/10] {
		delete(r.series, k)
	}
}

func (r *amdRAS) emit(e emitter) {
	for _, s := range r.series {
		e.emitCreated(amdRASEvents, s.labels, s.count, s.created)
	}
}
