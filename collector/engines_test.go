package collector

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/xpu-exporter/xpu_exporter/attribution"
	"github.com/xpu-exporter/xpu_exporter/attribution/kubernetes"
	"github.com/xpu-exporter/xpu_exporter/demo"
	"github.com/xpu-exporter/xpu_exporter/engines"
	"github.com/xpu-exporter/xpu_exporter/internal/syncbuf"
)

// engineServer serves a recorded engine sample.
func engineServer(t *testing.T, fixture string) *httptest.Server {
	t.Helper()
	b, err := os.ReadFile("../fixtures/engines/" + fixture)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Write(b)
		w.Write([]byte("\n")) // some samples lack the final newline real engines send
	}))
	t.Cleanup(srv.Close)
	return srv
}

func setEngineFlags(t *testing.T, targets []string) {
	t.Helper()
	old := [4]any{*engineTargets, *engineMaxBytes, *engineParallel, *engineDiscover}
	*engineTargets, *engineMaxBytes, *engineParallel, *engineDiscover = targets, 1<<20, 4, true
	t.Cleanup(func() {
		*engineTargets, *engineMaxBytes, *engineParallel, *engineDiscover = old[0].([]string), old[1].(int64), old[2].(int), old[3].(bool)
	})
}

// setEngineConfig makes --engines.config a file of body for the test.
func setEngineConfig(t *testing.T, body string) {
	t.Helper()
	path := t.TempDir() + "/engines.yaml"
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	old := *engineConfig
	*engineConfig = path
	t.Cleanup(func() { *engineConfig = old })
}

type enginePods []kubernetes.PodMeta

func (enginePods) Name() string { return "fake" }
func (p enginePods) Pod(ns, name string) (kubernetes.PodMeta, bool) {
	for _, m := range p {
		if m.Namespace == ns && m.Name == name {
			return m, true
		}
	}
	return kubernetes.PodMeta{}, false
}
func (enginePods) PodByUID(string) (kubernetes.PodMeta, bool) { return kubernetes.PodMeta{}, false }
func (p enginePods) Pods() []kubernetes.PodMeta               { return p }
func (enginePods) Healthy() error                             { return nil }
func (enginePods) Close() error                               { return nil }

func TestEnginesStaticTargets(t *testing.T) {
	triton := engineServer(t, "triton-densenet-t4-datadog-fixture.prom")
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close() // connection refused from now on
	setEngineFlags(t, []string{"triton=" + triton.URL + "/metrics", "auto=" + down.URL + "/metrics"})
	out := scrapeText(t, newTestExporter(t, loadScenario(t, "lost"), map[string]bool{"nvidia": true, "engines": true}), 5*time.Second)
	if v := sample(t, out, "xpu_inference_up", `engine="triton"`); v != 1 {
		t.Errorf("triton up = %v", v)
	}
	if v := sample(t, out, "xpu_inference_up", `engine="auto"`); v != 0 {
		t.Errorf("an unreachable target is up: %v", v)
	}
	// densenet_onnx: 1327965 µs of request time over 3 successes.
	if !strings.Contains(out, `xpu_inference_request_duration_seconds_sum{engine="triton",model="densenet_onnx",model_version="1",target="`+triton.URL+`/metrics"} 1.327965`) {
		t.Errorf("Triton's µs counter is not in seconds:\n%s", grepLines(out, "xpu_inference_request_duration_seconds_sum"))
	}
	if !strings.Contains(out, `xpu_scrape_collector_success{collector="engines"} 1`) {
		t.Error("one unreachable engine must not fail the collector")
	}
}

// TestStallingEnginesLeaveSlotsToOthers: as many endpoints that accept and
// never answer as --engines.concurrency held every fetch slot until the
// deadline, and every engine after them was reported down at every scrape
// (probe J, PJ5). A target whose fetch took half the scrape's time waits
// for slots of its own from then on, and a new target waits for the quick
// ones: each scrape judges as many stalled targets as there are slots,
// so Triton among 24 of them and 4 slots is up from the eighth scrape at
// the latest (25 targets, 4 a scrape: 7 scrapes), and once up, stays up. The stalled
// ones are still asked, and down.
func TestStallingEnginesLeaveSlotsToOthers(t *testing.T) {
	triton := engineServer(t, "triton-densenet-t4-datadog-fixture.prom")
	release := make(chan struct{})
	stuck := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(stuck.Close)
	t.Cleanup(func() { close(release) }) // first: Close waits for the handlers
	// setEngineFlags' concurrency is 4. Triton is in the middle: the
	// fetches start in no set order, and the last target's often first.
	var targets []string
	for i := range 24 {
		if i == 12 {
			targets = append(targets, "triton="+triton.URL+"/metrics")
		}
		targets = append(targets, fmt.Sprintf("vllm=%s/metrics?i=%d", stuck.URL, i))
	}
	setEngineFlags(t, targets)
	e := newTestExporter(t, loadScenario(t, "lost"), map[string]bool{"engines": true})
	up := 0 // the first scrape Triton was up in
	for i := 1; i <= 10; i++ {
		out := scrapeText(t, e, 400*time.Millisecond)
		v := sample(t, out, "xpu_inference_up", `engine="triton"`)
		switch {
		case v == 1 && up == 0:
			up = i
		case v != 1 && (up > 0 || i >= 8):
			t.Errorf("scrape %d: Triton up = %v beside 24 stalled endpoints (up first at scrape %d)", i, v, up)
		}
		vllm := grepLines(out, `xpu_inference_up{engine="vllm"`)
		if n := strings.Count(vllm, "xpu_inference_up"); n != 24 {
			t.Errorf("scrape %d: %d stalled targets served, want 24:\n%s", i, n, vllm)
		}
		if strings.Contains(vllm, "} 1") {
			t.Errorf("scrape %d: a stalled target is up:\n%s", i, vllm)
		}
	}
}

// TestEngineRedirectsStayOnTheTarget: an engine's redirect is followed on
// its own host and port only. Followed anywhere, an annotated pod could
// make the exporter, often in the host's network, fetch node-local
// addresses for its tenant (probe K).
func TestEngineRedirectsStayOnTheTarget(t *testing.T) {
	body, err := os.ReadFile("../fixtures/engines/triton-densenet-t4-datadog-fixture.prom")
	if err != nil {
		t.Fatal(err)
	}
	var elsewhere atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		elsewhere.Add(1)
		w.Write(append(body, '\n'))
	}))
	t.Cleanup(other.Close)
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/metrics":
			http.Redirect(w, r, "/real", http.StatusFound)
		case "/real":
			w.Write(append(body, '\n'))
		case "/away":
			http.Redirect(w, r, other.URL+"/metrics", http.StatusFound)
		}
	}))
	t.Cleanup(engine.Close)
	setEngineFlags(t, []string{"triton=" + engine.URL + "/metrics", "triton=" + engine.URL + "/away"})
	out := scrapeText(t, newTestExporter(t, loadScenario(t, "lost"), map[string]bool{"engines": true}), 5*time.Second)
	if v := sample(t, out, "xpu_inference_up", `target="`+engine.URL+`/metrics"`); v != 1 {
		t.Errorf("redirected on its own host: up %v, want 1", v)
	}
	if v := sample(t, out, "xpu_inference_up", `target="`+engine.URL+`/away"`); v != 0 {
		t.Errorf("redirected to another host: up %v, want 0", v)
	}
	if n := elsewhere.Load(); n != 0 {
		t.Errorf("the other host was asked %d times", n)
	}
}

// vllmOnDemoPod serves a vLLM endpoint as the demo node's llm-serve pod's
// (which holds GPUs 0 and 1), found by its annotations.
func vllmOnDemoPod(t *testing.T) (*httptest.Server, enginePods) {
	t.Helper()
	vllm := engineServer(t, "vllm-0.10.0-v1-fragment-production-stack-issue617.prom")
	host, port, _ := net.SplitHostPort(strings.TrimPrefix(vllm.URL, "http://"))
	setEngineFlags(t, nil)
	return vllm, enginePods{{
		Namespace: "inference", Name: "llm-serve-7d9f8b6c5d-x2k4q", IP: host,
		Annotations: map[string]string{engineAnnotation: "vllm", portAnnotation: port},
	}}
}

func TestEnginesDiscoveredAndJoinedToPodGPUs(t *testing.T) {
	vllm, pods := vllmOnDemoPod(t)
	e := newAttributedExporterFor(t, demo.Default(), func(c *Config) { c.PodMetadata = pods })
	out := scrapeText(t, e, 10*time.Second)
	owner := []string{`engine="vllm"`, `namespace="inference"`, `pod="llm-serve-7d9f8b6c5d-x2k4q"`, `workload="llm-serve"`, `workload_kind="Deployment"`}
	sample(t, out, "xpu_inference_kv_cache_usage_ratio", append(owner, `model="zai-org/GLM-4.5"`)...)
	// Tensor-parallel over GPUs 0 and 1: the devices are named on the info
	// metric, not on every engine series.
	for _, gpu := range []string{`gpu="0"`, `gpu="1"`} {
		sample(t, out, "xpu_inference_device_info", append(owner, gpu)...)
	}
	if strings.Contains(grepLines(out, "xpu_inference_kv_cache_usage_ratio"), "gpu=") {
		t.Error("an engine on two GPUs has device labels on its series")
	}

	// The engine stops answering: it is down, and still runs on its pod's
	// GPUs, which the alert on it names (found by probing: the info metric
	// went with the endpoint, and the alert said "no single owner").
	vllm.Close()
	out = scrapeText(t, e, 10*time.Second)
	if v := sample(t, out, "xpu_inference_up", `engine="vllm"`); v != 0 {
		t.Fatalf("the closed endpoint is up: %v", v)
	}
	for _, gpu := range []string{`gpu="0"`, `gpu="1"`} {
		sample(t, out, "xpu_inference_device_info", append(owner, gpu)...)
	}
}

