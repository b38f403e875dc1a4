package main

import (
	"compress/gzip"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xpu-exporter/xpu_exporter/collector"
)

func TestAcceptsGzip(t *testing.T) {
	for header, want := range map[string]bool{
		"":                             false,
		"gzip":                         true,
		"GZIP":                         true,
		"deflate, gzip;q=1.0, *;q=0.5": true, // Prometheus' header
		"identity":                     false,
		"gzip;q=0":                     false,
		"gzip; q=0.001":                true,
		"*":                            true,
		"*;q=0":                        false,
		"gzip;q=0, *":                  false, // named refusal beats the wildcard
		"br, *;q=0.1":                  true,
		"x-gzip":                       true,
	} {
		if got := acceptsGzip(header); got != want {
			t.Errorf("acceptsGzip(%q) = %v, want %v", header, got, want)
		}
	}
}

// TestMetricsResponse: the handler answers in the text format, gzipped only
// when asked, with the exporter's own registry and the collectors merged,
// and HEAD without a body.
func TestMetricsResponse(t *testing.T) {
	off := map[string]bool{}
	for _, name := range []string{"amd", "attribution", "cost", "dcgm", "engines", "gaudi", "nvidia", "process"} {
		off[name] = false
	}
	if err := collector.Enable(off); err != nil {
		t.Fatal(err)
	}
	e, err := collector.New(collector.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	base := prometheus.NewRegistry()
	base.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "a_base_metric", Help: "h"}, func() float64 { return 42 }))
	h := newMetricsHandler(e, base, handlerOpts{defaultTimeout: time.Second, maxTimeout: time.Second, logger: slog.New(slog.DiscardHandler)})

	for _, c := range []struct {
		method, encoding string
		gzipped, body    bool
	}{
		{"GET", "", false, true},
		{"GET", "gzip, deflate", true, true},
		{"GET", "identity", false, true},
		{"HEAD", "gzip", true, false},
	} {
		r := httptest.NewRequest(c.method, "/metrics", nil)
		if c.encoding != "" {
			r.Header.Set("Accept-Encoding", c.encoding)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		res := w.Result()
		if ct := res.Header.Get("Content-Type"); ct != "text/plain; version=0.0.4; charset=utf-8" {
			t.Errorf("%s %q: Content-Type %q", c.method, c.encoding, ct)
		}
		if got := res.Header.Get("Content-Encoding") == "gzip"; got != c.gzipped {
			t.Errorf("%s %q: gzipped %v, want %v", c.method, c.encoding, got, c.gzipped)
		}
		if !c.body {
			continue
		}
		var body io.Reader = res.Body
		if c.gzipped {
			if body, err = gzip.NewReader(res.Body); err != nil {
				t.Fatal(err)
			}
		}
		b, err := io.ReadAll(body)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"\na_base_metric 42\n", "\nxpu_exposition_dropped_samples_total{reason=\"duplicate_series\"} 0\n"} {
			if !strings.Contains(string(b), want) {
				t.Errorf("%s %q: %q missing from:\n%s", c.method, c.encoding, want, b)
			}
		}
	}
}
