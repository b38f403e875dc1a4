package attribution

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/xpu-exporter/xpu_exporter/attribution/kubernetes"
)

// writeProcess writes the procfs entry of pid: its cgroup and, unless
// start is 0, a stat line whose field 22 (starttime) is start.
func writeProcess(t *testing.T, root string, pid uint32, cgroup string, start uint64) {
	t.Helper()
	dir := filepath.Join(root, fmt.Sprint(pid))
	files := map[string]string{
		"cgroup": "0::" + cgroup + "\n",
		"status": "Name:\tpython3\nUid:\t1000\t1000\t1000\t1000\n",
		"comm":   "python3\n",
	}
	if start != 0 {
		files["stat"] = fmt.Sprintf("%d (python3) S 1 %d %d 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 %d 0 0\n", pid, pid, pid, start)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(dir, "stat"))
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// writeUnitProcesses writes n processes of infa.service started at tick
// 500, PIDs 7000 on, and returns their PIDs.
func writeUnitProcesses(t *testing.T, root string, n int) []uint32 {
	t.Helper()
	pids := make([]uint32, n)
	for i := range pids {
		pids[i] = uint32(7000 + i)
		writeProcess(t, root, pids[i], "/system.slice/infa.service", 500)
	}
	return pids
}

// TestResolvePIDGivenToAnotherProcess: the owner of a PID seen in the
// previous scrape is cached, but a PID the kernel gave to another process
// in between (the PID space wrapped: a busy node with pid_max 32768 does it
// in minutes) comes with another start time and is read anew. The cache
// kept the departed process's owner for the new one's whole life (found by
// probing). A process whose start is unchanged, or cannot be read, keeps
// what is cached: it is the same process.
//
// The scrape that finds the PID reused says so (Ownership.Reused): the
// vendor's samples of that PID over the window hold the former process's
// time too, another owner's where ReusedByOther (probe27 PB1: the new pod
// was billed for its predecessor's half of the window). The scrape after
// finds the same process again and says nothing.
func TestResolvePIDGivenToAnotherProcess(t *testing.T) {
	const pid = 6101
	for _, tc := range []struct {
		name                 string
		startBefore, startAt uint64 // 0: no stat file
		unitAt               string
		want                 string
		reused, byOther      bool
	}{
		{"another owner's process", 500, 900, "infc.service", "infc.service", true, true},
		{"another process of the same owner", 500, 900, "infa.service", "infa.service", true, false},
		{"the same process", 500, 500, "infc.service", "infa.service", false, false},
		{"no stat to tell", 0, 0, "infc.service", "infa.service", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			writeProcess(t, root, pid, "/system.slice/infa.service", tc.startBefore)
			r := New(Config{Procfs: procfs(t, nil)})
			r.cfg.Procfs.Root = root
			resolve := func() *Ownership {
				own := r.Resolve(context.Background(), []Device{{UUID: gpuA, MIGIndex: -1, GRESIndex: -1, PIDs: []uint32{pid}}}).Devices[gpuA]
				if len(own.Claims) != 1 {
					t.Fatalf("%d owners %+v, want one", len(own.Claims), own.Claims)
				}
				return own
			}
			if own := resolve(); own.Claims[0].Owner.Unit != "infa.service" || own.Reused != nil || own.ReusedByOther {
				t.Fatalf("first scrape: unit %q, reused %v (by another owner %v); want infa.service, none", own.Claims[0].Owner.Unit, own.Reused, own.ReusedByOther)
			}
			writeProcess(t, root, pid, "/system.slice/"+tc.unitAt, tc.startAt)
			own := resolve()
			if got := own.Claims[0].Owner.Unit; got != tc.want {
				t.Errorf("after the PID was reused: unit %q, want %q", got, tc.want)
			}
			if got := slices.Equal(own.Reused, []uint32{pid}); got != tc.reused || own.ReusedByOther != tc.byOther {
				t.Errorf("after the PID was reused: reused %v (by another owner %v), want %d reused %v, by another owner %v", own.Reused, own.ReusedByOther, pid, tc.reused, tc.byOther)
			}
			if own := resolve(); own.Reused != nil || own.ReusedByOther {
				t.Errorf("the scrape after: reused %v (by another owner %v), want none: the same process again", own.Reused, own.ReusedByOther)
			}
		})
	}
}

