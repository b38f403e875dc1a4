package process

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// Exits tells which of many processes exited, with one system call a
// scrape: it holds a PID file descriptor for each (pidfd_open(2)) in an
// epoll set. pidfd_open(2): "The PID file descriptor [...] can be monitored
// using poll(2), select(2), and epoll(7). When the process that it refers
// to terminates, these interfaces indicate the file descriptor as
// readable." A descriptor refers to one process, never to a later one given
// the same PID, so a process it has not seen exit is the one whose owner
// was read. Reading each process's start time (StartTicks) instead costs
// three system calls per process.
//
// Exits is safe for concurrent use.
type Exits struct {
	mu  sync.Mutex
	ep  int
	fds map[uint32]int // PID → its pidfd
	max int
}

// maxWatched bounds the descriptors Exits holds; the processes beyond it
// are checked by their start time.
const maxWatched = 16384

// NewExits returns an Exits for the processes of the procfs at root, or an
// error saying why there can be none: the procfs is not of this process's
// PID namespace (a fixture tree, or the host's procfs mounted in a container
// without hostPID), whose PIDs pidfd_open would take for other processes;
// or the kernel has no pidfd_open (before Linux 5.3) or forbids it.
func NewExits(root string) (*Exits, error) {
	if root == "" {
		root = "/proc"
	}
	// proc(5), /proc/self: "When a process accesses this magic symbolic
	// link, it resolves to the process's own /proc/pid directory", in the
	// PID namespace of the procfs mount.
	self, err := os.Readlink(filepath.Join(root, "self"))
	if err != nil {
		return nil, fmt.Errorf("procfs %s: %w", root, err)
	}
	if self != strconv.Itoa(os.Getpid()) {
		return nil, fmt.Errorf("procfs %s is not of this process's PID namespace (self is %q, not %d)", root, self, os.Getpid())
	}
	// Probe on this process itself: seccomp profiles may refuse the call.
	fd, err := unix.PidfdOpen(os.Getpid(), 0)
	if err != nil {
		return nil, fmt.Errorf("pidfd_open: %w", err)
	}
	unix.Close(fd)
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll_create1: %w", err)
	}
	limit := maxWatched
	var rl unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &rl) == nil && rl.Cur/2 < uint64(limit) {
		// Half the descriptors at most: the exporter needs the others
		// for connections and files.
		limit = int(rl.Cur / 2)
	}
	return &Exits{ep: ep, fds: map[uint32]int{}, max: limit}, nil
}

// Watch starts watching pid, and says whether it does: not when pid does
// not exist, the bound is reached, or the kernel refuses. Call it before
// reading what the process is, so that what is read is of the watched
// process or of one that started after it exited, which Poll then finds.
func (x *Exits) Watch(pid uint32) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if _, ok := x.fds[pid]; ok {
		return true
	}
	if len(x.fds) >= x.max {
		return false
	}
	fd, err := unix.PidfdOpen(int(pid), 0)
	if err != nil {
		return false
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(pid)}
	if err := unix.EpollCtl(x.ep, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		unix.Close(fd)
		return false
	}
	x.fds[pid] = fd
	return true
}

// Poll stops watching the processes that exited, and says how many did.
func (x *Exits) Poll() (int, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	exited := 0
	var evs [128]unix.EpollEvent
	for {
		n, err := unix.EpollWait(x.ep, evs[:], 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return exited, fmt.Errorf("epoll_wait: %w", err)
		}
		for _, ev := range evs[:n] {
			pid := uint32(ev.Fd)
			if fd, ok := x.fds[pid]; ok {
				// Closing the only descriptor takes it out of the epoll
				// set (epoll(7)), so it is not reported again.
				unix.Close(fd)
				delete(x.fds, pid)
				exited++
			}
		}
		if n < len(evs) {
			return exited, nil
		}
	}
}

// Watching says whether pid is watched and was running at the last Poll:
// then it is the very process that was watched.
func (x *Exits) Watching(pid uint32) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	_, ok := x.fds[pid]
	return ok
}

// Retain stops watching the processes keep does not want.
func (x *Exits) Retain(keep func(pid uint32) bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for pid, fd := range x.fds {
		if !keep(pid) {
			unix.Close(fd)
			delete(x.fds, pid)
		}
	}
}

// Watched is how many processes are watched.
func (x *Exits) Watched() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.fds)
}

// Close releases every descriptor.
func (x *Exits) Close() error {
	x.Retain(func(uint32) bool { return false })
	return unix.Close(x.ep)
}
