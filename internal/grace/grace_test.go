package grace

import (
	"testing"
	"time"
)

// A failure is held from its first sight (t0) until Period has passed:
// held at t0 and t0+999ms, told at t0+1s and after; a key deleted (the
// failure ended) starts again. The zero Holds is ready.
func TestHold(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var h Holds
	for _, step := range []struct {
		at   time.Duration
		held bool
	}{{0, true}, {999 * time.Millisecond, true}, {time.Second, false}, {5 * time.Second, false}} {
		if got := h.Hold("gpu0", t0.Add(step.at)); got != step.held {
			t.Errorf("at +%v: held %v, want %v", step.at, got, step.held)
		}
	}
	delete(h, "gpu0")
	if !h.Hold("gpu0", t0.Add(10*time.Second)) {
		t.Error("a failure seen again after it ended is not held")
	}
	if !h.Hold("gpu1", t0.Add(10*time.Second)) {
		t.Error("another key's failure is not held")
	}
}
