package demo

import "sync"

// PIDWatcher is the demo's pidfd_open(2) over its simulated processes: it
// watches them for their exit as the exporter's process.Exits watches real
// ones, which a fixture procfs's made-up PIDs cannot be. pidfd_open(2):
// the descriptor "refers to" one process, and "When the process that it
// refers to terminates, these interfaces indicate the file descriptor as
// readable"; a process that does not exist is ESRCH. A simulated process
// exits when churn replaces its generation, so Poll finds every process
// watched in an earlier generation gone, though a later one may hold its
// PID again (churn brings PIDs back, as a busy node does).
//
// The scenario's pidfd: false leaves the demo without it, as a kernel
// before Linux 5.3 or a seccomp profile that refuses pidfd_open does: the
// exporter then checks cached processes by their start time.
type PIDWatcher struct {
	s *Scenario

	mu      sync.Mutex
	watched map[uint32]uint64 // PID → the generation it was watched in
	pidsGen uint64
	pids    map[uint32]bool // the processes of generation pidsGen
}

func newPIDWatcher(s *Scenario) *PIDWatcher {
	return &PIDWatcher{s: s, watched: map[uint32]uint64{}}
}

// current returns the running generation and its PIDs. Called with mu held.
func (w *PIDWatcher) current() (uint64, map[uint32]bool) {
	gen := w.s.stats.gen.Load()
	if w.pids == nil || gen != w.pidsGen {
		procs := w.s.processes()
		w.pids = make(map[uint32]bool, len(procs))
		for _, p := range procs {
			w.pids[churnPID(p.PID, gen)] = true
		}
		w.pidsGen = gen
	}
	return gen, w.pids
}

// Watch starts watching pid, and says whether it does: not when no
// simulated process has it now.
func (w *PIDWatcher) Watch(pid uint32) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	gen, pids := w.current()
	if !pids[pid] {
		return false
	}
	if _, again := w.watched[pid]; !again && w.s.PIDFDLimit > 0 && len(w.watched) >= w.s.PIDFDLimit {
		return false // EMFILE: no descriptor left for it
	}
	w.watched[pid] = gen
	return true
}

// Poll stops watching the processes that exited, and says how many.
func (w *PIDWatcher) Poll() (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	gen, _ := w.current()
	n := 0
	for pid, g := range w.watched {
		if g != gen {
			delete(w.watched, pid)
			n++
		}
	}
	return n, nil
}

// Watching says whether pid is watched and had not exited at the last Poll.
func (w *PIDWatcher) Watching(pid uint32) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.watched[pid]
	return ok
}

// Retain stops watching the processes keep does not want.
func (w *PIDWatcher) Retain(keep func(pid uint32) bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for pid := range w.watched {
		if !keep(pid) {
			delete(w.watched, pid)
		}
	}
}