// TestRefusedPodAnnotationIsDown: a pod whose annotations give no endpoint
// (an engine name mistyped, auto without a port) is down, named by the
// pod as its target, with its GPUs and owner on the info metric the alert
// takes them from; told once. Found by probe D (PD7): one log line and no
// series, so a typo made the engine vanish with nothing to alert on.
func TestRefusedPodAnnotationIsDown(t *testing.T) {
	_, pods := vllmOnDemoPod(t)
	pods[0].Annotations[engineAnnotation] = "vlm"
	pods = append(pods, kubernetes.PodMeta{Namespace: "inference", Name: "router", IP: pods[0].IP,
		Annotations: map[string]string{engineAnnotation: "auto"}})
	var logs syncbuf.Buffer
	e := newAttributedExporterFor(t, demo.Default(), func(c *Config) {
		c.PodMetadata = pods
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	const target = `target="inference/llm-serve-7d9f8b6c5d-x2k4q"`
	for range 2 {
		out := scrapeText(t, e, 10*time.Second)
		if v := sample(t, out, "xpu_inference_up", `engine="vlm"`, target); v != 0 {
			t.Errorf("the mistyped pod: up %v, want 0", v)
		}
		if v := sample(t, out, "xpu_inference_up", `engine="auto"`, `target="inference/router"`); v != 0 {
			t.Errorf("the auto pod without a port: up %v, want 0", v)
		}
		for _, gpu := range []string{`gpu="0"`, `gpu="1"`} {
			sample(t, out, "xpu_inference_device_info", `engine="vlm"`, target, `namespace="inference"`, `pod="llm-serve-7d9f8b6c5d-x2k4q"`, `workload="llm-serve"`, gpu)
		}
		if strings.Contains(out, "xpu_inference_scrape_duration_seconds{") {
			t.Error("a scrape duration is served for targets never scraped")
		}
	}
	for _, want := range []string{`unknown inference engine \"vlm\"`, "auto needs " + portAnnotation} {
		if n := strings.Count(logs.String(), want); n != 1 {
			t.Errorf("%q logged %d times over two scrapes, want 1:\n%s", want, n, logs.String())
		}
	}
}

// TestEnginesOfAnotherVendorsPodLeftToItsExporter: the AMD DaemonSet's
// exporter on a node labelled for NVIDIA too (both DaemonSets enabled:
// --kubernetes.exporter-vendor=nvidia,amd) discovers the vLLM pod that
// holds NVIDIA GPUs, and leaves its engine to the NVIDIA exporter, which
// serves it (TestEnginesDiscoveredAndJoinedToPodGPUs): served by both, its
// token rates were doubled in the recording rules (probe15-chart D1).
func TestEnginesOfAnotherVendorsPodLeftToItsExporter(t *testing.T) {
	_, pods := vllmOnDemoPod(t)
	s := demo.Default()
	cfg, sim := simulatedAttribution(t, s)
	cfg.VendorExporters = []string{"nvidia", "amd"} // as the chart passes both DaemonSets
	e := newExporterWith(t, s, sim, attribution.New(cfg), map[string]bool{"amd": true, "attribution": true, "engines": true},
		func() time.Time { return testNow }, func(c *Config) { c.PodMetadata = pods })
	if out := scrapeText(t, e, 10*time.Second); strings.Contains(out, "xpu_inference_") {
		t.Errorf("the AMD exporter serves the NVIDIA pod's engine:\n%s", grepLines(out, "xpu_inference_"))
	}
}

// TestMixedVendorEngineNamesEachExportersDevices: on a node labelled for
// NVIDIA and AMD the chart runs an exporter per vendor. A pod holding an
// H100 and two MI300X serves one vLLM: the NVIDIA exporter serves the
// engine, and each exporter names the pod's devices it reads in
// xpu_inference_device_info, so that the engine's devices summed over
// the node's exporters are all three (1 + 2), not the H100 alone
// (probe18-multigpu D1: its cost per million tokens was 4 USD/h of
// 10 USD/h). The AMD exporter serves none of the engine's own series.
// An engine named "auto" is named by what it answers on both exporters.
func TestMixedVendorEngineNamesEachExportersDevices(t *testing.T) {
	for _, annotation := range []string{"vllm", "auto"} {
		t.Run(annotation, func(t *testing.T) {
			vllm := engineServer(t, "vllm-0.10.0-v1-fragment-production-stack-issue617.prom")
			host, port, _ := net.SplitHostPort(strings.TrimPrefix(vllm.URL, "http://"))
			setEngineFlags(t, nil)
			pods := enginePods{{Namespace: "hyb", Name: "hybrid-0", IP: host,
				Annotations: map[string]string{engineAnnotation: annotation, portAnnotation: port}}}
			s := loadScenario(t, "mixed-engine")
			out := map[string]string{}
			for _, vendor := range []string{"nvidia", "amd"} {
				cfg, sim := simulatedAttribution(t, s)
				cfg.VendorExporters = []string{"nvidia", "amd"}
				e := newExporterWith(t, s, sim, attribution.New(cfg), map[string]bool{vendor: true, "attribution": true, "engines": true},
					func() time.Time { return testNow }, func(c *Config) { c.PodMetadata = pods })
				out[vendor] = scrapeText(t, e, 10*time.Second)
			}
			owner := []string{`engine="vllm"`, `namespace="hyb"`, `pod="hybrid-0"`, `target="` + vllm.URL + `/metrics"`}
			sample(t, out["nvidia"], "xpu_inference_device_info", append(owner, `uuid="GPU-c0000000-0000-4000-8000-000000000000"`)...)
			// The MI300X at 0000:0c:00.0 and 0000:22:00.0, by their unique_id.
			for _, uuid := range []string{"dc29a200a0000001", "dc29a200a0000002"} {
				sample(t, out["amd"], "xpu_inference_device_info", append(owner, `uuid="`+uuid+`"`)...)
			}
			if n := strings.Count(grepLines(out["nvidia"]+"\n"+out["amd"], "xpu_inference_device_info"), "\n") + 1; n != 3 {
				t.Errorf("%d devices named for the engine, want 3:\n%s\n%s", n,
					grepLines(out["nvidia"], "xpu_inference_device_info"), grepLines(out["amd"], "xpu_inference_device_info"))
			}
			// The two exporters name the engine alike: its pod's, no
			// container (the one they see may differ).
			if got := grepLines(out["nvidia"]+"\n"+out["amd"], "xpu_inference_device_info"); strings.Contains(got, "container=") {
				t.Errorf("the engine of a split pod is named with a container:\n%s", got)
			}
			if v := sample(t, out["nvidia"], "xpu_inference_up", `engine="vllm"`); v != 1 {
				t.Errorf("the NVIDIA exporter's engine up = %v", v)
			}
			if got := grepLines(out["amd"], "xpu_inference_"); strings.Contains(strings.ReplaceAll(got, "xpu_inference_device_info", ""), "xpu_inference_") {
				t.Errorf("the AMD exporter serves the engine's own series too:\n%s", got)
			}
			// The engine runs on three GPUs, not on the one the NVIDIA
			// exporter reads: its series carry no device of their own.
			if got := grepLines(out["nvidia"], "xpu_inference_kv_cache_usage_ratio"); got == "" || strings.Contains(got, "uuid=") {
				t.Errorf("the engine's series name one device of three, or are missing:\n%s", got)
			}
		})
	}
}

// TestMixedVendorConfiguredEnginesServedOnce: on a node the chart splits
// between an NVIDIA and an AMD exporter, both given the same configured
// targets (its extraArgs go to every vendor's DaemonSet): a TGI of
// tgi.service, whose process runs on the AMD GPU, and an SGLang of no
// owner. Each is served by one exporter, the node's first vendor's, as the
// engine of a pod holding no device is: each served them, so that the
// recording rules counted their tokens once per exporter (probe22-mixed D1:
// 150 tokens/s for 50, a cost per million tokens 3 times too low). The AMD
// exporter names the GPU it reads tgi.service's process on, so that the
// engine's cost is that GPU's.
func TestMixedVendorConfiguredEnginesServedOnce(t *testing.T) {
	tgi := engineServer(t, "tgi-datadog-fixture.prom")
	sglang := engineServer(t, "sglang-v0.5.10.post1-datadog-fixture.prom")
	setEngineFlags(t, []string{"sglang=" + sglang.URL + "/metrics"})
	setEngineConfig(t, "targets:\n  - {engine: tgi, url: "+tgi.URL+"/metrics, unit: tgi.service}\n")
	s, err := demo.Parse([]byte(`node: split-node
devices:
  - {uuid: GPU-d1000000-0000-4000-8000-000000000000, model: NVIDIA H100 80GB HBM3, memory_total: 80GiB, power_limit_watts: 700,
     metrics: {utilization: 0.5, memory_used: 20GiB}, processes: [{pid: 4000, pod: ml/train, memory_used: 10GiB, utilization: 0.5}]}
  - {vendor: amd, model: AMD Instinct MI300X OAM, memory_total: 192GiB, power_limit_watts: 750, pci_bus_id: "0000:0c:00.0",
     processes: [{pid: 4100, unit: tgi.service, user: tgi, command: text-generation, memory_used: 30GiB, utilization: 0.3}]}
kubernetes:
  pods:
    - {namespace: ml, name: train, uid: d1000000-0000-4000-8000-0000000000a0, containers: [{name: main, devices: [{resource: nvidia.com/gpu, ids: [GPU-d1000000-0000-4000-8000-000000000000]}]}]}
  allocatable:
    - {resource: nvidia.com/gpu, ids: [GPU-d1000000-0000-4000-8000-000000000000]}
    - {resource: amd.com/gpu, ids: ["0000:0c:00.0"]}
`))
	if err != nil {
		t.Fatal(err)
	}
	// Then the kubelet stops (restarted in a node upgrade): the pods it
	// listed run on, none can start or stop without it, so each exporter
	// keeps to its share; both served every target while it was down
	// (review22 F4).
	up, down := map[string]string{}, map[string]string{}
	for _, vendor := range []string{"nvidia", "amd"} {
		cfg, sim := simulatedAttribution(t, s)
		cfg.VendorExporters = []string{"nvidia", "amd"}
		e := newExporterWith(t, s, sim, attribution.New(cfg), map[string]bool{vendor: true, "attribution": true, "engines": true},
			func() time.Time { return testNow }, func(*Config) {})
		up[vendor] = scrapeText(t, e, 10*time.Second)
		sim.Kubelet.Stop()
		down[vendor] = scrapeText(t, e, 10*time.Second)
	}
	for kubelet, out := range map[string]map[string]string{"up": up, "down": down} {
		t.Run("kubelet "+kubelet, func(t *testing.T) {
			for _, target := range []string{tgi.URL, sglang.URL} {
				tl := `target="` + target + `/metrics"`
				if v := sample(t, out["nvidia"], "xpu_inference_up", tl); v != 1 {
					t.Errorf("%s: the NVIDIA exporter's engine up = %v", target, v)
				}
				for _, l := range strings.Split(grepLines(out["amd"], "xpu_inference_"), "\n") {
					if strings.Contains(l, tl) && !strings.HasPrefix(l, "xpu_inference_device_info{") {
						t.Errorf("the AMD exporter serves %s too: %s", target, l)
					}
				}
			}
			sample(t, out["amd"], "xpu_inference_device_info", `target="`+tgi.URL+`/metrics"`, `unit="tgi.service"`, `gpu="0"`)
			if got := grepLines(out["amd"], "xpu_inference_device_info"); strings.Count(got, "\n") != 0 || got == "" {
				t.Errorf("the AMD exporter names other devices than the unit's GPU:\n%s", got)
			}
		})
	}
}

// TestConfiguredPodTargetOfAnotherNode: every node's exporter is given the
// same configured targets (the chart's extraArgs). One whose pod the
// node's pod metadata does not list is another node's engine, served by
// the exporter there: served here too, its tokens were counted once per
// node (review22 F5). Where no pod metadata is known, nothing says the pod
// is elsewhere, and the target is served.
func TestConfiguredPodTargetOfAnotherNode(t *testing.T) {
	here := engineServer(t, "tgi-datadog-fixture.prom")
	there := engineServer(t, "sglang-v0.5.10.post1-datadog-fixture.prom")
	setEngineFlags(t, nil)
	config := "targets:\n  - {engine: tgi, url: " + here.URL + "/metrics, pod: ml/serve}\n" +
		"  - {engine: sglang, url: " + there.URL + "/metrics, pod: ml/other-node}\n"
	setEngineConfig(t, config)
	s, err := demo.Parse([]byte(`node: f5-node
defaults: {model: NVIDIA H100 80GB HBM3, memory_total: 80GiB, metrics: {utilization: 0.5}}
devices:
  - {uuid: GPU-f5000000-0000-4000-8000-000000000000, processes: [{pid: 4000, pod: ml/serve, utilization: 0.5}]}
kubernetes:
  pods:
    - {namespace: ml, name: serve, uid: f5000000-0000-4000-8000-0000000000a0, containers: [{name: main, devices: [{resource: nvidia.com/gpu, ids: [GPU-f5000000-0000-4000-8000-000000000000]}]}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	hereUp := `target="` + here.URL + `/metrics"`
	thereUp := `target="` + there.URL + `/metrics"`
	t.Run("pod metadata", func(t *testing.T) {
		logs := &syncbuf.Buffer{}
		pods := enginePods{{Namespace: "ml", Name: "serve", UID: "f5000000-0000-4000-8000-0000000000a0"}}
		e := newAttributedExporterFor(t, s, func(c *Config) { c.PodMetadata, c.Logger = pods, slog.New(slog.NewTextHandler(logs, nil)) })
		var out string
		for range 2 {
			out = scrapeText(t, e, 10*time.Second)
		}
		sample(t, out, "xpu_inference_up", hereUp)
		sample(t, out, "xpu_inference_tokens_total", hereUp, `pod="serve"`, `type="generation"`)
		if got := grepLines(out, "xpu_inference_"); strings.Contains(got, thereUp) {
			t.Errorf("another node's engine served here:\n%s", got)
		}
		if n := strings.Count(logs.String(), "not on this node"); n != 1 {
			t.Errorf("%d lines say the target's pod is not on this node over two scrapes, want 1:\n%s", n, logs.String())
		}
	})
	t.Run("no pod metadata", func(t *testing.T) {
		out := scrapeText(t, newAttributedExporterFor(t, s), 10*time.Second)
		sample(t, out, "xpu_inference_up", hereUp)
		sample(t, out, "xpu_inference_up", thereUp)
	})
	// Pod metadata that lags the kubelet (a watch behind, a relist under
	// way) does not list ml/serve yet; its process holds this node's GPU,
	// so it is here, and served (review23 F4: no node served it).
	t.Run("pod metadata lagging", func(t *testing.T) {
		pods := enginePods{{Namespace: "ml", Name: "someone-else", UID: "f5000000-0000-4000-8000-0000000000a1"}}
		out := scrapeText(t, newAttributedExporterFor(t, s, func(c *Config) { c.PodMetadata = pods }), 10*time.Second)
		sample(t, out, "xpu_inference_tokens_total", hereUp, `pod="serve"`, `type="generation"`)
		if got := grepLines(out, "xpu_inference_"); strings.Contains(got, thereUp) {
			t.Errorf("another node's engine served here:\n%s", got)
		}
	})
}

// TestDevicelessEnginePodHasItsWorkload: pod ml/router serves a vLLM and
// holds no device (a router in front of the GPU pods). Its engine carries the
// workload its pod's metadata names, as every series of a pod holding a
// device does, so that per-workload engine views keep it (probe22-mixed D2:
// it had namespace and pod only).
func TestDevicelessEnginePodHasItsWorkload(t *testing.T) {
	vllm := engineServer(t, "vllm-0.10.0-v1-fragment-production-stack-issue617.prom")
	host, port, _ := net.SplitHostPort(strings.TrimPrefix(vllm.URL, "http://"))
	setEngineFlags(t, nil)
	pods := enginePods{{Namespace: "ml", Name: "router", UID: "d2000000-0000-4000-8000-0000000000a1", IP: host,
		Workload: "router", WorkloadKind: "StatefulSet",
		Annotations: map[string]string{engineAnnotation: "vllm", portAnnotation: port}}}
	s, err := demo.Parse([]byte(`node: d2-node
defaults: {model: NVIDIA H100 80GB HBM3, memory_total: 80GiB, metrics: {utilization: 0.5}}
devices:
  - {uuid: GPU-d2000000-0000-4000-8000-000000000000, processes: [{pid: 4000, pod: ml/serve, utilization: 0.5}]}
kubernetes:
  pods:
    - {namespace: ml, name: serve, uid: d2000000-0000-4000-8000-0000000000a0, containers: [{name: main, devices: [{resource: nvidia.com/gpu, ids: [GPU-d2000000-0000-4000-8000-000000000000]}]}]}
    - {namespace: ml, name: router, uid: d2000000-0000-4000-8000-0000000000a1, containers: [{name: main}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	out := scrapeText(t, newAttributedExporterFor(t, s, func(c *Config) { c.PodMetadata = pods }), 10*time.Second)
	sample(t, out, "xpu_inference_kv_cache_usage_ratio", `namespace="ml"`, `pod="router"`, `workload="router"`, `workload_kind="StatefulSet"`)
}

// TestMixedVendorAutoEngineReplaced: the pod's engine behind an "auto"
// target is replaced by another on the same endpoint (vLLM, then SGLang).
// The exporter that only names the pod's devices names them as the
// serving one does, where it kept the engine it first saw, so that one
// target had two engines (review19 R1).
func TestMixedVendorAutoEngineReplaced(t *testing.T) {
	var body atomic.Value
	read := func(name string) []byte {
		b, err := os.ReadFile("../fixtures/engines/" + name)
		if err != nil {
			t.Fatal(err)
		}
		return append(b, '\n')
	}
	body.Store(read("vllm-0.10.0-v1-fragment-production-stack-issue617.prom"))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write(body.Load().([]byte)) }))
	t.Cleanup(srv.Close)
	host, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	setEngineFlags(t, nil)
	pods := enginePods{{Namespace: "hyb", Name: "hybrid-0", IP: host,
		Annotations: map[string]string{engineAnnotation: "auto", portAnnotation: port}}}
	s := loadScenario(t, "mixed-engine")
	cfg, sim := simulatedAttribution(t, s)
	cfg.VendorExporters = []string{"nvidia", "amd"}
	amd := newExporterWith(t, s, sim, attribution.New(cfg), map[string]bool{"amd": true, "attribution": true, "engines": true},
		func() time.Time { return testNow }, func(c *Config) { c.PodMetadata = pods })
	sample(t, scrapeText(t, amd, 10*time.Second), "xpu_inference_device_info", `engine="vllm"`, `gpu="0"`)
	body.Store(read("sglang-v0.5.10.post1-datadog-fixture.prom"))
	out := scrapeText(t, amd, 10*time.Second)
	sample(t, out, "xpu_inference_device_info", `engine="sglang"`, `gpu="0"`)
	if strings.Contains(out, `engine="vllm"`) {
		t.Errorf("the replaced engine is still named:\n%s", grepLines(out, "xpu_inference_"))
	}
}

// TestEngineOfSeveralContainersIsThePods: container engine holds GPU 0
// and container side GPU 1 of one pod serving a vLLM. The engine is the
// pod's: its series and its devices carry the pod's labels and no
// container, where each device took the last container matched ("side"),
// and the per-vendor exporters of a pod split so named one engine with two
// owners, whose two costs failed the cost per million tokens rule
// (probe19-engines D1, D4). Each device's own series keep their container.
func TestEngineOfSeveralContainersIsThePods(t *testing.T) {
	vllm := engineServer(t, "vllm-0.10.0-v1-fragment-production-stack-issue617.prom")
	host, port, _ := net.SplitHostPort(strings.TrimPrefix(vllm.URL, "http://"))
	setEngineFlags(t, nil)
	pods := enginePods{{Namespace: "inf", Name: "two", IP: host,
		Annotations: map[string]string{engineAnnotation: "vllm", portAnnotation: port}}}
	s, err := demo.Parse([]byte(`node: two-node
defaults: {model: NVIDIA H100 80GB HBM3, memory_total: 80GiB, metrics: {utilization: 0.5}}
devices:
  - {uuid: GPU-e0000000-0000-4000-8000-000000000000, processes: [{pid: 100, pod: inf/two, container: engine, utilization: 0.4}]}
  - {uuid: GPU-e0000000-0000-4000-8000-000000000001, processes: [{pid: 101, pod: inf/two, container: side, utilization: 0.2}]}
kubernetes:
  pods:
    - namespace: inf
      name: two
      uid: e0000000-0000-4000-8000-0000000000a0
      containers:
        - {name: engine, devices: [{resource: nvidia.com/gpu, ids: [GPU-e0000000-0000-4000-8000-000000000000]}]}
        - {name: side, devices: [{resource: nvidia.com/gpu, ids: [GPU-e0000000-0000-4000-8000-000000000001]}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	out := scrapeText(t, newAttributedExporterFor(t, s, func(c *Config) { c.PodMetadata = pods }), 10*time.Second)
	for _, gpu := range []string{`gpu="0"`, `gpu="1"`} {
		sample(t, out, "xpu_inference_device_info", `namespace="inf"`, `pod="two"`, gpu)
	}
	if got := grepLines(out, "xpu_inference_"); strings.Contains(got, "container=") {
		t.Errorf("the engine of two containers is named with one of them:\n%s", got)
	}
	sample(t, out, "xpu_workload_allocated_devices", `container="engine"`, `gpu="0"`)
	sample(t, out, "xpu_workload_allocated_devices", `container="side"`, `gpu="1"`)
}

func grepLines(text, prefix string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func TestEnginesConfigFile(t *testing.T) {
	setEngineFlags(t, nil)
	dir := t.TempDir()
	for body, want := range map[string]string{
		"targets:\n  - {engine: vllm, url: http://127.0.0.1:8000/metrics, unit: vllm.service}\n": "",
		"targets:\n  - {engine: llamacpp, url: http://127.0.0.1:8000/metrics}\n":                 `unknown inference engine "llamacpp"`,
		"targets:\n  - {engine: vllm, url: 127.0.0.1:8000}\n":                                    "is not an http(s) URL",
		"targets:\n  - {engine: vllm, url: http://x/metrics, gpu: 3}\n":                          "field gpu not found",
		// Found by probing: the second was dropped unseen, which one
		// depending on the order.
		"targets:\n  - {engine: vllm, url: http://x/metrics}\n  - {engine: sglang, url: http://x/metrics}\n": "is configured as vllm and as sglang",
		// The second pod's went unseen (probe6-eng).
		"targets:\n  - {engine: vllm, url: http://x/metrics, pod: a/p}\n  - {engine: vllm, url: http://x/metrics, pod: a/q}\n": "configured twice",
	} {
		path := dir + "/engines.yaml"
		os.WriteFile(path, []byte(body), 0o644)
		old := *engineConfig
		*engineConfig = path
		c, err := newEnginesCollector(Config{})
		*engineConfig = old
		switch {
		case want == "" && (err != nil || len(c.(*enginesCollector).static) != 1):
			t.Errorf("%q: %v", body, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%q: error %v, want %q", body, err, want)
		}
	}
	// Engines are named whatever their case, and labelled as the README
	// spells them.
	setEngineConfig(t, "targets:\n  - {engine: vLLM, url: http://x/metrics}\n  - {engine: Auto, url: http://y/metrics}\n")
	c, err := newEnginesCollector(Config{})
	if err != nil {
		t.Fatal(err)
	}
	if got := []string{c.(*enginesCollector).static[0].Engine, c.(*enginesCollector).static[1].Engine}; got[0] != "vllm" || got[1] != "auto" {
		t.Errorf("engines %q, want vllm and auto", got)
	}
}

func TestEngineDiscoveryByImageAndPort(t *testing.T) {
	for _, tc := range []struct {
		name string
		pod  kubernetes.PodMeta
		want string
	}{
		{"vLLM image, port declared", kubernetes.PodMeta{Namespace: "a", Name: "p", IP: "10.0.0.7",
			Containers: []kubernetes.ContainerMeta{{Image: "docker.io/vllm/vllm-openai:v0.10.0", Ports: []int32{8000}}}}, "vllm http://10.0.0.7:8000/metrics a/p"},
		{"Triton image, metrics port among others", kubernetes.PodMeta{Namespace: "a", Name: "t", IP: "10.0.0.8",
			Containers: []kubernetes.ContainerMeta{{Name: "sidecar", Image: "busybox"}, {Image: "nvcr.io/nvidia/tritonserver:24.08-py3", Ports: []int32{8000, 8001, 8002}}}}, "triton http://10.0.0.8:8002/metrics a/t"},
		// NIM serves its metrics at /v1/metrics.
		{"NIM image", kubernetes.PodMeta{Namespace: "a", Name: "n", IP: "10.0.0.11",
			Containers: []kubernetes.ContainerMeta{{Image: "nvcr.io/nim/meta/llama-3.1-8b-instruct:1.8.4", Ports: []int32{8000}}}}, "nim http://10.0.0.11:8000/v1/metrics a/n"},
		{"image without the port", kubernetes.PodMeta{Namespace: "a", Name: "q", IP: "10.0.0.9",
			Containers: []kubernetes.ContainerMeta{{Image: "lmsysorg/sglang:latest", Ports: []int32{8080}}}}, ""},
		{"port without the image", kubernetes.PodMeta{Namespace: "a", Name: "r", IP: "10.0.0.10",
			Containers: []kubernetes.ContainerMeta{{Image: "myapp", Ports: []int32{8000}}}}, ""},
		{"no IP", kubernetes.PodMeta{Namespace: "a", Name: "s",
			Containers: []kubernetes.ContainerMeta{{Image: "vllm/vllm-openai", Ports: []int32{8000}}}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ""
			if tg, ok := imageTarget(tc.pod); ok {
				got = tg.Engine + " " + tg.URL + " " + tg.Pod
			}
			if got != tc.want {
				t.Errorf("target %q, want %q", got, tc.want)
			}
		})
	}
}

// TestAnnotatedTargetPaths: an annotated pod is scraped at its engine's
// usual path, /v1/metrics for NIM, unless xpu-exporter.io/path says, with
// its query string if it has one (probe D, PD7: "q2?x=1" was escaped to
// /q2%3Fx=1 and answered 404). An engine is named whatever its case. A
// pod whose annotations give no endpoint is a refused target named by
// the pod, saying why.
func TestAnnotatedTargetPaths(t *testing.T) {
	for _, tc := range []struct {
		name        string
		ann         map[string]string
		ip          string
		engine, url string
		refused     string
	}{
		{name: "nim", ann: map[string]string{engineAnnotation: "nim"}, engine: "nim", url: "http://10.0.0.5:8000/v1/metrics"},
		{name: "nim-path", ann: map[string]string{engineAnnotation: "nim", pathAnnotation: "/metrics"}, engine: "nim", url: "http://10.0.0.5:8000/metrics"},
		{name: "vllm", ann: map[string]string{engineAnnotation: "vllm"}, engine: "vllm", url: "http://10.0.0.5:8000/metrics"},
		{name: "capital", ann: map[string]string{engineAnnotation: "vLLM"}, engine: "vllm", url: "http://10.0.0.5:8000/metrics"},
		{name: "query", ann: map[string]string{engineAnnotation: "sglang", pathAnnotation: "q2?x=1"}, engine: "sglang", url: "http://10.0.0.5:30000/q2?x=1"},
		{name: "auto-port", ann: map[string]string{engineAnnotation: "Auto", portAnnotation: "9400"}, engine: "auto", url: "http://10.0.0.5:9400/metrics"},
		// auto has no usual port: not scraped on port 80 by guess
		// (probe6-eng).
		{name: "auto", ann: map[string]string{engineAnnotation: "auto"}, engine: "auto", refused: "auto needs " + portAnnotation},
		{name: "typo", ann: map[string]string{engineAnnotation: "vlm"}, engine: "vlm", refused: `unknown inference engine "vlm"`},
		{name: "bad-port", ann: map[string]string{engineAnnotation: "vllm", portAnnotation: "http"}, engine: "vllm", refused: "invalid port"},
		{name: "no-ip", ann: map[string]string{engineAnnotation: "vllm"}, ip: "-", engine: "vllm", refused: "no pod IP known"},
	} {
		ip := "10.0.0.5"
		if tc.ip == "-" {
			ip = ""
		}
		got := podTarget(kubernetes.PodMeta{Namespace: "a", Name: tc.name, IP: ip, Annotations: tc.ann}, engineName(tc.ann[engineAnnotation]))
		want := engineTarget{Engine: tc.engine, URL: tc.url, Pod: "a/" + tc.name}
		if tc.refused != "" {
			want.URL = "a/" + tc.name
			if !strings.Contains(got.refused, tc.refused) {
				t.Errorf("%s: refused %q, want it to say %q", tc.name, got.refused, tc.refused)
			}
			want.refused = got.refused
		}
		if got != want {
			t.Errorf("%s: target %+v, want %+v", tc.name, got, want)
		}
	}
}

func TestAutoTargetKeepsItsEngineWhileDown(t *testing.T) {
	c := &enginesCollector{detected: map[string]string{}}
	up := engineResult{target: engineTarget{Engine: "auto"}, engine: "sglang"}
	down := engineResult{target: engineTarget{Engine: "auto"}, engine: "auto", err: errors.New("connection refused")}
	if got := c.engineLabel("t", down); got != "auto" {
		t.Errorf("never seen up: engine %q, want auto", got)
	}
	c.engineLabel("t", up)
	if got := c.engineLabel("t", down); got != "sglang" {
		t.Errorf("down after being seen as sglang: engine %q", got)
	}
}

func TestGoneTargetsAreForgotten(t *testing.T) {
	c := &enginesCollector{state: map[string]targetState{}, detected: map[string]string{}, logger: slog.New(slog.DiscardHandler)}
	for gen, target := range []string{"http://10.0.0.1:8000/metrics", "http://10.0.0.2:8000/metrics"} {
		c.gen = uint64(gen + 1)
		c.logChange(target, nil)
		c.detected[target] = "vllm"
		// A target only kept, never logged, as another exporter's engine
		// is: forgotten all the same once gone.
		c.detected["http://10.0.1.1:8000/metrics"] = "sglang"
		c.forget(c.gen)
	}
	if len(c.state) != 1 || len(c.detected) != 1 {
		t.Errorf("state %v, detected %v: a pod that left must be forgotten", c.state, c.detected)
	}
}

// TestOverlappingScrapesKeepTheirTargets: scrape A reads a target, scrape
// B starts while A runs (two Prometheus servers), A ends. What is known of
// the target, its counters' reset offsets included, stays for B, where A's
// end dropped all B had not reached yet: a served counter could fall
// (review19 P1). A target neither saw goes.
func TestOverlappingScrapesKeepTheirTargets(t *testing.T) {
	c := &enginesCollector{state: map[string]targetState{}, detected: map[string]string{},
		counters: map[string]*engines.Corrector{}, joins: map[string]engineJoin{}, logger: slog.New(slog.DiscardHandler)}
	const live, gone = "http://10.0.0.1:8000/metrics", "http://10.0.0.9:8000/metrics"
	c.gen = 1 // a scrape that saw both
	c.logChange(gone, nil)
	c.detected[gone] = "tgi"
	c.gen++ // scrape A
	a := c.gen
	k := c.corrector(engineTarget{URL: live})
	c.logChange(live, nil)
	c.detected[live] = "vllm"
	c.gen++ // scrape B starts before A ends
	c.forget(a)
	if c.counters[live] != k || c.detected[live] != "vllm" {
		t.Errorf("a live target was forgotten by an overlapping scrape's end: corrector kept %v, detected %q", c.counters[live] == k, c.detected[live])
	}
	if _, ok := c.detected[gone]; ok {
		t.Error("a target no scrape since saw is kept")
	}
}

// A redirect loop whose URLs count up gives a new message at every scrape:
// it is still one state, logged once.
func TestRedirectLoopLoggedOnce(t *testing.T) {
	var n atomic.Int64
	loop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, fmt.Sprintf("/metrics?hop=%d", n.Add(1)), http.StatusFound)
	}))
	t.Cleanup(loop.Close)
	setEngineFlags(t, []string{"vllm=" + loop.URL + "/metrics"})
	var logs strings.Builder
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logs.Write(p)
	}), nil))
	e := newExporterOf(t, Config{Logger: logger}, "engines")
	for range 3 {
		out := scrapeText(t, e, 5*time.Second)
		if v := sample(t, out, "xpu_inference_up", `engine="vllm"`); v != 0 {
			t.Fatalf("a redirect loop is up: %v", v)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if got := strings.Count(logs.String(), "inference engine not scraped"); got != 1 {
		t.Errorf("%d log lines for one state over three scrapes, want 1:\n%s", got, logs.String())
	}
}

// TestEngineSeriesLeftOutAreTold: a histogram whose buckets go down is
// left out (Prometheus would misread it) while the target stays up with its
// other series; that is logged once when it starts and once when it ends,
// not left unseen.
func TestEngineSeriesLeftOutAreTold(t *testing.T) {
	const gauge = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\"} 3\n"
	const broken = "# TYPE vllm:time_to_first_token_seconds histogram\n" +
		"vllm:time_to_first_token_seconds_bucket{le=\"0.1\",model_name=\"m\"} 5\n" +
		"vllm:time_to_first_token_seconds_bucket{le=\"+Inf\",model_name=\"m\"} 3\n" +
		"vllm:time_to_first_token_seconds_sum{model_name=\"m\"} 1\n" +
		"vllm:time_to_first_token_seconds_count{model_name=\"m\"} 3\n"
	body := engineEndpoint(t, "vllm")
	body.Store(gauge + broken)
	var logs syncbuf.Buffer
	e := newExporterOf(t, Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))}, "engines")
	for range 2 {
		out := scrapeText(t, e, 5*time.Second)
		if v := sample(t, out, "xpu_inference_up", `engine="vllm"`); v != 1 {
			t.Errorf("target up = %v, want 1: its other series are right", v)
		}
		if v := sample(t, out, "xpu_inference_requests_running", `model="m"`); v != 3 {
			t.Errorf("requests running = %v, want 3", v)
		}
		if strings.Contains(out, "xpu_inference_time_to_first_token_seconds") {
			t.Error("a histogram whose buckets go down is served")
		}
	}
	if n := strings.Count(logs.String(), "inference engine series left out"); n != 1 || !strings.Contains(logs.String(), "fewer observations") {
		t.Errorf("%d warnings over two scrapes, want 1 saying why:\n%s", n, logs.String())
	}
	body.Store(gauge)
	scrapeText(t, e, 5*time.Second)
	scrapeText(t, e, 5*time.Second)
	if n := strings.Count(logs.String(), "inference engine series all mapped again"); n != 1 {
		t.Errorf("%d lines for the series' return, want 1:\n%s", n, logs.String())
	}
}

// TestEngineSeriesLeftOutChangesAreTold: the warning names the series
// left out again whenever they, or why, change, once per change, also
// while an earlier problem is still told; the same problem with other
// numbers (a count further ahead of its +Inf bucket) is no change. Found
// by probe D (PD5): a time-to-first-token typed gauge, left out after a
// NaN core had been told, was never named.
func TestEngineSeriesLeftOutChangesAreTold(t *testing.T) {
	const nanCore = "# TYPE vllm:num_requests_running gauge\n" +
		"vllm:num_requests_running{engine=\"0\",model_name=\"m\"} NaN\nvllm:num_requests_running{engine=\"1\",model_name=\"m\"} 4\n"
	const running = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\"} 3\n"
	const ttftGauge = "# TYPE vllm:time_to_first_token_seconds gauge\nvllm:time_to_first_token_seconds{model_name=\"m\"} 10\n"
	latencyAhead := func(count int) string {
		return "# TYPE vllm:e2e_request_latency_seconds histogram\n" +
			"vllm:e2e_request_latency_seconds_bucket{le=\"+Inf\",model_name=\"m\"} 5000\n" +
			"vllm:e2e_request_latency_seconds_sum{model_name=\"m\"} 60\n" +
			fmt.Sprintf("vllm:e2e_request_latency_seconds_count{model_name=\"m\"} %d\n", count)
	}
	body := engineEndpoint(t, "vllm")
	var logs syncbuf.Buffer
	e := newExporterOf(t, Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))}, "engines")
	for i, step := range []struct {
		body string
		up   float64
		// want is the line this scrape logs of series left out, if any.
		want string
	}{
		{nanCore, 1, "not a finite number"},
		{nanCore, 1, ""},
		{running + `vllm:num_requests_running{model_name="m"} 3` + "\n", 0, ""}, // a series given twice: down, nothing mapped
		{running + ttftGauge, 1, "not a histogram"},
		{running + ttftGauge + latencyAhead(5001), 1, "count 5001 differs from the +Inf bucket 5000"},
		{running + ttftGauge + latencyAhead(5002), 1, ""},
		{running, 1, "inference engine series all mapped again"},
		{running, 1, ""},
	} {
		before := len(logs.String())
		body.Store(step.body)
		out := scrapeText(t, e, 5*time.Second)
		if v := sample(t, out, "xpu_inference_up", `engine="vllm"`); v != step.up {
			t.Errorf("scrape %d: up %v, want %v", i+1, v, step.up)
		}
		var told []string
		for _, line := range strings.Split(logs.String()[before:], "\n") {
			if strings.Contains(line, `msg="inference engine series`) {
				told = append(told, line)
			}
		}
		switch {
		case step.want == "" && len(told) != 0:
			t.Errorf("scrape %d: logged %q, want nothing", i+1, told)
		case step.want != "" && (len(told) != 1 || !strings.Contains(told[0], step.want)):
			t.Errorf("scrape %d: logged %q, want one line saying %q", i+1, told, step.want)
		}
	}
}

// TestSkippedSet: what an answer left out is one set whatever the order of
// its errors and the numbers in why; a series of other labels, or another
// reason, is another set.
func TestSkippedSet(t *testing.T) {
	ahead := func(model string, count int) error {
		return fmt.Errorf(`vllm:e2e_request_latency_seconds{model_name="%s"}: count %d differs from the +Inf bucket 5000`, model, count)
	}
	ttft := errors.New(`vllm:time_to_first_token_seconds{model_name="m"}: not a histogram`)
	base := skippedSet(errors.Join(ahead("adapter-1", 5001), ttft))
	for _, tc := range []struct {
		name    string
		skipped error
		same    bool
	}{
		{"the same", errors.Join(ahead("adapter-1", 5001), ttft), true},
		{"in another order, nested", errors.Join(ttft, errors.Join(ahead("adapter-1", 5001))), true},
		{"other numbers", errors.Join(ahead("adapter-1", 5003), ttft), true},
		{"another series", errors.Join(ahead("adapter-2", 5001), ttft), false},
		{"one fewer", ahead("adapter-1", 5001), false},
		{"another reason", errors.Join(ahead("adapter-1", 5001), errors.New(`vllm:time_to_first_token_seconds{model_name="m"}: histogram has no _sum`)), false},
	} {
		if got := skippedSet(tc.skipped) == base; got != tc.same {
			t.Errorf("%s: same set %v, want %v", tc.name, got, tc.same)
		}
	}
	if skippedSet(nil) != 0 {
		t.Error("nothing left out is not 0")
	}
}

// TestEngineHistogramReturnsAfterOneUnreadableAnswer: one SGLang answer
// whose inter-token _count is one ahead of its +Inf bucket (a racing
// prometheus_client collection) is left out, and the same histogram is
// served again from the next good answer, its return logged once. Found
// by probing: the rejected count 5001 was counted on from, so the good
// 5000 after it read as a reset and the histogram (count 10001, +Inf
// 10000) was left out until the exporter restarted, with no line saying
// so.
func TestEngineHistogramReturnsAfterOneUnreadableAnswer(t *testing.T) {
	answer := func(count int) string {
		return "# TYPE sglang:inter_token_latency_seconds histogram\n" +
			"sglang:inter_token_latency_seconds_bucket{le=\"0.01\",model_name=\"m\"} 4000\n" +
			"sglang:inter_token_latency_seconds_bucket{le=\"0.1\",model_name=\"m\"} 5000\n" +
			"sglang:inter_token_latency_seconds_bucket{le=\"+Inf\",model_name=\"m\"} 5000\n" +
			"sglang:inter_token_latency_seconds_sum{model_name=\"m\"} 60\n" +
			fmt.Sprintf("sglang:inter_token_latency_seconds_count{model_name=\"m\"} %d\n", count)
	}
	body := engineEndpoint(t, "sglang")
	var logs syncbuf.Buffer
	e := newExporterOf(t, Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))}, "engines")
	// The engine's own 5000 whenever its answer is whole: nothing was
	// reset, so nothing is added to it.
	for i, count := range []int{5000, 5001, 5000, 5000} {
		body.Store(answer(count))
		out := scrapeText(t, e, 5*time.Second)
		served := strings.Contains(out, "xpu_inference_inter_token_latency_seconds_count{")
		switch {
		case count != 5000 && served:
			t.Errorf("scrape %d: the unreadable answer is served", i+1)
		case count == 5000 && !served:
			t.Errorf("scrape %d: a whole answer is left out", i+1)
		case served:
			if v := sample(t, out, "xpu_inference_inter_token_latency_seconds_count", `model="m"`); v != 5000 {
				t.Errorf("scrape %d: count %v, want 5000", i+1, v)
			}
		}
	}
	if n := strings.Count(logs.String(), "inference engine series left out"); n != 1 || !strings.Contains(logs.String(), "count 5001 differs from the +Inf bucket 5000") {
		t.Errorf("%d warnings, want 1 saying why:\n%s", n, logs.String())
	}
	if n := strings.Count(logs.String(), "inference engine series all mapped again"); n != 1 {
		t.Errorf("%d lines for the histogram's return, want 1:\n%s", n, logs.String())
	}
}

