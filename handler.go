package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/xpu-exporter/xpu_exporter/collector"
	"github.com/xpu-exporter/xpu_exporter/internal/flight"
)

type handlerOpts struct {
	defaultTimeout time.Duration
	maxTimeout     time.Duration
	timeoutOffset  time.Duration
	maxRequests    int
	logger         *slog.Logger
	// stopping ends at shutdown once scrapes under way have had their
	// grace (main's shutdown): those still rendering answer at once with
	// what they have, devices not read yet reported down. Nil: never.
	stopping context.Context
}

// metricsHandler serves one scrape: it derives the scrape's deadline from
// Prometheus' header and binds the exporter to it for this request only.
type metricsHandler struct {
	exporter *collector.Exporter
	base     prometheus.Gatherer
	opts     handlerOpts
	inflight chan struct{}
	// detached are the renders whose scrapers left, each freeing its
	// request slot: as many as there are request slots, so that scrapers
	// that connect and leave at once cannot start renders without bound.
	detached chan struct{}
	// bodies are the bodies being rendered. Concurrent scrapes (an HA pair
	// of Prometheus servers, or ten scrapers in a load test) already share
	// the node snapshot; without this each still paid for its own
	// collector pass, text and gzip, which on two cores queued them behind
	// one another. Their bodies would differ only in the exporter's own
	// process figures and the engines' and self-metrics' values of a few
	// milliseconds later.
	rendering flight.Group[struct{}, *sharedBody]
}

// sharedBody is one scrape's response body, served as well to the scrapes
// that joined it while it was rendered.
type sharedBody struct {
	text *bytes.Buffer
	// users counts the scrapes serving the body; the last one pools the
	// buffers. Joins add to it under the flight's lock, before the body's
	// call is finished, so it cannot reach 0 while a scrape may yet join.
	users atomic.Int32

	zipOnce sync.Once
	zipped  *bytes.Buffer
}

func newMetricsHandler(e *collector.Exporter, base prometheus.Gatherer, opts handlerOpts) *metricsHandler {
	h := &metricsHandler{exporter: e, base: base, opts: opts}
	h.rendering.Slack = flight.ScrapeSlack
	if opts.maxRequests > 0 {
		h.inflight = make(chan struct{}, opts.maxRequests)
		h.detached = make(chan struct{}, opts.maxRequests)
	}
	return h
}

func (h *metricsHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !readOnly(w, r) {
		return
	}
	if h.inflight != nil {
		select {
		case h.inflight <- struct{}{}:
			defer func() { <-h.inflight }()
		default:
			http.Error(w, "too many concurrent scrapes", http.StatusServiceUnavailable)
			return
		}
	}
	b := h.body(r)
	if b == nil {
		return // the scraper went away while waiting
	}
	defer b.release()

	w.Header().Set("Content-Type", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	w.Header().Add("Vary", "Accept-Encoding")
	body := b.text
	if acceptsGzip(r.Header.Get("Accept-Encoding")) {
		w.Header().Set("Content-Encoding", "gzip")
		body = b.gzip()
	}
	w.Header().Set("Content-Length", strconv.Itoa(body.Len()))
	// The body is whole: sending it takes a scraper that reads. One that
	// never reads held its request slot to the server's write timeout,
	// the longest scrape allowed and more, and forty such connections,
	// each with requests pipelined behind the one blocked, turned every
	// scrape away for two minutes at a time (probe H, PH2).
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(writeTime(body.Len())))
	w.Write(body.Bytes())
}

// writeTime is how long a scraper has to read a body of n bytes: 10 s, and
// 10 s per MiB begun, so that a scraper reading at 100 KiB/s (across a slow
// link, a body asked for without gzip) gets it whole: at a second per MiB
// a 4 MiB body was cut short for one reading at 300 kB/s (probe J, PJ4).
func writeTime(n int) time.Duration {
	return 10*time.Second + time.Duration((n+1<<20-1)>>20)*10*time.Second
}

// body renders this scrape's body, or joins the one being rendered when it
// is due no later than this scrape's deadline, nor more than a second
// sooner (internal/flight); a scrape due sooner, or much later, renders its
// own, and still shares the reads of devices under way.
func (h *metricsHandler) body(r *http.Request) *sharedBody {
	deadline := time.Now().Add(h.deadline(r))
	start := new(sharedBody)
	start.users.Store(1)
	call, leader := h.rendering.Join(struct{}{}, deadline, start, func(b **sharedBody) bool {
		(*b).users.Add(1)
		return true
	})
	b := call.Val
	if !leader {
		h.exporter.CountCoalesced()
		// The body's own scrape ends by its deadline, no later than ours:
		// nothing but the scraper leaving ends the wait sooner.
		if !call.Wait(r.Context()) {
			b.release()
			return nil
		}
		return b
	}
	b.text = bodies.get()

	// Rendered aside, with a use of its own: its scraper leaving ends this
	// wait, and so frees the scrape's request slot (--web.max-requests),
	// which scrapers that gave up held until their bodies were rendered,
	// by the scrape deadline on a hung GPU, and live scrapes got 503 with
	// nobody served (found by probe17-http). The body is still rendered,
	// bounded by the deadline only (and by the exporter stopping), for the
	// scrapes that joined it, which would otherwise be served devices
	// reported down.
	b.users.Add(1)
	rendered := make(chan struct{})
	go func() {
		// The render's own use of the body ends last, after rendered is
		// closed: the scrapes still using it keep it from the pool.
		defer b.release()
		defer close(rendered)
		ctx, cancel := context.WithDeadline(context.WithoutCancel(r.Context()), deadline)
		defer cancel()
		if h.opts.stopping != nil {
			defer context.AfterFunc(h.opts.stopping, cancel)()
		}
		// Like promhttp's ContinueOnError: what the registry could gather
		// is served, and the error logged.
		mfs, err := h.base.Gather()
		if err != nil {
			h.opts.logger.Error("error gathering the exporter's own metrics", "err", err)
		}
		h.exporter.WriteText(ctx, b.text, mfs)
		h.rendering.Finish(struct{}{}, call)
	}()
	select {
	case <-rendered:
		return b
	case <-r.Context().Done():
	}
	// The scraper left. With every detached slot taken (scrapers that
	// connect and leave at once), the render keeps this scrape's request
	// slot until it is done, as it did before renders could be left.
	if h.detached != nil {
		select {
		case h.detached <- struct{}{}:
			go func() {
				<-rendered
				<-h.detached
			}()
		default:
			<-rendered
		}
	}
	b.release()
	return nil
}

