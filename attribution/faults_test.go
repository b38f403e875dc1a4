package attribution

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	want := []string{
		`level=WARN msg="attribution source failing; owners it tells are missing until it answers" source=kubelet err="connection refused"`,
		`level=INFO msg="attribution source answering again" source=kubelet`,
		`level=WARN msg="attribution source failing; owners it tells are missing until it answers" source=kubelet err="deadline exceeded"`,
	}
	if len(lines) != len(want) {
		t.Fatalf("%d log lines, want %d:\n%s", len(lines), len(want), logs.String())
	}
	for i, w := range want {
		if !strings.HasSuffix(lines[i], w) {
			t.Errorf("log line %d = %q, want it to end in %q", i, lines[i], w)
		}
	}
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
		r.logChanges([]Source{{Name: kubernetes.SourceAPIServer, Err: err}})
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	want := []string{
		`level=INFO msg="attribution source has not listed yet; owners it tells are missing until it does" source=apiserver`,
		`level=WARN msg="attribution source failing; what it said last is used until it answers" source=apiserver err="GET /api/v1/pods: 403 Forbidden: pods is forbidden"`,
		`level=INFO msg="attribution source answering again" source=apiserver`,
		`level=INFO msg="attribution source has not listed yet; owners it tells are missing until it does" source=apiserver`,
	}
	if len(lines) != len(want) {
		t.Fatalf("%d log lines, want %d:\n%s", len(lines), len(want), logs.String())
	}
	for i, w := range want {
		if !strings.HasSuffix(lines[i], w) {
			t.Errorf("log line %d = %q, want it to end in %q", i, lines[i], w)
		}
	}
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
