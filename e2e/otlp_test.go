package e2e

import (
	"compress/gzip"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	colmetricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricpb "go.opentelemetry.io/proto/otlp/metrics/v1"
	"google.golang.org/grpc"
	_ "google.golang.org/grpc/encoding/gzip" // the exporter gzips by default
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// otlpPush is one decoded push and the headers it came with.
type otlpPush struct {
	req     *colmetricpb.ExportMetricsServiceRequest
	headers map[string]string
}

// httpReceiver decodes OTLP/HTTP pushes; while hang is open it holds
// every request.
func httpReceiver(t *testing.T, hang chan struct{}) (string, chan otlpPush) {
	pushes := make(chan otlpPush, 100)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hang != nil {
			select {
			case <-hang:
			case <-r.Context().Done():
			}
			return
		}
		var body io.Reader = http.MaxBytesReader(w, r.Body, 64<<20)
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		b, err := io.ReadAll(body)
		req := &colmetricpb.ExportMetricsServiceRequest{}
		if err == nil {
			err = proto.Unmarshal(b, req)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		h := map[string]string{}
		for k, v := range r.Header {
			h[strings.ToLower(k)] = strings.Join(v, ",")
		}
		select {
		case pushes <- otlpPush{req, h}:
		default:
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	t.Cleanup(srv.Close)
	return srv.URL, pushes
}

type grpcMetrics struct {
	colmetricpb.UnimplementedMetricsServiceServer
	pushes chan otlpPush
}

func (g grpcMetrics) Export(ctx context.Context, req *colmetricpb.ExportMetricsServiceRequest) (*colmetricpb.ExportMetricsServiceResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	h := map[string]string{}
	for k, v := range md {
		h[k] = strings.Join(v, ",")
	}
	select {
	case g.pushes <- otlpPush{req, h}:
	default:
	}
	return &colmetricpb.ExportMetricsServiceResponse{}, nil
}

func grpcReceiver(t *testing.T) (string, chan otlpPush) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pushes := make(chan otlpPush, 100)
	srv := grpc.NewServer()
	colmetricpb.RegisterMetricsServiceServer(srv, grpcMetrics{pushes: pushes})
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return lis.Addr().String(), pushes
}

func otlpAttrs(kvs []*commonpb.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		m[kv.Key] = kv.Value.GetStringValue()
	}
	return m
}

// pushSeries lists a metric's points as sorted "attrs=value" strings.
var uuidLabel = regexp.MustCompile(`uuid="[^"]*"`)

// sameDevices keeps the series of a whose device (uuid) b has a series of.
func sameDevices(a, b []string) []string {
	var out []string
	for _, s := range a {
		u := uuidLabel.FindString(s)
		if slices.ContainsFunc(b, func(o string) bool { return uuidLabel.FindString(o) == u }) {
			out = append(out, s)
		}
	}
	return out
}

func pushSeries(m *metricpb.Metric, withValues bool) []string {
	var dps []*metricpb.NumberDataPoint
	switch {
	case m.GetGauge() != nil:
		dps = m.GetGauge().DataPoints
	case m.GetSum() != nil:
		dps = m.GetSum().DataPoints
	}
	var out []string
	for _, dp := range dps {
		s := model.LabelSet{}
		for k, v := range otlpAttrs(dp.Attributes) {
			s[model.LabelName(k)] = model.LabelValue(v)
		}
		line := s.String()
		if withValues {
			line += "=" + model.SampleValue(dp.GetAsDouble()).String()
		}
		out = append(out, line)
	}
	sort.Strings(out)
	return out
}

func scrapeSeries(mf *dto.MetricFamily, withValues bool) []string {
	var out []string
	for _, m := range mf.GetMetric() {
		s := model.LabelSet{}
		for _, lp := range m.GetLabel() {
			s[model.LabelName(lp.GetName())] = model.LabelValue(lp.GetValue())
		}
		line := s.String()
		if withValues {
			v := m.GetGauge().GetValue()
			if m.GetCounter() != nil {
				v = m.GetCounter().GetValue()
			}
			line += "=" + model.SampleValue(v).String()
		}
		out = append(out, line)
	}
	sort.Strings(out)
	return out
}

// metrics are the push's metrics by name.
func (p otlpPush) metrics() map[string]*metricpb.Metric {
	byName := map[string]*metricpb.Metric{}
	for _, rm := range p.req.ResourceMetrics {
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				byName[m.Name] = m
			}
		}
	}
	return byName
}

