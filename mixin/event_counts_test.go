package mixin_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/xpu-exporter/xpu_exporter/internal/testenv"
)

// Counts of discrete events are shown in whole events (probe F PF10: 5.29
// ECC errors on the health dashboard, XpuEccUncorrectableErrors at 9.31):
// increase() extrapolates to the edges of its window. promtool evaluates
// the alerts' expressions and the ECC panel's query, variables at All, at
// 10m05s, off the 15 s scrape grid, over 10m (5s to 10m05s; the first
// sample is 15s, the last 10m):
//
//	GPU 3, held by Slurm job 777: its uncorrected ECC counter (scope
//	       aggregate) 0 until 6m, 2 from 6m, 3 from 8m: 3 errors, where
//	       increase() gave 3 * 590/585 = 3.03 (extended 5 s to the end;
//	       its first sample, 0, ends it at 15 s).
//	GPU 6, pod ml/x: Xid 79 born at 7m (1), a second at 8m (2):
//	       increase() of its samples, 7m to 10m, is 1 extended by half a
//	       scrape interval before and 5 s after: 1 * 192.5/180 = 1.07,
//	       XpuXidErrors' value; 1 rounded. (The first event is the
//	       alert's second arm's, not counted in its value.)
func TestEventCountsAreWhole(t *testing.T) {
	promtool := testenv.LookPath(t, "promtool", "make test-deps installs Debian's prometheus package")
	m := evaluate(t, "{}")
	const ecc = `cluster="c1", job="xpu-exporter", instance="n1", node="n1", gpu="3", uuid="GPU-3", vendor="nvidia", model="H100", slurm_job_id="777", slurm_user="carol", slurm_account="acct-a", slurm_partition="gpu", slurm_qos="normal"`
	const xid = `cluster="c1", job="xpu-exporter", instance="n1", node="n1", gpu="6", uuid="GPU-6", vendor="nvidia", model="H100", namespace="ml", pod="x", container="main", workload="x", workload_kind="Pod", xid="79"`
	// Index n is n*15s: 24 is 6m, 28 is 7m, 32 is 8m.
	series := fmt.Sprintf("      - series: 'xpu_ecc_errors_total{%s, type=\"uncorrected\", scope=\"aggregate\"}'\n        values: '0x23 2x7 3x8'\n", ecc) +
		fmt.Sprintf("      - series: 'xpu_xid_errors_total{%s}'\n        values: '_x28 1x3 2x8'\n", xid)

	alert := func(name string) string {
		for _, g := range m.Alerts.Groups {
			if i := slices.IndexFunc(g.Rules, func(r rule) bool { return r.Alert == name }); i >= 0 {
				return g.Rules[i].Expr
			}
		}
		t.Fatalf("no alert %s", name)
		return ""
	}
	panel := strings.ReplaceAll(panelQuery(t, m, "xpu-health.json", "ECC errors in the time range"), "$__range", "10m")

	tests := "tests:\n  - interval: 15s\n    input_series:\n" + series + "    promql_expr_test:\n"
	for _, c := range []struct {
		expr, labels string
		value        int
	}{
		{alert("XpuEccUncorrectableErrors"), ecc + `, type="uncorrected"`, 3},
		{panel, ecc + `, type="uncorrected"`, 3},
		{alert("XpuXidErrors"), xid, 1},
	} {
		tests += fmt.Sprintf("      - expr: %q\n        eval_time: 10m5s\n        exp_samples: [{labels: '{%s}', value: %d}]\n", c.expr, c.labels, c.value)
	}
	promtoolTest(t, promtool, tests)
}