// fixedEngineExporter is an exporter with the engines collector alone,
// scraping one target of engine that always answers body, and its log.
func fixedEngineExporter(t *testing.T, engine, body string) (*Exporter, *syncbuf.Buffer) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte(body)) }))
	t.Cleanup(srv.Close)
	setEngineFlags(t, []string{engine + "=" + srv.URL + "/metrics"})
	logs := &syncbuf.Buffer{}
	return newExporterOf(t, Config{Logger: slog.New(slog.NewTextHandler(logs, nil))}, "engines"), logs
}

// TestNonFiniteCounterIsTold: a counter reading +Inf is left out of the
// target's series (engines.Corrector) and named in one warning, while the
// target stays up with the rest.
func TestNonFiniteCounterIsTold(t *testing.T) {
	const body = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\"} 3\n" +
		"# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total{model_name=\"m\"} +Inf\n"
	e, logs := fixedEngineExporter(t, "vllm", body)
	for range 2 {
		out := scrapeText(t, e, 5*time.Second)
		if v := sample(t, out, "xpu_inference_requests_running", `model="m"`); v != 3 {
			t.Errorf("requests running = %v, want 3", v)
		}
		if strings.Contains(out, "xpu_inference_tokens_total{") {
			t.Error("a counter reading +Inf is served")
		}
	}
	if n := strings.Count(logs.String(), "inference engine series left out"); n != 1 || !strings.Contains(logs.String(), "not a finite number") {
		t.Errorf("%d warnings over two scrapes, want 1 saying why:\n%s", n, logs.String())
	}
}

