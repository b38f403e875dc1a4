package engines

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

// FuzzLineFilter checks the line filter that runs before parsing: it only
// ever drops whole lines, keeps everything without a Keep function, stops
// at the series limit, and drops nothing Normalize, Detect or DCGMProfiling
// read (the whole and the filtered body normalise alike).
func FuzzLineFilter(f *testing.F) {
	for _, fx := range fixtures {
		for i, family := range bytes.Split(readFixture(f, fx.file), []byte("\n# HELP ")) {
			if i > 0 {
				family = append([]byte("# HELP "), family...)
			}
			if len(family) < 4<<10 {
				f.Add(append(family, '\n'), uint8(0))
			}
		}
	}
	f.Add([]byte("# TYPE vllm:x gauge\n  vllm:num_requests_running{model_name=\"m\"} 1\n#\tHELP tgi_queue_size q\n# EOF\n"), uint8(1))
	f.Add([]byte("vllm:e2e_request_latency_seconds_bucket{le=\"+Inf\"} 1\nvllm:e2e_request_latency_seconds_count 1\n"), uint8(1))

	f.Fuzz(func(t *testing.T, data []byte, maxSeries uint8) {
		allText, err := filterLines(bytes.NewReader(data), Limits{})
		all := []byte(allText)
		if err != nil {
			t.Fatalf("without Keep: %v", err)
		}
		for _, line := range droppedLines(t, data, all) {
			if b := bytes.TrimLeft(line, " \t"); len(b) == 0 || b[0] != '#' {
				t.Fatalf("without Keep the filter dropped %q, which is no comment", line)
			}
		}

		lim := Limits{Keep: Wanted, MaxSeries: int(maxSeries)}
		outText, err := filterLines(bytes.NewReader(data), lim)
		out := []byte(outText)
		if err != nil && !errors.Is(err, ErrTooManySeries) {
			t.Fatalf("filter error %v", err)
		}
		droppedLines(t, data, out)
		if err != nil || maxSeries > 0 {
			return
		}

		whole, err := parse(bytes.NewReader(data))
		if err != nil {
			return
		}
		filtered, err := parse(bytes.NewReader(out))
		if err != nil {
			t.Fatalf("the whole body parses, the filtered one fails: %v\n%q", err, out)
		}
		for _, e := range detectOrder {
			want, _ := Normalize(e, whole, "m")
			got, _ := Normalize(e, filtered, "m")
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%s: filtering changed the samples:\n got %v\nwant %v\nfiltered body %q", e, got, want, out)
			}
		}
		we, werr := Detect(whole)
		ge, gerr := Detect(filtered)
		if we != ge || (werr == nil) != (gerr == nil) {
			t.Fatalf("Detect: %v, %v on the whole body, %v, %v after filtering", we, werr, ge, gerr)
		}
	})
}

// droppedLines returns the lines of in that out leaves out, failing t if out
// is anything but lines of in in their order.
func droppedLines(t *testing.T, in, out []byte) [][]byte {
	t.Helper()
	var dropped [][]byte
	for line := range bytes.SplitAfterSeq(in, []byte("\n")) {
		if bytes.HasPrefix(out, line) {
			out = out[len(line):]
		} else {
			dropped = append(dropped, line)
		}
	}
	if len(out) > 0 {
		t.Fatalf("output is not whole input lines in order; left over: %q", out)
	}
	return dropped
}
