package demo

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
)

// scrapeEngine returns the exposition an engine's handler serves, elapsed
// after its start.
func scrapeEngine(t *testing.T, spec EngineSpec, elapsed time.Duration) string {
	t.Helper()
	rec := httptest.NewRecorder()
	engineHandler(spec, time.Now().Add(-elapsed)).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	return rec.Body.String()
}

// An engine without traffic (requests_per_second: 0) is valid and serves an
// idle engine: no request, token or batch anywhere, so the answer book's
// idle-engine view finds it; a busy one keeps its load.
func TestIdleEngine(t *testing.T) {
	pods := map[string]bool{"ray/worker": true}
	idle := EngineSpec{Pod: "ray/worker", Engine: "vllm", Model: "m", RequestsPerSecond: 0}
	if err := idle.validate(pods); err != nil {
		t.Fatalf("requests_per_second 0: %v", err)
	}
	for _, rps := range []float64{-1, 2e6} {
		bad := idle
		bad.RequestsPerSecond = rps
		if err := bad.validate(pods); err == nil || !strings.Contains(err.Error(), "is not in [0, 1e6]") {
			t.Errorf("requests_per_second %g: error %v", rps, err)
		}
	}
	body := scrapeEngine(t, idle, time.Minute)
	for _, want := range []string{
		`vllm:num_requests_running{engine="0",model_name="m"} 0`,
		`vllm:num_requests_waiting{engine="0",model_name="m"} 0`,
		`vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0`,
		`vllm:generation_tokens_total{engine="0",model_name="m"} 0`,
		`vllm:request_success_total{engine="0",model_name="m",finished_reason="stop"} 0`,
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("idle engine does not serve %q:\n%s", want, body)
		}
	}
	// The busy engine's counters, 60 s in at mean load 0.6: 60% of the
	// requests finished (done = rps × elapsed × 0.6), 6 × 60 × 0.6 = 216,
	// each generating 256 tokens: 216 × 256 = 55296; running requests
	// 4 + 20 × 0.6 = 16.
	busy := idle
	busy.RequestsPerSecond = 6
	var b strings.Builder
	writeVLLM(&b, &histograms{}, busy, 60, 0.6)
	for _, want := range []string{
		`vllm:generation_tokens_total{engine="0",model_name="m"} 55296`,
		`vllm:num_requests_running{engine="0",model_name="m"} 16`,
	} {
		if !strings.Contains(b.String(), want+"\n") {
			t.Errorf("busy engine does not serve %q:\n%s", want, b.String())
		}
	}
}

// An engine's latency histogram counts each observation once, with the
// latency it had: when the latency rises, the lower buckets keep what they
// counted (probe17-http D1: computed anew from the moment's latency they
// fell, and Prometheus took each fall for a restart). 100 observations at
// median 0.1 s, sigma 0.5: at most 0.25 s, Φ(ln(2.5)/0.5) = Φ(1.8326) =
// 0.9666 of them, 96.66; 100 more at median 1 s: Φ(ln(0.25)/0.5) =
// Φ(-2.7726) = 0.0028 of them, 0.28. The bucket: floor(96.94) = 96, where
// the moment's latency alone gives floor(200 × 0.0028) = 0.
func TestEngineHistogramsOnlyGrow(t *testing.T) {
	var h histograms
	bucket := func(count, median float64) string {
		var b strings.Builder
		h.write(&b, "lat", `m="x"`, []float64{0.25, 1}, count, median, 0.5)
		for _, line := range strings.Split(b.String(), "\n") {
			if strings.HasPrefix(line, `lat_bucket{m="x",le="0.25"} `) {
				return strings.TrimPrefix(line, `lat_bucket{m="x",le="0.25"} `)
			}
		}
		t.Fatalf("no le=0.25 bucket in\n%s", b.String())
		return ""
	}
	if got := bucket(100, 0.1); got != "96" {
		t.Errorf("after 100 at 0.1 s: %s, want 96", got)
	}
	if got := bucket(200, 1); got != "96" {
		t.Errorf("after 100 more at 1 s: %s, want floor(96.66 + 0.28) = 96", got)
	}
	// No new observation: nothing moves.
	if got := bucket(200, 0.01); got != "96" {
		t.Errorf("with no new observation: %s, want 96", got)
	}
}

// Triton's duration counters sum each request's duration with the load it
// met: 100 requests of 1,000 µs, then 100 more of 500 µs, are 100 × 1,000
// + 100 × 500 = 150,000 µs, where the moment's duration gave 200 × 500 =
// 100,000, a fall Prometheus takes for a restart (probe17-http D1).
func TestEngineDurationCountersOnlyGrow(t *testing.T) {
	var h histograms
	if got := h.total("queue", 100, 1000); got != 100000 {
		t.Errorf("after 100 of 1,000 µs: %g, want 100,000", got)
	}
	if got := h.total("queue", 200, 500); got != 150000 {
		t.Errorf("after 100 more of 500 µs: %g, want 150,000", got)
	}
}

// TestEngineCompressesAsPrometheusClient: the vLLM stand-in gzips for a
// scraper that accepts gzip, as vLLM's prometheus_client does
// (exposition.py, _bake_output), and serves the text as it is to one that
// asks for identity or names no coding; Triton's does not compress.
func TestEngineCompressesAsPrometheusClient(t *testing.T) {
	vllm := EngineSpec{Pod: "ray/worker", Engine: "vllm", Model: "m", RequestsPerSecond: 1}
	triton := EngineSpec{Pod: "ray/worker", Engine: "triton", Model: "m", RequestsPerSecond: 1}
	for _, tc := range []struct {
		spec     EngineSpec
		accept   string
		gzipped  bool
		contains string
	}{
		{vllm, "gzip", true, "vllm:num_requests_running"},
		{vllm, "deflate, GZIP;q=0.5", true, "vllm:num_requests_running"},
		{vllm, "identity", false, "vllm:num_requests_running"},
		{vllm, "", false, "vllm:num_requests_running"},
		{triton, "gzip", false, "nv_inference_request_success"},
	} {
		req := httptest.NewRequest("GET", "/metrics", nil)
		if tc.accept != "" {
			req.Header.Set("Accept-Encoding", tc.accept)
		}
		rec := httptest.NewRecorder()
		engineHandler(tc.spec, time.Now().Add(-time.Minute)).ServeHTTP(rec, req)
		body := rec.Body.String()
		if got := rec.Header().Get("Content-Encoding") == "gzip"; got != tc.gzipped {
			t.Errorf("%s, Accept-Encoding %q: gzipped %v, want %v", tc.spec.Engine, tc.accept, got, tc.gzipped)
			continue
		}
		if tc.gzipped {
			zr, err := gzip.NewReader(rec.Body)
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(zr)
			if err != nil {
				t.Fatal(err)
			}
			body = string(b)
		}
		if !strings.Contains(body, tc.contains) {
			t.Errorf("%s, Accept-Encoding %q: body without %s", tc.spec.Engine, tc.accept, tc.contains)
		}
	}
}
