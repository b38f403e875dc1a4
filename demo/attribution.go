package demo

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/xpu-exporter/xpu_exporter/attribution/kubernetes/kubelettest"
)

// SlurmSpec is the Slurm side of a scenario: the jobs running on the node.
type SlurmSpec struct {
	// Node is the node's name in Slurm; default the scenario's node.
	Node string    `yaml:"node"`
	Jobs []JobSpec `yaml:"jobs"`
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
}

// gresCount is the number of GPUs Slurm counts on the node.
func (s *Scenario) gresCount() int {
	n := 0
	for _, d := range s.Devices {
		n += max(1, len(d.MIG))
	}
	return n
}

func (s *Scenario) validateOwners() []error {
	var errs []error
	jobs := map[string]bool{}
	if s.Slurm != nil {
		for i, j := range s.Slurm.Jobs {
			if j.ID == "" || strings.Trim(j.ID, "0123456789") != "" {
				errs = append(errs, fmt.Errorf("slurm.jobs[%d].id: %q is not a numeric job ID", i, j.ID))
			}
			if j.User == "" {
				errs = append(errs, fmt.Errorf("slurm.jobs[%d].user: missing", i))
			}
			for _, g := range j.GPUs {
				if g < 0 || g >= s.gresCount() {
					errs = append(errs, fmt.Errorf("slurm.jobs[%d].gpus: %d is not a GRES index (0..%d)", i, g, s.gresCount()-1))
				}
			}
			jobs[j.ID] = true
		}
	}
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
	for i, d := range s.Devices {
		for _, p := range d.allProcesses() {
			where := fmt.Sprintf("devices[%d]: process %d", i, p.PID)
			set := 0
			for _, v := range []string{p.Pod, p.SlurmJob, p.Unit} {
				if v != "" {
					set++
				}
			}
			switch {
			case set > 1:
				errs = append(errs, fmt.Errorf("%s: runs in one of pod, slurm_job and unit, not several", where))
			case p.Pod != "" && !pods[p.Pod]:
				errs = append(errs, fmt.Errorf("%s: pod %q is not in kubernetes.pods (write it namespace/name)", where, p.Pod))
			case p.Container != "" && !containers[p.Pod+"/"+p.Container]:
				errs = append(errs, fmt.Errorf("%s: container %q is not a container of pod %q", where, p.Container, p.Pod))
			case p.SlurmJob != "" && !jobs[p.SlurmJob]:
				errs = append(errs, fmt.Errorf("%s: slurm_job %q is not in slurm.jobs", where, p.SlurmJob))
			}
		}
	}
	return errs
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
	dir       string
	engines   []*http.Server
	// stopChurn ends the churn loop and waits for it; nil without churn.
	stopChurn func()
}

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
	a := &Attribution{dir: dir, Procfs: filepath.Join(dir, "proc"), Sysfs: filepath.Join(dir, "sys"), Passwd: filepath.Join(dir, "passwd"), Node: s.Node}
	if err := s.writeProcfs(a.Procfs, a.Passwd); err != nil {
		a.Close()
		return nil, fmt.Errorf("demo procfs: %w", err)
	}
	if err := os.MkdirAll(a.Sysfs, 0o755); err != nil {
		a.Close()
		return nil, fmt.Errorf("demo sysfs: %w", err)
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
		if a.Scontrol, a.Squeue, err = s.writeSlurm(dir, a.Node); err != nil {
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
			if err := s.prepareClaims(a.CDISpecDir, a.Procfs); err != nil {
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
	write := func(p ProcessSpec) error {
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
		}
		if p.SlurmJob != "" {
			files["environ"] = "SLURM_JOB_ID=" + p.SlurmJob + "\x00PATH=/usr/bin\x00"
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

// processes lists every process of the scenario, MIG instances' included.
func (s *Scenario) processes() []ProcessSpec {
	var out []ProcessSpec
	for _, d := range s.Devices {
		out = append(out, d.allProcesses()...)
	}
	return out
}

// writeSlurm writes scontrol and squeue stand-ins that answer as Slurm
// 22.05 does: no --json, the text form of `show job --details`.
func (s *Scenario) writeSlurm(dir, node string) (scontrol, squeue string, err error) {
	var cases strings.Builder
	var ids []string
	for _, j := range s.Slurm.Jobs {
		ids = append(ids, j.ID)
		idx := make([]string, len(j.GPUs))
		for i, g := range j.GPUs {
			idx[i] = fmt.Sprint(g)
		}
		account, qos, partition := or(j.Account, "(null)"), or(j.QOS, "normal"), or(j.Partition, "gpu")
		fmt.Fprintf(&cases, "%s) cat <<'EOF'\n", j.ID)
		fmt.Fprintf(&cases, "JobId=%s JobName=%s\n   UserId=%s(1000) GroupId=%s(1000) MCS_label=N/A\n   Priority=1 Nice=0 Account=%s QOS=%s\n   JobState=RUNNING Reason=None Dependency=(null)\n   Partition=%s AllocNode:Sid=%s:1\n   NodeList=%s\n   BatchHost=%s\n",
			j.ID, or(j.Name, "job"), j.User, j.User, account, qos, partition, node, node, node)
		if len(idx) > 0 {
			fmt.Fprintf(&cases, "   JOB_GRES=gpu:%d\n     Nodes=%s CPU_IDs=0-7 Mem=0 GRES=gpu:%d(IDX:%s)\n", len(idx), node, len(idx), strings.Join(idx, ","))
		}
		cases.WriteString("EOF\n;;\n")
	}
	scontrol = filepath.Join(dir, "scontrol")
	script := "#!/bin/sh\n# The demo's stand-in for Slurm 22.05's scontrol.\n" +
		"case \"$1\" in --json) echo \"scontrol: unrecognized option '--json'\" >&2; exit 1 ;; listpids) echo 'No job steps exist on this node.' >&2; exit 1 ;; esac\n" +
		"for last; do :; done\ncase \"$last\" in\n" + cases.String() +
		"*) echo 'slurm_load_jobs error: Invalid job id specified' >&2; exit 1 ;;\nesac\n"
	if err := os.WriteFile(scontrol, []byte(script), 0o755); err != nil {
		return "", "", err
	}
	squeue = filepath.Join(dir, "squeue")
	// The exporter asks for --format "%A|%i|%S": job ID, the ID as squeue
	// shows it, start time (in Slurm's default time format).
	start := time.Now().UTC().Format("2006-01-02T15:04:05")
	body := "#!/bin/sh\n# The demo's stand-in for squeue: the node's running jobs.\n"
	for _, id := range ids {
		body += "echo '" + id + "|" + id + "|" + start + "'\n"
	}
	return scontrol, squeue, os.WriteFile(squeue, []byte(body), 0o755)
}

func or(v, def string) string {
	if v == "" {
		return def
	}
	return v
}
