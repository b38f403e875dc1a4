// Package flight lets concurrent scrapes share work under way: the node
// snapshot, an inference engine's fetch, a /metrics body. Two Prometheus
// servers of an HA pair scrape at about the same time; without sharing,
// each would read the hardware and fetch every engine once more.
//
// One rule holds for every kind of work: a caller joins work under way
// only if it is due no later than the caller's own deadline. Work due later
// may outlive the caller's scrape, which would then have nothing to serve;
// such a caller starts its own. Work that is cut short at its deadline (a
// snapshot reports the devices that have not answered by then down) is
// joined only if it is due at most Group.Slack sooner, too: its answer is
// cut short where the caller's would not be, by no more than that.
package flight

import (
	"context"
	"sync"
	"time"
)

// NoDeadline stands for the deadline of a context that has none: one far
// time for every such caller, so that they share work whichever of them
// starts it.
var NoDeadline = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// ScrapeSlack is the Slack of a scrape's work, its snapshot and response:
// scrapes of one timeout that meet while one is under way are due within
// about that of each other, and one with a longer timeout loses at most
// that of its deadline to the one it joins.
const ScrapeSlack = time.Second

// Deadline is ctx's deadline, or NoDeadline.
func Deadline(ctx context.Context) time.Time {
	if d, ok := ctx.Deadline(); ok {
		return d
	}
	return NoDeadline
}

// Call is one piece of work under way. Val is the leader's to fill before
// Group.Finish; the callers that joined read it once Wait returns.
type Call[V any] struct {
	Val      V
	deadline time.Time
	done     chan struct{}
}

// Wait waits for the call to finish, or for ctx to end first (false).
func (c *Call[V]) Wait(ctx context.Context) bool { return Done(ctx, c.done) }

// Done waits until done is closed (true) or ctx ends (false). Work that
// finished by the time ctx ended counts: select alone picks among ready
// cases at random, and a caller that reaches it late, with both ready,
// would throw away an answer that is there about half the time.
func Done(ctx context.Context, done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	case <-ctx.Done():
	}
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// Group is the work under way, one call per key at most.
type Group[K comparable, V any] struct {
	// Slack, when not zero, is how much sooner than a caller's deadline a
	// call it joins may be due: a call due sooner still is not joined, so
	// that a scrape with a longer timeout is not served what a shorter
	// one's deadline cut short. It must be set before first use.
	Slack time.Duration

	mu    sync.Mutex
	calls map[K]*Call[V]
}

// Join returns the call under way for key if it is due no later than
// deadline, nor more than Slack sooner, and join, called under the group's
// lock with the call's value, accepts it (nil accepts any). Otherwise it
// starts a call due at deadline with value start, which the caller leads
// (true): it does the work, sets Val and calls Finish.
func (g *Group[K, V]) Join(key K, deadline time.Time, start V, join func(*V) bool) (*Call[V], bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if c := g.calls[key]; c != nil && !c.deadline.After(deadline) &&
		(g.Slack == 0 || !c.deadline.Before(deadline.Add(-g.Slack))) && (join == nil || join(&c.Val)) {
		return c, false
	}
	c := &Call[V]{Val: start, deadline: deadline, done: make(chan struct{})}
	if g.calls == nil {
		g.calls = map[K]*Call[V]{}
	}
	// A call due later that this one replaces goes on for its own callers;
	// only this one is joined from now on.
	g.calls[key] = c
	return c, true
}

// Peek calls f with the value of the call under way for key, if any, under
// the group's lock: for watching the work rather than joining it.
func (g *Group[K, V]) Peek(key K, f func(*V)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if c := g.calls[key]; c != nil {
		f(&c.Val)
	}
}

// Finish ends the call the caller leads: no one joins it any more, and the
// callers that did are woken.
func (g *Group[K, V]) Finish(key K, c *Call[V]) {
	g.mu.Lock()
	if g.calls[key] == c {
		delete(g.calls, key)
	}
	g.mu.Unlock()
	close(c.done)
}
