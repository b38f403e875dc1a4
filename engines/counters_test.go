package engines

import (
	"bytes"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// correctedScrape parses body, corrects it with k at time at, and
// normalizes it as vLLM's.
func correctedScrape(t *testing.T, k *Corrector, at time.Time, body string) []Sample {
	t.Helper()
	families, err := parse(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	k.now = func() time.Time { return at }
	if err := k.Correct(families, VLLM); err != nil {
		t.Fatal(err)
	}
	samples, err := Normalize(VLLM, families, "")
	if err != nil {
		t.Fatal(err)
	}
	return samples
}

func value(t *testing.T, samples []Sample, name string) Sample {
	t.Helper()
	for _, s := range samples {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no %s in %+v", name, samples)
	return Sample{}
}

func tokens(cores ...int) string {
	var b strings.Builder
	b.WriteString("# TYPE vllm:generation_tokens counter\n")
	for i, v := range cores {
		if v >= 0 {
			fmt.Fprintf(&b, "vllm:generation_tokens_total{engine=\"%d\",model_name=\"m\"} %d\n", i, v)
		}
	}
	return b.String()
}

// TestCorrectorKeepsSummedCountersMonotonic: two vLLM V1 engine cores'
// token counters are added up into one series; one core restarting, or
// going away, must not make the sum go down, which Prometheus would read as
// a reset of the whole sum (found by probing: 1,000,040 tokens counted where
// 30 were made).
func TestCorrectorKeepsSummedCountersMonotonic(t *testing.T) {
	k := NewCorrector()
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	steps := []struct {
		name  string
		after time.Duration
		cores []int // -1: the core's series is gone
		want  float64
	}{
		// 1,000,010 + 1,000,010.
		{"both cores", 0, []int{1_000_010, 1_000_010}, 2_000_020},
		// Core 1 restarted and counted 20 since: its 1,000,010 before the
		// restart is kept, 1,000,020 + (1,000,010 + 20) = 2,000,050, 30 more.
		{"core 1 restarted", 15 * time.Second, []int{1_000_020, 20}, 2_000_050},
		// Core 1 is gone: its last 1,000,030 stays in the sum,
		// 1,000,030 + 1,000,030 = 2,000,060, the 10 core 0 made.
		{"core 1 gone", 30 * time.Second, []int{1_000_030, -1}, 2_000_060},
		// Back within the hour at 5: a restart again, 1,000,030 kept,
		// 1,000,040 + 1,000,035 = 2,000,075.
		{"core 1 back", 45 * time.Second, []int{1_000_040, 5}, 2_000_075},
		// Gone again: half an hour on, its last 1,000,035 is still in the
		// sum, 1,000,050 + 1,000,035 = 2,000,085.
		{"core 1 gone half an hour", 45*time.Second + 30*time.Minute, []int{1_000_050, -1}, 2_000_085},
		// Gone for over an hour: its last 1,000,035 is handed to core 0,
		// the live part it was added up with, so the sum goes on rather
		// than drop (read as a reset): 1,000,060 + 1,000,035 = 2,000,095.
		{"core 1 gone past the hour", 45*time.Second + 2*time.Hour, []int{1_000_060, -1}, 2_000_095},
		// And on: core 0 at 1,000,070 carries it, 2,000,105.
		{"an hour and more on", 45*time.Second + 2*time.Hour + 15*time.Second, []int{1_000_070, -1}, 2_000_105},
		// Core 1 back at 3 is a new series: 2,000,105 + 3 = 2,000,108
		// (core 0 at 1,000,070 with 1,000,035 handed to it, core 1 at 3).
		{"core 1 back after the hour", 45*time.Second + 2*time.Hour + 30*time.Second, []int{1_000_070, 3}, 2_000_108},
	}
	for _, s := range steps {
		got := value(t, correctedScrape(t, k, t0.Add(s.after), tokens(s.cores...)), "xpu_inference_tokens_total")
		if got.Value != s.want {
			t.Errorf("%s: %v tokens, want %v", s.name, got.Value, s.want)
		}
	}
}

// TestCorrectorGoneModelEnds: a vanished series is kept in its sum only
// while its model is still in its family's answer; another model's series
// are not its parts. Found by probe D (PD2): a model that left was served
// for an hour, and counted towards --engines.max-models, whenever any
// other model remained, so an engine rotating LoRA adapters, two in each
// answer, went down with "101 models".
func TestCorrectorGoneModelEnds(t *testing.T) {
	vllmTokens := func(series ...string) string {
		return "# TYPE vllm:generation_tokens counter\n" + strings.Join(series, "\n") + "\n"
	}
	tritonSuccess := func(series ...string) string {
		return "# TYPE nv_inference_request_success counter\n" + strings.Join(series, "\n") + "\n"
	}
	type step struct {
		after time.Duration
		body  string
		want  map[string]float64 // by model, and model_version where there is one
	}
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		engine Engine
		family string
		steps  []step
	}{{
		name: "a model unloaded", engine: VLLM, family: tokensTotal,
		steps: []step{
			{0, vllmTokens(`vllm:generation_tokens_total{engine="0",model_name="a"} 100`, `vllm:generation_tokens_total{engine="0",model_name="b"} 50`),
				map[string]float64{"a": 100, "b": 50}},
			// b unloaded: it ends at once, a keeps its own 110.
			{15 * time.Second, vllmTokens(`vllm:generation_tokens_total{engine="0",model_name="a"} 110`),
				map[string]float64{"a": 110}},
			// b loaded again at 7: a new series, the engine's 7.
			{30 * time.Second, vllmTokens(`vllm:generation_tokens_total{engine="0",model_name="a"} 120`, `vllm:generation_tokens_total{engine="0",model_name="b"} 7`),
				map[string]float64{"a": 120, "b": 7}},
		},
	}, {
		// The probe's case: the base model and the one adapter served
		// now, nothing of adapter-1 once it left.
		name: "LoRA adapters rotated", engine: VLLM, family: tokensTotal,
		steps: []step{
			{0, vllmTokens(`vllm:generation_tokens_total{model_name="base"} 1`, `vllm:generation_tokens_total{model_name="adapter-1"} 5`),
				map[string]float64{"base": 1, "adapter-1": 5}},
			{15 * time.Second, vllmTokens(`vllm:generation_tokens_total{model_name="base"} 2`, `vllm:generation_tokens_total{model_name="adapter-2"} 5`),
				map[string]float64{"base": 2, "adapter-2": 5}},
			{30 * time.Second, vllmTokens(`vllm:generation_tokens_total{model_name="base"} 3`, `vllm:generation_tokens_total{model_name="adapter-3"} 4`),
				map[string]float64{"base": 3, "adapter-3": 4}},
		},
	}, {
		// Model a's core 1 left with model b, which only it served: a
		// still answers, so core 1 stays in a's sum, 1,000 + 500 = 1,500,
		// then 1,010 + 500 = 1,510; b ends.
		name: "a core gone with a model of its own", engine: VLLM, family: tokensTotal,
		steps: []step{
			{0, vllmTokens(`vllm:generation_tokens_total{engine="0",model_name="a"} 990`, `vllm:generation_tokens_total{engine="1",model_name="a"} 500`,
				`vllm:generation_tokens_total{engine="1",model_name="b"} 70`),
				map[string]float64{"a": 1490, "b": 70}},
			{15 * time.Second, vllmTokens(`vllm:generation_tokens_total{engine="0",model_name="a"} 1000`),
				map[string]float64{"a": 1500}},
			{30 * time.Second, vllmTokens(`vllm:generation_tokens_total{engine="0",model_name="a"} 1010`),
				map[string]float64{"a": 1510}},
		},
	}, {
		// Triton unloads model d and version 1 of model m: both end, m's
		// version 2 is its own 4 (a version is not a part of another).
		name: "Triton models and versions unloaded", engine: Triton, family: requestsTotal,
		steps: []step{
			{0, tritonSuccess(`nv_inference_request_success{model="d",version="1"} 3`, `nv_inference_request_success{model="m",version="1"} 9`,
				`nv_inference_request_success{model="m",version="2"} 1`),
				map[string]float64{"d/1": 3, "m/1": 9, "m/2": 1}},
			{15 * time.Second, tritonSuccess(`nv_inference_request_success{model="m",version="2"} 4`),
				map[string]float64{"m/2": 4}},
		},
	}, {
		// A model's one series reads NaN: it is in the answer, not gone,
		// so the 1,000 it counted is kept though nothing of it is served;
		// back at 5 after a restart it counts on, 1,000 + 5 = 1,005.
		name: "a model's only series not finite", engine: VLLM, family: tokensTotal,
		steps: []step{
			{0, vllmTokens(`vllm:generation_tokens_total{model_name="a"} 1000`, `vllm:generation_tokens_total{model_name="b"} 1`),
				map[string]float64{"a": 1000, "b": 1}},
			{15 * time.Second, vllmTokens(`vllm:generation_tokens_total{model_name="a"} NaN`, `vllm:generation_tokens_total{model_name="b"} 2`),
				map[string]float64{"b": 2}},
			{30 * time.Second, vllmTokens(`vllm:generation_tokens_total{model_name="a"} 5`, `vllm:generation_tokens_total{model_name="b"} 3`),
				map[string]float64{"a": 1005, "b": 3}},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			k := NewCorrector()
			for i, s := range tc.steps {
				families, err := parse(strings.NewReader(s.body))
				if err != nil {
					t.Fatal(err)
				}
				k.now = func() time.Time { return t0.Add(s.after) }
				k.Correct(families, tc.engine) // a NaN is named; that is TestCorrectorLeavesOutNonFiniteCounters's
				samples, err := Normalize(tc.engine, families, "")
				if err != nil {
					t.Fatal(err)
				}
				got := map[string]float64{}
				for _, smp := range samples {
					if smp.Name == tc.family {
						key := smp.Labels[modelLabel]
						if v, ok := smp.Labels[modelVersionLabel]; ok {
							key += "/" + v
						}
						got[key] = smp.Value
					}
				}
				if !maps.Equal(got, s.want) {
					t.Errorf("scrape %d: by model %v, want %v", i+1, got, s.want)
				}
			}
		})
	}
}

// TestCorrectorForgetsModelsThatLeft: an engine naming a new adapter at
// each scrape, base and one adapter in each answer, leaves the Corrector
// remembering those two series, not every adapter it ever named (probe D:
// 2,000 such scrapes held 20,000 series until maxCorrected).
func TestCorrectorForgetsModelsThatLeft(t *testing.T) {
	k := NewCorrector()
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	for i := range 150 {
		correctedScrape(t, k, t0.Add(time.Duration(i)*15*time.Second), fmt.Sprintf(
			"# TYPE vllm:prompt_tokens counter\nvllm:prompt_tokens_total{model_name=\"base\"} %d\nvllm:prompt_tokens_total{model_name=\"adapter-%d\"} 5\n", i, i))
	}
	if n := len(k.series); n != 2 {
		t.Errorf("%d series remembered, want 2", n)
	}
}

// TestCorrectorChurningLabelStaysMonotonicAndBounded: an engine whose
// added-up label takes new values at every answer (engine="0".."2", then
// "3".."5", …) leaves three vanished series at each answer. Past
// maxGhosts, the oldest were dropped with their counts, and the served sum
// fell from 3,000,015 to 2,000,018 to 20,000 (probe K, PK1), while the
// Corrector held 20,000 of them (PK2). Now they are handed to the live
// series, as past ghostTTL: the first answer's three at 1,000,000 and
// every later answer's three at 1 give 3,000,000 + 3(k−1) after answer k,
// k = 1..400, and no more than maxGhosts vanished series are kept.
func TestCorrectorChurningLabelStaysMonotonicAndBounded(t *testing.T) {
	k := NewCorrector()
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	for answer := 1; answer <= 400; answer++ {
		var b strings.Builder
		b.WriteString("# TYPE vllm:prompt_tokens counter\n")
		for core := 3 * (answer - 1); core < 3*answer; core++ {
			v := 1
			if answer == 1 {
				v = 1_000_000
			}
			fmt.Fprintf(&b, "vllm:prompt_tokens_total{engine=\"%d\",model_name=\"m\"} %d\n", core, v)
		}
		// Within the hour: a second between answers, 400 s in all.
		got := value(t, correctedScrape(t, k, t0.Add(time.Duration(answer)*time.Second), b.String()), "xpu_inference_tokens_total")
		if want := float64(3_000_000 + 3*(answer-1)); got.Value != want {
			t.Fatalf("answer %d: %v tokens, want %v", answer, got.Value, want)
		}
		// 1,000 vanished (maxGhosts) and this answer's 3 live.
		if n := len(k.series); n > 1003 {
			t.Fatalf("answer %d: %d series remembered, want at most 1,000 vanished and 3 live", answer, n)
		}
	}
}

// TestKept: the labels a mapping keeps apart are the model, the renamed
// ones, the reason made an outcome; an engine core's is added up.
func TestKept(t *testing.T) {
	for _, tc := range []struct {
		engine Engine
		family string
		want   []string
	}{
		{VLLM, "vllm:generation_tokens_total", []string{"model_name"}},
		{VLLM, "vllm:request_success_total", []string{"model_name", "finished_reason"}},
		{Triton, "nv_inference_request_failure", []string{"model", "reason", "version"}},
	} {
		got := slices.Sorted(slices.Values(Kept(tc.engine)[tc.family]))
		if want := slices.Sorted(slices.Values(tc.want)); !slices.Equal(got, want) {
			t.Errorf("%s %s: kept %v, want %v", tc.engine, tc.family, got, want)
		}
	}
}

// TestCorrectorHistogram: a core's histogram whose count goes down has
// restarted: its counts before are kept, bucket by bucket.
func TestCorrectorHistogram(t *testing.T) {
	hist := func(c0, c1 [3]int) string {
		var b strings.Builder
		b.WriteString("# TYPE vllm:e2e_request_latency_seconds histogram\n")
		for core, c := range [][3]int{c0, c1} {
			// c: observations in le=1, in le=+Inf (cumulative), and the sum.
			fmt.Fprintf(&b, "vllm:e2e_request_latency_seconds_bucket{engine=\"%d\",le=\"1\",model_name=\"m\"} %d\n", core, c[0])
			fmt.Fprintf(&b, "vllm:e2e_request_latency_seconds_bucket{engine=\"%d\",le=\"+Inf\",model_name=\"m\"} %d\n", core, c[1])
			fmt.Fprintf(&b, "vllm:e2e_request_latency_seconds_sum{engine=\"%d\",model_name=\"m\"} %d\n", core, c[2])
			fmt.Fprintf(&b, "vllm:e2e_request_latency_seconds_count{engine=\"%d\",model_name=\"m\"} %d\n", core, c[1])
		}
		return b.String()
	}
	k := NewCorrector()
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	correctedScrape(t, k, t0, hist([3]int{10, 20, 30}, [3]int{100, 200, 300}))
	// Core 1 restarted: 1 in le=1, 2 in all, sum 3. Kept: 100, 200, 300.
	// le=1: 12 + (100 + 1) = 113; +Inf and count: 25 + (200 + 2) = 227;
	// sum: 40 + (300 + 3) = 343.
	h := value(t, correctedScrape(t, k, t0.Add(15*time.Second), hist([3]int{12, 25, 40}, [3]int{1, 2, 3})), "xpu_inference_request_duration_seconds")
	if len(h.Buckets) != 2 || h.Buckets[0].Count != 113 || h.Buckets[1].Count != 227 || h.Count != 227 || h.Sum != 343 {
		t.Errorf("histogram %+v, want le=1 113, +Inf 227, count 227, sum 343", h)
	}
}

// TestCorrectorGhostHistogramBuckets: a histogram series that vanished is
// kept in its sum only while the live series have its buckets. vLLM
// upgraded in place from V0 to V1 answers with an engine label and other
// time-to-first-token bounds: the V0 series, kept at its last value, made
// the whole histogram unservable for an hour (found by probing), though the
// engine's answer is right.
func TestCorrectorGhostHistogramBuckets(t *testing.T) {
	// hist writes one TTFT series per core: labels, then the cumulative
	// counts of each bound in bounds, the sum; the count is the last bucket.
	type series struct {
		labels string
		counts []int
		sum    float64
	}
	hist := func(bounds []string, ss ...series) string {
		var b strings.Builder
		b.WriteString("# TYPE vllm:time_to_first_token_seconds histogram\n")
		for _, s := range ss {
			for i, le := range bounds {
				fmt.Fprintf(&b, "vllm:time_to_first_token_seconds_bucket{%sle=%q} %d\n", s.labels, le, s.counts[i])
			}
			fmt.Fprintf(&b, "vllm:time_to_first_token_seconds_sum{%s} %v\n", strings.TrimSuffix(s.labels, ","), s.sum)
			fmt.Fprintf(&b, "vllm:time_to_first_token_seconds_count{%s} %d\n", strings.TrimSuffix(s.labels, ","), s.counts[len(s.counts)-1])
		}
		return b.String()
	}
	v0, v1 := []string{"1", "+Inf"}, []string{"0.5", "1", "+Inf"}
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name          string
		before, after string
		// want: cumulative counts by bound, then the sum.
		wantBounds []float64
		wantCounts []float64
		wantSum    float64
	}{{
		// V0's one observation is in other buckets: left out, the V1
		// core's own 2, 3, 3 and 1.2 are served.
		name:       "upgraded to other buckets",
		before:     hist(v0, series{`model_name="m",`, []int{1, 1}, 0.5}),
		after:      hist(v1, series{`engine="0",model_name="m",`, []int{2, 3, 3}, 1.2}),
		wantBounds: []float64{0.5, 1, math.Inf(1)},
		wantCounts: []float64{2, 3, 3},
		wantSum:    1.2,
	}, {
		// Core 1 gone, same buckets: its last counts stay in the sum.
		// le=0.5: 2 + 4 = 6; le=1: 3 + 5 = 8; +Inf: 3 + 6 = 9;
		// sum: 1.25 + 2.5 = 3.75.
		name: "a core gone, same buckets",
		before: hist(v1, series{`engine="0",model_name="m",`, []int{1, 2, 2}, 1},
			series{`engine="1",model_name="m",`, []int{4, 5, 6}, 2.5}),
		after:      hist(v1, series{`engine="0",model_name="m",`, []int{2, 3, 3}, 1.25}),
		wantBounds: []float64{0.5, 1, math.Inf(1)},
		wantCounts: []float64{6, 8, 9},
		wantSum:    3.75,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			k := NewCorrector()
			correctedScrape(t, k, t0, tc.before)
			h := value(t, correctedScrape(t, k, t0.Add(15*time.Second), tc.after), "xpu_inference_time_to_first_token_seconds")
			var bounds, counts []float64
			for _, b := range h.Buckets {
				bounds, counts = append(bounds, b.UpperBound), append(counts, float64(b.Count))
			}
			if !slices.Equal(bounds, tc.wantBounds) || !slices.Equal(counts, tc.wantCounts) || float64(h.Count) != tc.wantCounts[len(tc.wantCounts)-1] || h.Sum != tc.wantSum {
				t.Errorf("buckets %v at %v, count %v, sum %v; want %v at %v, count %v, sum %v",
					counts, bounds, h.Count, h.Sum, tc.wantCounts, tc.wantBounds, tc.wantCounts[len(tc.wantCounts)-1], tc.wantSum)
			}
		})
	}
}

