package e2e

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	colmetricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	"google.golang.org/protobuf/proto"
)

// The OTLP bridge pushes what /metrics serves, owner labels included.
func TestOTLPPush(t *testing.T) {
	pushes := make(chan string, 100)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		req := &colmetricpb.ExportMetricsServiceRequest{}
		if err := proto.Unmarshal(b, req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		select {
		case pushes <- req.String():
		default:
		}
	}))
	defer receiver.Close()

	start(t, "--demo", "--otlp.endpoint="+strings.TrimPrefix(receiver.URL, "http://"), "--otlp.insecure", "--otlp.interval=200ms")
	deadline := time.After(20 * time.Second)
	for {
		select {
		case push := <-pushes:
			if strings.Contains(push, `"xpu_utilization_ratio"`) && strings.Contains(push, `"llm-serve-7d9f8b6c5d-x2k4q"`) &&
				strings.Contains(push, `"xpu_workload_utilization_ratio"`) && strings.Contains(push, `"demo-h100-node"`) {
				return
			}
		case <-deadline:
			t.Fatal("no OTLP push with the device and workload metrics within 20s")
		}
	}
}
