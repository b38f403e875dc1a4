package slurm

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/xpu-exporter/xpu_exporter/attribution/internal/slurmid"
	"github.com/xpu-exporter/xpu_exporter/internal/boundedbuf"
	"github.com/xpu-exporter/xpu_exporter/internal/flight"
)

// Defaults for the zero values of Client's fields.
const (
	DefaultPath      = "scontrol"
	DefaultTimeout   = 5 * time.Second
	DefaultCacheTTL  = 5 * time.Minute
	DefaultCacheSize = 4096
)

const (
	// maxOutput bounds scontrol's stdout: a detailed job record is about
	// 1.5 KiB, and even an array job's records fit many times over.
	maxOutput = 1 << 20
	// maxStderr keeps enough of an error message to report it.
	maxStderr = 4 << 10
	// notFoundTTL bounds how long "no such job" is remembered: the answer
	// for a job that ended is final, but a job ID seen in a cgroup before
	// slurmctld has committed it is not.
	notFoundTTL = 30 * time.Second
	// waitDelay is how long Wait waits for scontrol's output pipes after
	// killing its process group, in case a process that left the group
	// still holds them: the scrape's deadline is close.
	waitDelay = 100 * time.Millisecond
)

// ErrOutputTooLarge is returned when scontrol or squeue prints more than
// the exporter reads. For a job it is remembered like an answer.
var ErrOutputTooLarge = fmt.Errorf("output exceeds %d bytes", maxOutput)

// Client runs scontrol on behalf of the exporter. Job metadata is cached per
// job ID, since a job's user, account, partition and QoS do not change while
// it runs, and concurrent requests for one job share a single scontrol run.
// What can change, the GPUs of a job requeued onto others, is checked
// against squeue's start time (RunningJob).
// The zero value is ready to use; a Client must not be copied after first
// use.
type Client struct {
	// Path is the scontrol binary; empty means DefaultPath, looked up in
	// $PATH.
	Path string
	// Timeout bounds each scontrol run, after which it is killed; zero
	// means DefaultTimeout.
	Timeout time.Duration
	// CacheTTL is how long a job's metadata is reused; zero means
	// DefaultCacheTTL.
	CacheTTL time.Duration
	// CacheSize bounds the number of cached jobs; zero means
	// DefaultCacheSize.
	CacheSize int
	// SqueuePath is the squeue binary, used to list the jobs running on a
	// node; empty means "squeue" in $PATH.
	SqueuePath string
	// UID is the user slurmctld sees scontrol and squeue run as, which
	// decides what PrivateData hides (JobsHidden); nil means this
	// process's effective UID.
	UID *int

	mu sync.Mutex
	// noJSON is set once scontrol has rejected --json (Slurm before 23.02,
	// or built without a JSON serializer), so that it is not asked again.
	noJSON   bool
	cache    map[string]cacheEntry
	inflight map[string]*call
	// nodeJobs caches the jobs running on a node briefly: every scrape
	// needs them, and squeue asks slurmctld. nodeJobsAsked is when squeue
	// was asked for them.
	nodeJobs        []RunningJob
	nodeJobsNode    string
	nodeJobsAsked   time.Time
	nodeJobsExpires time.Time
	// config is what `scontrol show config` said (JobsHidden), nodeGPUs
	// how many gpu GRES `scontrol show node` gave a node (NodeGPUs).
	config   scontrolAnswer[slurmConfig]
	nodeGPUs scontrolAnswer[int]
}

// nodeJobsTTL is how long the list of a node's running jobs is reused: a job
// that starts is seen by the scrape after at most this long.
const nodeJobsTTL = 10 * time.Second

