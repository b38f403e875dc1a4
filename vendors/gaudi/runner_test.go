package gaudi

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xpu-exporter/xpu_exporter/demo/hlsmisim"
	"github.com/xpu-exporter/xpu_exporter/vendors/reading"
)

// fakeHLSMI is the hl-smi stand-in (demo/hlsmi), built once for the tests.
var fakeHLSMI string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "hlsmi")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fakeHLSMI = filepath.Join(dir, "hl-smi")
	build := exec.Command("go", "build", "-o", fakeHLSMI, "../../demo/hlsmi")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the hl-smi stand-in:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// fake points the stand-in at a mode and a table, and returns the file in
// which it logs each start.
func fake(t *testing.T, mode, table string) (log string) {
	t.Helper()
	log = filepath.Join(t.TempDir(), "starts")
	t.Setenv("HLSMI_FAKE_MODE", mode)
	t.Setenv("HLSMI_FAKE_LOG", log)
	if table != "" {
		t.Setenv("HLSMI_FAKE_TABLE", filepath.Join(fixtures, table))
	}
	return log
}

// started returns the PIDs the stand-in logged under role ("start" or "child").
func started(t *testing.T, log, role string) []int {
	t.Helper()
	pids, err := hlsmisim.Started(log, role)
	if err != nil {
		t.Fatal(err)
	}
	return pids
}

