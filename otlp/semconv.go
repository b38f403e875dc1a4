package otlp

import (
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	genai "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/semconv/v1.41.0/genaiconv"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/semconv/v1.43.0/hwconv"
)

// The names, units and attribute keys below come from the Go packages that
// OpenTelemetry generates from the semantic conventions' registry, so a
// misspelt name does not compile: the hardware conventions of release
// v1.43.0 (hwconv, the "hw.*" metrics) and the GenAI conventions of
// v1.41.0, the last release whose Go package carries them (genaiconv):
// later releases mark them "Moved to the OpenTelemetry GenAI semantic
// conventions repository" (open-telemetry/semantic-conventions-genai),
// whose docs/gen-ai/gen-ai-metrics.md keeps the three gen_ai.server.*
// names used here.

// Which instrument a convention names; it decides the OTLP data type.
type instrument int

const (
	asGauge     instrument = iota // Gauge
	asUpDown                      // UpDownCounter: a non-monotonic cumulative Sum
	asCounter                     // Counter: a monotonic cumulative Sum
	asHistogram                   // Histogram
)

// mapping puts one of our families under a convention's name.
type mapping struct {
	name, unit string
	kind       instrument
	genAI      bool                 // GenAI family: "model" is the served model
	fixed      []attribute.KeyValue // attributes the convention wants that our name implies
	rename     map[string]attribute.Key
	values     map[string]map[string]string // label → our value → the convention's
	keep       func(attribute.Set) bool     // nil keeps every point
	drop       map[string]bool              // labels the convention has no use for
	// extra turns one of our points into the convention's; nil keeps it.
	extra func(dp metricdata.DataPoint[float64]) []metricdata.DataPoint[float64]
}

var gpuType = semconv.HwTypeGpu

