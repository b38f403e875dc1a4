package demo

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// SlurmSpec is the Slurm side of a scenario: the jobs running on the node.
type SlurmSpec struct {
	// Node is the node's name in Slurm; default the scenario's node.
	Node string `yaml:"node"`
	// Version is the Slurm release whose scontrol the stand-in answers as:
	// "22.05" (the default) rejects --json and prints a shared GRES's GPUs
	// by index (shard:1(IDX:2)); "24.05" also answers --json (data_parser
	// v0.0.41) and prints a shared GRES's count on each GPU
	// (shard:2(0/4,2/4)), as Slurm has since 23.11.2; "25.05" is 24.05
	// whose listpids prints no row at all once one step failed, as
	// scontrol has since 24.11 (scontrol_list_pids: "if (exit_code) goto
	// cleanup;" before the header).
	Version string `yaml:"version"`
	// Proctrack is "cgroup" (the default: a job's processes in its
	// slurmstepd.scope/job_<id> cgroup) or "linuxproc" (in slurmd.service,
	// where proctrack/linuxproc leaves them; scontrol listpids names their
	// jobs).
	Proctrack string `yaml:"proctrack"`
	// ListPIDsFailure makes scontrol listpids fail on one more step after
	// printing the others' rows, and exit 1, as scontrol does: "ended" (the
	// step ended between listing and connecting: "StepId=… does not exist
	// on this node.") or "unreachable" (a stray socket or a hung
	// slurmstepd: "Unable to connect to slurmstepd: Connection refused").
	ListPIDsFailure string `yaml:"listpids_failure"`
	// PrivateData "jobs" is slurm.conf's PrivateData=jobs: `scontrol show
	// config` says so, and a caller other than root (none of the
	// scenario's users) sees no job: squeue lists none, scontrol answers
	// "Invalid job id specified".
	PrivateData string `yaml:"private_data"`
	// ShardsPerGPU is each GPU's count of gres/shard (gres.conf
	// Name=shard Count=…), which jobs' shards come out of.
	ShardsPerGPU int       `yaml:"shards_per_gpu"`
	Jobs         []JobSpec `yaml:"jobs"`
}

// JobSpec is a running Slurm job.
type JobSpec struct {
	ID        string `yaml:"id"`
	Name      string `yaml:"name"`
	User      string `yaml:"user"`
	Account   string `yaml:"account"`
	Partition string `yaml:"partition"`
	QOS       string `yaml:"qos"`
	// GPUs are the GRES indices the job holds on the node. Slurm counts
	// whole GPUs and, on a GPU in MIG mode, its MIG devices in their
	// handle order instead of the GPU.
	GPUs []int `yaml:"gpus"`
	// Shards are the job's gres/shard by GRES index: how many of the GPU's
	// ShardsPerGPU it holds.
	Shards map[int]int `yaml:"shards"`
	// Array makes the job one task of a job array, the one whose job ID is
	// the array's (ArrayJobId).
	Array *ArraySpec `yaml:"array"`
	// Gone is a job that ended longer ago than MinJobAge while its
	// processes live on: squeue does not list it, and scontrol answers
	// "slurm_load_jobs error: Invalid job id specified".
	Gone bool `yaml:"gone"`
	// StateFlag is a flag its running state carries: STOPPED (after
	// scancel --signal=STOP), CONFIGURING (its nodes booting), SIGNALING
	// or RESIZING. squeue's --states RUNNING does not match such a job, the
	// flag does; scontrol prints the flag as its state.
	StateFlag string `yaml:"state_flag"`
	// Suspended is a job suspended (scontrol suspend, gang scheduling's
	// preemption): its state is SUSPENDED, not RUNNING, and it keeps its
	// GPUs, Slurm giving back its cores alone.
	Suspended bool `yaml:"suspended"`
	// HiddenPartition puts the job in a partition hidden from the
	// exporter's user (Hidden=YES, or AllowGroups without it): squeue
	// lists it only with --all (slurmctld's _all_parts_hidden).
	HiddenPartition bool `yaml:"hidden_partition"`
	// RequeueAfter requeues the job this long after the demo starts (at
	// the next whole second): it runs again (Restarts=1, a later
	// StartTime) on RequeueGPUs.
	RequeueAfter string `yaml:"requeue_after"`
	RequeueGPUs  []int  `yaml:"requeue_gpus"`

	requeueAfter time.Duration
}

