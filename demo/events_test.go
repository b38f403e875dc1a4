package demo

import (
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// TestEventSetOrder: the driver queues every event, so two due at the same
// instant are both delivered, in scenario order, and a periodic event's
// occurrence at the instant of the last delivery is not skipped when it
// comes after that delivery in order (it was, found by probing: only the
// first of two simultaneous Xids reached the exporter).
func TestEventSetOrder(t *testing.T) {
	start := time.Unix(1_000_000, 0)
	s := time.Second
	g := &gpu{}
	es := &eventSet{start: start, devices: []*gpu{g}, registered: map[*gpu]uint64{g: nvml.EventTypeXidCriticalError}, events: []EventSpec{
		{Type: "xid", XID: 79, at: 2 * s},                  // 0
		{Type: "xid", XID: 48, at: 2 * s},                  // 1: same instant as 0
		{Type: "xid", XID: 31, at: s, every: s},            // 2: at 1, 2, 3, ... s
		{Type: "xid", XID: 13, at: 3 * s, every: 0},        // 3
		{Type: "xid", XID: 94, at: 500 * time.Millisecond}, // 4: before the cursor starts
	}}
	// Walk from 1.5 s: at 2 s come 0, 1 and 2 (each once, by index), then
	// 2 and 3 at 3 s, then 2 alone every second.
	last, idx := start.Add(1500*time.Millisecond), len(es.events)
	want := []struct {
		xid uint64
		at  time.Duration
	}{{79, 2 * s}, {48, 2 * s}, {31, 2 * s}, {31, 3 * s}, {13, 3 * s}, {31, 4 * s}, {31, 5 * s}}
	for n, w := range want {
		e, i, at, ok := es.next(last, idx)
		if !ok || e.XID != w.xid || !at.Equal(start.Add(w.at)) {
			t.Fatalf("delivery %d: Xid %d at %v (ok %v), want Xid %d at %v", n, e.XID, at.Sub(start), ok, w.xid, w.at)
		}
		last, idx = at, i
	}

	// A set that starts exactly when events are due delivers none of them:
	// they were before it existed.
	fresh := &eventSet{start: start, devices: es.devices, registered: es.registered, events: es.events[:2]}
	if e, _, at, ok := fresh.next(start.Add(2*s), len(fresh.events)); ok {
		t.Errorf("a set made at 2 s delivers Xid %d at %v", e.XID, at.Sub(start))
	}
}

// TestEventSetDeliversWhatIsRegistered: a set delivers the events of the
// devices registered in it, of the types each was registered for, and no
// other; while a registered device is lost, every wait fails with
// GPU_IS_LOST (nvml.h, nvmlEventSetWait_v2), which is what keeps the
// other GPUs' events from a set holding a lost one.
func TestEventSetDeliversWhatIsRegistered(t *testing.T) {
	start := time.Now()
	s := time.Second
	a, b := &gpu{}, &gpu{}
	es := &eventSet{start: start, devices: []*gpu{a, b}, registered: map[*gpu]uint64{}, events: []EventSpec{
		{Device: 1, Type: "xid", XID: 79, at: s},   // b is not registered
		{Device: 0, Type: "double_bit_ecc", at: s}, // a is registered for Xids only
		{Device: 0, Type: "xid", XID: 48, at: 2 * s},
	}}
	es.register(a, nvml.EventTypeXidCriticalError)
	e, _, at, ok := es.next(start, len(es.events))
	if !ok || e.XID != 48 || !at.Equal(start.Add(2*s)) {
		t.Errorf("first delivery: %+v at %v (ok %v), want Xid 48 of device 0 at 2s", e, at.Sub(start), ok)
	}

	b.sim = &sim{spec: &DeviceSpec{Faults: Faults{Lost: true}}, start: start, now: time.Now}
	a.sim = &sim{spec: &DeviceSpec{}, start: start, now: time.Now}
	if _, ret := es.Wait(10); ret != nvml.ERROR_TIMEOUT {
		t.Errorf("wait with the lost GPU not registered: %v, want a timeout", ret)
	}
	es.register(b, nvml.EventTypeXidCriticalError)
	if _, ret := es.Wait(10); ret != nvml.ERROR_GPU_IS_LOST {
		t.Errorf("wait with a lost GPU registered: %v, want GPU_IS_LOST", ret)
	}
}
