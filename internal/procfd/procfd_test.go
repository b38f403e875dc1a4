package procfd

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"
)

// fixture builds a procfs tree: each fd a symbolic link, as in procfs.
func fixture(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	link := func(pid, fd, target string) {
		t.Helper()
		dir := filepath.Join(root, pid, "fd")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(dir, fd)); err != nil {
			t.Fatal(err)
		}
	}
	link("1", "10", "/dev/dri/renderD128")
	link("1", "2", "/dev/dri/card0")
	link("1", "0", "/dev/null")
	link("2", "0", "socket:[99]")
	link("30", "7", "/dev/dri/renderD129")
	link("self", "3", "/dev/dri/renderD128") // not a PID
	link("007", "3", "/dev/dri/renderD128")  // not how procfs names PID 7
	// A kernel thread: an empty fd directory.
	if err := os.MkdirAll(filepath.Join(root, "4", "fd"), 0o755); err != nil {
		t.Fatal(err)
	}
	// An exited process whose directory is still listed: no fd directory.
	if err := os.MkdirAll(filepath.Join(root, "5"), 0o755); err != nil {
		t.Fatal(err)
	}
	return root
}

func isDRI(target []byte) bool { return bytes.HasPrefix(target, []byte("/dev/dri/")) }

func TestScan(t *testing.T) {
	root := fixture(t)
	got, errs, err := Scanner{Root: root}.Scan(context.Background(), isDRI)
	if err != nil || len(errs) != 0 {
		t.Fatalf("err %v, errs %v", err, errs)
	}
	// Sorted by PID, fds by number (2 before 10, unlike their names).
	want := []Holder{
		{PID: 1, FDs: []FD{{2, "/dev/dri/card0"}, {10, "/dev/dri/renderD128"}}},
		{PID: 30, FDs: []FD{{7, "/dev/dri/renderD129"}}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %v\nwant %v", got, want)
	}
}

func TestScanProcessVanishes(t *testing.T) {
	root := fixture(t)
	// The root is listed in one getdents64 call, before any process is
	// read: a process removed once the scan has started is still listed.
	gone := false
	match := func(target []byte) bool {
		if !gone {
			gone = true
			for _, pid := range []string{"1", "2", "30"} {
				if err := os.RemoveAll(filepath.Join(root, pid)); err != nil {
					t.Fatal(err)
				}
			}
		}
		return isDRI(target)
	}
	got, errs, err := Scanner{Root: root}.Scan(context.Background(), match)
	if err != nil || len(errs) != 0 {
		t.Fatalf("err %v, errs %v", err, errs)
	}
	// The first process read keeps what its open directory still gives
	// (procfs would give nothing more either); the others are skipped.
	if len(got) > 1 {
		t.Errorf("holders after the processes exited: %v", got)
	}
}

func TestScanUnreadableProcess(t *testing.T) {
	root := fixture(t)
	// A fd "directory" that is a file: ENOTDIR, neither gone nor fatal.
	if err := os.MkdirAll(filepath.Join(root, "40"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "40", "fd"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	wantErrs := 1
	// EACCES: not checked as root, who can list it anyway.
	if os.Geteuid() != 0 {
		if err := os.MkdirAll(filepath.Join(root, "41", "fd"), 0o000); err != nil {
			t.Fatal(err)
		}
		wantErrs = 2
	}
	got, errs, err := Scanner{Root: root}.Scan(context.Background(), isDRI)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Errorf("holders %v, want 1 and 30", got)
	}
	if len(errs) != wantErrs || errs[0].PID != 40 || !errors.Is(errs[0], syscall.ENOTDIR) || Gone(errs[0]) {
		t.Errorf("errors %v", errs)
	}
	if wantErrs == 2 && (errs[1].PID != 41 || !errors.Is(errs[1], os.ErrPermission)) {
		t.Errorf("errors %v", errs)
	}
}

func TestScanBoundsAndFailures(t *testing.T) {
	root := fixture(t)
	// One fd per process: 1's first fd in directory order may be any of
	// its three, so only the bound is checked.
	got, _, err := Scanner{Root: root, MaxFDs: 1}.Scan(context.Background(), isDRI)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range got {
		if len(h.FDs) != 1 {
			t.Errorf("pid %d: %d fds past the bound of 1", h.PID, len(h.FDs))
		}
	}
	// One entry of the root examined: at most one holder.
	if got, _, err := (Scanner{Root: root, MaxEntries: 1}).Scan(context.Background(), isDRI); err != nil || len(got) > 1 {
		t.Errorf("MaxEntries 1: %v, %v", got, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := (Scanner{Root: root}).Scan(ctx, isDRI); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled scan: %v", err)
	}
	if _, _, err := (Scanner{Root: filepath.Join(root, "missing")}).Scan(context.Background(), isDRI); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing root: %v", err)
	}
}

func TestProcess(t *testing.T) {
	root := fixture(t)
	s := Scanner{Root: root}
	fds, err := s.Process(30, isDRI)
	if err != nil || !reflect.DeepEqual(fds, []FD{{7, "/dev/dri/renderD129"}}) {
		t.Errorf("Process(30) = %v, %v", fds, err)
	}
	if fds, err := s.Process(5, isDRI); !Gone(err) || fds != nil {
		t.Errorf("Process(5) of an exited process = %v, %v", fds, err)
	}
	if _, err := s.Process(999, isDRI); !Gone(err) {
		t.Errorf("Process(999) = %v", err)
	}
}

func TestParsePID(t *testing.T) {
	for in, want := range map[string]int{"1": 1, "0": 0, "4194304": 4194304, "2147483647": 2147483647} {
		if v, ok := parsePID([]byte(in)); !ok || v != want {
			t.Errorf("%q: %d, %v", in, v, ok)
		}
	}
	for _, in := range []string{"", "01", "-1", "+1", "self", "1a", "2147483648", "99999999999"} {
		if v, ok := parsePID([]byte(in)); ok {
			t.Errorf("%q accepted as %d", in, v)
		}
	}
}

// BenchmarkScanProc scans this host's /proc for DRM nodes: the per-scrape
// cost on a node of this many processes, most holding none. Each fd costs a
// lookup of its magic link in procfs whatever it points to, so the cost
// follows the fds the node's processes hold: ns/fd is what the README's
// cost paragraph quotes. "busy" holds 10,000 more fds (/dev/null) in this
// process, as a server with many sockets would.
func BenchmarkScanProc(b *testing.B) {
	for _, extra := range []int{0, 10000} {
		name := "host"
		if extra > 0 {
			name = "busy"
		}
		b.Run(name, func(b *testing.B) {
			for range extra {
				f, err := os.Open(os.DevNull)
				if err != nil {
					b.Skipf("opening %d fds: %v", extra, err)
				}
				defer f.Close()
			}
			b.ReportAllocs()
			fds := 0
			for b.Loop() {
				fds = 0
				count := func(target []byte) bool {
					fds++
					return isDRI(target)
				}
				if _, _, err := (Scanner{}).Scan(context.Background(), count); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(fds), "fds/op")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(max(fds, 1)), "ns/fd")
		})
	}
}