// TestCorrectorLeavesGaugesAndFirstValues: gauges go up and down as they
// please, and a counter's first value is the engine's own.
func TestCorrectorLeavesGaugesAndFirstValues(t *testing.T) {
	k := NewCorrector()
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	body := func(running, tokens int) string {
		return fmt.Sprintf("# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\"} %d\n"+
			"# TYPE vllm:generation_tokens counter\nvllm:generation_tokens_total{model_name=\"m\"} %d\n", running, tokens)
	}
	s := correctedScrape(t, k, t0, body(7, 500))
	if r, g := value(t, s, "xpu_inference_requests_running"), value(t, s, "xpu_inference_tokens_total"); r.Value != 7 || g.Value != 500 {
		t.Errorf("first scrape: running %v, tokens %v; want 7 and 500", r.Value, g.Value)
	}
	s = correctedScrape(t, k, t0.Add(15*time.Second), body(3, 500))
	if r := value(t, s, "xpu_inference_requests_running"); r.Value != 3 {
		t.Errorf("a gauge going down was changed: %v, want 3", r.Value)
	}
}

// BenchmarkCorrect is one scrape's correction of a real vLLM sample.
func BenchmarkCorrect(b *testing.B) {
	body, err := os.ReadFile("../fixtures/engines/vllm-v0-plus-v1-names-datadog-fixture.prom")
	if err != nil {
		b.Fatal(err)
	}
	body = append(body, '\n')
	k := NewCorrector()
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		families, err := parse(bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if err := k.Correct(families, VLLM); err != nil {
			b.Fatal(err)
		}
	}
}

