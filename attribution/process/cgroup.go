package process

import (
	"bytes"
	"slices"
	"strings"

	"github.com/xpu-exporter/xpu_exporter/attribution/internal/slurmid"
	"github.com/xpu-exporter/xpu_exporter/internal/validutf8"
)

// Cgroup is what a process's /proc/<pid>/cgroup says about its owner. Every
// field is empty when the file does not say. Pod and Slurm fields can both be
// set: Slurm run inside Kubernetes (slurmd in a pod) nests job cgroups under
// the pod's, and which of the two owns a device is the caller's decision
// (the attribution package gives it to the job when Slurm is asked).
type Cgroup struct {
	// Path is the cgroup path the owner was read from (the Slurm one when
	// both a pod and a job are found), as written in the file, relative to
	// the reader's cgroup namespace. When no owner is recognised it is the
	// most specific path in the file, for diagnostics.
	Path string

	// PodUID is the Kubernetes pod UID in its canonical form: the dashed,
	// lower-case 36-character UUID, or for static pods, whose UID is the
	// kubelet's 32-hex config hash, that hash.
	PodUID string
	// ContainerID is the 64-hex container runtime ID, without the runtime
	// prefix (cri-containerd-, crio-, docker-) that the systemd cgroup driver
	// adds. It is empty for processes in the pod cgroup itself.
	ContainerID string

	// SlurmJobID is the numeric Slurm job ID of a job_<id> directory.
	SlurmJobID string
	// SlurmSLUID is set instead of SlurmJobID on Slurm 26.05+ cgroup v2
	// nodes, where the job directory is named by the job's SLUID (for
	// example s5K1KKYAYG5D00). Resolving it to a job ID is the slurm
	// package's job.
	SlurmSLUID string
	// SlurmStep is the step: a number, "batch", "extern" or "interactive"
	// (a heterogeneous step reads "0+1"). Empty for processes in the job
	// cgroup outside any step.
	SlurmStep string

	// Unit is the innermost systemd unit (a .service or .scope) and Slice
	// the innermost .slice enclosing it. They are set only for processes
	// that belong to neither a pod nor a Slurm job: under those owners the
	// units are the runtime's plumbing (cri-containerd-….scope,
	// slurmstepd.scope), not the owner.
	Unit  string
	Slice string

	// SystemdPath is, for a process in no pod, job or systemd unit, its
	// path in systemd's own hierarchy (name=systemd) on a cgroup v1 or
	// hybrid node; "" on a v2 node, or for a process with an owner. On a
	// node systemd runs, systemd places every process it starts in a unit
	// there: a path that names none is a container runtime's with the
	// cgroupfs driver (Docker's /docker/<id>), or someone's own.
	SystemdPath string

	// Delegated says a pod's or Slurm job's cgroup is below a user's
	// service manager (user@<uid>.service), a subtree systemd delegates to
	// the user: the pods of a rootless Kubernetes (kind or minikube on
	// rootless Podman, usernetes), or a path the user made up. Either way
	// the process is the user's (OwnerUnit: user-<uid>.slice), who runs
	// that cluster or made the path up: never billed to a pod or job, and
	// never to nobody. PodUID and the Slurm fields are not set.
	Delegated bool
}

// cgroupLine is one hierarchy of /proc/<pid>/cgroup: "ID:controllers:path".
type cgroupLine struct {
	controllers string
	path        string
}

