package collector

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xpu-exporter/xpu_exporter/demo"
	"github.com/xpu-exporter/xpu_exporter/internal/syncbuf"
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

// TestDCGMBridgeJoinIgnoresCase: a UUID printed in capitals still names
// the GPU.
func TestDCGMBridgeJoinIgnoresCase(t *testing.T) {
	dcgmEndpoint(t, strings.ReplaceAll(t4Profiling, "GPU-7e47e47e", "GPU-7E47E47E"), 0)
	out := scrapeText(t, newTestExporter(t, loadScenario(t, "not-supported"), map[string]bool{"nvidia": true, "dcgm": true}), 5*time.Second)
	if got := sample(t, out, "xpu_sm_active_ratio", `uuid="GPU-7e47e47e-0000-4000-8000-000000000000"`); got != 0.412 {
		t.Errorf("xpu_sm_active_ratio = %v, want 0.412", got)
	}
}

func TestDCGMBridgePrefersGPM(t *testing.T) {
	dcgmEndpoint(t, t4Profiling, 0)
	out := secondScrapeWithGPM(t)
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
		// A wrong --dcgm.url answers too; it joins nothing.
		{"another exporter's metrics", "# TYPE node_load1 gauge\nnode_load1 0.5\n", 0},
		{"a login page", "<html><body>Sign in</body></html>\n", 0},
		// Profiling fields none of which names its GPU.
		{"no UUID label", "# TYPE DCGM_FI_PROF_SM_ACTIVE gauge\nDCGM_FI_PROF_SM_ACTIVE{gpu=\"0\",pci_bus_id=\"00000000:3B:00.0\"} 0.5\n", 0},
		// Another node's dcgm-exporter (its pod, or a Service in front of
		// all of them): a good answer that names none of this node's GPUs,
		// which a success hid (found by probing).
		{"another node's GPUs", strings.ReplaceAll(strings.ReplaceAll(t4Profiling, "GPU-7e47e47e", "GPU-0ddba11a"), "GPU-2b149611", "GPU-0ddba11b"), 0},
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

// migProfiling is what dcgm-exporter exports for the A100 of the mig
// scenario, constructed in its label style: MIG series name the parent
// GPU's UUID and the instance's GPU_I_ID. The A100 has no GPM, so NVML
// measures neither its instances' utilization nor, in this scenario, its
// PCIe traffic.
const migProfiling = `# HELP DCGM_FI_PROF_GR_ENGINE_ACTIVE Ratio of time the graphics engine is active.
# TYPE DCGM_FI_PROF_GR_ENGINE_ACTIVE gauge
DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0",UUID="GPU-a100a100-0000-4000-8000-000000000000",device="nvidia0",modelName="NVIDIA A100-SXM4-80GB",GPU_I_PROFILE="3g.40gb",GPU_I_ID="2",Hostname="mig-node"} 0.625
DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0",UUID="GPU-a100a100-0000-4000-8000-000000000000",device="nvidia0",modelName="NVIDIA A100-SXM4-80GB",GPU_I_PROFILE="2g.20gb",GPU_I_ID="3",Hostname="mig-node"} 0.125
DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0",UUID="GPU-a100a100-0000-4000-8000-000000000000",device="nvidia0",modelName="NVIDIA A100-SXM4-80GB",Hostname="mig-node"} 0.4
# HELP DCGM_FI_PROF_PCIE_TX_BYTES The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads - in bytes per second.
# TYPE DCGM_FI_PROF_PCIE_TX_BYTES gauge
DCGM_FI_PROF_PCIE_TX_BYTES{gpu="0",UUID="GPU-a100a100-0000-4000-8000-000000000000",device="nvidia0",modelName="NVIDIA A100-SXM4-80GB",Hostname="mig-node"} 3.5e+09
# HELP DCGM_FI_PROF_PCIE_RX_BYTES The rate of data received over the PCIe bus - including both protocol headers and data payloads - in bytes per second.
# TYPE DCGM_FI_PROF_PCIE_RX_BYTES gauge
DCGM_FI_PROF_PCIE_RX_BYTES{gpu="0",UUID="GPU-a100a100-0000-4000-8000-000000000000",device="nvidia0",modelName="NVIDIA A100-SXM4-80GB",Hostname="mig-node"} 1.25e+08
`

func TestDCGMBridgeMIGUtilizationAndPCIe(t *testing.T) {
	dcgmEndpoint(t, migProfiling, 0)
	out := scrapeText(t, newTestExporter(t, loadScenario(t, "mig"), map[string]bool{"nvidia": true, "dcgm": true}), 5*time.Second)
	// GR_ENGINE_ACTIVE is already a ratio: each instance's value is the
	// sample's own, 0.625 for GPU instance 2 (MIG-…1), 0.125 for 3 (MIG-…2).
	for uuid, want := range map[string]float64{
		"MIG-11111111-0000-4000-8000-000000000001": 0.625,
		"MIG-11111111-0000-4000-8000-000000000002": 0.125,
	} {
		if got := sample(t, out, "xpu_utilization_ratio", `uuid="`+uuid+`"`); got != want {
			t.Errorf("%s utilization %v, want %v", uuid, got, want)
		}
	}
	// Instances DCGM says nothing about, and the GPU in MIG mode as a whole
	// (its instances' sum would count twice), get no utilization.
	for _, uuid := range []string{"MIG-11111111-0000-4000-8000-000000000003", "GPU-a100a100-0000-4000-8000-000000000000"} {
		if regexp.MustCompile(`(?m)^xpu_utilization_ratio\{([^}]*,)?uuid="` + uuid + `"`).MatchString(out) {
			t.Errorf("%s has a utilization DCGM did not give it", uuid)
		}
	}
	// PCIe: bytes per second as the sample says, 3.5e9 out and 1.25e8 in.
	gpu := `,uuid="GPU-a100a100-0000-4000-8000-000000000000"` // not parent_uuid
	for dir, want := range map[string]float64{"tx": 3.5e9, "rx": 1.25e8} {
		if got := sample(t, out, "xpu_pcie_throughput_bytes_per_second", gpu, `direction="`+dir+`"`); got != want {
			t.Errorf("PCIe %s %v, want %v", dir, got, want)
		}
	}
}

// t4PCIe gives the T4 of the not-supported scenario a DCGM PCIe reading
// out, none in.
const t4PCIe = `# TYPE DCGM_FI_PROF_PCIE_TX_BYTES gauge
DCGM_FI_PROF_PCIE_TX_BYTES{gpu="0",UUID="GPU-7e47e47e-0000-4000-8000-000000000000",device="nvidia0",modelName="Tesla T4",Hostname="t4-node"} 5e+08
`

// DCGM's PCIe reading is an average over its sample period; NVML's is one
// 20 ms sample. DCGM's wins, NVML's fills in what DCGM lacks.
func TestDCGMBridgePCIeBeforeNVML(t *testing.T) {
	withExtendedReadings(t)
	t4 := `uuid="GPU-7e47e47e-0000-4000-8000-000000000000"`
	// The scenario's NVML PCIe: pcie_tx 1048576 B/s and pcie_rx 2097152 B/s
	// (NVML reports KB/s: 1024 and 2048, times 1024).
	const nvmlTX, nvmlRX = 1048576.0, 2097152.0
	for _, tc := range []struct {
		name           string
		body           string
		dcgm           bool
		wantTX, wantRX float64
	}{
		{"without the bridge", t4PCIe, false, nvmlTX, nvmlRX},
		{"DCGM out, NVML in", t4PCIe, true, 5e8, nvmlRX},
		{"dcgm-exporter broken", "DCGM_FI_PROF_PCIE_TX_BYTES{UUID=\"GPU-1\" 5e8\n", true, nvmlTX, nvmlRX},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dcgmEndpoint(t, tc.body, 0)
			out := scrapeText(t, newTestExporter(t, loadScenario(t, "not-supported"), map[string]bool{"nvidia": true, "dcgm": tc.dcgm}), 5*time.Second)
			if got := sample(t, out, "xpu_pcie_throughput_bytes_per_second", t4, `direction="tx"`); got != tc.wantTX {
				t.Errorf("tx %v, want %v", got, tc.wantTX)
			}
			if got := sample(t, out, "xpu_pcie_throughput_bytes_per_second", t4, `direction="rx"`); got != tc.wantRX {
				t.Errorf("rx %v, want %v", got, tc.wantRX)
			}
		})
	}
}