// ArraySpec is a job array of Tasks tasks numbered 1 to Tasks (sbatch
// --array=1-<tasks>), of which the job is task Task. Its other tasks run
// on other nodes with job IDs of their own, the job's ID plus 1, 2, … As
// in Slurm, squeue shows the job as <id>_<task>, and `scontrol show job
// <id>` prints every task of the array (about 1.5 KiB each), as does
// --json whichever task is asked for.
type ArraySpec struct {
	Task  int `yaml:"task"`
	Tasks int `yaml:"tasks"`
}

// stateWord is the job's state as scontrol's text prints it
// (job_state_string: a flag rather than the base state).
func (j JobSpec) stateWord() string {
	switch {
	case j.Suspended:
		return "SUSPENDED"
	case j.StateFlag != "":
		return j.StateFlag
	}
	return "RUNNING"
}

// jsonState is the job's state as scontrol --json prints it: the base state
// and its flags.
func (j JobSpec) jsonState() []string {
	switch {
	case j.Suspended:
		return []string{"SUSPENDED"}
	case j.StateFlag != "":
		return []string{"RUNNING", j.StateFlag}
	}
	return []string{"RUNNING"}
}

// stateFlags are the flags a running job's state may carry in a scenario.
var stateFlags = []string{"STOPPED", "CONFIGURING", "SIGNALING", "RESIZING"}

// maxArrayTasks bounds the records the stand-in writes for an array.
const maxArrayTasks = 5000

// gresCount is the number of GPUs Slurm counts on the node: each MIG
// device and each AMD compute partition (ROCm SMI lists partitions as
// GPUs), and a GPU in MIG mode without MIG devices as one.
func (s *Scenario) gresCount() int {
	n := 0
	for _, d := range s.Devices {
		n += max(1, len(d.MIG), len(d.Partitions))
	}
	return n
}