// TestDropStale: a sample stamped more than 5 minutes before now is left
// out and named; one stamped within them, or not stamped, is kept.
func TestDropStale(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	// 1700000000000 ms is 2023-11-14T22:13:20Z; now (1795608000000) − 4 min is 1795607760000.
	families, err := parse(strings.NewReader(`# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="old"} 42 1700000000000
vllm:num_requests_running{model_name="recent"} 3 1795607760000
vllm:num_requests_running{model_name="unstamped"} 1
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="old"} 0.97 1700000000000
`))
	if err != nil {
		t.Fatal(err)
	}
	err = DropStale(families, now)
	if err == nil || !strings.Contains(err.Error(), `vllm:num_requests_running{model_name="old"}: stamped 2023-11-14T22:13:20Z`) {
		t.Errorf("error %v, want the old sample named", err)
	}
	if _, ok := families["vllm:kv_cache_usage_perc"]; ok {
		t.Error("a family of stale series only is kept")
	}
	if n := len(families["vllm:num_requests_running"].GetMetric()); n != 2 {
		t.Errorf("%d series kept, want the recent and the unstamped", n)
	}
}

// TestCorrectorLeavesOutNonFiniteCounters: a counter reading NaN or ±Inf
// is left out of that scrape and named, and never becomes what resets are
// counted on from. Found by probing: a core that once read +Inf and then
// restarted made +Inf its offset, and the canonical counter was +Inf (rate
// NaN) for the exporter's whole life. The scrapes are
// fixtures/engines/constructed/vllm-v1-counter-not-finite-{1..4}.prom.
func TestCorrectorLeavesOutNonFiniteCounters(t *testing.T) {
	k := NewCorrector()
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	for i, step := range []struct {
		want    map[string]float64 // prompt tokens by model
		wantErr string             // the series left out
	}{
		// a: cores 0 and 1 add up, 1000 + 50 = 1050. b's first reading
		// is +Inf: left out, and b has no series yet.
		{map[string]float64{"a": 1050}, `vllm:prompt_tokens_total{engine="0",model_name="b"}`},
		// a's core 0 reads +Inf: left out, its last 1000 stays in the
		// sum as a vanished core's would, 1000 + 60 = 1060. b: 5.
		{map[string]float64{"a": 1060, "b": 5}, `vllm:prompt_tokens_total{engine="0",model_name="a"}`},
		// Core 0 restarted at 5: the 1000 it had counted is kept,
		// (1000 + 5) + 70 = 1075. b: 9.
		{map[string]float64{"a": 1075, "b": 9}, ""},
		// 1009 + 80 = 1089: 14 more, (9 − 5) + (80 − 70). b: 12, 3 more.
		{map[string]float64{"a": 1089, "b": 12}, ""},
	} {
		families := parseFixture(t, fmt.Sprintf("constructed/vllm-v1-counter-not-finite-%d.prom", i+1))
		k.now = func() time.Time { return t0.Add(time.Duration(i) * 15 * time.Second) }
		err := k.Correct(families, VLLM)
		switch {
		case step.wantErr == "" && err != nil:
			t.Errorf("scrape %d: unexpected error %v", i+1, err)
		case step.wantErr != "" && (err == nil || !strings.Contains(err.Error(), step.wantErr)):
			t.Errorf("scrape %d: error %v, want one naming %s", i+1, err, step.wantErr)
		}
		samples, err := Normalize(VLLM, families, "")
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		for _, s := range samples {
			if s.Name == tokensTotal {
				got[s.Labels[modelLabel]] = s.Value
			}
		}
		if !maps.Equal(got, step.want) {
			t.Errorf("scrape %d: prompt tokens by model %v, want %v", i+1, got, step.want)
		}
	}
}

