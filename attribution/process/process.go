// Package process reads what procfs says about who owns a process: its
// cgroup (Kubernetes pod, Slurm job, systemd unit), its user and its command.
// Everything it reads comes from processes that may be hostile, so every read
// is size-bounded and no input makes it panic.
package process

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/xpu-exporter/xpu_exporter/internal/procself"
	"github.com/xpu-exporter/xpu_exporter/internal/rawfile"
	"github.com/xpu-exporter/xpu_exporter/internal/validutf8"
)

// Read limits. A cgroup file is a dozen short lines and status a few KiB.
// An environment may take megabytes (the kernel allows a quarter of the
// stack limit), far more than is worth reading for one variable. A passwd
// file with a hundred thousand users is under 10 MiB.
const (
	maxCgroupSize  = 64 << 10
	maxStatusSize  = 64 << 10
	maxCommSize    = 4 << 10
	maxStatSize    = 4 << 10
	maxEnvironSize = 1 << 20
	maxPasswdSize  = 16 << 20
)

var errTooLarge = errors.New("file too large")

// Info is what the exporter needs to know about one process.
type Info struct {
	PID int
	// Comm is the kernel's command name (at most 15 bytes, from
	// /proc/<pid>/comm): the thread name the process gave itself, or the
	// executable's base name.
	Comm string
	// UID is the real user ID from /proc/<pid>/status.
	UID int
	// User is the name of UID in the passwd file, or UID in decimal when it
	// has none there.
	User   string
	Cgroup Cgroup
	// StartTicks is when the process started, in clock ticks after boot
	// (/proc/<pid>/stat field 22); 0 where stat could not be read. A PID
	// given to another process later comes with another start.
	StartTicks uint64
}

// Reader reads process facts from a procfs tree. It is safe for concurrent
// use and must not be copied after first use.
type Reader struct {
	// Root is the procfs mount point: /proc (the default when empty) on a
	// host, the host's procfs mounted elsewhere in a container, or a fixture
	// tree in tests.
	Root string
	// PasswdPath is the passwd file that names UIDs, normally
	// <rootfs>/etc/passwd. Users known only to NSS services (LDAP, SSSD)
	// are not in it and are reported by number. Empty disables naming.
	PasswdPath string

	mu     sync.Mutex
	passwd passwdCache
}

// passwdCache holds the parsed passwd file until the file changes.
type passwdCache struct {
	modTime time.Time
	size    int64
	names   map[int]string
}

// Process reads the cgroup, user and command of pid. A process that does not
// exist, or exits while it is read, gives an error matching fs.ErrNotExist.
func (r *Reader) Process(pid int) (Info, error) {
	if pid <= 0 {
		return Info{}, fmt.Errorf("invalid pid %d", pid)
	}
	info := Info{PID: pid}

	cgroup, err := r.readProcFile(pid, "cgroup", maxCgroupSize, false)
	if err != nil {
		return Info{}, err
	}
	info.Cgroup = ParseCgroup(cgroup)

	// Uid comes early in status; a status made longer than the limit by a
	// huge Groups line still has it, so truncation is harmless here.
	status, err := r.readProcFile(pid, "status", maxStatusSize, true)
	if err != nil {
		return Info{}, err
	}
	uid, ok := parseStatusUID(status)
	if !ok {
		return Info{}, fmt.Errorf("read /proc/%d/status: no Uid line", pid)
	}
	info.UID = uid
	// Names are any bytes their owner chose; made valid UTF-8 here, as
	// they are served, so that two that differ only in invalid bytes are
	// one owner, not two whose labels are the same (validutf8).
	info.User = validutf8.String(r.userName(uid))

	comm, err := r.readProcFile(pid, "comm", maxCommSize, true)
	if err != nil {
		return Info{}, err
	}
	info.Comm = validutf8.String(trimCutCharacter(string(bytes.TrimSuffix(comm, []byte("\n")))))

	// Without it the process is still known, only not told apart from a
	// later one with its PID (StartTicks).
	info.StartTicks, _ = r.StartTicks(pid)
	return info, nil
}

// StartTicks reads when process pid started, in clock ticks after boot:
// proc(5), /proc/<pid>/stat field 22, "starttime: The time the process
// started after system boot".
func (r *Reader) StartTicks(pid int) (uint64, error) {
	// Read into the stack, in one read: the attribution checks the start
	// of dozens of cached PIDs at every scrape. procfs hands out the whole
	// line in one read; a line cut short otherwise either fails to parse,
	// and is taken as an unreadable stat is, or gives another start, and
	// the process is read anew.
	path := r.procPath(pid, "stat")
	fd, err := rawfile.Open(path, 0)
	if err == nil {
		var buf [maxStatSize + 1]byte
		var n int
		n, err = rawfile.Read(fd, buf[:])
		syscall.Close(fd)
		switch {
		case err != nil:
			err = &fs.PathError{Op: "read", Path: path, Err: err}
		case n > maxStatSize:
			err = fmt.Errorf("%w: more than %d bytes", errTooLarge, maxStatSize)
		default:
			ticks, err := procself.StatStartTicks(buf[:n])
			if err != nil {
				return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
			}
			return ticks, nil
		}
	}
	return 0, procErr(pid, "stat", err)
}

