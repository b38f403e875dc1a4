package demo

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"
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
	writeVLLM(&b, busy, 60, 0.6)
	for _, want := range []string{
		`vllm:generation_tokens_total{engine="0",model_name="m"} 55296`,
		`vllm:num_requests_running{engine="0",model_name="m"} 16`,
	} {
		if !strings.Contains(b.String(), want+"\n") {
			t.Errorf("busy engine does not serve %q:\n%s", want, b.String())
		}
	}
}
