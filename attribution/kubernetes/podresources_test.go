package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/xpu-exporter/xpu_exporter/attribution/kubernetes/kubelettest"
)

const fixtureDir = "../../fixtures/kubelet"

func dialFake(t *testing.T, k *kubelettest.Server, opts ...Option) *Client {
	t.Helper()
	c, err := Dial(k.PodResourcesSocket(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// The demo node's fixture, end to end: pod-resources over a real socket,
// replica counting from the allocatable devices, normalisation.
func TestClientH100Fixture(t *testing.T) {
	k := kubelettest.StartFile(t, filepath.Join(fixtureDir, "h100-node.yaml"))
	c := dialFake(t, k)
	ctx := context.Background()

	pods, err := c.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != 11 {
		t.Errorf("List returned %d pods, want 11", len(pods))
	}
	allocatable, err := c.Allocatable(ctx)
	if err != nil {
		t.Fatal(err)
	}
	allocs, errs := Allocations(pods, allocatable, mustMatcher(t))
	if len(errs) != 0 {
		t.Fatalf("normalisation errors: %v", errs)
	}

	type owner struct{ pod, ctr string }
	got := map[string][]owner{}
	shares := map[string]float64{}
	for _, a := range allocs {
		got[a.Device.UUID] = append(got[a.Device.UUID], owner{a.Namespace + "/" + a.Pod, a.Container})
		s, ok := a.Share()
		if !ok {
			t.Errorf("%+v: unknown share", a)
		}
		shares[a.Namespace+"/"+a.Pod] += s
	}
	gpu := func(i int) string { return fmt.Sprintf("GPU-2b149611-0000-4000-8000-%012x", i) }
	mig := func(i int) string { return fmt.Sprintf("MIG-2b149611-0004-4000-8000-%012x", i) }
	want := map[string][]owner{
		gpu(0): {{"inference/llm-serve-7d9f8b6c5d-x2k4q", "vllm"}},
		gpu(1): {{"inference/llm-serve-7d9f8b6c5d-x2k4q", "vllm"}},
		gpu(2): {{"notebooks/jupyter-alice", "notebook"}, {"notebooks/jupyter-bob", "notebook"}, {"gpu-operator/gpu-health-probe-7xk2m", "probe"}},
		gpu(3): {{"search/embeddings-0", "tei"}},
		gpu(5): {{"batch/data-prep-x7k2p", "prep"}},
		gpu(6): {{"inference/llama-405b-0", "vllm-leader"}},
		mig(0): {{"ray/raycluster-llm-gpu-group-worker-q8n4d", "ray-worker"}},
		mig(1): {{"eval/nightly-eval-29480160-5sx8k", "eval"}},
		mig(2): {{"training/bert-finetune-worker-0", "pytorch"}},
	}
	if len(got) != len(want) {
		t.Errorf("devices held: %v, want %v", got, want)
	}
	for uuid, w := range want {
		if fmt.Sprint(got[uuid]) != fmt.Sprint(w) {
			t.Errorf("%s held by %v, want %v", uuid, got[uuid], w)
		}
	}
	// Four replicas advertised, three allocated: a quarter each.
	for _, p := range []string{"notebooks/jupyter-alice", "notebooks/jupyter-bob", "gpu-operator/gpu-health-probe-7xk2m"} {
		if shares[p] != 0.25 {
			t.Errorf("%s holds %v of GPU 2, want 0.25", p, shares[p])
		}
	}
	if shares["inference/llm-serve-7d9f8b6c5d-x2k4q"] != 2 {
		t.Errorf("llm-serve holds %v devices, want 2", shares["inference/llm-serve-7d9f8b6c5d-x2k4q"])
	}
}

func TestClientOtherVendorFixtures(t *testing.T) {
	tests := []struct {
		file    string
		want    map[string]float64 // device key → share
		unknown int                // IDs no collector's devices can be joined to
	}{
		{"amd-mi300x-node.yaml", map[string]float64{
			"amd/0000:0c:00.0": 1, "amd/0000:22:00.0": 1, "amd/0000:38:00.0": 0.5,
		}, 0},
		// The Gaudi plugin names devices by serial number: the container
		// holds two whole devices.
		{"gaudi2-node.yaml", map[string]float64{"habana/AM30012345": 1, "habana/AM30012346": 1}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			k := kubelettest.StartFile(t, filepath.Join(fixtureDir, tt.file))
			c := dialFake(t, k)
			pods, err := c.List(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			allocatable, err := c.Allocatable(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			allocs, errs := Allocations(pods, allocatable, mustMatcher(t))
			if len(errs) != tt.unknown {
				t.Fatalf("%d unknown IDs, want %d: %v", len(errs), tt.unknown, errs)
			}
			got := map[string]float64{}
			for _, a := range allocs {
				s, _ := a.Share()
				got[a.Device.Key()] += s
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("shares = %v, want %v", got, tt.want)
			}
		})
	}
}

// bigNode makes a node whose List response is about pods*perPod*50 bytes.
func bigNode(pods, idsPerContainer int) *kubelettest.Fixture {
	fx := &kubelettest.Fixture{Node: "big"}
	for i := range pods {
		var ids []string
		for j := range idsPerContainer {
			ids = append(ids, fmt.Sprintf("GPU-%08x-0000-4000-8000-%012x", i, j))
		}
		fx.Pods = append(fx.Pods, kubelettest.Pod{
			Namespace: fmt.Sprintf("team-%04d", i%100),
			Name:      fmt.Sprintf("worker-%06d-abcdefghij", i),
			UID:       fmt.Sprintf("00000000-0000-4000-8000-%012x", i),
			Containers: []kubelettest.Container{
				{Name: "main", Devices: []kubelettest.Devices{{Resource: "nvidia.com/gpu", IDs: ids}}},
				{Name: "sidecar"},
			},
		})
	}
	return fx
}

// 5,000 pods make a response well over gRPC's default 4 MiB limit and under
// MaxReceiveBytes: it must be read whole.
func TestClientLargeResponse(t *testing.T) {
	k := kubelettest.Start(t, bigNode(5000, 24), kubelettest.WithoutPodsAPI())
	// What is checked is the size, not the speed: under -race on a busy
	// two-core machine the fake kubelet takes seconds to encode it.
	c := dialFake(t, k, WithCallTimeout(2*time.Minute))
	pods, err := c.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != 5000 {
		t.Fatalf("got %d pods, want 5000", len(pods))
	}
	size := 0
	for _, p := range pods {
		size += len(p.Namespace) + len(p.Name)
		for _, ctr := range p.Containers {
			for _, d := range ctr.Devices {
				for _, id := range d.IDs {
					size += len(id)
				}
			}
		}
	}
	if size < 4<<20 || size > MaxReceiveBytes {
		t.Errorf("response carried %d bytes of names and IDs; the test needs 4 MiB to %d", size, MaxReceiveBytes)
	}
	last := pods[4999]
	if last.Name != "worker-004999-abcdefghij" || len(last.Containers) != 2 || len(last.Containers[0].Devices[0].IDs) != 24 {
		t.Errorf("last pod = %+v", last)
	}
}

// A response beyond MaxReceiveBytes is an error, not a crash, and does not
// break the connection for the calls after it.
func TestClientResponseTooLarge(t *testing.T) {
	k := kubelettest.Start(t, bigNode(15000, 32), kubelettest.WithoutPodsAPI())
	// What is checked is the size, not the speed: under -race on a busy
	// two-core machine the fake kubelet takes seconds to encode it.
	c := dialFake(t, k, WithCallTimeout(2*time.Minute))
	_, err := c.List(context.Background())
	if status.Code(errors.Unwrap(err)) != codes.ResourceExhausted {
		t.Fatalf("List error = %v, want ResourceExhausted", err)
	}
	if _, err := c.Allocatable(context.Background()); err != nil {
		t.Errorf("call after the oversized response: %v", err)
	}
}

func TestClientDeadlineWhenKubeletHangs(t *testing.T) {
	k := kubelettest.Start(t, bigNode(1, 1), kubelettest.WithoutPodsAPI())
	k.SetHang(true)

	t.Run("call timeout", func(t *testing.T) {
		c := dialFake(t, k, WithCallTimeout(200*time.Millisecond))
		start := time.Now()
		_, err := c.List(context.Background())
		elapsed := time.Since(start)
		if status.Code(errors.Unwrap(err)) != codes.DeadlineExceeded {
			t.Errorf("List error = %v, want DeadlineExceeded", err)
		}
		if elapsed < 200*time.Millisecond || elapsed > 2*time.Second {
			t.Errorf("List returned after %v, want about 200ms", elapsed)
		}
	})
	t.Run("caller's earlier deadline", func(t *testing.T) {
		c := dialFake(t, k, WithCallTimeout(time.Minute))
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := c.Allocatable(ctx)
		if status.Code(errors.Unwrap(err)) != codes.DeadlineExceeded {
			t.Errorf("Allocatable error = %v, want DeadlineExceeded", err)
		}
		if elapsed := time.Since(start); elapsed > 2*time.Second {
			t.Errorf("Allocatable returned after %v, want about 100ms", elapsed)
		}
	})
	k.SetHang(false)
	c := dialFake(t, k)
	if _, err := c.List(context.Background()); err != nil {
		t.Errorf("List after the kubelet recovered: %v", err)
	}
}

// The kubelet restarts: calls fail while it is away, quickly, and the same
// Client works as soon as it is back.
func TestClientKubeletRestart(t *testing.T) {
	k := kubelettest.Start(t, bigNode(3, 1), kubelettest.WithoutPodsAPI())
	c := dialFake(t, k)
	ctx := context.Background()
	if _, err := c.List(ctx); err != nil {
		t.Fatal(err)
	}

	k.Stop()
	for range 3 {
		start := time.Now()
		_, err := c.List(ctx)
		if err == nil {
			t.Fatal("List succeeded with the kubelet stopped")
		}
		if !strings.Contains(err.Error(), k.PodResourcesSocket()) {
			t.Errorf("error %q does not name the socket", err)
		}
		if elapsed := time.Since(start); elapsed > time.Second {
			t.Errorf("List with the kubelet stopped took %v", elapsed)
		}
	}

	if err := k.Restart(); err != nil {
		t.Fatal(err)
	}
	pods, err := c.List(ctx)
	if err != nil {
		t.Fatalf("first List after the kubelet restarted: %v", err)
	}
	if len(pods) != 3 {
		t.Errorf("got %d pods, want 3", len(pods))
	}

	// A restart between two calls, too quick for the client to have seen
	// the connection close.
	for range 5 {
		k.Stop()
		if err := k.Restart(); err != nil {
			t.Fatal(err)
		}
		if _, err := c.List(ctx); err != nil {
			t.Fatalf("List right after a quick kubelet restart: %v", err)
		}
	}
}

func TestClientNoKubelet(t *testing.T) {
	c, err := Dial(filepath.Join(t.TempDir(), "kubelet.sock"), WithCallTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	if _, err := c.List(context.Background()); err == nil {
		t.Fatal("List succeeded without a kubelet")
	}
	if elapsed := time.Since(start); elapsed > time.Second {
		t.Errorf("List without a kubelet took %v; it must fail fast, not wait for the call timeout", elapsed)
	}
	if _, err := Dial(""); err == nil {
		t.Error("Dial accepted an empty socket path")
	}
}

// The DRA node's fixture, end to end: DynamicResources over a real socket,
// devices identified through the CDI specs, shares of the shared claim.
func TestClientDRAFixture(t *testing.T) {
	k := kubelettest.StartFile(t, filepath.Join(fixtureDir, "a100-dra-node.yaml"))
	c := dialFake(t, k)
	pods, err := c.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var single ClaimDevice
	for _, p := range pods {
		if p.Name == "dra-single" {
			single = p.Containers[0].Claims[0]
		}
	}
	wantSingle := ClaimDevice{
		ClaimNamespace: "ml", ClaimName: "single-gpu-x7k2p", Driver: "gpu.nvidia.com", Pool: "a100-dra-node", Device: "gpu-1",
		CDIDevices: []string{"k8s.gpu.nvidia.com/claim=6c1f0d2e-4b8a-4e7c-9f3d-2a5b8c7e1d90-gpu-1"},
	}
	if fmt.Sprint(single) != fmt.Sprint(wantSingle) {
		t.Errorf("claim of ml/dra-single = %+v, want %+v", single, wantSingle)
	}

	idx, problems, err := (&CDISpecs{Dir: filepath.Join(cdiFixtureDir, "a100-dra-node"), ProcRoot: nvidiaProcfs(t)}).Load()
	if err != nil || len(problems) > 0 {
		t.Fatal(err, problems)
	}
	allocs, unresolved := ClaimAllocations(pods, idx, DefaultDRADrivers, nil)
	if len(unresolved) > 0 {
		t.Fatalf("unresolved: %+v", unresolved)
	}
	got := map[string]string{}
	for _, a := range allocs {
		share, ok := a.Share()
		got[a.Namespace+"/"+a.Pod] = fmt.Sprintf("%s %v %v", a.Device.ID, share, ok)
	}
	want := map[string]string{
		// One claim, one consumer: the whole GPU.
		"ml/dra-single": draGPUs[1].UUID + " 1 true",
		// ml/shared-gpu is used by two pods: 1/2 each.
		"ml/shared-a": draGPUs[2].UUID + " 0.5 true",
		"ml/shared-b": draGPUs[2].UUID + " 0.5 true",
		// The MIG instance, GPU instance 1 of minor 3, whole to its pod
		// (the MIG slice fraction is applied by the collector).
		"ml/mig-worker": draGPUs[3].UUID + "/gi1 1 true",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("allocations\n got %v\nwant %v", got, want)
	}
}

// Two claims on one device through consumable capacity: each got the
// capacity it asked for, which pod-resources does not tell, so the share is
// unknown rather than guessed as 1/2.
func TestClaimAllocationsConsumableCapacity(t *testing.T) {
	idx := CDIIndex{devices: map[string]DeviceRef{"v.com/c=a": {Vendor: VendorNVIDIA, ID: "GPU-x", UUID: "GPU-x"}}}
	claim := func(name, share string) ClaimDevice {
		return ClaimDevice{ClaimNamespace: "ns", ClaimName: name, Driver: "d", Pool: "p", Device: "gpu-0", ShareID: share, CDIDevices: []string{"v.com/c=a"}}
	}
	pods := []PodResources{
		{Namespace: "ns", Name: "a", Containers: []ContainerResources{{Name: "c", Claims: []ClaimDevice{claim("one", "s1")}}}},
		{Namespace: "ns", Name: "b", Containers: []ContainerResources{{Name: "c", Claims: []ClaimDevice{claim("two", "s2")}}}},
	}
	allocs, _ := ClaimAllocations(pods, idx, []string{"d"}, nil)
	if len(allocs) != 2 {
		t.Fatalf("got %d allocations", len(allocs))
	}
	for _, a := range allocs {
		if _, ok := a.Share(); ok {
			t.Errorf("%s: share known, want unknown", a.Pod)
		}
	}
}

// TestClientDecodesOnlyChangedAnswers: an answer that is the same bytes as
// the last one is not decoded again, and List returns the very slice it
// returned before; a changed answer is decoded, and a malformed one is an
// error that leaves the last good answer in place for when the kubelet
// sends it again.
func TestClientDecodesOnlyChangedAnswers(t *testing.T) {
	pod := func(name string) *podresourcesv1.PodResources {
		return &podresourcesv1.PodResources{Name: name, Namespace: "ns", Containers: []*podresourcesv1.ContainerResources{{
			Name:    "main",
			Devices: []*podresourcesv1.ContainerDevices{{ResourceName: "nvidia.com/gpu", DeviceIds: []string{"GPU-" + name}}},
		}}}
	}
	encode := func(pods ...*podresourcesv1.PodResources) []byte {
		b, err := proto.Marshal(&podresourcesv1.ListPodResourcesResponse{PodResources: pods})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	one, two := encode(pod("a")), encode(pod("a"), pod("b"))
	// Field 1 (pod_resources), length-delimited, says 5 bytes and has 1.
	malformed := []byte{0x0a, 0x05, 0x0a}

	answers := make(chan []byte, 1)
	socket := rawPodResourcesServer(t, answers)
	c, err := Dial(socket, WithCallTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	list := func(answer []byte) ([]PodResources, error) {
		t.Helper()
		answers <- answer
		return c.List(context.Background())
	}
	names := func(pods []PodResources) string {
		var s []string
		for _, p := range pods {
			s = append(s, p.Name+":"+strings.Join(p.Containers[0].Devices[0].IDs, ","))
		}
		return strings.Join(s, " ")
	}

	first, err := list(one)
	if err != nil || names(first) != "a:GPU-a" {
		t.Fatalf("first List = %q, %v; want a:GPU-a", names(first), err)
	}
	again, err := list(one)
	if err != nil || len(again) != 1 || &again[0] != &first[0] {
		t.Errorf("the same answer again was decoded again (or failed: %v)", err)
	}
	if _, err := list(malformed); err == nil || !strings.Contains(err.Error(), "decoding the answer") {
		t.Errorf("malformed answer: err = %v, want a decoding error", err)
	}
	back, err := list(one)
	if err != nil || names(back) != "a:GPU-a" {
		t.Errorf("after the malformed answer, List = %q, %v; want a:GPU-a", names(back), err)
	}
	changed, err := list(two)
	if err != nil || names(changed) != "a:GPU-a b:GPU-b" {
		t.Errorf("changed answer: List = %q, %v; want a:GPU-a b:GPU-b", names(changed), err)
	}

	// An answer past maxKeptAnswer is decoded each time, not kept with a
	// spare as large.
	var many []*podresourcesv1.PodResources
	for i := 0; i*len(one) <= maxKeptAnswer; i++ {
		many = append(many, pod(fmt.Sprintf("p%06d", i)))
	}
	big := encode(many...)
	for range 2 {
		pods, err := list(big)
		if err != nil || len(pods) != len(many) {
			t.Fatalf("big answer: %d pods, %v; want %d", len(pods), err, len(many))
		}
	}
	// And a malformed one as large: refused, and not kept as the spare.
	if _, err := list(append(big[:len(big):len(big)], malformed...)); err == nil {
		t.Error("a big malformed answer was decoded")
	}
	c.list.mu.Lock()
	kept := len(c.list.raw) + cap(c.list.spare)
	c.list.mu.Unlock()
	if kept != 0 {
		t.Errorf("%d bytes kept after answers of %d bytes, past the %d bound", kept, len(big), maxKeptAnswer)
	}
}

// rawPodResourcesServer serves the pod-resources List method on a unix
// socket, answering each call with the next bytes from answers as they
// are, well formed or not.
func rawPodResourcesServer(t *testing.T, answers <-chan []byte) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "raw") // unix socket paths are limited to 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	socket := filepath.Join(dir, "kubelet.sock")
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(grpc.ForceServerCodecV2(bytesCodec{}))
	s.RegisterService(&grpc.ServiceDesc{
		ServiceName: "v1.PodResourcesLister",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "List",
			Handler: func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
				var req rawAnswer
				if err := dec(&req); err != nil {
					return nil, err
				}
				return &rawAnswer{b: <-answers}, nil
			},
		}},
	}, struct{}{})
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
	return socket
}

// rawAnswer is an answer's wire bytes.
type rawAnswer struct{ b []byte }

// bytesCodec sends a rawAnswer's bytes as they are and hands a request
// over undecoded, as the codec of the content type "application/grpc"
// ("proto").
type bytesCodec struct{}

func (bytesCodec) Name() string { return "proto" }

func (bytesCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.(*rawAnswer).b)}, nil
}

func (bytesCodec) Unmarshal(data mem.BufferSlice, v any) error {
	v.(*rawAnswer).b = data.Materialize()
	return nil
}
