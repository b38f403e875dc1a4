// Package procfd finds the processes that hold open a file whose fd link
// matches, for the vendors that learn a device's users from the device
// nodes they hold (amdgpu render nodes, habanalabs compute nodes). proc(5):
// "/proc/pid/fd/ This is a subdirectory containing one entry for each file
// which the process has open, named by its file descriptor, and which is a
// symbolic link to the actual file."
//
// The scan runs at every scrape over every process of the node, most with a
// few fds and the kernel threads with none, so it makes its system calls
// itself: a process's fd directory is opened relative to the procfs root
// and each link read relative to that directory (openat(2), readlinkat(2):
// "If the pathname given in pathname is relative, then it is interpreted
// relative to the directory referred to by the file descriptor dirfd"),
// which saves walking the whole path for each; and directories and links
// are read into buffers reused across the scan, so that a process or an fd
// costs no allocation unless its link matches.
package procfd

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"unsafe"

	"github.com/xpu-exporter/xpu_exporter/internal/rawfile"
)

// FD is one matching fd of a process.
type FD struct {
	Num int
	// Target is the fd's link as readlink(2) gives it.
	Target string
}

// Holder is a process holding at least one matching fd, its fds sorted by
// number.
type Holder struct {
	PID int
	FDs []FD
}

// Error is a process whose fd directory could not be listed.
type Error struct {
	PID int
	Err error
}

func (e Error) Error() string { return fmt.Sprintf("pid %d fd: %v", e.PID, e.Err) }

func (e Error) Unwrap() error { return e.Err }

// Scanner lists matching fds under a procfs mount. The zero Scanner reads
// /proc without bounds.
type Scanner struct {
	// Root is the procfs mount point; /proc when empty.
	Root string
	// MaxEntries bounds the entries of Root examined (PIDs and the other
	// files procfs has there); the ones past it are not. 0: no bound.
	MaxEntries int
	// MaxFDs bounds the fds examined per process. 0: no bound.
	MaxFDs int
}

// Gone reports whether err means the process went away while it was read:
// ENOENT, or ESRCH from a process that has just exited.
func Gone(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH)
}

// Scan returns the processes that hold an fd whose link match accepts,
// sorted by PID. A process that exits during the scan is skipped; one whose
// fd directory cannot be listed (EACCES: proc(5), "Permission to
// dereference or read (readlink(2)) the symbolic links in this directory is
// governed by a ptrace access mode PTRACE_MODE_READ_FSCREDS check") is in
// errs with what was read of it, if anything, still among the holders. An
// fd closed while it is read is skipped. err is set only when Root cannot
// be listed, or when ctx ends, which is checked between processes.
func (s Scanner) Scan(ctx context.Context, match func(target []byte) bool) (holders []Holder, errs []Error, err error) {
	root, err := rawfile.Open(s.root(), syscall.O_DIRECTORY)
	if err != nil {
		return nil, nil, err
	}
	defer syscall.Close(root)
	b := bufPool.Get().(*buffers)
	defer bufPool.Put(b)
	dents := b.root
	seen := 0
	for {
		n, err := rawfile.ReadDirent(root, dents)
		if err != nil {
			return nil, nil, &fs.PathError{Op: "getdents64", Path: s.root(), Err: err}
		}
		if n == 0 {
			break
		}
		for rec := range rawfile.Dirents(dents[:n]) {
			entry := rawfile.DirentName(rec)
			if string(entry) == "." || string(entry) == ".." {
				continue
			}
			if s.MaxEntries > 0 && seen >= s.MaxEntries {
				return sortHolders(holders), errs, nil
			}
			seen++
			pid, ok := parsePID(entry)
			if !ok || pid == 0 {
				continue
			}
			if err := ctx.Err(); err != nil {
				return nil, nil, err
			}
			b.path = append(append(b.path[:0], entry...), "/fd\x00"...)
			fds, err := s.scanDir(root, b, match)
			if err != nil && !Gone(err) {
				errs = append(errs, Error{PID: pid, Err: err})
			}
			if len(fds) > 0 {
				holders = append(holders, Holder{PID: pid, FDs: fds})
			}
		}
	}
	return sortHolders(holders), errs, nil
}

