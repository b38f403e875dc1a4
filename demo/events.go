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
// timeout.
type eventSet struct {
	nvml.EventSet
	events  []EventSpec
	devices []nvml.Device
	start   time.Time

	mu   sync.Mutex
	last time.Time // time of the last event delivered
}

func newEventSet(s *Scenario, devices []nvml.Device, start time.Time) *eventSet {
	return &eventSet{events: s.Events, devices: devices, start: start, last: time.Now()}
}

func (es *eventSet) Free() nvml.Return { return nvml.SUCCESS }

// next is the first occurrence of any event after t.
func (es *eventSet) next(t time.Time) (EventSpec, time.Time, bool) {
	var best EventSpec
	var bestAt time.Time
	found := false
	for _, e := range es.events {
		at := es.start.Add(e.at)
		if !at.After(t) {
			if e.every == 0 {
				continue
			}
			n := t.Sub(at)/e.every + 1
			at = at.Add(n * e.every)
		}
		if !found || at.Before(bestAt) {
			best, bestAt, found = e, at, true
		}
	}
	return best, bestAt, found
}

// Wait is nvmlEventSetWait.
func (es *eventSet) Wait(timeoutMs uint32) (nvml.EventData, nvml.Return) {
	es.mu.Lock()
	e, at, ok := es.next(es.last)
	es.mu.Unlock()
	timeout := time.Duration(timeoutMs) * time.Millisecond
	if !ok || time.Until(at) > timeout {
		time.Sleep(timeout)
		return nvml.EventData{}, nvml.ERROR_TIMEOUT
	}
	time.Sleep(time.Until(at))
	es.mu.Lock()
	es.last = at
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
	return data, nvml.SUCCESS
}
