package slurm

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
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

// FuzzParseNodeJobs checks squeue's job list: either an error or one job
// per non-blank line, in order, whose ID is a job number and whose query is
// that number or an array task of it, so nothing squeue prints can reach
// scontrol's command line as an option or ask for another job.
func FuzzParseNodeJobs(f *testing.F) {
	f.Add([]byte("  101|101|2026-11-22T09:14:03\n102|102|N/A\n\n"))
	f.Add([]byte("21845|21845_1|2026-11-22T09:14:03\n21846|21845_2|Tue 09:14\n4243|4242+1|x|y\n"))
	f.Add([]byte("--help|--help|x\n"))
	f.Fuzz(func(t *testing.T, out []byte) {
		jobs, err := parseNodeJobs(out)
		var lines []string
		for _, line := range strings.Split(string(out), "\n") {
			if strings.TrimSpace(line) != "" {
				lines = append(lines, line)
			}
		}
		if err != nil {
			if jobs != nil {
				t.Fatalf("jobs %+v returned with error %v", jobs, err)
			}
			return
		}
		if len(jobs) != len(lines) {
			t.Fatalf("jobs %+v, want one per non-blank line of %q", jobs, lines)
		}
		for i, j := range jobs {
			if first, _, _ := strings.Cut(lines[i], "|"); strings.TrimSpace(first) != j.ID {
				t.Fatalf("job %+v is not line %q", j, lines[i])
			}
			if !isJobNumber(j.ID) || (j.Query != j.ID && !strings.HasPrefix(j.Query, j.ID+"_")) || !validJobArg(j.Query) {
				t.Fatalf("job %+v: query is not the job or one of its array tasks", j)
			}
		}
	})
}

// A job ID squeue prints is what NodeJobs passes on, the array task whose
// ID is its array's is asked by its task ID, and garbage fails the whole
// list rather than dropping a line.
func TestParseNodeJobs(t *testing.T) {
	jobs, err := parseNodeJobs([]byte("  101|101|2026-11-22T09:14:03\n" +
		// The array's first task to run keeps the array's ID.
		"21845|21845_1|2026-11-22T09:14:03\n" +
		// Its other tasks have IDs of their own, which name them alone.
		"21846|21845_2|2026-11-22T09:14:04\n" +
		// A heterogeneous component is asked by its own ID.
		"4243|4242+1|Sun 09:14 | local\n\n"))
	want := []RunningJob{
		{ID: "101", Query: "101", Start: "2026-11-22T09:14:03"},
		{ID: "21845", Query: "21845_1", Start: "2026-11-22T09:14:03"},
		{ID: "21846", Query: "21846", Start: "2026-11-22T09:14:04"},
		{ID: "4243", Query: "4243", Start: "Sun 09:14 | local"},
	}
	if err != nil || !reflect.DeepEqual(jobs, want) {
		t.Errorf("parseNodeJobs = %+v, %v; want %+v", jobs, err, want)
	}
	for _, out := range []string{"101|101|x\n-x|-x|y\n", "101\n", "101_3|101_3|x\n"} {
		if _, err := parseNodeJobs([]byte(out)); err == nil || errors.Is(err, ErrJobNotFound) {
			t.Errorf("parseNodeJobs(%q): error %v, want an unexpected line", out, err)
		}
	}
}
