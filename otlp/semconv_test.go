package otlp

import (
	"log/slog"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

func produce(t *testing.T, reg prometheus.Gatherer, mode Semconv) map[string]metricdata.Metrics {
	t.Helper()
	sms, err := (&producer{gather: gatherFrom(reg), semconv: mode, logger: slog.New(slog.DiscardHandler)}).Produce(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]metricdata.Metrics{}
	for _, sm := range sms {
		for _, m := range sm.Metrics {
			if _, dup := out[m.Name]; dup {
				t.Errorf("%s pushed twice", m.Name)
			}
			out[m.Name] = m
		}
	}
	return out
}

func attrsOf(s attribute.Set) map[string]string {
	m := map[string]string{}
	for _, kv := range s.ToSlice() {
		m[string(kv.Key)] = kv.Value.AsString()
	}
	return m
}

// point finds the point whose attributes include want.
func point[N int64 | float64](t *testing.T, dps []metricdata.DataPoint[N], want map[string]string) metricdata.DataPoint[N] {
	t.Helper()
	for _, dp := range dps {
		a := attrsOf(dp.Attributes)
		match := true
		for k, v := range want {
			match = match && a[k] == v
		}
		if match {
			return dp
		}
	}
	t.Fatalf("no point with %v among %d", want, len(dps))
	return metricdata.DataPoint[N]{}
}

func semconvRegistry() *prometheus.Registry {
	reg := testRegistry()
	gauge := func(name string, labels prometheus.Labels, v float64) {
		names := make([]string, 0, len(labels))
		for k := range labels {
			names = append(names, k)
		}
		g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: "h"}, names)
		g.With(labels).Set(v)
		reg.MustRegister(g)
	}
	gpu3 := prometheus.Labels{"gpu": "3", "uuid": "GPU-3"}
	gauge("xpu_encoder_utilization_ratio", gpu3, 0.1)
	gauge("xpu_memory_total_bytes", gpu3, 8e10)
	gauge("xpu_memory_used_bytes", gpu3, 5e10)
	gauge("xpu_workload_utilization_ratio", prometheus.Labels{
		"namespace": "ray", "pod": "raycluster-worker-q8n4d", "container": "ray-worker", "workload": "raycluster-llm", "workload_kind": "RayCluster",
	}, 0.2)
	ecc := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "xpu_ecc_errors_total", Help: "h"}, []string{"uuid", "type", "scope"})
	ecc.WithLabelValues("GPU-3", "corrected", "volatile").Add(2)
	ecc.WithLabelValues("GPU-3", "corrected", "aggregate").Add(7)
	nvlink := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "xpu_nvlink_data_bytes_total", Help: "h"}, []string{"uuid", "direction"})
	nvlink.WithLabelValues("GPU-3", "rx").Add(100)
	nvlink.WithLabelValues("GPU-3", "tx").Add(200)
	reg.MustRegister(ecc, nvlink)
	return reg
}

