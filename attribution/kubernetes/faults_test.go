package kubernetes

import (
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"

	"github.com/xpu-exporter/xpu_exporter/internal/syncbuf"
)

// A kubelet without the Pods API (its feature gate off) answers every
// watch at once with Unimplemented: one warning for the outage, the
// retries at debug level, not a warning every 30 s for ever.
func TestPodsAPIWatchRefusedWarnsOnce(t *testing.T) {
	dir, err := os.MkdirTemp("", "pods")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	socket := filepath.Join(dir, "pods-api.sock")
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer() // no service: every call is Unimplemented
	go srv.Serve(l)
	t.Cleanup(srv.Stop)

	var logs syncbuf.Buffer
	s, err := StartPodsAPISource(socket, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	// Retries after 0.5 s, then 1 s: three failed watches in about 1.5 s.
	eventually(t, "three failed watches", func() bool { return strings.Count(logs.String(), "Pod metadata watch failed") >= 3 })
	out := logs.String()
	if n := strings.Count(out, "level=WARN"); n != 1 {
		t.Errorf("%d warnings for one outage, want 1:\n%s", n, out)
	}
	if !strings.Contains(out, "Unimplemented") {
		t.Errorf("the warning does not say why:\n%s", out)
	}
	if s.Healthy() == nil {
		t.Error("healthy while every watch is refused")
	}
}
