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
