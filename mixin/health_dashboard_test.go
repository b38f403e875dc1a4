package mixin_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/xpu-exporter/xpu_exporter/internal/testenv"
)

// "Hardware XID errors" counts the Xids of the time range, across an
// exporter restart, in whole events (probe F PF7). promtool evaluates the
// panel's query, variables at All, at 12m over a 10m range (2m to 12m),
// on series scraped every 15 s, with the exporter's labels:
//
//	GPU 6, Xid 79  born at 7m with its first event (1), a second at
//	               10m15s (2); the exporter restarts at 10m45s (stale) and
//	               the new one counts a third at 11m45s (1 again): 3.
//	               max_over_time showed 2.
//	GPU 2, Xid 48  5 events before the range, 2 more at 6m (7): 2, where
//	               max_over_time showed 7.
//	GPU 3, Xid 63  4 events before the range and none in it, its scrape of
//	               6m failed (stale): no row, a missed scrape being no
//	               new series.
//	GPU 4, Xid 79  2 events before the range, the exporter restarted at
//	               1m15s, the new one counts one at 3m (1 again): 1.
func TestHealthXidPanelCountsEventsInRange(t *testing.T) {
	promtool := testenv.LookPath(t, "promtool", "make test-deps installs Debian's prometheus package")
	m := evaluate(t, "{}")
	expr := panelQuery(t, m, "xpu-health.json", "Hardware XID errors")
	expr = strings.ReplaceAll(expr, "$__range", "10m")

	const labels = `cluster="c1", job="xpu-exporter", instance="n1", node="n1", vendor="nvidia", model="H100", gpu="%s", uuid="GPU-%s", xid="%s", namespace="ml", pod="p%s"`
	var series, want strings.Builder
	xid := func(gpu, code, values string, count int) {
		l := fmt.Sprintf(labels, gpu, gpu, code, gpu)
		fmt.Fprintf(&series, "      - series: 'xpu_xid_errors_total{%s}'\n        values: '%s'\n", l, values)
		if count > 0 {
			fmt.Fprintf(&want, "          - {labels: '{%s}', value: %d}\n", l, count)
		}
	}
	// Index n is n*15s: 28 is 7m, 41 is 10m15s, 43 is 10m45s, 47 is 11m45s.
	xid("6", "79", "_x28 1x12 2x1 stale _x3 1x1", 3)
	xid("2", "48", "5x23 7x24", 2)
	xid("3", "63", "4x23 stale 4x23", 0)
	xid("4", "79", "2x4 stale _x6 1x36", 1)

	// And at 11m50s, over 1m50s to 11m50s: the same counts, GPU 6's third
	// Xid (11m45s) seen after the last whole minute of the range.
	tests := "tests:\n  - interval: 15s\n    input_series:\n" + series.String() + "    promql_expr_test:\n"
	for _, at := range []string{"12m", "11m50s"} {
		tests += fmt.Sprintf("      - expr: %q\n        eval_time: %s\n        exp_samples:\n", expr, at) + want.String()
	}
	promtoolTest(t, promtool, tests)
}