// TestMalformedEngineValuesAreTold: the probe's KV-cache ratio of 1.5 on
// one engine core and -0.2 on the other, and a token counter at -5, are
// left out and named in the one warning of series left out, while the
// target stays up with its requests running (probe D, PD6).
func TestMalformedEngineValuesAreTold(t *testing.T) {
	const body = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\"} 3\n" +
		"# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{engine=\"0\",model_name=\"m\"} 1.5\nvllm:kv_cache_usage_perc{engine=\"1\",model_name=\"m\"} -0.2\n" +
		"# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total{model_name=\"m\"} -5\n"
	e, logs := fixedEngineExporter(t, "vllm", body)
	for range 2 {
		out := scrapeText(t, e, 5*time.Second)
		if v := sample(t, out, "xpu_inference_requests_running", `model="m"`); v != 3 {
			t.Errorf("requests running = %v, want 3", v)
		}
		for _, family := range []string{"xpu_inference_kv_cache_usage_ratio{", "xpu_inference_tokens_total{"} {
			if strings.Contains(out, family) {
				t.Errorf("%s is served:\n%s", family, grepLines(out, family))
			}
		}
	}
	if n := strings.Count(logs.String(), "inference engine series left out"); n != 1 ||
		!strings.Contains(logs.String(), "1.5 is outside 0..1") || !strings.Contains(logs.String(), "-0.2 is outside 0..1") || !strings.Contains(logs.String(), "a negative count") {
		t.Errorf("%d warnings over two scrapes, want 1 naming each:\n%s", n, logs.String())
	}
}

