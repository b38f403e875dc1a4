package attribution

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/xpu-exporter/xpu_exporter/attribution/kubernetes"
)

// A source that fails is logged when it starts failing and when it answers
// again, not at every scrape: three scrapes down, two up and one down again
// make three lines.
func TestResolveLogsSourceChangesOnce(t *testing.T) {
	var logs bytes.Buffer
	kubelet := &fakeKubelet{err: errors.New("connection refused")}
	r := New(Config{Kubelet: kubelet, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	devices := []Device{{UUID: gpuA, MIGIndex: -1, GRESIndex: -1}}
	for i, err := range []error{kubelet.err, kubelet.err, kubelet.err, nil, nil, errors.New("deadline exceeded")} {
		kubelet.err = err
		res := r.Resolve(context.Background(), devices)
		if len(res.Sources) != 1 || (res.Sources[0].Err == nil) != (err == nil) {
			t.Fatalf("scrape %d: sources %+v, want the kubelet failing with %v", i, res.Sources, err)
		}
	}
	wantLogLines(t, logs.String(),
		`level=WARN msg="attribution source failing; owners it tells are missing until it answers" source=kubelet err="connection refused"`,
		`level=INFO msg="attribution source answering again" source=kubelet`,
		`level=WARN msg="attribution source failing; owners it tells are missing until it answers" source=kubelet err="deadline exceeded"`,
	)
}

// TestSourceLateOnceIsNotLogged: the kubelet, answering, misses one
// scrape's deadline (a client asked for a millisecond; the gRPC status
// DeadlineExceeded) and answers the next: nothing is logged (probe H, PH4:
// failing and back). Late for a second or more, it is logged once, and
// back once; another failure is logged at once, and so is a deadline in
// a scrape whose time has not run out (the source's own timeout).
func TestSourceLateOnceIsNotLogged(t *testing.T) {
	var logs bytes.Buffer
	r := New(Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	late := fmt.Errorf("kubelet pod-resources List: %w", status.Error(codes.DeadlineExceeded, "context deadline exceeded"))
	for _, err := range []error{nil, late, nil, context.DeadlineExceeded, nil} {
		r.logChanges([]Source{{Name: SourceKubelet, Err: err}}, err != nil)
	}
	if logs.Len() != 0 {
		t.Errorf("late at one scrape in two, logged:\n%s", logs.String())
	}
	r.logChanges([]Source{{Name: SourceKubelet, Err: late}}, true)
	r.lateSince[SourceKubelet] = r.lateSince[SourceKubelet].Add(-2 * time.Second) // late since 2 s
	for _, err := range []error{late, late, nil, errors.New("connection refused")} {
		r.logChanges([]Source{{Name: SourceKubelet, Err: err}}, err != nil)
	}
	r.logChanges([]Source{{Name: SourceKubelet, Err: nil}}, false)
	r.logChanges([]Source{{Name: SourceKubelet, Err: context.DeadlineExceeded}}, false)
	wantLogLines(t, logs.String(),
		`level=WARN msg="attribution source failing; owners it tells are missing until it answers" source=kubelet err="kubelet pod-resources List: rpc error: code = DeadlineExceeded desc = context deadline exceeded"`,
		`level=INFO msg="attribution source answering again" source=kubelet`,
		`level=WARN msg="attribution source failing; owners it tells are missing until it answers" source=kubelet err="connection refused"`,
		`level=INFO msg="attribution source answering again" source=kubelet`,
		`level=WARN msg="attribution source failing; owners it tells are missing until it answers" source=kubelet err="context deadline exceeded"`,
	)
}

// A watch source that has not listed yet at the first scrape (the API
// server has not answered) and then fails names its failure's cause, once:
// logged as the failure, "not completed yet" hid the 403 of missing RBAC
// that followed, which no line ever named (probe23-k8sapi D1).
func TestLogChangesNamesTheCauseAfterPending(t *testing.T) {
	var logs bytes.Buffer
	r := New(Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	pending := fmt.Errorf("API server pod %w", kubernetes.ErrNotListedYet)
	forbidden := errors.New(`GET /api/v1/pods: 403 Forbidden: pods is forbidden`)
	for _, err := range []error{pending, pending, forbidden, forbidden, nil, pending} {
		r.logChanges([]Source{{Name: kubernetes.SourceAPIServer, Err: err}}, false)
	}
	wantLogLines(t, logs.String(),
		`level=INFO msg="attribution source has not listed yet; owners it tells are missing until it does" source=apiserver`,
		`level=WARN msg="attribution source failing; what it said last is used until it answers" source=apiserver err="GET /api/v1/pods: 403 Forbidden: pods is forbidden"`,
		`level=INFO msg="attribution source answering again" source=apiserver`,
		`level=INFO msg="attribution source has not listed yet; owners it tells are missing until it does" source=apiserver`,
	)
}

// /proc entries vanish while they are read: a process that exits between
// its cgroup and its status is left out (it is gone), the others are
// attributed, and procfs is not reported failing. Only when every GPU
// process is missing is procfs failing (the exporter cannot see the host's
// PIDs), once, until they are seen again.
func TestResolveProcEntriesVanishing(t *testing.T) {
	var logs bytes.Buffer
	reader := procfs(t, map[uint32]string{
		100: "/system.slice/ollama.service",
		101: "/system.slice/vllm.service",
	})
	r := New(Config{Procfs: reader, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	devices := []Device{{UUID: gpuA, MIGIndex: -1, GRESIndex: -1, PIDs: []uint32{100, 101}}}

	// PID 101 exits after its cgroup was read: status and comm are gone.
	gone := filepath.Join(reader.Root, "101")
	for _, name := range []string{"status", "comm"} {
		if err := os.Remove(filepath.Join(gone, name)); err != nil {
			t.Fatal(err)
		}
	}
	res := r.Resolve(context.Background(), devices)
	if len(res.Sources) != 1 || res.Sources[0].Err != nil {
		t.Fatalf("sources %+v, want procfs answering", res.Sources)
	}
	own := res.Devices[gpuA]
	if len(own.Claims) != 1 || own.Claims[0].Owner.Unit != "ollama.service" {
		t.Errorf("claims %+v, want ollama.service, the process still there", own.Claims)
	}
	if _, ok := own.Process[101]; ok {
		t.Errorf("the vanished PID 101 was attributed: %v", own.Process)
	}

	// Every process gone (a container without hostPID sees none).
	if err := os.RemoveAll(filepath.Join(reader.Root, "100")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(gone); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		// The previous scrape's processes are reused without a read;
		// new PIDs are what a fresh scrape would see.
		res = r.Resolve(context.Background(), []Device{{UUID: gpuA, MIGIndex: -1, GRESIndex: -1, PIDs: []uint32{200, 201}}})
		if res.Sources[0].Err == nil || !strings.Contains(res.Sources[0].Err.Error(), "hostPID") {
			t.Fatalf("sources %+v, want procfs failing with the hostPID hint", res.Sources)
		}
	}
	// The processes are seen again.
	fresh := procfs(t, map[uint32]string{200: "/system.slice/ollama.service"})
	if err := os.Rename(filepath.Join(fresh.Root, "200"), filepath.Join(reader.Root, "200")); err != nil {
		t.Fatal(err)
	}
	res = r.Resolve(context.Background(), []Device{{UUID: gpuA, MIGIndex: -1, GRESIndex: -1, PIDs: []uint32{200}}})
	if res.Sources[0].Err != nil || len(res.Devices[gpuA].Claims) != 1 {
		t.Fatalf("after recovery: sources %+v, claims %+v", res.Sources, res.Devices[gpuA].Claims)
	}
	if n := strings.Count(logs.String(), "source=procfs"); n != 2 || !strings.Contains(logs.String(), "answering again") {
		t.Errorf("want one failure and one recovery line for procfs, got:\n%s", logs.String())
	}
}

// A PID the driver lists read after read while procfs will not show it
// (procfs mounted with hidepid=2, a context the driver keeps after its
// process) is no exit: its device's process list is not whole (probe E
// PE1). The first read cannot tell it from a process that exited between
// the driver's list and procfs, and takes it as one; the second, with the
// PID still listed, does not. gpuA runs a.service (100) and the hidden 101;
// gpuB only the hidden 110; gpuC a.service (120) and c.service (121).
func TestResolvePIDProcfsWillNotShow(t *testing.T) {
	var logs bytes.Buffer
	reader := procfs(t, map[uint32]string{
		100: "/system.slice/a.service",
		120: "/system.slice/a.service",
		121: "/system.slice/c.service",
	})
	r := New(Config{Procfs: reader, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	listed := []Device{
		{UUID: gpuA, MIGIndex: -1, GRESIndex: -1, PIDs: []uint32{100, 101}},
		{UUID: gpuB, MIGIndex: -1, GRESIndex: -1, PIDs: []uint32{110}},
		{UUID: gpuC, MIGIndex: -1, GRESIndex: -1, PIDs: []uint32{120, 121}},
	}
	exited := []Device{
		{UUID: gpuA, MIGIndex: -1, GRESIndex: -1, PIDs: []uint32{100}},
		{UUID: gpuB, MIGIndex: -1, GRESIndex: -1},
		{UUID: gpuC, MIGIndex: -1, GRESIndex: -1, PIDs: []uint32{120, 121}},
	}
	// gpuC's two units share it: 1/2 each, at every read.
	sharedC := func(t *testing.T, res Result) {
		t.Helper()
		own := res.Devices[gpuC]
		if own.OwnersUnknown || len(own.Claims) != 2 || own.Claims[0].Share != 0.5 || own.Claims[1].Share != 0.5 {
			t.Errorf("gpuC: claims %+v (unknown %v), want a.service and c.service at 1/2 each", own.Claims, own.OwnersUnknown)
		}
	}
	// What a process that exited leaves: a.service, gpuA's one process
	// read, owns it whole; gpuB has no process, so no owner.
	asExited := func(t *testing.T, res Result) {
		t.Helper()
		if err := res.Sources[0].Err; err != nil {
			t.Errorf("procfs failing: %v", err)
		}
		if own := res.Devices[gpuA]; own.OwnersUnknown || len(own.Claims) != 1 || own.Claims[0].Owner.Unit != "a.service" || own.Claims[0].Share != 1 {
			t.Errorf("gpuA: claims %+v (unknown %v), want a.service alone at 1", own.Claims, own.OwnersUnknown)
		}
		if own := res.Devices[gpuB]; own.OwnersUnknown || len(own.Claims) != 0 {
			t.Errorf("gpuB: claims %+v (unknown %v), want none, known", own.Claims, own.OwnersUnknown)
		}
		sharedC(t, res)
	}
	// What a process procfs will not show leaves: gpuA's owners are
	// a.service and whoever runs 101, so none is served, and a.service
	// is not handed the device; gpuB's are unknown, not none.
	asHidden := func(t *testing.T, res Result) {
		t.Helper()
		if err := res.Sources[0].Err; err == nil || !strings.Contains(err.Error(), "hidepid") {
			t.Errorf("procfs error %v, want one naming hidepid", err)
		}
		own := res.Devices[gpuA]
		if !own.OwnersUnknown || len(own.Claims) != 0 || own.Allocated {
			t.Errorf("gpuA: claims %+v (unknown %v, allocated %v), want none, unknown", own.Claims, own.OwnersUnknown, own.Allocated)
		}
		if _, ok := own.Process[100]; ok || own.Strays[100].Unit != "a.service" {
			t.Errorf("gpuA: process 100 %v, stray %+v; want it out of the split, a.service's", own.Process, own.Strays[100])
		}
		if own := res.Devices[gpuB]; !own.OwnersUnknown || len(own.Claims) != 0 {
			t.Errorf("gpuB: claims %+v (unknown %v), want none, unknown", own.Claims, own.OwnersUnknown)
		}
		sharedC(t, res)
	}

	t.Run("first read", func(t *testing.T) { asExited(t, r.Resolve(context.Background(), listed)) })
	t.Run("listed again", func(t *testing.T) { asHidden(t, r.Resolve(context.Background(), listed)) })
	t.Run("and again", func(t *testing.T) { asHidden(t, r.Resolve(context.Background(), listed)) })
	t.Run("listed no more", func(t *testing.T) {
		asExited(t, r.Resolve(context.Background(), exited))
		if r.unshown != nil {
			t.Errorf("PIDs kept after the driver stopped listing them: %v", r.unshown)
		}
	})
	wantLogLines(t, logs.String(),
		`level=WARN msg="attribution source failing; owners it tells are missing until it answers" source=procfs err="procfs `+reader.Root+` does not show GPU process 101 (2 in all), which the GPU driver still lists: procfs is mounted with hidepid=2 or invisible (proc(5); its gid= option lets a group see every process), or the driver keeps a context whose process has ended"`,
		`level=INFO msg="attribution source answering again" source=procfs`,
	)
}

// A process that exits between the driver's list and procfs is missing at
// one read and listed no more at the next: an exit, as it always was. The
// PID is forgotten then, so that a process given it later and missing once
// is an exit too, not taken for one procfs will not show.
func TestResolvePIDMissingOnceIsAnExit(t *testing.T) {
	var logs bytes.Buffer
	r := New(Config{Procfs: procfs(t, map[uint32]string{100: "/system.slice/a.service"}), Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	withExit := []Device{{UUID: gpuA, MIGIndex: -1, GRESIndex: -1, PIDs: []uint32{100, 101}}}
	after := []Device{{UUID: gpuA, MIGIndex: -1, GRESIndex: -1, PIDs: []uint32{100}}}
	for i, devices := range [][]Device{withExit, after, withExit, after} {
		res := r.Resolve(context.Background(), devices)
		if err := res.Sources[0].Err; err != nil {
			t.Errorf("read %d: procfs failing: %v", i, err)
		}
		// a.service, the one process read, owns gpuA whole.
		if own := res.Devices[gpuA]; own.OwnersUnknown || len(own.Claims) != 1 || own.Claims[0].Owner.Unit != "a.service" || own.Claims[0].Share != 1 {
			t.Errorf("read %d: claims %+v (unknown %v), want a.service alone at 1", i, own.Claims, own.OwnersUnknown)
		}
	}
	if logs.Len() != 0 {
		t.Errorf("an exit was logged:\n%s", logs.String())
	}
}

// Reads that overlap (a /devices read beside a scrape) may share the
// driver's list of processes: the second to end does not confirm what the
// first found missing, a read begun after both have ended does.
func TestNoteUnshownOverlappingReads(t *testing.T) {
	r := New(Config{})
	r.round = 2 // read A has round 1, read B round 2, both begun
	if got := r.noteUnshown([]uint32{101}, 1); got != nil {
		t.Errorf("read A: %v confirmed, want none", got)
	}
	if got := r.noteUnshown([]uint32{101}, 2); got != nil {
		t.Errorf("read B, begun before A ended: %v confirmed, want none", got)
	}
	r.round = 3
	if got := r.noteUnshown([]uint32{101, 101}, 3); !slices.Equal(got, []uint32{101}) {
		t.Errorf("read C, begun after both: %v confirmed, want [101] (once, though on two devices)", got)
	}
}

// wantLogLines checks that logs has as many lines as want, each ending in
// the line of want at its place (the time and source attributes vary).
func wantLogLines(t *testing.T, logs string, want ...string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(logs), "\n")
	if len(lines) != len(want) {
		t.Fatalf("%d log lines, want %d:\n%s", len(lines), len(want), logs)
	}
	for i, w := range want {
		if !strings.HasSuffix(lines[i], w) {
			t.Errorf("log line %d = %q, want it to end in %q", i, lines[i], w)
		}
	}
}
