package demo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/xpu-exporter/xpu_exporter/attribution/slurm"
)

// runStandIn runs a Slurm stand-in and returns what it printed and its exit
// code.
func runStandIn(t *testing.T, path string, args ...string) (stdout []byte, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return out.Bytes(), errOut.String(), code
}

// The scontrol and squeue stand-ins answer as the scenario's Slurm does:
// the text of `scontrol --details show job` (the same parser reads it as
// real 22.05 output), --json from 24.05 on, a shared GRES by index before
// 23.11.2 and by count per GPU since, the whole array for the array's ID
// (and for any task with --json), "Invalid job id specified" for a job
// Slurm forgot.
func TestSlurmStandIn(t *testing.T) {
	edges, err := os.ReadFile("../fixtures/scenarios/slurm-edges.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, version := range []string{"22.05", "24.05"} {
		t.Run(version, func(t *testing.T) {
			s, err := Parse(bytes.Replace(edges, []byte(`version: "24.05"`), []byte(`version: "`+version+`"`), 1))
			if err != nil {
				t.Fatal(err)
			}
			a := started(t, s)
			out, stderr, code := runStandIn(t, a.Squeue, "--noheader", "--nodelist", a.Node, "--states", "RUNNING", "--format", "%A|%i|%S")
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			if code != 0 || len(lines) != 5 || !strings.HasPrefix(lines[4], "21845|21845_1|") {
				t.Errorf("squeue: %d %q %q; want 5 running jobs, the array task shown as 21845_1", code, out, stderr)
			}
			// As squeue(1): a header without --noheader, no jobs of
			// another node, and a format it does not simulate refused.
			out, _, code = runStandIn(t, a.Squeue, "--nodelist", a.Node, "--format", "%A %S")
			if lines := strings.Split(strings.TrimSpace(string(out)), "\n"); code != 0 || len(lines) != 6 || lines[0] != "JOBID START_TIME" {
				t.Errorf("squeue with a header: %d %q", code, out)
			}
			if out, _, code = runStandIn(t, a.Squeue, "--noheader", "--nodelist", "other-node", "--format", "%A"); code != 0 || len(out) != 0 {
				t.Errorf("squeue of another node: %d %q, want no jobs", code, out)
			}
			if _, _, code = runStandIn(t, a.Squeue, "--noheader", "--nodelist", a.Node, "--format", "%A %u"); code == 0 {
				t.Error("squeue answered a format the stand-in does not simulate")
			}

			shard := slurm.SharedGPU{Index: 2} // 22.05: shard:2(IDX:2)
			_, stderr, code = runStandIn(t, a.Scontrol, "--json", "--details", "show", "job", "205")
			if version == "24.05" {
				shard = slurm.SharedGPU{Index: 2, Alloc: 2, Avail: 4} // shard:2(0/4,0/4,2/4,...)
				if code != 0 {
					t.Errorf("--json: exit %d: %s", code, stderr)
				}
			} else if code != 1 || !strings.Contains(stderr, "unrecognized option '--json'") {
				t.Errorf("--json on 22.05: exit %d, %q; want the option refused", code, stderr)
			}
			out, _, _ = runStandIn(t, a.Scontrol, "--details", "show", "job", "205")
			jobs, err := slurm.ParseJobText(out)
			if err != nil || len(jobs) != 1 || !reflect.DeepEqual(jobs[0].Shared, map[string][]slurm.SharedGPU{a.Node: {shard}}) {
				t.Errorf("job 205: %+v, %v; want shard %+v\n%s", jobs, err, shard, out)
			}
			// Without --details scontrol leaves out the GPUs on each node.
			out, _, _ = runStandIn(t, a.Scontrol, "show", "job", "205")
			if jobs, err := slurm.ParseJobText(out); err != nil || len(jobs) != 1 || len(jobs[0].Shared) != 0 || len(jobs[0].GPUs) != 0 {
				t.Errorf("job 205 without --details: %+v, %v; want no GPUs\n%s", jobs, err, out)
			}

			// The array: 1200 records past scontrol's 1 MiB for its ID, the
			// task alone for <array>_<task> in text form.
			out, _, _ = runStandIn(t, a.Scontrol, "--details", "show", "job", "21845")
			if all, err := slurm.ParseJobText(out); err != nil || len(all) != 1200 || len(out) <= 1<<20 {
				t.Errorf("job 21845: %d records in %d bytes, %v; want 1200 in more than 1 MiB", len(all), len(out), err)
			}
			out, _, _ = runStandIn(t, a.Scontrol, "--details", "show", "job", "21845_1")
			if one, err := slurm.ParseJobText(out); err != nil || len(one) != 1 || one[0].ID != "21845" || one[0].User != "erin" ||
				!reflect.DeepEqual(one[0].GPUs, map[string][]int{a.Node: {4}}) {
				t.Errorf("job 21845_1: %+v, %v; want the task alone on GPU 4", one, err)
			}

			_, stderr, code = runStandIn(t, a.Scontrol, "--details", "show", "job", "125")
			if code != 1 || stderr != "slurm_load_jobs error: Invalid job id specified\n" {
				t.Errorf("job 125: exit %d, %q; want Invalid job id", code, stderr)
			}
			if version != "24.05" {
				return
			}
			out, _, _ = runStandIn(t, a.Scontrol, "--json", "--details", "show", "job", "21845_1")
			if all, err := slurm.ParseJobJSON(out); err != nil || len(all) != 1200 {
				t.Errorf("--json job 21845_1: %d jobs, %v; want the whole array of 1200", len(all), err)
			}
			out, _, _ = runStandIn(t, a.Scontrol, "--json", "--details", "show", "job", "125")
			if _, err := slurm.ParseJobJSON(out); !errors.Is(err, slurm.ErrJobNotFound) {
				t.Errorf("--json job 125: %v; want not found", err)
			}
		})
	}
}

