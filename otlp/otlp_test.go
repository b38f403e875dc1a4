package otlp

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	colmetricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	"google.golang.org/protobuf/proto"
)

func TestPushCarriesTheRegistry(t *testing.T) {
	got := make(chan *colmetricpb.ExportMetricsServiceRequest, 10)
	var headers http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		req := &colmetricpb.ExportMetricsServiceRequest{}
		if r.URL.Path != "/v1/metrics" || proto.Unmarshal(b, req) != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		headers = r.Header.Clone()
		select {
		case got <- req:
		default:
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(nil)
	}))
	defer srv.Close()

	reg := prometheus.NewRegistry()
	util := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "xpu_utilization_ratio", Help: "h"}, []string{"gpu", "pod"})
	util.WithLabelValues("3", "embeddings-0").Set(0.42)
	reg.MustRegister(util)

	p, err := Start(Config{
		Endpoint: strings.TrimPrefix(srv.URL, "http://"), Insecure: true, Interval: 100 * time.Millisecond,
		Headers: map[string]string{"X-Api-Key": "k"}, Node: "gpu-node-01", Version: "test",
	}, reg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown(context.Background())

	var req *colmetricpb.ExportMetricsServiceRequest
	select {
	case req = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("no OTLP push within 10s")
	}
	if headers.Get("X-Api-Key") != "k" {
		t.Errorf("header not sent: %v", headers)
	}
	text := req.String()
	for _, want := range []string{`"xpu_utilization_ratio"`, `"embeddings-0"`, "0.42", `"gpu-node-01"`, `"xpu_exporter"`} {
		if !strings.Contains(text, want) {
			t.Errorf("push lacks %s:\n%s", want, text)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	if _, err := ParseHeaders([]string{"novalue"}); err == nil {
		t.Error("a header without = must be refused")
	}
	if h, err := ParseHeaders([]string{"Authorization=Bearer a=b"}); err != nil || h["Authorization"] != "Bearer a=b" {
		t.Errorf("headers %v, %v", h, err)
	}
	if _, err := Start(Config{Endpoint: "x:1"}, prometheus.NewRegistry(), slog.New(slog.DiscardHandler)); err == nil {
		t.Error("a zero interval must be refused")
	}
}