// ParseCgroup reads the content of a /proc/<pid>/cgroup file, in the cgroup
// v1, v2 or hybrid format. It never fails: what it does not recognise it
// leaves empty.
//
// Under cgroup v1 each controller hierarchy can place a process differently,
// so each kind of owner is looked for in the hierarchies in order of how
// reliably that owner's software moves processes there:
//   - the unified (v2) hierarchy first, as on a pure v2 node it is the only
//     one, and on a hybrid node systemd and runc place processes there too
//     (where nothing does, its path is "/" and matches no owner);
//   - then freezer: Slurm's proctrack/cgroup uses only freezer unless
//     task/cgroup is also configured (real captures in fixtures/slurm show
//     memory and devices at "/" while freezer holds the job), and container
//     runtimes join every mounted controller, freezer included;
//   - then memory, cpu, cpuacct, devices, pids, cpuset, blkio;
//   - name=systemd last, because it follows systemd's view rather than the
//     workload manager's: runtimes with the cgroupfs driver may leave it at
//     the runtime's service. For the same reason it is the first place to
//     look for a systemd unit.
func ParseCgroup(content []byte) Cgroup {
	lines := parseCgroupLines(content)
	var cg Cgroup

	for _, l := range lines {
		pod, container, delegated, ok := matchKubernetes(l.path)
		if ok && delegated {
			cg.Delegated = true
			continue
		}
		if ok {
			cg.Path, cg.PodUID, cg.ContainerID = l.path, pod, container
			break
		}
	}
	for _, l := range lines {
		job, sluid, step, ok := matchSlurm(l.path)
		switch {
		case ok && userManagerInPath(l.path):
			cg.Delegated = true
		case !ok:
		case cg.SlurmJobID == "" && cg.SlurmSLUID == "":
			cg.Path, cg.SlurmJobID, cg.SlurmSLUID, cg.SlurmStep = l.path, job, sluid, step
		case cg.SlurmStep == "" && job == cg.SlurmJobID && sluid == cg.SlurmSLUID:
			// slurmstepd sits at job level in freezer and at step level
			// in the other v1 controllers: take the step from wherever
			// the same job has one.
			cg.SlurmStep = step
		}
	}
	if cg.Path != "" {
		return cg
	}
	for _, l := range systemdOrder(lines) {
		if unit, slice, ok := matchSystemd(l.path); ok {
			cg.Path, cg.Unit, cg.Slice = l.path, unit, slice
			return cg
		}
	}
	if i := slices.IndexFunc(lines, func(l cgroupLine) bool { return l.controllers == "name=systemd" }); i >= 0 {
		cg.SystemdPath = lines[i].path
	}
	for _, l := range lines {
		if l.path != "/" {
			cg.Path = l.path
			return cg
		}
	}
	if len(lines) > 0 {
		cg.Path = lines[0].path
	}
	return cg
}

// parseCgroupLines returns the well-formed lines, ordered by how reliably
// they place a process (see ParseCgroup).
func parseCgroupLines(content []byte) []cgroupLine {
	var lines []cgroupLine
	for raw := range bytes.SplitSeq(content, []byte("\n")) {
		fields := strings.SplitN(string(raw), ":", 3)
		if len(fields) != 3 {
			continue
		}
		// The kernel marks the cgroup of an exited process whose cgroup was
		// removed; the path before the mark is still its owner's.
		path := validutf8.String(strings.TrimSuffix(fields[2], " (deleted)"))
		if !strings.HasPrefix(path, "/") {
			continue
		}
		lines = append(lines, cgroupLine{controllers: fields[1], path: path})
	}
	// Stable, so that the kernel's order breaks ties.
	slices.SortStableFunc(lines, func(a, b cgroupLine) int { return lineRank(a) - lineRank(b) })
	return lines
}

var controllerRank = []string{"", "freezer", "memory", "cpu", "cpuacct", "devices", "pids", "cpuset", "blkio"}

// lineRank orders hierarchies for ownership; unknown controllers come after
// the known ones, and name=systemd last of all.
func lineRank(l cgroupLine) int {
	if l.controllers == "name=systemd" {
		return len(controllerRank) + 1
	}
	best := len(controllerRank)
	for c := range strings.SplitSeq(l.controllers, ",") {
		for rank, known := range controllerRank {
			if c == known && rank < best {
				best = rank
			}
		}
	}
	return best
}

// systemdOrder moves the name=systemd hierarchy to the front: it is
// systemd's own view of the process.
func systemdOrder(lines []cgroupLine) []cgroupLine {
	n := len(lines)
	if n == 0 || lines[n-1].controllers != "name=systemd" {
		return lines
	}
	return append([]cgroupLine{lines[n-1]}, lines[:n-1]...)
}