// RunningJob is a job squeue lists as running on a node.
type RunningJob struct {
	// ID is the job's own ID (squeue's %A).
	ID string
	// Query is what scontrol is asked to print this job alone: ID, or
	// <ArrayJobId>_<ArrayTaskId> (squeue's %i) for the array task whose
	// ID is also its array's: asked by that ID, scontrol prints every
	// element of the array (job_array.shtml: "The scontrol command will
	// operate on all elements of a job array if the job ID specified is
	// ArrayJobID"), which may be megabytes.
	Query string
	// Start is the job's start time as squeue prints it (%S, opaque). A
	// requeued job starts anew, no sooner than a second after it was
	// requeued (slurmctld's job_mgr.c sets its begin time to now +
	// requeue_delay + 1), on GPUs that may differ: a job record cached
	// under another start time is stale.
	Start string
}

// NodeJobs returns the jobs running on node, from squeue. Their GRES
// allocation (JobOf) tells which GPUs they hold even before any of their
// processes uses one.
func (c *Client) NodeJobs(ctx context.Context, node string) ([]RunningJob, error) {
	return c.NodeJobsSince(ctx, node, time.Time{})
}

// NodeJobsSince is NodeJobs from an answer squeue gave no earlier than
// since: a list asked for before it is asked for again.
func (c *Client) NodeJobsSince(ctx context.Context, node string, since time.Time) ([]RunningJob, error) {
	if node == "" || strings.HasPrefix(node, "-") {
		return nil, fmt.Errorf("invalid node name %q", node)
	}
	c.mu.Lock()
	if c.nodeJobsNode == node && time.Now().Before(c.nodeJobsExpires) && !c.nodeJobsAsked.Before(since) {
		jobs := slices.Clone(c.nodeJobs)
		c.mu.Unlock()
		return jobs, nil
	}
	c.mu.Unlock()
	path := c.SqueuePath
	if path == "" {
		path = "squeue"
	}
	// --all: without it slurmctld leaves out, for a caller that is not an
	// operator, the jobs whose partitions are hidden from it (Hidden=YES,
	// or AllowGroups without its user): _pack_job's _all_parts_hidden
	// unless SHOW_ALL (src/slurmctld/job_mgr.c:10425-10431 @
	// slurm-23-11-1-1, l.9962 @ slurm-21-08-8-2), which squeue sets for
	// -a/--all alone (src/squeue/squeue.c:186-187 @ slurm-23-11-1-1).
	// Such a job's GPUs are as held as any.
	asked := time.Now()
	out, err := c.runBinary(ctx, path, "--noheader", "--all", "--nodelist", node, "--states", runningStates, "--format", nodeJobsFormat)
	if err != nil {
		return nil, err
	}
	jobs, err := parseNodeJobs(out)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.nodeJobs, c.nodeJobsNode, c.nodeJobsAsked, c.nodeJobsExpires = jobs, node, asked, time.Now().Add(nodeJobsTTL)
	c.mu.Unlock()
	return slices.Clone(jobs), nil
}

// runningStates selects the running jobs, flags or not. squeue matches a
// base state such as RUNNING only against a job's whole state word, flags
// included, and a flag against any job carrying it (_filter_job,
// src/squeue/print.c:2939-2943 @ slurm-21-08-8-2, l.2966 @ slurm-23-11-1-1,
// l.3140 @ slurm-25-11-0-1): a job stopped by SIGSTOP (RUNNING|STOPPED),
// booting its nodes (RUNNING|CONFIGURING), being signalled or resized
// still holds its GRES. These flags are set on running jobs alone: STOPPED
// and SIGNALING where job_signal finds the job running
// (src/slurmctld/job_mgr.c:5791-5800, agent.c:1179 @ slurm-23-11-1-1),
// CONFIGURING at allocation (node_scheduler.c:2835-2838), and a job's end
// writes its state word anew (job_mgr.c:5606, 5713, 6545), dropping them,
// so no ended or completing job matches. POWER_UP_NODE, which squeue does
// not accept as a state name (job_state_num), always comes with
// CONFIGURING (node_scheduler.c:2827-2838). A SUSPENDED job (scontrol
// suspend, preemption by gang scheduling) keeps its GRES: select/cons_tres
// gives back only its cores, rm_job_res "if action = 2 then only subtract
// cores (job is suspended)", memory and GRES when "suspended job was
// terminated".
const runningStates = "RUNNING,CONFIGURING,STOPPED,SIGNALING,RESIZING,SUSPENDED"