// gone says whether pid has exited (a zombie waiting for a parent that
// does not reap it has exited too).
func gone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// State is the field after the parenthesised command name.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] == 'Z' || s[i+2] == 'X'
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestRunnerReadsAllDevicesInOneRun(t *testing.T) {
	for _, noHeader := range []bool{false, true} {
		t.Run(fmt.Sprintf("noheader=%v", noHeader), func(t *testing.T) {
			log := fake(t, "", "gaudi3-8x.csv")
			r := &Runner{Path: fakeHLSMI, NoHeader: noHeader}
			devices, err := r.Query(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if len(devices) != 8 {
				t.Fatalf("%d devices, want 8", len(devices))
			}
			// 120000 MiB × 1048576 = 125829120000 bytes on device 1.
			if d := devices[1]; d.MemoryUsed != reading.Some(uint64(125829120000)) || d.ModuleID != reading.Some(3) {
				t.Errorf("device 1 %+v", d)
			}
			if n := len(started(t, log, "start")); n != 1 {
				t.Errorf("%d runs, want one for all devices", n)
			}
			for reason, n := range r.Failures() {
				if n != 0 {
					t.Errorf("failure %s counted %d times", reason, n)
				}
			}
		})
	}
}

func TestRunnerFailures(t *testing.T) {
	notExecutable := filepath.Join(t.TempDir(), "hl-smi")
	if err := os.WriteFile(notExecutable, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// execve(2) fails with ENOENT, as for a missing file: "the interpreter
	// of a script […] could not be found".
	noInterpreter := filepath.Join(t.TempDir(), "hl-smi")
	if err := os.WriteFile(noInterpreter, []byte("#!/nonexistent/interpreter\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		runner *Runner
		mode   string
		table  string
		env    map[string]string
		reason Reason
		detail string
	}{
		{name: "missing binary", runner: &Runner{Path: filepath.Join(t.TempDir(), "hl-smi")}, reason: ReasonMissingBinary},
		{name: "not executable", runner: &Runner{Path: notExecutable}, reason: ReasonStart},
		{name: "interpreter missing", runner: &Runner{Path: noInterpreter}, reason: ReasonStart},
		{
			name: "non-zero exit", runner: &Runner{Path: fakeHLSMI}, mode: "exit",
			env:    map[string]string{"HLSMI_FAKE_EXIT": "3", "HLSMI_FAKE_STDERR": "habanalabs driver is not loaded"},
			reason: ReasonExit, detail: "habanalabs driver is not loaded",
		},
		{name: "output too large", runner: &Runner{Path: fakeHLSMI, MaxOutput: 4096}, mode: "flood", reason: ReasonOutputTooLarge},
		// One that ignores SIGPIPE and EPIPE would write on into the
		// closed pipe until the deadline (5 s here): killed at the limit.
		{name: "output too large, writing on", runner: &Runner{Path: fakeHLSMI, MaxOutput: 4096}, mode: "flood-ignore-epipe", reason: ReasonOutputTooLarge},
		{name: "not UTF-8", runner: &Runner{Path: fakeHLSMI, Fields: []string{"index", "name"}}, mode: "nonutf8", reason: ReasonNonUTF8},
		{name: "column not asked for", runner: &Runner{Path: fakeHLSMI, Fields: caseFields}, mode: "raw", table: "cases/extra-column.csv", reason: ReasonExtraColumn},
		{name: "column missing", runner: &Runner{Path: fakeHLSMI, Fields: caseFields}, mode: "raw", table: "cases/missing-column.csv", reason: ReasonMissingColumn},
		{name: "field unknown to the table", runner: &Runner{Path: fakeHLSMI, Fields: caseFields}, table: "real/hl-1.18.0-hl205-8x.csv", reason: ReasonExit, detail: `invalid query type "index"`},
		{name: "field unknown to the reader", runner: &Runner{Path: fakeHLSMI, Fields: []string{"index", "fan.speed"}}, reason: ReasonMalformed},
		{name: "no index", runner: &Runner{Path: fakeHLSMI, Fields: []string{"name"}}, reason: ReasonMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake(t, tc.mode, tc.table)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			r := tc.runner
			_, err := r.Query(context.Background())
			if ReasonOf(err) != tc.reason {
				t.Fatalf("error %v, want reason %s", err, tc.reason)
			}
			if !strings.Contains(err.Error(), tc.detail) {
				t.Errorf("error %q does not say %q", err, tc.detail)
			}
			if n := r.Failures()[tc.reason]; n != 1 {
				t.Errorf("%s counted %d times, want 1", tc.reason, n)
			}
			waitFor(t, "the run to exit", func() bool { return !r.Busy() })
		})
	}
}

// TestRunnerKillsWhatHLSMILeftBehind: hl-smi prints its table and exits 0,
// leaving a child that holds stdout open. The table is read, and the child,
// in hl-smi's process group, is killed rather than left behind at every
// run. One that left the group (setsid) cannot be reached; the table still
// stands once Wait stops waiting for the pipe.
func TestRunnerKillsWhatHLSMILeftBehind(t *testing.T) {
	for _, tc := range []struct {
		mode       string
		childKills bool
	}{
		{"child-holds-stdout", true},
		{"child-holds-stdout-setsid", false},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			log := fake(t, tc.mode, "gaudi2-8x.csv")
			r := &Runner{Path: fakeHLSMI}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			devices, err := r.Query(ctx)
			children := started(t, log, "child")
			t.Cleanup(func() {
				for _, pid := range children {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			})
			if err != nil || len(devices) != 8 {
				t.Fatalf("%d devices, %v; want the 8 hl-smi printed before it exited 0", len(devices), err)
			}
			if len(children) != 1 {
				t.Fatalf("children %v, want 1", children)
			}
			if tc.childKills {
				waitFor(t, "hl-smi's child to be killed", func() bool { return gone(children[0]) })
			}
			for reason, n := range r.Failures() {
				if n != 0 {
					t.Errorf("%s counted %d times", reason, n)
				}
			}
		})
	}
}

// TestRunnerClose: at the exporter's exit, the run under way is killed with
// its group, and no run starts after.
func TestRunnerClose(t *testing.T) {
	log := fake(t, "hang-group", "")
	r := &Runner{Path: fakeHLSMI}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errs := make(chan error, 1)
	go func() {
		_, err := r.Query(ctx)
		errs <- err
	}()
	waitFor(t, "the stand-in and its child to log", func() bool {
		return len(started(t, log, "start")) == 1 && len(started(t, log, "child")) == 1
	})
	r.Close()
	select {
	case err := <-errs:
		if err == nil {
			t.Error("a run killed by Close succeeded")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the query did not return after Close")
	}
	for _, pid := range append(started(t, log, "start"), started(t, log, "child")...) {
		waitFor(t, fmt.Sprintf("pid %d to be killed", pid), func() bool { return gone(pid) })
	}
	if _, err := r.Query(ctx); err == nil {
		t.Error("a query after Close succeeded")
	}
	if n := len(started(t, log, "start")); n != 1 {
		t.Errorf("%d runs, want none after Close", n)
	}
}

func TestRunnerCountsBadValues(t *testing.T) {
	fake(t, "raw", "cases/bad-values.csv")
	r := &Runner{Path: fakeHLSMI, Fields: caseFields}
	devices, err := r.Query(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// Two unreadable cells (rows 0 and 1), three devices still served.
	if len(devices) != 3 || r.Failures()[ReasonBadValue] != 2 {
		t.Errorf("%d devices, %d bad values", len(devices), r.Failures()[ReasonBadValue])
	}
}

func TestRunnerKillsProcessGroupAtDeadline(t *testing.T) {
	log := fake(t, "hang-group", "")
	r := &Runner{Path: fakeHLSMI, Timeout: 300 * time.Millisecond}
	start := time.Now()
	_, err := r.Query(context.Background())
	if ReasonOf(err) != ReasonTimeout {
		t.Fatalf("error %v, want timeout", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("query returned after %v, want about 300ms", took)
	}
	waitFor(t, "the stand-in and its child to log", func() bool {
		return len(started(t, log, "start")) == 1 && len(started(t, log, "child")) == 1
	})
	for _, pid := range append(started(t, log, "start"), started(t, log, "child")...) {
		waitFor(t, fmt.Sprintf("pid %d to be killed", pid), func() bool { return gone(pid) })
	}
	// The caller's deadline bounds the run as well as Timeout does.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	waitFor(t, "the runner to be free", func() bool { return !r.Busy() })
	r.Timeout = time.Minute
	if _, err := r.Query(ctx); ReasonOf(err) != ReasonTimeout {
		t.Errorf("error %v, want timeout at the context's deadline", err)
	}
}

// TestRunnerTakesTheCallersDeadline: Timeout bounds only a run without a
// deadline; a scrape's longer deadline is hl-smi's, so a slow answer on a
// loaded node is read rather than killed as hung.
func TestRunnerTakesTheCallersDeadline(t *testing.T) {
	fake(t, "", "gaudi3-8x.csv")
	t.Setenv("HLSMI_FAKE_DELAY", "400ms")
	r := &Runner{Path: fakeHLSMI, Timeout: 100 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if devices, err := r.Query(ctx); err != nil || len(devices) != 8 {
		t.Errorf("400 ms answer under a minute's deadline: %d devices, %v", len(devices), err)
	}
	if _, err := r.Query(context.Background()); ReasonOf(err) != ReasonTimeout {
		t.Errorf("400 ms answer without a deadline: %v, want a timeout after Timeout", err)
	}
}

func TestRunnerNoSecondRunWhileHung(t *testing.T) {
	log := fake(t, "hang", "")
	r := &Runner{Path: fakeHLSMI, Timeout: 200 * time.Millisecond}
	// A process stuck in the driver outlives SIGKILL; play one by not killing.
	r.killGroup = func(int) error { return nil }

	if _, err := r.Query(context.Background()); ReasonOf(err) != ReasonTimeout {
		t.Fatalf("first query: %v, want timeout", err)
	}
	for range 3 {
		if _, err := r.Query(context.Background()); ReasonOf(err) != ReasonBusy {
			t.Fatalf("query while hung: %v, want busy", err)
		}
	}
	pids := started(t, log, "start")
	if len(pids) != 1 {
		t.Fatalf("%d runs started while the first hung, want 1", len(pids))
	}
	if got := r.Failures(); got[ReasonTimeout] != 1 || got[ReasonBusy] != 3 {
		t.Errorf("failures %v", got)
	}

	// Once the hung run exits, the next query runs again.
	if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HLSMI_FAKE_MODE", "")
	t.Setenv("HLSMI_FAKE_TABLE", filepath.Join(fixtures, "gaudi2-8x.csv"))
	r.Timeout = 5 * time.Second
	waitFor(t, "the hung run to be reaped", func() bool { return !r.Busy() })
	devices, err := r.Query(context.Background())
	if err != nil || len(devices) != 8 {
		t.Fatalf("after the hung run exited: %d devices, %v", len(devices), err)
	}
	if n := len(started(t, log, "start")); n != 2 {
		t.Errorf("%d runs, want 2", n)
	}
}

func TestRunnerArgs(t *testing.T) {
	r := &Runner{Fields: []string{"index", "power.draw"}}
	want := "--query-aip=index,power.draw --format=csv,nounits"
	if got := strings.Join(r.Args(), " "); got != want {
		t.Errorf("args %q, want %q", got, want)
	}
	r.NoHeader = true
	want = "--query-aip=index,power.draw --format=csv,noheader,nounits"
	if got := strings.Join(r.Args(), " "); got != want {
		t.Errorf("args %q, want %q", got, want)
	}
}

// BenchmarkQuery8 is one scrape's hl-smi run for an 8-device node, process
// start included, with the stand-in in place of hl-smi.
func BenchmarkQuery8(b *testing.B) {
	b.Setenv("HLSMI_FAKE_MODE", "")
	b.Setenv("HLSMI_FAKE_LOG", "")
	b.Setenv("HLSMI_FAKE_TABLE", filepath.Join(fixtures, "gaudi2-8x.csv"))
	r := &Runner{Path: fakeHLSMI}
	for b.Loop() {
		if _, err := r.Query(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}

// TestUnitsAfterValuesReadTheSame runs the stand-in without nounits, so that
// it prints "672 MiB" as hl-smi does, and checks that the parser reads the
// same devices as from the unit-less table.
func TestUnitsAfterValuesReadTheSame(t *testing.T) {
	fake(t, "", "gaudi3-8x.csv")
	cmd := exec.Command(fakeHLSMI, "--query-aip="+strings.Join(tableFields, ","), "--format=csv")
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "120000 MiB, 11072 MiB, 71 C, 811 W") {
		t.Fatalf("the stand-in printed no units:\n%s", out)
	}
	withUnits, err := Parse(out, tableFields, true)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := Parse(readFixture(t, "gaudi3-8x.csv"), tableFields, true)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(withUnits, plain) {
		t.Errorf("with units:\n%+v\nwithout:\n%+v", withUnits, plain)
	}
}
