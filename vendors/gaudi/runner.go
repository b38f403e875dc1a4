package gaudi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/xpu-exporter/xpu_exporter/internal/boundedbuf"
)

const (
	// DefaultPath is where the Intel Gaudi software installs hl-smi.
	DefaultPath = "/usr/bin/hl-smi"
	// DefaultTimeout bounds a run whose context has no deadline. hl-smi
	// answers in well under a second on a healthy node; a scrape gives it
	// the scrape's deadline, however long, since a slow answer on a loaded
	// node is the one that matters.
	DefaultTimeout = 5 * time.Second
	// DefaultMaxOutput bounds stdout. With DefaultFields a row is about
	// 400 bytes, so 8 devices print some 4 KiB.
	DefaultMaxOutput = 1 << 20
	// maxStderr keeps enough of an error message to report it.
	maxStderr = 4 << 10
	// waitDelay is how long Wait waits for the output pipes after hl-smi
	// exited and its process group was killed, in case something it started
	// left the group (setsid) and still holds them.
	waitDelay = time.Second
)

// Runner runs hl-smi, one run at a time, and counts its failures. Its
// exported fields must be set before first use; it must not be copied
// after. It is safe for concurrent use: a query that arrives while the
// previous run has not exited fails with ReasonBusy and starts nothing.
//
// hl-smi runs in a process group of its own, which is killed at the
// deadline, past the output limit, once hl-smi itself has exited (so that
// nothing it started outlives it, holding its output open), and by Close.
type Runner struct {
	// Path is the hl-smi binary; DefaultPath when empty. It is run
	// directly, never through a shell.
	Path string
	// Fields are the --query-aip fields; DefaultFields when nil. Each must be
	// one KnownField reports, and "index" must be among them.
	Fields []string
	// NoHeader asks for --format=csv,noheader,nounits. Without the header a
	// reordered output cannot be detected, so leave it false unless an
	// hl-smi version is found that cannot print the header.
	NoHeader bool
	// Timeout bounds a run whose context has no deadline; DefaultTimeout
	// when zero.
	Timeout time.Duration
	// MaxOutput bounds stdout in bytes; DefaultMaxOutput when zero.
	MaxOutput int

	mu sync.Mutex
	// running says a run has not exited yet; pgid is its process group
	// (0 before it started).
	running bool
	pgid    int
	closed  bool // Close was called: no run starts any more

	failures [numReasons]atomic.Uint64

	// killGroup ends the run's process group. Tests replace it to play a
	// process that does not die.
	killGroup func(pgid int) error
}

// reasonIndex numbers the Reasons for the failure counters.
var reasonIndex = func() map[Reason]int {
	m := make(map[Reason]int, len(Reasons))
	for i, r := range Reasons {
		m[r] = i
	}
	return m
}()

// Busy says whether a run has not exited yet: until it has, Query starts
// none and fails as ReasonBusy.
func (r *Runner) Busy() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.running
}

// Close kills the process group of the run under way, if any, and makes
// every later Query fail without starting hl-smi: for the exporter's exit,
// which hl-smi and what it started must not outlive (their group of their
// own is not reached by a signal to the exporter's).
func (r *Runner) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	if r.pgid != 0 {
		_ = r.kill(r.pgid)
	}
}

// killRun kills the process group pgid if it is still the run's: not once
// its leader may have been reaped, and its id reused. ESRCH, a group gone
// already, is no matter.
func (r *Runner) killRun(pgid int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pgid == pgid {
		_ = r.kill(pgid)
	}
}

func (r *Runner) kill(pgid int) error {
	if r.killGroup != nil {
		return r.killGroup(pgid)
	}
	return killProcessGroup(pgid)
}

// Failures returns how many times each Reason occurred since the Runner
// was created, every Reason included.
func (r *Runner) Failures() map[Reason]uint64 {
	out := make(map[Reason]uint64, len(Reasons))
	for _, reason := range Reasons {
		out[reason] = r.failures[reasonIndex[reason]].Load()
	}
	return out
}

func (r *Runner) count(reason Reason) {
	if i, ok := reasonIndex[reason]; ok {
		r.failures[i].Add(1)
	}
}