// matchKubernetes recognises the pod and container of the kubelet's cgroup
// layouts, wherever they are nested (kind and other containerised kubelets
// put them under the node container's cgroup, and --cgroup-root renames the
// top slice to e.g. kubelet-kubepods.slice):
//
//	systemd driver:  …/kubepods-burstable-pod<uid_with_underscores>.slice/cri-containerd-<id>.scope
//	cgroupfs driver: …/kubepods/burstable/pod<uid>/<id>
//
// A reader in a cgroup namespace of its own (an unprivileged container on
// a cgroup v2 node: containerd's CRI, Docker and Podman give each one)
// reads the path relative to its own cgroup, with one ".." per level up
// (cgroup_namespaces(7): the path "is relative to the cgroup namespace root
// of the reading process"). From the exporter's pod the levels up are
// kubepods' own, so a pod there is named first, or after its QoS class:
//
//	/../../kubepods-burstable-pod<uid_>.slice/cri-containerd-<id>.scope
//	/../../../kubepods-besteffort.slice/kubepods-besteffort-pod<uid_>.slice/…
//	/../../pod<uid>/<id>, /../../besteffort/pod<uid>/<id>
//
// A pod below a user's service manager (user@<uid>.service) is delegated:
// systemd hands that subtree to the user (user@.service: Delegate=), who
// may make any directory there and move their own processes into it, a
// pod's name included; rootless Kubernetes keeps its real pods there.
func matchKubernetes(path string) (podUID, containerID string, delegated, ok bool) {
	parts := strings.Split(path, "/")
	named := 1 // the first component below the ".." of a namespaced path
	for named < len(parts) && parts[named] == ".." {
		named++
	}
	namespaced := named > 1
	seenKubepods := false
	for i, part := range parts {
		if _, user := userManagerUID(part); user {
			delegated = true
		}
		if !seenKubepods && !(namespaced && i >= named && !slices.ContainsFunc(parts[named:i], notQoS)) {
			seenKubepods = strings.Contains(part, "kubepods")
			continue
		}
		uid, isPod := podUIDFromComponent(part)
		if !isPod {
			seenKubepods = seenKubepods || strings.Contains(part, "kubepods")
			continue
		}
		if i+1 < len(parts) {
			containerID = containerIDFromComponent(parts[i+1])
		}
		return uid, containerID, delegated, true
	}
	return "", "", false, false
}

// notQoS says part is not the cgroup of a pod QoS class, which holds the
// Burstable and BestEffort pods (cgroupfs: burstable, besteffort; systemd:
// kubepods-burstable.slice, kubepods-besteffort.slice).
func notQoS(part string) bool {
	switch strings.TrimPrefix(strings.TrimSuffix(part, ".slice"), "kubepods-") {
	case "burstable", "besteffort":
		return false
	}
	return true
}

// podUIDFromComponent accepts "pod<uid>" (cgroupfs) and
// "<anything>-pod<uid_with_underscores>.slice" (systemd).
func podUIDFromComponent(part string) (string, bool) {
	var raw string
	if trimmed, ok := strings.CutSuffix(part, ".slice"); ok {
		i := strings.LastIndex(trimmed, "-pod")
		if i < 0 {
			return "", false
		}
		raw = trimmed[i+len("-pod"):]
	} else if rest, ok := strings.CutPrefix(part, "pod"); ok {
		raw = rest
	} else {
		return "", false
	}
	return canonicalPodUID(raw)
}

// canonicalPodUID returns raw as a lower-case dashed UUID, or as a 32-hex
// static pod hash.
func canonicalPodUID(raw string) (string, bool) {
	raw = strings.ToLower(strings.ReplaceAll(raw, "_", "-"))
	switch len(raw) {
	case 32:
		return raw, isHex(raw)
	case 36:
		if isUUID(raw) {
			return raw, true
		}
	}
	return "", false
}

// containerIDFromComponent strips the systemd driver's runtime prefix and
// .scope suffix; what remains must be a 64-hex runtime ID. CRI-O's conmon
// monitor (crio-conmon-<id>.scope) is not the container and gives no ID.
func containerIDFromComponent(part string) string {
	id := strings.TrimSuffix(part, ".scope")
	for _, prefix := range []string{"cri-containerd-", "crio-", "docker-"} {
		if rest, ok := strings.CutPrefix(id, prefix); ok {
			id = rest
			break
		}
	}
	if len(id) != 64 || !isHex(id) {
		return ""
	}
	return id
}

