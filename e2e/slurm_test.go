package e2e

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"text/template"
	"time"

	"github.com/xpu-exporter/xpu_exporter/attribution/process"
	"github.com/xpu-exporter/xpu_exporter/internal/testenv"
)

// slurmTools are the binaries the real-Slurm test runs. Debian installs them
// with slurmctld, slurmd, slurm-client and munge.
var slurmTools = []string{"munged", "slurmctld", "slurmd", "sbatch", "scancel", "scontrol", "squeue", "sinfo", "sleep", "env"}

// TestSlurmEndToEnd runs the exporter against a real one-node Slurm cluster
// (munged, slurmctld, slurmd on loopback) with real batch jobs holding fake
// GPUs through GRES. The GPUs themselves are the demo's simulated NVML,
// whose processes are the jobs' real PIDs; everything else (procfs,
// scontrol, squeue) is real. It runs once with proctrack/linuxproc, where a
// process's cgroup says nothing of its job and slurmd (scontrol listpids) or
// the environment must, and once with proctrack/cgroup, where the job is in
// the cgroup v1 path. One job's process has an empty environment, so that
// only slurmd or the cgroup can name its job.
func TestSlurmEndToEnd(t *testing.T) {
	tools := slurmToolPaths(t)
	for _, proctrack := range []string{"linuxproc", "cgroup"} {
		t.Run(proctrack, func(t *testing.T) {
			// A skip even in CI: the kernel, not a missing tool, decides
			// whether cgroup v1 exists (a cgroup v2-only host, as most CI
			// runners and current distributions are, cannot mount it), and
			// no make target can install it. The linuxproc run still covers
			// the test's attribution paths but the cgroup v1 one, which
			// attribution/process tests on real v1 captures.
			if proctrack == "cgroup" && !cgroupV1Freezer() {
				t.Skip("no cgroup v1 freezer hierarchy at /sys/fs/cgroup/freezer: Slurm 22.05's proctrack/cgroup (cgroup/v1) cannot run here")
			}
			// Under proctrack/linuxproc the jobs' tasks stay in slurmd's
			// cgroup, here the test's own; the exporter asks slurmd or
			// the environment only for a process in a cgroup where a real
			// node's slurmd runs (slurmd.service, or the root cgroup of a
			// node without systemd). A test run from a systemd unit or
			// login session cannot give its slurmd such a cgroup.
			if own, err := os.ReadFile("/proc/self/cgroup"); proctrack == "linuxproc" && (err != nil || !process.ParseCgroup(own).SlurmdCgroup()) {
				t.Skipf("the test runs in cgroup %q, not where proctrack/linuxproc leaves a real node's tasks (slurmd.service, or / without systemd)", strings.TrimSpace(string(own)))
			}
			c := startSlurm(t, tools, proctrack)
			testSlurmAttribution(t, c)
		})
	}
}

// slurmToolPaths finds Slurm's and munge's binaries, or skips: only where
// they cannot be had. CI installs them (make test-deps), so there a missing
// one fails the test rather than silently dropping it.
func slurmToolPaths(t *testing.T) map[string]string {
	t.Helper()
	paths := map[string]string{}
	var missing []string
	for _, name := range slurmTools {
		// The daemons live in /usr/sbin, which a non-login PATH may lack.
		p, ok := testenv.Find(name, "/usr/sbin", "/sbin", "/usr/bin")
		if !ok {
			missing = append(missing, name)
		}
		paths[name] = p
	}
	switch {
	case os.Geteuid() != 0:
		testenv.Unavailable(t, "real-Slurm test: not root (slurmd runs the jobs as root and the test creates device nodes)",
			"CI runs make test as root")
	case len(missing) > 0:
		testenv.Unavailable(t, "real-Slurm test: "+strings.Join(missing, ", ")+" not installed",
			"make test-deps installs Debian's slurmctld, slurmd, slurm-client and munge")
	}
	return paths
}

// cgroupV1Freezer tells whether the cgroup v1 freezer hierarchy, which
// proctrack/cgroup uses under cgroup/v1, is mounted.
func cgroupV1Freezer() bool {
	var st syscall.Statfs_t
	const cgroupSuperMagic = 0x27e0eb
	return syscall.Statfs("/sys/fs/cgroup/freezer", &st) == nil && st.Type == cgroupSuperMagic
}

