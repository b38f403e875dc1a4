package otlp

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricpb "go.opentelemetry.io/proto/otlp/metrics/v1"

	"github.com/xpu-exporter/xpu_exporter/internal/syncbuf"
)

// testRegistry holds one family of each kind the exporter serves, with
// values whose OTLP form is worked out by hand in the tests.
func testRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	util := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "xpu_utilization_ratio", Help: "Fraction of time a kernel ran."},
		[]string{"gpu", "uuid", "model", "vendor", "namespace", "pod", "container", "workload", "workload_kind"})
	util.WithLabelValues("3", "GPU-3", "NVIDIA H100 80GB HBM3", "nvidia", "search", "embeddings-0", "tei", "embeddings", "StatefulSet").Set(0.42)
	energy := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "xpu_energy_joules_total", Help: "Energy."}, []string{"gpu", "uuid"})
	energy.WithLabelValues("3", "GPU-3").Add(1234.5)
	up := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "xpu_device_up", Help: "Up."}, []string{"gpu", "uuid"})
	up.WithLabelValues("3", "GPU-3").Set(1)
	up.WithLabelValues("5", "GPU-5").Set(0)
	ttft := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "xpu_inference_time_to_first_token_seconds", Help: "TTFT.", Buckets: []float64{0.1, 0.5},
	}, []string{"engine", "model", "namespace", "pod"})
	for _, v := range []float64{0.05, 0.3, 0.7} {
		ttft.WithLabelValues("vllm", "llama-3.1-70b", "inference", "llm-0").Observe(v)
	}
	reg.MustRegister(util, energy, up, ttft)
	return reg
}

// gatherFrom gathers g, which has no deadline to keep.
func gatherFrom(g prometheus.Gatherer) GatherFunc {
	return func(context.Context) ([]*dto.MetricFamily, error) { return g.Gather() }
}

func startPusher(t *testing.T, r *receiver, protocol string, f Flags, reg prometheus.Gatherer, self *prometheus.Registry, log *syncbuf.Buffer) *Pusher {
	t.Helper()
	f.Endpoint, f.Protocol = r.url.String(), protocol
	if f.Interval == 0 {
		f.Interval = 100 * time.Millisecond
	}
	cfg, err := Resolve(f, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	cfg.Version, cfg.Node, cfg.K8sNode = "1.2.3", "gpu-node-01", "gpu-node-01"
	logger := slog.New(slog.DiscardHandler)
	if log != nil {
		logger = slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	p, err := Start(cfg, gatherFrom(reg), self, logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Shutdown(t.Context()) })
	return p
}

func nextPush(t *testing.T, r *receiver) push {
	t.Helper()
	select {
	case p := <-r.pushes:
		return p
	case <-time.After(20 * time.Second):
		t.Fatal("no OTLP push within 20s")
	}
	return push{}
}

func attrMap(kvs []*commonpb.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		m[kv.Key] = kv.Value.GetStringValue()
	}
	return m
}

func labelMap(lps []*dto.LabelPair) map[string]string {
	m := map[string]string{}
	for _, lp := range lps {
		m[lp.GetName()] = lp.GetValue()
	}
	return m
}

// metrics indexes a push by scope schema ("" for our names) and name.
func metrics(req push) map[string]*metricpb.Metric {
	out := map[string]*metricpb.Metric{}
	for _, rm := range req.req.ResourceMetrics {
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				out[m.Name] = m
			}
		}
	}
	return out
}