// TestCorrectorLeavesOutNegativeCounters: a counter reading below 0 is
// left out and named, and never counted on from. Found by probe D (PD6):
// -5 was served, and the 5 after it read as 10 tokens made; -5 between 100
// and 105 was taken for a reset, and 105 served as 100 + 105 = 205.
func TestCorrectorLeavesOutNegativeCounters(t *testing.T) {
	k := NewCorrector()
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	for i, step := range []struct {
		value int
		want  float64 // -1: not served
	}{
		{-5, -1},
		// The first count seen: the engine's own.
		{5, 5},
		{100, 100},
		{-5, -1},
		// 100 was the last count: 105 is 5 more, no reset.
		{105, 105},
	} {
		families, err := parse(strings.NewReader(fmt.Sprintf("# TYPE vllm:prompt_tokens counter\nvllm:prompt_tokens_total{model_name=\"h\"} %d\n", step.value)))
		if err != nil {
			t.Fatal(err)
		}
		k.now = func() time.Time { return t0.Add(time.Duration(i) * 15 * time.Second) }
		err = k.Correct(families, VLLM)
		if named := err != nil && strings.Contains(err.Error(), `vllm:prompt_tokens_total{model_name="h"}: a negative count is left out`); named != (step.value < 0) {
			t.Errorf("scrape %d: error %v", i+1, err)
		}
		samples, err := Normalize(VLLM, families, "")
		if err != nil {
			t.Fatal(err)
		}
		got := -1.0
		for _, s := range samples {
			if s.Name == tokensTotal {
				got = s.Value
			}
		}
		if got != step.want {
			t.Errorf("scrape %d: %v tokens, want %v (-1: none)", i+1, got, step.want)
		}
	}
}