func (r *Runner) fail(err error) error {
	r.count(ReasonOf(err))
	return err
}

// Args returns the command line arguments of a run.
func (r *Runner) Args() []string {
	format := "csv,nounits"
	if r.NoHeader {
		format = "csv,noheader,nounits"
	}
	return []string{"--query-aip=" + strings.Join(r.fields(), ","), "--format=" + format}
}

func (r *Runner) fields() []string {
	if r.Fields == nil {
		return DefaultFields
	}
	return r.Fields
}

// Validate checks the Runner's field list, so that a bad configuration
// fails at start rather than at every scrape.
func (r *Runner) Validate() error {
	for _, f := range r.fields() {
		if !KnownField(f) {
			return fmt.Errorf("hl-smi field %q is not one this exporter reads", f)
		}
	}
	if !slices.Contains(r.fields(), "index") {
		return errors.New(`hl-smi field "index" is needed to tell devices apart`)
	}
	return checkFieldList(r.fields())
}

// Query runs hl-smi once for all devices and parses its output. It returns
// at ctx's deadline (the Runner's Timeout when ctx has none), after
// killing hl-smi's whole process group. A run that outlives the kill (a
// process stuck in the driver cannot die until the driver lets it) keeps
// the Runner busy until it exits, so hung runs never pile up.
//
// Devices are returned even when some cells were unreadable; those are in
// Device.Problems and counted here as ReasonBadValue.
func (r *Runner) Query(ctx context.Context) ([]Device, error) {
	if err := r.Validate(); err != nil {
		return nil, r.fail(&Error{Reason: ReasonMalformed, Err: err})
	}
	out, err := r.run(ctx)
	if err != nil {
		return nil, r.fail(err)
	}
	devices, err := Parse(out, r.fields(), !r.NoHeader)
	if err != nil {
		return nil, r.fail(err)
	}
	for _, d := range devices {
		for range d.Problems {
			r.count(ReasonBadValue)
		}
	}
	return devices, nil
}