// nodeJobsFormat asks squeue(1) for "%A: Job id. This will have a unique
// value for each element of job arrays", "%i: Job or job step id. In the
// case of job arrays, the job ID format will be of the form
// <base_job_id>_<index>" and "%S: Actual or expected start time of the
// job", the last one last: its form depends on SLURM_TIME_FORMAT and may
// hold anything.
const nodeJobsFormat = "%A|%i|%S"

// parseNodeJobs reads the lines squeue prints with --noheader --format
// nodeJobsFormat, such as "21845|21845_1|2026-11-22T09:14:03" (squeue's
// print.c: %i is "<array_job_id>_<array_task_id>" for an array task,
// "<het_job_id>+<offset>" for a heterogeneous component, else the job ID).
func parseNodeJobs(out []byte) ([]RunningJob, error) {
	var jobs []RunningJob
	for _, line := range strings.Split(string(out), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		fields := strings.SplitN(line, "|", 3)
		if len(fields) != 3 {
			return nil, fmt.Errorf("squeue: unexpected line %q", line)
		}
		id, display := strings.TrimSpace(fields[0]), strings.TrimSpace(fields[1])
		if !isJobNumber(id) {
			return nil, fmt.Errorf("squeue: unexpected job ID %q", id)
		}
		j := RunningJob{ID: id, Query: id, Start: strings.TrimSpace(fields[2])}
		if array, task, ok := strings.Cut(display, "_"); ok && array == id && isJobNumber(task) {
			j.Query = display
		}
		jobs = append(jobs, j)
	}
	return jobs, nil
}

type cacheEntry struct {
	job Job
	err error
	// start is the start time squeue gave for the job when it was asked
	// (RunningJob.Start); "" when it was asked by ID alone.
	start   string
	expires time.Time
}

// call is one scontrol run that concurrent callers wait for.
type call struct {
	done chan struct{}
	job  Job
	err  error
}

// Job returns the metadata of the job id: a numeric job ID, an array task
// ("123_4"), a heterogeneous component ("123+1") or a SLUID. scontrol runs
// with --json where it supports it and in text form otherwise, always with
// --details so that per-node GPU indices are included. An unknown job gives
// an error matching ErrJobNotFound.
//
// If ctx ends first Job returns ctx's error, but scontrol runs on (bounded
// by Timeout) so that its answer is cached for the next caller. An output
// over the limit (ErrOutputTooLarge) is cached too.
func (c *Client) Job(ctx context.Context, id string) (Job, error) {
	if !validJobArg(id) {
		return Job{}, fmt.Errorf("invalid slurm job ID %q", id)
	}
	return c.job(ctx, id, RunningJob{ID: id, Query: id})
}

// JobOf is Job for a job squeue listed: scontrol is asked for its Query,
// and a cached record is used only if it was fetched for the same start
// time, so that a requeued job's new GPUs are read at once while a job that
// runs on costs no scontrol run until its record expires.
func (c *Client) JobOf(ctx context.Context, r RunningJob) (Job, error) {
	if !isJobNumber(r.ID) || !validJobArg(r.Query) {
		return Job{}, fmt.Errorf("invalid slurm job %q (%q)", r.ID, r.Query)
	}
	return c.job(ctx, r.ID, r)
}

// job returns the job cached under key, or asks scontrol for r.Query. A
// cached entry answers a request without a start time, or one with the
// start time it was fetched for.
func (c *Client) job(ctx context.Context, key string, r RunningJob) (Job, error) {
	c.mu.Lock()
	if e, ok := c.cache[key]; ok && time.Now().Before(e.expires) && (r.Start == "" || e.start == r.Start) {
		c.mu.Unlock()
		return e.job.clone(), e.err
	}
	flightKey := r.Query + "\x00" + r.Start
	cl, running := c.inflight[flightKey]
	if !running {
		cl = &call{done: make(chan struct{})}
		if c.inflight == nil {
			c.inflight = make(map[string]*call)
		}
		c.inflight[flightKey] = cl
		go c.fetch(context.WithoutCancel(ctx), key, flightKey, r, cl)
	}
	c.mu.Unlock()

	if !flight.Done(ctx, cl.done) {
		return Job{}, fmt.Errorf("slurm job %s: %w", r.Query, ctx.Err())
	}
	return cl.job.clone(), cl.err
}