// TestCorrectorReplicasAreNotHandedOver: SGLang's TP ranks write copies of
// one queue-time histogram, of which Normalize reads one. A rank that goes
// away (the server restarted at TP=1) has a live copy counting the same
// requests: handing its count over to it past the hour made the count jump
// by all the requests it had seen. A data-parallel group that goes away
// is handed over once, to every rank of a live group, not once per rank.
func TestCorrectorReplicasAreNotHandedOver(t *testing.T) {
	// body writes one queue-time series per rank, tp_rank i in dp_rank
	// i/2, whose count is counts[i]; -1 leaves the rank out.
	body := func(counts ...int) string {
		var b strings.Builder
		b.WriteString("# TYPE sglang:queue_time_seconds histogram\n")
		for i, n := range counts {
			if n < 0 {
				continue
			}
			l := fmt.Sprintf(`dp_rank="%d",model_name="m",tp_rank="%d"`, i/2, i)
			fmt.Fprintf(&b, "sglang:queue_time_seconds_bucket{%s,le=\"+Inf\"} %d\nsglang:queue_time_seconds_sum{%s} %d\nsglang:queue_time_seconds_count{%s} %d\n", l, n, l, n, l, n)
		}
		return b.String()
	}
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name  string
		steps []struct {
			after  time.Duration
			counts []int
			want   uint64
		}
	}{{
		name: "a rank gone",
		steps: []struct {
			after  time.Duration
			counts []int
			want   uint64
		}{
			// One group, two ranks at 10: 10.
			{0, []int{10, 10}, 10},
			// Rank 1 gone, rank 0 counting on at 12: rank 1 is given at
			// its last 10 for the hour, behind 12.
			{15 * time.Second, []int{12, -1}, 12},
			// Past the hour rank 1 is forgotten, its count already in
			// rank 0's, its copy: 30, not 10 + 30 = 40.
			{2 * time.Hour, []int{30, -1}, 30},
			{2*time.Hour + 15*time.Second, []int{31, -1}, 31},
		},
	}, {
		name: "a data-parallel group gone",
		steps: []struct {
			after  time.Duration
			counts []int
			want   uint64
		}{
			// dp 0 (tp 0, 1) at 10, dp 1 (tp 2, 3) at 4: 10 + 4 = 14.
			{0, []int{10, 10, 4, 4}, 14},
			// dp 0 gone: its last 10 stays in the sum, 10 + 5 = 15.
			{15 * time.Second, []int{-1, -1, 5, 5}, 15},
			// Past the hour its 10 is handed to dp 1 once, to both its
			// ranks: 10 + 6 = 16, not 10 + 10 + 6 = 26.
			{2 * time.Hour, []int{-1, -1, 6, 6}, 16},
			// And on: 10 + 7 = 17, though tp 2 is gone (its copy tp 3
			// carries the 10 too).
			{2*time.Hour + 15*time.Second, []int{-1, -1, -1, 7}, 17},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			k := NewCorrector()
			for _, s := range tc.steps {
				families, err := parse(strings.NewReader(body(s.counts...)))
				if err != nil {
					t.Fatal(err)
				}
				k.now = func() time.Time { return t0.Add(s.after) }
				if err := k.Correct(families, SGLang); err != nil {
					t.Fatal(err)
				}
				samples, err := Normalize(SGLang, families, "")
				if err != nil {
					t.Fatal(err)
				}
				if got := value(t, samples, queueTime).Count; got != s.want {
					t.Errorf("%v on: queue-time count %d, want %d", s.after, got, s.want)
				}
			}
		})
	}
}