// validateSlurm checks the slurm section and returns the IDs of its jobs.
func (s *Scenario) validateSlurm() (map[string]bool, []error) {
	jobs := map[string]bool{}
	if s.Slurm == nil {
		return jobs, nil
	}
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if v := s.Slurm.Version; v != "" && v != "22.05" && v != "24.05" && v != "25.05" {
		bad("slurm.version: %q is none of 22.05, 24.05 and 25.05", v)
	}
	if p := s.Slurm.Proctrack; p != "" && p != "cgroup" && p != "linuxproc" {
		bad("slurm.proctrack: %q is neither cgroup nor linuxproc", p)
	}
	if f := s.Slurm.ListPIDsFailure; f != "" && (f != "ended" && f != "unreachable" || s.Slurm.Proctrack != "linuxproc") {
		bad("slurm.listpids_failure: %q is neither ended nor unreachable, or proctrack is not linuxproc", f)
	}
	if p := s.Slurm.PrivateData; p != "" && p != "jobs" {
		bad("slurm.private_data: %q is not jobs", p)
	}
	if s.Slurm.ShardsPerGPU < 0 || s.Slurm.ShardsPerGPU > 1000 {
		bad("slurm.shards_per_gpu: %d is not 0 to 1000", s.Slurm.ShardsPerGPU)
	}
	gresIndex := func(where string, g int) {
		if g < 0 || g >= s.gresCount() {
			bad("%s: %d is not a GRES index (0..%d)", where, g, s.gresCount()-1)
		}
	}
	shardsUsed := map[int]int{}
	for i, j := range s.Slurm.Jobs {
		where := fmt.Sprintf("slurm.jobs[%d]", i)
		if j.ID == "" || strings.Trim(j.ID, "0123456789") != "" || len(j.ID) > 9 {
			bad("%s.id: %q is not a numeric job ID", where, j.ID)
		}
		if jobs[j.ID] {
			bad("%s.id: job %s twice", where, j.ID)
		}
		if j.User == "" {
			bad("%s.user: missing", where)
		}
		for _, g := range j.GPUs {
			gresIndex(where+".gpus", g)
		}
		for _, g := range sortedKeys(j.Shards) {
			gresIndex(where+".shards", g)
			if n := j.Shards[g]; n < 1 || n > s.Slurm.ShardsPerGPU {
				bad("%s.shards: %d of GPU %d's %d shards (slurm.shards_per_gpu)", where, n, g, s.Slurm.ShardsPerGPU)
			}
			if slices.Contains(j.GPUs, g) {
				bad("%s.shards: GPU %d is in gpus too", where, g)
			}
			shardsUsed[g] += j.Shards[g]
		}
		if a := j.Array; a != nil && (a.Tasks < 1 || a.Tasks > maxArrayTasks || a.Task < 1 || a.Task > a.Tasks) {
			bad("%s.array: task %d of %d; want 1 <= task <= tasks <= %d", where, a.Task, a.Tasks, maxArrayTasks)
		}
		if j.Gone && (len(j.GPUs) > 0 || len(j.Shards) > 0 || j.Array != nil || j.RequeueAfter != "") {
			bad("%s.gone: a job Slurm forgot holds no GPU, is no array task and is not requeued", where)
		}
		if f := j.StateFlag; f != "" && !slices.Contains(stateFlags, f) {
			bad("%s.state_flag: %q is none of %s", where, f, strings.Join(stateFlags, ", "))
		}
		if j.Suspended && j.StateFlag != "" {
			bad("%s: a suspended job carries no running job's flag (state_flag %s)", where, j.StateFlag)
		}
		if j.RequeueAfter != "" {
			d, err := time.ParseDuration(j.RequeueAfter)
			if err != nil || d <= 0 {
				bad("%s.requeue_after: %q is not a positive duration", where, j.RequeueAfter)
			}
			s.Slurm.Jobs[i].requeueAfter = d
		}
		if len(j.RequeueGPUs) > 0 && j.RequeueAfter == "" {
			bad("%s.requeue_gpus: without requeue_after", where)
		}
		for _, g := range j.RequeueGPUs {
			gresIndex(where+".requeue_gpus", g)
		}
		jobs[j.ID] = true
	}
	for _, g := range sortedKeys(shardsUsed) {
		if shardsUsed[g] > s.Slurm.ShardsPerGPU {
			bad("slurm.jobs: %d shards of GPU %d, which has %d", shardsUsed[g], g, s.Slurm.ShardsPerGPU)
		}
	}
	return jobs, errs
}

