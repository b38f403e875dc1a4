package demo

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/xpu-exporter/xpu_exporter/attribution/kubernetes/kubelettest"
)

func (s *Scenario) validateOwners() []error {
	jobs, errs := s.validateSlurm()
	pods, containers := map[string]bool{}, map[string]bool{}
	if s.Kubernetes != nil {
		for _, p := range s.Kubernetes.Pods {
			pods[p.Namespace+"/"+p.Name] = true
			for _, c := range p.Containers {
				containers[p.Namespace+"/"+p.Name+"/"+c.Name] = true
			}
		}
	}
	errs = append(errs, s.validateClaims()...)
	for i, e := range s.Engines {
		if err := e.validate(pods); err != nil {
			errs = append(errs, fmt.Errorf("engines[%d]: %w", i, err))
		}
	}
	// first is the device each PID is first listed on, and its spec there.
	type listed struct {
		device int
		spec   ProcessSpec
	}
	first := map[uint32]listed{}
	for i, d := range s.Devices {
		for _, p := range d.allProcesses() {
			where := fmt.Sprintf("devices[%d]: process %d", i, p.PID)
			// One process may use several devices, but it has one cgroup,
			// user, command line and environment, which the demo's procfs
			// writes once: another owner on another device would be served
			// as that device's too.
			if f, seen := first[p.PID]; !seen {
				first[p.PID] = listed{i, p}
			} else if mine, theirs := ownerFields(p), ownerFields(f.spec); !slices.Equal(mine, theirs) {
				var own, other []string
				for k := range mine {
					if mine[k] != theirs[k] {
						own, other = append(own, mine[k]), append(other, theirs[k])
					}
				}
				errs = append(errs, fmt.Errorf("%s: %s, but devices[%d]'s process %d has %s; a process has one owner on every device it uses",
					where, strings.Join(own, ", "), f.device, p.PID, strings.Join(other, ", ")))
			}
			switch {
			case p.Unit != "" && (p.Pod != "" || p.SlurmJob != ""):
				errs = append(errs, fmt.Errorf("%s: runs in one of pod, slurm_job and unit, or in a slurm_job inside a pod (slurmd in a pod), not in a unit and another", where))
			case p.Pod != "" && !pods[p.Pod]:
				errs = append(errs, fmt.Errorf("%s: pod %q is not in kubernetes.pods (write it namespace/name)", where, p.Pod))
			case p.Container != "" && !containers[p.Pod+"/"+p.Container]:
				errs = append(errs, fmt.Errorf("%s: container %q is not a container of pod %q", where, p.Container, p.Pod))
			case p.SlurmJob != "" && !jobs[p.SlurmJob]:
				errs = append(errs, fmt.Errorf("%s: slurm_job %q is not in slurm.jobs", where, p.SlurmJob))
			}
			for _, k := range sortedKeys(p.Environ) {
				if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(p.Environ[k], 0) {
					errs = append(errs, fmt.Errorf("%s: environ %q=%q is no environment variable", where, k, p.Environ[k]))
				}
			}
		}
	}
	return errs
}

// ownerFields are what a process's owner is made of, as they read in a
// message: pod, container, Slurm job, unit, user, command and environment.
func ownerFields(p ProcessSpec) []string {
	env := make([]string, 0, len(p.Environ))
	for _, k := range sortedKeys(p.Environ) {
		env = append(env, k+"="+p.Environ[k])
	}
	return []string{
		fmt.Sprintf("pod %q", p.Pod), fmt.Sprintf("container %q", p.Container), fmt.Sprintf("slurm_job %q", p.SlurmJob),
		fmt.Sprintf("unit %q", p.Unit), fmt.Sprintf("user %q", p.User), fmt.Sprintf("command %q", p.Command),
		"environ {" + strings.Join(env, ", ") + "}",
	}
}

// Attribution is what a scenario's owners look like to the exporter's
// attribution sources, laid out in a directory: a fake kubelet's sockets, a
// procfs tree with the processes' cgroups, and scontrol and squeue scripts.
type Attribution struct {
	Kubelet *kubelettest.Server // nil without pods
	Procfs  string
	// Sysfs holds the scenario's AMD GPUs (written by AMD) and Gaudi
	// devices; an empty tree without them, so that demo mode never reads
	// the host's GPUs.
	Sysfs    string
	AMD      *AMDSim // nil without AMD GPUs
	Passwd   string
	Scontrol string // "" without Slurm jobs
	Squeue   string
	Node     string
	// CDISpecDir holds the CDI specs of the scenario's DRA claims; "" without
	// claims.
	CDISpecDir string
	// HLSMISpec is the file that makes the exporter binary the Gaudi
	// devices' hl-smi (HLSMIEnv); "" without Gaudi devices.
	HLSMISpec string
	// Exits watches the simulated processes for their exit; nil with
	// pidfd: false.
	Exits   *PIDWatcher
	dir     string
	engines []*http.Server
	// stopChurn ends the churn loop and waits for it; nil without churn.
	stopChurn func()
	scenario  *Scenario
}

