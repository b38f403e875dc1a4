package main

import (
	"compress/gzip"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

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
	base := prometheus.NewRegistry()
	base.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "a_base_metric", Help: "h"}, func() float64 { return 42 }))
	h := newTestHandler(t, base)
	var err error
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

// newTestHandler is a /metrics handler with every collector off: the
// exporter's self-metrics and base's families.
func newTestHandler(t *testing.T, base prometheus.Gatherer) *metricsHandler {
	t.Helper()
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
	t.Cleanup(e.Close)
	return newMetricsHandler(e, base, handlerOpts{defaultTimeout: 10 * time.Second, maxTimeout: time.Minute, logger: slog.New(slog.DiscardHandler)})
}

// heldGatherer stands for the exporter's registry; its first Gather waits
// until release is closed, holding the first scrape's body in rendering.
type heldGatherer struct {
	entered, release chan struct{}
	calls            atomic.Int32
}

func (g *heldGatherer) Gather() ([]*dto.MetricFamily, error) {
	if g.calls.Add(1) == 1 {
		close(g.entered)
		<-g.release
	}
	return nil, nil
}

// TestConcurrentScrapesShareOneBody: scrapes that arrive while a body is
// being rendered, and can wait for it, are served that body (plain or
// gzipped) and counted as coalesced; a scrape due sooner renders its own,
// and a scraper that leaves while waiting takes nothing from the others.
func TestConcurrentScrapesShareOneBody(t *testing.T) {
	g := &heldGatherer{entered: make(chan struct{}), release: make(chan struct{})}
	h := newTestHandler(t, g)
	users := func() int {
		n := 0
		h.rendering.Peek(struct{}{}, func(b **sharedBody) { n = int((*b).users.Load()) })
		return n
	}
	serve := func(r *http.Request) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	scrape := func(timeout, encoding string) *http.Request {
		r := httptest.NewRequest("GET", "/metrics", nil)
		r.Header.Set("X-Prometheus-Scrape-Timeout-Seconds", timeout)
		r.Header.Set("Accept-Encoding", encoding)
		return r
	}

	type answer struct {
		name string
		w    *httptest.ResponseRecorder
	}
	answers := make(chan answer, 4)
	go func() { answers <- answer{"leader", serve(scrape("10", "gzip"))} }()
	<-g.entered
	// Joining: due later than the leader (same timeout, sent later), and
	// a timeout longer by less than flight.ScrapeSlack; one plain, two
	// gzipped.
	go func() { answers <- answer{"plain", serve(scrape("10", "identity"))} }()
	go func() { answers <- answer{"gzip", serve(scrape("10.5", "gzip"))} }()
	leaving, leave := context.WithCancel(context.Background())
	left := make(chan struct{})
	go func() {
		serve(scrape("10", "gzip").WithContext(leaving))
		close(left)
	}()
	// Four scrapes and the render itself use the body.
	waitFor(t, func() bool { return users() == 5 })
	leave()
	<-left
	if n := users(); n != 4 {
		t.Fatalf("%d users after one left, want 4", n)
	}

	// Due sooner than the body being rendered: its own body, while the
	// leader is still held.
	sooner := make(chan *httptest.ResponseRecorder)
	go func() { sooner <- serve(scrape("1", "")) }()
	var w *httptest.ResponseRecorder
	select {
	case w = <-sooner:
	case <-time.After(10 * time.Second):
		t.Fatal("the sooner scrape waits for the held body")
	}
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "xpu_scrape_coalesced_total 3\n") {
		t.Errorf("the sooner scrape: %d\n%s", w.Code, w.Body)
	}
	if n := g.calls.Load(); n != 2 {
		t.Errorf("registry gathered %d times, want 2 (the held leader and the sooner scrape)", n)
	}
	close(g.release)

	bodies := map[string]string{}
	for range 3 {
		a := <-answers
		if cl := a.w.Header().Get("Content-Length"); cl != strconv.Itoa(a.w.Body.Len()) {
			t.Errorf("%s: Content-Length %s for %d bytes", a.name, cl, a.w.Body.Len())
		}
		body := a.w.Body.String()
		if a.w.Header().Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(a.w.Body)
			if err != nil {
				t.Fatalf("%s: %v", a.name, err)
			}
			b, err := io.ReadAll(zr)
			if err != nil {
				t.Fatalf("%s: %v", a.name, err)
			}
			body = string(b)
		}
		bodies[a.name] = body
	}
	// The three joined before the leader wrote its text, so its
	// coalesced count includes them.
	if !strings.Contains(bodies["leader"], "xpu_scrape_coalesced_total 3\n") {
		t.Errorf("leader's body:\n%s", bodies["leader"])
	}
	for _, name := range []string{"plain", "gzip"} {
		if bodies[name] != bodies["leader"] {
			t.Errorf("%s's body differs from the leader's:\n%s\n---\n%s", name, bodies[name], bodies["leader"])
		}
	}
	if n := users(); n != 0 {
		t.Errorf("a body is still rendering with %d users", n)
	}
	// Nothing in flight: a scrape alone renders anew, with nothing new
	// to count.
	if w := serve(scrape("10", "")); !strings.Contains(w.Body.String(), "xpu_scrape_coalesced_total 3\n") {
		t.Errorf("the next scrape:\n%s", w.Body)
	}
	if n := g.calls.Load(); n != 3 {
		t.Errorf("registry gathered %d times, want 3", n)
	}
}