// writeSlurm writes scontrol and squeue stand-ins answering as the Slurm of
// slurm.version does, from answers written beside them in dir/slurm: one
// file per job ID scontrol may be asked for, text and (24.05) JSON, and
// what they say once the job is requeued. start is when the demo started.
func (s *Scenario) writeSlurm(dir, node string, start time.Time) (scontrol, squeue string, err error) {
	answers := filepath.Join(dir, "slurm")
	if err := os.MkdirAll(answers, 0o755); err != nil {
		return "", "", err
	}
	uids := s.users()
	withJSON := s.Slurm.sinceV24()
	write := func(name string, data []byte) {
		if err == nil {
			err = os.WriteFile(filepath.Join(answers, name), data, 0o644)
		}
	}
	var squeueLines strings.Builder
	for _, j := range s.Slurm.Jobs {
		if j.Gone {
			continue // scontrol: no file, Invalid job id
		}
		started := start.Add(-10 * time.Minute)
		// The stand-ins tell the time in whole seconds (date +%s): the
		// requeue is at the first whole second past requeue_after, and a
		// requeued job begins a second later at the soonest (its begin
		// time is set to now + requeue_delay + 1).
		requeueAt := start.Add(j.requeueAfter).Truncate(time.Second).Add(time.Second)
		requeued := requeueAt.Add(time.Second)
		id, _ := strconv.Atoi(j.ID)
		// The records of the array, the job's first; for another job, the
		// job alone. Once requeued, the job's record changes.
		records := func(restarted bool) []jobRecord {
			r := jobRecord{job: j, uid: uids[j.User], node: node, start: started, gres: s.gresDetail(j.GPUs, j.Shards)}
			if restarted {
				r.restarts, r.start, r.gres = 1, requeued, s.gresDetail(j.RequeueGPUs, nil)
			}
			out := []jobRecord{r}
			if j.Array == nil {
				return out
			}
			r.arrayID, r.arrayTask = id, j.Array.Task
			out[0] = r
			next := id + 1
			for task := 1; task <= j.Array.Tasks; task++ {
				if task != j.Array.Task {
					out = append(out, jobRecord{job: j, id: next, arrayID: id, arrayTask: task, uid: r.uid,
						node: node + "-peer", start: started})
					next++
				}
			}
			return out
		}
		for _, restarted := range []bool{false, true} {
			if restarted && j.RequeueAfter == "" {
				break
			}
			suffix := ""
			if restarted {
				suffix = ".requeued"
			}
			recs := records(restarted)
			var all strings.Builder
			for _, r := range recs {
				all.WriteString(r.text(s.Slurm.sinceV24()))
			}
			// Asked by the job's ID, scontrol prints the whole array; asked
			// for the task, that task alone (text form only).
			write(j.ID+suffix, []byte(all.String()))
			if j.Array != nil {
				write(fmt.Sprintf("%s_%d%s", j.ID, j.Array.Task, suffix), []byte(recs[0].text(s.Slurm.sinceV24())))
			}
			if withJSON {
				b, jerr := jobsJSON(recs, j.ID)
				if jerr != nil {
					return "", "", jerr
				}
				write(j.ID+".json"+suffix, b)
				if j.Array != nil {
					// --json prints what slurmctld returned, the array.
					write(fmt.Sprintf("%s_%d.json%s", j.ID, j.Array.Task, suffix), b)
				}
			}
		}
		if j.RequeueAfter != "" {
			write(j.ID+".requeue", []byte(strconv.FormatInt(requeueAt.Unix(), 10)))
		}
		// squeue's job ID (%A), the ID as shown (%i: <array>_<task> for an
		// array task) and start time (%S, in Slurm's default format).
		shown := j.ID
		if j.Array != nil {
			shown = fmt.Sprintf("%s_%d", j.ID, j.Array.Task)
		}
		word := "RUNNING"
		switch {
		case j.Suspended:
			word = "SUSPENDED"
		case j.StateFlag != "":
			word += "+" + j.StateFlag
		}
		line := func(at time.Time) string {
			return "job '" + j.ID + "' '" + shown + "' '" + slurmTime(at) + "' '" + word + "'"
		}
		if j.HiddenPartition {
			inner := line
			line = func(at time.Time) string { return "{ [ -z \"$all\" ] || " + inner(at) + "; }" }
		}
		if j.RequeueAfter == "" {
			fmt.Fprintf(&squeueLines, "%s\n", line(started))
		} else {
			fmt.Fprintf(&squeueLines, "if [ \"$(date +%%s)\" -ge %d ]; then %s; else %s; fi\n",
				requeueAt.Unix(), line(requeued), line(started))
		}
	}
	if err != nil {
		return "", "", err
	}

	// PrivateData=jobs hides every job from a caller other than root.
	hidden := ""
	if s.Slurm.PrivateData == "jobs" {
		hidden = "[ \"$(id -u)\" = 0 ] || [ \"$1\" = listpids ] || set -- invalid\n"
	}
	jsonOption := `--json) echo "scontrol: unrecognized option '--json'" >&2; exit 1 ;;`
	if withJSON {
		jsonOption = `--json) json=.json; shift ;;`
	}
	scontrol = filepath.Join(dir, "scontrol")
	script := "#!/bin/sh\n# The demo's stand-in for Slurm " + or(s.Slurm.Version, "22.05") + "'s scontrol; its answers are in " + answers + ".\n" +
		"json=\n" +
		"case \"$1\" in\n" + jsonOption + "\nlistpids) " + s.listPIDs() + " ;;\n" +
		"show) [ \"$2\" != config ] || { printf 'PrivateData             = %s\\nSlurmUser               = slurm(64030)\\n' '" + or(s.Slurm.PrivateData, "none") + "'; exit 0; }\n" +
		"  [ \"$2\" != node ] || { [ \"$3\" = '" + node + "' ] || { echo \"Node $3 not found\" >&2; exit 1; }\n" +
		"    printf 'NodeName=%s Arch=x86_64 CoresPerSocket=1\\n   Gres=%s\\n   State=MIXED\\n' '" + node + "' '" + s.nodeGres() + "'; exit 0; } ;;\nesac\n" +
		hidden +
		"details=\nfor last; do case \"$last\" in -d|--details) details=1 ;; esac; done\n" +
		"case \"$last\" in *[!0-9_]*|'') last=invalid ;; esac\n" +
		"f='" + answers + "'/\"$last$json\"\n" +
		"job=\"${last%%_*}\"\n" +
		"if [ -f '" + answers + "'/\"$job.requeue\" ] && [ \"$(date +%s)\" -ge \"$(cat '" + answers + "'/\"$job.requeue\")\" ]; then f=\"$f.requeued\"; fi\n" +
		"# Without --details, a job's per-node lines (its GRES indices) are not\n# printed (slurm's job_info.c prints them for detail only).\n" +
		"if [ -f \"$f\" ] && [ -n \"$details$json\" ]; then exec cat \"$f\"; fi\n" +
		"if [ -f \"$f\" ]; then exec grep -v '^     Nodes=' \"$f\"; fi\n" +
		"if [ -n \"$json\" ]; then\n" +
		"  printf '{\"jobs\":[],\"errors\":[{\"description\":\"\",\"error_number\":2017,\"error\":\"Invalid job id specified\",\"source\":\"slurm_load_job()\"}],\"warnings\":[]}\\n'\n" +
		"  exit 0\nfi\n" +
		"echo 'slurm_load_jobs error: Invalid job id specified' >&2\nexit 1\n"
	if err := os.WriteFile(scontrol, []byte(script), 0o755); err != nil {
		return "", "", err
	}
	squeue = filepath.Join(dir, "squeue")
	squeueHidden := ""
	if s.Slurm.PrivateData == "jobs" {
		squeueHidden = "[ \"$(id -u)\" = 0 ] || exit 0\n"
	}
	body := `#!/bin/sh
# The demo's stand-in for squeue(1): the running jobs of --nodelist (none
# for another node), a header line unless --noheader, each line in the
# --format asked for. Of the format's specifiers it knows those the
# exporter uses, %A (job ID), %i (the ID as shown) and %S (start time);
# another fails rather than being printed as something it is not. A job in
# a hidden partition is listed with --all only. --states filters as
# squeue's _filter_job: a flag matches every job carrying it, a base state
# only a job whose whole state word it is (RUNNING+STOPPED is no RUNNING).
format= header=1 node= all= states=
while [ $# -gt 0 ]; do
  case "$1" in
  --all|-a) all=1 ;;
  --states|-t) states=$2; shift ;;
  --states=*) states=${1#--states=} ;;
  --format|-o) format=$2; shift ;;
  --format=*) format=${1#--format=} ;;
  --noheader|-h) header= ;;
  --nodelist|-w) node=$2; shift ;;
  --nodelist=*) node=${1#--nodelist=} ;;
  esac
  shift
done
job() {
  if [ -n "$states" ] && [ -n "$4" ]; then
    match=
    for s in $(printf '%s' "$states" | tr ',' ' '); do
      case "$s" in
      STOPPED|CONFIGURING|SIGNALING|RESIZING|COMPLETING) case "+$4+" in *"+$s+"*) match=1 ;; esac ;;
      *) [ "$4" != "$s" ] || match=1 ;;
      esac
    done
    [ -n "$match" ] || return 0
  fi
  out=$(printf '%s' "$format" | sed -e "s/%A/$1/g" -e "s/%i/$2/g" -e "s/%S/$3/g")
  case "$format" in '') echo "squeue: the demo's stand-in does not simulate the format '$format'" >&2; exit 1 ;; esac
  case "$out" in *%*) echo "squeue: the demo's stand-in does not simulate the format '$format'" >&2; exit 1 ;; esac
  printf '%s\n' "$out"
}
[ -z "$header" ] || job JOBID JOBID START_TIME
[ -z "$node" ] || [ "$node" = '` + node + `' ] || exit 0
` + squeueHidden + squeueLines.String()
	return scontrol, squeue, os.WriteFile(squeue, []byte(body), 0o755)
}