// ResolveSLUID returns the numeric job ID of the job that Slurm 26.05+ names
// by sluid in cgroup v2 paths. It asks scontrol for the job by its SLUID
// (through Job, so the answer is cached like any job's) rather than listing
// every job of the cluster to search for it, which would cost the controller
// far more on a large cluster. Where scontrol does not accept SLUIDs, the
// job of a process is still found with ListPIDs.
func (c *Client) ResolveSLUID(ctx context.Context, sluid string) (string, error) {
	if !slurmid.IsSLUID(sluid) {
		return "", fmt.Errorf("invalid SLUID %q", sluid)
	}
	job, err := c.Job(ctx, sluid)
	if err != nil {
		return "", err
	}
	return job.ID, nil
}

// ErrUnreachableSteps is returned by ListPIDs with the processes of the
// steps scontrol reached when it could not reach others: their processes
// are not known.
var ErrUnreachableSteps = errors.New("scontrol listpids: some job steps unreachable")

// ErrNoSteps is returned by ListPIDs when scontrol finds no job step on
// the node ("No job steps exist on this node."): it looks for the steps'
// sockets in the spool directory of the slurmd it would ask, so this says
// that slurmd runs none, which of a slurmd in a container, whose spool
// directory is its own, says nothing.
var ErrNoSteps = errors.New("scontrol listpids: no job steps exist on this node")

// ListPIDs returns the processes of the job steps running on this node, as
// slurmd knows them: the way to attribute processes on nodes whose cgroups
// say nothing about jobs (proctrack/linuxproc or pgid). It must run on the
// node, as root or as the jobs' owner. No running step is ErrNoSteps.
//
// scontrol before 24.11 goes on past a step it cannot reach, and then exits
// 1 having printed the other steps' rows (_list_pids_one_step sets
// exit_code and _list_pids_all_jobs carries on:
// src/scontrol/info_job.c:666-720,774-793 @ slurm-23-11-1-1). A step that
// ended since it was listed ("<step> does not exist on this node.", ENOENT)
// had no processes left, so those rows are the whole answer; under another
// failure ("Unable to connect to slurmstepd: …", a stray socket or a hung
// slurmstepd) they come with ErrUnreachableSteps. scontrol 24.11 and later
// gather the rows first and print none, not even the header, once a step
// failed (scontrol_list_pids: "if (exit_code) goto cleanup;" before the
// header): every step's processes are unknown then, and that is
// ErrUnreachableSteps with no rows, not a failure of the source, as it is
// where the failing steps were the only ones. Where the only failure was
// steps that ended, scontrol is asked once more: those are gone from
// slurmd's list then, and a step ending as a scrape runs, common on a
// busy node, would otherwise leave every step's processes unknown for that
// scrape (review17 R3).
func (c *Client) ListPIDs(ctx context.Context) ([]StepProcess, error) {
	procs, ended, err := c.listPIDs(ctx)
	if !ended {
		return procs, err
	}
	// A second run the scrape's deadline cut short tells less than the
	// first, whose steps had ended (review19 R2).
	if again, _, aerr := c.listPIDs(ctx); ctx.Err() == nil {
		return again, aerr
	}
	return procs, err
}

