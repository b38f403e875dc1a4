package mixin_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xpu-exporter/xpu_exporter/internal/testenv"
)

// The fleet overview's utilization panels count each physical GPU once,
// with the utilization the recording rules give it (as "Utilization by
// model" does): promtool evaluates the panels' queries, taken from the
// rendered dashboard with the variables at All, on one cluster of four
// GPUs with the exporter's label sets:
//
//	GPU-W  H100, whole, 0.75
//	GPU-M  H100 in MIG mode, seven 1g.10gb instances, one at 0.875 and six
//	       at 0 (each 1/7 of the GPU, xpu_partition_share_ratio); no
//	       utilization of its own: 0.875 * 1/7 = 0.125
//	GPU-P  MI300X in DPX mode: its own 0.5 (the mean of its partitions'
//	       0.75 and 0.25), the partitions not counted again
//	GPU-I  H100, whole, idle: 0
//
// Utilization (0.75 + 0.125 + 0.5 + 0) / 4 = 0.34375; idle (below 5%): 1
// of 4 = 0.25. Averaging the 12 xpu_utilization_ratio series, as the
// panels did, gave (0.75 + 0.875 + 0.5 + 0.75 + 0.25) / 12 = 0.26 and 7 of
// 12 = 0.58 idle.
func TestFleetUtilizationCountsPhysicalGPUs(t *testing.T) {
	promtool := testenv.LookPath(t, "promtool", "make test-deps installs Debian's prometheus package")
	m := evaluate(t, "{}")
	d, ok := m.Dashboards["xpu-fleet-overview.json"]
	if !ok {
		t.Fatal("no xpu-fleet-overview.json")
	}
	all := strings.NewReplacer(`"$cluster"`, `".*"`, `"$node"`, `".*"`, `"$vendor"`, `".*"`)
	query := func(title string, target int) string {
		for _, p := range d.Panels {
			if p.Title == title && target < len(p.Targets) {
				return all.Replace(p.Targets[target].Expr)
			}
		}
		t.Fatalf("fleet overview: no panel %q with target %d", title, target)
		return ""
	}
	expect := func(title string, target int, labels string, value float64) string {
		return fmt.Sprintf("      - expr: %q\n        eval_time: 10m\n        exp_samples: [{labels: '%s', value: %g}]\n",
			query(title, target), labels, value)
	}
	const h100, mi300x = "NVIDIA H100 80GB HBM3", "AMD Instinct MI300X OAM"
	var series strings.Builder
	add := func(name, gpu, uuid, vendor, model, extra string, value float64) {
		fmt.Fprintf(&series, "      - series: '%s{cluster=\"c1\", job=\"xpu-exporter\", instance=\"n1\", node=\"n1\", gpu=%q, uuid=%q, vendor=%q, model=%q%s}'\n        values: '%gx20'\n",
			name, gpu, uuid, vendor, model, extra, value)
	}
	device := func(gpu, uuid, vendor, model, extra string, utilization float64) {
		add("xpu_device_info", gpu, uuid, vendor, model, extra, 1)
		add("xpu_utilization_ratio", gpu, uuid, vendor, model, extra, utilization)
	}
	device("0", "GPU-W", "nvidia", h100, "", 0.75)
	add("xpu_device_info", "1", "GPU-M", "nvidia", h100, "", 1)
	for i := range 7 {
		u := 0.0
		if i == 0 {
			u = 0.875
		}
		extra := fmt.Sprintf(`, parent_uuid="GPU-M", mig_profile="1g.10gb", mig_instance="%d"`, i)
		device("1", fmt.Sprintf("MIG-M%d", i), "nvidia", h100, extra, u)
		add("xpu_partition_share_ratio", "1", fmt.Sprintf("MIG-M%d", i), "nvidia", h100, extra, 1.0/7)
	}
	device("2", "GPU-P", "amd", mi300x, "", 0.5)
	for i, u := range []float64{0.75, 0.25} {
		extra := fmt.Sprintf(`, parent_uuid="GPU-P", mig_profile="dpx", mig_instance="%d"`, i)
		device("2", fmt.Sprintf("GPU-P-xcp%d", i), "amd", mi300x, extra, u)
		add("xpu_partition_share_ratio", "2", fmt.Sprintf("GPU-P-xcp%d", i), "amd", mi300x, extra, 0.5)
	}
	device("3", "GPU-I", "nvidia", h100, "", 0)

	tests := "tests:\n  - interval: 1m\n    input_series:\n" + series.String() + "    promql_expr_test:\n" +
		expect("Utilization", 0, "{}", 0.34375) +
		expect("Idle", 0, "{}", 0.25) +
		expect("Clusters", 1, `{cluster="c1"}`, 0.34375) +
		expect("Utilization by cluster", 0, `{cluster="c1"}`, 0.34375)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), []byte("groups: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tests.yaml"), []byte("rule_files: [rules.yaml]\nevaluation_interval: 1m\n"+tests), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(promtool, "test", "rules", "tests.yaml")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool test rules: %v\n%s", err, out)
	}
}