// One push carries what one scrape of the same registry shows: every
// family under its name, with the unit its suffix states, every series
// with its labels as attributes, every value.
func TestOTLPPushMatchesScrape(t *testing.T) {
	for _, protocol := range []string{ProtocolHTTPProtobuf, ProtocolGRPC} {
		t.Run(protocol, func(t *testing.T) {
			r := newReceiver(t, protocol)
			reg := testRegistry()
			startPusher(t, r, protocol, Flags{
				Headers: []string{"X-Api-Key=k"}, ClusterName: "prod-eu", Semconv: "also",
			}, reg, prometheus.NewRegistry(), nil)
			p := nextPush(t, r)

			if p.headers["x-api-key"] != "k" || p.encoding != "gzip" {
				t.Errorf("headers %v, encoding %q: want x-api-key=k and gzip", p.headers, p.encoding)
			}
			res := attrMap(p.req.ResourceMetrics[0].Resource.Attributes)
			for k, v := range map[string]string{
				"service.name": "xpu_exporter", "service.version": "1.2.3", "host.name": "gpu-node-01",
				"k8s.node.name": "gpu-node-01", "k8s.cluster.name": "prod-eu", "telemetry.sdk.language": "go",
			} {
				if res[k] != v {
					t.Errorf("resource %s=%q, want %q (all: %v)", k, res[k], v, res)
				}
			}

			scrape, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			got := metrics(p)
			// The units by hand, from the suffixes: _ratio is "1",
			// _joules(_total) "J", _seconds "s", none for xpu_device_up.
			units := map[string]string{
				"xpu_utilization_ratio": "1", "xpu_energy_joules_total": "J",
				"xpu_inference_time_to_first_token_seconds": "s", "xpu_device_up": "",
			}
			for _, mf := range scrape {
				m := got[mf.GetName()]
				if m == nil {
					t.Errorf("push lacks %s", mf.GetName())
					continue
				}
				if m.Unit != units[mf.GetName()] {
					t.Errorf("%s: unit %q, want %q", m.Name, m.Unit, units[mf.GetName()])
				}
				for _, s := range mf.GetMetric() {
					checkSeries(t, mf, s, m)
				}
			}

			// The same registry under the conventions (--otlp.semconv=also).
			hw := got["hw.gpu.utilization"]
			if hw == nil || hw.Unit != "1" || len(hw.GetGauge().GetDataPoints()) != 1 {
				t.Fatalf("hw.gpu.utilization: %v", hw)
			}
			dp := hw.GetGauge().DataPoints[0]
			want := map[string]string{
				"hw.id": "GPU-3", "hw.name": "gpu3", "hw.model": "NVIDIA H100 80GB HBM3", "hw.vendor": "nvidia", "hw.gpu.task": "general",
				"k8s.namespace.name": "search", "k8s.pod.name": "embeddings-0", "k8s.container.name": "tei", "k8s.statefulset.name": "embeddings",
			}
			if a := attrMap(dp.Attributes); dp.GetAsDouble() != 0.42 || !reflect.DeepEqual(a, want) {
				t.Errorf("hw.gpu.utilization %v %v, want 0.42 %v", dp.GetAsDouble(), a, want)
			}
			if e := got["hw.energy"]; e == nil || e.Unit != "J" || !e.GetSum().GetIsMonotonic() || e.GetSum().DataPoints[0].GetAsDouble() != 1234.5 {
				t.Errorf("hw.energy: %v", e)
			}
			if g := got["gen_ai.server.time_to_first_token"]; g == nil || g.Unit != "s" ||
				attrMap(g.GetHistogram().GetDataPoints()[0].Attributes)["gen_ai.request.model"] != "llama-3.1-70b" {
				t.Errorf("gen_ai.server.time_to_first_token: %v", g)
			}
		})
	}
}

// checkSeries finds series s of family mf among m's points and compares.
func checkSeries(t *testing.T, mf *dto.MetricFamily, s *dto.Metric, m *metricpb.Metric) {
	t.Helper()
	labels := labelMap(s.GetLabel())
	switch mf.GetType() {
	case dto.MetricType_GAUGE, dto.MetricType_COUNTER:
		dps := m.GetGauge().GetDataPoints()
		want := s.GetGauge().GetValue()
		if mf.GetType() == dto.MetricType_COUNTER {
			dps, want = m.GetSum().GetDataPoints(), s.GetCounter().GetValue()
			if !m.GetSum().GetIsMonotonic() || m.GetSum().AggregationTemporality != metricpb.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE {
				t.Errorf("%s: a counter must be a monotonic cumulative sum", m.Name)
			}
		}
		for _, dp := range dps {
			if reflect.DeepEqual(attrMap(dp.Attributes), labels) {
				if dp.GetAsDouble() != want {
					t.Errorf("%s%v = %v, scrape says %v", m.Name, labels, dp.GetAsDouble(), want)
				}
				return
			}
		}
	case dto.MetricType_HISTOGRAM:
		for _, dp := range m.GetHistogram().GetDataPoints() {
			if !reflect.DeepEqual(attrMap(dp.Attributes), labels) {
				continue
			}
			// By hand: observations 0.05, 0.3, 0.7 over bounds
			// 0.1, 0.5 are cumulative buckets 1, 2, 3 in the scrape
			// and per-bucket counts 1, 1, 1 in OTLP; sum 1.05.
			if !reflect.DeepEqual(dp.ExplicitBounds, []float64{0.1, 0.5}) || !reflect.DeepEqual(dp.BucketCounts, []uint64{1, 1, 1}) ||
				dp.GetCount() != s.GetHistogram().GetSampleCount() || dp.GetCount() != 3 ||
				math.Abs(dp.GetSum()-1.05) > 1e-9 || dp.GetSum() != s.GetHistogram().GetSampleSum() {
				t.Errorf("%s: bounds %v counts %v count %d sum %v", m.Name, dp.ExplicitBounds, dp.BucketCounts, dp.GetCount(), dp.GetSum())
			}
			return
		}
	}
	t.Errorf("%s: no point with attributes %v", m.Name, labels)
}

