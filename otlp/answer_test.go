package otlp

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	colmetricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"

	"github.com/xpu-exporter/xpu_exporter/internal/syncbuf"
)

// selfCounters reads the bridge's counters from one gathering of self:
// xpu_otlp_exports_total by result, and the others by name.
func selfCounters(t *testing.T, self *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := self.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			if r := labelMap(m.GetLabel())["result"]; r != "" {
				name = r
			}
			out[name] = m.GetCounter().GetValue()
		}
	}
	return out
}

// A push the receiver answers with partial_success was delivered: with
// rejected_data_points 0 and a message the receiver took all of it and
// warns ("Servers MAY also use the partial_success field to convey
// warnings/suggestions to clients even when the server fully accepts the
// request", OTLP "Partial Success"); with some rejected it stored the rest,
// and the client "MUST NOT retry". Either is a successful push, the
// rejected points are counted, and the receiver's message is logged once
// for as long as it keeps answering so, not at every push.
func TestOTLPPartialSuccessIsASuccess(t *testing.T) {
	for _, protocol := range []string{ProtocolHTTPProtobuf, ProtocolGRPC} {
		for _, c := range []struct {
			name     string
			rejected int64
			message  string
		}{
			{"warning", 0, "attribute foo is deprecated"},
			{"rejection", 5, "5 points have no name"},
		} {
			t.Run(protocol+"/"+c.name, func(t *testing.T) {
				r := newReceiver(t, protocol)
				r.mu.Lock()
				r.partial = &colmetricpb.ExportMetricsPartialSuccess{RejectedDataPoints: c.rejected, ErrorMessage: c.message}
				r.mu.Unlock()
				self := prometheus.NewRegistry()
				var log syncbuf.Buffer
				// A push gets one interval to gather and deliver: 1 s, so
				// that a loaded machine's pause does not fail one.
				startPusher(t, r, protocol, Flags{Interval: time.Second}, testRegistry(), self, &log)
				// Between two pushes the counters agree: by hand, each
				// push had c.rejected points rejected.
				var got map[string]float64
				for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
					got = selfCounters(t, self)
					if got["success"] >= 3 && got["xpu_otlp_rejected_points_total"] == float64(c.rejected)*got["success"] {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("want at least 3 successful pushes, %d rejected points each: %v", c.rejected, got)
					}
				}
				if got["failure"] != 0 {
					t.Errorf("%v failed pushes", got["failure"])
				}
				logs := log.String()
				if strings.Contains(logs, "OTLP push failed") {
					t.Errorf("a delivered push logged as failed:\n%s", logs)
				}
				if n := strings.Count(logs, c.message); n != 1 {
					t.Errorf("the receiver's message logged %d times, want once:\n%s", n, logs)
				}
			})
		}
	}
}

// Pushes fail, then the receiver takes them in part: pushing works again,
// and the log says so once, where it stayed at "push failed" (probe20-otlp
// 02).
func TestOTLPPartialSuccessAfterFailuresWorksAgain(t *testing.T) {
	r := newHTTPReceiver(t)
	r.setDown(true)
	self := prometheus.NewRegistry()
	var log syncbuf.Buffer
	startPusher(t, r, ProtocolHTTPProtobuf, Flags{Interval: 300 * time.Millisecond}, testRegistry(), self, &log)
	for deadline := time.Now().Add(20 * time.Second); selfCounters(t, self)["failure"] < 1; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no failed push within 20s")
		}
	}
	r.mu.Lock()
	r.partial = &colmetricpb.ExportMetricsPartialSuccess{RejectedDataPoints: 2, ErrorMessage: "2 points rejected: too old"}
	r.mu.Unlock()
	r.setDown(false)
	for deadline := time.Now().Add(20 * time.Second); selfCounters(t, self)["success"] < 3; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no 3 successful pushes within 20s")
		}
	}
	if n := strings.Count(log.String(), "OTLP push works again"); n != 1 {
		t.Errorf("%d lines say pushing works again, want 1:\n%s", n, log.String())
	}
}