// TestResolveStartChecksSpreadOverScrapes: a scrape reads the start of at
// most startChecks cached PIDs; with more, each is read one scrape in
// period, so a reused PID keeps the old owner for at most period scrapes.
// 2 × startChecks PIDs: period 2, the reuse is seen within two scrapes.
func TestResolveStartChecksSpreadOverScrapes(t *testing.T) {
	root := t.TempDir()
	pids := writeUnitProcesses(t, root, 2*startChecks)
	r := New(Config{Procfs: procfs(t, nil)})
	r.cfg.Procfs.Root = root
	// reread counts the two reused PIDs already credited to infc.service.
	reread := func() int {
		own := r.Resolve(context.Background(), []Device{{UUID: gpuA, MIGIndex: -1, GRESIndex: -1, PIDs: pids}}).Devices[gpuA]
		n := 0
		for _, pid := range pids[:2] {
			if i, ok := own.Process[pid]; ok && i >= 0 && own.Claims[i].Owner.Unit == "infc.service" {
				n++
			}
		}
		return n
	}
	reread()
	writeProcess(t, root, pids[0], "/system.slice/infc.service", 900)
	writeProcess(t, root, pids[1], "/system.slice/infc.service", 900)
	// Neighbouring PIDs are read in different scrapes of the two: one
	// after the first scrape, both after the second.
	for scrape, want := range []int{1, 2} {
		if got := reread(); got != want {
			t.Errorf("scrape %d after the reuse: %d of the 2 reused PIDs read anew, want %d", scrape+1, got, want)
		}
	}
}

// fakeExits stands in for process.Exits: the PIDs it watches, those
// Watch refuses (past the bound), and the exits the next Poll finds.
type fakeExits struct {
	watched, refuse, exits map[uint32]bool
	retained               []uint32
}

func newFakeExits() *fakeExits {
	return &fakeExits{watched: map[uint32]bool{}, refuse: map[uint32]bool{}, exits: map[uint32]bool{}}
}

func (f *fakeExits) Watch(pid uint32) bool {
	if f.refuse[pid] {
		return false
	}
	f.watched[pid] = true
	return true
}

func (f *fakeExits) Poll() (int, error) {
	n := 0
	for pid := range f.exits {
		if f.watched[pid] {
			delete(f.watched, pid)
			n++
		}
	}
	clear(f.exits)
	return n, nil
}

func (f *fakeExits) Watching(pid uint32) bool { return f.watched[pid] }

func (f *fakeExits) Retain(keep func(uint32) bool) {
	f.retained = f.retained[:0]
	for pid := range f.watched {
		if keep(pid) {
			f.retained = append(f.retained, pid)
		} else {
			delete(f.watched, pid)
		}
	}
}

// TestResolveWatchedExits: with pidfds, a cached process that exited is
// read anew at the very next scrape, however many processes there are
// (with start times alone, one of 2 × startChecks PIDs would wait up to two
// scrapes); one that has not exited is kept without reading its start. A
// process Watch refuses (past the bound) is checked by its start time. PIDs
// no longer on a device are no longer watched.
func TestResolveWatchedExits(t *testing.T) {
	root := t.TempDir()
	pids := writeUnitProcesses(t, root, 2*startChecks)
	exits := newFakeExits()
	unwatched := pids[2]
	exits.refuse[unwatched] = true
	r := New(Config{Procfs: procfs(t, nil), Exits: exits})
	r.cfg.Procfs.Root = root
	units := func(pids []uint32) map[uint32]string {
		own := r.Resolve(context.Background(), []Device{{UUID: gpuA, MIGIndex: -1, GRESIndex: -1, PIDs: pids}}).Devices[gpuA]
		got := map[uint32]string{}
		for _, pid := range pids {
			if i, ok := own.Process[pid]; ok && i >= 0 {
				got[pid] = own.Claims[i].Owner.Unit
			}
		}
		return got
	}
	units(pids)
	if len(exits.watched) != len(pids)-1 || exits.watched[unwatched] {
		t.Fatalf("%d processes watched, want all %d but the refused one", len(exits.watched), len(pids)-1)
	}
	// pids[0] exited and its PID went to another process; pids[1] did
	// not exit, yet its files changed (they cannot, for one process: this
	// shows its start time is not read); the unwatched PID was reused too.
	exits.exits[pids[0]] = true
	writeProcess(t, root, pids[0], "/system.slice/infc.service", 900)
	writeProcess(t, root, pids[1], "/system.slice/infc.service", 900)
	writeProcess(t, root, unwatched, "/system.slice/infc.service", 900)
	got := units(pids)
	if got[pids[0]] != "infc.service" || got[pids[1]] != "infa.service" {
		t.Errorf("next scrape: the exited PID's unit %q, want infc.service; the running one's %q, want infa.service", got[pids[0]], got[pids[1]])
	}
	if !exits.watched[pids[0]] {
		t.Error("the PID read anew is not watched")
	}
	// The unwatched PID is the only one checked by start time: period 1,
	// read at this scrape.
	if got[unwatched] != "infc.service" {
		t.Errorf("unwatched reused PID: unit %q, want infc.service", got[unwatched])
	}
	units(pids[:1])
	if len(exits.retained) != 1 || exits.retained[0] != pids[0] {
		t.Errorf("watched after the others left: %v, want [%d]", exits.retained, pids[0])
	}
}