// matchSlurm recognises the Slurm cgroup layouts:
//
//	v1:  …/slurm/uid_<uid>/job_<id>/step_<step>/task_<n>
//	     …/slurm_<nodename>/uid_<uid>/job_<id>/…        (multiple-slurmd builds)
//	v2:  …/slurmstepd.scope/job_<id>/step_<step>/user/task_<n>
//	     …/<nodename>_slurmstepd.scope/job_<id>/…       (multiple-slurmd builds)
//	     …/slurmstepd.scope/<SLUID>/step_<step>/…       (26.05+ default)
//
// The job directory must follow the Slurm root directly (after uid_<uid> on
// v1), so that a job_ directory elsewhere in a path is not taken for a job.
func matchSlurm(path string) (jobID, sluid, step string, ok bool) {
	parts := strings.Split(path, "/")
	for i, part := range parts {
		if !isSlurmRoot(part) {
			continue
		}
		j := i + 1
		if j < len(parts) && strings.HasPrefix(parts[j], "uid_") && isDigits(parts[j][len("uid_"):]) {
			j++
		}
		if j >= len(parts) {
			continue
		}
		if id, isJob := strings.CutPrefix(parts[j], "job_"); isJob && isDigits(id) {
			jobID = id
		} else if slurmid.IsSLUID(parts[j]) {
			sluid = parts[j]
		} else {
			continue
		}
		if j+1 < len(parts) {
			if s, isStep := strings.CutPrefix(parts[j+1], "step_"); isStep && slurmid.IsStep(s) {
				step = s
			}
		}
		return jobID, sluid, step, true
	}
	return "", "", "", false
}

func isSlurmRoot(part string) bool {
	return part == "slurm" || strings.HasPrefix(part, "slurm_") ||
		part == "slurmstepd.scope" || strings.HasSuffix(part, "_slurmstepd.scope")
}

// matchSystemd takes the innermost .service or .scope component as the unit
// and the innermost .slice above it as the slice.
func matchSystemd(path string) (unit, slice string, ok bool) {
	parts := strings.Split(path, "/")
	for i := len(parts) - 1; i >= 0; i-- {
		if strings.HasSuffix(parts[i], ".service") || strings.HasSuffix(parts[i], ".scope") {
			unit = parts[i]
			for j := i - 1; j >= 0; j-- {
				if strings.HasSuffix(parts[j], ".slice") {
					slice = parts[j]
					break
				}
			}
			return unit, slice, true
		}
	}
	return "", "", false
}