// Churn moves the node to churn generation gen at once, as having begun at
// the time at, as the churn loop does every churn_every: for tests that
// step a simulated clock, with a churn_every long enough that the loop
// stays idle.
func (a *Attribution) Churn(gen uint64, at time.Time) { a.scenario.churn(a, gen, at) }

// Close stops the fake kubelet and engines and removes the directory.
func (a *Attribution) Close() {
	if a.stopChurn != nil {
		a.stopChurn()
	}
	if a.Kubelet != nil {
		a.Kubelet.Stop()
	}
	if a.AMD != nil {
		a.AMD.close()
	}
	closeServers(a.engines)
	os.RemoveAll(a.dir)
}

// StartAttribution lays the scenario's owners out in a new temporary
// directory and starts the fake kubelet.
func (s *Scenario) StartAttribution() (*Attribution, error) {
	// Unix socket paths are short: the directory must be too.
	dir, err := os.MkdirTemp("", "xpu-demo-")
	if err != nil {
		return nil, err
	}
	a := &Attribution{scenario: s, dir: dir, Procfs: filepath.Join(dir, "proc"), Sysfs: filepath.Join(dir, "sys"), Passwd: filepath.Join(dir, "passwd"), Node: s.Node}
	if s.PIDFD == nil || *s.PIDFD {
		a.Exits = newPIDWatcher(s)
	}
	if err := s.writeProcfs(a.Procfs, a.Passwd); err != nil {
		a.Close()
		return nil, fmt.Errorf("demo procfs: %w", err)
	}
	if err := os.MkdirAll(a.Sysfs, 0o755); err != nil {
		a.Close()
		return nil, fmt.Errorf("demo sysfs: %w", err)
	}
	if err := s.writeNVIDIADriverTable(a.Procfs); err != nil {
		a.Close()
		return nil, fmt.Errorf("demo NVIDIA driver tables: %w", err)
	}
	if len(s.gaudiDevices()) > 0 {
		// Gaudi's tree goes into the same sysfs (dir/sys) as AMD's.
		if a.Sysfs, a.HLSMISpec, err = s.writeGaudi(dir, a.Procfs, time.Now()); err != nil {
			a.Close()
			return nil, fmt.Errorf("demo Gaudi devices: %w", err)
		}
	}
	if s.HasAMD() {
		now := time.Now()
		a.AMD = s.newAMDSim(a.Sysfs, a.Procfs, now)
		if err := a.AMD.WriteAt(now); err != nil {
			a.Close()
			return nil, fmt.Errorf("demo AMD sysfs: %w", err)
		}
	}
	if s.Slurm != nil && len(s.Slurm.Jobs) > 0 {
		if s.Slurm.Node != "" {
			a.Node = s.Slurm.Node
		}
		if a.Scontrol, a.Squeue, err = s.writeSlurm(dir, a.Node, time.Now()); err != nil {
			a.Close()
			return nil, fmt.Errorf("demo slurm: %w", err)
		}
	}
	if s.Kubernetes != nil {
		if a.engines, err = s.startEngines(time.Now()); err != nil {
			a.Close()
			return nil, fmt.Errorf("demo engines: %w", err)
		}
		if s.hasClaims() {
			a.CDISpecDir = cdiDir(dir)
			if err := s.prepareClaims(a.CDISpecDir); err != nil {
				a.Close()
				return nil, fmt.Errorf("demo DRA claims: %w", err)
			}
		}
		if a.Kubelet, err = kubelettest.New(filepath.Join(dir, "kubelet"), s.Kubernetes); err != nil {
			a.Close()
			return nil, fmt.Errorf("demo kubelet: %w", err)
		}
	}
	if s.churnEvery > 0 {
		a.stopChurn = s.startChurn(a)
	}
	return a, nil
}

// users maps the scenario's user names to uids, root first.
func (s *Scenario) users() map[string]int {
	uids := map[string]int{"root": 0}
	next := 1000
	add := func(u string) {
		if _, ok := uids[u]; !ok && u != "" {
			uids[u] = next
			next++
		}
	}
	for _, d := range s.Devices {
		for _, p := range d.allProcesses() {
			add(p.User)
		}
	}
	if s.Slurm != nil {
		for _, j := range s.Slurm.Jobs {
			add(j.User)
		}
	}
	return uids
}

func (s *Scenario) writeProcfs(root, passwd string) error {
	var pw strings.Builder
	for name, uid := range s.users() {
		fmt.Fprintf(&pw, "%s:x:%d:%d::/home/%s:/bin/bash\n", name, uid, uid, name)
	}
	if err := os.WriteFile(passwd, []byte(pw.String()), 0o644); err != nil {
		return err
	}
	// A node always has a procfs, whether or not any process uses a GPU:
	// a missing one is what a wrong --path.procfs looks like.
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	return s.writeProcesses(root, 0)
}

