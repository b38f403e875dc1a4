package kubernetes

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/xpu-exporter/xpu_exporter/attribution/kubernetes/kubelettest"
)

// A method the kubelet does not serve (an older kubelet's
// GetAllocatableResources) is answered with a status alone, in the
// headers (gRPC's Trailers-Only): its code comes back, and the
// connection serves the next call.
func TestUnaryStatusOnly(t *testing.T) {
	k := kubelettest.Start(t, bigNode(2, 1), kubelettest.WithoutPodsAPI())
	c := dialFake(t, k)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	u := &unaryCall{method: "/v1.PodResourcesLister/NoSuchMethod"}
	c.rpc.calls(ctx, u)
	if status.Code(u.err) != codes.Unimplemented {
		t.Fatalf("unknown method: %v, want Unimplemented", u.err)
	}
	conn := c.rpc.conn
	if pods, err := c.List(context.Background()); err != nil || len(pods) != 2 {
		t.Fatalf("List after it: %d pods, %v", len(pods), err)
	}
	if c.rpc.conn != conn || conn == nil {
		t.Error("the connection was not kept after a status-only answer")
	}
}

// What answers on the socket is not a gRPC server, or answers nothing: a
// call fails with a status, within its deadline, and never hangs.
func TestUnaryNotGRPC(t *testing.T) {
	for _, tc := range []struct {
		name  string
		serve func(net.Conn)
		want  codes.Code
	}{
		{"HTTP/1", func(c net.Conn) {
			_, _ = c.Write([]byte("HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n"))
			c.Close()
		}, codes.Unavailable},
		{"closes at once", func(c net.Conn) { c.Close() }, codes.Unavailable},
		{"silent", func(net.Conn) {}, codes.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			socket := listenUnix(t, tc.serve)
			c, err := Dial(socket, WithCallTimeout(300*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			start := time.Now()
			_, err = c.List(context.Background())
			if got := status.Code(errors.Unwrap(err)); got != tc.want {
				t.Errorf("%v, want %v", err, tc.want)
			}
			if elapsed := time.Since(start); elapsed > 2*time.Second {
				t.Errorf("took %v", elapsed)
			}
		})
	}
}

// listenUnix serves each connection to a new unix socket with serve, in a
// goroutine of its own, until the test ends, and returns the socket's path.
func listenUnix(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "unary") // unix socket paths are short
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	socket := filepath.Join(dir, "s.sock")
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go serve(c)
		}
	}()
	return socket
}

// ListAllocatable asks both questions in one round trip and answers each
// as List and Allocatable would, unchanged answers as the same slices; a
// kubelet that cannot answer fails both, each with its own method named.
func TestListAllocatableInOneTrip(t *testing.T) {
	k := kubelettest.StartFile(t, filepath.Join(fixtureDir, "h100-node.yaml"))
	c := dialFake(t, k)
	ctx := context.Background()
	wantPods, err := dialFake(t, k).List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantDevs, err := dialFake(t, k).Allocatable(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pods, podsErr, devs, devsErr := c.ListAllocatable(ctx)
	if len(wantPods) == 0 || len(wantDevs) == 0 {
		t.Fatal("the fixture lists no pods or no allocatable devices: the test proves nothing")
	}
	if podsErr != nil || devsErr != nil || !reflect.DeepEqual(pods, wantPods) || !reflect.DeepEqual(devs, wantDevs) {
		t.Fatalf("ListAllocatable = %d pods (%v), %d resources (%v); want List's %d and Allocatable's %d", len(pods), podsErr, len(devs), devsErr, len(wantPods), len(wantDevs))
	}
	again, _, devsAgain, _ := c.ListAllocatable(ctx)
	if &again[0] != &pods[0] || &devsAgain[0] != &devs[0] {
		t.Error("the same answers again were decoded again")
	}
	k.Stop()
	_, podsErr, _, devsErr = c.ListAllocatable(ctx)
	if podsErr == nil || devsErr == nil || !strings.Contains(podsErr.Error(), "List on") || !strings.Contains(devsErr.Error(), "GetAllocatableResources on") {
		t.Errorf("kubelet stopped: %v; %v; want both failing, each naming its method", podsErr, devsErr)
	}
}

// A call whose deadline passes while it waits to be made again (the
// kubelet's socket not there) ends as DEADLINE_EXCEEDED, naming why it
// was being made again (review26 F7: it ended UNAVAILABLE).
func TestUnaryDeadlineBetweenAttempts(t *testing.T) {
	c, err := Dial(filepath.Join(t.TempDir(), "kubelet.sock"), WithCallTimeout(80*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_, err = c.List(context.Background())
	if got := status.Code(errors.Unwrap(err)); got != codes.DeadlineExceeded || !strings.Contains(err.Error(), "kubelet.sock") {
		t.Errorf("%v, want DeadlineExceeded naming the socket the last attempt could not reach", err)
	}
}
