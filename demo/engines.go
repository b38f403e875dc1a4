package demo

import (
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/klauspost/compress/gzip"
)

// EngineSpec is an inference engine a scenario's pod serves. The demo serves
// its /metrics on localhost, in the engine's own metric names, and annotates
// the pod so that the exporter discovers it as it would on a cluster.
type EngineSpec struct {
	Pod    string `yaml:"pod"`    // namespace/name
	Engine string `yaml:"engine"` // vllm or triton
	Model  string `yaml:"model"`
	// RequestsPerSecond is the load; requests, tokens and latencies follow.
	// 0 is an engine nobody sends requests to: loaded, holding its GPUs,
	// with nothing running or queued.
	RequestsPerSecond float64 `yaml:"requests_per_second"`
}

var engineWriters = map[string]func(*strings.Builder, *histograms, EngineSpec, float64, float64){
	"vllm":   writeVLLM,
	"triton": writeTriton,
}

func (e EngineSpec) validate(pods map[string]bool) error {
	if _, ok := engineWriters[e.Engine]; !ok {
		return fmt.Errorf("engine: %q; the demo serves vllm or triton", e.Engine)
	}
	if !pods[e.Pod] {
		return fmt.Errorf("pod: %q is not in kubernetes.pods", e.Pod)
	}
	if e.Model == "" {
		return fmt.Errorf("model: missing")
	}
	if !(e.RequestsPerSecond >= 0 && e.RequestsPerSecond <= 1e6) {
		return fmt.Errorf("requests_per_second: %g is not in [0, 1e6]", e.RequestsPerSecond)
	}
	return nil
}

// startEngines serves each engine on a free localhost port and points its
// pod at it: IP 127.0.0.1 and the discovery annotations.
func (s *Scenario) startEngines(start time.Time) ([]*http.Server, error) {
	var servers []*http.Server
	for _, spec := range s.Engines {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			closeServers(servers)
			return nil, err
		}
		srv := &http.Server{Handler: engineHandler(spec, start), ReadHeaderTimeout: 5 * time.Second}
		go srv.Serve(l)
		servers = append(servers, srv)
		port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
		for i := range s.Kubernetes.Pods {
			p := &s.Kubernetes.Pods[i]
			if p.Namespace+"/"+p.Name != spec.Pod {
				continue
			}
			p.IP = "127.0.0.1"
			if p.Annotations == nil {
				p.Annotations = map[string]string{}
			}
			p.Annotations["xpu-exporter.io/engine"] = spec.Engine
			p.Annotations["xpu-exporter.io/port"] = port
		}
	}
	return servers, nil
}

func closeServers(servers []*http.Server) {
	for _, srv := range servers {
		srv.Close()
	}
}

func engineHandler(spec EngineSpec, start time.Time) http.Handler {
	var lastSize atomic.Int64
	h := &histograms{}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elapsed := time.Since(start).Seconds()
		// Load swings around its mean over 10 minutes; an engine without
		// traffic has none.
		load := 0.0
		if spec.RequestsPerSecond > 0 {
			load = 0.6 + 0.4*math.Sin(2*math.Pi*elapsed/600)
		}
		// Sized like the last answer: the body is written in the exporter's
		// process, and growing it line by line counted in its cost.
		var b strings.Builder
		b.Grow(int(lastSize.Load()))
		engineWriters[spec.Engine](&b, h, spec, elapsed, load)
		lastSize.Store(int64(b.Len()))
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		if spec.Engine == "vllm" && acceptsGzip(r.Header.Get("Accept-Encoding")) {
			// vLLM serves prometheus_client's exposition, gzipped at
			// gzip.compress's level 9 for a scraper that accepts gzip
			// (exposition.py, _bake_output).
			w.Header().Set("Content-Encoding", "gzip")
			zw, _ := gzip.NewWriterLevel(w, gzip.BestCompression)
			io.WriteString(zw, b.String())
			zw.Close()
			return
		}
		io.WriteString(w, b.String())
	})
}

// acceptsGzip is prometheus_client's gzip_accepted: a coding of the
// Accept-Encoding list, its parameters cut, is gzip in any case.
func acceptsGzip(header string) bool {
	for coding := range strings.SplitSeq(header, ",") {
		c, _, _ := strings.Cut(coding, ";")
		if strings.EqualFold(strings.TrimSpace(c), "gzip") {
			return true
		}
	}
	return false
}

// lognormalCDF is the share of observations at most x of a latency whose
// median is median and whose spread is sigma.
func lognormalCDF(x, median, sigma float64) float64 {
	if x <= 0 {
		return 0
	}
	return 0.5 * math.Erfc(-(math.Log(x)-math.Log(median))/(sigma*math.Sqrt2))
}

// histograms are an engine's latency histograms as observed so far. An
// engine's histogram counts each observation once, in the buckets of the
// latency it had: its buckets and sum only grow, whatever the latency does
// later. Computed anew from the moment's latency, they fell when the load
// did, and Prometheus took each fall for a restart of the engine (found by
// probe17-http: the demo's mean queue time read 73.6 s, where its
// latencies never exceed 0.3 s).
type histograms struct {
	mu sync.Mutex
	m  map[string]*histogramState
}

type histogramState struct {
	count, sum float64
	buckets    []float64
}