// semconvMappings is keyed by our family name. README.md, "OTLP", shows the
// same table; TestSemconvTableMatchesREADME keeps them together.
var semconvMappings = map[string]mapping{
	"xpu_utilization_ratio": {
		name: hwconv.GpuUtilization{}.Name(), unit: hwconv.GpuUtilization{}.Unit(), kind: asGauge,
		fixed: []attribute.KeyValue{semconv.HwGpuTaskGeneral},
	},
	"xpu_encoder_utilization_ratio": {
		name: hwconv.GpuUtilization{}.Name(), unit: hwconv.GpuUtilization{}.Unit(), kind: asGauge,
		fixed: []attribute.KeyValue{semconv.HwGpuTaskEncoder},
	},
	"xpu_decoder_utilization_ratio": {
		name: hwconv.GpuUtilization{}.Name(), unit: hwconv.GpuUtilization{}.Unit(), kind: asGauge,
		fixed: []attribute.KeyValue{semconv.HwGpuTaskDecoder},
	},
	// Not xpu_memory_utilization_ratio: NVML's "memory utilization" is the
	// time memory was busy, the convention's hw.gpu.memory.utilization the
	// fraction of memory in use ("Fraction of GPU memory used.").
	"xpu_memory_used_bytes": {
		name: hwconv.GpuMemoryUsage{}.Name(), unit: hwconv.GpuMemoryUsage{}.Unit(), kind: asUpDown,
	},
	"xpu_memory_total_bytes": {
		name: hwconv.GpuMemoryLimit{}.Name(), unit: hwconv.GpuMemoryLimit{}.Unit(), kind: asUpDown,
	},
	// NVLink is the only byte counter we have; hw.gpu.io is "Received and
	// transmitted bytes by the GPU", so PCIe traffic is missing from it.
	"xpu_nvlink_data_bytes_total": {
		name: hwconv.GpuIO{}.Name(), unit: hwconv.GpuIO{}.Unit(), kind: asCounter,
		rename: map[string]attribute.Key{"direction": semconv.NetworkIODirectionKey},
		values: map[string]map[string]string{"direction": {"rx": "receive", "tx": "transmit"}},
	},
	"xpu_power_watts": {
		name: hwconv.Power{}.Name(), unit: hwconv.Power{}.Unit(), kind: asGauge,
		fixed: []attribute.KeyValue{gpuType},
	},
	"xpu_energy_joules_total": {
		name: hwconv.Energy{}.Name(), unit: hwconv.Energy{}.Unit(), kind: asCounter,
		fixed: []attribute.KeyValue{gpuType},
	},
	"xpu_temperature_celsius": {
		name: hwconv.Temperature{}.Name(), unit: hwconv.Temperature{}.Unit(), kind: asGauge,
		fixed:  []attribute.KeyValue{gpuType},
		rename: map[string]attribute.Key{"sensor": semconv.HwSensorLocationKey},
	},
	// Volatile counts only (since the driver loaded): the aggregate ones
	// cover the same errors again over the device's life.
	"xpu_ecc_errors_total": {
		name: hwconv.Errors{}.Name(), unit: hwconv.Errors{}.Unit(), kind: asCounter,
		fixed:  []attribute.KeyValue{gpuType},
		rename: map[string]attribute.Key{"type": semconv.ErrorTypeKey},
		drop:   map[string]bool{"scope": true},
		keep: func(s attribute.Set) bool {
			v, _ := s.Value("scope")
			return v.AsString() == "volatile"
		},
	},
	// hw.status is "1 (true) or 0 (false) for each of the possible states":
	// an answering device is ok=1 failed=0, a lost one ok=0 failed=1.
	"xpu_device_up": {
		name: hwconv.Status{}.Name(), unit: hwconv.Status{}.Unit(), kind: asUpDown,
		fixed: []attribute.KeyValue{gpuType},
		extra: func(dp metricdata.DataPoint[float64]) []metricdata.DataPoint[float64] {
			failed := dp
			failed.Value = 1 - dp.Value
			failed.Attributes = withAttrs(dp.Attributes, semconv.HwStateFailed)
			dp.Attributes = withAttrs(dp.Attributes, semconv.HwStateOk)
			return []metricdata.DataPoint[float64]{dp, failed}
		},
	},
	"xpu_inference_time_to_first_token_seconds": {
		name: genaiconv.ServerTimeToFirstToken{}.Name(), unit: genaiconv.ServerTimeToFirstToken{}.Unit(), kind: asHistogram, genAI: true,
	},
	"xpu_inference_inter_token_latency_seconds": {
		name: genaiconv.ServerTimePerOutputToken{}.Name(), unit: genaiconv.ServerTimePerOutputToken{}.Unit(), kind: asHistogram, genAI: true,
	},
	"xpu_inference_request_duration_seconds": {
		name: genaiconv.ServerRequestDuration{}.Name(), unit: genaiconv.ServerRequestDuration{}.Unit(), kind: asHistogram, genAI: true,
	},
}

// deviceAttrs are our device identity labels and the hardware
// conventions' attributes for them. gpu becomes hw.name ("gpu3") in attrs:
// the convention's example names are such short handles ("eth0").
var deviceAttrs = map[string]attribute.Key{
	"uuid":        semconv.HwIDKey,
	"model":       semconv.HwModelKey,
	"vendor":      semconv.HwVendorKey,
	"parent_uuid": semconv.HwParentKey,
}

// ownerAttrs are the Kubernetes owner labels with a convention.
var ownerAttrs = map[string]attribute.Key{
	"namespace": semconv.K8SNamespaceNameKey,
	"pod":       semconv.K8SPodNameKey,
	"container": semconv.K8SContainerNameKey,
}

// workloadKinds are the workload_kind values the conventions have a
// k8s.<kind>.name attribute for; other kinds (CRDs such as RayCluster)
// keep our workload and workload_kind labels.
var workloadKinds = map[string]attribute.Key{
	"Deployment":  semconv.K8SDeploymentNameKey,
	"StatefulSet": semconv.K8SStatefulSetNameKey,
	"DaemonSet":   semconv.K8SDaemonSetNameKey,
	"ReplicaSet":  semconv.K8SReplicaSetNameKey,
	"Job":         semconv.K8SJobNameKey,
	"CronJob":     semconv.K8SCronJobNameKey,
}

func withAttrs(s attribute.Set, kvs ...attribute.KeyValue) attribute.Set {
	all := append(s.ToSlice(), kvs...)
	return attribute.NewSet(all...)
}