// nodeGres is the node's Gres= field in `scontrol show node`, as Slurm
// prints it (gres_node_state_list: name, type where gres.conf gives one,
// count, the sockets in parentheses; entries comma-separated): the GPUs
// slurmd numbered when it started, every device of the scenario (one
// hl-smi does not list or that left the bus since included), whole GPUs
// and partitions untyped, a GPU in MIG mode as its instances typed by
// profile (as NVML autodetection names them), then the shards; "(null)"
// for none. The reader must sum the gpu entries and leave shards out.
func (s *Scenario) nodeGres() string {
	whole := 0
	var profiles []string
	byProfile := map[string]int{}
	for _, d := range s.Devices {
		switch {
		case len(d.MIG) > 0:
			for _, m := range d.MIG {
				if byProfile[m.Profile] == 0 {
					profiles = append(profiles, m.Profile)
				}
				byProfile[m.Profile]++
			}
		case len(d.Partitions) > 0:
			whole += len(d.Partitions)
		default:
			whole++
		}
	}
	var entries []string
	if whole > 0 {
		entries = append(entries, fmt.Sprintf("gpu:%d(S:0-1)", whole))
	}
	for _, p := range profiles {
		entries = append(entries, fmt.Sprintf("gpu:%s:%d(S:0-1)", p, byProfile[p]))
	}
	if s.Slurm.ShardsPerGPU > 0 && whole > 0 {
		entries = append(entries, fmt.Sprintf("shard:%d(S:0-1)", whole*s.Slurm.ShardsPerGPU))
	}
	if len(entries) == 0 {
		return "(null)"
	}
	return strings.Join(entries, ",")
}