// state is what name has counted so far; h.mu is held.
func (h *histograms) state(name string, buckets int) *histogramState {
	if h.m == nil {
		h.m = map[string]*histogramState{}
	}
	st := h.m[name]
	if st == nil {
		st = &histogramState{buckets: make([]float64, buckets)}
		h.m[name] = st
	}
	return st
}

// write writes the histogram name, whose observations up to now number
// count; those since its last write have a lognormal latency of median
// and sigma.
func (h *histograms) write(b *strings.Builder, name, labels string, bounds []float64, count, median, sigma float64) {
	h.mu.Lock()
	st := h.state(name, len(bounds))
	if n := count - st.count; n > 0 {
		for i, le := range bounds {
			st.buckets[i] += n * lognormalCDF(le, median, sigma)
		}
		st.sum += n * median * math.Exp(sigma*sigma/2)
		st.count = count
	}
	fmt.Fprintf(b, "# HELP %s Demo latency histogram.\n# TYPE %s histogram\n", name, name)
	for i, le := range bounds {
		fmt.Fprintf(b, "%s_bucket{%s,le=\"%g\"} %g\n", name, labels, le, math.Floor(st.buckets[i]))
	}
	fmt.Fprintf(b, "%s_bucket{%s,le=\"+Inf\"} %g\n", name, labels, math.Floor(st.count))
	fmt.Fprintf(b, "%s_sum{%s} %g\n", name, labels, st.sum)
	fmt.Fprintf(b, "%s_count{%s} %g\n", name, labels, math.Floor(st.count))
	h.mu.Unlock()
}

// writeVLLM writes vLLM V1's metrics (vllm:* names, model_name label).
func writeVLLM(b *strings.Builder, h *histograms, e EngineSpec, elapsed, load float64) {
	l := fmt.Sprintf(`engine="0",model_name=%q`, e.Model)
	done := e.RequestsPerSecond * elapsed * 0.6
	gauge := func(name string, v float64) {
		fmt.Fprintf(b, "# HELP %s Demo gauge.\n# TYPE %s gauge\n%s{%s} %g\n", name, name, name, l, v)
	}
	counter := func(name, extra string, v float64) {
		fmt.Fprintf(b, "# HELP %s Demo counter.\n# TYPE %s counter\n%s{%s%s} %g\n", name, name, name, l, extra, math.Floor(v))
	}
	// An idle engine (no load) runs nothing and holds no KV cache.
	running, kvCache := 0.0, 0.0
	if load > 0 {
		running, kvCache = math.Round(4+20*load), 0.3+0.62*load
	}
	gauge("vllm:num_requests_running", running)
	gauge("vllm:num_requests_waiting", math.Round(math.Max(0, 12*(load-0.5))))
	gauge("vllm:kv_cache_usage_perc", kvCache)
	counter("vllm:prompt_tokens_total", "", done*512)
	counter("vllm:generation_tokens_total", "", done*256)
	counter("vllm:num_preemptions_total", "", done*0.002)
	fmt.Fprintf(b, "# HELP vllm:request_success_total Demo counter.\n# TYPE vllm:request_success_total counter\n")
	for reason, share := range map[string]float64{"stop": 0.9, "length": 0.08, "abort": 0.02} {
		fmt.Fprintf(b, "vllm:request_success_total{%s,finished_reason=%q} %g\n", l, reason, math.Floor(done*share))
	}
	latency := []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80}
	h.write(b, "vllm:time_to_first_token_seconds", l, latency, done, 0.12+0.3*load, 0.6)
	h.write(b, "vllm:inter_token_latency_seconds", l, latency, done*256, 0.02+0.02*load, 0.4)
	h.write(b, "vllm:e2e_request_latency_seconds", l, latency, done, 4+4*load, 0.5)
	h.write(b, "vllm:request_queue_time_seconds", l, latency, done, 0.01+0.2*load, 0.8)
}

// total is the counter name of count events so far, those since its last
// call each worth per: a sum of durations only grows, whatever the
// duration of a request does later.
func (h *histograms) total(name string, count, per float64) float64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	st := h.state(name, 0)
	if n := count - st.count; n > 0 {
		st.sum += n * per
		st.count = count
	}
	return st.sum
}

// writeTriton writes Triton's metrics (nv_inference_*, µs counters).
func writeTriton(b *strings.Builder, h *histograms, e EngineSpec, elapsed, load float64) {
	l := fmt.Sprintf(`model=%q,version="1"`, e.Model)
	done := e.RequestsPerSecond * elapsed * 0.6
	counter := func(name string, v float64) {
		fmt.Fprintf(b, "# HELP %s Demo counter.\n# TYPE %s counter\n%s{%s} %g\n", name, name, name, l, math.Floor(v))
	}
	counter("nv_inference_request_success", done)
	counter("nv_inference_request_failure", done*0.001)
	counter("nv_inference_count", done*8)
	counter("nv_inference_exec_count", done)
	// Durations summed over the requests, each with the load it met
	// (found by probe17-http: done × the moment's duration fell with the
	// load, and Prometheus took each fall for a restart).
	counter("nv_inference_request_duration_us", h.total("request_duration", done, 9000+6000*load))
	counter("nv_inference_queue_duration_us", h.total("queue_duration", done, 300+900*load))
	counter("nv_inference_compute_infer_duration_us", done*7000)
	fmt.Fprintf(b, "# HELP nv_inference_pending_request_count Demo gauge.\n# TYPE nv_inference_pending_request_count gauge\nnv_inference_pending_request_count{%s} %g\n", l, math.Round(8*load))
}