// The real dcgm-exporter sample's lines name GPUs of the node it was taken
// on, none of this scenario's: they must neither replace NVML's readings
// nor be invented onto a device, and the collector says the answer is not
// this node's.
func TestDCGMBridgeRealSample(t *testing.T) {
	withExtendedReadings(t) // NVML's PCIe sample is served only with it
	b, err := os.ReadFile("../fixtures/engines/dcgm-exporter-t4-a10g-datadog-fixture.prom")
	if err != nil {
		t.Fatal(err)
	}
	dcgmEndpoint(t, string(b)+"\n", 0) // the sample lacks its final newline
	out := scrapeText(t, newTestExporter(t, loadScenario(t, "not-supported"), map[string]bool{"nvidia": true, "dcgm": true}), 5*time.Second)
	t4 := `uuid="GPU-7e47e47e-0000-4000-8000-000000000000"`
	for _, c := range []struct {
		family, matcher string
		want            float64
	}{
		{"xpu_utilization_ratio", t4, 0.37}, // the scenario's NVML utilization
		{"xpu_pcie_throughput_bytes_per_second", `direction="tx"`, 1048576},
		{"xpu_pcie_throughput_bytes_per_second", `direction="rx"`, 2097152},
	} {
		if got := sample(t, out, c.family, t4, c.matcher); got != c.want {
			t.Errorf("%s{%s} = %v, want %v", c.family, c.matcher, got, c.want)
		}
	}
	if !strings.Contains(out, `xpu_scrape_collector_success{collector="dcgm"} 0`) {
		t.Error("another node's sample passed for this node's")
	}
}

