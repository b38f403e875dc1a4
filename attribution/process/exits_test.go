package process

import (
	"os/exec"
	"testing"
)

// startSleeper starts a child that lives until killed, reaped at cleanup.
func startSleeper(t testing.TB) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd
}

func newTestExits(t testing.TB) *Exits {
	t.Helper()
	x, err := NewExits("")
	if err != nil {
		t.Skipf("no pidfd here: %v", err)
	}
	t.Cleanup(func() { x.Close() })
	return x
}

// TestExits: of two watched children, the one killed is reported once,
// and only it; a PID that does not exist is not watched.
func TestExits(t *testing.T) {
	x := newTestExits(t)
	a, b := startSleeper(t), startSleeper(t)
	pa, pb := uint32(a.Process.Pid), uint32(b.Process.Pid)
	if !x.Watch(pa) || !x.Watch(pb) {
		t.Fatal("children not watched")
	}
	if n, err := x.Poll(); err != nil || n != 0 || !x.Watching(pa) || !x.Watching(pb) {
		t.Fatalf("Poll = %d, %v before any exit", n, err)
	}
	a.Process.Kill()
	a.Wait()
	if n, err := x.Poll(); err != nil || n != 1 || x.Watching(pa) || !x.Watching(pb) {
		t.Fatalf("Poll = %d, %v; want the killed child alone gone", n, err)
	}
	if n, _ := x.Poll(); n != 0 {
		t.Errorf("Poll = %d the second time, want 0", n)
	}
	if x.Watched() != 1 {
		t.Errorf("%d watched, want 1", x.Watched())
	}
	if x.Watch(pa) {
		t.Error("a reaped PID is watched")
	}
}

// TestExitsKilledWhileZombie: a child that exited but is not reaped yet
// (a zombie) has exited.
func TestExitsKilledWhileZombie(t *testing.T) {
	x := newTestExits(t)
	c := startSleeper(t)
	pid := uint32(c.Process.Pid)
	x.Watch(pid)
	c.Process.Kill()
	// Not reaped until cleanup; the kernel marks the exit at once, but
	// the signal is delivered asynchronously.
	for range 1000 {
		if n, _ := x.Poll(); n == 1 && !x.Watching(pid) {
			return
		}
		exec.Command("true").Run() // let the kill land
	}
	t.Fatal("the killed child's exit was never reported")
}

// TestExitsRetainAndBound: Retain stops watching what it is not given, and
// no more than max processes are watched.
func TestExitsRetainAndBound(t *testing.T) {
	x := newTestExits(t)
	x.max = 2
	cs := []*exec.Cmd{startSleeper(t), startSleeper(t), startSleeper(t)}
	var pids []uint32
	for _, c := range cs {
		pids = append(pids, uint32(c.Process.Pid))
	}
	if !x.Watch(pids[0]) || !x.Watch(pids[1]) || x.Watch(pids[2]) {
		t.Fatal("the bound of 2 is not kept")
	}
	x.Retain(func(pid uint32) bool { return pid == pids[1] })
	if x.Watched() != 1 || !x.Watch(pids[2]) {
		t.Fatal("Retain did not stop watching the others")
	}
	// An unwatched process's exit is not reported.
	cs[0].Process.Kill()
	cs[0].Wait()
	if n, _ := x.Poll(); n != 0 {
		t.Errorf("Poll = %d, want 0", n)
	}
}

// TestNewExitsRefusesOtherProcfs: a procfs whose self is not this process
// (a fixture tree here) would have pidfd_open take its PIDs for others.
func TestNewExitsRefusesOtherProcfs(t *testing.T) {
	if _, err := NewExits(fixturesProcfs); err == nil {
		t.Fatal("a fixture procfs was accepted")
	}
}

// BenchmarkExitsScrape is one scrape's check of 100 watched processes.
func BenchmarkExitsScrape(b *testing.B) {
	x := newTestExits(b)
	for range 100 {
		x.Watch(uint32(startSleeper(b).Process.Pid))
	}
	b.ReportAllocs()
	for b.Loop() {
		if n, err := x.Poll(); err != nil || n != 0 {
			b.Fatal(n, err)
		}
	}
}