// listPIDs is the shell command answering `scontrol listpids`: under
// proctrack/linuxproc the jobs' processes (as first written: churned PIDs
// are not listed), else slurmd's answer for a node where it tracks none.
func (s *Scenario) listPIDs() string {
	none := "echo 'No job steps exist on this node.' >&2; exit 1"
	if s.Slurm.Proctrack != "linuxproc" {
		return none
	}
	var rows strings.Builder
	rows.WriteString("PID      JOBID    STEPID   LOCALID GLOBALID\\n")
	n := 0
	for _, p := range s.processes() {
		if p.SlurmJob != "" {
			fmt.Fprintf(&rows, "%-8d %-8s 0        0       0\\n", p.PID, p.SlurmJob)
			n++
		}
	}
	if n == 0 {
		return none
	}
	failure := map[string]string{
		"ended":       "echo 'StepId=999999.0 does not exist on this node.' >&2; exit 1",
		"unreachable": "printf '\\nUnable to connect to slurmstepd: Connection refused\\n' >&2; exit 1",
	}[s.Slurm.ListPIDsFailure]
	switch {
	case failure == "":
		return "printf '" + rows.String() + "'; exit 0"
	case s.Slurm.Version == "25.05":
		// Since 24.11 the rows are printed only when every step answered.
		return failure
	}
	return "printf '" + rows.String() + "'; " + failure
}

// sinceV24 says the imitated scontrol is 24.05 or later.
func (s *SlurmSpec) sinceV24() bool { return s.Version == "24.05" || s.Version == "25.05" }