// commLen is how many bytes of a name the kernel keeps: TASK_COMM_LEN (16,
// include/linux/sched.h) less the terminating NUL. proc(5), /proc/pid/comm:
// "Strings longer than TASK_COMM_LEN (16) characters (including the
// terminating null byte) are silently truncated", byte by byte, so a long
// UTF-8 name can end in part of a character.
const commLen = 15

// trimCutCharacter drops the incomplete character the kernel's cut left at
// the end of a name of commLen bytes: the part of the name that is there is
// then served as it is, rather than with replacement characters. Other
// invalid bytes are the process's own doing, each replaced by U+FFFD (Process).
func trimCutCharacter(name string) string {
	if len(name) != commLen {
		return name
	}
	for i := 1; i < utf8.UTFMax; i++ {
		c := name[len(name)-i]
		if c < utf8.RuneSelf {
			return name
		}
		if utf8.RuneStart(c) {
			if utf8.FullRuneInString(name[len(name)-i:]) {
				return name
			}
			return name[:len(name)-i]
		}
	}
	return name
}

// SlurmJobFromEnviron returns the SLURM_JOB_ID (or the older SLURM_JOBID)
// that slurmstepd put in the environment of pid, or "" when there is none.
//
// This is the fallback for nodes whose cgroups say nothing about jobs
// (proctrack/linuxproc, proctrack/pgid), for a process in the cgroup where
// they leave tasks (Cgroup.SlurmdCgroup). A process may rewrite its own
// environment, so a cgroup path or scontrol listpids, which the user cannot
// forge, is to be preferred. Reading another user's environment needs
// CAP_SYS_PTRACE; without it the error matches fs.ErrPermission.
func (r *Reader) SlurmJobFromEnviron(pid int) (string, error) {
	if pid <= 0 {
		return "", fmt.Errorf("invalid pid %d", pid)
	}
	environ, err := r.readProcFile(pid, "environ", maxEnvironSize, true)
	if err != nil {
		return "", err
	}
	if len(environ) == maxEnvironSize {
		// The last variable may have been cut: keep only whole ones.
		environ = environ[:bytes.LastIndexByte(environ, 0)+1]
	}
	var fallback string
	for entry := range bytes.SplitSeq(environ, []byte{0}) {
		key, value, found := bytes.Cut(entry, []byte("="))
		if !found || !isDigits(string(value)) {
			continue
		}
		switch string(key) {
		case "SLURM_JOB_ID":
			return string(value), nil
		case "SLURM_JOBID":
			fallback = string(value)
		}
	}
	return fallback, nil
}

// readProcFile reads /proc/<pid>/<name> up to limit bytes. A longer file is
// an error unless truncateOK.
func (r *Reader) readProcFile(pid int, name string, limit int64, truncateOK bool) ([]byte, error) {
	data, err := readLimited(r.procPath(pid, name), limit, truncateOK)
	if err != nil {
		return nil, procErr(pid, name, err)
	}
	return data, nil
}

func (r *Reader) procPath(pid int, name string) string {
	root := r.Root
	if root == "" {
		root = "/proc"
	}
	return filepath.Join(root, strconv.Itoa(pid), name)
}

// procErr says which file of pid could not be read.
func procErr(pid int, name string, err error) error {
	if errors.Is(err, syscall.ESRCH) {
		// Reading a file of a process that has just exited fails with
		// ESRCH rather than ENOENT; to callers both mean "gone".
		err = fmt.Errorf("%w (%w)", fs.ErrNotExist, err)
	}
	return fmt.Errorf("read /proc/%d/%s: %w", pid, name, err)
}