// TestResolveSameWatchedProcesses: when every process is watched for its
// exit and the devices list the same PIDs as at the last scrape, nothing
// is looked up again; that holds only while it is true. A process that
// exits and whose PID goes to another, a new PID, the same PIDs in
// another order, an exited process kept for its samples: each is
// resolved as it would be from scratch.
func TestResolveSameWatchedProcesses(t *testing.T) {
	root := t.TempDir()
	pids := writeUnitProcesses(t, root, 3)
	exits := newFakeExits()
	r := New(Config{Procfs: procfs(t, nil), Exits: exits})
	r.cfg.Procfs.Root = root
	units := func(step string, d Device) map[uint32]string {
		t.Helper()
		d.UUID, d.MIGIndex, d.GRESIndex = gpuA, -1, -1
		own := r.Resolve(context.Background(), []Device{d}).Devices[gpuA]
		got := map[uint32]string{}
		for _, pid := range d.PIDs {
			if i, ok := own.Process[pid]; ok && i >= 0 {
				got[pid] = own.Claims[i].Owner.Unit
			}
		}
		if len(got) != len(d.PIDs) {
			t.Errorf("%s: %d of %d processes attributed", step, len(got), len(d.PIDs))
		}
		return got
	}
	reused := func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.exactPIDs != nil
	}

	units("first", Device{PIDs: pids})
	if !reused() {
		t.Fatal("every process is watched, yet the next scrape would look them up again")
	}
	// pids[0] exits and its PID goes to a process of infc.service: the
	// same PIDs, but Poll finds the exit.
	exits.exits[pids[0]] = true
	writeProcess(t, root, pids[0], "/system.slice/infc.service", 900)
	if got := units("PID reused", Device{PIDs: pids}); got[pids[0]] != "infc.service" || got[pids[1]] != "infa.service" {
		t.Errorf("PID reused: units %v, want %d in infc.service, the others in infa.service", got, pids[0])
	}
	// A new PID, then the same PIDs in another order.
	writeProcess(t, root, 7100, "/system.slice/infd.service", 500)
	if got := units("new PID", Device{PIDs: append(slices.Clone(pids), 7100)}); got[7100] != "infd.service" {
		t.Errorf("new PID: units %v, want 7100 in infd.service", got)
	}
	if got := units("reordered", Device{PIDs: []uint32{7100, pids[2], pids[1], pids[0]}}); got[7100] != "infd.service" || got[pids[0]] != "infc.service" {
		t.Errorf("reordered: units %v", got)
	}
	// 7100 exits; its samples still name it (ExitedPIDs): it is kept for
	// them, so the processes kept are more than the devices list, and the
	// next scrape does not take them for its own.
	exits.exits[7100] = true
	units("7100 exited", Device{PIDs: pids, ExitedPIDs: []uint32{7100}})
	if reused() {
		t.Error("the processes kept hold an exited one, yet the next scrape would reuse them as its own")
	}
	units("after", Device{PIDs: pids})
	if r.procs[7100].info != nil {
		t.Error("the exited process is kept as a running one")
	}
}

// TestResolveConcurrentExit: a scrape and a /devices read resolve at once.
// The read finds that a process exited and its PID went to another; the
// scrape looked before that and still has the old process. Later scrapes
// have the new process, not the old one for good, whichever ends last.
func TestResolveConcurrentExit(t *testing.T) {
	root := t.TempDir()
	pids := writeUnitProcesses(t, root, 2)
	exits := newFakeExits()
	kubelet := &hookedKubelet{}
	r := New(Config{Procfs: procfs(t, nil), Exits: exits, Kubelet: kubelet})
	r.cfg.Procfs.Root = root
	devices := []Device{{UUID: gpuA, MIGIndex: -1, GRESIndex: -1, PIDs: pids}}
	unit := func(res Result) string {
		own := res.Devices[gpuA]
		if i, ok := own.Process[pids[0]]; ok && i >= 0 {
			return own.Claims[i].Owner.Unit
		}
		return ""
	}
	r.Resolve(context.Background(), devices)
	// The scrape has its processes (the kubelet is asked after them);
	// then pids[0] exits, its PID goes to infc.service, and the read
	// resolves before the scrape ends.
	var read Result
	kubelet.onList = func() {
		exits.exits[pids[0]] = true
		writeProcess(t, root, pids[0], "/system.slice/infc.service", 900)
		read = r.Resolve(context.Background(), devices)
	}
	scrape := r.Resolve(context.Background(), devices)
	if got := unit(read); got != "infc.service" {
		t.Fatalf("the read that found the exit: unit %q, want infc.service", got)
	}
	if got := unit(scrape); got != "infa.service" {
		t.Fatalf("the scrape that looked before the exit: unit %q, want infa.service (the test proves nothing)", got)
	}
	for i := range 3 {
		if got := unit(r.Resolve(context.Background(), devices)); got != "infc.service" {
			t.Errorf("scrape %d after both: unit %q, want infc.service", i+1, got)
		}
	}
}