// A receiver down for many intervals costs one push at a time, each
// counted and dropped; one log line when pushing stops working and one when
// it works again; header values in no log line even when the receiver
// echoes them; and after the outage one batch, not a backlog.
func TestOTLPBackendDownThenUp(t *testing.T) {
	for _, protocol := range []string{ProtocolHTTPProtobuf, ProtocolGRPC} {
		t.Run(protocol, func(t *testing.T) {
			r := newReceiver(t, protocol)
			r.setDown(true)
			self := prometheus.NewRegistry()
			var log syncbuf.Buffer
			// An interval long enough for each push to reach the
			// receiver on a loaded machine under -race: at 50 ms some ran
			// out of time first, failures the receiver never refused.
			startPusher(t, r, protocol, Flags{
				Interval: 250 * time.Millisecond, Timeout: time.Second,
				Headers: []string{"Authorization=Bearer topsecret-token"},
			}, testRegistry(), self, &log)

			failures := func() float64 { return exportsTotal(t, self, "failure") }
			deadline := time.Now().Add(20 * time.Second)
			for failures() < 5 {
				if time.Now().After(deadline) {
					t.Fatalf("%v failed pushes counted within 20s", failures())
				}
				time.Sleep(20 * time.Millisecond)
			}
			r.setDown(false)
			p := nextPush(t, r)
			// One point per series, as in the registry: nothing of the
			// failed intervals was kept for later.
			if n := len(metrics(p)["xpu_utilization_ratio"].GetGauge().GetDataPoints()); n != 1 {
				t.Errorf("first push after the outage has %d points of xpu_utilization_ratio, want 1", n)
			}
			if n := len(metrics(p)["xpu_device_up"].GetGauge().GetDataPoints()); n != 2 {
				t.Errorf("first push after the outage has %d points of xpu_device_up, want 2", n)
			}
			deadline = time.Now().Add(20 * time.Second)
			for exportsTotal(t, self, "success") < 1 {
				if time.Now().After(deadline) {
					t.Fatal("success not counted")
				}
				time.Sleep(20 * time.Millisecond)
			}

			r.mu.Lock()
			maxInflight, refused := r.maxInflight, r.refused
			r.mu.Unlock()
			if maxInflight != 1 {
				t.Errorf("%d pushes in flight at once, want 1", maxInflight)
			}
			if refused < 5 {
				t.Errorf("receiver refused %d pushes, want at least the 5 failures", refused)
			}
			logs := log.String()
			if n := strings.Count(logs, "OTLP push failed"); n != 1 {
				t.Errorf("%d failure log lines, want 1:\n%s", n, logs)
			}
			if n := strings.Count(logs, "OTLP push works again"); n != 1 {
				t.Errorf("%d recovery log lines, want 1:\n%s", n, logs)
			}
			if strings.Contains(logs, "topsecret") {
				t.Errorf("a header value reached the log:\n%s", logs)
			}
			if !strings.Contains(logs, "<redacted>") {
				t.Errorf("the receiver's echo of the header should show redacted in the log:\n%s", logs)
			}
		})
	}
}

// The last push at shutdown fails like any other against a receiver that
// echoes the headers; its error, which main logs, names no header value.
func TestOTLPShutdownErrorRedacted(t *testing.T) {
	for _, protocol := range []string{ProtocolHTTPProtobuf, ProtocolGRPC} {
		t.Run(protocol, func(t *testing.T) {
			r := newReceiver(t, protocol)
			r.setDown(true)
			// Refused for good: a retried refusal may end in the
			// deadline's error, which echoes nothing to redact.
			r.mu.Lock()
			r.permanent = true
			r.mu.Unlock()
			p := startPusher(t, r, protocol, Flags{
				Interval: 2 * time.Second, Timeout: time.Second,
				Headers: []string{"Authorization=Bearer topsecret-token"},
			}, testRegistry(), prometheus.NewRegistry(), nil)
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			err := p.Shutdown(ctx)
			if err == nil {
				t.Fatal("the last push to a receiver that is down did not fail")
			}
			if strings.Contains(err.Error(), "topsecret") || !strings.Contains(err.Error(), "<redacted>") {
				t.Errorf("shutdown error: %v", err)
			}
		})
	}
}

