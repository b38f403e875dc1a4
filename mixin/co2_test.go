package mixin_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/xpu-exporter/xpu_exporter/internal/testenv"
)

// gridCarbonIntensityByCluster with the cluster named only by Prometheus's
// external labels (README.md, "Sizing"): rule evaluation never sees them,
// so the recorded series carry no cluster label, and the per-cluster
// intensity applies only through clusterName, set when rendering that
// cluster's rules. promtool runs the rendered recording rules with
// { 'eu-west': 250, 'us-2': 350 } and clusterName 'eu-west' on three
// one-GPU owners of namespace ml, each GPU held whole:
//
//	no cluster label (eu-west's own Prometheus), 500 W: 0.5 kWh/h, × 250
//	cluster="us-2", 1000 W: 1 kWh/h, × 350 (its own entry)
//	cluster="c9", 1000 W: 1 kWh/h, × 400 (the default)
//
// so CO2 / kWh is 250, 350 and 400. Without clusterName the unlabelled
// series took the default 400: eu-west's CO2 overstated by 60%.
func TestGridCarbonIntensityWithExternalClusterLabel(t *testing.T) {
	promtool := testenv.LookPath(t, "promtool", "make test-deps installs Debian's prometheus package")
	m := evaluate(t, `{ gridCarbonIntensityByCluster: { 'eu-west': 250, 'us-2': 350 }, clusterName: 'eu-west' }`)
	dir := t.TempDir()
	rules, err := yaml.Marshal(map[string][]group{"groups": m.Rules.Groups})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), rules, 0o644); err != nil {
		t.Fatal(err)
	}
	var series strings.Builder
	for i, owner := range []struct {
		cluster string
		joules  int // per minute: watts × 60
	}{{"", 30000}, {"us-2", 60000}, {"c9", 60000}} {
		labels := fmt.Sprintf(`job="xpu-exporter", instance="n%d", node="n%d", gpu="0", uuid="GPU-%d", vendor="nvidia", model="H100", namespace="ml", pod="p-%d"`, i, i, i, i)
		if owner.cluster != "" {
			labels = fmt.Sprintf(`cluster=%q, `, owner.cluster) + labels
		}
		fmt.Fprintf(&series, "      - series: 'xpu_workload_allocated_devices{%s}'\n        values: '1x20'\n", labels)
		fmt.Fprintf(&series, "      - series: 'xpu_energy_joules_total{%s}'\n        values: '0+%dx20'\n", labels, owner.joules)
		fmt.Fprintf(&series, "      - series: 'xpu_device_up{%s}'\n        values: '1x20'\n", labels)
	}
	tests := `rule_files: [rules.yaml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
` + series.String() + `    promql_expr_test:
      - expr: round(namespace:xpu_co2_grams_per_hour:sum / namespace:xpu_energy_kwh_per_hour:sum)
        eval_time: 15m
        exp_samples:
          - {labels: '{namespace="ml"}', value: 250}
          - {labels: '{cluster="us-2", namespace="ml"}', value: 350}
          - {labels: '{cluster="c9", namespace="ml"}', value: 400}
      - expr: round(cluster:xpu_co2_grams_per_hour:sum)
        eval_time: 15m
        exp_samples:
          - {labels: '{}', value: 125}
          - {labels: '{cluster="us-2"}', value: 350}
          - {labels: '{cluster="c9"}', value: 400}
`
	if err := os.WriteFile(filepath.Join(dir, "tests.yaml"), []byte(tests), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(promtool, "test", "rules", "tests.yaml")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool test rules: %v\n%s", err, out)
	}
}