// slurmCluster is a running one-node cluster in its own directory.
type slurmCluster struct {
	dir, conf       string
	node, partition string
	proctrack       string
	tools           map[string]string
	daemons         []*slurmDaemon
}

type slurmDaemon struct {
	name   string
	cmd    *exec.Cmd
	exited chan struct{}
}

// slurmConfig fills the templates in e2e/slurm/.
type slurmConfig struct {
	Dir, Node, Partition, Proctrack string
	CtldPort, SlurmdPort            int
	FirstJobID                      int
}

func startSlurm(t *testing.T, tools map[string]string, proctrack string) *slurmCluster {
	t.Helper()
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	node, _, _ := strings.Cut(host, ".")
	// Not t.TempDir: munged wants every directory on its socket's path
	// searchable by all, and Unix socket paths must stay short.
	dir, err := os.MkdirTemp("", "xpu-slurm-")
	if err != nil {
		t.Fatal(err)
	}
	c := &slurmCluster{dir: dir, conf: filepath.Join(dir, "etc", "slurm.conf"), node: node, partition: "e2e-gpu", proctrack: proctrack, tools: tools}
	cgroupsBefore := slurmCgroups(node)
	t.Cleanup(func() { c.teardown(t, cgroupsBefore) })

	for _, d := range []struct {
		name string
		mode os.FileMode
	}{{"", 0o755}, {"etc", 0o755}, {"run", 0o755}, {"munge", 0o700}, {"state", 0o755}, {"spool", 0o755}, {"log", 0o755}, {"dev", 0o755}, {"jobs", 0o755}} {
		p := filepath.Join(dir, d.name)
		if err := os.MkdirAll(p, d.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, d.mode); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 4 {
		p := filepath.Join(dir, "dev", fmt.Sprintf("nvidia%d", i))
		if err := syscall.Mknod(p, syscall.S_IFCHR|0o666, 195<<8|i); err != nil {
			// Slurm still allocates GRES on plain files, only without
			// setting CUDA_VISIBLE_DEVICES; the indices checked here are
			// the same.
			t.Logf("mknod %s: %v; using a plain file", p, err)
			if err := os.WriteFile(p, nil, 0o666); err != nil {
				t.Fatal(err)
			}
		}
	}
	key := make([]byte, 128)
	crand.Read(key)
	if err := os.WriteFile(filepath.Join(dir, "munge", "munge.key"), key, 0o400); err != nil {
		t.Fatal(err)
	}

	cfg := slurmConfig{
		Dir: dir, Node: node, Partition: c.partition, Proctrack: proctrack,
		CtldPort: slurmFreePort(t), SlurmdPort: slurmFreePort(t),
		FirstJobID: 10000 + rand.IntN(1_000_000),
	}
	writeSlurmTemplate(t, "slurm/slurm.conf.tmpl", c.conf, cfg)
	writeSlurmTemplate(t, "slurm/gres.conf.tmpl", filepath.Join(dir, "etc", "gres.conf"), cfg)
	if proctrack == "cgroup" {
		b, err := os.ReadFile("slurm/cgroup.conf")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "etc", "cgroup.conf"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	socket := filepath.Join(dir, "run", "munge.socket")
	c.startDaemon(t, "munged", "--foreground", "--socket="+socket,
		"--key-file="+filepath.Join(dir, "munge", "munge.key"),
		"--pid-file="+filepath.Join(dir, "run", "munged.pid"),
		"--seed-file="+filepath.Join(dir, "munge", "munged.seed"),
		"--log-file="+filepath.Join(dir, "log", "munged.log"))
	c.waitFor(t, "munged's socket", 10*time.Second, func() (bool, string, error) {
		_, err := os.Stat(socket)
		return err == nil, fmt.Sprint(err), nil
	})
	c.startDaemon(t, "slurmctld", "-D", "-f", c.conf)
	c.startDaemon(t, "slurmd", "-D", "-f", c.conf, "-N", node)

	// The exporter, started later, finds the cluster the way a user's
	// shell would.
	t.Setenv("SLURM_CONF", c.conf)
	started := time.Now()
	c.waitFor(t, "node "+node+" idle", 60*time.Second, func() (bool, string, error) {
		out, err := c.try("sinfo", "--noheader", "--Node", "--nodes", node, "--format", "%t")
		if err != nil {
			return false, err.Error(), nil // slurmctld not answering yet
		}
		state := strings.TrimSpace(out)
		if strings.HasPrefix(state, "inval") || strings.HasPrefix(state, "drain") {
			detail, _ := c.try("scontrol", "show", "node", node)
			return false, "", fmt.Errorf("node is %s:\n%s", state, detail)
		}
		return state == "idle", "node " + state, nil
	})
	t.Logf("Slurm (proctrack/%s) up in %v in %s", proctrack, time.Since(started).Round(time.Millisecond), dir)
	return c
}

func slurmFreePort(t *testing.T) int {
	_, port, err := net.SplitHostPort(freePort(t))
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(port)
	return n
}

func writeSlurmTemplate(t *testing.T, from, to string, cfg slurmConfig) {
	t.Helper()
	tmpl, err := template.ParseFiles(from)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := tmpl.Execute(&b, cfg); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// startDaemon runs a daemon in the foreground in its own process group,
// its output in log/<name>.out.
func (c *slurmCluster) startDaemon(t *testing.T, name string, args ...string) {
	t.Helper()
	out, err := os.Create(filepath.Join(c.dir, "log", name+".out"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close() // the child has its own copy
	cmd := exec.Command(c.tools[name], args...)
	cmd.Dir = c.dir
	cmd.Env = append(os.Environ(), "SLURM_CONF="+c.conf)
	cmd.Stdout, cmd.Stderr = out, out
	// Pdeathsig stops the daemons even if the test binary is killed before
	// its cleanup runs.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	d := &slurmDaemon{name: name, cmd: cmd, exited: make(chan struct{})}
	go func() { cmd.Wait(); close(d.exited) }()
	c.daemons = append(c.daemons, d)
}

// waitFor polls cond until it holds, bounded by limit; a daemon that exits
// meanwhile, or an error from cond, ends the wait at once. cond also says
// what it saw, for the message when time runs out.
func (c *slurmCluster) waitFor(t *testing.T, what string, limit time.Duration, cond func() (done bool, saw string, err error)) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		ok, saw, err := cond()
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if ok {
			return
		}
		for _, d := range c.daemons {
			select {
			case <-d.exited:
				t.Fatalf("waiting for %s: %s exited (%v)", what, d.name, d.cmd.ProcessState)
			default:
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not reached within %v; last saw: %s", what, limit, saw)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// try runs a Slurm client command against this cluster, bounded in time.
func (c *slurmCluster) try(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.tools[name], args...)
	// Explicit rather than inherited: the cleanup runs after t.Setenv's
	// own has restored the environment.
	cmd.Env = append(os.Environ(), "SLURM_CONF="+c.conf)
	cmd.Dir = filepath.Join(c.dir, "jobs")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

func (c *slurmCluster) run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := c.try(name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// submit starts a batch job and returns its ID.
func (c *slurmCluster) submit(t *testing.T, args ...string) string {
	t.Helper()
	out := c.run(t, "sbatch", append([]string{"--parsable", "--chdir=" + filepath.Join(c.dir, "jobs"),
		"--output=" + filepath.Join(c.dir, "jobs", "%j.out")}, args...)...)
	id, _, _ := strings.Cut(strings.TrimSpace(out), ";")
	if _, err := strconv.Atoi(id); err != nil {
		t.Fatalf("sbatch printed %q, want a job ID", out)
	}
	return id
}

// teardown cancels the jobs, stops the daemons, kills whatever of the
// cluster is left (slurmstepd and the job's processes leave the daemons'
// process groups), removes the cgroups slurmd created and the directory.
func (c *slurmCluster) teardown(t *testing.T, cgroupsBefore []string) {
	if t.Failed() {
		// The daemons' own output has what they logged before opening
		// their log files; slurmstepd logs only to slurmd.log.
		for _, name := range []string{"munged.out", "slurmctld.out", "slurmd.out", "slurmd.log"} {
			b, _ := os.ReadFile(filepath.Join(c.dir, "log", name))
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			t.Logf("last lines of %s:\n%s", name, strings.Join(lines[max(0, len(lines)-40):], "\n"))
		}
	}
	// Jobs are cancelled through slurmctld, if it got as far as starting;
	// their processes are not in the daemons' process groups.
	if slices.ContainsFunc(c.daemons, func(d *slurmDaemon) bool { return d.name == "slurmctld" }) {
		if out, err := c.try("squeue", "--noheader", "--format", "%A"); err == nil && strings.TrimSpace(out) != "" {
			c.try("scancel", strings.Fields(out)...)
			deadline := time.Now().Add(15 * time.Second)
			for time.Now().Before(deadline) {
				if out, err := c.try("squeue", "--noheader", "--format", "%A"); err != nil || strings.TrimSpace(out) == "" {
					break
				}
				time.Sleep(200 * time.Millisecond)
			}
		}
	}
	for _, d := range slices.Backward(c.daemons) {
		pgid := d.cmd.Process.Pid
		syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-d.exited:
		case <-time.After(10 * time.Second):
			t.Errorf("%s did not stop on SIGTERM; killing it", d.name)
			syscall.Kill(-pgid, syscall.SIGKILL)
			select {
			case <-d.exited:
			case <-time.After(5 * time.Second):
			}
		}
	}
	for range 5 {
		left := processesUsing(c.dir)
		if len(left) == 0 {
			break
		}
		t.Logf("killing processes left in %s: %v", c.dir, left)
		for _, pid := range left {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if left := processesUsing(c.dir); len(left) > 0 {
		t.Errorf("processes still running in %s: %v", c.dir, left)
	}
	for _, root := range slurmCgroups(c.node) {
		if !slices.Contains(cgroupsBefore, root) {
			removeCgroupTree(root)
		}
	}
	os.RemoveAll(c.dir)
}

// processesUsing lists the processes whose working directory or open files
// are under dir: everything the cluster started, and nothing else, since
// dir is this run's own.
func processesUsing(dir string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		proc := filepath.Join("/proc", e.Name())
		uses := func(link string) bool {
			target, err := os.Readlink(link)
			return err == nil && (target == dir || strings.HasPrefix(target, dir+"/"))
		}
		found := uses(filepath.Join(proc, "cwd"))
		fds, _ := os.ReadDir(filepath.Join(proc, "fd"))
		for _, fd := range fds {
			found = found || uses(filepath.Join(proc, "fd", fd.Name()))
		}
		if found {
			pids = append(pids, pid)
		}
	}
	return pids
}

// slurmCgroups lists the cgroup v1 directories slurmd uses for node's jobs
// (Debian builds Slurm for several slurmd per host: /slurm_<node>).
func slurmCgroups(node string) []string {
	roots, _ := filepath.Glob("/sys/fs/cgroup/*/slurm_" + node)
	return roots
}

// removeCgroupTree removes the empty cgroups under root, deepest first;
// rmdir fails on a cgroup still in use, which is then left alone.
func removeCgroupTree(root string) {
	var dirs []string
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	for _, d := range slices.Backward(dirs) {
		syscall.Rmdir(d)
	}
}

// slurmJob is a running job as the test sees it.
type slurmJob struct {
	id   string
	pid  int // its sleep process
	gpus string
}

// jobGRES reads the job's GPU indices on the node from scontrol, as in
// "Nodes=vm CPU_IDs=0 Mem=0 GRES=gpu:1(IDX:2)".
var jobGRES = regexp.MustCompile(`GRES=gpu(?::[^(\s]+)?\(IDX:([0-9,-]+)\)`)

func testSlurmAttribution(t *testing.T, c *slurmCluster) {
	sleep := c.tools["sleep"]
	// A: an accounted job; its sleep inherits the job's environment.
	a := c.submit(t, "--job-name=xpu-e2e-train", "--account=physics", "--partition="+c.partition, "--gres=gpu:1",
		"--wrap="+sleep+" 300")
	// B: its process has an empty environment, so that only slurmd (or
	// the cgroup) can tell the exporter whose it is.
	b := c.submit(t, "--job-name=xpu-e2e-noenv", "--partition="+c.partition, "--gres=gpu:1",
		"--wrap=exec "+c.tools["env"]+" -i "+sleep+" 300")
	// C: holds a GPU it never touches; only its GRES makes it the owner.
	cc := c.submit(t, "--job-name=xpu-e2e-idle", "--partition="+c.partition, "--gres=gpu:1",
		"--wrap="+sleep+" 300")
	ids := []string{a, b, cc}

	c.waitFor(t, "jobs running", 30*time.Second, func() (bool, string, error) {
		out, err := c.try("squeue", "--noheader", "--jobs", strings.Join(ids, ","), "--format", "%i %T %r")
		if err != nil {
			return false, "", err
		}
		return strings.Count(out, " RUNNING ") == len(ids), out, nil
	})
	jobs := map[string]*slurmJob{}
	for _, id := range ids {
		j := &slurmJob{id: id}
		jobs[id] = j
		detail := c.run(t, "scontrol", "--details", "show", "job", id)
		m := jobGRES.FindStringSubmatch(detail)
		if m == nil {
			t.Fatalf("job %s has no GPU index in scontrol show job -d:\n%s", id, detail)
		}
		j.gpus = m[1]
		if _, err := strconv.Atoi(j.gpus); err != nil {
			t.Fatalf("job %s holds GPUs %q, want one", id, j.gpus)
		}
		if id == a && (!strings.Contains(detail, " Account=physics ") || !strings.Contains(detail, " Partition="+c.partition+" ")) {
			t.Fatalf("Slurm did not keep job A's account or partition:\n%s", detail)
		}
		// The batch shell starts after the job is RUNNING: wait for slurmd
		// to list the job's sleep.
		c.waitFor(t, "job "+id+"'s process", 15*time.Second, func() (bool, string, error) {
			out, err := c.try("scontrol", "listpids", id)
			if err != nil {
				return false, err.Error(), nil // no step on the node yet
			}
			for _, line := range strings.Split(out, "\n")[1:] {
				f := strings.Fields(line)
				if len(f) < 2 || f[1] != id {
					continue
				}
				comm, _ := os.ReadFile("/proc/" + f[0] + "/comm")
				if strings.TrimSpace(string(comm)) == "sleep" {
					j.pid, _ = strconv.Atoi(f[0])
					return true, "", nil
				}
			}
			return false, out, nil
		})
	}
	if ja, jb, jc := jobs[a].gpus, jobs[b].gpus, jobs[cc].gpus; ja == jb || ja == jc || jb == jc {
		t.Fatalf("jobs share GPUs: A %s, B %s, C %s", ja, jb, jc)
	}
	free := -1
	for i := range 4 {
		if !slices.ContainsFunc(ids, func(id string) bool { return jobs[id].gpus == strconv.Itoa(i) }) {
			free = i
		}
	}

	// D: a process on the node outside any job, like a user's shell or a
	// host daemon, on the GPU that no job holds. Its environment is the
	// test's without Slurm's variables, in case the test itself runs in a
	// job.
	host := exec.Command(c.tools["sleep"], "300")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SLURM_") {
			host.Env = append(host.Env, kv)
		}
	}
	host.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := host.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { host.Process.Kill(); host.Wait() })

	// What the exporter has to work with: the cgroup names the job only
	// under proctrack/cgroup, and B's environment never does.
	cgroup, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", jobs[a].pid))
	inCgroup := regexp.MustCompile(`/slurm(_[^/]+)?/uid_0/job_` + a + `/`).Match(cgroup)
	if want := c.proctrack == "cgroup"; inCgroup != want {
		t.Fatalf("job A's cgroup names the job: %v, want %v under proctrack/%s:\n%s", inCgroup, want, c.proctrack, cgroup)
	}
	environ, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", jobs[b].pid))
	if bytes.Contains(environ, []byte("SLURM_JOB")) {
		t.Fatalf("job B's process has Slurm variables in its environment: %q", environ)
	}
	environ, _ = os.ReadFile(fmt.Sprintf("/proc/%d/environ", jobs[a].pid))
	if !bytes.Contains(append([]byte{0}, environ...), []byte("\x00SLURM_JOB_ID="+a+"\x00")) {
		t.Fatalf("PID %d from scontrol listpids is not job A's: its environment lacks SLURM_JOB_ID=%s", jobs[a].pid, a)
	}

	// Four simulated GPUs whose processes are the real ones: A's and B's
	// sleeps on the GPUs Slurm gave them, C's GPU idle, D on the free one.
	var scenario strings.Builder
	fmt.Fprintf(&scenario, "# Written by e2e/slurm_test.go: jobs %s (A), %s (B), %s (C) on a real Slurm.\n", a, b, cc)
	fmt.Fprintf(&scenario, "node: %s\ndefaults:\n  model: NVIDIA H100 80GB HBM3\n  memory_total: 80GiB\n", c.node)
	scenario.WriteString("  metrics: {utilization: 0.75, memory_utilization: 0.5, memory_used: 20GiB, temperature: 50, power: 300}\ndevices:\n")
	for i := range 4 {
		switch strconv.Itoa(i) {
		case jobs[a].gpus:
			fmt.Fprintf(&scenario, "  - processes: [{pid: %d, memory_used: 16GiB}]\n", jobs[a].pid)
		case jobs[b].gpus:
			fmt.Fprintf(&scenario, "  - processes: [{pid: %d, memory_used: 8GiB}]\n", jobs[b].pid)
		case strconv.Itoa(free):
			fmt.Fprintf(&scenario, "  - processes: [{pid: %d, memory_used: 4GiB}]\n", host.Process.Pid)
		default:
			scenario.WriteString("  - {}\n")
		}
	}
	scenarioPath := filepath.Join(c.dir, "scenario.yaml")
	if err := os.WriteFile(scenarioPath, []byte(scenario.String()), 0o644); err != nil {
		t.Fatal(err)
	}

	e := start(t, "--demo", "--demo.scenario="+scenarioPath, "--path.procfs=/proc",
		"--slurm.scontrol-path="+c.tools["scontrol"], "--slurm.squeue-path="+c.tools["squeue"],
		"--slurm.node-name="+c.node, "--no-attribution.kubernetes")
	client := &http.Client{Timeout: 20 * time.Second}
	code, metrics := get(t, client, "http://"+e.addr+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("status %d:\n%s", code, metrics)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("scenario:\n%s\nmetrics:\n%s", scenario.String(), metrics)
		}
	})
	promtoolCheck(t, metrics)

	// Scraped right after /metrics, whose assertions stop at the first
	// missing series: a source that is down says why here.
	code, body := get(t, client, "http://"+e.addr+"/devices?format=json")
	if code != http.StatusOK {
		t.Fatalf("/devices: status %d:\n%s", code, body)
	}
	type owner struct {
		Kind   string            `json:"kind"`
		Labels map[string]string `json:"labels"`
		Share  float64           `json:"allocated_share"`
	}
	var view struct {
		Devices []struct {
			GPU    string  `json:"gpu"`
			Owners []owner `json:"owners"`
		} `json:"devices"`
		Sources []struct {
			Name  string `json:"name"`
			Up    bool   `json:"up"`
			Error string `json:"error"`
		} `json:"attribution_sources"`
	}
	if err := json.Unmarshal([]byte(body), &view); err != nil {
		t.Fatalf("/devices: %v\n%s", err, body)
	}
	for _, src := range view.Sources {
		if !src.Up {
			t.Errorf("/devices: source %s down: %s", src.Name, src.Error)
		}
	}

	if v := value(t, metrics, "xpu_attribution_source_up", `source="slurm"`); v != 1 {
		t.Errorf("slurm source is down")
	}
	gpuA := `gpu="` + jobs[a].gpus + `"`
	ownerA := []string{gpuA, `slurm_job_id="` + a + `"`, `slurm_user="root"`, `slurm_account="physics"`, `slurm_partition="` + c.partition + `"`}
	if v := value(t, metrics, "xpu_utilization_ratio", ownerA...); v != 0.75 {
		t.Errorf("job A's GPU utilization %v, want the scenario's 0.75", v)
	}
	if v := value(t, metrics, "xpu_memory_used_bytes", ownerA...); v != 20<<30 {
		t.Errorf("job A's GPU memory used %v, want the scenario's 20 GiB", v)
	}
	// An owner's memory is its processes' memory, sole owner or not: job
	// A's process uses 16 GiB of the GPU's 20 GiB in use.
	if v := value(t, metrics, "xpu_workload_memory_used_bytes", ownerA...); v != 16<<30 {
		t.Errorf("job A's memory on its GPU %v, want its process's 16 GiB", v)
	}
	// B gave no account: Slurm says (null), which is no label at all.
	ownerB := []string{`gpu="` + jobs[b].gpus + `"`, `slurm_job_id="` + b + `"`, `slurm_user="root"`, `slurm_partition="` + c.partition + `"`}
	value(t, metrics, "xpu_utilization_ratio", ownerB...) // fails unless exactly one series
	for _, line := range slurmSeries(metrics, "xpu_utilization_ratio", `slurm_job_id="`+b+`"`) {
		if strings.Contains(line, "slurm_account=") {
			t.Errorf("job B has no account, but: %s", line)
		}
	}
	// B's process is B's only through slurmd or its cgroup: were it not
	// found, it would be split off from B as unattributed.
	if strings.Contains(metrics, `workload_kind="unattributed"`) {
		t.Errorf("some job's process was not attributed to its job:\n%s", strings.Join(slurmSeries(metrics, "xpu_workload_memory_used_bytes"), "\n"))
	}
	if v := value(t, metrics, "xpu_workload_allocated_devices", `gpu="`+jobs[cc].gpus+`"`, `slurm_job_id="`+cc+`"`); v != 1 {
		t.Errorf("idle job C holds %v of its GRES GPU, want 1", v)
	}
	// D is no job's: the GPU it runs on is its, as a process's.
	value(t, metrics, "xpu_utilization_ratio", fmt.Sprintf(`gpu="%d"`, free), `user="root"`, `command="sleep"`)
	if got := slurmSeries(metrics, "xpu_workload_allocated_devices", fmt.Sprintf(`gpu="%d"`, free), "slurm_job_id="); len(got) > 0 {
		t.Errorf("GPU %d is in no job's GRES and runs no job's process, but: %v", free, got)
	}
	for id, name := range map[string]string{a: "xpu-e2e-train", b: "xpu-e2e-noenv", cc: "xpu-e2e-idle"} {
		value(t, metrics, "xpu_workload_info", `slurm_job_id="`+id+`"`, `slurm_job_name="`+name+`"`)
	}

	jobOwner := func(id string, account string) []owner {
		labels := map[string]string{"slurm_job_id": id, "slurm_user": "root", "slurm_partition": c.partition}
		if account != "" {
			labels["slurm_account"] = account
		}
		return []owner{{Kind: "slurm", Labels: labels, Share: 1}}
	}
	want := map[string][]owner{
		jobs[a].gpus:  jobOwner(a, "physics"),
		jobs[b].gpus:  jobOwner(b, ""),
		jobs[cc].gpus: jobOwner(cc, ""),
	}
	if len(view.Devices) != 4 {
		t.Errorf("/devices lists %d devices, want 4:\n%s", len(view.Devices), body)
	}
	for _, d := range view.Devices {
		if d.GPU == strconv.Itoa(free) {
			// D's systemd unit, if any, depends on the host.
			if len(d.Owners) != 1 || d.Owners[0].Kind != "process" || d.Owners[0].Labels["command"] != "sleep" || d.Owners[0].Labels["slurm_job_id"] != "" {
				got, _ := json.Marshal(d.Owners)
				t.Errorf("/devices: GPU %s owners\n%s\nwant only the process sleep", d.GPU, got)
			}
			continue
		}
		if !reflect.DeepEqual(d.Owners, want[d.GPU]) {
			got, _ := json.Marshal(d.Owners)
			exp, _ := json.Marshal(want[d.GPU])
			t.Errorf("/devices: GPU %s owners\n%s\nwant\n%s", d.GPU, got, exp)
		}
	}
}

// slurmSeries returns the sample lines of family that contain every one of
// labels.
func slurmSeries(exposition, family string, labels ...string) []string {
	var out []string
	for _, line := range strings.Split(exposition, "\n") {
		if !strings.HasPrefix(line, family+"{") {
			continue
		}
		if !slices.ContainsFunc(labels, func(l string) bool { return !strings.Contains(line, l) }) {
			out = append(out, line)
		}
	}
	return out
}
