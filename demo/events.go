package demo

import (
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

var eventBits = map[string]uint64{
	"xid":            nvml.EventTypeXidCriticalError,
	"double_bit_ecc": nvml.EventTypeDoubleBitEccError,
	"single_bit_ecc": nvml.EventTypeSingleBitEccError,
}

// eventSet delivers the scenario's events in real time, as NVML's
// nvmlEventSetWait does: each Wait blocks until the next event or its
// timeout. It delivers only the events of the devices registered in it, of
// the types they were registered for, and fails with GPU_IS_LOST while one
// of them is lost (nvml.h, nvmlEventSetWait_v2: NVML_ERROR_GPU_IS_LOST "if
// a GPU has fallen off the bus or is otherwise inaccessible").
type eventSet struct {
	nvml.EventSet
	events  []EventSpec
	devices []*gpu // by scenario index, nil for other vendors'
	start   time.Time

	mu sync.Mutex
	// registered holds each registered GPU's event mask.
	registered map[*gpu]uint64
	// last is the time and index of the last event delivered: events due
	// at the same instant are all delivered, in scenario order, as the
	// driver queues each one.
	last    time.Time
	lastIdx int
}

func newEventSet(s *Scenario, devices []*gpu, start time.Time) *eventSet {
	return &eventSet{events: s.Events, devices: devices, start: start, last: time.Now(), lastIdx: len(s.Events), registered: map[*gpu]uint64{}}
}

func (es *eventSet) register(g *gpu, mask uint64) {
	es.mu.Lock()
	defer es.mu.Unlock()
	es.registered[g] |= mask
}

// delivers says the set delivers e: its device is registered for its type.
// Called with mu held.
func (es *eventSet) delivers(e EventSpec) bool {
	return es.registered[es.devices[e.Device]]&eventBits[e.Type] != 0
}

func (es *eventSet) Free() nvml.Return { return nvml.SUCCESS }

// next is the first occurrence of any event after the one at t with index
// idx, ordered by time and then by index.
func (es *eventSet) next(t time.Time, idx int) (EventSpec, int, time.Time, bool) {
	var best EventSpec
	var bestAt time.Time
	bestIdx, found := 0, false
	for i, e := range es.events {
		if !es.delivers(e) {
			continue
		}
		at := es.start.Add(e.at)
		if at.Before(t) && e.every > 0 {
			at = at.Add((t.Sub(at) + e.every - 1) / e.every * e.every) // the first occurrence at or after t
		}
		if at.Equal(t) && i <= idx && e.every > 0 {
			at = at.Add(e.every)
		}
		if at.Before(t) || (at.Equal(t) && i <= idx) {
			continue
		}
		if !found || at.Before(bestAt) {
			best, bestIdx, bestAt, found = e, i, at, true
		}
	}
	return best, bestIdx, bestAt, found
}

// Wait is nvmlEventSetWait.
func (es *eventSet) Wait(timeoutMs uint32) (nvml.EventData, nvml.Return) {
	es.mu.Lock()
	for g := range es.registered {
		if g.lost() {
			es.mu.Unlock()
			return nvml.EventData{}, nvml.ERROR_GPU_IS_LOST
		}
	}
	e, idx, at, ok := es.next(es.last, es.lastIdx)
	es.mu.Unlock()
	timeout := time.Duration(timeoutMs) * time.Millisecond
	if !ok || time.Until(at) > timeout {
		time.Sleep(timeout)
		return nvml.EventData{}, nvml.ERROR_TIMEOUT
	}
	time.Sleep(time.Until(at))
	es.mu.Lock()
	es.last, es.lastIdx = at, idx
	es.mu.Unlock()
	data := nvml.EventData{
		Device:            es.devices[e.Device],
		EventType:         eventBits[e.Type],
		GpuInstanceId:     ^uint32(0),
		ComputeInstanceId: ^uint32(0),
	}
	if e.Type == "xid" {
		data.EventData = e.XID
	}
	if e.GPUInstance != nil {
		data.GpuInstanceId = uint32(*e.GPUInstance)
		if e.ComputeInstance != nil {
			data.ComputeInstanceId = uint32(*e.ComputeInstance)
		}
	}
	return data, nvml.SUCCESS
}
