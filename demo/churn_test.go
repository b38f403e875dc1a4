package demo

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestChurnParse(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"too fast", "churn_every: 100us\ndevices:\n  - {model: X, memory_total: 1GiB}\n", `churn_every: "100us"; at most one generation a millisecond`},
		{"not a duration", "churn_every: often\ndevices:\n  - {model: X, memory_total: 1GiB}\n", `churn_every: "often" is not a duration`},
		{"PID too large", "churn_every: 1s\ndevices:\n  - {model: X, memory_total: 1GiB, processes: [{pid: 100000}]}\n", "churn_every: process 100000; with churn, PIDs stay below 100000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Parse([]byte(tc.yaml)); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Parse error = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestChurnNames(t *testing.T) {
	// Generation 3 of PID 41237: 41237 + (3 mod 40) × 100,000 = 341,237;
	// generation 43 comes back to it.
	if got := churnPID(41237, 3); got != 341237 {
		t.Errorf("churnPID(41237, 3) = %d, want 341237", got)
	}
	if churnPID(41237, 43) != churnPID(41237, 3) || churnPID(41237, 0) != 41237 {
		t.Error("PIDs do not cycle every 40 generations from the scenario's own")
	}
	// The largest PID a churning scenario may use stays within pid_max:
	// 99,999 + 39 × 100,000 = 3,999,999 < 4,194,304.
	if got := churnPID(99999, 39); got != 3999999 {
		t.Errorf("churnPID(99999, 39) = %d, want 3999999", got)
	}
	if churnName("pod", 0) != "pod" || churnName("pod", 7) != "pod-g7" {
		t.Errorf("names: %q %q", churnName("pod", 0), churnName("pod", 7))
	}
	uid := "3f6c2a1e-8b4d-4e2f-9a7c-1d5e8f0b2c61"
	if churnUID(uid, 0) != uid || churnUID(uid, 1) == churnUID(uid, 2) || len(churnUID(uid, 1)) != len(uid) {
		t.Errorf("UIDs: %q %q %q", churnUID(uid, 0), churnUID(uid, 1), churnUID(uid, 2))
	}
}

// With churn, the PIDs NVML reports move on and procfs follows them: every
// reported PID has its procfs entry, in its new pod's cgroup, and the
// scenario's own PIDs are gone.
func TestChurnMovesProcessesAndPods(t *testing.T) {
	s := Default()
	s.churnEvery = 20 * time.Millisecond
	a := started(t, s)
	lib := s.NVML(time.Now(), time.Now)
	for deadline := time.Now().Add(10 * time.Second); s.stats.gen.Load() < 2; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no churn within 10 s")
		}
	}
	a.stopChurn() // hold the generation still while checking it
	a.stopChurn = nil
	gen := s.stats.gen.Load()
	dev, _ := lib.DeviceGetHandleByIndex(0)
	procs, _ := dev.GetComputeRunningProcesses()
	if len(procs) != 1 || procs[0].Pid != churnPID(41237, gen) {
		t.Fatalf("GPU 0 reports %+v in generation %d, want PID %d", procs, gen, churnPID(41237, gen))
	}
	cgroup, err := os.ReadFile(filepath.Join(a.Procfs, strconv.Itoa(int(procs[0].Pid)), "cgroup"))
	if err != nil {
		t.Fatal(err)
	}
	want := strings.ReplaceAll(churnUID("3f6c2a1e-8b4d-4e2f-9a7c-1d5e8f0b2c61", gen), "-", "_")
	if !strings.Contains(string(cgroup), want) {
		t.Errorf("cgroup %q does not name the pod's generation-%d UID %s", cgroup, gen, want)
	}
	if _, err := os.Stat(filepath.Join(a.Procfs, "41237")); !os.IsNotExist(err) {
		t.Errorf("the first generation's process is still in procfs: %v", err)
	}
}
