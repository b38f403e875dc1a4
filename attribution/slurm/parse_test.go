package slurm

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

const fixtures = "../../fixtures/slurm"

func readFixture(t testing.TB, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(fixtures, name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// multinodeJob is the job of the constructed text and JSON fixtures.
var multinodeJob = Job{
	ID:        "4242",
	User:      "alice",
	Account:   "ml-research",
	Partition: "gpu",
	QOS:       "high",
	State:     "RUNNING",
	NodeList:  "gpu-node[07-08]",
	GPUs:      map[string][]int{"gpu-node07": {0, 1, 2, 3}, "gpu-node08": {4, 6}},
}

func withName(j Job, name string) Job {
	j.Name = name
	return j
}

func TestParseJobText(t *testing.T) {
	tests := []struct {
		file string
		want Job
	}{
		{
			// Real 22.05, batch job holding GPU 0, account unset.
			file: "22.05/cgroup-v1-task-cgroup/scontrol-show-job-d-job16.txt",
			want: Job{ID: "16", Name: "gpu-sleep", User: "root", Partition: "debug", State: "RUNNING",
				NodeList: "vm", GPUs: map[string][]int{"vm": {0}}},
		},
		{
			// Real 22.05, srun step holding GPU 1.
			file: "22.05/cgroup-v1-task-cgroup/scontrol-show-job-d-job17.txt",
			want: Job{ID: "17", Name: "srun-gpu1", User: "root", Partition: "debug", State: "RUNNING",
				NodeList: "vm", GPUs: map[string][]int{"vm": {1}}},
		},
		{
			// Real 22.05, account set, no GRES ("GRES=" empty).
			file: "22.05/cgroup-v1-task-cgroup/scontrol-show-job-d-job15.txt",
			want: Job{ID: "15", Name: "plain-sleep", User: "root", Account: "testacct", Partition: "debug",
				State: "RUNNING", NodeList: "vm"},
		},
		{
			// Real 22.05 without --details: TresPerNode=gres:gpu:1 is a
			// count, not indices.
			file: "22.05/cgroup-v1-task-cgroup/scontrol-show-job16.txt",
			want: Job{ID: "16", Name: "gpu-sleep", User: "root", Partition: "debug", State: "RUNNING",
				NodeList: "vm"},
		},
		{
			// Real 22.05 on proctrack/cgroup and proctrack/linuxproc nodes.
			file: "22.05/cgroup-v1-proctrack-only/scontrol-show-job-d-job12.txt",
			want: Job{ID: "12", Name: "gpu-sleep", User: "root", Partition: "debug", State: "RUNNING",
				NodeList: "vm", GPUs: map[string][]int{"vm": {0}}},
		},
		{
			file: "22.05/linuxproc/scontrol-show-job-d-job7.txt",
			want: Job{ID: "7", Name: "gpu-sleep", User: "root", Partition: "debug", State: "RUNNING",
				NodeList: "vm", GPUs: map[string][]int{"vm": {0}}},
		},
		{
			// Real 22.05: --gres=gpu:0 gives no GPU.
			file: "22.05/linuxproc/scontrol-show-job-d-job9.txt",
			want: Job{ID: "9", Name: "srun-gpu", User: "root", Partition: "debug", State: "RUNNING",
				NodeList: "vm"},
		},
		{
			// Real 22.05: --qos=normal on a cluster without QoS, QOS=(null).
			file: "22.05/linuxproc-plainfile-gres/scontrol-show-job-d-job4.txt",
			want: Job{ID: "4", Name: "qos-try", User: "root", Partition: "debug", State: "RUNNING",
				NodeList: "vm"},
		},
		{
			file: "constructed/scontrol-show-job-d-multinode.txt",
			want: withName(multinodeJob, "llama finetune run=3 (lr sweep)"),
		},
		{
			// Shared GRES since 23.11.2: 2 of GPU 1's 4 shards.
			file: "constructed/scontrol-show-job-d-shard-24.05.txt",
			want: Job{ID: "205", Name: "notebook", User: "bob", Account: "chem", Partition: "shared", QOS: "normal",
				State: "RUNNING", NodeList: "gpu-node03",
				Shared: map[string][]SharedGPU{"gpu-node03": {{Index: 1, Alloc: 2, Avail: 4}}}},
		},
		{
			// Shared GRES before 23.11.2: GPU 2, the part unknown.
			file: "constructed/scontrol-show-job-d-shard-23.02.txt",
			want: Job{ID: "206", Name: "shard-test", User: "carol", Account: "bio", Partition: "shared", QOS: "normal",
				State: "RUNNING", NodeList: "gpu-node03",
				Shared: map[string][]SharedGPU{"gpu-node03": {{Index: 2}}}},
		},
		{
			file: "constructed/scontrol-show-job-d-array-19.05.txt",
			want: Job{ID: "88231", ArrayJobID: "88100", Name: "sweep_array.sh", User: "30412", Account: "physics", Partition: "gpu-long",
				QOS: "normal", State: "RUNNING", NodeList: "g[009-010],g012",
				GPUs: map[string][]int{"g009": {0, 1, 4}, "g010": {0, 1, 4}}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			jobs, err := ParseJobText(readFixture(t, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			if len(jobs) != 1 {
				t.Fatalf("got %d records, want 1", len(jobs))
			}
			if !reflect.DeepEqual(jobs[0], tc.want) {
				t.Errorf("ParseJobText() =\n%+v\nwant\n%+v", jobs[0], tc.want)
			}
		})
	}
}

// TestParseJobTextForgedLines: scontrol prints free text raw (JobName=%s
// at src/api/job_info.c:412 @ slurm-22-05-0-1, src/scontrol/info_job.c:198
// @ slurm-25-11-0-1; WorkDir, Comment and StdOut likewise), and slurmctld
// checks only a name's length (job_mgr.c:8007 @ slurm-23-11-1-1): a
// newline in it writes lines of the user's choosing into the record. The
// real record of job 16 (22.05) holds GPU 0 of node vm. By hand:
//   - a forged Nodes= line, out of the place Slurm prints detail lines
//     (after JOB_GRES=, before 20.02 after Socks/Node=), is not a detail
//     line: GPUs stay {vm: [0]}, whether it follows JobName or WorkDir;
//   - a forged JOB_GRES= block, UserId=, or Socks/Node= (the pre-20.02
//     anchor) makes a key Slurm prints once appear twice: which one is
//     Slurm's cannot be told, the output is refused (ErrUntrustedRecord);
//   - a forged "JobId=" line starts a record, leaving the real one's
//     first line alone, without UserId= or JobState=: refused;
//   - a value without a newline but with " UserId=…" (Network=, not read
//     to the end of its line) gives UserId twice: refused.
//
// Found by probing: D1, a job named so took every idle GPU of the node and
// half of another user's.
// A heterogeneous job's component names its leader, an array task its
// array, on the record's first line (slurm_sprint_job_info); the same key
// on a later line was written by free text.
func TestParseJobTextParents(t *testing.T) {
	const rest = "   UserId=alice(1000) GroupId=alice(1000) MCS_label=N/A\n   JobState=RUNNING Reason=None Dependency=(null)\n   NodeList=n1\n"
	jobs, err := ParseJobText([]byte("JobId=701 HetJobId=700 HetJobOffset=1 JobName=het\n" + rest))
	if err != nil || len(jobs) != 1 || jobs[0].HetJobID != "700" || jobs[0].ArrayJobID != "" {
		t.Errorf("het component: %+v, %v; want het job 700", jobs, err)
	}
	jobs, err = ParseJobText([]byte("JobId=805 ArrayJobId=800 ArrayTaskId=5 JobName=sweep\n" + rest))
	if err != nil || len(jobs) != 1 || jobs[0].ArrayJobID != "800" || jobs[0].HetJobID != "" {
		t.Errorf("array task: %+v, %v; want array 800", jobs, err)
	}
	if jobs, err := ParseJobText([]byte("JobId=805 JobName=sweep\n" + rest + "   ArrayJobId=1\n")); !errors.Is(err, ErrUntrustedRecord) {
		t.Errorf("ArrayJobId on a later line: %+v, %v; want ErrUntrustedRecord", jobs, err)
	}
}

func TestParseJobTextForgedLines(t *testing.T) {
	job16 := string(readFixture(t, "22.05/cgroup-v1-task-cgroup/scontrol-show-job-d-job16.txt"))
	real16 := Job{ID: "16", Name: "gpu-sleep", User: "root", Partition: "debug", State: "RUNNING",
		NodeList: "vm", GPUs: map[string][]int{"vm": {0}}}
	// after appends text to the line of record that starts with prefix,
	// as scontrol prints a value holding it.
	after := func(record, prefix, text string) string {
		i := strings.Index(record, "\n"+prefix)
		if i < 0 && strings.HasPrefix(record, prefix) {
			i = -1
		} else if i < 0 {
			t.Fatalf("no line %q", prefix)
		}
		end := i + 1 + strings.IndexByte(record[i+1:], '\n')
		return record[:end] + text + record[end:]
	}
	const forgedNodes = "\n   Nodes=vm CPU_IDs=0 Mem=0 GRES=gpu:8(IDX:0-7)"
	tests := []struct {
		name string
		out  string
		want Job // zero: refused
	}{
		{name: "Nodes line in the name", out: after(job16, "JobId=16 JobName=gpu-sleep", forgedNodes),
			want: withName(real16, "gpu-sleep")},
		{name: "Nodes line in the working directory", out: after(job16, "   WorkDir=", forgedNodes), want: real16},
		{name: "JOB_GRES block in the name", out: after(job16, "JobId=16 JobName=gpu-sleep", "\n   JOB_GRES=gpu:8"+forgedNodes)},
		{name: "JOB_GRES block in the output file", out: after(job16, "   StdOut=", "\n   JOB_GRES=gpu:8"+forgedNodes)},
		{name: "user in the working directory", out: after(job16, "   WorkDir=", "\n   UserId=alice(1000) GroupId=alice(1000)")},
		{name: "record in the name", out: after(job16, "JobId=16 JobName=gpu-sleep",
			"\n\nJobId=16 JobName=y\n   UserId=root(0)\n   JobState=RUNNING\n   JOB_GRES=gpu:8"+forgedNodes)},
		{name: "user in the network", out: after(job16, "   OverSubscribe=OK", " UserId=alice(1000)")},
		{name: "Socks/Node anchor in a 19.05 name", out: after(string(readFixture(t, "constructed/scontrol-show-job-d-array-19.05.txt")),
			"JobId=88231", "\n   Socks/Node=*"+strings.Replace(forgedNodes, "vm", "g009", 1))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			jobs, err := ParseJobText([]byte(tc.out))
			if tc.want.ID == "" {
				if !errors.Is(err, ErrUntrustedRecord) {
					t.Errorf("ParseJobText() = %+v, %v; want ErrUntrustedRecord\n%s", jobs, err, tc.out)
				}
				return
			}
			if err != nil || len(jobs) != 1 || !reflect.DeepEqual(jobs[0], tc.want) {
				t.Errorf("ParseJobText() = %+v, %v; want\n%+v\n%s", jobs, err, tc.want, tc.out)
			}
		})
	}
}

func TestParseJobTextAll(t *testing.T) {
	// Real 22.05 `scontrol show job -d` of all jobs: 18 records, the
	// CANCELLED ones keeping JOB_GRES but no indices.
	jobs, err := ParseJobText(readFixture(t, "22.05/cgroup-v1-task-cgroup/scontrol-show-job-d-all.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 18 {
		t.Fatalf("got %d records, want 18", len(jobs))
	}
	states := make(map[string]int)
	withGPUs := []string{}
	for _, j := range jobs {
		states[j.State]++
		if len(j.GPUs) > 0 {
			withGPUs = append(withGPUs, j.ID)
		}
	}
	if states["RUNNING"] != 4 || states["CANCELLED"] != 14 {
		t.Errorf("states = %v, want 4 RUNNING and 14 CANCELLED", states)
	}
	if !reflect.DeepEqual(withGPUs, []string{"16", "17"}) {
		t.Errorf("jobs with GPU indices = %v, want [16 17]", withGPUs)
	}

	job, err := pickJob(jobs, "17")
	if err != nil {
		t.Fatal(err)
	}
	if job.Name != "srun-gpu1" || !reflect.DeepEqual(job.GPUs, map[string][]int{"vm": {1}}) {
		t.Errorf("pickJob(17) = %+v", job)
	}
	if _, err := pickJob(jobs, "99"); err == nil {
		t.Error("pickJob(99) among 18 records succeeded, want an error")
	}
}

func TestParseJobTextRejects(t *testing.T) {
	for _, out := range []string{
		"",
		"slurm_load_jobs error: Invalid job id specified\n",
		"   UserId=root(0) GroupId=root(0)\n",
		"JobId=abc JobName=x\n",
		"\x00\xff garbage",
	} {
		if jobs, err := ParseJobText([]byte(out)); err == nil {
			t.Errorf("ParseJobText(%q) = %+v, want an error", out, jobs)
		}
	}
}

func TestParseJobTextBounds(t *testing.T) {
	out := "JobId=1 JobName=big\n   UserId=a(1) JobState=RUNNING\n   JOB_GRES=gpu:1\n" +
		"     Nodes=a[0-39999] CPU_IDs=0 Mem=0 GRES=gpu:1(IDX:0)\n" +
		// 4000 more nodes fit the host budget, but 8 GPUs on each do not
		// fit what remains of the GPU budget.
		"     Nodes=c[0-3999] CPU_IDs=0 Mem=0 GRES=gpu:8(IDX:0-7)\n" +
		"     Nodes=d1 CPU_IDs=0 Mem=0 GRES=gpu:2(IDX:2-3)\n" +
		// 40000 more names do not fit the host budget, which is then
		// spent: nothing after it is expanded.
		"     Nodes=b[0-39999] CPU_IDs=0 Mem=0 GRES=gpu:1(IDX:1)\n" +
		"     Nodes=e1 CPU_IDs=0 Mem=0 GRES=gpu:1(IDX:1)\n"
	jobs, err := ParseJobText([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	gpus := jobs[0].GPUs
	if len(gpus) != 40001 {
		t.Errorf("%d nodes with GPUs, want 40001 (a0…a39999 and d1)", len(gpus))
	}
	if !reflect.DeepEqual(gpus["a0"], []int{0}) || !reflect.DeepEqual(gpus["d1"], []int{2, 3}) {
		t.Errorf("a0 = %v, d1 = %v", gpus["a0"], gpus["d1"])
	}
	for _, node := range []string{"c0", "b0", "e1"} {
		if gpus[node] != nil {
			t.Errorf("%s = %v, want nothing past the bounds", node, gpus[node])
		}
	}
}

func TestSplitPairs(t *testing.T) {
	tests := []struct {
		line string
		want []pair
	}{
		{
			line: "Partition=debug AllocNode:Sid=localhost:15258",
			want: []pair{{"Partition", "debug"}, {"AllocNode:Sid", "localhost:15258"}},
		},
		{
			line: "JobId=1 JobName=a b=c d",
			want: []pair{{"JobId", "1"}, {"JobName", "a b=c d"}},
		},
		{
			line: "Reason=ReqNodeNotAvail, UnavailableNodes:n[1-2] Dependency=(null)",
			want: []pair{{"Reason", "ReqNodeNotAvail, UnavailableNodes:n[1-2]"}, {"Dependency", "(null)"}},
		},
		{
			line: "Power=",
			want: []pair{{"Power", ""}},
		},
		{
			line: "NodeName=vm Arch=x86_64 CoresPerSocket=8 ",
			want: []pair{{"NodeName", "vm"}, {"Arch", "x86_64"}, {"CoresPerSocket", "8"}},
		},
		{line: "no pairs here", want: nil},
	}
	for _, tc := range tests {
		if got := splitPairs(tc.line); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("splitPairs(%q) = %q, want %q", tc.line, got, tc.want)
		}
	}
}

func TestParseJobJSON(t *testing.T) {
	t.Run("v0.0.41 scontrol", func(t *testing.T) {
		jobs, err := ParseJobJSON(readFixture(t, "constructed/scontrol-show-job-json-v0.0.41.json"))
		if err != nil {
			t.Fatal(err)
		}
		want := withName(multinodeJob, "llama finetune")
		if len(jobs) != 1 || !reflect.DeepEqual(jobs[0], want) {
			t.Errorf("ParseJobJSON() =\n%+v\nwant\n%+v", jobs, want)
		}
	})

	t.Run("v0.0.41 scontrol, MPS", func(t *testing.T) {
		jobs, err := ParseJobJSON(readFixture(t, "constructed/scontrol-show-job-json-v0.0.41-mps.json"))
		if err != nil {
			t.Fatal(err)
		}
		want := withName(multinodeJob, "mps serve")
		want.ID, want.GPUs = "4250", nil
		// 50 of GPU 1's 100 on gpu-node07; 100 of GPU 5's and 25 of GPU
		// 6's on gpu-node08.
		want.Shared = map[string][]SharedGPU{
			"gpu-node07": {{Index: 1, Alloc: 50, Avail: 100}},
			"gpu-node08": {{Index: 5, Alloc: 100, Avail: 100}, {Index: 6, Alloc: 25, Avail: 100}},
		}
		if len(jobs) != 1 || !reflect.DeepEqual(jobs[0], want) {
			t.Errorf("ParseJobJSON() =\n%+v\nwant\n%+v", jobs, want)
		}
	})

	t.Run("v0.0.38 squeue, real 22.05", func(t *testing.T) {
		jobs, err := ParseJobJSON(readFixture(t, "22.05/cgroup-v1-task-cgroup/squeue.json"))
		if err != nil {
			t.Fatal(err)
		}
		if len(jobs) != 18 {
			t.Fatalf("got %d jobs, want 18", len(jobs))
		}
		got, err := pickJob(jobs, "16")
		if err != nil {
			t.Fatal(err)
		}
		want := Job{ID: "16", Name: "gpu-sleep", User: "root", Partition: "debug", State: "RUNNING",
			NodeList: "vm", GPUs: map[string][]int{"vm": {0}}}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("job 16 =\n%+v\nwant\n%+v", got, want)
		}
		got, _ = pickJob(jobs, "15")
		if got.Account != "testacct" || got.QOS != "" || got.GPUs != nil {
			t.Errorf("job 15 = %+v, want account testacct, no QoS, no GPUs", got)
		}
	})

	// An array task and a heterogeneous job's component name their array
	// and leader: {"set", "infinite", "number"} from data_parser v0.0.40
	// on, a bare number before; 0 or unset names none.
	t.Run("array and het parents", func(t *testing.T) {
		for _, tc := range []struct{ name, fields, array, het string }{
			{"v0.0.41 array task", `"array_job_id": {"set": true, "infinite": false, "number": 800}, "het_job_id": {"set": true, "infinite": false, "number": 0}`, "800", ""},
			{"v0.0.41 het component", `"array_job_id": {"set": true, "infinite": false, "number": 0}, "het_job_id": {"set": true, "infinite": false, "number": 700}`, "", "700"},
			{"v0.0.41 unset", `"array_job_id": {"set": false, "infinite": false, "number": 800}`, "", ""},
			{"v0.0.38 array task", `"array_job_id": 800, "het_job_id": 0`, "800", ""},
		} {
			out := `{"jobs": [{"job_id": 805, ` + tc.fields + `, "name": "x", "user_name": "alice", "job_state": "RUNNING", "nodes": "n1"}], "errors": []}`
			jobs, err := ParseJobJSON([]byte(out))
			if err != nil || len(jobs) != 1 || jobs[0].ArrayJobID != tc.array || jobs[0].HetJobID != tc.het {
				t.Errorf("%s: %+v, %v; want array %q, het %q", tc.name, jobs, err, tc.array, tc.het)
			}
		}
	})

	t.Run("errors", func(t *testing.T) {
		tests := []struct {
			name, out string
			notFound  bool
		}{
			{name: "invalid job id", notFound: true,
				out: `{"jobs":[],"errors":[{"description":"","error_number":2017,"error":"Invalid job id specified","source":"slurm_load_job()"}]}`},
			{name: "no jobs, no errors", notFound: true, out: `{"jobs":[],"errors":[]}`},
			{name: "controller down",
				out: `{"jobs":[],"errors":[{"description":"","error_number":1007,"error":"Unable to contact slurm controller (connect failure)"}]}`},
			{name: "not JSON", out: "JobId=1 JobName=x\n"},
			{name: "job_state of the wrong type", out: `{"jobs":[{"job_id":1,"job_state":{"a":1}}]}`},
			{name: "job_id missing", out: `{"jobs":[{"name":"x"}]}`},
			{name: "job_id negative", out: `{"jobs":[{"job_id":-1}]}`},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				jobs, err := ParseJobJSON([]byte(tc.out))
				if err == nil {
					t.Fatalf("ParseJobJSON() = %+v, want an error", jobs)
				}
				if errors.Is(err, ErrJobNotFound) != tc.notFound {
					t.Errorf("error %v: errors.Is(ErrJobNotFound) = %v, want %v", err, !tc.notFound, tc.notFound)
				}
			})
		}
	})

	t.Run("gres_detail not one per node", func(t *testing.T) {
		jobs, err := ParseJobJSON([]byte(`{"jobs":[{"job_id":5,"nodes":"n[1-2]","job_state":["RUNNING","COMPLETING"],"gres_detail":["gpu:1(IDX:0)"]}]}`))
		if err != nil {
			t.Fatal(err)
		}
		if jobs[0].GPUs != nil || jobs[0].State != "RUNNING" || jobs[0].NodeList != "n[1-2]" {
			t.Errorf("got %+v, want nodes n[1-2], no GPUs, state RUNNING", jobs[0])
		}
	})

	t.Run("user by number", func(t *testing.T) {
		jobs, err := ParseJobJSON([]byte(`{"jobs":[{"job_id":5,"user_id":30412,"user_name":""}]}`))
		if err != nil {
			t.Fatal(err)
		}
		if jobs[0].User != "30412" {
			t.Errorf("User = %q, want the UID", jobs[0].User)
		}
	})
}

func TestParseGRES(t *testing.T) {
	tests := []struct {
		gres    string
		whole   []int
		shared  []SharedGPU
		counted bool
		wantErr bool
	}{
		{gres: "gpu:2(IDX:0-1)", whole: []int{0, 1}},
		{gres: "gpu:a100:2(IDX:0,3)", whole: []int{0, 3}},
		{gres: "gpu(IDX:0-1,4)", whole: []int{0, 1, 4}},
		{gres: "gpu:a100:1(IDX:0),gpu:v100:1(IDX:2)", whole: []int{0, 2}},
		{gres: "gpu:1g.10gb:2(IDX:5-6)", whole: []int{5, 6}},
		// Shared GRES since 23.11.2: <alloc>/<avail> per GPU index; a GPU
		// with 0 allocated is not the job's.
		{gres: "shard:2(0/4,2/4,0/4)", shared: []SharedGPU{{Index: 1, Alloc: 2, Avail: 4}}},
		{gres: "shard:a100:3(1/4,2/8)", shared: []SharedGPU{{Index: 0, Alloc: 1, Avail: 4}, {Index: 1, Alloc: 2, Avail: 8}}},
		{gres: "gpu:1(IDX:3),mps:100(0/100,100/100)", whole: []int{3}, shared: []SharedGPU{{Index: 1, Alloc: 100, Avail: 100}}},
		// Before 23.11.2: the GPUs' indices alone, the part unknown.
		{gres: "shard:1(IDX:2)", shared: []SharedGPU{{Index: 2}}},
		{gres: "mps:50(IDX:0-1)", shared: []SharedGPU{{Index: 0}, {Index: 1}}},
		// A GPU named by two shared GRES: held, in a part not known.
		{gres: "mps:50(50/100,0/100),shard:1(1/4,0/4)", shared: []SharedGPU{{Index: 0}}},
		// Held whole and in part: whole.
		{gres: "gpu:1(IDX:0),shard:1(1/4,0/4)", whole: []int{0}},
		{gres: "shard:0(0/4,0/4)"},
		{gres: "shard:2((null))"},
		// A count alone (gres.conf without File=): GPUs held, which ones
		// unknown.
		{gres: "shard(CNT:2)", counted: true},
		{gres: "gpu(CNT:1)", counted: true},
		{gres: "gpu:a100:1(IDX:0),mps(CNT:50)", whole: []int{0}, counted: true},
		{gres: "gpu(CNT:0)"},
		{gres: "shard:0(IDX:N/A)"},
		{gres: "nic:1(IDX:0)"},
		{gres: "gpu:2"},
		{gres: "gpu:0(IDX:N/A)"},
		{gres: ""},
		{gres: "(null)"},
		{gres: "gpu:2(IDX:0-999999999)", wantErr: true},
		{gres: "gpu:2(IDX:1-0)", wantErr: true},
		{gres: "gpu:2(IDX:0-1", wantErr: true},
		{gres: "gpu:2(IDX:a)", wantErr: true},
		{gres: "gpu:2(IDX:-1)", wantErr: true},
		{gres: "shard:5(5/4)", wantErr: true},
		{gres: "shard:1(1/4,x)", wantErr: true},
		{gres: "shard:1(1/-4)", wantErr: true},
		{gres: "mps:1(IDX:9999)", wantErr: true},
		{gres: "shard:1(" + strings.Repeat("0/1,", maxGPUIndex+1) + "1/1)", wantErr: true},
	}
	for _, tc := range tests {
		whole, shared, counted, err := parseGRES(tc.gres)
		if (err != nil) != tc.wantErr {
			t.Errorf("parseGRES(%q) error = %v, wantErr %v", tc.gres, err, tc.wantErr)
			continue
		}
		if !reflect.DeepEqual(whole, tc.whole) || !reflect.DeepEqual(shared, tc.shared) || counted != tc.counted {
			t.Errorf("parseGRES(%q) = %v, %+v, counted %v; want %v, %+v, %v", tc.gres, whole, shared, counted, tc.whole, tc.shared, tc.counted)
		}
	}
}

func TestSharedGPUShare(t *testing.T) {
	for _, tc := range []struct {
		g    SharedGPU
		want float64
	}{
		{SharedGPU{Index: 1, Alloc: 2, Avail: 4}, 0.5}, // 2 of 4 shards
		{SharedGPU{Index: 0, Alloc: 50, Avail: 100}, 0.5},
		{SharedGPU{Index: 0, Alloc: 3, Avail: 8}, 0.375}, // 3/8
		{SharedGPU{Index: 2}, 0},                         // before 23.11.2: unknown
	} {
		if got := tc.g.Share(); got != tc.want {
			t.Errorf("%+v.Share() = %v, want %v", tc.g, got, tc.want)
		}
	}
}

func TestExpandHostlist(t *testing.T) {
	tests := []struct {
		in      string
		want    []string
		wantErr bool
	}{
		{in: "vm", want: []string{"vm"}},
		{in: "gpu-node[07-08]", want: []string{"gpu-node07", "gpu-node08"}},
		{in: "g[009-010],g012", want: []string{"g009", "g010", "g012"}},
		{in: "n[1-3,10]", want: []string{"n1", "n2", "n3", "n10"}},
		{in: "rack[1-2]-n[01-02]", want: []string{"rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"}},
		{in: "(null)", want: nil},
		{in: "", want: nil},
		{in: "n[0-99999999]", wantErr: true},
		{in: "a[1-200]b[1-400]", wantErr: true},
		{in: "n[1-2", wantErr: true},
		{in: "n]1", wantErr: true},
		{in: "n[2-1]", wantErr: true},
	}
	for _, tc := range tests {
		got, err := expandHostlist(tc.in, maxHosts)
		if (err != nil) != tc.wantErr {
			t.Errorf("expandHostlist(%q) error = %v, wantErr %v", tc.in, err, tc.wantErr)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("expandHostlist(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestParseListPIDs(t *testing.T) {
	got, err := ParseListPIDs(readFixture(t, "22.05/cgroup-v1-task-cgroup/scontrol-listpids.txt"))
	if err != nil {
		t.Fatal(err)
	}
	want := []StepProcess{
		{PID: 18723, JobID: "16", StepID: "batch"},
		{PID: 18724, JobID: "16", StepID: "batch"},
		{PID: 18711, JobID: "15", StepID: "batch"},
		{PID: 18716, JobID: "15", StepID: "batch"},
		{PID: 18728, JobID: "18", StepID: "0"},
		{PID: 18727, JobID: "17", StepID: "0"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ParseListPIDs() =\n%v\nwant\n%v", got, want)
	}

	got, err = ParseListPIDs([]byte("PID      JOBID    STEPID   LOCALID GLOBALID\n" +
		"-1       13073    extern   0       0\n" +
		"3913206  13073    extern   -       -\n" +
		"garbage\n" +
		"12       x        batch    0       0\n"))
	if err != nil {
		t.Fatal(err)
	}
	if want := []StepProcess{{PID: 3913206, JobID: "13073", StepID: "extern"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("ParseListPIDs() = %v, want %v", got, want)
	}

	for _, out := range []string{"", "No job steps exist on this node.\n", "18723 16 batch 0 0\n"} {
		if _, err := ParseListPIDs([]byte(out)); err == nil {
			t.Errorf("ParseListPIDs(%q) succeeded, want an error", out)
		}
	}
}

func FuzzParseJobText(f *testing.F) {
	for _, name := range []string{
		"22.05/cgroup-v1-task-cgroup/scontrol-show-job-d-job16.txt",
		"22.05/cgroup-v1-task-cgroup/scontrol-show-job-d-all.txt",
		"constructed/scontrol-show-job-d-multinode.txt",
		"constructed/scontrol-show-job-d-array-19.05.txt",
		"constructed/scontrol-show-job-d-shard-24.05.txt",
		"constructed/scontrol-show-job-d-shard-23.02.txt",
	} {
		f.Add(readFixture(f, name))
	}
	f.Add([]byte("JobId=1\n Nodes=n[0-999999] GRES=gpu:9(IDX:0-999999999)\n"))
	f.Add([]byte("JobId=1\n Nodes=n[0-1] GRES=gpu:1(IDX:0),shard:3(1/4,2/2),mps:5(IDX:1)\n Nodes=n1 GRES=shard:1(0/4,1/4)\n"))
	f.Fuzz(func(t *testing.T, out []byte) {
		jobs, err := ParseJobText(out)
		if err != nil {
			return
		}
		checkJobs(t, jobs)
	})
}

// checkJobs holds parsed jobs to the bounds of gres.go: numeric IDs, and GPU
// indices per node sorted, unique, in range and within the budget.
func checkJobs(t *testing.T, jobs []Job) {
	t.Helper()
	entries := 0
	for _, j := range jobs {
		for _, idx := range j.GPUs {
			entries += len(idx)
		}
	}
	if entries > maxGPUEntries {
		t.Errorf("%d GPU indices, over the bound of %d", entries, maxGPUEntries)
	}
	for _, j := range jobs {
		for _, gpus := range j.Shared {
			entries += len(gpus)
		}
	}
	if entries > maxGPUEntries {
		t.Errorf("%d GPU indices, whole and shared, over the bound of %d", entries, maxGPUEntries)
	}
	for _, j := range jobs {
		if !isJobNumber(j.ID) {
			t.Errorf("job ID %q is not a job number", j.ID)
		}
		for node, gpus := range j.Shared {
			if len(gpus) == 0 {
				t.Errorf("node %q holds an empty list of shared GPUs", node)
			}
			for i, g := range gpus {
				switch {
				case g.Index < 0 || g.Index > maxGPUIndex || i > 0 && gpus[i-1].Index >= g.Index:
					t.Errorf("node %q: shared GPUs %+v not sorted, unique and in range", node, gpus)
				case slices.Contains(j.GPUs[node], g.Index):
					t.Errorf("node %q: GPU %d held whole and in part", node, g.Index)
				case g.Alloc > g.Avail || (g.Alloc == 0) != (g.Avail == 0) || g.Share() < 0 || g.Share() > 1:
					t.Errorf("node %q: GPU %+v holds a part that is no part", node, g)
				}
			}
		}
		if len(j.GPUs) > maxHosts {
			t.Errorf("unbounded expansion: %d nodes with GPUs", len(j.GPUs))
		}
		for node, idx := range j.GPUs {
			if len(idx) == 0 || len(idx) > maxGPUIndex+1 {
				t.Errorf("node %q has %d GPU indices", node, len(idx))
			}
			for i, v := range idx {
				if v < 0 || v > maxGPUIndex || i > 0 && idx[i-1] >= v {
					t.Errorf("node %q: indices %v not sorted, unique and in range", node, idx)
					break
				}
			}
		}
	}
}

func FuzzParseIndexList(f *testing.F) {
	for _, s := range []string{"0", "0-1", "0-1,4", "0,3", "0-999999999", "1-0", "", ",", "0-", "-", "7,7,7"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		idx, err := parseIndexList(s)
		if err != nil {
			return
		}
		if len(idx) == 0 || len(idx) > maxGPUIndex+1 {
			t.Fatalf("parseIndexList(%q) returned %d indices", s, len(idx))
		}
		for i, v := range idx {
			if v < 0 || v > maxGPUIndex || i > 0 && idx[i-1] >= v {
				t.Fatalf("parseIndexList(%q) = %v: not sorted, unique and in range", s, idx)
			}
		}
	})
}

// TestPickJobRecordOfAnotherID: scontrol answers an array task (800_5), a
// heterogeneous component (501+1) and a SLUID with one record whose JobId
// is the job's own number, which is taken; a plain number answered by
// records of other IDs (an array's ID whose own task was purged: its
// other tasks are printed) is not that job (probe E, PE6).
func TestPickJobRecordOfAnotherID(t *testing.T) {
	one := []Job{{ID: "805", ArrayJobID: "800"}}
	two := []Job{{ID: "805", ArrayJobID: "800"}, {ID: "806", ArrayJobID: "800"}}
	for _, tc := range []struct {
		id      string
		jobs    []Job
		want    string // "" for an error
		another bool   // the error is ErrOtherJobsRecord
	}{
		{id: "805", jobs: two, want: "805"},
		{id: "800_5", jobs: one, want: "805"},
		{id: "501+1", jobs: []Job{{ID: "502", HetJobID: "501"}}, want: "502"},
		{id: "s5K1KKYAYG5D00", jobs: one, want: "805"},
		{id: "800", jobs: one, another: true},
		{id: "800", jobs: two, another: true},
		{id: "501+1", jobs: two},
	} {
		got, err := pickJob(tc.jobs, tc.id)
		switch {
		case tc.want != "" && (err != nil || got.ID != tc.want):
			t.Errorf("pickJob(%d records, %s) = %+v, %v; want job %s", len(tc.jobs), tc.id, got, err, tc.want)
		case tc.want == "" && (err == nil || errors.Is(err, ErrOtherJobsRecord) != tc.another):
			t.Errorf("pickJob(%d records, %s) = %+v, %v; want an error, ErrOtherJobsRecord %v", len(tc.jobs), tc.id, got, err, tc.another)
		}
	}
}
