package attribution

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
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
func TestResolvePIDGivenToAnotherProcess(t *testing.T) {
	const pid = 6101
	for _, tc := range []struct {
		name                 string
		startBefore, startAt uint64 // 0: no stat file
		want                 string
	}{
		{"another process", 500, 900, "infc.service"},
		{"the same process", 500, 500, "infa.service"},
		{"no stat to tell", 0, 0, "infa.service"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			writeProcess(t, root, pid, "/system.slice/infa.service", tc.startBefore)
			r := New(Config{Procfs: procfs(t, nil)})
			r.cfg.Procfs.Root = root
			owner := func() string {
				own := r.Resolve(context.Background(), []Device{{UUID: gpuA, MIGIndex: -1, GRESIndex: -1, PIDs: []uint32{pid}}}).Devices[gpuA]
				if len(own.Claims) != 1 {
					t.Fatalf("%d owners %+v, want one", len(own.Claims), own.Claims)
				}
				return own.Claims[0].Owner.Unit
			}
			if got := owner(); got != "infa.service" {
				t.Fatalf("first scrape: unit %q, want infa.service", got)
			}
			writeProcess(t, root, pid, "/system.slice/infc.service", tc.startAt)
			if got := owner(); got != tc.want {
				t.Errorf("after the PID was reused: unit %q, want %q", got, tc.want)
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