// TestNIMPassingVLLMThrough: NIM for LLMs 2.x serves its vLLM backend's
// own metrics, vllm: names; a nim target reads them by vLLM's names and is
// still the NIM: up, engine="nim", 3 running, 1 waiting, KV cache 0.42. It
// was down ("only another engine's"), and the engine-down alert fired for
// a healthy NIM (found by probing).
func TestNIMPassingVLLMThrough(t *testing.T) {
	const body = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"meta/llama-3.1-8b-instruct\"} 3\n" +
		"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"meta/llama-3.1-8b-instruct\"} 1\n" +
		"# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{model_name=\"meta/llama-3.1-8b-instruct\"} 0.42\n"
	e, _ := fixedEngineExporter(t, "nim", body)
	out := scrapeText(t, e, 5*time.Second)
	check, _ := oracleChecks(out)
	check(t, "xpu_inference_up", 1, `engine="nim"`)
	check(t, "xpu_inference_requests_running", 3, `engine="nim"`, `model="meta/llama-3.1-8b-instruct"`)
	check(t, "xpu_inference_requests_waiting", 1, `engine="nim"`)
	check(t, "xpu_inference_kv_cache_usage_ratio", 0.42, `engine="nim"`)
}

// TestAutoTargetTellsOfOtherEngines: an auto target is read as the first
// engine found. An answer holding another engine's metrics too (a gateway
// merging two engines' /metrics) served one and dropped the other's models
// without a word (found by probing); now the target stays up with the
// first engine's series and one warning names the other engine.
func TestAutoTargetTellsOfOtherEngines(t *testing.T) {
	const body = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"llama\"} 3\n" +
		"# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{model_name=\"qwen\"} 5\n"
	e, logs := fixedEngineExporter(t, "auto", body)
	for range 2 {
		out := scrapeText(t, e, 5*time.Second)
		if v := sample(t, out, "xpu_inference_requests_running", `engine="vllm"`, `model="llama"`); v != 3 {
			t.Errorf("vLLM's requests running = %v, want 3", v)
		}
	}
	if n := strings.Count(logs.String(), "inference engine series left out"); n != 1 || !strings.Contains(logs.String(), "sglang metrics too") {
		t.Errorf("%d warnings over two scrapes, want 1 naming sglang:\n%s", n, logs.String())
	}
}