// GPM wins wherever the GPU has it: an H100's PCIe comes from GPM even when
// DCGM has a reading for it.
func TestDCGMBridgePCIePrefersGPM(t *testing.T) {
	withExtendedReadings(t)
	dcgmEndpoint(t, `# TYPE DCGM_FI_PROF_PCIE_TX_BYTES gauge
DCGM_FI_PROF_PCIE_TX_BYTES{gpu="0",UUID="GPU-2b149611-0000-4000-8000-000000000000"} 123456789
`, 0)
	out := secondScrapeWithGPM(t)
	if v := sample(t, out, "xpu_pcie_throughput_bytes_per_second", `uuid="GPU-2b149611-0000-4000-8000-000000000000"`, `direction="tx"`); v == 123456789 {
		t.Error("a GPU with GPM took DCGM's PCIe reading")
	}
}

// a100Shared is an A100 (no GPM) in MIG mode: GPU instance 1 is split into
// two compute instances held by two pods, GPU instance 5 is one instance.
const a100Shared = `node: dcgm-mig
defaults: {model: NVIDIA A100-SXM4-80GB, memory_total: 80GiB, metrics: {utilization: 0.5, temperature: 50, pcie_tx: 1048576, pcie_rx: 2097152}}
devices:
  - uuid: GPU-aaaa0000-0000-4000-8000-000000000002
    mig:
      - {uuid: MIG-aaaa0000-0002-4000-8000-000000000001, profile: 1c.3g.40gb, gpu_instance: 1, compute_instance: 0, memory_used: 5GiB}
      - {uuid: MIG-aaaa0000-0002-4000-8000-000000000002, profile: 2c.3g.40gb, gpu_instance: 1, compute_instance: 1, memory_used: 6GiB}
      - {uuid: MIG-aaaa0000-0002-4000-8000-000000000003, profile: 2g.20gb, gpu_instance: 5, memory_used: 7GiB}
  - uuid: GPU-aaaa0000-0000-4000-8000-000000000004
`

