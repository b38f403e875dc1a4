package engines

import (
	"bytes"
	"errors"
	"fmt"
	dto "github.com/prometheus/client_model/go"
	"io"
	"reflect"
	"strings"
	"testing"
)

// filterLines gives the lines the filter keeps, as one string.
func filterLines(r io.Reader, lim Limits) (string, error) {
	f := newLineFilter(r, lim)
	defer f.release()
	var out strings.Builder
	for {
		line, _, err := f.next()
		out.Write(line)
		if errors.Is(err, errEOF) {
			return out.String(), nil
		}
		if err != nil {
			return out.String(), err
		}
	}
}

// parseFiltered parses what the filter keeps, as Scrape does.
func parseFiltered(r io.Reader, lim Limits) (map[string]*dto.MetricFamily, error) {
	f := newLineFilter(r, lim)
	defer f.release()
	return parseLines(f.next, 0, false)
}

// Filtering lines before parsing drops nothing Normalize reads: on every real
// sample, normalizing the filtered parse gives what the whole parse gives.
func TestFilterKeepsWhatNormalizeReads(t *testing.T) {
	for _, f := range fixtures {
		t.Run(f.file, func(t *testing.T) {
			whole := parseFixture(t, f.file)
			filtered, err := parseFiltered(bytes.NewReader(readFixture(t, f.file)), Limits{Keep: Wanted})
			if err != nil {
				t.Fatal(err)
			}
			if len(filtered) > len(whole) {
				t.Fatalf("%d families after filtering, %d before", len(filtered), len(whole))
			}
			want, _ := Normalize(f.engine, whole, f.defaultModel)
			got, _ := Normalize(f.engine, filtered, f.defaultModel)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("normalized samples differ after filtering:\n got %v\nwant %v", got, want)
			}
			if e, err := Detect(filtered); err != nil || e != f.engine {
				t.Errorf("Detect on the filtered families = %v, %v; want %v", e, err, f.engine)
			}
		})
	}
}

func TestLineFilter(t *testing.T) {
	body := strings.Join([]string{
		"# HELP vllm:num_requests_running Running.",
		"# TYPE vllm:num_requests_running gauge",
		`vllm:num_requests_running{model_name="m"} 3`,
		"# HELP python_gc_objects_collected_total Objects.",
		"# TYPE python_gc_objects_collected_total counter",
		`python_gc_objects_collected_total{generation="0"} 1234`,
		"# a comment",
		"",
		"# TYPE vllm:e2e_request_latency_seconds histogram",
		`vllm:e2e_request_latency_seconds_bucket{le="1",model_name="m"} 1`,
		`vllm:e2e_request_latency_seconds_bucket{le="+Inf",model_name="m"} 2`,
		`vllm:e2e_request_latency_seconds_sum{model_name="m"} 1.5`,
		`vllm:e2e_request_latency_seconds_count{model_name="m"} 2`,
		"",
	}, "\n")
	keep := func(name string) bool { return strings.HasPrefix(name, "vllm:") }
	out, err := filterLines(strings.NewReader(body), Limits{Keep: keep})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "python_gc") || strings.Contains(string(out), "a comment") {
		t.Errorf("unwanted lines kept:\n%s", out)
	}
	// 1 gauge sample + 4 histogram lines kept.
	if n := strings.Count(string(out), "vllm:"); n != 3+4+1 {
		t.Errorf("%d vllm lines kept (3 of the gauge, 4 samples and a TYPE of the histogram), want 8:\n%s", n, out)
	}
	// Five sample lines are kept: a limit of 4 fails, 5 passes.
	if _, err := filterLines(strings.NewReader(body), Limits{Keep: keep, MaxSeries: 4}); !errors.Is(err, ErrTooManySeries) {
		t.Errorf("limit 4: %v, want ErrTooManySeries", err)
	}
	if _, err := filterLines(strings.NewReader(body), Limits{Keep: keep, MaxSeries: 5}); err != nil {
		t.Errorf("limit 5: %v", err)
	}
	// The parser needs no blank after '#': "#TYPE x" types x as "# TYPE x"
	// does, so it is kept (found by fuzzing); other comments, OpenMetrics'
	// EOF and UNIT included, mean nothing to the parser and go.
	comments := "#TYPE vllm:x histogram\n#\tHELP vllm:x Help.\n#EOF\n# UNIT vllm:x seconds\n#TYPE python_gc_x counter\n#a comment\n# HELP\n"
	if out, err := filterLines(strings.NewReader(comments), Limits{Keep: keep}); err != nil || out != "#TYPE vllm:x histogram\n#\tHELP vllm:x Help.\n" {
		t.Errorf("comments kept: %q, %v", out, err)
	}
	// A line longer than the bound is an error, not a buffer that grows.
	if _, err := filterLines(strings.NewReader(strings.Repeat("x", maxLine+10)), Limits{}); err == nil {
		t.Error("a 1 MiB line without newline was accepted")
	}
}

// A 16 MiB response of families no mapping reads costs about nothing to
// parse: they are dropped as lines.
func BenchmarkHugeUnrelatedResponse(b *testing.B) {
	var buf bytes.Buffer
	for i := 0; buf.Len() < 16<<20; i++ {
		fmt.Fprintf(&buf, "unrelated_series_total{a=\"%d\",b=\"some-label-value\"} %d\n", i, i)
	}
	fmt.Fprintf(&buf, "vllm:num_requests_running{model_name=\"m\"} 3\n")
	body := buf.Bytes()
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		fams, err := parseFiltered(bytes.NewReader(body), Limits{Keep: Wanted, MaxSeries: 20000})
		if err != nil || len(fams) != 1 {
			b.Fatalf("%d families, %v", len(fams), err)
		}
	}
}
