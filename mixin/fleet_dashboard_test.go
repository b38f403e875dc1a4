package mixin_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
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
	promtoolTest(t, promtool, tests)
}

// "Devices down" on the fleet and health dashboards counts physical
// devices, as "Devices" does: a lost GPU's MIG instances and partitions are
// served down with it (README), and counted as devices one lost CPX MI300X
// read 9 down on a node of 2 (probe17-amdpart D3). promtool evaluates the
// panels' queries, variables at All, on a node of four GPUs:
//
//	GPU-W  H100, whole, up
//	GPU-L  H100, whole, lost
//	GPU-M  H100 in MIG mode, lost with its 3 instances
//	GPU-C  MI300X in CPX mode, lost with its 8 partitions
//	GPU-P  H100 in MIG mode, up, one of its 2 instances down
//	GPU-Q  H100 in MIG mode, up, with two compute instances of one GPU
//	       instance and profile, up: their series differ by uuid alone
//	       (review19 R3: the panels failed, "vector cannot contain metrics
//	       with the same labelset", where a GPU's uuid replaced theirs)
//
// Down: GPU-L, GPU-M, GPU-C and GPU-P = 4 (counting every series: 1 + 4 +
// 9 + 1 = 15; counting only GPUs' own series, 3: GPU-P's lone lost instance
// was missed, review17 R8). "Unhealthy devices" of the health dashboard
// counts them so too, a GPU by the lowest score of it and its instances:
// the health rule scores each series its up value with no penalty here, so
// the same 4 below 0.5, where the 15 series scored 0 were counted.
func TestDevicesDownCountsPhysicalDevices(t *testing.T) {
	promtool := testenv.LookPath(t, "promtool", "make test-deps installs Debian's prometheus package")
	m := evaluate(t, "{}")
	var series strings.Builder
	up := func(gpu, uuid, vendor, extra string, value int) {
		fmt.Fprintf(&series, "      - series: 'xpu_device_up{cluster=\"c1\", job=\"xpu-exporter\", instance=\"n1\", node=\"n1\", gpu=%q, uuid=%q, vendor=%q%s}'\n        values: '%dx20'\n",
			gpu, uuid, vendor, extra, value)
	}
	up("0", "GPU-W", "nvidia", "", 1)
	up("1", "GPU-L", "nvidia", "", 0)
	up("2", "GPU-M", "nvidia", "", 0)
	for i := range 3 {
		up("2", fmt.Sprintf("MIG-M%d", i), "nvidia", fmt.Sprintf(`, parent_uuid="GPU-M", mig_profile="2g.20gb", mig_instance="%d"`, i), 0)
	}
	up("3", "GPU-C", "amd", "", 0)
	for i := range 8 {
		up("3", fmt.Sprintf("GPU-C-xcp%d", i), "amd", fmt.Sprintf(`, parent_uuid="GPU-C", mig_profile="cpx", mig_instance="%d"`, i), 0)
	}
	up("4", "GPU-P", "nvidia", "", 1)
	for i, v := range []int{1, 0} {
		up("4", fmt.Sprintf("MIG-P%d", i), "nvidia", fmt.Sprintf(`, parent_uuid="GPU-P", mig_profile="3g.40gb", mig_instance="%d"`, i), v)
	}
	up("5", "GPU-Q", "nvidia", "", 1)
	for _, uuid := range []string{"MIG-Q0", "MIG-Q1"} {
		up("5", uuid, "nvidia", `, parent_uuid="GPU-Q", mig_profile="1c.3g.40gb", mig_instance="1"`, 1)
	}
	// The health score the rule records: each series' up value.
	series.WriteString(strings.ReplaceAll(series.String(), "xpu_device_up{", "device:xpu_health_score:clamp_min{"))
	tests := "tests:\n  - interval: 1m\n    input_series:\n" + series.String() + "    promql_expr_test:\n"
	for _, p := range []struct{ file, title string }{
		{"xpu-fleet-overview.json", "Devices down"},
		{"xpu-health.json", "Devices down"},
		{"xpu-health.json", "Unhealthy devices"},
	} {
		expr := panelQuery(t, m, p.file, p.title)
		tests += fmt.Sprintf("      - expr: %q\n        eval_time: 10m\n        exp_samples: [{labels: '{}', value: 4}]\n", expr)
	}
	promtoolTest(t, promtool, tests)
}

// variables are a panel query's Grafana variables, each quoted.
var variables = regexp.MustCompile(`"\$[a-z_]+"`)

// panelQuery is the first query of the panel titled title in the rendered
// dashboard file, its variables at All (any value).
func panelQuery(t *testing.T, m mixin, file, title string) string {
	t.Helper()
	d, ok := m.Dashboards[file]
	if !ok {
		t.Fatalf("no %s", file)
	}
	i := slices.IndexFunc(d.Panels, func(p panel) bool { return p.Title == title && len(p.Targets) > 0 })
	if i < 0 {
		t.Fatalf("%s: no panel %s", file, title)
	}
	return variables.ReplaceAllString(d.Panels[i].Targets[0].Expr, `".*"`)
}

// promtoolTest runs promtool's rule tests, without rules, on tests: a
// "tests:" list of input series and PromQL expressions.
func promtoolTest(t *testing.T, promtool, tests string) {
	t.Helper()
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
