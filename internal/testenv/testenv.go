// Package testenv decides what a test does when the machine lacks something
// it needs from outside Go (promtool, chromium, helm, a Slurm cluster).
//
// Developers may not have every tool, so there such a test skips. CI has
// them all (make test runs make test-deps and make chart-tools first), so
// there a missing tool is a broken setup: the test fails rather than pass
// without testing anything. CI is recognised by the environment variable CI
// being non-empty, as GitHub Actions, GitLab CI and most others set it.
package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// InCI reports whether the tests run in CI.
func InCI() bool { return os.Getenv("CI") != "" }

// Unavailable ends a test that cannot run here: it fails in CI and skips
// elsewhere. missing says what is lacking, install how to get it (the make
// target that installs it).
func Unavailable(tb testing.TB, missing, install string) {
	tb.Helper()
	if InCI() {
		tb.Fatalf("%s: CI is set, so this fails instead of skipping (%s)", missing, install)
	}
	tb.Skipf("%s (%s)", missing, install)
}

// LookPath returns the path of the program name, searched on PATH and then
// in dirs (daemons live in /usr/sbin, which a non-login PATH may lack), or
// ends the test through Unavailable.
func LookPath(tb testing.TB, name, install string, dirs ...string) string {
	tb.Helper()
	if p, ok := Find(name, dirs...); ok {
		return p
	}
	Unavailable(tb, name+" not installed", install)
	return ""
}

// Find returns the path of the program name, searched on PATH and then in
// dirs.
func Find(name string, dirs ...string) (string, bool) {
	if p, err := exec.LookPath(name); err == nil {
		return p, true
	}
	for _, dir := range dirs {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, true
		}
	}
	return "", false
}
