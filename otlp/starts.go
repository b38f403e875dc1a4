package otlp

import (
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// Start times of cumulative points. A Prometheus counter, histogram or
// summary says when its counting began only through a created timestamp,
// which client_golang's own counters carry (the bridge's, counted since
// they were made) and the collectors' readings do not: energy since the
// driver loaded, ECC errors since the last driver reload, an engine's
// tokens since it started. For those the Prometheus bridge would put the
// exporter's start, as if a lifetime's count happened in the first push,
// and keep it across a reset, making a monotonic sum go down.
//
// OpenTelemetry's "Prometheus and OpenMetrics Compatibility" asks for
// "Cumulative streams: handling unknown start time" instead (metrics data
// model, "Resets and Gaps"): the first point of a stream is a
// zero-duration point, start = time, which "indicate[s] that nothing is
// known about previously-reported points", and later points of the
// unbroken stream keep its start. startTimes keeps that per stream, a
// metric name and attribute set, across pushes.

// startTimes sets the start time of the cumulative points of successive
// collections. Its zero value is ready to use.
type startTimes struct {
	mu         sync.Mutex
	streams    map[streamKey]*stream
	collection uint64
}

type streamKey struct {
	name  string
	attrs attribute.Distinct
}

// stream is what the last collection saw of a stream.
type stream struct {
	start time.Time
	last  time.Time // the time of its point
	count float64   // a sum's value, or a histogram's or summary's count
	sum   float64   // a histogram's or summary's sum
	seen  uint64    // the collection
}

// set sets the start times of ms, one collection converted from mfs.
func (s *startTimes) set(mfs []*dto.MetricFamily, ms []metricdata.Metrics) {
	created := createdStreams(mfs)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.streams == nil {
		s.streams = map[streamKey]*stream{}
	}
	s.collection++
	start := func(name string, attrs attribute.Set, bridged, t time.Time, count, sum float64) time.Time {
		k := streamKey{name, attrs.Equivalent()}
		if created[k] {
			return bridged
		}
		st := s.streams[k]
		switch {
		case st == nil:
			st = &stream{start: t}
			s.streams[k] = st
		case count < st.count || sum < st.sum:
			// A reset (a driver reload, an engine restart): a new
			// stream. The counter still had its old value at the
			// previous point, so all it counts now it counted since:
			// starting there makes a "true" reset whose value a
			// consumer takes whole, as Prometheus' rate() takes a
			// reset's, where a zero-duration point would declare that
			// "data may have been lost" and have it dropped.
			st.start = st.last
		}
		st.last, st.count, st.sum, st.seen = t, count, sum, s.collection
		return st.start
	}
	for _, m := range ms {
		switch d := m.Data.(type) {
		case metricdata.Sum[float64]:
			if d.Temporality != metricdata.CumulativeTemporality || !d.IsMonotonic {
				continue
			}
			for i := range d.DataPoints {
				dp := &d.DataPoints[i]
				dp.StartTime = start(m.Name, dp.Attributes, dp.StartTime, dp.Time, dp.Value, 0)
			}
		case metricdata.Histogram[float64]:
			for i := range d.DataPoints {
				dp := &d.DataPoints[i]
				dp.StartTime = start(m.Name, dp.Attributes, dp.StartTime, dp.Time, float64(dp.Count), dp.Sum)
			}
		case metricdata.ExponentialHistogram[float64]:
			for i := range d.DataPoints {
				dp := &d.DataPoints[i]
				dp.StartTime = start(m.Name, dp.Attributes, dp.StartTime, dp.Time, float64(dp.Count), dp.Sum)
			}
		case metricdata.Summary:
			for i := range d.DataPoints {
				dp := &d.DataPoints[i]
				dp.StartTime = start(m.Name, dp.Attributes, dp.StartTime, dp.Time, float64(dp.Count), dp.Sum)
			}
		}
	}
	// A stream this collection lacks (a device down, a pod gone) is
	// forgotten: what it counted meanwhile is unknown, so it comes back
	// as a new stream, and the state stays one collection's.
	for k, st := range s.streams {
		if st.seen != s.collection {
			delete(s.streams, k)
		}
	}
}

// createdStreams are the streams of mfs whose counting began at a known
// time, their created timestamp, which the Prometheus bridge makes their
// start.
func createdStreams(mfs []*dto.MetricFamily) map[streamKey]bool {
	var out map[streamKey]bool
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			created := m.GetCounter().GetCreatedTimestamp()
			if created == nil {
				created = m.GetHistogram().GetCreatedTimestamp()
			}
			if created == nil {
				created = m.GetSummary().GetCreatedTimestamp()
			}
			if !created.IsValid() {
				continue
			}
			// The attributes as the bridge makes them.
			kvs := make([]attribute.KeyValue, 0, len(m.GetLabel()))
			for _, l := range m.GetLabel() {
				kvs = append(kvs, attribute.String(l.GetName(), l.GetValue()))
			}
			if out == nil {
				out = map[streamKey]bool{}
			}
			attrs := attribute.NewSet(kvs...)
			out[streamKey{mf.GetName(), attrs.Equivalent()}] = true
		}
	}
	return out
}