// ownerKVs renames owner labels in kvs; labels without a convention stay.
func ownerKVs(kvs []attribute.KeyValue) []attribute.KeyValue {
	var workload, kind string
	out := make([]attribute.KeyValue, 0, len(kvs))
	for _, kv := range kvs {
		switch k := string(kv.Key); {
		case k == "workload":
			workload = kv.Value.AsString()
		case k == "workload_kind":
			kind = kv.Value.AsString()
		case ownerAttrs[k] != "":
			out = append(out, ownerAttrs[k].String(kv.Value.AsString()))
		default:
			out = append(out, kv)
		}
	}
	if key, ok := workloadKinds[kind]; ok && workload != "" {
		return append(out, key.String(workload))
	}
	if workload != "" {
		out = append(out, attribute.String("workload", workload))
	}
	if kind != "" {
		out = append(out, attribute.String("workload_kind", kind))
	}
	return out
}

// attrs translates one point's labels for mapping m.
func (m mapping) attrs(s attribute.Set) attribute.Set {
	var kvs []attribute.KeyValue
	for _, kv := range s.ToSlice() {
		k, v := string(kv.Key), kv.Value.AsString()
		if vm, ok := m.values[k]; ok {
			if nv, ok := vm[v]; ok {
				v = nv
			}
		}
		switch {
		case m.rename[k] != "":
			kvs = append(kvs, m.rename[k].String(v))
		case m.genAI && k == "model":
			kvs = append(kvs, genai.GenAIRequestModelKey.String(v))
		case k == "gpu":
			kvs = append(kvs, semconv.HwNameKey.String("gpu"+v))
		case deviceAttrs[k] != "":
			kvs = append(kvs, deviceAttrs[k].String(v))
		case m.drop[k]:
		default:
			kvs = append(kvs, attribute.String(k, v))
		}
	}
	kvs = append(ownerKVs(kvs), m.fixed...)
	return attribute.NewSet(kvs...)
}

// semconvScopes returns the convention-named metrics for the families in
// ms that have a mapping, one scope per conventions release.
func semconvScopes(ms []metricdata.Metrics) []metricdata.ScopeMetrics {
	hw := metricdata.ScopeMetrics{Scope: instrumentation.Scope{Name: scopeName, SchemaURL: semconv.SchemaURL}}
	gen := metricdata.ScopeMetrics{Scope: instrumentation.Scope{Name: scopeName, SchemaURL: genai.SchemaURL}}
	index := map[string]int{} // convention name → position in its scope
	for _, in := range ms {
		m, ok := semconvMappings[in.Name]
		if !ok {
			continue
		}
		sm := &hw
		if m.genAI {
			sm = &gen
		}
		out, ok := m.convert(in)
		if !ok {
			continue
		}
		if i, seen := index[m.name]; seen {
			sm.Metrics[i].Data = merge(sm.Metrics[i].Data, out.Data)
			continue
		}
		index[m.name] = len(sm.Metrics)
		sm.Metrics = append(sm.Metrics, out)
	}
	var scopes []metricdata.ScopeMetrics
	for _, sm := range []metricdata.ScopeMetrics{hw, gen} {
		if len(sm.Metrics) > 0 {
			scopes = append(scopes, sm)
		}
	}
	return scopes
}