// writeProcesses writes the procfs entries of the scenario's processes as
// they are in churn generation gen (see churn_every).
func (s *Scenario) writeProcesses(root string, gen uint64) error {
	uids := s.users()
	podUIDs, containers := map[string]string{}, map[string]string{}
	if s.Kubernetes != nil {
		for _, p := range s.Kubernetes.Pods {
			podUIDs[p.Namespace+"/"+p.Name] = churnUID(p.UID, gen)
			// A process names its container, else runs in the pod's first.
			for i, c := range p.Containers {
				containers[p.Namespace+"/"+p.Name+"/"+c.Name] = c.Name
				if i == 0 {
					containers[p.Namespace+"/"+p.Name+"/"] = c.Name
				}
			}
		}
	}
	jobUsers := map[string]string{}
	if s.Slurm != nil {
		for _, j := range s.Slurm.Jobs {
			jobUsers[j.ID] = j.User
		}
	}
	hidden := map[uint32]bool{}
	for _, p := range s.processes() {
		hidden[p.PID] = hidden[p.PID] || p.ProcfsHidden
	}
	write := func(p ProcessSpec) error {
		if hidden[p.PID] {
			return nil
		}
		pid := churnPID(p.PID, gen)
		dir := filepath.Join(root, fmt.Sprint(pid))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		user := p.User
		var cgroup string
		switch {
		case p.Pod != "":
			uid := podUIDs[p.Pod]
			cgroup = fmt.Sprintf("/kubepods.slice/kubepods-pod%s.slice/cri-containerd-%s.scope",
				strings.ReplaceAll(uid, "-", "_"), kubelettest.ContainerID(uid, containers[p.Pod+"/"+p.Container]))
			if p.SlurmJob != "" {
				// slurmd in the pod (Slinky's slurm-operator): its jobs'
				// cgroups nest under the container's, as slurmd's
				// cgroup/v2 plugin makes them under its own; with
				// proctrack/linuxproc tasks stay in slurmd's.
				if s.Slurm.Proctrack != "linuxproc" {
					cgroup += fmt.Sprintf("/system.slice/slurmstepd.scope/job_%s/step_0/user/task_0", p.SlurmJob)
				}
				if user == "" {
					user = jobUsers[p.SlurmJob]
				}
			}
		case p.SlurmJob != "" && s.Slurm.Proctrack == "linuxproc":
			// proctrack/linuxproc leaves tasks in slurmd's cgroup.
			cgroup = "/system.slice/slurmd.service"
			if user == "" {
				user = jobUsers[p.SlurmJob]
			}
		case p.SlurmJob != "":
			cgroup = fmt.Sprintf("/system.slice/slurmstepd.scope/job_%s/step_0/user/task_0", p.SlurmJob)
			if user == "" {
				user = jobUsers[p.SlurmJob]
			}
		case p.Unit != "":
			cgroup = "/system.slice/" + p.Unit
		}
		if user == "" {
			user = "root"
		}
		if cgroup == "" {
			// A login session, under its user's slice as systemd-logind
			// places it (user-<uid>.slice/session-<n>.scope).
			cgroup = fmt.Sprintf("/user.slice/user-%d.slice/session-1.scope", uids[user])
		}
		comm := p.Command
		if comm == "" {
			comm = "python3"
		}
		files := map[string]string{
			"cgroup":  "0::" + cgroup + "\n",
			"status":  fmt.Sprintf("Name:\t%s\nState:\tS (sleeping)\nPid:\t%d\nUid:\t%d\t%d\t%d\t%d\n", comm, pid, uids[user], uids[user], uids[user], uids[user]),
			"comm":    comm + "\n",
			"environ": "PATH=/usr/bin\x00",
			"stat":    procStat(pid, comm, gen),
		}
		if p.SlurmJob != "" {
			files["environ"] = "SLURM_JOB_ID=" + p.SlurmJob + "\x00PATH=/usr/bin\x00"
		}
		for _, k := range sortedKeys(p.Environ) {
			files["environ"] += k + "=" + p.Environ[k] + "\x00"
		}
		for name, content := range files {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
				return err
			}
		}
		return nil
	}
	var errs []error
	for _, p := range s.processes() {
		errs = append(errs, write(p))
	}
	return errors.Join(errs...)
}

// procStat is a process's /proc/<pid>/stat line (proc(5): 52 fields, the
// command name in parentheses), started in generation gen: field 22,
// starttime, tells the process from a later generation's given the same
// PID, as churn does after churnPIDCycle generations.
func procStat(pid uint32, comm string, gen uint64) string {
	// Fields 3 to 21: state, ppid, pgrp, session, tty_nr, tpgid, flags,
	// minflt, cminflt, majflt, cmajflt, utime, stime, cutime, cstime,
	// priority, nice, num_threads, itrealvalue.
	head := fmt.Sprintf("%d (%s) S 1 %d %d 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0", pid, comm, pid, pid)
	// Fields 23 to 52, vsize to exit_code, all 0.
	return head + fmt.Sprintf(" %d", 1000+100*gen) + strings.Repeat(" 0", 30) + "\n"
}

// processes lists every process of the scenario, MIG instances' included.
func (s *Scenario) processes() []ProcessSpec {
	var out []ProcessSpec
	for _, d := range s.Devices {
		out = append(out, d.allProcesses()...)
	}
	return out
}
