package main

import (
	"net/http/httptest"
	"testing"
	"time"
)

// FuzzScrapeTimeoutHeader checks that whatever a client puts in
// X-Prometheus-Scrape-Timeout-Seconds, the collectors get a deadline that
// is positive and no longer than --scrape.max-timeout.
func FuzzScrapeTimeoutHeader(f *testing.F) {
	for _, s := range []string{"10", "0.001", "1e-10", "3599.9", "3600", "-1", "NaN", "+Inf", "0x1p-40", "1_0"} {
		f.Add(s)
	}
	h := &metricsHandler{opts: handlerOpts{defaultTimeout: 10 * time.Second, maxTimeout: 2 * time.Minute, timeoutOffset: 500 * time.Millisecond}}
	f.Fuzz(func(t *testing.T, v string) {
		r := httptest.NewRequest("GET", "/metrics", nil)
		r.Header.Set("X-Prometheus-Scrape-Timeout-Seconds", v)
		if d := h.deadline(r); d <= 0 || d > h.opts.maxTimeout {
			t.Fatalf("header %q: deadline %v", v, d)
		}
	})
}

// Worked by hand with the default flags (10s, at most 2m, 500ms kept back):
// 15 s leaves 15 - 0.5 = 14.5 s; 0.8 s would leave 0.3 s, less than half of
// 0.8, so half: 0.4 s; 600 s is capped at 120 s, less 0.5: 119.5 s; no or a
// bad header takes the 10 s default: 9.5 s. 3600 s and 1e9 s, numbers
// past the longest allowed, are that longest less 0.5: 119.5 s (they fell
// back to the default: probe H, PH6); NaN and +Inf are no numbers, the
// default. 1e-10 s, under a nanosecond,
// was a zero deadline that expired at once (found by fuzzing): the default
// too. 0.001 s is the shortest honoured: 1 ms less 0.5 s is under half of
// it, so half: 0.5 ms.
func TestScrapeDeadline(t *testing.T) {
	h := &metricsHandler{opts: handlerOpts{defaultTimeout: 10 * time.Second, maxTimeout: 2 * time.Minute, timeoutOffset: 500 * time.Millisecond}}
	for header, want := range map[string]time.Duration{
		"15":    14500 * time.Millisecond,
		"0.8":   400 * time.Millisecond,
		"600":   119500 * time.Millisecond,
		"":      9500 * time.Millisecond,
		"soon":  9500 * time.Millisecond,
		"1e-10": 9500 * time.Millisecond,
		"0.001": 500 * time.Microsecond,
		"3600":  119500 * time.Millisecond,
		"1e9":   119500 * time.Millisecond,
		"1e300": 119500 * time.Millisecond,
		"NaN":   9500 * time.Millisecond,
		"+Inf":  9500 * time.Millisecond,
	} {
		r := httptest.NewRequest("GET", "/metrics", nil)
		if header != "" {
			r.Header.Set("X-Prometheus-Scrape-Timeout-Seconds", header)
		}
		if got := h.deadline(r); got != want {
			t.Errorf("header %q: deadline %v, want %v", header, got, want)
		}
	}
}
