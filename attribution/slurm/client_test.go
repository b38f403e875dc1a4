package slurm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// fakeScontrol writes a shell script standing in for scontrol. Each run
// appends its arguments to a log, which calls returns.
func fakeScontrol(t *testing.T, body string) (path string, calls func() []string) {
	t.Helper()
	dir := t.TempDir()
	log := filepath.Join(dir, "calls.log")
	path = filepath.Join(dir, "scontrol")
	script := "#!/bin/sh\necho \"$*\" >> '" + log + "'\n" + body + "\n"
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path, func() []string {
		data, err := os.ReadFile(log)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			t.Fatal(err)
		}
		return strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	}
}

// fixturePath returns the absolute path of a fixture, for use in scripts.
func fixturePath(t *testing.T, name string) string {
	t.Helper()
	path, err := filepath.Abs(filepath.Join(fixtures, name))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
	return path
}

// jsonFromArgs prints a minimal data_parser response for the job ID given
// as the last argument.
const jsonFromArgs = `for last; do :; done
printf '{"jobs":[{"job_id":%s,"user_name":"alice","job_state":["RUNNING"],"nodes":"n1","gres_detail":["gpu:1(IDX:0)"]}]}' "$last"`

func TestClientJSON(t *testing.T) {
	path, calls := fakeScontrol(t, `case "$1" in
--json) cat '`+fixturePath(t, "constructed/scontrol-show-job-json-v0.0.41.json")+`' ;;
*) echo "text form asked although JSON works" >&2; exit 1 ;;
esac`)
	c := &Client{Path: path}

	job, err := c.Job(context.Background(), "4242")
	if err != nil {
		t.Fatal(err)
	}
	if want := withName(multinodeJob, "llama finetune"); !reflect.DeepEqual(job, want) {
		t.Errorf("Job() =\n%+v\nwant\n%+v", job, want)
	}
	if got, want := calls(), []string{"--json --details show job 4242"}; !reflect.DeepEqual(got, want) {
		t.Errorf("scontrol runs = %q, want %q", got, want)
	}
}

func TestClientTextFallback(t *testing.T) {
	// Slurm 22.05 rejects --json exactly so (the recorded message).
	path, calls := fakeScontrol(t, `if [ "$1" = "--json" ]; then
  cat '`+fixturePath(t, "22.05/linuxproc-plainfile-gres/scontrol-json-attempt.txt")+`' >&2
  exit 1
fi
for last; do :; done
cat '`+fixturePath(t, "22.05/cgroup-v1-task-cgroup")+`/scontrol-show-job-d-job'"$last"'.txt'`)
	c := &Client{Path: path}

	for _, tc := range []struct {
		id   string
		want Job
	}{
		{id: "16", want: Job{ID: "16", Name: "gpu-sleep", User: "root", Partition: "debug", State: "RUNNING",
			NodeList: "vm", GPUs: map[string][]int{"vm": {0}}}},
		{id: "17", want: Job{ID: "17", Name: "srun-gpu1", User: "root", Partition: "debug", State: "RUNNING",
			NodeList: "vm", GPUs: map[string][]int{"vm": {1}}}},
	} {
		job, err := c.Job(context.Background(), tc.id)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(job, tc.want) {
			t.Errorf("Job(%s) =\n%+v\nwant\n%+v", tc.id, job, tc.want)
		}
	}
	// --json is tried once, then remembered as unsupported.
	want := []string{"--json --details show job 16", "--details show job 16", "--details show job 17"}
	if got := calls(); !reflect.DeepEqual(got, want) {
		t.Errorf("scontrol runs = %q, want %q", got, want)
	}
}

