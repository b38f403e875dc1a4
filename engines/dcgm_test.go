package engines

import (
	"maps"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

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
	readings, left := DCGMProfiling(parseText(t, string(b)+"\n"), time.Now())
	// Only the A10G block names its GPU; the PROF lines the file calls
	// dummies have no labels at all.
	if len(readings) != 1 {
		t.Fatalf("readings %+v, want the A10G's DRAM activity only", readings)
	}
	if r := readings[0]; r.UUID != "GPU-abc" || r.Field != "dram_active" || r.Value != 0.000003 || r.GPUInstance != "" {
		t.Errorf("reading %+v", r)
	}
	if len(left) != 9 || left[0].Why != "no UUID label names its GPU" {
		t.Errorf("left out %+v, want the 9 unlabelled PROF series", left)
	}
}

func TestDCGMProfilingMIGAndBadValues(t *testing.T) {
	// The answer is read at now; 1764000000000 ms is 2025-11-24T16:00:00Z.
	now := time.UnixMilli(1764000000000)
	text := `# TYPE DCGM_FI_PROF_SM_ACTIVE gauge
DCGM_FI_PROF_SM_ACTIVE{gpu="0",UUID="GPU-1",GPU_I_PROFILE="3g.40gb",GPU_I_ID="2"} 0.5
DCGM_FI_PROF_SM_ACTIVE{gpu="0",UUID="GPU-1"} 0.75
DCGM_FI_PROF_SM_ACTIVE{gpu="1",UUID="GPU-2"} NaN
DCGM_FI_PROF_SM_ACTIVE{gpu="2",UUID="GPU-3"} -1
DCGM_FI_PROF_SM_ACTIVE{gpu="3",UUID="GPU-4"} 50
# TYPE DCGM_FI_PROF_PIPE_FP32_ACTIVE gauge
DCGM_FI_PROF_PIPE_FP32_ACTIVE{gpu="3",UUID="GPU-4"} 1
# TYPE DCGM_FI_PROF_DRAM_ACTIVE gauge
DCGM_FI_PROF_DRAM_ACTIVE{gpu="3",UUID="GPU-4"} 0.2 1000
DCGM_FI_PROF_DRAM_ACTIVE{gpu="0",UUID="GPU-1"} 0.3 1763999760000
# TYPE DCGM_FI_PROF_NVLINK_TX_BYTES gauge
DCGM_FI_PROF_NVLINK_TX_BYTES{gpu="0",UUID="GPU-1"} 1e9
`
	readings, left := DCGMProfiling(parseText(t, text), now)
	var got []string
	for _, r := range readings {
		got = append(got, r.UUID+"/"+r.GPUInstance+"/"+r.Field)
	}
	sort.Strings(got)
	// Kept: a ratio of exactly 1, a rate above 1, and GPU-1's DRAM
	// activity stamped 240 s before now (1764000000000 − 1763999760000 ms),
	// within Prometheus's 5-minute lookback.
	want := "GPU-1//dram_active GPU-1//nvlink_tx_bytes_per_second GPU-1//sm_active GPU-1/2/sm_active GPU-4//fp32_active"
	if strings.Join(got, " ") != want {
		t.Errorf("readings %v, want %s", got, want)
	}
	// Left out, in the order of their names: the DRAM reading stamped 1 s
	// after the epoch, NaN, -1, and the ratio 50 (a percent, or garbage).
	wantLeft := []DCGMLeftOut{
		{`DCGM_FI_PROF_DRAM_ACTIVE{UUID="GPU-4",gpu="3"}`, "stamped 1970-01-01T00:00:01Z, more than 5m0s ago"},
		{`DCGM_FI_PROF_SM_ACTIVE{UUID="GPU-2",gpu="1"}`, "value NaN is not a finite non-negative number"},
		{`DCGM_FI_PROF_SM_ACTIVE{UUID="GPU-3",gpu="2"}`, "value -1 is not a finite non-negative number"},
		{`DCGM_FI_PROF_SM_ACTIVE{UUID="GPU-4",gpu="3"}`, "value 50 is not a ratio 0..1"},
	}
	if !slices.Equal(left, wantLeft) {
		t.Errorf("left out\n%+v\nwant\n%+v", left, wantLeft)
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
		readings, _ := DCGMProfiling(mfs, time.Now())
		for _, r := range readings {
			if r.UUID == "" || r.Value < 0 || r.Value != r.Value || math.IsInf(r.Value, 0) || r.Value > 1 && !dcgmRates[r.Field] || !slices.Contains(slices.Collect(maps.Values(dcgmFields)), r.Field) {
				t.Fatalf("reading %+v escaped the checks", r)
			}
		}
	})
}
