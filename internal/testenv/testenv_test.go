package testenv

import (
	"os"
	"path/filepath"
	"testing"
)

// recorder is a testing.TB that records how a test ended.
type recorder struct {
	testing.TB
	failed, skipped bool
	msg             string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed, r.msg = true, format
	panic(r)
}
func (r *recorder) Skipf(format string, args ...any) {
	r.skipped, r.msg = true, format
	panic(r)
}

// run calls f with a recorder, stopping where Fatalf or Skipf would stop
// the test's goroutine.
func run(f func(testing.TB)) (r *recorder) {
	r = &recorder{}
	defer func() {
		if p := recover(); p != nil && p != r {
			panic(p)
		}
	}()
	f(r)
	return r
}

func TestUnavailable(t *testing.T) {
	for _, tc := range []struct {
		ci                      string
		wantFailed, wantSkipped bool
	}{
		{"true", true, false},
		{"1", true, false},
		{"", false, true},
	} {
		t.Setenv("CI", tc.ci)
		r := run(func(tb testing.TB) { Unavailable(tb, "promtool not installed", "make test-deps") })
		if r.failed != tc.wantFailed || r.skipped != tc.wantSkipped {
			t.Errorf("CI=%q: failed %v skipped %v, want %v %v", tc.ci, r.failed, r.skipped, tc.wantFailed, tc.wantSkipped)
		}
	}
}

func TestLookPath(t *testing.T) {
	dir := t.TempDir()
	tool := filepath.Join(dir, "mytool")
	if err := os.WriteFile(tool, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "notexec"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", t.TempDir())
	t.Setenv("CI", "true")

	var got string
	if r := run(func(tb testing.TB) { got = LookPath(tb, "mytool", "make test-deps", dir) }); r.failed || r.skipped || got != tool {
		t.Errorf("LookPath in dirs = %q (failed %v, skipped %v), want %s", got, r.failed, r.skipped, tool)
	}
	t.Setenv("PATH", dir)
	if r := run(func(tb testing.TB) { got = LookPath(tb, "mytool", "make test-deps") }); r.failed || got != tool {
		t.Errorf("LookPath on PATH = %q, want %s", got, tool)
	}
	for _, name := range []string{"notexec", "absent"} {
		if r := run(func(tb testing.TB) { LookPath(tb, name, "make test-deps", dir) }); !r.failed {
			t.Errorf("%s: found or skipped under CI, want a failure", name)
		}
	}
}