// listPIDs runs scontrol listpids once; ended says that it printed no row
// because steps ended, and nothing else failed.
func (c *Client) listPIDs(ctx context.Context) (_ []StepProcess, ended bool, _ error) {
	out, err := c.run(ctx, "listpids")
	var se *scontrolError
	if err != nil && !errors.As(err, &se) {
		return nil, false, err
	}
	if err != nil && strings.Contains(se.stderr, "No job steps") {
		return nil, false, ErrNoSteps
	}
	procs, perr := ParseListPIDs(out)
	if err == nil {
		return procs, false, perr
	}
	var unreachable []string
	steps := true // every message is about a step
	for line := range strings.Lines(se.stderr) {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasSuffix(line, "does not exist on this node."):
		case !strings.Contains(line, "slurmstepd"):
			steps = false
		case !slices.Contains(unreachable, line):
			unreachable = append(unreachable, line)
		}
	}
	switch {
	case !steps || strings.TrimSpace(se.stderr) == "":
		// scontrol itself failed.
		return procs, false, errors.Join(err, perr)
	case perr != nil:
		// The message leaves out the steps that ended, which change from
		// run to run: the failure is logged once per message.
		return nil, len(unreachable) == 0, fmt.Errorf("%w: %s: scontrol printed no step's processes", ErrUnreachableSteps, strings.Join(append(unreachable, "a step failed"), "; "))
	case len(unreachable) == 0:
		return procs, false, nil
	}
	return procs, false, fmt.Errorf("%w: %s", ErrUnreachableSteps, strings.Join(unreachable, "; "))
}

func (c *Client) fetch(ctx context.Context, key, flightKey string, r RunningJob, cl *call) {
	job, err := c.fetchJob(ctx, r.Query)

	c.mu.Lock()
	delete(c.inflight, flightKey)
	switch {
	case err == nil:
		e := cacheEntry{job: job, start: r.Start, expires: time.Now().Add(c.cacheTTL())}
		c.store(key, e)
		// Asked by SLUID or array task, the job is also known by its ID.
		if job.ID != key {
			c.store(job.ID, e)
		}
	case errors.Is(err, ErrJobNotFound), errors.Is(err, ErrOtherJobsRecord):
		c.store(key, cacheEntry{err: err, start: r.Start, expires: time.Now().Add(min(notFoundTTL, c.cacheTTL()))})
	case errors.Is(err, ErrOutputTooLarge), errors.Is(err, ErrUntrustedRecord), errors.Is(err, ErrIncompleteRecord):
		// As large at the next scrape: the array it names is as large.
		// Free text changes only when its owner updates it.
		c.store(key, cacheEntry{err: err, start: r.Start, expires: time.Now().Add(c.cacheTTL())})
	}
	c.mu.Unlock()

	cl.job, cl.err = job, err
	close(cl.done)
}

func (c *Client) fetchJob(ctx context.Context, id string) (Job, error) {
	c.mu.Lock()
	// Asked for an array task, scontrol prints that task alone in text
	// form only: with --json it dumps every record slurmctld returned,
	// the whole array, before the loop that picks the task
	// (src/scontrol/info_job.c, scontrol_print_job: DATA_DUMP_CLI, then
	// _task_id_in_job).
	tryJSON := !c.noJSON && !strings.Contains(id, "_")
	c.mu.Unlock()

	if tryJSON {
		out, err := c.run(ctx, "--json", "--details", "show", "job", id)
		switch {
		case err == nil:
			jobs, err := ParseJobJSON(out)
			if err != nil {
				return Job{}, fmt.Errorf("scontrol --json show job %s: %w", id, err)
			}
			return pickJob(jobs, id)
		case !jsonUnsupported(err):
			return Job{}, err
		}
		c.mu.Lock()
		c.noJSON = true
		c.mu.Unlock()
	}

	out, err := c.run(ctx, "--details", "show", "job", id)
	if err != nil {
		return Job{}, err
	}
	jobs, err := ParseJobText(out)
	if err != nil {
		return Job{}, fmt.Errorf("scontrol show job %s: %w", id, err)
	}
	return pickJob(jobs, id)
}