func (r *Runner) run(ctx context.Context) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, &Error{Reason: ReasonTimeout, Detail: "no time left to run", Err: err}
	}
	r.mu.Lock()
	switch {
	case r.closed:
		r.mu.Unlock()
		return nil, &Error{Reason: ReasonStart, Detail: "the exporter is stopping"}
	case r.running:
		r.mu.Unlock()
		return nil, &Error{Reason: ReasonBusy, Detail: "the previous hl-smi run has not exited"}
	}
	r.running = true
	r.mu.Unlock()
	if _, ok := ctx.Deadline(); !ok {
		timeout := r.Timeout
		if timeout <= 0 {
			timeout = DefaultTimeout
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}

	path := r.Path
	if path == "" {
		path = DefaultPath
	}
	limit := r.MaxOutput
	if limit <= 0 {
		limit = DefaultMaxOutput
	}
	stdout := &limitedOutput{buf: boundedbuf.Buffer{Limit: limit, FailOnOverflow: true}, overflow: make(chan struct{})}
	stderr := &boundedbuf.Buffer{Limit: maxStderr}
	cmd := exec.Command(path, r.Args()...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if f := devNull(); f != nil {
		cmd.Stdin = f
	}
	cmd.WaitDelay = waitDelay
	// A group of its own, so that the kill at the deadline also reaches
	// whatever hl-smi started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		r.mu.Lock()
		r.running = false
		r.mu.Unlock()
		// execve answers ENOENT for a file that exists too, when its
		// interpreter (#! line, ELF loader) does not: that hl-smi is
		// there and broken, not missing.
		if _, statErr := os.Stat(path); errors.Is(err, exec.ErrNotFound) || (errors.Is(err, fs.ErrNotExist) && errors.Is(statErr, fs.ErrNotExist)) {
			return nil, &Error{Reason: ReasonMissingBinary, Detail: path, Err: err}
		}
		return nil, &Error{Reason: ReasonStart, Detail: path, Err: err}
	}
	pgid := cmd.Process.Pid
	r.mu.Lock()
	r.pgid = pgid
	closed := r.closed
	r.mu.Unlock()
	if closed { // Close came while it started: it saw no group to kill
		r.killRun(pgid)
	}

	done := make(chan error, 1)
	go func() {
		// hl-smi has exited but is not reaped yet, so its group's id
		// cannot be taken by another process: whatever it started and
		// left in its group (holding stdout open, so that Wait would
		// wait for it, or merely left running) is killed with it. Wait
		// reaps it, so no kill may reach that id after.
		if waitExited(pgid) == nil {
			r.mu.Lock()
			_ = r.kill(pgid)
			r.pgid = 0
			r.mu.Unlock()
		}
		err := cmd.Wait()
		r.mu.Lock()
		r.running, r.pgid = false, 0
		r.mu.Unlock()
		done <- err
	}()

	var err error
	select {
	case err = <-done:
	case <-stdout.overflow:
		// Killed at once: an hl-smi that writes on into the closed pipe
		// (SIGPIPE ignored) must not be held until the deadline.
		r.killRun(pgid)
		return nil, &Error{Reason: ReasonOutputTooLarge, Detail: fmt.Sprintf("more than %d bytes", limit)}
	case <-ctx.Done():
		select {
		case err = <-done: // exited at the same moment; its result stands
		default:
			r.killRun(pgid)
			return nil, &Error{Reason: ReasonTimeout, Detail: "killed at the deadline", Err: context.Cause(ctx)}
		}
	}
	out := stdout.buf.Bytes()
	if stdout.buf.Overflowed() {
		return nil, &Error{Reason: ReasonOutputTooLarge, Detail: fmt.Sprintf("more than %d bytes", limit)}
	}
	if errors.Is(err, exec.ErrWaitDelay) {
		// hl-smi exited 0, but something it started outside its group
		// (setsid) held stdout open past waitDelay. What hl-smi printed
		// stands if it is whole: a table ends with a newline.
		if len(out) > 0 && out[len(out)-1] == '\n' {
			return out, nil
		}
		return nil, &Error{Reason: ReasonMalformed, Detail: "output cut short: a process hl-smi started held it open after hl-smi exited", Err: err}
	}
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return nil, &Error{Reason: ReasonExit, Detail: excerpt(stderr.Bytes()), Err: err}
		}
		return nil, &Error{Reason: ReasonExit, Err: err}
	}
	return out, nil
}

// devNull is hl-smi's stdin, opened once: without a Stdin, os/exec opens
// /dev/null at every run. A child is given a copy of the descriptor, so
// one file serves every run.
var devNull = sync.OnceValue(func() *os.File {
	f, err := os.Open(os.DevNull)
	if err != nil {
		return nil // os/exec opens it, and fails, at each run
	}
	return f
})

// limitedOutput is hl-smi's stdout, kept up to its limit; overflow is
// closed at the first write past it.
type limitedOutput struct {
	buf      boundedbuf.Buffer
	overflow chan struct{}
	once     sync.Once
}

func (o *limitedOutput) Write(p []byte) (int, error) {
	n, err := o.buf.Write(p)
	if err != nil {
		o.once.Do(func() { close(o.overflow) })
	}
	return n, err
}

// ReadFrom is what os/exec's copy of hl-smi's stdout calls (io.Copy); see
// boundedbuf.Copy.
func (o *limitedOutput) ReadFrom(r io.Reader) (int64, error) { return boundedbuf.Copy(o, r) }

// waitExited blocks until process pid has exited, without reaping it
// (waitid(2) with WNOWAIT, as os/exec does before it reaps): until Wait
// reaps it, neither its pid nor its process group's id can be reused, so a
// kill of the group reaches only what it left behind.
func waitExited(pid int) error {
	const pPID = 1     // P_PID, <linux/wait.h>
	var info [128]byte // siginfo_t
	for {
		_, _, errno := syscall.Syscall6(syscall.SYS_WAITID, pPID, uintptr(pid), uintptr(unsafe.Pointer(&info[0])), syscall.WEXITED|syscall.WNOWAIT, 0, 0)
		if errno != syscall.EINTR {
			if errno != 0 {
				return errno
			}
			return nil
		}
	}
}

func killProcessGroup(pgid int) error { return syscall.Kill(-pgid, syscall.SIGKILL) }
