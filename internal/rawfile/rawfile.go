// Package rawfile opens the procfs and sysfs files read at every scrape
// with the system calls alone. os.Open tries each file with the runtime's
// poller (fcntl twice, epoll_ctl, fcntl twice again) only to find it cannot
// be polled: five calls more than the open, read and close such a file
// needs, for hundreds of files a scrape.
package rawfile

import (
	"errors"
	"io/fs"
	"syscall"
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