// dcgm-exporter monitors MIG devices per GPU instance (GPU_I_ID); it has no
// compute instance label.
const a100SharedProfiling = `# TYPE DCGM_FI_PROF_GR_ENGINE_ACTIVE gauge
DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0",UUID="GPU-aaaa0000-0000-4000-8000-000000000002",GPU_I_PROFILE="3g.40gb",GPU_I_ID="1"} 0.31
DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0",UUID="GPU-aaaa0000-0000-4000-8000-000000000002",GPU_I_PROFILE="2g.20gb",GPU_I_ID="5"} 0.51
# TYPE DCGM_FI_PROF_SM_ACTIVE gauge
DCGM_FI_PROF_SM_ACTIVE{gpu="0",UUID="GPU-aaaa0000-0000-4000-8000-000000000002",GPU_I_PROFILE="3g.40gb",GPU_I_ID="1"} 0.32
DCGM_FI_PROF_SM_ACTIVE{gpu="0",UUID="GPU-aaaa0000-0000-4000-8000-000000000002",GPU_I_PROFILE="2g.20gb",GPU_I_ID="5"} 0.52
`

// TestDCGMBridgeSharedGPUInstance: the reading of a GPU instance split into
// two compute instances belongs to neither alone and is left out, as GPM's
// is; copied onto both, a sum over the GPU's instances counted it twice
// (0.31 + 0.31 + 0.51 = 1.13 where the GPU's instances were 0.82 busy;
// found by probing). The whole instance of GPU instance 5 keeps its own.
func TestDCGMBridgeSharedGPUInstance(t *testing.T) {
	dcgmEndpoint(t, a100SharedProfiling, 0)
	s, err := demo.Parse([]byte(a100Shared))
	if err != nil {
		t.Fatal(err)
	}
	out := scrapeText(t, newTestExporter(t, s, map[string]bool{"nvidia": true, "dcgm": true}), 5*time.Second)
	for _, uuid := range []string{"MIG-aaaa0000-0002-4000-8000-000000000001", "MIG-aaaa0000-0002-4000-8000-000000000002"} {
		for _, family := range []string{"xpu_utilization_ratio", "xpu_sm_active_ratio"} {
			if regexp.MustCompile(`(?m)^` + family + `\{([^}]*,)?uuid="` + uuid + `"`).MatchString(out) {
				t.Errorf("%s of a compute instance sharing its GPU instance:\n%s", family, grepLines(out, family))
			}
		}
	}
	gi5 := `uuid="MIG-aaaa0000-0002-4000-8000-000000000003"`
	if v := sample(t, out, "xpu_utilization_ratio", gi5); v != 0.51 {
		t.Errorf("GPU instance 5 utilization %v, want 0.51", v)
	}
	if v := sample(t, out, "xpu_sm_active_ratio", gi5); v != 0.52 {
		t.Errorf("GPU instance 5 SM activity %v, want 0.52", v)
	}
}