// Process returns the fds of one process whose link match accepts, sorted
// by number, and what Scan would count for it as an error; ENOENT or ESRCH
// (see Gone) when it has exited.
func (s Scanner) Process(pid int, match func(target []byte) bool) ([]FD, error) {
	root, err := rawfile.Open(s.root(), syscall.O_DIRECTORY)
	if err != nil {
		return nil, err
	}
	defer syscall.Close(root)
	b := bufPool.Get().(*buffers)
	defer bufPool.Put(b)
	b.path = append(strconv.AppendInt(b.path[:0], int64(pid), 10), "/fd\x00"...)
	return s.scanDir(root, b, match)
}

func (s Scanner) root() string {
	if s.Root == "" {
		return "/proc"
	}
	return s.Root
}

// path is the fd directory being read, for an error.
func (s Scanner) path(b *buffers) string {
	return filepath.Join(s.root(), string(b.path[:len(b.path)-1]))
}

const (
	// direntBuf is the getdents64 buffer: a procfs entry takes 24 to 32
	// bytes, so one call returns some 250 of them.
	direntBuf = 8 << 10
	// linkBuf fits any link target: PATH_MAX is 4096 with its NUL.
	linkBuf = 4096
)

// buffers are what a scan reuses: the root's entries, and for every
// process the fd directory's entries, the relative path of the directory,
// the link read. They are pooled across scans, which run at every scrape.
type buffers struct {
	root, dents, path, link []byte
}

var bufPool = sync.Pool{New: func() any {
	return &buffers{root: make([]byte, direntBuf), dents: make([]byte, direntBuf), path: make([]byte, 0, 32), link: make([]byte, linkBuf)}
}}

// scanDir lists the fd directory at b.path (NUL-terminated, relative to
// root) and returns its matching fds.
func (s Scanner) scanDir(root int, b *buffers, match func([]byte) bool) ([]FD, error) {
	dir, err := rawfile.OpenAt(root, b.path, syscall.O_DIRECTORY)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: s.path(b), Err: err}
	}
	defer syscall.Close(dir)
	var fds []FD
	seen := 0
	for {
		n, err := rawfile.ReadDirent(dir, b.dents)
		if err != nil {
			return sortFDs(fds), &fs.PathError{Op: "getdents64", Path: s.path(b), Err: err}
		}
		if n == 0 {
			return sortFDs(fds), nil
		}
		for rec := range rawfile.Dirents(b.dents[:n]) {
			num, ok := parsePID(rawfile.DirentName(rec))
			if !ok {
				// "." and "..".
				continue
			}
			if s.MaxFDs > 0 && seen >= s.MaxFDs {
				return sortFDs(fds), nil
			}
			seen++
			// readlink(2): it "will (silently) truncate the contents (to
			// a length of bufsiz characters), in case the buffer is too
			// small"; a target that fills the buffer is not read whole
			// and matches nothing.
			l, err := readlinkat(dir, &rec[rawfile.DirentNameOffset], b.link)
			if err != nil || l >= len(b.link) {
				continue
			}
			if target := b.link[:l]; match(target) {
				fds = append(fds, FD{Num: num, Target: string(target)})
			}
		}
	}
}

// parsePID parses a decimal PID or fd number: digits only, no sign, no
// leading zero, positive for a PID (procfs names them so); fd 0 is
// accepted.
func parsePID(b []byte) (int, bool) {
	if len(b) == 0 || len(b) > 10 || (b[0] == '0' && len(b) > 1) {
		return 0, false
	}
	v := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int(c-'0')
	}
	return v, v <= 1<<31-1
}

func sortHolders(h []Holder) []Holder {
	slices.SortFunc(h, func(a, b Holder) int { return a.PID - b.PID })
	return h
}

func sortFDs(f []FD) []FD {
	slices.SortFunc(f, func(a, b FD) int { return a.Num - b.Num })
	return f
}

// readlinkat reads the link name (NUL-terminated, relative to dirfd) into
// buf.
func readlinkat(dirfd int, name *byte, buf []byte) (int, error) {
	r, _, e := syscall.Syscall6(syscall.SYS_READLINKAT, uintptr(dirfd), uintptr(unsafe.Pointer(name)),
		uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}
