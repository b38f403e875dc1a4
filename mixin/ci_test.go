package mixin_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// A test that needs promtool skips where it is not installed, but fails
// where CI is set: CI installs every tool the tests use (make test runs
// make test-deps first), so there a missing tool is a broken setup that a
// skip would hide. The test binary runs TestPromQLParses again with a PATH
// that has no promtool.
func TestPromtoolMissingFailsUnderCI(t *testing.T) {
	for _, tc := range []struct {
		ci       string
		wantFail bool
		want     string
	}{
		{ci: "true", wantFail: true, want: "make test-deps"},
		{ci: "", wantFail: false, want: "--- SKIP: TestPromQLParses"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestPromQLParses$", "-test.v")
		cmd.Env = append(os.Environ(), "PATH="+t.TempDir(), "CI="+tc.ci)
		out, err := cmd.CombinedOutput()
		if failed := err != nil; failed != tc.wantFail {
			t.Errorf("CI=%q: failed %v, want %v:\n%s", tc.ci, failed, tc.wantFail, out)
		}
		if !strings.Contains(string(out), tc.want) {
			t.Errorf("CI=%q: output lacks %q:\n%s", tc.ci, tc.want, out)
		}
	}
}
