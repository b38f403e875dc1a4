package amd

import (
	"bytes"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
)

// maxProcEntries bounds the scan of the procfs root: the kernel's default
// pid_max on 64-bit hosts is 4194304, but a node runs far fewer processes;
// the entries past this bound are not examined.
const maxProcEntries = 1 << 17

// RenderHolders lists the processes under procRoot that hold an open DRM
// render node (an fd whose link reads "/dev/dri/renderD<n>"), sorted. These
// are the only processes whose fdinfo can describe a DRM client of a GPU,
// so the scanner reads their fdinfo alone rather than every fd of every
// process. A process that exits during the scan is skipped; a process
// whose fds cannot be listed (EACCES without CAP_SYS_PTRACE) is returned in
// errs.
func RenderHolders(procRoot string) (pids []int, errs []ScanError) {
	if procRoot == "" {
		procRoot = "/proc"
	}
	names, err := readDirNames(procRoot, maxProcEntries)
	if err != nil {
		return nil, []ScanError{{File: procRoot, Err: err}}
	}
	buf := make([]byte, maxLinkTarget)
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil || pid <= 0 {
			continue
		}
		dir := filepath.Join(procRoot, name, "fd")
		fds, err := readDirNames(dir, maxFDsPerProcess)
		if err != nil {
			if !processGone(err) {
				errs = append(errs, ScanError{PID: pid, File: "fd", Err: err})
			}
			continue
		}
		for _, fd := range fds {
			if bytes.HasPrefix(fdTarget(filepath.Join(dir, fd), buf), []byte(renderPrefix)) {
				pids = append(pids, pid)
				break
			}
		}
	}
	// readDirNames sorts names as strings; PIDs sort as numbers.
	sort.Ints(pids)
	return pids, errs
}

// renderPrefix is how a process's fd link names a DRM render node: the
// path it was opened under, /dev/dri/renderD<minor>.
const renderPrefix = "/dev/dri/renderD"

// maxLinkTarget bounds the fd link read: a DRM node's path is some twenty
// bytes, and a longer target names some other file.
const maxLinkTarget = 128

// fdTarget reads the link of an fd (/proc/<pid>/fd/<n>) into buf, which
// the caller reuses across the fds of a scan: nil when the fd is gone or
// its target does not fit, then not a DRM node.
func fdTarget(link string, buf []byte) []byte {
	n, err := syscall.Readlink(link, buf)
	if err != nil || n >= len(buf) {
		return nil
	}
	return buf[:n]
}