// gresDetail is the per-node GRES of `scontrol show job -d` for whole GPUs
// and shards (gres_stepmgr.c, _foreach_job_build_details), in the form of
// the stand-in's Slurm: a shared GRES by index before 23.11.2, by
// <alloc>/<avail> on every GPU since.
func (s *Scenario) gresDetail(gpus []int, shards map[int]int) string {
	var items []string
	if len(gpus) > 0 {
		idx := slices.Clone(gpus)
		slices.Sort(idx)
		items = append(items, fmt.Sprintf("gpu:%d(IDX:%s)", len(idx), joinInts(idx)))
	}
	if len(shards) > 0 {
		total := 0
		for _, n := range shards {
			total += n
		}
		if s.Slurm.sinceV24() {
			counts := make([]string, s.gresCount())
			for g := range counts {
				counts[g] = fmt.Sprintf("%d/%d", shards[g], s.Slurm.ShardsPerGPU)
			}
			items = append(items, fmt.Sprintf("shard:%d(%s)", total, strings.Join(counts, ",")))
		} else {
			items = append(items, fmt.Sprintf("shard:%d(IDX:%s)", total, joinInts(sortedKeys(shards))))
		}
	}
	return strings.Join(items, ",")
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

// slurmTime is Slurm's default time format (SLURM_TIME_FORMAT=standard).
func slurmTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05") }

// jobRecord is one record of `scontrol show job -d`.
type jobRecord struct {
	job JobSpec
	// id is the record's job ID when it is not job's (another task of its
	// array); arrayID and arrayTask are set for an array's tasks.
	id                 int
	arrayID, arrayTask int
	uid                int
	node               string
	start              time.Time
	restarts           int
	// gres is the per-node GRES detail; "" for none.
	gres string
}

func (r jobRecord) jobID() string {
	if r.id != 0 {
		return strconv.Itoa(r.id)
	}
	return r.job.ID
}

// text is the record as `scontrol --details show job` prints it: the real
// 22.05 captures in fixtures/slurm/22.05 and scontrol's info_job.c
// (ArrayJobId and ArrayTaskId after JobId on the first line).
func (r jobRecord) text(sinceV24 bool) string {
	j := r.job
	var b strings.Builder
	fmt.Fprintf(&b, "JobId=%s ", r.jobID())
	if r.arrayID != 0 {
		fmt.Fprintf(&b, "ArrayJobId=%d ArrayTaskId=%d ", r.arrayID, r.arrayTask)
	}
	submit := slurmTime(r.start.Add(-2 * time.Second))
	fmt.Fprintf(&b, "JobName=%s\n", or(j.Name, "job"))
	fmt.Fprintf(&b, "   UserId=%s(%d) GroupId=%s(%d) MCS_label=N/A\n", j.User, r.uid, j.User, r.uid)
	fmt.Fprintf(&b, "   Priority=4294901744 Nice=0 Account=%s QOS=%s\n", or(j.Account, "(null)"), or(j.QOS, "normal"))
	// job_state_string names a flag rather than the base state.
	fmt.Fprintf(&b, "   JobState=%s Reason=None Dependency=(null)\n", j.stateWord())
	fmt.Fprintf(&b, "   Requeue=1 Restarts=%d BatchFlag=1 Reboot=0 ExitCode=0:0\n", r.restarts)
	b.WriteString("   DerivedExitCode=0:0\n   RunTime=00:10:00 TimeLimit=UNLIMITED TimeMin=N/A\n")
	fmt.Fprintf(&b, "   SubmitTime=%s EligibleTime=%s\n   AccrueTime=%s\n", submit, submit, submit)
	fmt.Fprintf(&b, "   StartTime=%s EndTime=Unknown Deadline=N/A\n", slurmTime(r.start))
	fmt.Fprintf(&b, "   SuspendTime=None SecsPreSuspend=0 LastSchedEval=%s Scheduler=Main\n", slurmTime(r.start))
	fmt.Fprintf(&b, "   Partition=%s AllocNode:Sid=%s:15258\n", or(j.Partition, "gpu"), r.node)
	fmt.Fprintf(&b, "   ReqNodeList=(null) ExcNodeList=(null)\n   NodeList=%s\n   BatchHost=%s\n", r.node, r.node)
	b.WriteString("   NumNodes=1 NumCPUs=8 NumTasks=1 CPUs/Task=8 ReqB:S:C:T=0:0:*:*\n")
	b.WriteString("   TRES=cpu=8,node=1,billing=8\n   Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=*\n")
	if r.gres != "" {
		fmt.Fprintf(&b, "   JOB_GRES=%s\n     Nodes=%s CPU_IDs=0-7 Mem=0 GRES=%s\n", jobGRES(r.gres), r.node, r.gres)
	}
	b.WriteString("   MinCPUsNode=8 MinMemoryNode=0 MinTmpDiskNode=0\n   Features=(null) DelayBoot=00:00:00\n")
	b.WriteString("   OverSubscribe=OK Contiguous=0 Licenses=(null) Network=(null)\n   Command=(null)\n")
	fmt.Fprintf(&b, "   WorkDir=/home/%s\n", j.User)
	fmt.Fprintf(&b, "   StdErr=/home/%s/slurm-%s.out\n   StdIn=/dev/null\n   StdOut=/home/%s/slurm-%s.out\n", j.User, r.jobID(), j.User, r.jobID())
	b.WriteString("   Power=\n")
	if r.gres != "" {
		if sinceV24 {
			fmt.Fprintf(&b, "   TresPerNode=gres/%s\n", jobGRES(r.gres))
		} else {
			fmt.Fprintf(&b, "   TresPerNode=gres:%s\n", jobGRES(r.gres))
		}
	}
	b.WriteString("   \n\n")
	return b.String()
}

// jobGRES is JOB_GRES, the job's GRES counts without their detail:
// "gpu:1,shard:2" for "gpu:1(IDX:0),shard:2(0/4,2/4)".
func jobGRES(detail string) string {
	var items []string
	depth, start := 0, 0
	for i := 0; i <= len(detail); i++ {
		switch {
		case i == len(detail) || detail[i] == ',' && depth == 0:
			item := detail[start:i]
			if open := strings.IndexByte(item, '('); open >= 0 {
				item = item[:open]
			}
			items = append(items, item)
			start = i + 1
		case detail[i] == '(':
			depth++
		case detail[i] == ')':
			depth--
		}
	}
	return strings.Join(items, ",")
}

// slurmNumber is data_parser v0.0.41's number: {"set", "infinite",
// "number"}.
type slurmNumber struct {
	Set      bool  `json:"set"`
	Infinite bool  `json:"infinite"`
	Number   int64 `json:"number"`
}

// jobsJSON is `scontrol --json show job` for records in data_parser
// v0.0.41's shape (fixtures/slurm/constructed/scontrol-show-job-json-
// v0.0.41.json), the fields the exporter reads and those that tell an
// array's tasks apart, with "/" escaped as Slurm's serializer does.
func jobsJSON(recs []jobRecord, asked string) ([]byte, error) {
	type job struct {
		Account     string      `json:"account"`
		ArrayJobID  slurmNumber `json:"array_job_id"`
		ArrayTaskID slurmNumber `json:"array_task_id"`
		GresDetail  []string    `json:"gres_detail"`
		JobID       int         `json:"job_id"`
		JobState    []string    `json:"job_state"`
		Name        string      `json:"name"`
		Nodes       string      `json:"nodes"`
		Partition   string      `json:"partition"`
		QOS         string      `json:"qos"`
		RestartCnt  int         `json:"restart_cnt"`
		StartTime   slurmNumber `json:"start_time"`
		UserID      int         `json:"user_id"`
		UserName    string      `json:"user_name"`
	}
	var resp struct {
		Jobs []job `json:"jobs"`
		Meta struct {
			Plugin struct {
				DataParser string `json:"data_parser"`
			} `json:"plugin"`
			Command []string `json:"command"`
		} `json:"meta"`
		Errors   []any `json:"errors"`
		Warnings []any `json:"warnings"`
	}
	for _, r := range recs {
		id, err := strconv.Atoi(r.jobID())
		if err != nil {
			return nil, err
		}
		j := job{
			Account: r.job.Account, JobID: id, JobState: r.job.jsonState(), Name: or(r.job.Name, "job"),
			Nodes: r.node, Partition: or(r.job.Partition, "gpu"), QOS: or(r.job.QOS, "normal"), RestartCnt: r.restarts,
			StartTime: slurmNumber{Set: true, Number: r.start.Unix()}, UserID: r.uid, UserName: r.job.User,
			ArrayJobID: slurmNumber{Set: true}, GresDetail: []string{},
		}
		if r.gres != "" {
			j.GresDetail = []string{r.gres}
		}
		if r.arrayID != 0 {
			j.ArrayJobID.Number = int64(r.arrayID)
			j.ArrayTaskID = slurmNumber{Set: true, Number: int64(r.arrayTask)}
		}
		resp.Jobs = append(resp.Jobs, j)
	}
	resp.Meta.Plugin.DataParser = "data_parser/v0.0.41"
	resp.Meta.Command = []string{"show", "job", asked}
	resp.Errors, resp.Warnings = []any{}, []any{}
	b, err := json.MarshalIndent(resp, "", "  ")
	if err != nil {
		return nil, err
	}
	return []byte(strings.ReplaceAll(string(b), "/", `\/`) + "\n"), nil
}

func or(v, def string) string {
	if v == "" {
		return def
	}
	return v
}