// A job requeued after requeue_after runs again on requeue_gpus, with a
// later start time in squeue and Restarts=1 in scontrol.
func TestSlurmStandInRequeue(t *testing.T) {
	s, err := Parse([]byte(`devices:
  - {model: X, memory_total: 1GiB}
  - {model: X, memory_total: 1GiB}
slurm:
  version: "24.05"
  jobs: [{id: "123", user: alice, gpus: [0], requeue_after: 1s, requeue_gpus: [1]}]
`))
	if err != nil {
		t.Fatal(err)
	}
	a := started(t, s)
	read := func() (squeue string, job slurm.Job, restarts string) {
		out, _, _ := runStandIn(t, a.Squeue, "--noheader", "--nodelist", a.Node, "--states", "RUNNING", "--format", "%A|%i|%S")
		text, _, _ := runStandIn(t, a.Scontrol, "--details", "show", "job", "123")
		jobs, err := slurm.ParseJobText(text)
		if err != nil {
			t.Fatal(err)
		}
		json, _, _ := runStandIn(t, a.Scontrol, "--json", "--details", "show", "job", "123")
		if fromJSON, err := slurm.ParseJobJSON(json); err != nil || !reflect.DeepEqual(fromJSON[0].GPUs, jobs[0].GPUs) {
			t.Errorf("JSON %+v, %v; text %+v", fromJSON, err, jobs)
		}
		_, after, _ := strings.Cut(string(text), "Restarts=")
		return string(out), jobs[0], strings.Fields(after)[0]
	}
	before, job, restarts := read()
	if !reflect.DeepEqual(job.GPUs, map[string][]int{a.Node: {0}}) || restarts != "0" {
		t.Errorf("before the requeue: GPUs %v, Restarts=%s", job.GPUs, restarts)
	}
	// requeue_after 1s: at the first whole second past it, 2 s at most.
	time.Sleep(2500 * time.Millisecond)
	after, job, restarts := read()
	if !reflect.DeepEqual(job.GPUs, map[string][]int{a.Node: {1}}) || restarts != "1" {
		t.Errorf("after the requeue: GPUs %v, Restarts=%s", job.GPUs, restarts)
	}
	if before == after || !strings.HasPrefix(after, "123|123|") {
		t.Errorf("squeue %q before the requeue and %q after: want a new start time", before, after)
	}
}