func waitPush(t *testing.T, pushes chan otlpPush, ok func(map[string]*metricpb.Metric) bool) (otlpPush, map[string]*metricpb.Metric) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case p := <-pushes:
			byName := p.metrics()
			if ok(byName) {
				return p, byName
			}
		case <-deadline:
			t.Fatal("no OTLP push with the device, workload and engine metrics within 30s")
		}
	}
}

func complete(byName map[string]*metricpb.Metric) bool {
	for _, n := range []string{"xpu_utilization_ratio", "xpu_workload_utilization_ratio", "xpu_inference_time_to_first_token_seconds", "xpu_device_info"} {
		if byName[n] == nil {
			return false
		}
	}
	return true
}

// The demo node's push, over each protocol, carries what a scrape of
// /metrics shows: the same families with their units, the same series
// (owner labels included), and the same values for readings that do not
// move (memory size, device info, allocation shares).
func TestOTLPPushMatchesScrape(t *testing.T) {
	for _, protocol := range []string{"http/protobuf", "grpc"} {
		t.Run(protocol, func(t *testing.T) {
			var (
				addr   string
				pushes chan otlpPush
				args   = []string{"--demo", "--otlp.interval=300ms", "--otlp.header-from-env=Authorization=XPU_TEST_OTLP_TOKEN"}
			)
			t.Setenv("XPU_TEST_OTLP_TOKEN", "Bearer e2e-secret")
			if protocol == "grpc" {
				// The standard variables only, no --otlp.endpoint.
				addr, pushes = grpcReceiver(t)
				t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+addr)
				t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
				t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=e2e")
			} else {
				addr, pushes = httpReceiver(t, nil)
				args = append(args, "--otlp.endpoint="+addr, "--otlp.k8s-cluster-name=e2e-cluster")
			}
			e := start(t, args...)
			p, got := waitPush(t, pushes, complete)
			_, body := get(t, http.DefaultClient, "http://"+e.addr+"/metrics")

			if p.headers["authorization"] != "Bearer e2e-secret" {
				t.Errorf("Authorization header not pushed: %v", p.headers)
			}
			if strings.Contains(e.Logs(), "e2e-secret") {
				t.Errorf("the header's value is in the logs:\n%s", e.Logs())
			}
			res := otlpAttrs(p.req.ResourceMetrics[0].Resource.Attributes)
			want := map[string]string{"service.name": "xpu_exporter", "host.name": "demo-h100-node", "k8s.node.name": "demo-h100-node"}
			if protocol == "grpc" {
				want["deployment.environment.name"] = "e2e"
			} else {
				want["k8s.cluster.name"] = "e2e-cluster"
			}
			for k, v := range want {
				if res[k] != v {
					t.Errorf("resource %s=%q, want %q", k, res[k], v)
				}
			}

			parser := expfmt.NewTextParser(model.UTF8Validation)
			families, err := parser.TextToMetricFamilies(strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct {
				name, unit string
				values     bool
			}{
				{"xpu_device_info", "", true},
				{"xpu_memory_total_bytes", "By", true},
				{"xpu_workload_allocated_devices", "", true},
				{"xpu_power_limit_watts", "W", true},
				{"xpu_utilization_ratio", "1", false},
				{"xpu_workload_utilization_ratio", "1", false},
				{"xpu_energy_joules_total", "J", false},
				{"xpu_temperature_celsius", "Cel", false},
			} {
				m, mf := got[c.name], families[c.name]
				if m == nil || mf == nil {
					t.Errorf("%s: pushed %v, scraped %v", c.name, m != nil, mf != nil)
					continue
				}
				if m.Unit != c.unit {
					t.Errorf("%s: unit %q, want %q", c.name, m.Unit, c.unit)
				}
				push, scrape := pushSeries(m, c.values), scrapeSeries(mf, c.values)
				if !c.values {
					// A reading averaged over the window since the previous
					// read is absent when a push and a scrape come within one
					// sample period of each other: compare the devices both
					// have, whose label sets must then be the same.
					push, scrape = sameDevices(push, scrape), sameDevices(scrape, push)
					if len(push) == 0 {
						t.Errorf("%s: push and scrape share no device", c.name)
					}
				}
				if !reflect.DeepEqual(push, scrape) {
					t.Errorf("%s: push and scrape differ:\npush:   %v\nscrape: %v", c.name, push, scrape)
				}
			}
			if !strings.Contains(body, `xpu_otlp_exports_total{result="success"}`) {
				t.Error("/metrics lacks xpu_otlp_exports_total")
			}
		})
	}
}

