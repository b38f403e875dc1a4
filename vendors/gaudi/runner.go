package gaudi

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

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
	// exited, in case something it started still holds them.
	waitDelay = time.Second
)

// Runner runs hl-smi, one run at a time, and counts its failures. Its
// exported fields must be set before first use; it must not be copied
// after. It is safe for concurrent use: a query that arrives while the
// previous run has not exited fails with ReasonBusy and starts nothing.
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

	running  atomic.Bool
	failures [numReasons]atomic.Uint64

	// killGroup ends the run's process group at the deadline. Tests replace
	// it to play a process that does not die.
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
func (r *Runner) Busy() bool { return r.running.Load() }

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
	if !r.running.CompareAndSwap(false, true) {
		return nil, &Error{Reason: ReasonBusy, Detail: "the previous hl-smi run has not exited"}
	}
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
	stdout := &boundedbuf.Buffer{Limit: limit, FailOnOverflow: true}
	stderr := &boundedbuf.Buffer{Limit: maxStderr}
	cmd := exec.Command(path, r.Args()...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.WaitDelay = waitDelay
	// A group of its own, so that the kill at the deadline also reaches
	// whatever hl-smi started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		r.running.Store(false)
		// execve answers ENOENT for a file that exists too, when its
		// interpreter (#! line, ELF loader) does not: that hl-smi is
		// there and broken, not missing.
		if _, statErr := os.Stat(path); errors.Is(err, exec.ErrNotFound) || (errors.Is(err, fs.ErrNotExist) && errors.Is(statErr, fs.ErrNotExist)) {
			return nil, &Error{Reason: ReasonMissingBinary, Detail: path, Err: err}
		}
		return nil, &Error{Reason: ReasonStart, Detail: path, Err: err}
	}
	pgid := cmd.Process.Pid

	done := make(chan error, 1)
	go func() {
		err := cmd.Wait()
		r.running.Store(false)
		done <- err
	}()

	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		select {
		case err = <-done: // exited at the same moment; its result stands
		default:
			kill := r.killGroup
			if kill == nil {
				kill = killProcessGroup
			}
			_ = kill(pgid) // ESRCH only: the group is gone already
			return nil, &Error{Reason: ReasonTimeout, Detail: "killed at the deadline", Err: context.Cause(ctx)}
		}
	}
	if stdout.Overflowed() {
		return nil, &Error{Reason: ReasonOutputTooLarge, Detail: fmt.Sprintf("more than %d bytes", limit)}
	}
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return nil, &Error{Reason: ReasonExit, Detail: excerpt(stderr.Bytes()), Err: err}
		}
		return nil, &Error{Reason: ReasonExit, Err: err}
	}
	return stdout.Bytes(), nil
}

func killProcessGroup(pgid int) error { return syscall.Kill(-pgid, syscall.SIGKILL) }