func TestOTLPSemconvAlso(t *testing.T) {
	got := produce(t, semconvRegistry(), SemconvAlso)
	// Our names stay, untouched.
	ours := got["xpu_utilization_ratio"].Data.(metricdata.Gauge[float64]).DataPoints
	if len(ours) != 1 || attrsOf(ours[0].Attributes)["pod"] != "embeddings-0" {
		t.Errorf("xpu_utilization_ratio changed: %v", ours)
	}

	// Three of our families make one hw.gpu.utilization, told apart by
	// hw.gpu.task.
	util := got["hw.gpu.utilization"].Data.(metricdata.Gauge[float64]).DataPoints
	if len(util) != 2 {
		t.Errorf("hw.gpu.utilization has %d points, want general and encoder", len(util))
	}
	if dp := point(t, util, map[string]string{"hw.gpu.task": "encoder", "hw.id": "GPU-3"}); dp.Value != 0.1 {
		t.Errorf("encoder utilization %v, want 0.1", dp.Value)
	}

	// hw.status, by hand: GPU-3 up (1) is ok=1 failed=1-1=0; GPU-5 down
	// (0) is ok=0 failed=1-0=1.
	status := got["hw.status"]
	sum := status.Data.(metricdata.Sum[float64])
	if status.Unit != "1" || sum.IsMonotonic || sum.Temporality != metricdata.CumulativeTemporality {
		t.Errorf("hw.status is an UpDownCounter: %+v", status)
	}
	for _, c := range []struct {
		id, state string
		want      float64
	}{{"GPU-3", "ok", 1}, {"GPU-3", "failed", 0}, {"GPU-5", "ok", 0}, {"GPU-5", "failed", 1}} {
		dp := point(t, sum.DataPoints, map[string]string{"hw.id": c.id, "hw.state": c.state, "hw.type": "gpu"})
		if dp.Value != c.want {
			t.Errorf("hw.status %s %s = %v, want %v", c.id, c.state, dp.Value, c.want)
		}
	}

	// Memory: 5e10 of 8e10 bytes, as UpDownCounters in By.
	for name, want := range map[string]float64{"hw.gpu.memory.usage": 5e10, "hw.gpu.memory.limit": 8e10} {
		m := got[name]
		s, ok := m.Data.(metricdata.Sum[float64])
		if !ok || m.Unit != "By" || s.IsMonotonic || len(s.DataPoints) != 1 || s.DataPoints[0].Value != want || s.DataPoints[0].StartTime.IsZero() {
			t.Errorf("%s: %+v, want %v By non-monotonic", name, m, want)
		}
	}

	// ECC: the volatile count only (2), not volatile plus aggregate (9).
	errs := got["hw.errors"].Data.(metricdata.Sum[float64]).DataPoints
	if len(errs) != 1 || errs[0].Value != 2 || !reflect.DeepEqual(attrsOf(errs[0].Attributes), map[string]string{"hw.id": "GPU-3", "error.type": "corrected", "hw.type": "gpu"}) {
		t.Errorf("hw.errors: %v", errs)
	}

	// NVLink bytes as hw.gpu.io with the convention's direction values.
	io := got["hw.gpu.io"].Data.(metricdata.Sum[float64]).DataPoints
	if point(t, io, map[string]string{"network.io.direction": "receive"}).Value != 100 ||
		point(t, io, map[string]string{"network.io.direction": "transmit"}).Value != 200 {
		t.Errorf("hw.gpu.io: %v", io)
	}

	// No convention for the workload split: it stays under our name only.
	if _, ok := got["xpu_workload_utilization_ratio"]; !ok {
		t.Error("xpu_workload_utilization_ratio missing")
	}
	if got["xpu_memory_used_bytes"].Unit != "By" || got["xpu_inference_time_to_first_token_seconds"].Unit != "s" {
		t.Error("our families lost their units")
	}
}

func TestOTLPSemconvOnly(t *testing.T) {
	got := produce(t, semconvRegistry(), SemconvOnly)
	for _, gone := range []string{"xpu_utilization_ratio", "xpu_device_up", "xpu_energy_joules_total", "xpu_inference_time_to_first_token_seconds"} {
		if _, ok := got[gone]; ok {
			t.Errorf("%s pushed under our name with --otlp.semconv=only", gone)
		}
	}
	for _, kept := range []string{"hw.gpu.utilization", "hw.energy", "gen_ai.server.time_to_first_token"} {
		if _, ok := got[kept]; !ok {
			t.Errorf("%s missing", kept)
		}
	}
	// A family without a convention keeps its name; its owners become
	// k8s.* attributes, except a CRD kind, which has none.
	dps := got["xpu_workload_utilization_ratio"].Data.(metricdata.Gauge[float64]).DataPoints
	want := map[string]string{
		"k8s.namespace.name": "ray", "k8s.pod.name": "raycluster-worker-q8n4d", "k8s.container.name": "ray-worker",
		"workload": "raycluster-llm", "workload_kind": "RayCluster",
	}
	if len(dps) != 1 || !reflect.DeepEqual(attrsOf(dps[0].Attributes), want) || dps[0].Value != 0.2 {
		t.Errorf("xpu_workload_utilization_ratio: %v, want %v", dps, want)
	}
}

func TestOTLPSemconvNoneIsTheScrape(t *testing.T) {
	got := produce(t, semconvRegistry(), SemconvNone)
	for name := range got {
		if !strings.HasPrefix(name, "xpu_") {
			t.Errorf("%s pushed without --otlp.semconv", name)
		}
	}
}

// README.md's mapping table lists exactly the mapped families, with the
// convention names the code uses.
func TestOTLPSemconvTableMatchesREADME(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(b), "\n### OTLP\n")
	section, _, _ = strings.Cut(section, "\n### ")
	row := regexp.MustCompile("(?m)^ *\\| `(xpu_[a-z_]+)` \\| `([a-z_.]+)`")
	var inReadme, inCode []string
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		inReadme = append(inReadme, m[1]+" "+m[2])
	}
	for from, m := range semconvMappings {
		inCode = append(inCode, from+" "+m.name)
	}
	sort.Strings(inReadme)
	sort.Strings(inCode)
	if !reflect.DeepEqual(inReadme, inCode) {
		t.Errorf("README.md's OTLP table:\n%s\ncode:\n%s", strings.Join(inReadme, "\n"), strings.Join(inCode, "\n"))
	}
}