// hookedKubelet lists no pod, and runs onList once when first asked.
type hookedKubelet struct{ onList func() }

func (k *hookedKubelet) ListAllocatable(context.Context) ([]kubernetes.PodResources, error, []kubernetes.ResourceDevices, error) {
	if f := k.onList; f != nil {
		k.onList = nil
		f()
	}
	return nil, nil, nil, nil
}

// TestResolveOverlapUnwatchedProcess: a scrape holding the same PIDs as
// the last (x and y) waits on the kubelet while a /devices read finds y
// gone from the GPU and stops watching it. y's exit can no longer be
// polled; so the scrape that ends after must not leave its processes for
// the next scrape to reuse, or when y's PID goes to another process on the
// GPU that one keeps y's owner (found by review25 R25-1).
func TestResolveOverlapUnwatchedProcess(t *testing.T) {
	root := t.TempDir()
	const x, y = 7000, 7001
	writeProcess(t, root, x, "/system.slice/infa.service", 500)
	writeProcess(t, root, y, "/system.slice/infa.service", 500)
	exits := newFakeExits()
	kubelet := &hookedKubelet{}
	r := New(Config{Procfs: procfs(t, nil), Exits: exits, Kubelet: kubelet})
	r.cfg.Procfs.Root = root
	on := func(pids ...uint32) []Device {
		return []Device{{UUID: gpuA, MIGIndex: -1, GRESIndex: -1, PIDs: pids}}
	}
	r.Resolve(context.Background(), on(x, y))
	kubelet.onList = func() { r.Resolve(context.Background(), on(x)) }
	r.Resolve(context.Background(), on(x, y))
	if exits.watched[y] {
		t.Fatal("y is still watched: the test proves nothing")
	}
	exits.exits[y] = true // not watched: no Poll reports it
	writeProcess(t, root, y, "/system.slice/infc.service", 900)
	own := r.Resolve(context.Background(), on(x, y)).Devices[gpuA]
	if i, ok := own.Process[y]; !ok || i < 0 || own.Claims[i].Owner.Unit != "infc.service" {
		t.Errorf("PID %d, now infc.service's, attributed as %+v", y, own)
	}
}

// TestResolveConcurrentScrapes: scrapes and /devices reads resolve at once,
// reusing processes, carrying exited ones over, and reading anew; under
// -race (make test) it finds a map written while another scrape reads it.
func TestResolveConcurrentScrapes(t *testing.T) {
	root := t.TempDir()
	pids := writeUnitProcesses(t, root, 8)
	r := New(Config{Procfs: procfs(t, nil), Exits: &lockedExits{f: newFakeExits()}, Kubelet: &fakeKubelet{}})
	r.cfg.Procfs.Root = root
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 200 {
				d := Device{UUID: gpuA, MIGIndex: -1, GRESIndex: -1, PIDs: pids}
				if (i+g)%7 == 0 {
					d.PIDs, d.ExitedPIDs = pids[:6], pids[6:]
				}
				own := r.Resolve(context.Background(), []Device{d}).Devices[gpuA]
				for _, pid := range d.PIDs {
					if j, ok := own.Process[pid]; !ok || j < 0 || own.Claims[j].Owner.Unit != "infa.service" {
						t.Errorf("PID %d not attributed to infa.service", pid)
						return
					}
				}
			}
		})
	}
	wg.Wait()
}

// lockedExits is fakeExits safe for concurrent scrapes.
type lockedExits struct {
	mu sync.Mutex
	f  *fakeExits
}

func (l *lockedExits) Watch(pid uint32) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.Watch(pid)
}

func (l *lockedExits) Poll() (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.Poll()
}

func (l *lockedExits) Watching(pid uint32) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.Watching(pid)
}

func (l *lockedExits) Retain(keep func(uint32) bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.f.Retain(keep)
}