// Under proctrack/linuxproc a job's processes are in slurmd's cgroup, and
// scontrol listpids names their jobs.
func TestSlurmStandInLinuxproc(t *testing.T) {
	s, err := Parse([]byte(`devices:
  - {model: X, memory_total: 1GiB, processes: [{pid: 71, slurm_job: "7"}, {pid: 72, user: bob, environ: {SLURM_JOB_ID: "7"}}]}
slurm:
  proctrack: linuxproc
  jobs: [{id: "7", user: alice, gpus: [0]}]
`))
	if err != nil {
		t.Fatal(err)
	}
	a := started(t, s)
	out, _, code := runStandIn(t, a.Scontrol, "listpids")
	steps, err := slurm.ParseListPIDs(out)
	if code != 0 || err != nil || !reflect.DeepEqual(steps, []slurm.StepProcess{{PID: 71, JobID: "7", StepID: "0"}}) {
		t.Errorf("listpids: %+v, %v (exit %d); want process 71 in job 7", steps, err, code)
	}
	for _, failure := range []string{"ended", "unreachable"} {
		s.Slurm.ListPIDsFailure = failure
		a := started(t, s)
		out, stderr, code := runStandIn(t, a.Scontrol, "listpids")
		if steps, err := slurm.ParseListPIDs(out); code != 1 || err != nil || len(steps) != 1 || stderr == "" {
			t.Errorf("listpids_failure %s: %+v, %v, %q (exit %d); want process 71's row, a message and exit 1", failure, steps, err, stderr, code)
		}
		// Since 24.11 scontrol prints no row, nor the header, once a step
		// failed.
		s.Slurm.Version = "25.05"
		a = started(t, s)
		out, stderr, code = runStandIn(t, a.Scontrol, "listpids")
		if code != 1 || len(out) != 0 || stderr == "" {
			t.Errorf("25.05, listpids_failure %s: %q, %q (exit %d); want nothing on stdout, a message and exit 1", failure, out, stderr, code)
		}
		c := &slurm.Client{Path: a.Scontrol}
		if steps, err := c.ListPIDs(context.Background()); len(steps) != 0 || !errors.Is(err, slurm.ErrUnreachableSteps) {
			t.Errorf("25.05, listpids_failure %s: the client reads %+v, %v; want no row and unreachable steps", failure, steps, err)
		}
		s.Slurm.Version = ""
	}
	for pid, want := range map[string]string{"71": "0::/system.slice/slurmd.service\n", "72": "0::/user.slice/user-1000.slice/session-1.scope\n"} {
		if b, err := os.ReadFile(filepath.Join(a.Procfs, pid, "cgroup")); err != nil || string(b) != want {
			t.Errorf("process %s: cgroup %q, %v; want %q", pid, b, err, want)
		}
	}
	if b, err := os.ReadFile(filepath.Join(a.Procfs, "72", "environ")); err != nil || !bytes.Contains(b, []byte("\x00SLURM_JOB_ID=7\x00")) {
		t.Errorf("process 72: environ %q, %v; want SLURM_JOB_ID=7 in it", b, err)
	}
}

