package otlp

import (
	"context"
	"log/slog"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// One collection as the registry would give it: the energy counter of two
// GPUs, a TTFT histogram, and the bridge's own push counter, which carries
// its created timestamp (client_golang's counters do).
type collection struct {
	energy0, energy1 float64
	energy1Absent    bool
	ttftCount        uint64
	ttftSum          float64
	exports          float64
	exportsCreated   time.Time
}

func (c collection) families() []*dto.MetricFamily {
	label := func(gpu string) []*dto.LabelPair {
		return []*dto.LabelPair{{Name: proto.String("gpu"), Value: proto.String(gpu)}}
	}
	energy := &dto.MetricFamily{Name: proto.String("xpu_energy_joules_total"), Type: dto.MetricType_COUNTER.Enum(),
		Metric: []*dto.Metric{{Label: label("0"), Counter: &dto.Counter{Value: proto.Float64(c.energy0)}}}}
	if !c.energy1Absent {
		energy.Metric = append(energy.Metric, &dto.Metric{Label: label("1"), Counter: &dto.Counter{Value: proto.Float64(c.energy1)}})
	}
	return []*dto.MetricFamily{
		energy,
		{Name: proto.String("xpu_inference_time_to_first_token_seconds"), Type: dto.MetricType_HISTOGRAM.Enum(),
			Metric: []*dto.Metric{{Histogram: &dto.Histogram{SampleCount: proto.Uint64(c.ttftCount), SampleSum: proto.Float64(c.ttftSum),
				Bucket: []*dto.Bucket{{UpperBound: proto.Float64(0.5), CumulativeCount: proto.Uint64(c.ttftCount)}}}}}},
		{Name: proto.String("xpu_otlp_exports_total"), Type: dto.MetricType_COUNTER.Enum(),
			Metric: []*dto.Metric{{Counter: &dto.Counter{Value: proto.Float64(c.exports), CreatedTimestamp: timestamppb.New(c.exportsCreated)}}}},
	}
}

// The start time of a cumulative point whose counting began before anyone
// saw it (energy since the driver loaded, an engine's tokens since it
// started) is unknown. OpenTelemetry's data model, "Cumulative streams:
// handling unknown start time": the first point of such a stream has its
// start equal to its time, and later points keep that start. A value
// that went down (a driver reload, an engine restart) is a reset: a new
// stream, here starting at the previous point's time, after which the
// counter restarted. A stream missing from a collection is forgotten: it
// comes back as a new one. A counter with a created timestamp (counted by
// the exporter itself) keeps it.
func TestOTLPStartTimes(t *testing.T) {
	created := time.Date(2026, 11, 26, 8, 0, 0, 0, time.UTC)
	steps := []collection{
		{energy0: 3.6e9, energy1: 1e9, ttftCount: 3, ttftSum: 1.05},
		{energy0: 3.6e9 + 600, energy1: 1e9 + 500, ttftCount: 5, ttftSum: 2},
		// GPU 0's driver reloaded; GPU 1 missing (down); the engine
		// restarted (count and sum down).
		{energy0: 40, energy1Absent: true, ttftCount: 2, ttftSum: 0.4},
		{energy0: 90, energy1: 1e9 + 900, ttftCount: 4, ttftSum: 0.9},
		// Same count, smaller sum: a restart too.
		{energy0: 150, energy1: 1e9 + 1000, ttftCount: 4, ttftSum: 0.5},
	}
	var step int
	p := &producer{semconv: SemconvNone, logger: slog.New(slog.DiscardHandler), gather: func(context.Context) ([]*dto.MetricFamily, error) {
		c := steps[step]
		c.exports, c.exportsCreated = float64(step), created
		return c.families(), nil
	}}
	// times[i] is the time of push i's points; by hand, each point's start
	// is the time of the push named below, or created.
	var times []time.Time
	want := []struct {
		energy0, energy1, ttft int // index into times; -1: absent
	}{
		{0, 0, 0},  // first points: start = own time
		{0, 0, 0},  // unbroken: the first point's time
		{1, -1, 1}, // resets: the previous point's time; GPU 1 absent
		{1, 3, 1},  // GPU 1 back: a new stream, start = own time
		{1, 3, 3},  // TTFT sum down: reset at the previous point's time
	}
	for step = range steps {
		sms, err := p.Produce(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		byName := map[string]metricdata.Metrics{}
		for _, sm := range sms {
			for _, m := range sm.Metrics {
				byName[m.Name] = m
			}
		}
		energy := byName["xpu_energy_joules_total"].Data.(metricdata.Sum[float64])
		ttft := byName["xpu_inference_time_to_first_token_seconds"].Data.(metricdata.Histogram[float64])
		exports := byName["xpu_otlp_exports_total"].Data.(metricdata.Sum[float64])
		now := ttft.DataPoints[0].Time
		times = append(times, now)
		w := want[step]
		if got := point(t, energy.DataPoints, map[string]string{"gpu": "0"}).StartTime; !got.Equal(times[w.energy0]) {
			t.Errorf("push %d: GPU 0 energy starts at %v, want push %d's time %v", step, got, w.energy0, times[w.energy0])
		}
		if w.energy1 >= 0 {
			if got := point(t, energy.DataPoints, map[string]string{"gpu": "1"}).StartTime; !got.Equal(times[w.energy1]) {
				t.Errorf("push %d: GPU 1 energy starts at %v, want push %d's time %v", step, got, w.energy1, times[w.energy1])
			}
		}
		if got := ttft.DataPoints[0].StartTime; !got.Equal(times[w.ttft]) {
			t.Errorf("push %d: TTFT starts at %v, want push %d's time %v", step, got, w.ttft, times[w.ttft])
		}
		if got := exports.DataPoints[0].StartTime; !got.Equal(created) {
			t.Errorf("push %d: xpu_otlp_exports_total starts at %v, want its created timestamp %v", step, got, created)
		}
		// By hand: GPU 0's energy and the histogram, GPU 1's when
		// present; never the created counter.
		streams := 3
		if steps[step].energy1Absent {
			streams = 2
		}
		if n := len(p.starts.streams); n != streams {
			t.Errorf("push %d: %d streams remembered, want %d", step, n, streams)
		}
	}
}