// TestClientTimeoutKillsChildren: at the deadline the whole process group
// of scontrol (here a wrapper script and its child) is killed, so the run
// ends at the deadline and nothing is left running (found by probing:
// hung children outlived the scrapes, whose answers came after Prometheus's
// timeout).
func TestClientTimeoutKillsChildren(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	path, _ := fakeScontrol(t, "sleep 30 &\necho $! > '"+pidFile+"'\nwait")
	c := &Client{Path: path, Timeout: 300 * time.Millisecond}
	if _, err := c.Job(context.Background(), "1"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Job() error = %v, want context.DeadlineExceeded", err)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	// SIGKILL is delivered at once; the orphan is then a zombie until init
	// reaps it, if it does (not every container's init does): either is
	// dead.
	for range 100 {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if errors.Is(err, os.ErrNotExist) || (err == nil && strings.Contains(string(stat), ") Z ")) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	syscall.Kill(pid, syscall.SIGKILL)
	t.Errorf("scontrol's child %d still runs after the deadline", pid)
}

func TestClientTimeout(t *testing.T) {
	// The shell's child keeps the output pipes open after the shell is
	// killed; the run must still end soon after the timeout, long before
	// the child does.
	path, calls := fakeScontrol(t, "sleep 5")
	c := &Client{Path: path, Timeout: 200 * time.Millisecond}

	start := time.Now()
	_, err := c.Job(context.Background(), "1")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Job() error = %v, want context.DeadlineExceeded", err)
	}
	if elapsed := time.Since(start); elapsed > 200*time.Millisecond+waitDelay+time.Second {
		t.Errorf("Job() took %v with a 200ms timeout", elapsed)
	}
	// A timeout is not an answer: the next request runs scontrol again.
	if _, err := c.Job(context.Background(), "1"); err == nil {
		t.Fatal("second Job() succeeded")
	}
	if n := len(calls()); n != 2 {
		t.Errorf("scontrol ran %d times, want 2", n)
	}
}

func TestClientGarbage(t *testing.T) {
	tests := []struct {
		name, body string
	}{
		{name: "JSON form", body: `printf 'hello\000world\n'`},
		{name: "text form", body: `if [ "$1" = "--json" ]; then echo "scontrol: unrecognized option '--json'" >&2; exit 1; fi
printf 'Segmentation fault\n\377\376'`},
		{name: "failure without message", body: "exit 3"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path, _ := fakeScontrol(t, tc.body)
			c := &Client{Path: path}
			job, err := c.Job(context.Background(), "5")
			if err == nil {
				t.Fatalf("Job() = %+v, want an error", job)
			}
			if errors.Is(err, ErrJobNotFound) {
				t.Errorf("error %v matches ErrJobNotFound", err)
			}
		})
	}

	t.Run("output limit", func(t *testing.T) {
		path, _ := fakeScontrol(t, "exec yes JobId=1")
		c := &Client{Path: path}
		if _, err := c.Job(context.Background(), "5"); !errors.Is(err, ErrOutputTooLarge) {
			t.Errorf("Job() error = %v, want ErrOutputTooLarge", err)
		}
	})
}

func TestClientNotFound(t *testing.T) {
	path, calls := fakeScontrol(t, `echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1`)
	c := &Client{Path: path}

	for range 3 {
		_, err := c.Job(context.Background(), "999")
		if !errors.Is(err, ErrJobNotFound) {
			t.Fatalf("Job() error = %v, want ErrJobNotFound", err)
		}
	}
	if n := len(calls()); n != 1 {
		t.Errorf("scontrol ran %d times, want 1: not found is cached", n)
	}
}

func TestClientCacheAndCoalescing(t *testing.T) {
	path, calls := fakeScontrol(t, "sleep 0.3\n"+jsonFromArgs)
	c := &Client{Path: path}

	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			job, err := c.Job(context.Background(), "77")
			if err == nil && (job.ID != "77" || job.User != "alice") {
				err = errors.New("wrong job " + job.ID)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}

	job, err := c.Job(context.Background(), "77")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(calls()); n != 1 {
		t.Errorf("scontrol ran %d times for 9 requests, want 1", n)
	}

	// The cache hands out copies.
	job.GPUs["n1"][0] = 7
	again, err := c.Job(context.Background(), "77")
	if err != nil {
		t.Fatal(err)
	}
	if again.GPUs["n1"][0] != 0 {
		t.Errorf("cached job changed through a returned copy: %+v", again)
	}
}