// TestTritonVLLMBackendIsTriton: Triton's vLLM backend serves vllm:
// families labelled model and version beside Triton's own. An auto target
// read them as vLLM's, every model under model="" (found by probing); now
// auto and triton targets read them per model as Triton's, with no word
// of another engine, while a target configured as vllm is told that the
// answer is Triton's too.
func TestTritonVLLMBackendIsTriton(t *testing.T) {
	srv := engineServer(t, "constructed/triton-vllm-backend-pr92-gauges.prom")
	setEngineFlags(t, []string{"auto=" + srv.URL + "/auto", "triton=" + srv.URL + "/triton", "vllm=" + srv.URL + "/vllm"})
	var logs syncbuf.Buffer
	e := newExporterOf(t, Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))}, "engines")
	out := scrapeText(t, e, 5*time.Second)
	for _, path := range []string{"/auto", "/triton"} {
		target := `target="` + srv.URL + path + `"`
		for model, want := range map[string]float64{"llama": 3, "mistral": 4} {
			if v := sample(t, out, "xpu_inference_requests_running", `engine="triton"`, target, `model="`+model+`"`, `model_version=`); v != want {
				t.Errorf("%s: %s running %v, want %v", path, model, v, want)
			}
		}
	}
	if n := strings.Count(logs.String(), "inference engine series left out"); n != 1 || !strings.Contains(logs.String(), "triton metrics too, not read: the target is configured as vllm") {
		t.Errorf("%d warnings, want 1, for the vllm target:\n%s", n, logs.String())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// Two scrapes at once (an HA pair) share one fetch of an engine's
// /metrics, as they share device reads; the next scrape fetches anew.
func TestConcurrentScrapesShareEngineFetch(t *testing.T) {
	body, err := os.ReadFile("../fixtures/engines/vllm-0.10.0-v1-fragment-production-stack-issue617.prom")
	if err != nil {
		t.Fatal(err)
	}
	var requests atomic.Int32
	arrived, release := make(chan struct{}, 4), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if requests.Add(1) == 1 {
			arrived <- struct{}{}
			<-release
		}
		w.Write(body)
		w.Write([]byte("\n"))
	}))
	t.Cleanup(srv.Close)
	setEngineFlags(t, []string{"vllm=" + srv.URL + "/metrics"})
	e := newTestExporter(t, loadScenario(t, "lost"), map[string]bool{"nvidia": true, "engines": true})

	outs := make(chan string, 2)
	go func() { outs <- scrapeText(t, e, 10*time.Second) }()
	<-arrived // the first scrape's fetch is under way
	go func() { outs <- scrapeText(t, e, 10*time.Second) }()
	// Give the second scrape the time to reach the engines collector; had
	// it fetched on its own, the server counts a second request.
	time.Sleep(300 * time.Millisecond)
	close(release)
	for range 2 {
		if v := sample(t, <-outs, "xpu_inference_up", `engine="vllm"`); v != 1 {
			t.Errorf("xpu_inference_up = %v", v)
		}
	}
	if n := requests.Load(); n != 1 {
		t.Errorf("two concurrent scrapes fetched the engine %d times, want 1", n)
	}
	scrapeText(t, e, 10*time.Second)
	if n := requests.Load(); n != 2 {
		t.Errorf("after a third scrape, %d fetches, want 2", n)
	}
}

