package engines

import (
	"bytes"
	"math"
	"testing"
)

// FuzzNormalize feeds arbitrary expositions through the parser and every
// engine's mapping, checking that whatever comes out is well formed.
func FuzzNormalize(f *testing.F) {
	// Whole fixtures make slow seeds: the fuzzer spends its time minimising
	// large inputs. One family at a time covers the same mappings.
	for _, fx := range fixtures {
		for i, family := range bytes.Split(readFixture(f, fx.file), []byte("\n# HELP ")) {
			if i > 0 {
				family = append([]byte("# HELP "), family...)
			}
			if len(family) < 4<<10 {
				f.Add(append(family, '\n'))
			}
		}
	}
	f.Add([]byte("# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"0.5\"} 3\nh_count 1\n"))
	f.Add([]byte("# TYPE nv_inference_first_response_histogram_ms histogram\nnv_inference_first_response_histogram_ms_bucket{le=\"NaN\"} 1\n"))
	f.Add([]byte("# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"\\\"\\n\"} NaN\n"))

	f.Fuzz(func(t *testing.T, data []byte) {
		families, err := parse(bytes.NewReader(data))
		if err != nil {
			return
		}
		for _, e := range detectOrder {
			samples, _ := Normalize(e, families, "default")
			checkSamples(t, e, samples)
		}
	})
}

func checkSamples(t *testing.T, e Engine, samples []Sample) {
	t.Helper()
	seen := map[string]bool{}
	for _, s := range samples {
		f, ok := familyByName[s.Name]
		if !ok || f.Kind != s.Kind {
			t.Fatalf("%s: sample %s of kind %s matches no canonical family", e, s.Name, s.Kind)
		}
		if _, ok := s.Labels[modelLabel]; !ok {
			t.Fatalf("%s: sample %s%s has no model label", e, s.Name, labelKey(s.Labels))
		}
		key := s.Name + labelKey(s.Labels)
		if seen[key] {
			t.Fatalf("%s: series %s appears twice", e, key)
		}
		seen[key] = true
		if s.Kind != Histogram {
			continue
		}
		n := len(s.Buckets)
		if n == 0 || !math.IsInf(s.Buckets[n-1].UpperBound, 1) || s.Buckets[n-1].Count != s.Count {
			t.Fatalf("%s: histogram %s does not end in a +Inf bucket of its count: %+v", e, key, s)
		}
		for i := 1; i < n; i++ {
			if !(s.Buckets[i].UpperBound > s.Buckets[i-1].UpperBound) || s.Buckets[i].Count < s.Buckets[i-1].Count {
				t.Fatalf("%s: histogram %s has buckets out of order: %+v", e, key, s.Buckets)
			}
		}
	}
}
