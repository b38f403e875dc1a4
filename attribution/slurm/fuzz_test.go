package slurm

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/xpu-exporter/xpu_exporter/attribution/internal/slurmid"
)

// FuzzParseJobJSON feeds hostile `scontrol --json show job` and `squeue
// --json` output: an error, or jobs within the same bounds as the text form.
func FuzzParseJobJSON(f *testing.F) {
	// One job per seed: a whole response (66 KB for squeue's) leaves the
	// fuzzer minimising instead of exploring.
	for _, name := range []string{
		"constructed/scontrol-show-job-json-v0.0.41.json",
		"constructed/scontrol-show-job-json-v0.0.41-mps.json",
		"22.05/cgroup-v1-task-cgroup/squeue.json",
	} {
		var resp struct {
			Jobs []json.RawMessage `json:"jobs"`
		}
		if err := json.Unmarshal(readFixture(f, name), &resp); err != nil || len(resp.Jobs) == 0 {
			f.Fatalf("%s: %v", name, err)
		}
		for _, job := range resp.Jobs {
			var compact bytes.Buffer
			if err := json.Compact(&compact, job); err != nil {
				f.Fatal(err)
			}
			f.Add([]byte(`{"jobs":[` + compact.String() + `]}`))
		}
	}
	f.Add(readFixture(f, "22.05/linuxproc-plainfile-gres/scontrol-json-attempt.txt"))
	f.Add([]byte(`{"jobs":[],"errors":[{"error_number":2017,"description":"Invalid job id specified"}]}`))
	f.Add([]byte(`{"jobs":[{"job_id":1e3,"nodes":"n[0-99999]","gres_detail":["gpu:9(IDX:0-999999999)"],"job_state":[]}]}`))
	f.Fuzz(func(t *testing.T, out []byte) {
		jobs, err := ParseJobJSON(out)
		if err != nil {
			if jobs != nil {
				t.Fatalf("jobs %+v returned with error %v", jobs, err)
			}
			return
		}
		if len(jobs) == 0 {
			t.Fatal("no jobs and no error: a response without jobs is ErrJobNotFound or Slurm's message")
		}
		checkJobs(t, jobs)
	})
}

// FuzzParseListPIDs checks that every process kept from `scontrol listpids`
// is a row of the input whose first three columns are a positive PID, a job
// number and a step, and that only a missing header is an error.
func FuzzParseListPIDs(f *testing.F) {
	f.Add(readFixture(f, "22.05/cgroup-v1-task-cgroup/scontrol-listpids.txt"))
	f.Add(readFixture(f, "22.05/linuxproc-plainfile-gres/scontrol-listpids.txt"))
	f.Add([]byte("PID JOBID STEPID\n-1 1 extern\n99999999999999999999 1 0\n1 4294967296 batch\n2 3 interactive\n"))
	f.Fuzz(func(t *testing.T, out []byte) {
		procs, err := ParseListPIDs(out)
		lines := strings.Split(string(out), "\n")
		header := strings.Fields(lines[0])
		hasHeader := len(header) >= 3 && header[0] == "PID" && header[1] == "JOBID" && header[2] == "STEPID"
		if (err == nil) != hasHeader {
			t.Fatalf("header %q: error %v", header, err)
		}
		rows := map[string]int{}
		for _, line := range lines[1:] {
			// The PID as a number: "017" is PID 17.
			if fields := strings.Fields(line); len(fields) >= 3 {
				if pid, err := strconv.Atoi(fields[0]); err == nil {
					rows[strconv.Itoa(pid)+" "+fields[1]+" "+fields[2]]++
				}
			}
		}
		for _, p := range procs {
			if p.PID <= 0 || !isJobNumber(p.JobID) || !slurmid.IsStep(p.StepID) {
				t.Fatalf("process %+v escaped the checks", p)
			}
			row := strconv.Itoa(p.PID) + " " + p.JobID + " " + p.StepID
			if rows[row] == 0 {
				t.Fatalf("process %+v is not a row of the input (or more often than it)", p)
			}
			rows[row]--
		}
	})
}

// FuzzParseNodeJobs checks squeue's job list: either an error or one valid
// job argument per non-blank line, in order, so nothing squeue prints can
// reach scontrol's command line as an option.
func FuzzParseNodeJobs(f *testing.F) {
	f.Add([]byte("  101\n102\n\n"))
	f.Add([]byte("4242_7\n4243+1\ns5K1KKYAYG5D00\n"))
	f.Add([]byte("--help\n"))
	f.Fuzz(func(t *testing.T, out []byte) {
		jobs, err := parseNodeJobs(out)
		var want []string
		for _, line := range strings.Split(string(out), "\n") {
			if id := strings.TrimSpace(line); id != "" {
				want = append(want, id)
			}
		}
		if err != nil {
			if jobs != nil {
				t.Fatalf("jobs %q returned with error %v", jobs, err)
			}
			return
		}
		if strings.Join(jobs, "\n") != strings.Join(want, "\n") || len(jobs) != len(want) {
			t.Fatalf("jobs %q, want the non-blank lines %q", jobs, want)
		}
		for _, id := range jobs {
			if !validJobArg(id) || strings.HasPrefix(id, "-") {
				t.Fatalf("job %q is not a job argument", id)
			}
		}
	})
}

// A job ID squeue prints is what NodeJobs passes on, and garbage fails the
// whole list rather than dropping a line.
func TestParseNodeJobs(t *testing.T) {
	jobs, err := parseNodeJobs([]byte("  101\n102_3\n\n"))
	if err != nil || strings.Join(jobs, ",") != "101,102_3" {
		t.Errorf("parseNodeJobs = %q, %v; want 101 and 102_3", jobs, err)
	}
	if _, err := parseNodeJobs([]byte("101\n-x\n")); err == nil || errors.Is(err, ErrJobNotFound) {
		t.Errorf("an option-like line: error %v, want an unexpected job ID", err)
	}
}