// gzip is the body compressed, once for all the scrapes that share it.
func (b *sharedBody) gzip() *bytes.Buffer {
	b.zipOnce.Do(func() {
		b.zipped = bodies.get()
		zw := gzips.get()
		zw.Reset(b.zipped)
		zw.Write(b.text.Bytes())
		zw.Close()
		// Not to hold on to this body until the next one.
		zw.Reset(io.Discard)
		gzips.put(zw)
	})
	return b.zipped
}

// release is a user's end of b; the last one keeps its buffers for the
// next scrapes.
func (b *sharedBody) release() {
	if b.users.Add(-1) != 0 {
		return
	}
	for _, buf := range []*bytes.Buffer{b.text, b.zipped} {
		if buf != nil && buf.Cap() <= maxPooledBody {
			buf.Reset()
			bodies.put(buf)
		}
	}
}

// A response body is built whole before it is sent, so that the scrape's
// deadline never cuts a response in half. Bodies larger than a demo node's
// many times over are not kept for the next scrape.
const maxPooledBody = 4 << 20

// klauspost/compress's gzip at BestSpeed: the demo node's 200 KB body
// compresses to 16.6 KB in 0.25 ms here, against 17.2 KB in 0.58 ms with
// the standard library's BestSpeed and 13 KB in 3.9 ms at its default
// level; Huffman coding alone is no faster and 8 times larger.
var (
	bodies = newReuse(func() *bytes.Buffer { return new(bytes.Buffer) })
	gzips  = newReuse(func() *gzip.Writer {
		zw, _ := gzip.NewWriterLevel(io.Discard, gzip.BestSpeed)
		return zw
	})
)

// reuse keeps one value for good and pools the others. A sync.Pool alone
// empties within two garbage collections, so sequential scrapes built a
// new body buffer (grown to 200 KB) and a new gzip writer (1.2 MB of
// compressor state) every few scrapes: about 0.26 of the 1.74 MB a demo
// scrape allocated.
type reuse[T any] struct {
	spare atomic.Pointer[T]
	pool  sync.Pool
}

func newReuse[T any](make func() *T) *reuse[T] {
	return &reuse[T]{pool: sync.Pool{New: func() any { return make() }}}
}

func (r *reuse[T]) get() *T {
	if v := r.spare.Swap(nil); v != nil {
		return v
	}
	return r.pool.Get().(*T)
}

func (r *reuse[T]) put(v *T) {
	if !r.spare.CompareAndSwap(nil, v) {
		r.pool.Put(v)
	}
}

// acceptsGzip reads an Accept-Encoding header (RFC 9110, section 12.5.3):
// gzip is acceptable when listed without q=0, or, when not listed, covered
// by a "*" without q=0.
func acceptsGzip(header string) bool {
	gzipQ, starQ := -1.0, -1.0
	for part := range strings.SplitSeq(header, ",") {
		coding, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		q := 1.0
		for p := range strings.SplitSeq(params, ";") {
			if k, v, ok := strings.Cut(strings.TrimSpace(p), "="); ok && strings.EqualFold(strings.TrimSpace(k), "q") {
				if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
					q = f
				}
			}
		}
		switch strings.ToLower(strings.TrimSpace(coding)) {
		case "gzip", "x-gzip":
			gzipQ = q
		case "*":
			starQ = q
		}
	}
	if gzipQ >= 0 {
		return gzipQ > 0
	}
	return starQ > 0
}

// deadline is the time the collectors get: Prometheus' scrape timeout less
// the offset kept to write the response.
func (h *metricsHandler) deadline(r *http.Request) time.Duration {
	timeout := h.opts.defaultTimeout
	if v := r.Header.Get("X-Prometheus-Scrape-Timeout-Seconds"); v != "" {
		// Under a millisecond is no timeout Prometheus sends (its
		// durations have millisecond resolution), and would leave a
		// deadline of zero: such a header is ignored like a malformed one.
		// A longer one than allowed is the longest allowed (compared in
		// seconds: 1e300 s is no Duration).
		if s, err := strconv.ParseFloat(v, 64); err == nil && s >= 0.001 && !math.IsInf(s, 1) {
			timeout = h.opts.maxTimeout
			if s < h.opts.maxTimeout.Seconds() {
				timeout = time.Duration(s * float64(time.Second))
			}
		}
	}
	if timeout-h.opts.timeoutOffset < timeout/2 {
		return timeout / 2
	}
	return timeout - h.opts.timeoutOffset
}

// readOnly answers anything but GET and HEAD with 405: reading the hardware
// for a POST would let any client trigger it with any body.
func readOnly(w http.ResponseWriter, r *http.Request) bool {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return true
	}
	w.Header().Set("Allow", "GET, HEAD")
	http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	return false
}