// store adds e to the cache, making room if it is full: first by dropping
// expired entries, then the entry closest to expiry.
func (c *Client) store(id string, e cacheEntry) {
	if c.cache == nil {
		c.cache = make(map[string]cacheEntry)
	}
	size := c.CacheSize
	if size <= 0 {
		size = DefaultCacheSize
	}
	if _, ok := c.cache[id]; !ok && len(c.cache) >= size {
		now := time.Now()
		oldest := ""
		for k, v := range c.cache {
			if now.After(v.expires) {
				delete(c.cache, k)
			} else if oldest == "" || v.expires.Before(c.cache[oldest].expires) {
				oldest = k
			}
		}
		if len(c.cache) >= size {
			delete(c.cache, oldest)
		}
	}
	c.cache[id] = e
}

func (c *Client) cacheTTL() time.Duration {
	if c.CacheTTL <= 0 {
		return DefaultCacheTTL
	}
	return c.CacheTTL
}

// scontrolError is scontrol exiting with an error. Its message is on stderr,
// or with --json in the JSON on stdout.
type scontrolError struct {
	args   string
	stdout string
	stderr string
	err    error
}

func (e *scontrolError) Error() string {
	msg := strings.Join(strings.Fields(e.stderr), " ")
	if msg == "" {
		return fmt.Sprintf("%s: %v", e.args, e.err)
	}
	return fmt.Sprintf("%s: %v: %s", e.args, e.err, msg)
}

func (e *scontrolError) Unwrap() error { return e.err }

// Is makes scontrol's "Invalid job id specified" match ErrJobNotFound.
func (e *scontrolError) Is(target error) bool {
	return target == ErrJobNotFound &&
		(strings.Contains(e.stderr, "Invalid job id") || strings.Contains(e.stdout, "Invalid job id"))
}

// jsonUnsupported tells a scontrol that does not know --json (getopt's
// "unrecognized option '--json'" before 23.02) or cannot serialize JSON
// (a build without the serializer/json plugin) from other failures.
func jsonUnsupported(err error) bool {
	var se *scontrolError
	if !errors.As(err, &se) {
		return false
	}
	msg := strings.ToLower(se.stderr)
	for _, s := range []string{"unrecognized option", "invalid option", "unknown option", "serializer", "data_parser"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// run runs scontrol with args under the Client's timeout and returns its
// bounded stdout, also when scontrol exits with an error (a
// *scontrolError): listpids prints what it could before failing.
func (c *Client) run(ctx context.Context, args ...string) ([]byte, error) {
	path := c.Path
	if path == "" {
		path = DefaultPath
	}
	return c.runBinary(ctx, path, args...)
}

func (c *Client) runBinary(ctx context.Context, path string, args ...string) ([]byte, error) {
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	stdout := &boundedbuf.Buffer{Limit: maxOutput, FailOnOverflow: true}
	stderr := &boundedbuf.Buffer{Limit: maxStderr}
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	// A group of its own, killed whole at the deadline: a wrapper script's
	// children (or scontrol's) would otherwise keep the output pipes open,
	// and the scrape waiting for them past its own deadline, and live on.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = waitDelay

	err := cmd.Run()
	joined := filepath.Base(path) + " " + strings.Join(args, " ")
	switch {
	case ctx.Err() != nil:
		return nil, fmt.Errorf("%s: %w", joined, ctx.Err())
	case stdout.Overflowed():
		return nil, fmt.Errorf("%s: %w", joined, ErrOutputTooLarge)
	case err != nil:
		return stdout.Bytes(), &scontrolError{args: joined, stdout: string(stdout.Bytes()[:min(len(stdout.Bytes()), maxStderr)]), stderr: string(stderr.Bytes()), err: err}
	}
	return stdout.Bytes(), nil
}

// validJobArg accepts what Job may pass to scontrol: a job ID, an array
// task, a heterogeneous component or a SLUID. Anything else, in particular
// anything starting with "-", never reaches scontrol's command line.
func validJobArg(id string) bool {
	if slurmid.IsSLUID(id) || isJobNumber(id) {
		return true
	}
	for _, sep := range []string{"_", "+"} {
		if job, part, ok := strings.Cut(id, sep); ok && isJobNumber(job) && isJobNumber(part) {
			return true
		}
	}
	return false
}