// A receiver that throttles (OTLP/HTTP 429 with Retry-After, OTLP/gRPC
// UNAVAILABLE with RetryInfo) and asks for more time than the interval
// gets it: the pushes until then are dropped without a request (counted
// failed, logged once), and the first one after it goes out.
func TestOTLPThrottlingReceiverIsLeftAlone(t *testing.T) {
	for _, protocol := range []string{ProtocolHTTPProtobuf, ProtocolGRPC} {
		t.Run(protocol, func(t *testing.T) {
			r := newReceiver(t, protocol)
			r.mu.Lock()
			r.down, r.retryAfter = true, 4*time.Second
			r.mu.Unlock()
			self := prometheus.NewRegistry()
			var log syncbuf.Buffer
			began := time.Now()
			// An interval long enough that a push on a loaded machine
			// does not time out for reasons of its own.
			startPusher(t, r, protocol, Flags{Interval: 400 * time.Millisecond}, testRegistry(), self, &log)
			// By hand: the first push, at 0.4 s, is refused and asks for
			// 4 s; the pushes at 0.8 … 3.6 s (8 of them) are dropped
			// unsent.
			time.Sleep(3600*time.Millisecond - time.Since(began))
			r.mu.Lock()
			refused := r.refused
			r.down = false
			r.mu.Unlock()
			if refused != 1 {
				t.Errorf("the receiver got %d requests in 3.6 s after asking for 4 s of quiet, want 1", refused)
			}
			if got := selfCounters(t, self); got["failure"] < 5 || got["success"] != 0 {
				t.Errorf("xpu_otlp_exports_total %v: want the dropped pushes counted failed", got)
			}
			nextPush(t, r)
			if d := time.Since(began); d < 4*time.Second {
				t.Errorf("a push went out after %v, before the 4 s asked for", d)
			}
			logs := log.String()
			if n := strings.Count(logs, "OTLP receiver asked to wait"); n != 1 {
				t.Errorf("%d lines about the wait, want 1:\n%s", n, logs)
			}
			if strings.Contains(logs, "OTLP push failed") {
				t.Errorf("the wait also logged as a failure:\n%s", logs)
			}
		})
	}
}

func TestOTLPRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 26, 8, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		header string
		want   time.Duration
	}{
		{"120", 2 * time.Minute},
		{"0", 0},
		{"", 0},
		{"-5", 0},
		{"1.5", 0},
		{"soon", 0},
		{"Thu, 26 Nov 2026 08:00:30 GMT", 30 * time.Second},
		{"Thu, 26 Nov 2026 07:59:00 GMT", -time.Minute},
		{"86400", 24 * time.Hour},
	} {
		if got := retryAfter(c.header, now); got != c.want {
			t.Errorf("Retry-After: %q is %v, want %v", c.header, got, c.want)
		}
	}
}

// A wait starts when its answer arrives, replaces an earlier one of the
// same push, and is bounded: a hint of a day (a misconfigured proxy, say)
// costs five minutes of pushes, not a day's.
func TestOTLPWaitIsBounded(t *testing.T) {
	now := time.Date(2026, 11, 26, 8, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		wait time.Duration
		want time.Time
	}{
		{30 * time.Second, now.Add(30 * time.Second)},
		{5 * time.Minute, now.Add(5 * time.Minute)},
		{24 * time.Hour, now.Add(5 * time.Minute)},
		{0, time.Time{}},
		{-time.Minute, time.Time{}},
	} {
		a := answer{retryAt: now.Add(time.Hour)}
		if a.waitFor(now, c.wait); !a.retryAt.Equal(c.want) {
			t.Errorf("a wait of %v retries at %v, want %v", c.wait, a.retryAt, c.want)
		}
	}
}