// TestDCGMBridgeNoNVMLPCIeByDefault: NVML's 20 ms PCIe sample waits for
// --nvidia.extended-readings with the bridge on as without it; the bridge
// serves DCGM's own rate (found by probing: with dcgm-exporter down, every
// GPU had NVML's sample).
func TestDCGMBridgeNoNVMLPCIeByDefault(t *testing.T) {
	t4 := `uuid="GPU-7e47e47e-0000-4000-8000-000000000000"`
	for _, tc := range []struct {
		name string
		body string
		want map[string]float64 // by direction; absent: no series
	}{
		{"DCGM out", t4PCIe, map[string]float64{"tx": 5e8}},
		{"dcgm-exporter broken", "DCGM_FI_PROF_PCIE_TX_BYTES{UUID=\"GPU-1\" 5e8\n", map[string]float64{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dcgmEndpoint(t, tc.body, 0)
			out := scrapeText(t, newTestExporter(t, loadScenario(t, "not-supported"), map[string]bool{"nvidia": true, "dcgm": true}), 5*time.Second)
			for _, dir := range []string{"tx", "rx"} {
				want, ok := tc.want[dir]
				re := regexp.MustCompile(`(?m)^xpu_pcie_throughput_bytes_per_second\{direction="` + dir + `",[^}]*` + regexp.QuoteMeta(t4))
				switch {
				case !ok && re.MatchString(out):
					t.Errorf("%s: NVML's sample served without --nvidia.extended-readings:\n%s", dir, grepLines(out, "xpu_pcie_throughput"))
				case ok:
					if got := sample(t, out, "xpu_pcie_throughput_bytes_per_second", t4, `direction="`+dir+`"`); got != want {
						t.Errorf("%s %v, want %v", dir, got, want)
					}
				}
			}
		})
	}
}

// TestDCGMBridgeGPMGPUInMIGMode: an H100 in MIG mode is profiled by GPM per
// instance; DCGM's reading of the GPU itself (dcgm-exporter --devices g)
// must not be added to it (found by probing: the GPU took DCGM's SM and
// tensor activity beside its instances' GPM readings).
func TestDCGMBridgeGPMGPUInMIGMode(t *testing.T) {
	// GPU 4 of the default demo is an H100 in MIG mode.
	const h100 = "GPU-2b149611-0000-4000-8000-000000000004"
	dcgmEndpoint(t, `# TYPE DCGM_FI_PROF_SM_ACTIVE gauge
DCGM_FI_PROF_SM_ACTIVE{gpu="4",UUID="`+h100+`"} 0.61
`, 0)
	out := secondScrapeWithGPM(t)
	if !regexp.MustCompile(`(?m)^xpu_sm_active_ratio\{[^}]*parent_uuid="` + h100 + `"`).MatchString(out) {
		t.Fatalf("the H100's instances have no GPM readings: the test proves nothing\n%s", grepLines(out, "xpu_sm_active_ratio"))
	}
	if regexp.MustCompile(`(?m)^xpu_sm_active_ratio\{[^}]*,uuid="` + h100 + `"`).MatchString(out) {
		t.Errorf("a GPU with GPM in MIG mode took DCGM's reading:\n%s", grepLines(out, "xpu_sm_active_ratio"))
	}
}

// TestDCGMFlagsCheckedAtStart: a --dcgm.url that is no http(s) URL (the
// scheme left out, as with --engines.target) is refused at start, not
// failed at every scrape; credentials in it stay out of the error.
func TestDCGMFlagsCheckedAtStart(t *testing.T) {
	oldURL, oldMax := *dcgmURL, *dcgmMaxBytes
	t.Cleanup(func() { *dcgmURL, *dcgmMaxBytes = oldURL, oldMax })
	for _, tc := range []struct {
		url      string
		maxBytes int64
		wantErr  string
	}{
		{"http://localhost:9400/metrics", 1 << 20, ""},
		{"https://u:secret@dcgm.example:9400/metrics", 1 << 20, ""},
		{"localhost:9400", 1 << 20, "is not an http(s) URL"},
		{"ftp://u:secret@dcgm.example/metrics", 1 << 20, "is not an http(s) URL"},
		{"http:///metrics", 1 << 20, "is not an http(s) URL"},
		{"http://localhost:9400/metrics", 0, "--dcgm.max-bytes=0"},
	} {
		*dcgmURL, *dcgmMaxBytes = tc.url, tc.maxBytes
		_, err := newDCGMCollector(Config{})
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: %v", tc.url, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s, max %d: error %v, want %q", tc.url, tc.maxBytes, err, tc.wantErr)
		case err != nil && strings.Contains(err.Error(), "secret"):
			t.Errorf("the password is in the error: %v", err)
		}
	}
}