func TestClientCacheExpiry(t *testing.T) {
	path, calls := fakeScontrol(t, jsonFromArgs)
	c := &Client{Path: path, CacheTTL: 50 * time.Millisecond}

	if _, err := c.Job(context.Background(), "1"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if _, err := c.Job(context.Background(), "1"); err != nil {
		t.Fatal(err)
	}
	if n := len(calls()); n != 2 {
		t.Errorf("scontrol ran %d times, want 2 after the entry expired", n)
	}
}

func TestClientCacheBound(t *testing.T) {
	path, _ := fakeScontrol(t, jsonFromArgs)
	c := &Client{Path: path, CacheSize: 2}

	for _, id := range []string{"1", "2", "3", "4"} {
		if _, err := c.Job(context.Background(), id); err != nil {
			t.Fatal(err)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.cache) != 2 {
		t.Errorf("cache holds %d jobs, want 2", len(c.cache))
	}
	if _, ok := c.cache["4"]; !ok {
		t.Error("the newest job is not cached")
	}
}

func TestClientCallerGivesUp(t *testing.T) {
	path, calls := fakeScontrol(t, "sleep 0.3\n"+jsonFromArgs)
	c := &Client{Path: path}

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := c.Job(ctx, "9"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Job() error = %v, want context.DeadlineExceeded", err)
	}
	// The run went on and its answer serves the next caller.
	time.Sleep(600 * time.Millisecond)
	job, err := c.Job(context.Background(), "9")
	if err != nil {
		t.Fatal(err)
	}
	if job.ID != "9" {
		t.Errorf("Job() = %+v", job)
	}
	if n := len(calls()); n != 1 {
		t.Errorf("scontrol ran %d times, want 1", n)
	}
}

func TestClientRejectsArguments(t *testing.T) {
	path, calls := fakeScontrol(t, jsonFromArgs)
	c := &Client{Path: path}

	for _, id := range []string{"", "--help", "-1", "12 13", "12;reboot", "s5K1KKYAYG5DU0", "1_", "_1"} {
		if _, err := c.Job(context.Background(), id); err == nil {
			t.Errorf("Job(%q) succeeded, want an error", id)
		}
	}
	if _, err := c.ResolveSLUID(context.Background(), "4242"); err == nil {
		t.Error("ResolveSLUID(4242) succeeded, want an error")
	}
	if got := calls(); got != nil {
		t.Errorf("scontrol ran with %q", got)
	}
	for _, id := range []string{"123_4", "123+1", "s5K1KKYAYG5D00"} {
		if !validJobArg(id) {
			t.Errorf("validJobArg(%q) = false", id)
		}
	}
}

func TestClientResolveSLUID(t *testing.T) {
	path, calls := fakeScontrol(t, `printf '{"jobs":[{"job_id":4245,"user_name":"alice","job_state":["RUNNING"]}]}'`)
	c := &Client{Path: path}

	id, err := c.ResolveSLUID(context.Background(), "s5K1KKYAYG5D00")
	if err != nil {
		t.Fatal(err)
	}
	if id != "4245" {
		t.Errorf("ResolveSLUID() = %q, want 4245", id)
	}
	// The job is then known by its ID too.
	job, err := c.Job(context.Background(), "4245")
	if err != nil {
		t.Fatal(err)
	}
	if job.User != "alice" {
		t.Errorf("Job(4245) = %+v", job)
	}
	if got, want := calls(), []string{"--json --details show job s5K1KKYAYG5D00"}; !reflect.DeepEqual(got, want) {
		t.Errorf("scontrol runs = %q, want %q", got, want)
	}
}

func TestClientListPIDs(t *testing.T) {
	t.Run("real output", func(t *testing.T) {
		path, calls := fakeScontrol(t, "cat '"+fixturePath(t, "22.05/linuxproc-plainfile-gres/scontrol-listpids.txt")+"'")
		c := &Client{Path: path}
		procs, err := c.ListPIDs(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(procs) != 9 || procs[8] != (StepProcess{PID: 17010, JobID: "5", StepID: "0"}) {
			t.Errorf("ListPIDs() = %+v", procs)
		}
		if got := calls(); !reflect.DeepEqual(got, []string{"listpids"}) {
			t.Errorf("scontrol runs = %q", got)
		}
	})
	t.Run("no steps", func(t *testing.T) {
		path, _ := fakeScontrol(t, `echo "No job steps exist on this node." >&2; exit 1`)
		c := &Client{Path: path}
		procs, err := c.ListPIDs(context.Background())
		if !errors.Is(err, ErrNoSteps) || procs != nil {
			t.Errorf("ListPIDs() = %v, %v; want nothing and ErrNoSteps", procs, err)
		}
	})
	t.Run("failure", func(t *testing.T) {
		path, _ := fakeScontrol(t, `echo "Unable to connect to slurmstepd" >&2; exit 1`)
		c := &Client{Path: path}
		if _, err := c.ListPIDs(context.Background()); err == nil || !strings.Contains(err.Error(), "Unable to connect") {
			t.Errorf("ListPIDs() error = %v, want scontrol's message", err)
		}
	})
}

// TestClientListPIDsPartial: scontrol listpids goes on past a step it
// cannot reach and exits 1 (_list_pids_one_step sets exit_code, and
// _list_pids_all_jobs lists the other steps: src/scontrol/info_job.c:666-720,
// 774-793 @ slurm-23-11-1-1). The rows it printed are slurmd's answer for
// their steps. A step that ended between listing and connecting ("does not
// exist on this node", ENOENT) has no processes left: the answer is whole.
// Another failure leaves that step's processes unknown: the rows come with
// ErrUnreachableSteps (found by probing: D5, rows 5100/901 and 5101/902
// were dropped and the source went down), also where they are none.
// scontrol 24.11 and later print nothing, not even the header, once a step
// failed, ended or unreachable (scontrol_list_pids: "if (exit_code) goto
// cleanup;"): no step's processes are known, ErrUnreachableSteps again, not
// a failure of the source, which one stale step socket kept down
// (probe17-slurm D4); where steps ended and nothing else failed, scontrol
// is asked once more, when slurmd no longer lists them (review17 R3). A
// failure that is no step's is the source's.
func TestClientListPIDsPartial(t *testing.T) {
	rows := `printf 'PID      JOBID    STEPID   LOCALID GLOBALID\n5100     901      0        0       0\n5101     902      batch    0       0\n'`
	both := []StepProcess{{PID: 5100, JobID: "901", StepID: "0"}, {PID: 5101, JobID: "902", StepID: "batch"}}
	for _, tc := range []struct {
		name, body string
		want       []StepProcess
		// wantErr: nil, ErrUnreachableSteps, or errAny for a failure.
		wantErr error
		// runs of scontrol (0: 1)
		runs int
	}{
		{name: "a step ended", body: rows + `; echo 'StepId=903.0 does not exist on this node.' >&2; exit 1`, want: both},
		{name: "a step unreachable", body: rows + `; echo 'Unable to connect to slurmstepd: Connection refused' >&2; exit 1`,
			want: both, wantErr: ErrUnreachableSteps},
		{name: "both", body: rows + `; echo 'StepId=903.0 does not exist on this node.' >&2; echo 'Unable to connect to slurmstepd: Permission denied' >&2; exit 1`,
			want: both, wantErr: ErrUnreachableSteps},
		{name: "every step unreachable", body: `printf 'PID      JOBID    STEPID   LOCALID GLOBALID\n'; echo 'Unable to connect to slurmstepd: Permission denied' >&2; exit 1`,
			wantErr: ErrUnreachableSteps},
		{name: "24.11: a step ended", body: `echo 'StepId=903.0 does not exist on this node.' >&2; exit 1`,
			wantErr: ErrUnreachableSteps, runs: 2},
		// Asked again, slurmd no longer lists the step that ended.
		{name: "24.11: a step ended, then gone", body: `n=$(wc -l < "$(dirname "$0")/calls.log")
[ "$n" -gt 1 ] && { ` + rows + `; exit 0; }
echo 'StepId=903.0 does not exist on this node.' >&2; exit 1`, want: both, runs: 2},
		{name: "24.11: a step unreachable", body: `printf '\nUnable to connect to slurmstepd: Connection refused\n' >&2; exit 1`,
			wantErr: ErrUnreachableSteps},
		{name: "scontrol failed", body: `echo 'scontrol: error: Invalid user for SlurmUser slurm, ignored' >&2; exit 1`,
			wantErr: errAny},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path, calls := fakeScontrol(t, tc.body)
			procs, err := (&Client{Path: path}).ListPIDs(context.Background())
			if n := len(calls()); n != max(1, tc.runs) {
				t.Errorf("scontrol ran %d times, want %d", n, max(1, tc.runs))
			}
			if !reflect.DeepEqual(procs, tc.want) {
				t.Errorf("ListPIDs() = %+v, want %+v", procs, tc.want)
			}
			switch {
			case tc.wantErr == nil && err != nil, tc.wantErr == errAny && (err == nil || errors.Is(err, ErrUnreachableSteps)),
				tc.wantErr == ErrUnreachableSteps && !errors.Is(err, ErrUnreachableSteps):
				t.Errorf("ListPIDs() error = %v, want %v", err, tc.wantErr)
			}
			if errors.Is(err, ErrUnreachableSteps) && strings.Contains(err.Error(), "903") {
				t.Errorf("error %q names the step that ended: logged once per message, it would be logged anew for every step", err)
			}
		})
	}
}

// errAny stands for any error but ErrUnreachableSteps.
var errAny = errors.New("any error")

func TestClientDefaultPath(t *testing.T) {
	path, calls := fakeScontrol(t, jsonFromArgs)
	t.Setenv("PATH", filepath.Dir(path))
	c := &Client{}
	if _, err := c.Job(context.Background(), "3"); err != nil {
		t.Fatal(err)
	}
	if n := len(calls()); n != 1 {
		t.Errorf("scontrol from $PATH ran %d times, want 1", n)
	}
}

func TestNodeJobs(t *testing.T) {
	squeue, calls := fakeScontrol(t, `printf '101|101|2026-11-22T09:14:03\n  102|102|N/A\n\n'`)
	c := &Client{SqueuePath: squeue}
	for range 2 {
		jobs, err := c.NodeJobs(context.Background(), "gpu-node-01")
		if err != nil {
			t.Fatal(err)
		}
		want := []RunningJob{{ID: "101", Query: "101", Start: "2026-11-22T09:14:03"}, {ID: "102", Query: "102", Start: "N/A"}}
		if !reflect.DeepEqual(jobs, want) {
			t.Errorf("jobs %+v, want %+v", jobs, want)
		}
	}
	if got := calls(); len(got) != 1 || got[0] != "--noheader --all --nodelist gpu-node-01 --states RUNNING,CONFIGURING,STOPPED,SIGNALING,RESIZING,SUSPENDED --format %A|%i|%S" {
		t.Errorf("squeue runs %q, want one (the second answer comes from the cache)", got)
	}
	if _, err := c.NodeJobs(context.Background(), "--all"); err == nil {
		t.Error("a node name that is an option must be refused")
	}
	bad, _ := fakeScontrol(t, `echo '--uid=0|1|x'`)
	if _, err := (&Client{SqueuePath: bad}).NodeJobs(context.Background(), "n1"); err == nil {
		t.Error("garbage from squeue must be an error")
	}
}

// TestNodeJobsHiddenPartitions: squeue lists a job in a partition hidden
// from the exporter (Hidden=YES, or AllowGroups without its user) only
// with --all. The stand-in filters as slurmctld's _pack_job does
// (_all_parts_hidden unless SHOW_ALL, job_mgr.c:10425-10431 @
// slurm-23-11-1-1), and squeue sets SHOW_ALL for -a/--all alone
// (squeue.c:186-187 @ slurm-23-11-1-1). Job 401 runs in partition gpu,
// job 402 in the hidden partition restricted: both run on the node, so
// both are listed, 401 then 402 (found by probing: D2, 402's GPUs were
// owned by nobody).
func TestNodeJobsHiddenPartitions(t *testing.T) {
	squeue, _ := fakeScontrol(t, `all=
for a; do case "$a" in -a|--all) all=1 ;; esac; done
echo '401|401|2026-11-26T10:00:01'
[ -n "$all" ] && echo '402|402|2026-11-26T10:00:01'
exit 0`)
	jobs, err := (&Client{SqueuePath: squeue}).NodeJobs(context.Background(), "node1")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, j := range jobs {
		ids = append(ids, j.ID)
	}
	if want := []string{"401", "402"}; !slices.Equal(ids, want) {
		t.Errorf("jobs %q, want %q: the job in the hidden partition is missing", ids, want)
	}
}

// TestNodeJobsStateFlags: a running job whose state word carries a flag
// still holds its GPUs. The stand-in filters --states as squeue's
// _filter_job does (src/squeue/print.c:2966 @ slurm-23-11-1-1): a flag in
// the list matches every job carrying it, a base state only a job whose
// whole state word it is. Jobs 601-605 run (RUNNING with STOPPED after
// scancel --signal=STOP, CONFIGURING while its nodes boot, none,
// SIGNALING, RESIZING); 606 is completing and 607 pending, neither of
// which holds GPUs here: listed are 601, 602, 603, 604 and 605 (found by
// probing: D4, 601's and 603's GPUs were held by nobody).
func TestNodeJobsStateFlags(t *testing.T) {
	squeue, _ := fakeScontrol(t, `states=
while [ $# -gt 0 ]; do case "$1" in --states|-t) states=$2; shift ;; esac; shift; done
for job in 601:RUNNING+STOPPED 602:RUNNING 603:RUNNING+CONFIGURING 604:RUNNING+SIGNALING 605:RUNNING+RESIZING 606:CANCELLED+COMPLETING 607:PENDING; do
  id=${job%%:*} word=${job#*:}
  for s in $(echo "$states" | tr ',' ' '); do
    case "$s" in
    CONFIGURING|COMPLETING|STOPPED|SIGNALING|RESIZING|STAGE_OUT) case "+$word+" in *"+$s+"*) echo "$id|$id|N/A"; break ;; esac ;;
    *) if [ "$word" = "$s" ]; then echo "$id|$id|N/A"; break; fi ;;
    esac
  done
done`)
	jobs, err := (&Client{SqueuePath: squeue}).NodeJobs(context.Background(), "node1")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, j := range jobs {
		ids = append(ids, j.ID)
	}
	if want := []string{"601", "602", "603", "604", "605"}; !slices.Equal(ids, want) {
		t.Errorf("jobs %q, want %q", ids, want)
	}
}

// expireNodeJobs makes the next NodeJobs ask squeue again, as a scrape
// past nodeJobsTTL would.
func expireNodeJobs(c *Client) {
	c.mu.Lock()
	c.nodeJobsExpires = time.Time{}
	c.mu.Unlock()
}

// TestJobOfRequeued: a job's record is reused while squeue gives the same
// start time, one scontrol run per job however many scrapes, and read
// again when the job is requeued and starts anew on another GPU (found by
// probing: D7, the GPU it had left stayed its own for the cache's 5
// minutes, the one it had moved to ownerless).
func TestJobOfRequeued(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	squeue, _ := fakeScontrol(t, `cat '`+dir+`/squeue.txt'`)
	scontrol, calls := fakeScontrol(t, `for last; do :; done
printf '{"jobs":[{"job_id":%s,"user_name":"alice","job_state":["RUNNING"],"nodes":"n1","gres_detail":["gpu:1(IDX:%s)"]}]}' "$last" "$(cat '`+dir+`'/idx-"$last")"`)
	c := &Client{Path: scontrol, SqueuePath: squeue}
	scrape := func() map[string][]int {
		t.Helper()
		expireNodeJobs(c)
		running, err := c.NodeJobs(context.Background(), "n1")
		if err != nil {
			t.Fatal(err)
		}
		gpus := map[string][]int{}
		for _, r := range running {
			j, err := c.JobOf(context.Background(), r)
			if err != nil {
				t.Fatal(err)
			}
			gpus[j.ID] = j.GPUs["n1"]
		}
		return gpus
	}

	write("squeue.txt", "123|123|2026-11-22T09:00:00\n")
	write("idx-123", "0")
	for range 3 {
		if got, want := scrape(), map[string][]int{"123": {0}}; !reflect.DeepEqual(got, want) {
			t.Errorf("before the requeue: GPUs %v, want %v", got, want)
		}
	}
	if n := len(calls()); n != 1 {
		t.Errorf("scontrol ran %d times in 3 scrapes of a steady node, want 1", n)
	}

	// Requeued: job 123 restarts on GPU 3, job 300 takes GPU 0.
	write("squeue.txt", "123|123|2026-11-22T09:20:07\n300|300|2026-11-22T09:19:58\n")
	write("idx-123", "3")
	write("idx-300", "0")
	for range 3 {
		if got, want := scrape(), map[string][]int{"123": {3}, "300": {0}}; !reflect.DeepEqual(got, want) {
			t.Errorf("after the requeue: GPUs %v, want %v", got, want)
		}
	}
	// One run more for the requeued job, one for the new one.
	if got, want := calls(), []string{
		"--json --details show job 123", "--json --details show job 123", "--json --details show job 300",
	}; !slices.Equal(got, want) && !slices.Equal(got, []string{want[0], want[2], want[1]}) {
		t.Errorf("scontrol runs %q, want %q", got, want)
	}
}

// TestJobOfArrayTask: the array task whose JobId is its array's is asked
// for as <ArrayJobId>_<ArrayTaskId>, in text form, the one form in which
// scontrol prints that task alone: asked by the array's ID, or with --json,
// it prints the whole array (found by probing: D8, 1200 tasks past the
// output limit at every scrape).
func TestJobOfArrayTask(t *testing.T) {
	// More than maxOutput for the whole array, whatever the form.
	huge := `printf 'JobId=21845 ArrayJobId=21845 ArrayTaskId=1 JobName=sweep\n'; head -c 1100000 /dev/zero | tr '\000' ' '`
	scontrol, calls := fakeScontrol(t, `for last; do :; done
case "$1 $last" in
"--json "*) `+huge+` ;;
*" 21845_1") printf 'JobId=21845 ArrayJobId=21845 ArrayTaskId=1 JobName=sweep\n   UserId=alice(1000) GroupId=alice(1000) MCS_label=N/A\n   Account=physics QOS=normal\n   JobState=RUNNING Reason=None Dependency=(null)\n   Partition=gpu AllocNode:Sid=login:1\n   NodeList=node1\n   JOB_GRES=gpu:1\n     Nodes=node1 CPU_IDs=0 Mem=0 GRES=gpu:1(IDX:0)\n' ;;
*) `+huge+` ;;
esac`)
	c := &Client{Path: scontrol}
	job, err := c.JobOf(context.Background(), RunningJob{ID: "21845", Query: "21845_1", Start: "2026-11-22T09:00:00"})
	if err != nil {
		t.Fatal(err)
	}
	// The array's first task has the array's own ID.
	want := Job{ID: "21845", ArrayJobID: "21845", Name: "sweep", User: "alice", Account: "physics", Partition: "gpu", QOS: "normal",
		State: "RUNNING", NodeList: "node1", GPUs: map[string][]int{"node1": {0}}}
	if !reflect.DeepEqual(job, want) {
		t.Errorf("JobOf(21845_1) =\n%+v\nwant\n%+v", job, want)
	}
	if got := calls(); !slices.Equal(got, []string{"--details show job 21845_1"}) {
		t.Errorf("scontrol runs %q, want the task asked for in text form alone", got)
	}

	// Asked by its ID (a process's job squeue did not list), the array is
	// too large: an answer remembered like others, not asked again at
	// every scrape.
	c = &Client{Path: scontrol}
	for range 3 {
		if _, err := c.Job(context.Background(), "21845"); !errors.Is(err, ErrOutputTooLarge) {
			t.Fatalf("Job(21845) error = %v, want ErrOutputTooLarge", err)
		}
	}
	if n := len(calls()); n != 2 {
		t.Errorf("scontrol ran %d times, want 2: the too large answer is cached", n)
	}
}

// TestJobOfForgedRecord: free text can write a whole record into scontrol's
// text, after the first line of the real one it sits in. Job 302, asked as
// its array task 302_1 (text form), holds GPU 3 of node1; its comment
// writes a second record for job 302 holding GPUs 0-3. The first record is
// Slurm's: GPU 3 alone, where two records for one task used to be an
// error. A name writing a JOB_GRES= line makes the record untrusted:
// ErrUntrustedRecord, remembered like an answer (one scontrol run for two
// asks); so is a record without UserId=, ErrIncompleteRecord.
func TestJobOfForgedRecord(t *testing.T) {
	record := func(id, extra string) string {
		return "JobId=" + id + " ArrayJobId=302 ArrayTaskId=1 JobName=x" + extra + "\n   UserId=mallory(1002) GroupId=m(1002) MCS_label=N/A\n" +
			"   Priority=1 Nice=0 Account=acctM QOS=normal\n   JobState=RUNNING Reason=None Dependency=(null)\n   Partition=gpu AllocNode:Sid=login:1\n" +
			"   NodeList=node1\n   Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=*\n   JOB_GRES=gpu:1\n     Nodes=node1 CPU_IDs=0 Mem=0 GRES=gpu:1(IDX:3)\n"
	}
	forged := "\n\nJobId=302 JobName=y\n   UserId=alice(1000)\n   JobState=RUNNING\n   Socks/Node=*\n   JOB_GRES=gpu:4\n     Nodes=node1 CPU_IDs=0 Mem=0 GRES=gpu:4(IDX:0-3)"
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "302_1"), []byte(record("302", "")+"   Comment=c"+forged+"\n   StdOut=/x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "303_1"), []byte(record("303", "\n   JOB_GRES=gpu:4\n     Nodes=node1 CPU_IDs=0 Mem=0 GRES=gpu:4(IDX:0-3)")), 0o644); err != nil {
		t.Fatal(err)
	}
	path, calls := fakeScontrol(t, `for last; do :; done
[ "$1" = --json ] && { echo "scontrol: unrecognized option '--json'" >&2; exit 1; }
cat '`+dir+`'/"$last"`)
	c := &Client{Path: path}
	job, err := c.JobOf(context.Background(), RunningJob{ID: "302", Query: "302_1", Start: "s"})
	if err != nil || job.User != "mallory" || !reflect.DeepEqual(job.GPUs, map[string][]int{"node1": {3}}) {
		t.Errorf("JobOf(302_1) = %+v, %v; want mallory's job on GPU 3 alone", job, err)
	}
	for range 2 {
		if job, err := c.JobOf(context.Background(), RunningJob{ID: "303", Query: "303_1", Start: "s"}); !errors.Is(err, ErrUntrustedRecord) {
			t.Errorf("JobOf(303_1) = %+v, %v; want ErrUntrustedRecord", job, err)
		}
	}
	if n := strings.Count(strings.Join(calls(), "\n"), "show job 303_1"); n != 1 {
		t.Errorf("scontrol asked for 303_1 %d times, want 1: the refusal is remembered", n)
	}
	if err := os.WriteFile(filepath.Join(dir, "304_1"), []byte(strings.Replace(record("304", ""), "UserId=", "User=", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if job, err := c.JobOf(context.Background(), RunningJob{ID: "304", Query: "304_1", Start: "s"}); !errors.Is(err, ErrIncompleteRecord) {
			t.Errorf("JobOf(304_1) = %+v, %v; want ErrIncompleteRecord", job, err)
		}
	}
	if n := strings.Count(strings.Join(calls(), "\n"), "show job 304_1"); n != 1 {
		t.Errorf("scontrol asked for 304_1 %d times, want 1: the refusal is remembered", n)
	}
}

// TestClientListPIDsRetryWithinTheDeadline: scontrol 24.11 prints no row
// because a step ended; asked again, it hangs until the scrape's deadline.
// The first answer stands (unreachable steps: the source is up), where the
// cut-short retry made the Slurm source down for the scrape (review19 R2).
func TestClientListPIDsRetryWithinTheDeadline(t *testing.T) {
	path, calls := fakeScontrol(t, `n=$(wc -l < "$(dirname "$0")/calls.log")
[ "$n" -gt 1 ] && exec sleep 30
echo 'StepId=903.0 does not exist on this node.' >&2; exit 1`)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if _, err := (&Client{Path: path}).ListPIDs(ctx); !errors.Is(err, ErrUnreachableSteps) {
		t.Errorf("ListPIDs() error = %v, want the first run's ErrUnreachableSteps", err)
	}
	if n := len(calls()); n != 2 {
		t.Errorf("scontrol ran %d times, want 2", n)
	}
}
