package demo

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/xpu-exporter/xpu_exporter/attribution/kubernetes/kubelettest"
)

// Churn (churn_every) replaces the node's pods and processes with new ones
// of the same spec, generation after generation: generation 0 is the
// scenario as written; generation g renames each pod <name>-g<g> with a new
// UID and moves each process to a new PID. The engines follow their pods,
// so each generation is a new set of engine targets too.

// churnPIDStride spaces the generations' PIDs: a scenario with churn keeps
// its PIDs below it, and generation g adds (g mod churnPIDCycle) strides,
// staying below Linux's largest pid_max (2^22 = 4,194,304). PIDs come back
// after churnPIDCycle generations, as a real node's do.
const (
	churnPIDStride = 100000
	churnPIDCycle  = 40
)

func churnPID(pid uint32, gen uint64) uint32 {
	return pid + uint32(gen%churnPIDCycle)*churnPIDStride
}

func churnName(name string, gen uint64) string {
	if gen == 0 {
		return name
	}
	return fmt.Sprintf("%s-g%d", name, gen)
}

// churnUID is a pod's UID in generation gen, unique per pod and generation.
func churnUID(uid string, gen uint64) string {
	if gen == 0 {
		return uid
	}
	return fmt.Sprintf("%08x-0000-4000-8000-%012x", hashString(uid), gen&(1<<48-1))
}

func churnPod(p kubelettest.Pod, gen uint64) kubelettest.Pod {
	p.Name, p.UID = churnName(p.Name, gen), churnUID(p.UID, gen)
	return p
}

func (s *Scenario) validateChurn() []error {
	var err error
	if s.churnEvery, err = parseDuration(s.ChurnEvery, 0); err != nil {
		return []error{fmt.Errorf("churn_every: %w", err)}
	}
	if s.ChurnEvery == "" {
		return nil
	}
	var errs []error
	if s.churnEvery < time.Millisecond {
		errs = append(errs, fmt.Errorf("churn_every: %q; at most one generation a millisecond", s.ChurnEvery))
	}
	for _, p := range s.processes() {
		if p.PID >= churnPIDStride {
			errs = append(errs, fmt.Errorf("churn_every: process %d; with churn, PIDs stay below %d", p.PID, churnPIDStride))
		}
	}
	return errs
}

// startChurn moves the node to a new generation every churn_every until
// the returned function is called; that waits for the loop to end.
func (s *Scenario) startChurn(a *Attribution) func() {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(s.churnEvery)
		defer t.Stop()
		for gen := uint64(1); ; gen++ {
			select {
			case <-done:
				return
			case <-t.C:
			}
			s.churn(a, gen, time.Now())
		}
	})
	return func() { close(done); wg.Wait() }
}

// churn moves to generation gen, begun at the time at, in the order a node
// does: the new processes and pods exist before NVML reports them, and the
// old ones go after. A write that fails leaves a process without owner
// until the next generation, as a process gone between NVML's and procfs'
// answers would.
func (s *Scenario) churn(a *Attribution, gen uint64, at time.Time) {
	_ = s.writeProcesses(a.Procfs, gen)
	if a.Kubelet != nil {
		for _, p := range s.Kubernetes.Pods {
			_ = a.Kubelet.SetPod(churnPod(p, gen))
		}
	}
	if a.AMD != nil {
		// The AMD DRM clients are written for the generation current at
		// the time: none is written for the old one after its processes
		// are gone.
		a.AMD.mu.Lock()
		defer a.AMD.mu.Unlock()
	}
	s.stats.gens.begin(gen, at, s.longestSampleSpan())
	s.stats.gen.Store(gen)
	if a.Kubelet != nil {
		for _, p := range s.Kubernetes.Pods {
			a.Kubelet.RemovePod(p.Namespace, churnName(p.Name, gen-1))
		}
	}
	for _, p := range s.processes() {
		os.RemoveAll(filepath.Join(a.Procfs, fmt.Sprint(churnPID(p.PID, gen-1))))
	}
}

// genHistory is when each churn generation began, in wall time (churn and
// the demo's NVML both run on it). Changes older than the longest sample
// buffer any device keeps are forgotten: no read reaches back to them.
type genHistory struct {
	mu      sync.Mutex
	changes []genChange // oldest first; before the first, generation 0 ran
	head    int         // changes[:head] are forgotten
}

type genChange struct {
	at  int64 // Unix nanoseconds
	gen uint64
}

// begin records that generation gen began at t, forgetting the changes
// that ended longer than keep before t.
func (h *genHistory) begin(gen uint64, t time.Time, keep time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.changes = append(h.changes, genChange{t.UnixNano(), gen})
	horizon := t.Add(-keep).UnixNano()
	for h.head+1 < len(h.changes) && h.changes[h.head+1].at <= horizon {
		h.head++
	}
	if h.head > len(h.changes)/2 {
		h.changes = append(h.changes[:0], h.changes[h.head:]...)
		h.head = 0
	}
}

// at is the generation that ran at t: the last to begin at or before it,
// 0 before the first. Once changes are forgotten, a time before the first
// kept is older than any buffer reaches, and asked for by no read.
func (h *genHistory) at(t time.Time) uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	live := h.changes[h.head:]
	if i := sort.Search(len(live), func(i int) bool { return live[i].at > t.UnixNano() }); i > 0 {
		return live[i-1].gen
	}
	return 0
}

// longestSampleSpan is the longest time any NVIDIA device's sample buffer
// covers: sample_buffer periods of its sample_period.
func (s *Scenario) longestSampleSpan() time.Duration {
	var span time.Duration
	for i := range s.Devices {
		span = max(span, time.Duration(s.Devices[i].SampleBuffer)*s.Devices[i].samplePeriod)
	}
	return span
}