// TestLongerScrapeDoesNotJoinShorterFetch: scrape A, with a 0.5 s
// timeout, starts a fetch of an engine that answers after 1.5 s; scrape B
// starts 0.1 s later with a 5 s timeout. A's fetch is due at 0.5 s, B's
// deadline is 5.1 s, 4.6 s later, past flight.ScrapeSlack (1 s): B fetches
// on its own and gets the engine up (about 1.6 s in), A alone its timeout.
// B was served A's failure, the engine down (probe D, PD1).
func TestLongerScrapeDoesNotJoinShorterFetch(t *testing.T) {
	const body = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\"} 3\n"
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		select {
		case <-time.After(1500 * time.Millisecond):
		case <-r.Context().Done():
			return
		}
		w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	setEngineFlags(t, []string{"vllm=" + srv.URL + "/metrics"})
	e := newExporterOf(t, Config{Logger: slog.New(slog.DiscardHandler)}, "engines")
	short := make(chan string, 1)
	go func() { short <- scrapeText(t, e, 500*time.Millisecond) }()
	time.Sleep(100 * time.Millisecond)
	long := scrapeText(t, e, 5*time.Second)
	if v := sample(t, long, "xpu_inference_up", `engine="vllm"`); v != 1 {
		t.Errorf("the 5 s scrape: up %v, want 1 (it was served the 0.5 s scrape's timeout)", v)
	}
	if v := sample(t, long, "xpu_inference_requests_running", `model="m"`); v != 3 {
		t.Errorf("the 5 s scrape: requests running %v, want 3", v)
	}
	if v := sample(t, <-short, "xpu_inference_up", `engine="vllm"`); v != 0 {
		t.Errorf("the 0.5 s scrape: up %v, want 0", v)
	}
	if n := requests.Load(); n != 2 {
		t.Errorf("%d fetches, want 2: one per deadline", n)
	}
}

// TestEngineErrorStateIgnoresLocalPort: a connection reset names the
// connection's ephemeral local port, new at every scrape; the state logged
// on change must not, or every scrape logs again (found by probing).
func TestEngineErrorStateIgnoresLocalPort(t *testing.T) {
	reset := func(port int) error {
		return &url.Error{Op: "Get", URL: "http://127.0.0.1:9960/metrics", Err: &net.OpError{
			Op: "read", Net: "tcp",
			Source: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port},
			Addr:   &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9960},
			Err:    os.NewSyscallError("read", syscall.ECONNRESET),
		}}
	}
	a, b := errorState(reset(50274)), errorState(reset(50290))
	if a != b {
		t.Errorf("one failure, two states: %q and %q", a, b)
	}
	if want := "read: " + syscall.ECONNRESET.Error(); a != want {
		t.Errorf("state %q, want %q", a, want)
	}
	if s := errorState(fmt.Errorf("GET x: %w", engines.ErrTooManyLabelPairs)); s != "too many label pairs" {
		t.Errorf("label pair limit: state %q", s)
	}
}

// TestEngineForeignAnswerIsDown: a 200 answer that is not the engine's
// metrics (a login page, another engine's endpoint) is down with one log
// line, not up with no series (found by probing); a model-rich answer over
// --engines.max-models fails alike.
func TestEngineForeignAnswerIsDown(t *testing.T) {
	html := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.Write([]byte("<!DOCTYPE html>\n<html><body>Sign in</body></html>\n"))
	}))
	t.Cleanup(html.Close)
	triton := engineServer(t, "triton-densenet-t4-datadog-fixture.prom")
	var many strings.Builder
	many.WriteString("# TYPE vllm:num_requests_running gauge\n")
	for i := range 11 {
		fmt.Fprintf(&many, "vllm:num_requests_running{model_name=\"m%d\"} 1\n", i)
	}
	models := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte(many.String())) }))
	t.Cleanup(models.Close)
	setEngineFlags(t, []string{"vllm=" + html.URL + "/html", "vllm=" + triton.URL + "/metrics", "triton=" + triton.URL + "/ok", "vllm=" + models.URL + "/models"})
	old := *engineMaxModels
	*engineMaxModels = 10 // the Triton fixture serves 8
	t.Cleanup(func() { *engineMaxModels = old })
	var logs syncbuf.Buffer
	e := newExporterOf(t, Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))}, "engines")
	for range 3 {
		out := scrapeText(t, e, 5*time.Second)
		for _, u := range []string{html.URL + "/html", triton.URL + "/metrics", models.URL + "/models"} {
			if v := sample(t, out, "xpu_inference_up", `target="`+u+`"`); v != 0 {
				t.Errorf("%s: up %v, want 0", u, v)
			}
		}
		if v := sample(t, out, "xpu_inference_up", `target="`+triton.URL+`/ok"`); v != 1 {
			t.Errorf("the triton target of the same endpoint: up %v, want 1", v)
		}
		if strings.Contains(out, `model="m0"`) {
			t.Error("the models of a target over --engines.max-models are served")
		}
	}
	for _, want := range []string{"no inference engine metrics in the response", "none of vllm's metrics in the response", "11 models, more than --engines.max-models=10"} {
		if n := strings.Count(logs.String(), want); n != 1 {
			t.Errorf("%q logged %d times in three scrapes, want 1:\n%s", want, n, logs.String())
		}
	}
}

// TestRotatingAdaptersStayUnderMaxModels: a vLLM answering the base model
// and one LoRA adapter, a new one at each scrape, names two models in each
// answer: with --engines.max-models=3 it stays up, serving base (its
// count, the scrape's number) and the current adapter (5) only. Every
// adapter that left was served for an hour and counted, so the third
// scrape failed with "4 models" (probe D, PD2).
func TestRotatingAdaptersStayUnderMaxModels(t *testing.T) {
	body := engineEndpoint(t, "vllm")
	old := *engineMaxModels
	*engineMaxModels = 3
	t.Cleanup(func() { *engineMaxModels = old })
	e := newExporterOf(t, Config{Logger: slog.New(slog.DiscardHandler)}, "engines")
	for i := 1; i <= 6; i++ {
		body.Store(fmt.Sprintf("# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total{model_name=\"base\"} %d\nvllm:prompt_tokens_total{model_name=\"adapter-%d\"} 5\n", i, i))
		out := scrapeText(t, e, 5*time.Second)
		if v := sample(t, out, "xpu_inference_up", `engine="vllm"`); v != 1 {
			t.Fatalf("scrape %d: up %v, want 1", i, v)
		}
		got := map[string]float64{}
		for _, line := range strings.Split(grepLines(out, "xpu_inference_tokens_total{"), "\n") {
			if _, rest, ok := strings.Cut(line, `model="`); ok {
				model, _, _ := strings.Cut(rest, `"`)
				got[model] = sample(t, out, "xpu_inference_tokens_total", `model="`+model+`"`)
			}
		}
		if want := map[string]float64{"base": float64(i), fmt.Sprintf("adapter-%d", i): 5}; !maps.Equal(got, want) {
			t.Errorf("scrape %d: tokens by model %v, want %v", i, got, want)
		}
	}
}

// Limits that would fail every engine at every scrape, or scrape none, are
// refused at start, each named.
func TestCheckEngineLimits(t *testing.T) {
	if err := checkEngineLimits(16<<20, 8, 20000, 100); err != nil {
		t.Errorf("defaults refused: %v", err)
	}
	if err := checkEngineLimits(16<<20, 8, 20000, 0); err != nil {
		t.Errorf("--engines.max-models=0 (no limit) refused: %v", err)
	}
	err := checkEngineLimits(0, 0, 0, -1)
	for _, flag := range []string{"--engines.max-bytes", "--engines.concurrency", "--engines.max-series", "--engines.max-models"} {
		if err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("%s not named: %v", flag, err)
		}
	}
}

