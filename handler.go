package main

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/xpu-exporter/xpu_exporter/collector"
)

type handlerOpts struct {
	defaultTimeout time.Duration
	maxTimeout     time.Duration
	timeoutOffset  time.Duration
	maxRequests    int
	logger         *slog.Logger
}

// metricsHandler serves one scrape: it derives the scrape's deadline from
// Prometheus' header and binds the exporter to it for this request only.
type metricsHandler struct {
	exporter *collector.Exporter
	base     prometheus.Gatherer
	opts     handlerOpts
	inflight chan struct{}
}

func newMetricsHandler(e *collector.Exporter, base prometheus.Gatherer, opts handlerOpts) *metricsHandler {
	h := &metricsHandler{exporter: e, base: base, opts: opts}
	if opts.maxRequests > 0 {
		h.inflight = make(chan struct{}, opts.maxRequests)
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
	ctx, cancel := context.WithTimeout(r.Context(), h.deadline(r))
	defer cancel()
	reg := prometheus.NewRegistry()
	reg.MustRegister(h.exporter.Bind(ctx))
	promhttp.HandlerFor(prometheus.Gatherers{h.base, reg}, promhttp.HandlerOpts{
		ErrorLog:      slog.NewLogLogger(h.opts.logger.Handler(), slog.LevelError),
		ErrorHandling: promhttp.ContinueOnError,
	}).ServeHTTP(w, r)
}

// deadline is the time the collectors get: Prometheus' scrape timeout less
// the offset kept to write the response.
func (h *metricsHandler) deadline(r *http.Request) time.Duration {
	timeout := h.opts.defaultTimeout
	if v := r.Header.Get("X-Prometheus-Scrape-Timeout-Seconds"); v != "" {
		// Under a millisecond is no timeout Prometheus sends (its
		// durations have millisecond resolution), and would leave a
		// deadline of zero: such a header is ignored like a malformed one.
		if s, err := strconv.ParseFloat(v, 64); err == nil && s >= 0.001 && s < 3600 {
			timeout = min(time.Duration(s*float64(time.Second)), h.opts.maxTimeout)
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
