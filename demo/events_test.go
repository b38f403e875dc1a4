package demo

import (
	"testing"
	"time"
)

// TestEventSetOrder: the driver queues every event, so two due at the same
// instant are both delivered, in scenario order, and a periodic event's
// occurrence at the instant of the last delivery is not skipped when it
// comes after that delivery in order (it was, found by probing: only the
// first of two simultaneous Xids reached the exporter).
func TestEventSetOrder(t *testing.T) {
	start := time.Unix(1_000_000, 0)
	s := time.Second
	es := &eventSet{start: start, events: []EventSpec{
		{XID: 79, at: 2 * s},                  // 0
		{XID: 48, at: 2 * s},                  // 1: same instant as 0
		{XID: 31, at: s, every: s},            // 2: at 1, 2, 3, ... s
		{XID: 13, at: 3 * s, every: 0},        // 3
		{XID: 94, at: 500 * time.Millisecond}, // 4: before the cursor starts
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
	fresh := &eventSet{start: start, events: es.events[:2]}
	if e, _, at, ok := fresh.next(start.Add(2*s), len(fresh.events)); ok {
		t.Errorf("a set made at 2 s delivers Xid %d at %v", e.XID, at.Sub(start))
	}
}