// TestLongerScrapeRendersItsOwnBody: a scrape whose timeout is longer than
// that of the body being rendered by more than flight.ScrapeSlack does not
// take that body, cut short at the shorter deadline (devices that had not
// answered by then reported down), but renders its own under its own
// deadline, while the other is still held.
func TestLongerScrapeRendersItsOwnBody(t *testing.T) {
	g := &heldGatherer{entered: make(chan struct{}), release: make(chan struct{})}
	h := newTestHandler(t, g)
	scrape := func(timeout string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "/metrics", nil)
		r.Header.Set("X-Prometheus-Scrape-Timeout-Seconds", timeout)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	held := make(chan struct{})
	go func() { scrape("2"); close(held) }()
	<-g.entered
	longer := make(chan *httptest.ResponseRecorder)
	go func() { longer <- scrape("30") }()
	select {
	case w := <-longer:
		if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "xpu_scrape_coalesced_total 0\n") {
			t.Errorf("the longer scrape: %d\n%s", w.Code, w.Body)
		}
	case <-time.After(10 * time.Second):
		t.Error("the longer scrape waits for the shorter one's body")
	}
	close(g.release)
	<-held
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for start := time.Now(); !cond(); time.Sleep(time.Millisecond) {
		if time.Since(start) > 10*time.Second {
			t.Fatal("condition not met in 10s")
		}
	}
}

// A scrape whose scraper leaves while its body renders (a GPU read hanging
// to the deadline) frees its request slot at once: scrapers that gave up
// held their slots until their bodies were rendered, and live scrapes got
// 503 with nobody served (probe17-http D4). The body is still rendered,
// for the scrapes that joined it.
func TestAbandonedScrapeFreesItsSlot(t *testing.T) {
	g := &heldGatherer{entered: make(chan struct{}), release: make(chan struct{})}
	h := newTestHandler(t, g)
	h.inflight = make(chan struct{}, 1)
	leaving, leave := context.WithCancel(context.Background())
	left := make(chan struct{})
	go func() {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/metrics", nil).WithContext(leaving))
		close(left)
	}()
	<-g.entered
	leave()
	select {
	case <-left:
	case <-time.After(10 * time.Second):
		t.Fatal("the abandoned scrape still waits for its body")
	}
	// The slot is free: the next scrape (due sooner, a body of its own) is
	// served, not refused.
	r := httptest.NewRequest("GET", "/metrics", nil)
	r.Header.Set("X-Prometheus-Scrape-Timeout-Seconds", "1")
	w := httptest.NewRecorder()
	done := make(chan struct{})
	go func() { h.ServeHTTP(w, r); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the next scrape is not answered")
	}
	if w.Code != http.StatusOK {
		t.Errorf("the next scrape: %d, want 200", w.Code)
	}
	close(g.release)
}

// Renders left by their scrapers are as many as the request slots at most:
// beyond them, a scraper that leaves keeps its slot until its body is
// rendered, so that scrapers that connect and leave at once cannot start
// renders without bound (review18 R18-1: 56 renders ran at once with two
// slots). One request slot, one detached slot, every render held.
func TestDetachedRendersAreBounded(t *testing.T) {
	g := &blockingGatherer{release: make(chan struct{})}
	h := newTestHandler(t, g)
	h.inflight, h.detached = make(chan struct{}, 1), make(chan struct{}, 1)
	scrape := func(timeout string) (cancel func(), done chan int) {
		ctx, cancel := context.WithCancel(context.Background())
		r := httptest.NewRequest("GET", "/metrics", nil).WithContext(ctx)
		r.Header.Set("X-Prometheus-Scrape-Timeout-Seconds", timeout)
		done = make(chan int, 1)
		go func() {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			done <- w.Code
		}()
		return cancel, done
	}
	returns := func(done chan int, within time.Duration) bool {
		select {
		case <-done:
			return true
		case <-time.After(within):
			return false
		}
	}
	// A renders, its scraper leaves: the render is detached, A's slot free.
	leaveA, a := scrape("10")
	waitFor(t, func() bool { return g.calls.Load() == 1 })
	leaveA()
	if !returns(a, 5*time.Second) {
		t.Fatal("A, whose scraper left, still holds its slot with a detached slot free")
	}
	// B (due sooner: a render of its own), its scraper leaves too: the
	// detached slot is A's render's, so B keeps its request slot.
	leaveB, b := scrape("1")
	waitFor(t, func() bool { return g.calls.Load() == 2 })
	leaveB()
	if returns(b, 300*time.Millisecond) {
		t.Fatal("B left its render with no detached slot free")
	}
	// The one request slot is B's: C is refused.
	_, c := scrape("10")
	if code := <-c; code != http.StatusServiceUnavailable {
		t.Errorf("C: %d, want 503 while B's render holds the only slot", code)
	}
	close(g.release)
	if !returns(b, 5*time.Second) {
		t.Fatal("B does not return once its render is done")
	}
}

// blockingGatherer holds every Gather until release is closed.
type blockingGatherer struct {
	release chan struct{}
	calls   atomic.Int32
}

func (g *blockingGatherer) Gather() ([]*dto.MetricFamily, error) {
	g.calls.Add(1)
	<-g.release
	return nil, nil
}

// TestWriteTime: 10 s, and 10 s per MiB begun. By hand: an empty body 10
// s; the demo's 200,000 bytes begin one MiB, 20 s; probe J's 4,193,802
// bytes (64 GPUs, --collector.process, no gzip) are 3.9995 MiB, four
// begun, 50 s, more than the 40.96 s a scraper reading 100 KiB/s takes
// (4,193,802 / 102,400).
func TestWriteTime(t *testing.T) {
	for n, want := range map[int]time.Duration{0: 10 * time.Second, 200_000: 20 * time.Second, 4_193_802: 50 * time.Second, 1 << 20: 20 * time.Second} {
		if got := writeTime(n); got != want {
			t.Errorf("writeTime(%d) = %v, want %v", n, got, want)
		}
	}
}
