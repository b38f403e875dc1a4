package amd

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/xpu-exporter/xpu_exporter/internal/procfd"
)

func TestDRMHolders(t *testing.T) {
	// 100 and 101 hold renderD128/136; 102 holds renderD140 (an i915
	// client: still a render node, its fdinfo tells the driver). 100's fd
	// 0 (/dev/null) is not a DRM node.
	got, errs, err := DRMHolders(context.Background(), fixtureProc)
	want := []procfd.Holder{
		{PID: 100, FDs: []procfd.FD{{Num: 5, Target: "/dev/dri/renderD128"}, {Num: 6, Target: "/dev/dri/renderD128"}}},
		{PID: 101, FDs: []procfd.FD{{Num: 5, Target: "/dev/dri/renderD128"}, {Num: 7, Target: "/dev/dri/renderD136"}}},
		{PID: 102, FDs: []procfd.FD{{Num: 4, Target: "/dev/dri/renderD140"}}},
	}
	if err != nil || len(errs) != 0 || !reflect.DeepEqual(got, want) {
		t.Errorf("DRMHolders = %v, %v, %v", got, errs, err)
	}
}

// A walk past the deadline says so rather than returning the holders it
// reached: the split would miss the processes it did not.
func TestDRMHoldersDeadline(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	got, errs, err := DRMHolders(ctx, fixtureProc)
	if !errors.Is(err, context.Canceled) || got != nil || errs != nil {
		t.Errorf("DRMHolders after the deadline = %v, %v, %v; want context.Canceled alone", got, errs, err)
	}
}

func TestDRMHoldersOddTree(t *testing.T) {
	root := t.TempDir()
	mk := func(pid, fd, target string) {
		dir := filepath.Join(root, pid, "fd")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if target != "" {
			if err := os.Symlink(target, filepath.Join(dir, fd)); err != nil {
				t.Fatal(err)
			}
		}
	}
	mk("9", "3", "/dev/dri/renderD129")
	mk("9", "4", "/dev/dri/card1")         // listed with the holder's DRM fds
	mk("10", "1", "/dev/dri/card1")        // a primary node alone: its fdinfo has clients too
	mk("11", "1", "socket:[123]")          // not a device
	mk("12", "", "")                       // no fds at all
	mk("self", "1", "/dev/dri/renderD128") // not a PID
	// A process whose fd directory cannot be listed is an error, not a
	// holder (not checked as root, who can list it anyway).
	if err := os.MkdirAll(filepath.Join(root, "13", "fd"), 0o000); err != nil {
		t.Fatal(err)
	}
	got, errs, err := DRMHolders(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	want := []procfd.Holder{
		{PID: 9, FDs: []procfd.FD{{Num: 3, Target: "/dev/dri/renderD129"}, {Num: 4, Target: "/dev/dri/card1"}}},
		{PID: 10, FDs: []procfd.FD{{Num: 1, Target: "/dev/dri/card1"}}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("DRMHolders = %v", got)
	}
	if os.Geteuid() != 0 && (len(errs) != 1 || errs[0].PID != 13) {
		t.Errorf("errors %v, want pid 13's", errs)
	}
	if _, errs, err := DRMHolders(context.Background(), filepath.Join(root, "missing")); len(errs) != 1 || err != nil {
		t.Errorf("a missing procfs root gives %v, %v", errs, err)
	}
}

// TestDRMHoldersFdinfoFallback: a process whose fd links cannot be read
// (another user's, without CAP_DAC_READ_SEARCH: EACCES; here an fd
// "directory" that is a file, ENOTDIR) is looked for in its fdinfo, which
// asks only for ptrace access. Its DRM fds are those whose fdinfo has a
// drm-driver key; their link target is unknown.
func TestDRMHoldersFdinfoFallback(t *testing.T) {
	root := t.TempDir()
	write := func(path, body string) {
		t.Helper()
		p := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const drm = "pos:\t0\nflags:\t02100002\ndrm-driver:\tamdgpu\ndrm-client-id:\t9\ndrm-pdev:\t0000:0c:00.0\n"
	// 40: links unreadable, fdinfo readable: fd 12 is a DRM client, 3 a
	// socket, 4 a DRM file of another driver (still a DRM fd: the driver
	// is ScanHolders' to judge).
	write("40/fd", "")
	write("40/fdinfo/3", "pos:\t0\nflags:\t02\nmnt_id:\t8\n")
	write("40/fdinfo/12", drm)
	write("40/fdinfo/4", "drm-driver:\ti915\n")
	// 41: neither readable.
	write("41/fd", "")
	write("41/fdinfo", "")
	// 42: links unreadable, a DRM fdinfo malformed: an error, not a
	// process without DRM files.
	write("42/fd", "")
	write("42/fdinfo/5", "drm-driver:\tamdgpu\ndrm-client-id:\tseven\n")
	// 43: links unreadable, no DRM fd.
	write("43/fd", "")
	write("43/fdinfo/0", "pos:\t0\n")
	got, errs, err := DRMHolders(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	want := []procfd.Holder{{PID: 40, FDs: []procfd.FD{{Num: 4}, {Num: 12}}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("holders %+v, want %+v", got, want)
	}
	var pids []int
	for _, e := range errs {
		pids = append(pids, e.PID)
	}
	slices.Sort(pids)
	if !reflect.DeepEqual(pids, []int{41, 42}) {
		t.Errorf("errors for %v (%v), want 41 and 42", pids, errs)
	}
}
