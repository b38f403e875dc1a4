package amd

import (
	"maps"
	"os"
	"path/filepath"
	"testing"
)

func TestKFDProcesses(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files []string // under the sysfs root; a trailing / is a directory
		known bool
		pids  []int
		err   bool
	}{
		{name: "no amdkfd", known: true},
		{name: "amdkfd without a proc directory", files: []string{"class/kfd/kfd/topology/generation_id"}},
		{name: "no KFD process", files: []string{"class/kfd/kfd/proc/"}, known: true},
		{
			name:  "two KFD processes and a stray entry",
			files: []string{"class/kfd/kfd/proc/200/pasid", "class/kfd/kfd/proc/4242/pasid", "class/kfd/kfd/proc/lost+found/"},
			known: true, pids: []int{200, 4242},
		},
		{name: "proc is not a directory", files: []string{"class/kfd/kfd/proc"}, err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for _, f := range tc.files {
				p := filepath.Join(root, f)
				if f[len(f)-1] == '/' {
					if err := os.MkdirAll(p, 0o755); err != nil {
						t.Fatal(err)
					}
					continue
				}
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte("1\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got := Reader{SysfsRoot: root}.KFDProcesses()
			if got.Known != tc.known || (got.Err != nil) != tc.err {
				t.Fatalf("known %v, err %v; want known %v, error %v", got.Known, got.Err, tc.known, tc.err)
			}
			want := map[int]bool{}
			for _, p := range tc.pids {
				want[p] = true
			}
			if len(got.PIDs) != len(want) || !maps.Equal(got.PIDs, want) {
				t.Errorf("PIDs %v, want %v", got.PIDs, want)
			}
			// Holds: a listed PID, or any PID when the list is unknown.
			if got.Holds(300) != !tc.known {
				t.Errorf("Holds(300) = %v with known %v", got.Holds(300), tc.known)
			}
			for _, p := range tc.pids {
				if !got.Holds(p) {
					t.Errorf("Holds(%d) = false", p)
				}
			}
		})
	}
}
