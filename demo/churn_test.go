package demo

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/xpu-exporter/xpu_exporter/attribution/kubernetes/kubelettest"
	"github.com/xpu-exporter/xpu_exporter/internal/procself"
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

// After a churn the driver's buffer still holds the periods before it, and
// those were used by the old generation's processes: their entries name the
// old PIDs (they named the new ones, found by probing, so an exporter
// seemed to bill a new pod for time before it existed).
func TestChurnBufferedSamplesKeepTheirPIDs(t *testing.T) {
	s, err := Parse([]byte(`churn_every: 1h
devices:
  - {model: NVIDIA H100 80GB HBM3, memory_total: 80GiB, processes: [{pid: 500, memory_used: 1GiB, utilization: 0.6}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Unix(1_000_000, 0)
	now := start.Add(10500 * time.Millisecond)
	// Generation 1 begins at 5.2 s. Periods are 1 s and end on whole
	// seconds; a period belongs to the generation running at its middle:
	// the one ending at 5 s (middle 4.5 s) to generation 0, PID 500; the
	// one ending at 6 s (middle 5.5 s) to generation 1, PID 500 + 100,000.
	s.stats.gens.begin(1, start.Add(5200*time.Millisecond), time.Hour)
	s.stats.gen.Store(1)
	dev, _ := s.NVML(start, func() time.Time { return now }).DeviceGetHandleByIndex(0)
	entries, ret := dev.GetProcessUtilization(uint64(start.UnixMicro()))
	if ret != nvml.SUCCESS {
		t.Fatal(nvml.ErrorString(ret))
	}
	got := map[int64]uint32{} // seconds after start → PID
	for _, e := range entries {
		got[(int64(e.TimeStamp)-start.UnixMicro())/1e6] = e.Pid
	}
	for sec := int64(1); sec <= 10; sec++ {
		want := uint32(500)
		if sec >= 6 {
			want = 100500
		}
		if got[sec] != want {
			t.Errorf("period ending %d s after start: PID %d, want %d", sec, got[sec], want)
		}
	}
	if procs, _ := dev.GetComputeRunningProcesses(); len(procs) != 1 || procs[0].Pid != 100500 {
		t.Errorf("running processes %+v, want generation 1's PID 100500 alone", procs)
	}
}

func TestGenHistoryForgetsBeyondTheBuffer(t *testing.T) {
	var h genHistory
	t0 := time.Unix(2_000_000, 0)
	for g := uint64(1); g <= 1000; g++ {
		h.begin(g, t0.Add(time.Duration(g)*time.Second), 10*time.Second)
	}
	// At 1,000 s, keeping 10 s: the generation running at 990 s (990) and
	// every later one are kept, 11 changes; the slice is compacted to
	// within twice that.
	if live := len(h.changes) - h.head; live != 11 || len(h.changes) > 22 {
		t.Errorf("%d changes kept of %d held, want 11 of at most 22", live, len(h.changes))
	}
	for _, c := range []struct {
		at   time.Duration
		want uint64
	}{{990 * time.Second, 990}, {995500 * time.Millisecond, 995}, {1000 * time.Second, 1000}, {2000 * time.Second, 1000}} {
		if got := h.at(t0.Add(c.at)); got != c.want {
			t.Errorf("generation at %v: %d, want %d", c.at, got, c.want)
		}
	}
}

// TestChurnPIDsComeBackAsOtherProcesses: after churnPIDCycle generations a
// process gets an earlier generation's PID, as a real node's wrapping PID
// space gives it; its /proc/<pid>/stat starttime (field 22) tells it from
// the earlier process, as the kernel's does.
func TestChurnPIDsComeBackAsOtherProcesses(t *testing.T) {
	s, err := Parse([]byte("churn_every: 1s\ndevices:\n  - {model: X, memory_total: 1GiB, processes: [{pid: 4242, unit: a.service}]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	var starts []uint64
	for _, gen := range []uint64{0, churnPIDCycle} {
		root := t.TempDir()
		if err := s.writeProcesses(root, gen); err != nil {
			t.Fatal(err)
		}
		stat, err := os.ReadFile(filepath.Join(root, "4242", "stat"))
		if err != nil {
			t.Fatalf("generation %d: %v", gen, err)
		}
		ticks, err := procself.StatStartTicks(stat)
		if err != nil {
			t.Fatalf("generation %d: %v in %q", gen, err, stat)
		}
		starts = append(starts, ticks)
	}
	// 1000 + 100 × generation: 1000 and 1000 + 100 × 40 = 5000.
	if starts[0] != 1000 || starts[1] != 5000 {
		t.Errorf("PID 4242 started at %v ticks in generations 0 and %d, want 1000 and 5000", starts, churnPIDCycle)
	}
}

// A process with procfs_hidden has no /proc entry on any device it uses,
// in every generation, while NVML lists it (the scenario must say so on
// one device only).
func TestProcfsHiddenProcess(t *testing.T) {
	s, err := Parse([]byte(`devices:
  - {model: X, memory_total: 1GiB, processes: [{pid: 10, unit: a.service}, {pid: 11, unit: b.service, procfs_hidden: true}]}
  - {model: X, memory_total: 1GiB, processes: [{pid: 11, unit: b.service}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	if err := s.writeProcesses(root, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "10", "cgroup")); err != nil {
		t.Errorf("the shown process: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "11")); !os.IsNotExist(err) {
		t.Errorf("the hidden process has a /proc entry (%v)", err)
	}
}

// A process in a Slurm job inside a pod (slurmd in the pod) has its job's
// cgroup nested under the pod's container, as slurmd's cgroup plugin
// makes it; a unit with either is refused.
func TestSlurmJobInAPod(t *testing.T) {
	const uid = "6f000000-0000-4000-8000-0000000000a0"
	const node = `devices:
  - {model: X, memory_total: 1GiB, processes: [{pid: 7700, pod: slurm/slurmd-0, slurm_job: "700"%s}]}
kubernetes:
  pods: [{namespace: slurm, name: slurmd-0, uid: ` + uid + `, containers: [{name: slurmd}]}]
slurm:
  jobs: [{id: "700", user: alice, gpus: [0]}]
`
	s, err := Parse([]byte(strings.Replace(node, "%s", "", 1)))
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	if err := s.writeProcesses(root, 0); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "7700", "cgroup"))
	if err != nil {
		t.Fatal(err)
	}
	want := "0::/kubepods.slice/kubepods-pod6f000000_0000_4000_8000_0000000000a0.slice/cri-containerd-" +
		kubelettest.ContainerID(uid, "slurmd") + ".scope/system.slice/slurmstepd.scope/job_700/step_0/user/task_0\n"
	if string(b) != want {
		t.Errorf("cgroup %q, want %q", b, want)
	}
	if _, err := Parse([]byte(strings.Replace(node, "%s", ", unit: a.service", 1))); err == nil || !strings.Contains(err.Error(), "not in a unit and another") {
		t.Errorf("a unit beside a pod and a job: %v", err)
	}
}