// readLimited reads at most limit bytes of path. Files in procfs report a
// size of zero, so the limit is enforced on the read itself. The file is
// read without the runtime's poller (internal/rawfile): procfs files cannot
// be polled, and a scrape reads many of them.
func readLimited(path string, limit int64, truncateOK bool) ([]byte, error) {
	fd, err := rawfile.Open(path, 0)
	if err != nil {
		return nil, err
	}
	defer syscall.Close(fd)
	buf := make([]byte, 0, min(limit+1, 1<<10))
	for {
		n, err := fill(fd, buf[len(buf):cap(buf)])
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		buf = buf[:len(buf)+n]
		if len(buf) < cap(buf) || int64(len(buf)) > limit {
			break
		}
		buf = slices.Grow(buf, int(min(int64(cap(buf)), limit+1-int64(cap(buf)))))
	}
	if int64(len(buf)) > limit {
		if !truncateOK {
			return nil, fmt.Errorf("%w: more than %d bytes", errTooLarge, limit)
		}
		buf = buf[:limit]
	}
	return buf, nil
}

// fill reads fd until buf is full or the file ends, and says how much it
// read.
func fill(fd int, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := rawfile.Read(fd, buf[n:])
		if err != nil {
			return n, err
		}
		if m == 0 {
			break
		}
		n += m
	}
	return n, nil
}

// maxAncestors bounds DescendsFrom's walk: slurmstepd forks a task
// directly, and a task's own children are a few levels below it.
const maxAncestors = 16

// DescendsFrom says whether an ancestor of pid is named comm (its status
// Name, the kernel's comm), up to maxAncestors levels. proctrack/linuxproc
// finds a job's processes the same way, as descendants of the job step's
// slurmstepd (proctrack_linuxproc.c). It stops at PID 1 and at a process
// that is gone or whose status cannot be read (false, with the error of
// the first unreadable one other than gone).
func (r *Reader) DescendsFrom(pid int, comm string) (bool, error) {
	status, err := r.readProcFile(pid, "status", maxStatusSize, true)
	for range maxAncestors {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return false, nil
			}
			return false, err
		}
		ppid, ok := parseStatusPPid(status)
		if !ok || ppid <= 1 {
			return false, nil
		}
		if status, err = r.readProcFile(ppid, "status", maxStatusSize, true); err == nil {
			if name, ok := statusField(status, "Name:"); ok && name == comm {
				return true, nil
			}
		}
	}
	return false, nil
}

// parseStatusPPid returns the PPid line's parent PID.
func parseStatusPPid(status []byte) (int, bool) {
	v, ok := statusField(status, "PPid:")
	if !ok {
		return 0, false
	}
	ppid, err := strconv.Atoi(v)
	return ppid, err == nil
}

// statusField returns the value of the status line starting with key.
func statusField(status []byte, key string) (string, bool) {
	for line := range bytes.SplitSeq(status, []byte("\n")) {
		if rest, ok := bytes.CutPrefix(line, []byte(key)); ok {
			return string(bytes.TrimSpace(rest)), true
		}
	}
	return "", false
}

// parseStatusUID returns the real UID, the first of the four on the Uid
// line ("Uid:\t<real>\t<effective>\t<saved>\t<fs>").
func parseStatusUID(status []byte) (int, bool) {
	v, ok := statusField(status, "Uid:")
	fields := strings.Fields(v)
	if !ok || len(fields) == 0 {
		return 0, false
	}
	uid, err := strconv.ParseUint(fields[0], 10, 32)
	if err != nil {
		return 0, false
	}
	return int(uid), true
}

// userName names uid from the passwd file, re-reading the file only when
// its size or modification time changes. Any failure to read it falls back
// to the number: a missing name must not hide the process.
func (r *Reader) userName(uid int) string {
	numeric := strconv.Itoa(uid)
	if r.PasswdPath == "" {
		return numeric
	}
	st, err := os.Stat(r.PasswdPath)
	if err != nil {
		return numeric
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	if r.passwd.names == nil || !st.ModTime().Equal(r.passwd.modTime) || st.Size() != r.passwd.size {
		data, err := readLimited(r.PasswdPath, maxPasswdSize, false)
		if err != nil {
			return numeric
		}
		r.passwd = passwdCache{modTime: st.ModTime(), size: st.Size(), names: parsePasswd(data)}
	}
	if name, ok := r.passwd.names[uid]; ok {
		return name
	}
	return numeric
}

// parsePasswd maps UIDs to names. As with getpwuid, the first entry for a
// UID wins; NIS compat lines (+, -) and malformed lines are skipped.
func parsePasswd(data []byte) map[int]string {
	names := make(map[int]string)
	for line := range bytes.SplitSeq(data, []byte("\n")) {
		fields := bytes.SplitN(line, []byte(":"), 4)
		if len(fields) < 4 || len(fields[0]) == 0 || fields[0][0] == '+' || fields[0][0] == '-' || fields[0][0] == '#' {
			continue
		}
		uid, err := strconv.ParseUint(string(fields[2]), 10, 32)
		if err != nil {
			continue
		}
		if _, seen := names[int(uid)]; !seen {
			names[int(uid)] = string(fields[0])
		}
	}
	return names
}
