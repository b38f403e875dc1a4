package engines

import (
	"maps"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
)

func parseText(t testing.TB, text string) map[string]*dto.MetricFamily {
	t.Helper()
	mfs, err := parse(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}

func TestDCGMProfilingOnTheRealSample(t *testing.T) {
	b, err := os.ReadFile("../fixtures/engines/dcgm-exporter-t4-a10g-datadog-fixture.prom")
	if err != nil {
		t.Fatal(err)
	}
	// The sample lacks its final newline; real exporters never do.
	readings, skipped := DCGMProfiling(parseText(t, string(b)+"\n"))
	// Only the A10G block names its GPU; the PROF lines the file calls
	// dummies have no labels at all.
	if len(readings) != 1 {
		t.Fatalf("readings %+v, want the A10G's DRAM activity only", readings)
	}
	if r := readings[0]; r.UUID != "GPU-abc" || r.Field != "dram_active" || r.Value != 0.000003 || r.GPUInstance != "" {
		t.Errorf("reading %+v", r)
	}
	if skipped != 9 {
		t.Errorf("skipped %d unlabelled PROF series, want 9", skipped)
	}
}

func TestDCGMProfilingMIGAndBadValues(t *testing.T) {
	text := `# TYPE DCGM_FI_PROF_SM_ACTIVE gauge
DCGM_FI_PROF_SM_ACTIVE{gpu="0",UUID="GPU-1",GPU_I_PROFILE="3g.40gb",GPU_I_ID="2"} 0.5
DCGM_FI_PROF_SM_ACTIVE{gpu="0",UUID="GPU-1"} 0.75
DCGM_FI_PROF_SM_ACTIVE{gpu="1",UUID="GPU-2"} NaN
DCGM_FI_PROF_SM_ACTIVE{gpu="2",UUID="GPU-3"} -1
DCGM_FI_PROF_SM_ACTIVE{gpu="3",UUID="GPU-4"} 50
# TYPE DCGM_FI_PROF_PIPE_FP32_ACTIVE gauge
DCGM_FI_PROF_PIPE_FP32_ACTIVE{gpu="3",UUID="GPU-4"} 1
# TYPE DCGM_FI_PROF_NVLINK_TX_BYTES gauge
DCGM_FI_PROF_NVLINK_TX_BYTES{gpu="0",UUID="GPU-1"} 1e9
`
	readings, skipped := DCGMProfiling(parseText(t, text))
	var got []string
	for _, r := range readings {
		got = append(got, r.UUID+"/"+r.GPUInstance+"/"+r.Field)
	}
	sort.Strings(got)
	// Skipped: NaN, -1 and the ratio 50 (a percent, or garbage); a ratio
	// of exactly 1 and a rate above 1 are kept.
	want := "GPU-1//nvlink_tx_bytes_per_second GPU-1//sm_active GPU-1/2/sm_active GPU-4//fp32_active"
	if strings.Join(got, " ") != want || skipped != 3 {
		t.Errorf("readings %v (skipped %d), want %s (skipped 3)", got, skipped, want)
	}
}

func FuzzDCGMProfiling(f *testing.F) {
	// The real dcgm-exporter sample, one family at a time (as FuzzNormalize).
	for i, family := range strings.Split(string(readFixture(f, "dcgm-exporter-t4-a10g-datadog-fixture.prom")), "\n# HELP ") {
		if i > 0 {
			family = "# HELP " + family
		}
		f.Add(family + "\n")
	}
	f.Add("DCGM_FI_PROF_SM_ACTIVE{UUID=\"GPU-1\",GPU_I_ID=\"1\"} 0.5\n")
	f.Add("# TYPE DCGM_FI_PROF_DRAM_ACTIVE counter\nDCGM_FI_PROF_DRAM_ACTIVE{UUID=\"\"} 1\n")
	f.Fuzz(func(t *testing.T, text string) {
		mfs, err := parse(strings.NewReader(text))
		if err != nil {
			return
		}
		readings, _ := DCGMProfiling(mfs)
		for _, r := range readings {
			if r.UUID == "" || r.Value < 0 || r.Value != r.Value || math.IsInf(r.Value, 0) || r.Value > 1 && !dcgmRates[r.Field] || !slices.Contains(slices.Collect(maps.Values(dcgmFields)), r.Field) {
				t.Fatalf("reading %+v escaped the checks", r)
			}
		}
	})
}
