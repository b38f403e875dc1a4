package amd

import (
	"bytes"
	"context"
	"strings"

	"github.com/xpu-exporter/xpu_exporter/internal/procfd"
)

// maxProcEntries bounds the scan of the procfs root: the kernel's default
// pid_max on 64-bit hosts is 4194304, but a node runs far fewer processes;
// the entries past this bound are not examined.
const maxProcEntries = 1 << 17

// RenderHolders lists the processes under procRoot that hold an open DRM
// render node (an fd whose link reads "/dev/dri/renderD<n>"), sorted by
// PID, each with its fds open on any DRM node (/dev/dri/…). These are the
// only processes whose fdinfo can describe a DRM client of a GPU, so
// FdinfoScanner.ScanHolders reads the fdinfo of those fds alone rather
// than of every fd of every process. A process that exits during the scan
// is skipped; a process whose fds cannot be listed (EACCES without
// CAP_SYS_PTRACE) is returned in errs.
//
// The walk costs a procfs lookup per open fd of the node, tens of
// milliseconds on a busy one, so it stops when ctx ends, checked between
// processes: err is then ctx's error and the holders are unknown.
func RenderHolders(ctx context.Context, procRoot string) (holders []procfd.Holder, errs []ScanError, err error) {
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
	for _, e := range perr {
		errs = append(errs, ScanError{PID: e.PID, File: "fd", Err: e.Err})
	}
	for _, h := range all {
		for _, fd := range h.FDs {
			if strings.HasPrefix(fd.Target, renderPrefix) {
				holders = append(holders, h)
				break
			}
		}
	}
	return holders, errs, nil
}

// renderPrefix is how a process's fd link names a DRM render node: the
// path it was opened under, /dev/dri/renderD<minor>.
const renderPrefix = "/dev/dri/renderD"

// isDRINode matches the fd link of any DRM node, render or primary: a
// client's fdinfo is on whichever node it opened.
func isDRINode(target []byte) bool { return bytes.HasPrefix(target, []byte("/dev/dri/")) }
