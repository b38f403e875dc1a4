package engines

import "testing"

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
