package amd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/xpu-exporter/xpu_exporter/internal/procfd"
)

// maxProcEntries bounds the scan of the procfs root: the kernel's default
// pid_max on 64-bit hosts is 4194304, but a node runs far fewer processes;
// the entries past this bound are not examined.
const maxProcEntries = 1 << 17

// DRMHolders lists the processes under procRoot that hold an open DRM
// node, render or primary (an fd whose link reads "/dev/dri/…"), sorted by
// PID, each with those fds. These are the only processes whose fdinfo can
// describe a DRM client of a GPU, so FdinfoScanner.ScanHolders reads the
// fdinfo of those fds alone rather than of every fd of every process. A
// primary node's fds count as much as a render node's: the usage stats
// are the driver's show_fdinfo (kernel documentation "DRM client usage
// stats": "fops->show_fdinfo() as part of the driver specific file
// operations"), and amdgpu's file operations serve both nodes
// (amdgpu_drv.c, amdgpu_driver_kms_fops), whose command submission is
// allowed on either (DRM_AUTH|DRM_RENDER_ALLOW). A process that exits during the scan
// is skipped. A process whose fd links cannot be read (EACCES: another
// user's without CAP_DAC_READ_SEARCH) is looked for in its fdinfo
// (drmFDsFromFdinfo); one whose fdinfo cannot be read either (no
// CAP_SYS_PTRACE) is returned in errs.
//
// The walk costs a procfs lookup per open fd of the node, tens of
// milliseconds on a busy one, so it stops when ctx ends, checked between
// processes: err is then ctx's error and the holders are unknown.
func DRMHolders(ctx context.Context, procRoot string) (holders []procfd.Holder, errs []ScanError, err error) {
	s := procfd.Scanner{Root: procRoot, MaxEntries: maxProcEntries, MaxFDs: maxFDsPerProcess}
	all, perr, err := s.Scan(ctx, isDRINode)
	if ctxErr := ctx.Err(); ctxErr != nil {
		return nil, nil, ctxErr
	}
	if err != nil {
		if procRoot == "" {
			procRoot = "/proc"
		}
		return nil, []ScanError{{File: procRoot, Err: err}}, nil
	}
	holders = all
	found := len(holders)
	for _, e := range perr {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		fds, err := drmFDsFromFdinfo(ctx, procRoot, e.PID)
		switch {
		case err == nil:
			if len(fds) > 0 {
				holders = append(holders, procfd.Holder{PID: e.PID, FDs: fds})
			}
		case procfd.Gone(err):
			// Exited since its fds were listed.
		default:
			errs = append(errs, ScanError{PID: e.PID, File: "fd", Err: fmt.Errorf("%w; through fdinfo: %w", e.Err, err)})
		}
	}
	if len(holders) > found {
		slices.SortFunc(holders, func(a, b procfd.Holder) int { return a.PID - b.PID })
	}
	return holders, errs, nil
}

// drmFDsFromFdinfo finds the DRM fds of a process whose fd links could not
// be read, from its fdinfo instead. A process's fd directory is mode 0500,
// so another user's needs CAP_DAC_READ_SEARCH as well as PTRACE_MODE_READ;
// its fdinfo directory is mode 0555 and asks PTRACE_MODE_READ alone
// (fs/proc/base.c, tgid_base_stuff: DIR("fd", S_IRUSR|S_IXUSR, …) and
// DIR("fdinfo", S_IRUGO|S_IXUGO, …); fs/proc/fd.c, proc_fdinfo_permission:
// generic_permission, then proc_fdinfo_access_allowed's
// ptrace_may_access(task, PTRACE_MODE_READ_FSCREDS)). Every fd's fdinfo
// is read to tell DRM files (a drm-driver key) from the rest, which costs
// more than a link each: only processes whose links cannot be read take
// this way. The fds come without a link target, so which DRM node each is
// open on is unknown: its client is known by its PCI device alone.
func drmFDsFromFdinfo(ctx context.Context, procRoot string, pid int) ([]procfd.FD, error) {
	if procRoot == "" {
		procRoot = "/proc"
	}
	dir := filepath.Join(procRoot, strconv.Itoa(pid), "fdinfo")
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	entries, err := f.ReadDir(maxFDsPerProcess)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	var fds []procfd.FD
	var s FdinfoScanner
	buf := make([]byte, 0, 4<<10)
	for i, e := range entries {
		if i%256 == 255 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		num, err := strconv.Atoi(e.Name())
		if err != nil || num < 0 {
			continue
		}
		_, drm, err := s.readOne(filepath.Join(dir, e.Name()), &buf)
		switch {
		case procfd.Gone(err):
			// Closed since the directory was listed.
		case err != nil:
			return nil, err
		case drm:
			fds = append(fds, procfd.FD{Num: num})
		}
	}
	slices.SortFunc(fds, func(a, b procfd.FD) int { return a.Num - b.Num })
	return fds, nil
}

// isDRINode matches the fd link of any DRM node, render or primary: a
// client's fdinfo is on whichever node it opened.
func isDRINode(target []byte) bool { return bytes.HasPrefix(target, []byte("/dev/dri/")) }