// A receiver slower than the interval: each push is given up at the end
// of its interval (counted failed), rather than waited for up to
// --otlp.timeout, which would stretch the cadence to the receiver's pace.
func TestOTLPPushEndsWithinItsInterval(t *testing.T) {
	r := newHTTPReceiver(t)
	r.mu.Lock()
	r.delay = 3 * time.Second
	r.mu.Unlock()
	self := prometheus.NewRegistry()
	startPusher(t, r, ProtocolHTTPProtobuf, Flags{Interval: 300 * time.Millisecond, Timeout: 10 * time.Second}, testRegistry(), self, nil)
	// The first push starts at 0.3 s and is given up by 0.6 s; waited for,
	// it would have ended at 3.3 s, a success.
	deadline := time.Now().Add(2500 * time.Millisecond)
	for exportsTotal(t, self, "failure") < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("no push given up within 2.5 s of a 300ms interval (successes: %v)", exportsTotal(t, self, "success"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A gathering that takes all the time it is given (a device read that
// hangs, which the collectors give up at their context's deadline) leaves
// the push time to be sent: it gets half of the interval, and every push
// arrives and counts as a success.
func TestOTLPGatheringEndsHalfwayThroughTheInterval(t *testing.T) {
	r := newHTTPReceiver(t)
	self := prometheus.NewRegistry()
	reg := testRegistry()
	var (
		mu    sync.Mutex
		spent []time.Duration
	)
	hung := func(ctx context.Context) ([]*dto.MetricFamily, error) {
		began := time.Now()
		<-ctx.Done()
		mu.Lock()
		spent = append(spent, time.Since(began))
		mu.Unlock()
		return reg.Gather()
	}
	const interval = 400 * time.Millisecond
	cfg, err := Resolve(Flags{Endpoint: r.url.String(), Interval: interval}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	p, err := Start(cfg, hung, self, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Shutdown(t.Context()) })
	for range 3 {
		if got := metrics(nextPush(t, r))["xpu_device_up"]; len(got.GetGauge().GetDataPoints()) != 2 {
			t.Errorf("push without the gathered xpu_device_up: %v", got)
		}
	}
	if f := exportsTotal(t, self, "failure"); f != 0 {
		t.Errorf("%v pushes failed", f)
	}
	mu.Lock()
	defer mu.Unlock()
	// By hand: half of a 400 ms interval is 200 ms; timer slack aside,
	// no gathering may take 300 ms.
	for _, d := range spent {
		if d < 150*time.Millisecond || d > 300*time.Millisecond {
			t.Errorf("a gathering took %v, want about 200ms", d)
		}
	}
}

// exportsTotal reads xpu_otlp_exports_total{result} from self.
func exportsTotal(t *testing.T, self *prometheus.Registry, result string) float64 {
	t.Helper()
	mfs, err := self.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if mf.GetName() == "xpu_otlp_exports_total" && labelMap(m.GetLabel())["result"] == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no xpu_otlp_exports_total{result=%q}", result)
	return 0
}

func TestOTLPExportsCountedFromZero(t *testing.T) {
	r := newHTTPReceiver(t)
	r.setDown(true)
	self := prometheus.NewRegistry()
	startPusher(t, r, ProtocolHTTPProtobuf, Flags{Interval: time.Hour}, testRegistry(), self, nil)
	// Both results exist before the first push, so that rate() and
	// absence alerts work from the start.
	if s, f := exportsTotal(t, self, "success"), exportsTotal(t, self, "failure"); s != 0 || f != 0 {
		t.Errorf("xpu_otlp_exports_total before the first push: success %v failure %v, want 0 0", s, f)
	}
}

// With the exporter's JSON log, the SDK's complaints about OTEL_* variables
// it parses itself are JSON lines too, at debug level.
func TestOTLPSDKLogsThroughTheExporterLogger(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "abc")
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "garbage")
	r := newHTTPReceiver(t)
	f := Flags{Endpoint: r.url.String(), Protocol: ProtocolHTTPProtobuf, Interval: time.Hour}
	cfg, err := Resolve(f, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		var out syncbuf.Buffer
		p, err := Start(cfg, gatherFrom(testRegistry()), prometheus.NewRegistry(), slog.New(slog.NewJSONHandler(&out, &slog.HandlerOptions{Level: level})))
		if err != nil {
			t.Fatal(err)
		}
		p.Shutdown(t.Context())
		sdkLines := 0
		for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Errorf("level %v: a log line that is not JSON: %q", level, line)
				continue
			}
			if strings.Contains(line, "parse") {
				sdkLines++
				if rec["level"] != "DEBUG" {
					t.Errorf("an SDK line not at debug level: %s", line)
				}
			}
		}
		if level == slog.LevelDebug && sdkLines == 0 {
			t.Errorf("no SDK line at debug level:\n%s", out.String())
		}
		if level == slog.LevelInfo && sdkLines > 0 {
			t.Errorf("SDK lines at info level:\n%s", out.String())
		}
	}
}

