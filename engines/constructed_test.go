package engines

import (
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
)

// TestConstructedFixtures normalises the answers in
// fixtures/engines/constructed, written in the shape each engine's source
// gives its metrics (see the README there), and compares the result with
// what was worked out by hand from their raw numbers.
func TestConstructedFixtures(t *testing.T) {
	for _, tc := range []struct {
		file   string
		engine Engine
		want   string
	}{
		{
			// With --enable-priority-scheduling SGLang writes the running
			// and queued counts twice: the total under priority="", and a
			// breakdown under priority="0", "1", "None" (found by probing:
			// they were added up, 10 running where 5 run). Running: the
			// total 5, not 5 + 3 + 2 = 10. Waiting: 4, not 4 + 3 + 0 + 1.
			// The tokenizer's counters carry each request's own priority,
			// with no total beside them: 100 + 700 + 200 = 1000 prompt
			// tokens.
			file:   "sglang-2026-priority-scheduling.prom",
			engine: SGLang,
			want: `# TYPE xpu_inference_kv_cache_usage_ratio gauge
xpu_inference_kv_cache_usage_ratio{model="qwen"} 0.4
# TYPE xpu_inference_requests_running gauge
xpu_inference_requests_running{model="qwen"} 5
# TYPE xpu_inference_requests_waiting gauge
xpu_inference_requests_waiting{model="qwen"} 4
# TYPE xpu_inference_tokens_total counter
xpu_inference_tokens_total{model="qwen",type="prompt"} 1000
`,
		},
		{
			// SGLang, TP=2, default flags: every TP rank has a scheduler
			// collector labelled with its tp_rank, only attn_tp_rank 0
			// writes the gauges, but every rank observes the queue time
			// of the requests it schedules, and TP ranks schedule the
			// same requests (found by probing: the ranks were added up,
			// 20 requests queued where 10 were). One rank's histogram is
			// read: le=0.1 7, le=1 10, count 10, sum 1.25, not 14, 20,
			// 20 and 2.5. Running 6 and waiting 2 come from rank 0 alone;
			// the tokenizer's e2e histogram (no rank) also counts 10.
			file:   "sglang-2026-tp2.prom",
			engine: SGLang,
			want: `# TYPE xpu_inference_queue_time_seconds histogram
xpu_inference_queue_time_seconds_bucket{le="0.1",model="m"} 7
xpu_inference_queue_time_seconds_bucket{le="1",model="m"} 10
xpu_inference_queue_time_seconds_bucket{le="+Inf",model="m"} 10
xpu_inference_queue_time_seconds_sum{model="m"} 1.25
xpu_inference_queue_time_seconds_count{model="m"} 10
# TYPE xpu_inference_request_duration_seconds histogram
xpu_inference_request_duration_seconds_bucket{le="10",model="m"} 8
xpu_inference_request_duration_seconds_bucket{le="+Inf",model="m"} 10
xpu_inference_request_duration_seconds_sum{model="m"} 30
xpu_inference_request_duration_seconds_count{model="m"} 10
# TYPE xpu_inference_requests_running gauge
xpu_inference_requests_running{model="m"} 6
# TYPE xpu_inference_requests_waiting gauge
xpu_inference_requests_waiting{model="m"} 2
`,
		},
		{
			// SGLang, DP attention with dp_size=2 over tp_size=4 and
			// --enable-metrics-for-all-schedulers: every rank writes the
			// gauges, each under its tp_rank and the dp_rank of its
			// attention group (tp 0 and 1 in dp 0, tp 2 and 3 in dp 1).
			// The ranks of one group hold the same batch; the groups hold
			// different requests. Found by probing: the ranks were added
			// up, 12 running at TP=2 where 6 ran.
			// Running: 6 (dp 0) + 3 (dp 1) = 9, not 6+6+3+3 = 18.
			// Waiting: 2 + 1 = 3, not 6. KV: the fullest, 0.5.
			// Queue time: dp 0's ranks agree (le=0.1 7, le=1 10, sum
			// 1.25); of dp 1's, tp 3 is one observation ahead of tp 2
			// (4 against 3, as when a scrape falls between the two
			// ranks' writes) and is read, the furthest along: le=0.1
			// 7 + 3 = 10, le=1 and count 10 + 4 = 14, sum 1.25 + 0.5 =
			// 1.75 (all four ranks added made 19, 27 and 3.4).
			file:   "sglang-2026-dp2-tp4-all-schedulers.prom",
			engine: SGLang,
			want: `# TYPE xpu_inference_kv_cache_usage_ratio gauge
xpu_inference_kv_cache_usage_ratio{model="m"} 0.5
# TYPE xpu_inference_queue_time_seconds histogram
xpu_inference_queue_time_seconds_bucket{le="0.1",model="m"} 10
xpu_inference_queue_time_seconds_bucket{le="1",model="m"} 14
xpu_inference_queue_time_seconds_bucket{le="+Inf",model="m"} 14
xpu_inference_queue_time_seconds_sum{model="m"} 1.75
xpu_inference_queue_time_seconds_count{model="m"} 14
# TYPE xpu_inference_requests_running gauge
xpu_inference_requests_running{model="m"} 9
# TYPE xpu_inference_requests_waiting gauge
xpu_inference_requests_waiting{model="m"} 3
`,
		},
		{
			// SGLang counts requests retracted from the running batch to
			// free KV cache, on every TP rank: one rank's 7, not 7 + 7,
			// and not the gauge of those retracted now (2). Aborted
			// requests (3) are not read: no counter says how many of the
			// 40 processed succeeded, and aborted alone would read as an
			// error ratio of 100 %.
			file:   "sglang-2026-tp2-retractions.prom",
			engine: SGLang,
			want: `# TYPE xpu_inference_preemptions_total counter
xpu_inference_preemptions_total{model="m"} 7
`,
		},
		{
			// vLLM 0.32 counts requests refused at admission (HTTP 503)
			// apart from those that finished: rejected 6 + 4 = 10 beside
			// success 90 + 5 = 95, aborted 2, error 1.
			file:   "vllm-0.32-admission-rejections.prom",
			engine: VLLM,
			want: `# TYPE xpu_inference_requests_total counter
xpu_inference_requests_total{model="m",outcome="aborted"} 2
xpu_inference_requests_total{model="m",outcome="error"} 1
xpu_inference_requests_total{model="m",outcome="rejected"} 10
xpu_inference_requests_total{model="m",outcome="success"} 95
`,
		},
	} {
		t.Run(tc.file, func(t *testing.T) {
			samples, err := Normalize(tc.engine, parseFixture(t, "constructed/"+tc.file), "")
			if err != nil {
				t.Fatalf("Normalize: %v", err)
			}
			if got := render(samples); got != tc.want {
				t.Errorf("got:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
}

// TestTritonVLLMBackend: Triton's vLLM backend serves vllm: families
// labelled model and version, as Triton labels its own, beside Triton's
// nv_inference_ families (vllm_backend src/utils/metrics.py, labels from
// src/model.py _setup_metrics). Found by probing: such an endpoint was
// detected as vLLM, whose mapping reads model_name, and every model came
// out as model="" (running 3 + 4 = 7, prompt tokens 100 + 200); configured
// as triton, the vllm: families were not read at all. They are Triton's,
// per model and version.
func TestTritonVLLMBackend(t *testing.T) {
	type want struct {
		name   string
		model  string // model/version
		labels map[string]string
		value  float64 // a gauge's or counter's value, a histogram's sum
		count  uint64  // a histogram's count
		bucket [2]float64
	}
	for _, tc := range []struct {
		file string
		want []want
	}{{
		// The backend's families at its HEAD (8de0c148, 2026-01-09):
		// token counters and the TTFT, per-token, e2e and token-count
		// histograms; no gauges.
		file: "triton-vllm-backend-two-models.prom",
		want: []want{
			{name: tokensTotal, model: "llama/1", labels: map[string]string{"type": "prompt"}, value: 1800},
			{name: tokensTotal, model: "llama/1", labels: map[string]string{"type": "generation"}, value: 4800},
			{name: tokensTotal, model: "mistral/2", labels: map[string]string{"type": "prompt"}, value: 2000},
			{name: tokensTotal, model: "mistral/2", labels: map[string]string{"type": "generation"}, value: 3000},
			// 60 of llama's 100 first tokens came within 40 ms.
			{name: timeToFirstToken, model: "llama/1", value: 3.2, count: 100, bucket: [2]float64{0.04, 60}},
			{name: timeToFirstToken, model: "mistral/2", value: 1.5, count: 10, bucket: [2]float64{0.25, 8}},
			// time_per_output_token_seconds is one observation per token
			// (inter_token_latencies_iter).
			{name: interTokenLatency, model: "llama/1", value: 47, count: 4700, bucket: [2]float64{0.01, 4000}},
			{name: interTokenLatency, model: "mistral/2", value: 59.8, count: 2990, bucket: [2]float64{0.05, 2990}},
			// vLLM's e2e histogram, with buckets, is read rather than
			// Triton's +Inf-only one from nv_inference_request_duration_us
			// (60.5 s over 100): 95 of llama's 100 took 1 s or less.
			{name: requestDuration, model: "llama/1", value: 60, count: 100, bucket: [2]float64{1, 95}},
			{name: requestDuration, model: "mistral/2", value: 25, count: 10, bucket: [2]float64{2.5, 9}},
			// No vLLM queue time at HEAD: Triton's, 12,000 µs = 0.012 s
			// over the 100 successes, 3,000 µs = 0.003 s over 10.
			{name: queueTime, model: "llama/1", value: 0.012, count: 100, bucket: [2]float64{math.Inf(1), 100}},
			{name: queueTime, model: "mistral/2", value: 0.003, count: 10, bucket: [2]float64{math.Inf(1), 10}},
			// Outcomes from Triton alone: REJECTED 2, CANCELED 1.
			{name: requestsTotal, model: "llama/1", labels: map[string]string{"outcome": "success"}, value: 100},
			{name: requestsTotal, model: "llama/1", labels: map[string]string{"outcome": "rejected"}, value: 2},
			{name: requestsTotal, model: "llama/1", labels: map[string]string{"outcome": "aborted"}, value: 1},
			{name: requestsTotal, model: "mistral/2", labels: map[string]string{"outcome": "error"}, value: 3},
			{name: requestsWaiting, model: "mistral/2", value: 2},
		},
	}, {
		// The gauges, preemptions and queue time the backend's pull
		// request #92 (9b96279) adds, under the same labels.
		file: "triton-vllm-backend-pr92-gauges.prom",
		want: []want{
			{name: requestsRunning, model: "llama/1", value: 3},
			{name: requestsRunning, model: "mistral/2", value: 4},
			// vLLM's queue, not Triton's pending count (0 for both).
			{name: requestsWaiting, model: "llama/1", value: 1},
			{name: requestsWaiting, model: "mistral/2", value: 6},
			{name: kvCacheUsage, model: "llama/1", value: 0.9},
			{name: kvCacheUsage, model: "mistral/2", value: 0.1},
			{name: preemptionsTotal, model: "llama/1", value: 4},
			{name: preemptionsTotal, model: "mistral/2", value: 0},
			// vLLM's queue-time histogram, not Triton's +Inf-only one
			// (900 µs over 5): 4 of llama's 5 waited 0.3 s or less.
			{name: queueTime, model: "llama/1", value: 0.75, count: 5, bucket: [2]float64{0.3, 4}},
			{name: queueTime, model: "mistral/2", value: 6.5, count: 7, bucket: [2]float64{0.8, 3}},
		},
	}} {
		t.Run(tc.file, func(t *testing.T) {
			families := parseFixture(t, "constructed/"+tc.file)
			if e, err := Detect(families); e != Triton || err != nil {
				t.Errorf("Detect = %q, %v; want triton", e, err)
			}
			if others := Others(Triton, families); len(others) != 0 {
				t.Errorf("Others = %v: the vLLM backend's families are Triton's, and read", others)
			}
			samples, err := Normalize(Triton, families, "")
			if err != nil {
				t.Fatalf("Normalize: %v", err)
			}
			for _, s := range samples {
				if s.Labels[modelLabel] == "" || s.Labels[modelVersionLabel] == "" {
					t.Errorf("%s%s: no model or version", s.Name, labelKey(s.Labels))
				}
			}
			for _, w := range tc.want {
				model, version, _ := strings.Cut(w.model, "/")
				labels := map[string]string{modelLabel: model, modelVersionLabel: version}
				maps.Copy(labels, w.labels)
				i := slices.IndexFunc(samples, func(s Sample) bool { return s.Name == w.name && maps.Equal(s.Labels, labels) })
				if i < 0 {
					t.Errorf("no %s%s", w.name, labelKey(labels))
					continue
				}
				s := samples[i]
				got := s.Value
				if s.Kind == Histogram {
					got = s.Sum
					b := slices.IndexFunc(s.Buckets, func(b Bucket) bool { return b.UpperBound == w.bucket[0] })
					if s.Count != w.count || b < 0 || float64(s.Buckets[b].Count) != w.bucket[1] {
						t.Errorf("%s%s: count %d, buckets %+v; want count %d, le=%g %g", w.name, labelKey(labels), s.Count, s.Buckets, w.count, w.bucket[0], w.bucket[1])
					}
				}
				if math.Abs(got-w.value) > 1e-9 {
					t.Errorf("%s%s = %v, want %v", w.name, labelKey(labels), got, w.value)
				}
			}
		})
	}
}