// TestUnitEngineKeepsItsOwnerWhileItsGPUIsDown: an engine configured by
// its unit is joined to the GPUs its unit's processes run on. When that
// GPU falls off the bus its processes can no longer be read; the engine
// still runs there as far as anyone can tell, so its series keep the
// owner and GPU they had rather than all start anew as other series at
// the moment the GPU fails. An engine whose unit has no GPU process keeps
// the unit it was configured with, as one configured by pod keeps the pod
// (probe6-eng D1).
func TestUnitEngineKeepsItsOwnerWhileItsGPUIsDown(t *testing.T) {
	vllm := engineServer(t, "vllm-0.10.0-v1-fragment-production-stack-issue617.prom")
	setEngineFlags(t, nil)
	config := fmt.Sprintf("targets:\n  - {engine: vllm, url: %[1]s/v, unit: vllm.service}\n  - {engine: vllm, url: %[1]s/idle, unit: idle.service}\n", vllm.URL)
	setEngineConfig(t, config)
	s, err := demo.Parse([]byte(`node: eng
defaults: {model: NVIDIA H100 80GB HBM3, memory_total: 80GiB, metrics: {utilization: 0.5, memory_utilization: 0.25}}
devices:
  - faults: {lost_after: 60s}
    processes: [{pid: 2000, unit: vllm.service, user: root, command: vllm, memory_used: 9GiB, utilization: 0.5}]
  - {}
`))
	if err != nil {
		t.Fatal(err)
	}
	clk := &testClock{t: testStart.Add(15 * time.Second)}
	e := newAttributedExporterFor(t, s, func(c *Config) { c.NVML, c.Now = s.NVML(testStart, clk.now), clk.now })
	joined := []string{`target="` + vllm.URL + `/v"`, `unit="vllm.service"`, `gpu="0"`, `model="zai-org/GLM-4.5"`}
	for i, at := range []time.Duration{30 * time.Second, 90 * time.Second} {
		clk.set(testStart.Add(at))
		out := scrapeText(t, e, 10*time.Second)
		if want := float64(1 - i); sample(t, out, "xpu_device_up", `gpu="0"`) != want {
			t.Fatalf("scrape %d: GPU 0 up is not %v", i, want)
		}
		sample(t, out, "xpu_inference_kv_cache_usage_ratio", joined...)
		sample(t, out, "xpu_inference_device_info", `target="`+vllm.URL+`/v"`, `unit="vllm.service"`, `gpu="0"`)
		sample(t, out, "xpu_inference_kv_cache_usage_ratio", `target="`+vllm.URL+`/idle"`, `unit="idle.service"`)
	}
}

// A GPU that answers but whose process list could not be read whole (NVML
// refused a list: its owners are unknown) leaves the unit's processes as
// unread as a GPU that is down: the engine keeps the owner and GPU it had
// (found in review).
func TestUnitEngineKeepsItsOwnerWhileItsProcessesAreUnread(t *testing.T) {
	c := &enginesCollector{joins: map[string]engineJoin{}}
	target := engineTarget{Engine: "vllm", URL: "http://127.0.0.1:8000/metrics", Unit: "vllm.service"}
	owner := attribution.Owner{Kind: attribution.Process, Unit: "vllm.service", User: "root", Command: "vllm"}
	read := &Snapshot{Devices: []*Device{{Vendor: "nvidia", Index: "0", UUID: "GPU-0", Up: true,
		Claims: []attribution.Claim{{Owner: owner}}}}}
	if _, devs := c.join(read, target.URL, target); len(devs) != 1 {
		t.Fatalf("first scrape: joined to %d GPUs, want 1", len(devs))
	}
	unread := &Snapshot{Devices: []*Device{{Vendor: "nvidia", Index: "0", UUID: "GPU-0", Up: true, ProcessesPartial: true, OwnersUnknown: true}}}
	if o, devs := c.join(unread, target.URL, target); len(devs) != 1 || o == nil || o.User != "root" {
		t.Errorf("GPU up, process list unread: joined to %d GPUs as %+v; want GPU-0 and the owner it had", len(devs), o)
	}
	// Read whole, without the unit's process: the engine left the GPU.
	whole := &Snapshot{Devices: []*Device{{Vendor: "nvidia", Index: "0", UUID: "GPU-0", Up: true}}}
	if o, devs := c.join(whole, target.URL, target); len(devs) != 0 || o == nil || o.Unit != "vllm.service" || o.User != "" {
		t.Errorf("GPU read whole without the unit: joined to %d GPUs as %+v; want none, the configured unit", len(devs), o)
	}
}

// One endpoint, two targets: scraped once, the second told once which
// target has it. A pod annotated for an endpoint that is also a configured
// target: scraped as configured, the pod told so, not dropped unseen
// (found in review). Two pods annotated for one endpoint (a pod's IP
// handed to its successor while it ends), nothing configured: scraped as
// the first pod's, the other told it is that pod's, not a configured
// target's (probe H, PH5).
func TestDuplicateEndpointIsTold(t *testing.T) {
	vllm := engineServer(t, "vllm-0.10.0-v1-fragment-production-stack-issue617.prom")
	host, port, _ := net.SplitHostPort(strings.TrimPrefix(vllm.URL, "http://"))
	annotations := map[string]string{engineAnnotation: "vllm", portAnnotation: port}
	llm := func(name string) kubernetes.PodMeta {
		return kubernetes.PodMeta{Namespace: "inference", Name: name, IP: host, Annotations: annotations}
	}
	for _, tc := range []struct {
		name       string
		configured []string
		pods       enginePods
		told, not  string
	}{
		{"configured and a pod's", []string{"vllm=" + vllm.URL + "/metrics"}, enginePods{llm("llm-0")}, "is a configured target's too", "is pod "},
		{"two pods'", nil, enginePods{llm("llm-0"), llm("llm-1")}, "is pod inference/llm-0's too", "configured target"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setEngineFlags(t, tc.configured)
			var log syncbuf.Buffer
			e := newAttributedExporterFor(t, demo.Default(), func(c *Config) {
				c.PodMetadata = tc.pods
				c.Logger = slog.New(slog.NewTextHandler(&log, nil))
			})
			for range 2 {
				out := scrapeText(t, e, 10*time.Second)
				if n := strings.Count(out, "xpu_inference_up{"); n != 1 {
					t.Errorf("%d xpu_inference_up series, want the endpoint once", n)
				}
			}
			if n := strings.Count(log.String(), tc.told); n != 1 || strings.Contains(log.String(), tc.not) {
				t.Errorf("%d log lines saying %q for the duplicate, want 1 and none saying %q:\n%s", n, tc.told, tc.not, log.String())
			}
		})
	}
}

// engineEndpoint is the one engine target, of engine, whose answer is the
// string stored in the returned value at each request.
func engineEndpoint(t *testing.T, engine string) *atomic.Value {
	t.Helper()
	var body atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte(body.Load().(string))) }))
	t.Cleanup(srv.Close)
	setEngineFlags(t, []string{engine + "=" + srv.URL + "/metrics"})
	return &body
}

// TestEngineDeadlineLoggedWhenItLasts: a target scraped, then missing one
// scrape's deadline (an HA pair's other server asks for less time, or a
// client for a millisecond) and answering the next, logs nothing after
// its first "scraped" (probe H, PH4: "not scraped" and "scraped" at every
// round). Missing deadlines for a second or more, it is logged once; an
// error other than the deadline is logged at once.
// TestEngineStatusLoggedByCode: an endpoint answering 503 with a reason
// phrase of its own that changes at every answer (a request ID) was logged
// at every scrape, as if its state changed (probe K, PK3). Its state is
// its status code: three 503s are one line, a 500 after them another.
func TestEngineStatusLoggedByCode(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var answers atomic.Int32
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			n := answers.Add(1)
			code := 503
			if n > 3 {
				code = 500
			}
			br := bufio.NewReader(conn)
			for { // the request's head
				line, err := br.ReadString('\n')
				if err != nil || line == "\r\n" {
					break
				}
			}
			fmt.Fprintf(conn, "HTTP/1.1 %d Service Unavailable req-%d\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", code, n)
			conn.Close()
		}
	}()
	var logs syncbuf.Buffer
	c := &enginesCollector{client: &http.Client{}, state: map[string]targetState{}, detected: map[string]string{}, logger: slog.New(slog.NewTextHandler(&logs, nil))}
	target := "http://" + ln.Addr().String() + "/metrics"
	for range 4 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := engines.Scrape(ctx, c.client, target, engines.Limits{MaxBytes: 1 << 20})
		cancel()
		c.logChange(target, err)
	}
	if got := strings.Count(logs.String(), "inference engine not scraped"); got != 2 {
		t.Errorf("%d lines for three 503s and a 500, each 503 worded anew, want 2:\n%s", got, logs.String())
	}
	if !strings.Contains(logs.String(), "req-1") || !strings.Contains(logs.String(), "unexpected status 500") {
		t.Errorf("the lines do not give the first 503's and the 500's status as the server worded it:\n%s", logs.String())
	}
}

func TestEngineDeadlineLoggedWhenItLasts(t *testing.T) {
	var logs syncbuf.Buffer
	c := &enginesCollector{state: map[string]targetState{}, detected: map[string]string{}, logger: slog.New(slog.NewTextHandler(&logs, nil))}
	const target = "http://127.0.0.1:1/metrics"
	late := fmt.Errorf("Get %q: %w", target, context.DeadlineExceeded)
	c.logChange(target, nil)
	c.logChange(target, late)
	c.logChange(target, nil)
	c.logChange(target, late)
	if got := strings.Count(logs.String(), "inference engine"); got != 1 {
		t.Errorf("%d lines for a target late at one scrape in two, want 1 (scraped):\n%s", got, logs.String())
	}
	c.late[target] = c.late[target].Add(-2 * time.Second) // late since 2 s
	c.logChange(target, late)
	c.logChange(target, late)
	if got := strings.Count(logs.String(), "inference engine not scraped"); got != 1 {
		t.Errorf("%d not-scraped lines for a target late for 2 s, want 1:\n%s", got, logs.String())
	}
	c.logChange(target, nil)
	c.logChange(target, errors.New("unexpected status 500"))
	if got := strings.Count(logs.String(), "inference engine not scraped"); got != 2 {
		t.Errorf("a 500 after it answered again: %d not-scraped lines, want 2:\n%s", got, logs.String())
	}
}
