package collector

import (
	"context"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

func init() {
	registerCollector("process", false,
		"Per-process series (GPU memory and utilization of every GPU process, with its owner). One series per process: on nodes with many short-lived processes this grows the number of series Prometheus stores, so it is off by default", newProcessCollector)
}

var (
	processMemory = gauge("process_memory_used_bytes", "Device memory used by one process.")
	processUtil   = gauge("process_utilization_ratio", "Share of the device's time one process used since the previous scrape: the time-weighted mean of its per-process samples over the driver's sample periods since then (NVIDIA, NVML), or its DRM clients' gfx and compute engine time over that time (AMD, fdinfo).")
)

type processCollector struct{}

func newProcessCollector(Config) (Collector, error) { return processCollector{}, nil }

// Update labels each process with its device and with its own owner (the
// pod, job or unit it runs for), even on a device with several owners.
func (processCollector) Update(_ context.Context, snap *Snapshot, ch chan<- prometheus.Metric) error {
	e := newEmitter(ch)
	defer e.flush()
	for _, d := range snap.Devices {
		id := identityLabels(d)
		// An owner's labels are built once per device, not per process: a
		// pod may run hundreds of processes. Slot len(d.Claims) is for
		// processes without an owner.
		owners := make([]labels, len(d.Claims)+1)
		ownerLabels := func(k int) labels {
			if owners[k].names == nil {
				owners[k] = id
				if k < len(d.Claims) {
					owners[k] = id.withOwner(d.Claims[k].Owner)
				}
			}
			return owners[k]
		}
		for _, p := range d.Processes {
			k := len(d.Claims)
			if i, ok := d.ProcessOwner[p.PID]; ok && i >= 0 {
				k = i
			}
			l := ownerLabels(k)
			if stray, ok := d.ProcessStrays[p.PID]; ok {
				// A process outside the device's owners (a host daemon
				// on an allocated GPU): its own owner, few such per GPU.
				l = id.withOwner(stray)
			}
			l = l.with("pid", strconv.FormatUint(uint64(p.PID), 10))
			if p.MemoryUsed != nil {
				e.emit(processMemory, l, float64(*p.MemoryUsed))
			}
			if p.Utilization != nil && !p.Mixed {
				e.emit(processUtil, l, *p.Utilization)
			}
		}
	}
	return nil
}
