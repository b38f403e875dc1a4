package collector

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xpu-exporter/xpu_exporter/attribution"
	"github.com/xpu-exporter/xpu_exporter/attribution/kubernetes"
	"github.com/xpu-exporter/xpu_exporter/attribution/kubernetes/kubelettest"
	"github.com/xpu-exporter/xpu_exporter/demo"
)

// A kubelet is another process: what it spends answering the exporter's
// List and GetAllocatableResources (protobuf encoding, its gRPC server's
// buffers) is not the exporter's. In the benchmark's own process, the fake
// kubelet's CPU and allocations would be counted as the exporter's, so the
// shared-node benchmark runs it in a child process (this test binary, as
// for hl-smi) and reports its CPU apart, as kubelet-cpu-ns/op.

// fakeKubeletDirEnv and fakeKubeletScenarioEnv make this test binary a fake
// kubelet serving the scenario file's pods, its sockets in the directory.
const (
	fakeKubeletDirEnv      = "XPU_FAKE_KUBELET_DIR"
	fakeKubeletScenarioEnv = "XPU_FAKE_KUBELET_SCENARIO"
)

// serveFakeKubelet is the child's main: it says "ready" on stdout once its
// sockets listen, and serves until its stdin closes (the parent ended).
func serveFakeKubelet(dir, scenario string) int {
	y, err := os.ReadFile(scenario)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	s, err := demo.Parse(y)
	if err != nil || s.Kubernetes == nil {
		fmt.Fprintln(os.Stderr, "scenario without kubernetes:", err)
		return 2
	}
	srv, err := kubelettest.New(dir, s.Kubernetes)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer srv.Stop()
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// childKubelet is a fake kubelet in a process of its own.
type childKubelet struct {
	cmd *exec.Cmd
	dir string
}

// startChildKubelet serves the scenario's kubelet from a child process.
func startChildKubelet(tb testing.TB, scenarioYAML string) *childKubelet {
	tb.Helper()
	// Unix socket paths are short: not under t.TempDir's long names.
	dir, err := os.MkdirTemp("", "xpu-kubelet-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "scenario.yaml")
	if err := os.WriteFile(path, []byte(scenarioYAML), 0o644); err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(selfPath(tb))
	cmd.Env = append(os.Environ(), fakeKubeletDirEnv+"="+filepath.Join(dir, "kubelet"), fakeKubeletScenarioEnv+"="+path)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			tb.Errorf("fake kubelet: %v", err)
		}
	})
	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err == nil && line != "ready\n" {
			err = fmt.Errorf("said %q", line)
		}
		ready <- err
	}()
	select {
	case err := <-ready:
		if err != nil {
			tb.Fatalf("fake kubelet: %v", err)
		}
	case <-time.After(30 * time.Second):
		tb.Fatal("fake kubelet not ready in 30 s")
	}
	return &childKubelet{cmd: cmd, dir: filepath.Join(dir, "kubelet")}
}

// cpu is the child's user and system CPU time so far, from
// /proc/<pid>/stat's utime and stime (proc(5): fields 14 and 15, "measured
// in clock ticks (divide by sysconf(_SC_CLK_TCK))", which is 100 on Linux's
// architectures that Go builds for).
func (k *childKubelet) cpu(tb testing.TB) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", k.cmd.Process.Pid))
	if err != nil {
		tb.Fatal(err)
	}
	// The command name, field 2, is in parentheses and may hold spaces:
	// the fields after its closing one are counted from field 3.
	fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	var ticks int64
	for _, f := range fields[14-3 : 15-3+1] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			tb.Fatalf("/proc/%d/stat: %v", k.cmd.Process.Pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * (time.Second / 100)
}

// attributeFrom points cfg's Kubernetes sources at the child kubelet.
func (k *childKubelet) attributeFrom(tb testing.TB, cfg *attribution.Config) {
	tb.Helper()
	client, err := kubernetes.Dial(filepath.Join(k.dir, kubelettest.PodResourcesSocketPath))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { client.Close() })
	meta, err := kubernetes.StartPodsAPISource(filepath.Join(k.dir, kubelettest.PodsAPISocketPath), nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { meta.Close() })
	for deadline := time.Now().Add(10 * time.Second); meta.Healthy() != nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			tb.Fatalf("the child kubelet's Pods API: %v", meta.Healthy())
		}
	}
	cfg.Kubelet, cfg.Metadata = client, meta
}
