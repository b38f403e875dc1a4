package collector

import (
	"context"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

func init() {
	registerCollector("process", false,
		"Per-process GPU memory series. One series per process: on nodes with many short-lived processes this grows the number of series Prometheus stores, so it is off by default", newProcessCollector)
}

var processMemory = gauge("process_memory_used_bytes", "Device memory used by one process.")

type processCollector struct{}

func newProcessCollector(Config) (Collector, error) { return processCollector{}, nil }

func (processCollector) Update(_ context.Context, snap *Snapshot, ch chan<- prometheus.Metric) error {
	e := emitter{ch: ch}
	for _, d := range snap.Devices {
		l := deviceLabels(d)
		for _, p := range d.Processes {
			if p.MemoryUsed != nil {
				e.emit(processMemory, l.with("pid", strconv.FormatUint(uint64(p.PID), 10)), float64(*p.MemoryUsed))
			}
		}
	}
	return nil
}
