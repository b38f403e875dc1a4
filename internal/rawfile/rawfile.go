// Package rawfile opens the procfs and sysfs files read at every scrape
// with the system calls alone. os.Open tries each file with the runtime's
// poller (fcntl twice, epoll_ctl, fcntl twice again) only to find it cannot
// be polled: five calls more than the open, read and close such a file
// needs, for hundreds of files a scrape.
package rawfile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io/fs"
	"iter"
	"syscall"
	"unsafe"
)

// Open opens path read-only and close-on-exec, with flags added (such as
// O_DIRECTORY), retrying when a signal interrupts it (EINTR).
func Open(path string, flags int) (int, error) {
	for {
		fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC|flags, 0)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return -1, &fs.PathError{Op: "open", Path: path, Err: err}
		}
		return fd, nil
	}
}

// Read reads once from fd into buf, retrying on EINTR.
func Read(fd int, buf []byte) (int, error) {
	for {
		n, err := syscall.Read(fd, buf)
		if !errors.Is(err, syscall.EINTR) {
			return n, err
		}
	}
}

// Pread reads once from fd at offset into buf, retrying on EINTR.
func Pread(fd int, buf []byte, offset int64) (int, error) {
	for {
		n, err := syscall.Pread(fd, buf, offset)
		if !errors.Is(err, syscall.EINTR) {
			return n, err
		}
	}
}

// OpenAt opens path, NUL-terminated, relative to the directory open at
// dirfd (openat(2): "If the pathname given in pathname is relative, then it
// is interpreted relative to the directory referred to by the file
// descriptor dirfd"), read-only and close-on-exec with flags added,
// retrying on EINTR. The caller's NUL spares copying the path to add one,
// which syscall.Openat does for every file.
func OpenAt(dirfd int, path []byte, flags int) (int, error) {
	if len(path) == 0 || path[len(path)-1] != 0 {
		return -1, syscall.EINVAL
	}
	for {
		r, _, e := syscall.Syscall6(syscall.SYS_OPENAT, uintptr(dirfd), uintptr(unsafe.Pointer(&path[0])),
			uintptr(syscall.O_RDONLY|syscall.O_CLOEXEC|flags), 0, 0, 0)
		switch e {
		case 0:
			return int(r), nil
		case syscall.EINTR:
		default:
			return -1, e
		}
	}
}

// ReadDirent reads directory entries into buf (getdents64(2)), retrying on
// EINTR.
func ReadDirent(fd int, buf []byte) (int, error) {
	for {
		n, err := syscall.ReadDirent(fd, buf)
		if !errors.Is(err, syscall.EINTR) {
			return n, err
		}
	}
}

// getdents64(2): "struct linux_dirent64 { ino64_t d_ino; off64_t d_off;
// unsigned short d_reclen; unsigned char d_type; char d_name[]; /*
// Filename (null-terminated) */ }", d_reclen being "Size of this dirent".
const (
	direntReclen = 16
	// DirentNameOffset is where a record's NUL-terminated d_name starts.
	DirentNameOffset = 19
)

// Dirents yields the linux_dirent64 records of one getdents64 result, each
// up to its d_reclen; a record too short to hold a name ends the walk.
func Dirents(b []byte) iter.Seq[[]byte] {
	return func(yield func([]byte) bool) {
		for len(b) > DirentNameOffset {
			reclen := int(binary.NativeEndian.Uint16(b[direntReclen:]))
			if reclen <= DirentNameOffset || reclen > len(b) {
				return
			}
			if !yield(b[:reclen]) {
				return
			}
			b = b[reclen:]
		}
	}
}

// DirentName is a record's d_name without its NUL and padding.
func DirentName(rec []byte) []byte {
	n := rec[DirentNameOffset:]
	if i := bytes.IndexByte(n, 0); i >= 0 {
		return n[:i]
	}
	return n
}