// TestCorrectorSkipsUnreadableHistograms: a histogram answer Normalize
// rejects as unreadable is left out of its scrape only. Found by probing:
// SGLang's inter-token histogram read once with _count one ahead of its
// +Inf bucket (prometheus_client collecting while a token is observed)
// became the Corrector's last reading; the next good answer, 5000 below
// 5001, was taken for a reset, and the corrected count (5001 + 5000 =
// 10001) never again equalled its +Inf bucket (5000 + 5000 = 10000), so
// the family was left out until the exporter restarted.
func TestCorrectorSkipsUnreadableHistograms(t *testing.T) {
	// itl is one model's inter-token series as SGLang writes it: the
	// cumulative counts of le=0.01, le=0.1 and +Inf, the sum, the count.
	type itl struct {
		model            string
		le001, le01, inf int
		sum              float64
		count            int
	}
	body := func(ss ...itl) string {
		var b strings.Builder
		b.WriteString("# TYPE sglang:inter_token_latency_seconds histogram\n")
		for _, s := range ss {
			l := fmt.Sprintf("model_name=%q", s.model)
			fmt.Fprintf(&b, "sglang:inter_token_latency_seconds_bucket{le=\"0.01\",%s} %d\n", l, s.le001)
			fmt.Fprintf(&b, "sglang:inter_token_latency_seconds_bucket{le=\"0.1\",%s} %d\n", l, s.le01)
			fmt.Fprintf(&b, "sglang:inter_token_latency_seconds_bucket{le=\"+Inf\",%s} %d\n", l, s.inf)
			fmt.Fprintf(&b, "sglang:inter_token_latency_seconds_sum{%s} %v\n", l, s.sum)
			fmt.Fprintf(&b, "sglang:inter_token_latency_seconds_count{%s} %d\n", l, s.count)
		}
		return b.String()
	}
	// The answers of the probe's SGLang stand-in, good and racy.
	good := itl{"m", 4000, 5000, 5000, 60, 5000}
	racy := itl{"m", 4000, 5000, 5000, 60, 5001}
	// served is what Normalize gives for a model: le=0.01, le=0.1, +Inf
	// (the count), and the sum.
	type served struct {
		buckets [3]uint64
		sum     float64
	}
	type step struct {
		after   time.Duration
		answer  []itl
		want    map[string]served // by model; a model absent is left out
		wantErr string            // Normalize's reason, on a rejected answer
	}
	const rejected = `sglang:inter_token_latency_seconds{model_name="m"}: count 5001 differs from the +Inf bucket 5000`
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name  string
		steps []step
	}{{
		// The probe's run: 5000, left out, then 5000 as the engine gives
		// it at every good answer, never counted on from 5001.
		name: "one racy answer",
		steps: []step{
			{0, []itl{good}, map[string]served{"m": {[3]uint64{4000, 5000, 5000}, 60}}, ""},
			{2 * time.Second, []itl{racy}, map[string]served{}, rejected},
			{4 * time.Second, []itl{good}, map[string]served{"m": {[3]uint64{4000, 5000, 5000}, 60}}, ""},
			{6 * time.Second, []itl{good}, map[string]served{"m": {[3]uint64{4000, 5000, 5000}, 60}}, ""},
		},
	}, {
		// Model m restarts after its racy answer while model n counts
		// on: m counts on from its last good reading, not from the
		// rejected one. 8, 10, 10, 0.5 after the restart: 4000 + 8 =
		// 4008, 5000 + 10 = 5010 (twice), 60 + 0.5 = 60.5; then 16, 20,
		// 20, 1: 4016, 5020, 5020, 61.
		name: "a restart after it",
		steps: []step{
			{0, []itl{good, {"n", 1, 2, 2, 0.25, 2}}, map[string]served{"m": {[3]uint64{4000, 5000, 5000}, 60}, "n": {[3]uint64{1, 2, 2}, 0.25}}, ""},
			{2 * time.Second, []itl{racy, {"n", 3, 4, 4, 0.5, 4}}, map[string]served{"n": {[3]uint64{3, 4, 4}, 0.5}}, rejected},
			{4 * time.Second, []itl{{"m", 8, 10, 10, 0.5, 10}, {"n", 5, 6, 6, 0.75, 6}}, map[string]served{"m": {[3]uint64{4008, 5010, 5010}, 60.5}, "n": {[3]uint64{5, 6, 6}, 0.75}}, ""},
			{6 * time.Second, []itl{{"m", 16, 20, 20, 1, 20}, {"n", 5, 6, 6, 0.75, 6}}, map[string]served{"m": {[3]uint64{4016, 5020, 5020}, 61}, "n": {[3]uint64{5, 6, 6}, 0.75}}, ""},
		},
	}, {
		// Beside model n (its own 1, 2, 2, 0.25 on, then 3, 4, 4, 0.5),
		// the racy m is still left out, not given as a vanished series
		// at its last 5000 next to the answer that could not be read.
		name: "beside a readable model",
		steps: []step{
			{0, []itl{good, {"n", 1, 2, 2, 0.25, 2}}, map[string]served{"m": {[3]uint64{4000, 5000, 5000}, 60}, "n": {[3]uint64{1, 2, 2}, 0.25}}, ""},
			{2 * time.Second, []itl{racy, {"n", 3, 4, 4, 0.5, 4}}, map[string]served{"n": {[3]uint64{3, 4, 4}, 0.5}}, rejected},
			{4 * time.Second, []itl{good, {"n", 3, 4, 4, 0.5, 4}}, map[string]served{"m": {[3]uint64{4000, 5000, 5000}, 60}, "n": {[3]uint64{3, 4, 4}, 0.5}}, ""},
		},
	}, {
		// Unreadable for over an hour after a restart of its own (model
		// n counting on beside it), m is still in the answer, not gone:
		// its offset (4000, 5000, 5000, 60) is kept, not forgotten as a
		// vanished series' would be, and 24, 30, 30, 1.5 after it reads
		// 4024, 5030, 5030, 61.5, not a drop to 30.
		name: "unreadable past the hour",
		steps: []step{
			{0, []itl{good, {"n", 1, 2, 2, 0.25, 2}}, map[string]served{"m": {[3]uint64{4000, 5000, 5000}, 60}, "n": {[3]uint64{1, 2, 2}, 0.25}}, ""},
			{2 * time.Second, []itl{{"m", 8, 10, 10, 0.5, 10}, {"n", 3, 4, 4, 0.5, 4}}, map[string]served{"m": {[3]uint64{4008, 5010, 5010}, 60.5}, "n": {[3]uint64{3, 4, 4}, 0.5}}, ""},
			{4 * time.Second, []itl{{"m", 16, 20, 20, 1, 21}, {"n", 3, 4, 4, 0.5, 4}}, map[string]served{"n": {[3]uint64{3, 4, 4}, 0.5}}, `count 21 differs from the +Inf bucket 20`},
			{2 * time.Hour, []itl{{"m", 16, 20, 20, 1, 21}, {"n", 3, 4, 4, 0.5, 4}}, map[string]served{"n": {[3]uint64{3, 4, 4}, 0.5}}, `count 21 differs from the +Inf bucket 20`},
			{2*time.Hour + 2*time.Second, []itl{{"m", 24, 30, 30, 1.5, 30}, {"n", 3, 4, 4, 0.5, 4}}, map[string]served{"m": {[3]uint64{4024, 5030, 5030}, 61.5}, "n": {[3]uint64{3, 4, 4}, 0.5}}, ""},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			k := NewCorrector()
			for i, s := range tc.steps {
				families, err := parse(strings.NewReader(body(s.answer...)))
				if err != nil {
					t.Fatal(err)
				}
				k.now = func() time.Time { return t0.Add(s.after) }
				if err := k.Correct(families, SGLang); err != nil {
					t.Fatalf("scrape %d: %v", i+1, err)
				}
				samples, err := Normalize(SGLang, families, "")
				switch {
				case s.wantErr == "" && err != nil:
					t.Errorf("scrape %d: unexpected error %v", i+1, err)
				case s.wantErr != "" && (err == nil || !strings.Contains(err.Error(), s.wantErr)):
					t.Errorf("scrape %d: error %v, want one saying %s", i+1, err, s.wantErr)
				}
				got := map[string]served{}
				for _, h := range samples {
					if h.Name != interTokenLatency {
						continue
					}
					var c served
					if len(h.Buckets) != 3 || h.Count != h.Buckets[2].Count {
						t.Errorf("scrape %d: model %s served as %+v, not in its three buckets", i+1, h.Labels[modelLabel], h)
					}
					for j := range min(len(h.Buckets), 3) {
						c.buckets[j] = h.Buckets[j].Count
					}
					c.sum = h.Sum
					got[h.Labels[modelLabel]] = c
				}
				if !maps.Equal(got, s.want) {
					t.Errorf("scrape %d: inter-token latency by model %+v, want %+v", i+1, got, s.want)
				}
			}
		})
	}
}