// A job in a hidden partition is listed by squeue with --all only, as
// slurmctld lists it for a caller that is not an operator.
func TestSlurmStandInHiddenPartition(t *testing.T) {
	s, err := Parse([]byte(`devices:
  - {model: X, memory_total: 1GiB}
  - {model: X, memory_total: 1GiB}
slurm:
  jobs:
    - {id: "401", user: alice, gpus: [0]}
    - {id: "402", user: bob, partition: restricted, gpus: [1], hidden_partition: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	a := started(t, s)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{args: nil, want: "401"},
		{args: []string{"--all"}, want: "401 402"},
	} {
		args := append([]string{"--noheader", "--nodelist", a.Node, "--format", "%A"}, tc.args...)
		out, _, code := runStandIn(t, a.Squeue, args...)
		if got := strings.Join(strings.Fields(string(out)), " "); code != 0 || got != tc.want {
			t.Errorf("squeue %q: %q (exit %d), want %q", tc.args, got, code, tc.want)
		}
	}
}

// A running job whose state carries a flag is listed for the flag, not for
// RUNNING, which squeue matches against the whole state word.
func TestSlurmStandInStateFlag(t *testing.T) {
	s, err := Parse([]byte(`devices:
  - {model: X, memory_total: 1GiB}
  - {model: X, memory_total: 1GiB}
  - {model: X, memory_total: 1GiB}
slurm:
  version: "24.05"
  jobs:
    - {id: "601", user: alice, gpus: [0], state_flag: STOPPED}
    - {id: "602", user: bob, gpus: [1]}
    - {id: "603", user: carol, gpus: [2], suspended: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	a := started(t, s)
	for _, tc := range []struct {
		states, want string
	}{
		{states: "RUNNING", want: "602"},
		{states: "STOPPED", want: "601"},
		{states: "RUNNING,STOPPED", want: "601 602"},
		// A suspended job's state is SUSPENDED, no flag of RUNNING.
		{states: "SUSPENDED", want: "603"},
		{states: "RUNNING,STOPPED,SUSPENDED", want: "601 602 603"},
	} {
		out, _, code := runStandIn(t, a.Squeue, "--noheader", "--nodelist", a.Node, "--states", tc.states, "--format", "%A")
		if got := strings.Join(strings.Fields(string(out)), " "); code != 0 || got != tc.want {
			t.Errorf("squeue --states %s: %q (exit %d), want %q", tc.states, got, code, tc.want)
		}
	}
	text, _, _ := runStandIn(t, a.Scontrol, "--details", "show", "job", "601")
	json, _, _ := runStandIn(t, a.Scontrol, "--json", "--details", "show", "job", "601")
	if !bytes.Contains(text, []byte("JobState=STOPPED ")) || !bytes.Contains(json, []byte(`"RUNNING",`)) || !bytes.Contains(json, []byte(`"STOPPED"`)) {
		t.Errorf("job 601: want JobState=STOPPED in text and [RUNNING, STOPPED] in JSON\n%s\n%s", text, json)
	}
	text, _, _ = runStandIn(t, a.Scontrol, "--details", "show", "job", "603")
	json, _, _ = runStandIn(t, a.Scontrol, "--json", "--details", "show", "job", "603")
	if !bytes.Contains(text, []byte("JobState=SUSPENDED ")) || !bytes.Contains(json, []byte(`"SUSPENDED"`)) || bytes.Contains(json, []byte(`"RUNNING"`)) {
		t.Errorf("job 603: want JobState=SUSPENDED in text and [SUSPENDED] in JSON\n%s\n%s", text, json)
	}
	if _, err := Parse([]byte("devices: [{model: X, memory_total: 1GiB}]\nslurm: {jobs: [{id: \"1\", user: a, suspended: true, state_flag: STOPPED}]}\n")); err == nil {
		t.Error("a suspended job with a running job's flag accepted")
	}
	if _, err := Parse([]byte("devices: [{model: X, memory_total: 1GiB}]\nslurm: {jobs: [{id: \"1\", user: a, state_flag: COMPLETING}]}\n")); err == nil {
		t.Error("state_flag COMPLETING accepted: a completing job does not run")
	}
}

// `scontrol show config` answers as Slurm prints it; with private_data:
// jobs a caller other than root sees no job.
func TestSlurmStandInPrivateData(t *testing.T) {
	for _, private := range []string{"", "jobs"} {
		s, err := Parse([]byte("devices: [{model: X, memory_total: 1GiB}]\nslurm:\n  private_data: \"" + private + "\"\n  jobs: [{id: \"501\", user: alice, gpus: [0]}]\n"))
		if err != nil {
			t.Fatal(err)
		}
		a := started(t, s)
		out, _, code := runStandIn(t, a.Scontrol, "show", "config")
		if want := "PrivateData             = " + or(private, "none") + "\n"; code != 0 || !strings.Contains(string(out), want) {
			t.Errorf("private_data %q: show config %q (exit %d), want %q", private, out, code, want)
		}
		hidden := private == "jobs" && os.Geteuid() != 0
		out, _, _ = runStandIn(t, a.Squeue, "--noheader", "--nodelist", a.Node, "--format", "%A")
		_, stderr, _ := runStandIn(t, a.Scontrol, "--details", "show", "job", "501")
		if listed := strings.TrimSpace(string(out)) == "501"; listed == hidden || strings.Contains(stderr, "Invalid job id") != hidden {
			t.Errorf("private_data %q as UID %d: squeue %q, scontrol %q; want the job hidden: %v", private, os.Geteuid(), out, stderr, hidden)
		}
	}
}

// A partitioned AMD GPU counts a GRES index per partition, as the exporter
// numbers them: GPU 0 in DPX is indices 0 and 1, GPUs 1 and 2 are 2 and 3;
// so 3 is a GRES index and 4 is not (probe6-gaudi D5).
func TestGRESIndicesCountPartitions(t *testing.T) {
	scenario := func(gres int) string {
		return fmt.Sprintf(`node: anode
defaults: {vendor: amd, model: AMD Instinct MI300X OAM, memory_total: 192GiB, power_limit_watts: 750}
devices:
  - {pci_bus_id: "0000:0c:00.0", partitions: [{}, {}]}
  - {pci_bus_id: "0000:22:00.0"}
  - {pci_bus_id: "0000:38:00.0"}
slurm:
  jobs: [{id: "11", user: bob, gpus: [%d]}]
`, gres)
	}
	if _, err := Parse([]byte(scenario(3))); err != nil {
		t.Errorf("GRES index 3 of 0..3: %v", err)
	}
	if _, err := Parse([]byte(scenario(4))); err == nil || !strings.Contains(err.Error(), "4 is not a GRES index (0..3)") {
		t.Errorf("GRES index 4: %v, want it refused as not in 0..3", err)
	}
}

// `scontrol show node` answers the node's Gres= field as Slurm prints it:
// whole GPUs untyped, a MIG GPU's instances typed by profile, shards
// after, each with its sockets. By hand: GPUs 0 and 2 whole (2), GPU 1's
// instances 3g.40gb ×2 and 1g.10gb ×1, 4 shards on each whole GPU (8);
// the client sums the gpu entries, 2 + 2 + 1 = 5, and leaves the shards
// out. Another node's name is not found.
func TestSlurmStandInShowNode(t *testing.T) {
	s, err := Parse([]byte(`devices:
  - {model: NVIDIA H100 80GB HBM3, memory_total: 80GiB}
  - model: NVIDIA A100-SXM4-80GB
    memory_total: 80GiB
    mig:
      - {profile: 3g.40gb, gpu_instance: 1}
      - {profile: 3g.40gb, gpu_instance: 2}
      - {profile: 1g.10gb, gpu_instance: 9}
  - {model: NVIDIA H100 80GB HBM3, memory_total: 80GiB}
slurm:
  shards_per_gpu: 4
  jobs: [{id: "501", user: alice, gpus: [0]}]
`))
	if err != nil {
		t.Fatal(err)
	}
	a := started(t, s)
	out, _, code := runStandIn(t, a.Scontrol, "show", "node", a.Node)
	if want := "   Gres=gpu:2(S:0-1),gpu:3g.40gb:2(S:0-1),gpu:1g.10gb:1(S:0-1),shard:8(S:0-1)\n"; code != 0 || !strings.Contains(string(out), want) {
		t.Errorf("show node %q (exit %d), want the line %q", out, code, want)
	}
	n, err := (&slurm.Client{Path: a.Scontrol}).NodeGPUs(context.Background(), a.Node)
	if err != nil || n != 5 {
		t.Errorf("NodeGPUs = %d, %v; want 5", n, err)
	}
	if _, _, code := runStandIn(t, a.Scontrol, "show", "node", "other-node"); code == 0 {
		t.Error("another node's record answered")
	}
}
