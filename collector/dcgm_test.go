package collector

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/xpu-exporter/xpu_exporter/demo"
)

// dcgmEndpoint serves body, after delay.
func dcgmEndpoint(t *testing.T, body string, delay time.Duration) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
		fmt.Fprint(w, body)
	}))
	t.Cleanup(srv.Close)
	oldURL, oldMax := *dcgmURL, *dcgmMaxBytes
	*dcgmURL, *dcgmMaxBytes = srv.URL+"/metrics", 1<<20
	t.Cleanup(func() { *dcgmURL, *dcgmMaxBytes = oldURL, oldMax })
}

// t4Profiling is dcgm-exporter's output for the T4 of the not-supported
// scenario (which has no GPM), and for an H100 of the default scenario
// (which has: its DCGM readings must not be used).
const t4Profiling = `# HELP DCGM_FI_PROF_SM_ACTIVE Ratio of cycles an SM has at least 1 warp assigned.
# TYPE DCGM_FI_PROF_SM_ACTIVE gauge
DCGM_FI_PROF_SM_ACTIVE{gpu="0",UUID="GPU-7e47e47e-0000-4000-8000-000000000000",device="nvidia0",modelName="Tesla T4",Hostname="t4-node"} 0.412
DCGM_FI_PROF_SM_ACTIVE{gpu="0",UUID="GPU-2b149611-0000-4000-8000-000000000000",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="demo"} 0.999
# HELP DCGM_FI_PROF_PIPE_TENSOR_ACTIVE Ratio of cycles the tensor (HMMA) pipe is active.
# TYPE DCGM_FI_PROF_PIPE_TENSOR_ACTIVE gauge
DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{gpu="0",UUID="GPU-7e47e47e-0000-4000-8000-000000000000",device="nvidia0",modelName="Tesla T4",Hostname="t4-node"} 0.125
# HELP DCGM_FI_PROF_DRAM_ACTIVE Ratio of cycles the device memory interface is active.
# TYPE DCGM_FI_PROF_DRAM_ACTIVE gauge
DCGM_FI_PROF_DRAM_ACTIVE{gpu="0",UUID="GPU-7e47e47e-0000-4000-8000-000000000000",device="nvidia0",modelName="Tesla T4",Hostname="t4-node"} 0.25
`

func TestDCGMBridge(t *testing.T) {
	dcgmEndpoint(t, t4Profiling, 0)
	out := scrapeText(t, newTestExporter(t, loadScenario(t, "not-supported"), map[string]bool{"nvidia": true, "dcgm": true}), 5*time.Second)
	t4 := `uuid="GPU-7e47e47e-0000-4000-8000-000000000000"`
	for family, want := range map[string]float64{"xpu_sm_active_ratio": 0.412, "xpu_tensor_active_ratio": 0.125, "xpu_dram_active_ratio": 0.25} {
		if got := sample(t, out, family, t4, `model="Tesla T4"`); got != want {
			t.Errorf("%s = %v, want %v", family, got, want)
		}
	}
	if !strings.Contains(out, `xpu_scrape_collector_success{collector="dcgm"} 1`) {
		t.Error("dcgm collector not successful")
	}
}

func TestDCGMBridgePrefersGPM(t *testing.T) {
	dcgmEndpoint(t, t4Profiling, 0)
	now := testNow
	e := newTestExporterAt(t, demo.Default(), map[string]bool{"nvidia": true, "dcgm": true}, func() time.Time { return now })
	scrapeText(t, e, 5*time.Second)
	now = now.Add(15 * time.Second)
	out := scrapeText(t, e, 5*time.Second)
	gpu0 := `uuid="GPU-2b149611-0000-4000-8000-000000000000"`
	if v := sample(t, out, "xpu_sm_active_ratio", gpu0); v == 0.999 {
		t.Error("a GPU with GPM took DCGM's reading")
	}
}

func TestDCGMBridgeFailures(t *testing.T) {
	for _, tc := range []struct {
		name  string
		body  string
		delay time.Duration
	}{
		{"slow endpoint", t4Profiling, 3 * time.Second},
		{"malformed exposition", "DCGM_FI_PROF_SM_ACTIVE{UUID=\"GPU-1\" 0.5\n", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dcgmEndpoint(t, tc.body, tc.delay)
			started := time.Now()
			out := scrapeText(t, newTestExporter(t, loadScenario(t, "not-supported"), map[string]bool{"nvidia": true, "dcgm": true}), 300*time.Millisecond)
			if took := time.Since(started); took > 2*time.Second {
				t.Errorf("scrape took %v with a 300ms deadline", took)
			}
			if !strings.Contains(out, `xpu_scrape_collector_success{collector="dcgm"} 0`) {
				t.Error("dcgm collector must report its failure")
			}
			if !strings.Contains(out, `xpu_scrape_collector_success{collector="nvidia"} 1`) || seriesCount(out, "xpu_utilization_ratio") != 1 {
				t.Errorf("device metrics must still be served:\n%s", out)
			}
			if seriesCount(out, "xpu_sm_active_ratio") != 0 {
				t.Error("profiling series from a failed scrape")
			}
		})
	}
}
