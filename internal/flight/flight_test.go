package flight

import (
	"context"
	"testing"
	"time"
)

// The joining rule: a caller joins a call under way due no later than its
// own deadline and accepted by join; a caller due sooner, or refused, leads
// a call of its own, which the next callers join; a finished call is joined
// by no one.
func TestJoin(t *testing.T) {
	var g Group[string, int]
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

	first, lead := g.Join("a", t0.Add(10*time.Second), 1, nil)
	if !lead || first.Val != 1 {
		t.Fatalf("first caller: leader %v, value %d; want to lead with 1", lead, first.Val)
	}
	if c, lead := g.Join("a", t0.Add(20*time.Second), 2, nil); lead || c != first {
		t.Error("a caller due later did not join the call due sooner")
	}
	if c, lead := g.Join("b", t0.Add(20*time.Second), 3, nil); !lead || c == first {
		t.Error("another key joined a's call")
	}
	if _, lead := g.Join("a", t0.Add(20*time.Second), 4, func(v *int) bool { return *v != 1 }); !lead {
		t.Error("a caller refusing the call under way joined it")
	}
	sooner, lead := g.Join("a", t0.Add(5*time.Second), 5, nil)
	if !lead || sooner == first {
		t.Fatal("a caller due sooner joined a call due later")
	}
	if c, _ := g.Join("a", t0.Add(6*time.Second), 6, nil); c != sooner {
		t.Error("the next caller did not join the newest call")
	}

	var peeked int
	g.Peek("a", func(v *int) { peeked = *v })
	if peeked != 5 {
		t.Errorf("Peek saw %d, want the newest call's 5", peeked)
	}

	// Finishing the replaced call leaves the newest one in place.
	g.Finish("a", first)
	if c, _ := g.Join("a", t0.Add(6*time.Second), 7, nil); c != sooner {
		t.Error("finishing a replaced call ended the newest one")
	}
	if !first.Wait(context.Background()) {
		t.Error("Wait on a finished call")
	}
	g.Finish("a", sooner)
	if _, lead := g.Join("a", t0.Add(6*time.Second), 8, nil); !lead {
		t.Error("a finished call was joined")
	}
}

// With Slack, a caller due later than the call under way by more than
// Slack leads its own: the call's answer is cut short sooner than it has
// to be. Due later by Slack or less, it joins.
func TestJoinSlack(t *testing.T) {
	g := Group[string, int]{Slack: time.Second}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	first, _ := g.Join("a", t0.Add(10*time.Second), 1, nil)
	if c, lead := g.Join("a", t0.Add(11*time.Second), 2, nil); lead || c != first {
		t.Error("a caller due Slack later did not join")
	}
	later, lead := g.Join("a", t0.Add(11*time.Second+time.Millisecond), 3, nil)
	if !lead || later == first {
		t.Fatal("a caller due more than Slack later joined")
	}
	if c, lead := g.Join("a", t0.Add(12*time.Second), 4, nil); lead || c != later {
		t.Error("the next caller did not join the newest call")
	}
}

func TestWaitEndsWithContext(t *testing.T) {
	var g Group[int, int]
	c, _ := g.Join(0, NoDeadline, 0, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if c.Wait(ctx) {
		t.Error("Wait returned true for a call never finished")
	}
}

func TestDeadline(t *testing.T) {
	if d := Deadline(context.Background()); !d.Equal(NoDeadline) {
		t.Errorf("no deadline: %v", d)
	}
	want := time.Now().Add(time.Minute)
	ctx, cancel := context.WithDeadline(context.Background(), want)
	defer cancel()
	if d := Deadline(ctx); !d.Equal(want) {
		t.Errorf("Deadline = %v, want %v", d, want)
	}
}

// A call that finished before the caller's context ended counts even when
// Wait is reached only after both: select alone would pick at random.
func TestWaitFinishedBeforeDeadline(t *testing.T) {
	var g Group[string, int]
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for i := range 100 {
		c, _ := g.Join("a", time.Now().Add(time.Second), i, nil)
		g.Finish("a", c)
		if !c.Wait(ctx) {
			t.Fatalf("round %d: a finished call reported as not finished", i)
		}
	}
}