// secondScrapeWithGPM is the second scrape, 15 s after the first, of the
// default demo with the dcgm collector on: GPM's readings are differences
// of two samples.
func secondScrapeWithGPM(t *testing.T) string {
	t.Helper()
	now := testNow
	e := newTestExporterAt(t, demo.Default(), map[string]bool{"nvidia": true, "dcgm": true}, func() time.Time { return now })
	scrapeText(t, e, 5*time.Second)
	now = now.Add(15 * time.Second)
	return scrapeText(t, e, 5*time.Second)
}

// TestDCGMBridgeNamesSeriesLeftOut: readings left out as malformed or
// stale are counted and named in one warning when the set changes, not
// dropped unseen behind a successful collector (found by probing).
func TestDCGMBridgeNamesSeriesLeftOut(t *testing.T) {
	var body atomic.Pointer[string]
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, *body.Load()) }))
	t.Cleanup(srv.Close)
	oldURL := *dcgmURL
	*dcgmURL = srv.URL + "/metrics"
	t.Cleanup(func() { *dcgmURL = oldURL })

	const t4 = `gpu="0",UUID="GPU-7e47e47e-0000-4000-8000-000000000000"`
	bad := func(tensor string) string {
		// The tensor ratio is malformed; the DRAM reading is stamped 1 s
		// after the epoch.
		return t4Profiling + "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{" + t4 + `,GPU_I_ID="5"} ` + tensor + "\n" +
			"DCGM_FI_PROF_DRAM_ACTIVE{" + t4 + `,GPU_I_ID="6"} 0.2 1000` + "\n"
	}
	var logs syncbuf.Buffer
	s := loadScenario(t, "not-supported")
	now := func() time.Time { return testNow }
	e := newExporterOf(t, Config{NVML: s.NVML(testStart, now), Now: now, Logger: slog.New(slog.NewTextHandler(&logs, nil))}, "nvidia", "dcgm")

	for i, tc := range []struct {
		body     string
		leftOut  float64
		warnings int
	}{
		{bad("1.5"), 2, 1},
		// The same series, another bad value: no new line.
		{bad("1.6"), 2, 1},
		{t4Profiling, 0, 1},
	} {
		body.Store(&tc.body)
		out := scrapeText(t, e, 5*time.Second)
		if want := fmt.Sprintf("\nxpu_dcgm_series_left_out %v\n", tc.leftOut); !strings.Contains(out, want) {
			t.Errorf("scrape %d: want%s", i, want)
		}
		if !strings.Contains(out, `xpu_scrape_collector_success{collector="dcgm"} 1`) {
			t.Errorf("scrape %d: the good readings are served, the collector must succeed", i)
		}
		if got := sample(t, out, "xpu_sm_active_ratio", `uuid="GPU-7e47e47e-0000-4000-8000-000000000000"`); got != 0.412 {
			t.Errorf("scrape %d: the good reading xpu_sm_active_ratio = %v, want 0.412", i, got)
		}
		if n := strings.Count(logs.String(), "dcgm-exporter series left out"); n != tc.warnings {
			t.Errorf("scrape %d: %d warnings, want %d:\n%s", i, n, tc.warnings, logs.String())
		}
	}
	for _, want := range []string{
		`DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{GPU_I_ID=\"5\",UUID=\"GPU-7e47e47e-0000-4000-8000-000000000000\",gpu=\"0\"}: value 1.5 is not a ratio 0..1`,
		`stamped 1970-01-01T00:00:01Z, more than 5m0s ago`,
		"count=2",
		"dcgm-exporter series all read again",
	} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("logs lack %q:\n%s", want, logs.String())
		}
	}
}