func isHex(s string) bool {
	for i := range len(s) {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return s != ""
}

func isDigits(s string) bool {
	if s == "" || len(s) > 20 {
		return false
	}
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// SlurmdCgroup says the process is in a cgroup where Slurm leaves the tasks
// of job steps when nothing moves them into a job cgroup: the nodes whose
// process tracking is proctrack/linuxproc (or pgid), whose cgroups name no
// job. Only there can a process's job be learnt from slurmd (scontrol
// listpids) or its environment; a process elsewhere outside every job
// cgroup (a login session, a service) is not a task of any job, whatever
// SLURM_JOB_ID it carries.
//
// proctrack/linuxproc's proctrack_p_add does nothing with the task it is
// given (src/plugins/proctrack/linuxproc/proctrack_linuxproc.c, which finds
// a job's processes by their slurmstepd ancestor instead), so tasks stay in
// the cgroup of the slurmstepd that forked them, which is one of:
//   - slurmd.service, the unit SchedMD ships (etc/slurmd.service.in), where
//     slurmstepd starts as slurmd's child when no cgroup plugin moves it;
//   - slurmstepd.scope or <node>_slurmstepd.scope without a job directory:
//     the cgroup/v2 plugin makes slurmd create that scope and every
//     slurmstepd move itself into its "system" directory, "a temporary
//     'parking' until we have not created the job hierarchy"
//     (src/plugins/cgroup/v2/cgroup_v2.c, cgroup_p_setup_scope), which only
//     proctrack/cgroup, task/cgroup or jobacct_gather/cgroup would create;
//   - on a node (or container) without systemd, the cgroup slurmd was
//     started in: the root cgroup under an init script. Such a cgroup names
//     no systemd unit or slice.
//
// A cgroup that names no unit may also be a container runtime's with the
// cgroupfs driver (/docker/<id>), slurmd's if Slurm runs in that container
// and anyone's who may start one otherwise; SystemdPath tells it from a
// root cgroup on a v1 node, and the resolver asks more of such a process
// before believing its environment.
func (c Cgroup) SlurmdCgroup() bool {
	// A user's service manager's subtree is the user's to name: no
	// slurmd runs there (Cgroup.Delegated).
	if c.PodUID != "" || c.SlurmJobID != "" || c.SlurmSLUID != "" || userManagerInPath(c.Path) {
		return false
	}
	if c.Unit == "" {
		// Path is then the most specific path of the file: a slice in it
		// (a v1 controller at /user.slice) is systemd's.
		return !slices.ContainsFunc(strings.Split(c.Path, "/"), func(part string) bool { return strings.HasSuffix(part, ".slice") })
	}
	return c.Unit == "slurmd.service" || c.Unit == "slurmstepd.scope" || strings.HasSuffix(c.Unit, "_slurmstepd.scope")
}

// runtimeScopes are the container runtimes that, with the systemd cgroup
// driver, put each container in a scope of its own named
// "<prefix>-<64-hex id>.scope" (runc's systemd driver names the unit
// "<ScopePrefix>-<id>.scope"; dockerd's --cgroup-parent reference: "system.slice
// for systemd cgroup driver"; podman's libpod-<id>.scope under machine.slice,
// or the user's slice when rootless; nerdctl, containerd's own command line,
// asks for "system.slice:nerdctl:<id>" (pkg/cmd/container/run_cgroup_linux.go,
// generateCgroupPath), which runc makes nerdctl-<id>.scope).
var runtimeScopes = []struct{ prefix, runtime string }{
	{"docker-", "docker"},
	{"libpod-", "podman"},
	{"cri-containerd-", "containerd"},
	{"nerdctl-", "containerd"},
	{"crio-", "cri-o"},
}

// OwnerUnit is the unit label of a process outside pods and Slurm jobs: the
// unit it runs in when that unit is the same at every start, else a stable
// name for what created it, so that containers, logins and ad-hoc runs do
// not make a new owner each. It is "" when the cgroup names no unit.
//
//   - A container runtime's scope (docker-<id>.scope, libpod-<id>.scope,
//     cri-containerd-<id>.scope, crio-<id>.scope) is one per container: the
//     owner is the runtime ("docker", "podman", "containerd", "cri-o").
//   - A login session's scope is one per login: pam_systemd(8) says "A new
//     systemd scope unit is created for the session" (session-<id>.scope)
//     and placed in "an implicit per-user slice unit below user.slice"
//     (user-<uid>.slice), where it also starts "an instance of the system
//     service user@.service, which runs the systemd user manager instance"
//     (user@<uid>.service, user@.service(5)). The owner of all of these, and
//     of the transient units inside the user manager, is user-<uid>.slice:
//     one per user however often they log in.
//   - systemd-run(1) "may be used to create and start a transient .service
//     or .scope unit"; without --unit it names it itself (run-u<n>,
//     run-r<hex>, run-p<pid>-i<n>), one per run. Desktop launchers start
//     each application in app-…-<random>.scope or app-…@<random>.service
//     (systemd's "Desktop Environments" integration document). Terminals
//     do the same for each shell they start: GNOME's VTE names the scope
//     "vte-spawn-{uuid}.scope" (src/systemd.cc), tmux 3.4 and later
//     "tmux-spawn-<uuid>.scope" for each pane (compat/systemd.c,
//     SD_ID128_UUID_FORMAT_STR). Such a unit's owner is its user slice, else
//     the slice enclosing it.
//
// Other scopes keep their names: systemd.scope(5) scopes are "only created
// programmatically", but a program that gives its scope a fixed name
// (slurmstepd.scope, init.scope) makes a stable owner of it.
func (c Cgroup) OwnerUnit() string {
	if slice := userSlice(c.Path); c.Delegated && slice != "" {
		return slice
	}
	if c.Unit == "" {
		return c.Slice
	}
	// The units of a container that runs its own service manager (systemd
	// as a container's init) are the container's: its runtime owns them,
	// as it owns the container's scope.
	for part := range strings.SplitSeq(c.Path, "/") {
		if runtime := containerRuntime(part); runtime != "" {
			return runtime
		}
	}
	if uid, ok := userManagerUID(c.Unit); ok {
		return "user-" + uid + ".slice"
	}
	if !transientUnit(c.Unit) && !(c.Unit == "init.scope" && userManagerInPath(c.Path)) {
		return c.Unit
	}
	if slice := userSlice(c.Path); slice != "" {
		return slice
	}
	if c.Slice != "" {
		return c.Slice
	}
	return c.Unit
}

// containerRuntime is the runtime of a container's scope, or "".
func containerRuntime(unit string) string {
	name, ok := strings.CutSuffix(unit, ".scope")
	if !ok {
		return ""
	}
	for _, r := range runtimeScopes {
		if id, ok := strings.CutPrefix(name, r.prefix); ok && len(id) == 64 && isHex(id) {
			return r.runtime
		}
	}
	return ""
}

// transientUnit recognises the units named anew for each login or run.
func transientUnit(unit string) bool {
	name, isScope := strings.CutSuffix(unit, ".scope")
	if !isScope {
		name, _ = strings.CutSuffix(unit, ".service")
	}
	if id, ok := strings.CutPrefix(name, "session-"); ok && isScope {
		return id != ""
	}
	if rest, ok := strings.CutPrefix(name, "run-"); ok {
		return isSystemdRunID(rest)
	}
	if strings.HasPrefix(name, "app-") {
		return isScope || strings.Contains(name, "@")
	}
	for _, terminal := range []string{"vte-spawn-", "tmux-spawn-"} {
		if id, ok := strings.CutPrefix(name, terminal); ok && isScope {
			return isUUID(id)
		}
	}
	return false
}

// isUUID accepts the 8-4-4-4-12 hexadecimal form of a UUID.
func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := range len(s) {
		switch i {
		case 8, 13, 18, 23:
			if s[i] != '-' {
				return false
			}
		default:
			if !isHex(s[i : i+1]) {
				return false
			}
		}
	}
	return true
}

// isSystemdRunID accepts the names systemd-run generates after "run-":
// u<n>, r<hex> and p<pid>-i<n>, and before systemd v230 its own PID
// (src/run/run.c of v219, RHEL 7's: "run-"PID_FMT".scope", ".service").
func isSystemdRunID(s string) bool {
	if s == "" {
		return false
	}
	if isDigits(s) {
		return true
	}
	switch rest := s[1:]; s[0] {
	case 'u':
		return isDigits(rest)
	case 'r':
		return isHex(rest)
	case 'p':
		pid, n, ok := strings.Cut(rest, "-i")
		return ok && isDigits(pid) && isDigits(n)
	}
	return false
}

// userManagerUID returns <uid> of "user@<uid>.service".
func userManagerUID(unit string) (string, bool) {
	uid, ok := strings.CutPrefix(unit, "user@")
	if !ok {
		return "", false
	}
	uid, ok = strings.CutSuffix(uid, ".service")
	return uid, ok && isDigits(uid)
}

func userManagerInPath(path string) bool {
	for part := range strings.SplitSeq(path, "/") {
		if _, ok := userManagerUID(part); ok {
			return true
		}
	}
	return false
}

// userSlice is the user-<uid>.slice in path, or the one of the
// user@<uid>.service in it.
func userSlice(path string) string {
	for part := range strings.SplitSeq(path, "/") {
		if uid, ok := strings.CutPrefix(part, "user-"); ok {
			if uid, ok = strings.CutSuffix(uid, ".slice"); ok && isDigits(uid) {
				return part
			}
		}
		if uid, ok := userManagerUID(part); ok {
			return "user-" + uid + ".slice"
		}
	}
	return ""
}
