package demo

import "testing"

// TestPIDWatcher: processes 100 and 200 run in generation 0. A PID no
// simulated process has cannot be watched (pidfd_open's ESRCH). Churn to
// generation 1 ends both: Poll finds the 2 watched ones exited. Generation
// 40 gives PID 100 back (churnPIDCycle), to a new process, which is watched
// anew.
func TestPIDWatcher(t *testing.T) {
	s, err := Parse([]byte(`node: w
devices:
  - {model: X, memory_total: 80GiB, processes: [{pid: 100, unit: a.service}, {pid: 200, unit: b.service}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	w := newPIDWatcher(s)
	if !w.Watch(100) || !w.Watch(200) {
		t.Fatal("a running process is not watched")
	}
	if w.Watch(300) {
		t.Error("PID 300, no process's, is watched")
	}
	if n, _ := w.Poll(); n != 0 || !w.Watching(100) {
		t.Errorf("no churn: %d exited, watching 100 %v; want 0, true", n, w.Watching(100))
	}
	s.stats.gen.Store(1)
	if n, _ := w.Poll(); n != 2 || w.Watching(100) || w.Watching(200) {
		t.Errorf("after churn: %d exited, watching 100 %v, 200 %v; want 2, false, false", n, w.Watching(100), w.Watching(200))
	}
	if w.Watch(100) {
		t.Error("PID 100 is watched in generation 1, whose processes have other PIDs")
	}
	if !w.Watch(churnPID(100, 1)) {
		t.Error("generation 1's process is not watched")
	}
	s.stats.gen.Store(churnPIDCycle)
	if n, _ := w.Poll(); n != 1 {
		t.Errorf("generation %d: %d exited, want 1", churnPIDCycle, n)
	}
	if !w.Watch(100) || !w.Watching(100) {
		t.Error("PID 100, given to a new process, is not watched")
	}
	w.Retain(func(pid uint32) bool { return pid != 100 })
	if w.Watching(100) {
		t.Error("Retain kept what it was told to drop")
	}

	// pidfd_limit: 1 and one process watched: the other is refused, as
	// pidfd_open is with no descriptor left, until a watch ends.
	s.PIDFDLimit = 1
	s.stats.gen.Store(0)
	w = newPIDWatcher(s)
	if !w.Watch(100) || w.Watch(200) {
		t.Errorf("limit 1: watching 100 %v, 200 %v; want true, false", w.Watching(100), w.Watching(200))
	}
	w.Retain(func(pid uint32) bool { return pid != 100 })
	if !w.Watch(200) {
		t.Error("limit 1: 200 refused after 100's watch ended")
	}
}