// A receiver may echo the credential of an Authorization header without its
// scheme: that is kept out of the log too. A short header value is no
// secret (an org ID): replaced wherever it occurred, "1" garbled every
// address and number of a line (probe6-otlp 01, 03).
func TestRedactCredentialsNotShortValues(t *testing.T) {
	e := &countingExporter{secrets: secretsOf(map[string]string{"Authorization": "Bearer topsecret-token", "X-Scope-OrgID": "1"})}
	for in, want := range map[string]string{
		"401 from http://127.0.0.1:4318/v1/metrics: token topsecret-token expired": "401 from http://127.0.0.1:4318/v1/metrics: token <redacted> expired",
		"echo: Bearer topsecret-token":                                             "echo: <redacted>",
	} {
		if got := e.redactString(in); got != want {
			t.Errorf("redactString(%q) = %q, want %q", in, got, want)
		}
	}
}

// awaitArrival waits until a push has reached r, answered or not.
func awaitArrival(t *testing.T, r *receiver) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		r.mu.Lock()
		arrived := r.arrived
		r.mu.Unlock()
		if arrived > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no push within 20s")
		}
	}
}

// A last push that the receiver refuses, or throttles, at the stop is not
// retried: it is logged once as the last push, without "retrying every
// interval" (probe20-otlp 03) or "dropping the pushes until then"
// (review20 O2), which stood beside it.
func TestOTLPFailedLastPushIsNotRetried(t *testing.T) {
	for _, retryAfter := range []time.Duration{0, 30 * time.Second} {
		t.Run(fmt.Sprintf("retry-after %v", retryAfter), func(t *testing.T) {
			r := newHTTPReceiver(t)
			var log syncbuf.Buffer
			p := startPusher(t, r, ProtocolHTTPProtobuf, Flags{Interval: 3 * time.Second, Timeout: 3 * time.Second}, testRegistry(), prometheus.NewRegistry(), &log)
			awaitArrival(t, r)
			r.mu.Lock()
			r.retryAfter = retryAfter
			r.mu.Unlock()
			r.setDown(true)
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			if err := p.Shutdown(ctx); err == nil {
				t.Error("a refused last push is no error")
			}
			if logs := log.String(); strings.Contains(logs, "retrying") || strings.Contains(logs, "dropping") {
				t.Errorf("the last push says more pushes follow:\n%s", logs)
			}
		})
	}
}

// A push under way when the exporter stops is cut off by the stop, not by
// the receiver: it logs no failure, and the last push that follows no
// recovery (probe6-otlp 05: "OTLP push failed; retrying every interval"
// at every restart during a push).
func TestOTLPStopIsNoOutage(t *testing.T) {
	r := newHTTPReceiver(t)
	r.mu.Lock()
	r.delay = time.Second
	r.mu.Unlock()
	var log syncbuf.Buffer
	p := startPusher(t, r, ProtocolHTTPProtobuf, Flags{Interval: 3 * time.Second, Timeout: 3 * time.Second}, testRegistry(), prometheus.NewRegistry(), &log)
	awaitArrival(t, r)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := p.Shutdown(ctx); err != nil {
		t.Fatalf("last push: %v", err)
	}
	if logs := log.String(); strings.Contains(logs, "OTLP push failed") || strings.Contains(logs, "works again") {
		t.Errorf("the stop is logged as an outage:\n%s", logs)
	}
}