// TestCorrectorWholeRestartServesRawCounts: once every live series of a
// family has restarted together (the engine process restarted), its counts
// are the engine's own again, offsets and vanished series dropped. A count
// kept on past the restart lived only in the exporter's memory: the
// exporter restarting served the engine's own count, a fall Prometheus
// read as a reset, and increase() gained the engine's whole count since its
// restart (found by probing: 320 tokens counted where 260 were made). Each
// step's want is what a fresh Corrector (the exporter restarted) serves too.
func TestCorrectorWholeRestartServesRawCounts(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	success := func(stop, length int) string {
		out := "# TYPE vllm:request_success counter\n" + fmt.Sprintf("vllm:request_success_total{engine=\"0\",finished_reason=\"stop\",model_name=\"m\"} %d\n", stop)
		if length >= 0 {
			out += fmt.Sprintf("vllm:request_success_total{engine=\"0\",finished_reason=\"length\",model_name=\"m\"} %d\n", length)
		}
		return out
	}
	for _, c := range []struct {
		name  string
		steps []string
		want  []float64
		fresh bool // the last step's value is what a fresh Corrector serves
	}{
		{
			// 1000, 1200; the engine restarts and counts 30: served 30,
			// which Prometheus reads as a reset worth 30; then 60.
			// increase = 200 + 30 + 30 = 260, the tokens made.
			name:  "one series",
			steps: []string{tokens(1000), tokens(1200), tokens(30), tokens(60)},
			want:  []float64{1000, 1200, 30, 60},
			fresh: true,
		},
		{
			// Core 1 restarts alone: its 1,000 is kept, 1,010 + 1,000 + 5
			// = 2,015. Then both restart, at 3 and 4: 7, their own.
			name:  "partial then whole",
			steps: []string{tokens(1000, 1000), tokens(1010, 5), tokens(3, 4)},
			want:  []float64{2000, 2015, 7},
			fresh: true,
		},
		{
			// Core 1 restarts while core 0 counts on: the offset stays
			// (1,010 + 1,000 + 5); a fresh Corrector would serve 1,015.
			name:  "partial only",
			steps: []string{tokens(1000, 1000), tokens(1010, 5)},
			want:  []float64{2000, 2015},
		},
		{
			// Core 1 restarted alone (offset 1,000), then core 0 counts
			// nothing while core 1 restarts again: core 0 unchanged at
			// 1,010 is not a restart, so the offsets stay: 1,010 + 1,005
			// + 2 = 2,017.
			name:  "unchanged part is no restart",
			steps: []string{tokens(1000, 1000), tokens(1010, 5), tokens(1010, 2)},
			want:  []float64{2000, 2015, 2017},
		},
	} {
		k := NewCorrector()
		var last []Sample
		for i, body := range c.steps {
			last = correctedScrape(t, k, t0.Add(time.Duration(i)*15*time.Second), body)
			if got := value(t, last, "xpu_inference_tokens_total").Value; got != c.want[i] {
				t.Errorf("%s, step %d: %v tokens, want %v", c.name, i, got, c.want[i])
			}
		}
		if c.fresh {
			fresh := correctedScrape(t, NewCorrector(), t0, c.steps[len(c.steps)-1])
			if got, want := value(t, fresh, "xpu_inference_tokens_total").Value, c.want[len(c.want)-1]; got != want {
				t.Errorf("%s: a fresh Corrector serves %v, the running one %v", c.name, got, want)
			}
		}
	}

	// stop 10 and length 2 add up to outcome success, 12. The engine
	// restarts: stop at 1, length not yet made again. Its 2 was the old
	// process's and goes: 1, read as a reset worth 1. length back at 1:
	// 2. increase = 1 + 1 = 2, the requests finished since the restart.
	k := NewCorrector()
	for i, s := range []struct {
		stop, length int
		want         float64
	}{{10, 2, 12}, {1, -1, 1}, {1, 1, 2}} {
		got := correctedScrape(t, k, t0.Add(time.Duration(i)*15*time.Second), success(s.stop, s.length))
		var n float64
		for _, x := range got {
			if x.Name == "xpu_inference_requests_total" && x.Labels["outcome"] == "success" {
				n += x.Value
			}
		}
		if n != s.want {
			t.Errorf("success step %d: %v requests, want %v", i, n, s.want)
		}
	}
}
