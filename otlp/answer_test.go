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
				startPusher(t, r, protocol, Flags{Interval: 200 * time.Millisecond}, testRegistry(), self, &log)
				// Between two pushes the counters agree: by hand, each
				// push had c.rejected points rejected.
				var got map[string]float64
				for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
					got = selfCounters(t, self)
					if got["success"] >= 4 && got["xpu_otlp_rejected_points_total"] == float64(c.rejected)*got["success"] {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("want at least 4 successful pushes, %d rejected points each: %v", c.rejected, got)
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