// A receiver that never answers costs /metrics nothing.
func TestOTLPHungReceiverNeverBlocksMetrics(t *testing.T) {
	hang := make(chan struct{})
	defer close(hang)
	addr, _ := httpReceiver(t, hang)
	e := start(t, "--demo", "--otlp.endpoint="+addr, "--otlp.interval=200ms", "--otlp.timeout=30s")
	time.Sleep(time.Second) // a push is now held by the receiver
	client := &http.Client{Timeout: 5 * time.Second}
	for range 3 {
		began := time.Now()
		code, body := get(t, client, "http://"+e.addr+"/metrics")
		if code != http.StatusOK || !strings.Contains(body, "xpu_utilization_ratio") {
			t.Fatalf("scrape while the receiver hangs: %d", code)
		}
		if d := time.Since(began); d > 3*time.Second {
			t.Errorf("scrape took %v while the receiver hangs", d)
		}
	}
}

// A GPU whose reads hang costs a push what it costs a scrape: the push's
// gathering ends within the push's interval, so the push carries the hung
// GPU down and the other one served, and no push fails for it. (The
// scenario's power reads hang 30 s each, past the 1 s interval; the
// gathering used to wait up to --scrape.timeout, 10 s, and the push then
// failed with its deadline passed, dropping both GPUs.)
func TestOTLPPushReportsAHungGPUDown(t *testing.T) {
	addr, pushes := httpReceiver(t, nil)
	e := start(t, "--demo", "--demo.scenario=../fixtures/scenarios/hang.yaml", "--otlp.endpoint="+addr, "--otlp.interval=1s")
	up := func(byName map[string]*metricpb.Metric) map[string]float64 {
		out := map[string]float64{}
		for _, dp := range byName["xpu_device_up"].GetGauge().GetDataPoints() {
			out[otlpAttrs(dp.Attributes)["gpu"]] = dp.GetAsDouble()
		}
		return out
	}
	deadline := time.After(10 * time.Second)
	seen, down := 0, 0
	for seen < 5 {
		select {
		case p := <-pushes:
			byName := p.metrics()
			u := up(byName)
			if u["1"] != 1 {
				t.Errorf("push %d: xpu_device_up %v, want GPU 1 up", seen+1, u)
			}
			if v, ok := u["0"]; ok && v == 0 {
				down++
			}
			seen++
		case <-deadline:
			t.Fatalf("%d pushes in 10 s at a 1 s interval with a hung GPU, want 5", seen)
		}
	}
	if down == 0 {
		t.Error("no push reported the hung GPU down")
	}
	if strings.Contains(e.Logs(), "OTLP push failed") {
		t.Errorf("a push failed while a GPU hung:\n%s", e.Logs())
	}
}