// convert renames one family; false when its data is of a type the
// mapping does not expect (a family whose type changed).
func (m mapping) convert(in metricdata.Metrics) (metricdata.Metrics, bool) {
	out := metricdata.Metrics{Name: m.name, Unit: m.unit, Description: in.Description}
	points := func(dps []metricdata.DataPoint[float64]) []metricdata.DataPoint[float64] {
		var res []metricdata.DataPoint[float64]
		for _, dp := range dps {
			if m.keep != nil && !m.keep(dp.Attributes) {
				continue
			}
			dp.Attributes = m.attrs(dp.Attributes)
			if m.extra != nil {
				res = append(res, m.extra(dp)...)
			} else {
				res = append(res, dp)
			}
		}
		return res
	}
	switch d := in.Data.(type) {
	case metricdata.Gauge[float64]:
		switch m.kind {
		case asGauge:
			out.Data = metricdata.Gauge[float64]{DataPoints: points(d.DataPoints)}
		case asUpDown:
			// A gauge read from the device is the current value of
			// what the convention counts up and down; cumulative
			// since the exporter started.
			out.Data = metricdata.Sum[float64]{DataPoints: withStart(points(d.DataPoints)), Temporality: metricdata.CumulativeTemporality}
		default:
			return out, false
		}
	case metricdata.Sum[float64]:
		if m.kind != asCounter {
			return out, false
		}
		out.Data = metricdata.Sum[float64]{DataPoints: points(d.DataPoints), Temporality: metricdata.CumulativeTemporality, IsMonotonic: true}
	case metricdata.Histogram[float64]:
		if m.kind != asHistogram {
			return out, false
		}
		h := metricdata.Histogram[float64]{Temporality: d.Temporality}
		for _, dp := range d.DataPoints {
			dp.Attributes = m.attrs(dp.Attributes)
			h.DataPoints = append(h.DataPoints, dp)
		}
		out.Data = h
	default:
		return out, false
	}
	return out, true
}

func withStart(dps []metricdata.DataPoint[float64]) []metricdata.DataPoint[float64] {
	for i := range dps {
		if dps[i].StartTime.IsZero() {
			dps[i].StartTime = processStart
		}
	}
	return dps
}

// merge appends the points of b to a, both of one convention (three of our
// utilization families make one hw.gpu.utilization).
func merge(a, b metricdata.Aggregation) metricdata.Aggregation {
	switch x := a.(type) {
	case metricdata.Gauge[float64]:
		if y, ok := b.(metricdata.Gauge[float64]); ok {
			x.DataPoints = append(x.DataPoints, y.DataPoints...)
		}
		return x
	case metricdata.Sum[float64]:
		if y, ok := b.(metricdata.Sum[float64]); ok {
			x.DataPoints = append(x.DataPoints, y.DataPoints...)
		}
		return x
	case metricdata.Histogram[float64]:
		if y, ok := b.(metricdata.Histogram[float64]); ok {
			x.DataPoints = append(x.DataPoints, y.DataPoints...)
		}
		return x
	}
	return a
}

// promUnits gives our families, named as /metrics serves them, the OTLP
// unit their suffix states: the reverse of the specification's
// "Prometheus and OpenMetrics Compatibility" (specification/compatibility/
// prometheus_and_openmetrics.md, "Metric Metadata"), which turns UCUM units
// into these suffixes. Longest suffix first.
var promUnits = []struct{ suffix, unit string }{
	{"_bytes_per_second", "By/s"},
	{"_bytes", "By"},
	{"_seconds", "s"},
	{"_ratio", "1"},
	{"_watts", "W"},
	{"_joules", "J"},
	{"_celsius", "Cel"},
	{"_hertz", "Hz"},
}

func promUnit(name string) string {
	name = strings.TrimSuffix(name, "_total")
	for _, u := range promUnits {
		if strings.HasSuffix(name, u.suffix) {
			return u.unit
		}
	}
	return ""
}

// renameOwners applies the owner conventions to a family kept under our
// name (--otlp.semconv=only).
func renameOwners(m metricdata.Metrics) metricdata.Metrics {
	set := func(s attribute.Set) attribute.Set { return attribute.NewSet(ownerKVs(s.ToSlice())...) }
	switch d := m.Data.(type) {
	case metricdata.Gauge[float64]:
		for i := range d.DataPoints {
			d.DataPoints[i].Attributes = set(d.DataPoints[i].Attributes)
		}
	case metricdata.Sum[float64]:
		for i := range d.DataPoints {
			d.DataPoints[i].Attributes = set(d.DataPoints[i].Attributes)
		}
	case metricdata.Histogram[float64]:
		for i := range d.DataPoints {
			d.DataPoints[i].Attributes = set(d.DataPoints[i].Attributes)
		}
	case metricdata.ExponentialHistogram[float64]:
		for i := range d.DataPoints {
			d.DataPoints[i].Attributes = set(d.DataPoints[i].Attributes)
		}
	case metricdata.Summary:
		for i := range d.DataPoints {
			d.DataPoints[i].Attributes = set(d.DataPoints[i].Attributes)
		}
	}
	return m
}
