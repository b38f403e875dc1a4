package e2e

// The mixin's dashboards on a mixed fleet: a real Prometheus with the
// mixin's rules scrapes the demo's mixed node (two NVIDIA H100s and two
// Gaudi 2s, fixtures/scenarios/mixed.yaml) and every panel query runs as
// Grafana would run it, once per value of the vendor variable.

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
)

// panelQueries returns every panel query of the mixin's dashboards, keyed
// by dashboard and panel.
func panelQueries(t *testing.T) map[string]string {
	t.Helper()
	var dashboards map[string]struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal([]byte(evalMixin(t, "{}", "m.grafanaDashboards")), &dashboards); err != nil {
		t.Fatal(err)
	}
	queries := map[string]string{}
	for file, d := range dashboards {
		for _, p := range d.Panels {
			for i, target := range p.Targets {
				queries[fmt.Sprintf("%s %q target %d", file, p.Title, i)] = target.Expr
			}
		}
	}
	return queries
}

var grafanaVariable = regexp.MustCompile(`\$\{?(\w+)\}?`)

// grafanaQuery fills in the dashboards' variables as Grafana does with the
// vendor picked and All (".*") everywhere else.
func grafanaQuery(expr, vendor string) string {
	return grafanaVariable.ReplaceAllStringFunc(expr, func(v string) string {
		switch strings.Trim(v, "${}") {
		case "__range", "__rate_interval", "__interval":
			return "1m"
		case "vendor":
			return vendor
		}
		return ".*"
	})
}

// Picking a vendor on a mixed node leaves that vendor's devices only, and
// every panel query runs: the fleet overview counts the node's two H100s
// (vendor nvidia) and two Gaudi 2s (vendor habana, the exporter's name for
// Intel Gaudi), four with All.
func TestDashboardsOnMixedFleet(t *testing.T) {
	job, ruleFile := mixinRules(t, testRulesConfig)
	e := start(t, "--demo", "--demo.scenario=../fixtures/scenarios/mixed.yaml")
	p := startPrometheus(t, labelledScrapeConfig(job, e.addr, ruleFile, map[string]string{"node": "mixed-node"}))
	deadline := time.Now().Add(60 * time.Second)
	until(t, deadline, "target", p.targetUp(job))

	queries := panelQueries(t)
	devices := queries[`xpu-fleet-overview.json "Devices" target 0`]
	if devices == "" {
		t.Fatal(`the fleet overview has no "Devices" stat`)
	}
	for vendor, want := range map[string]float64{"nvidia": 2, "habana": 2, ".*": 4} {
		until(t, deadline, "devices of vendor "+vendor, p.value(grafanaQuery(devices, vendor), want))
	}
	// Rules evaluated on the node's data before the panels that read them.
	until(t, deadline, "model:xpu_devices:count", p.value(`count(model:xpu_devices:count)`, 2))

	vendorFilter := regexp.MustCompile(`vendor=~"\$vendor"`)
	for _, vendor := range []string{"nvidia", "habana"} {
		answered := 0
		for where, expr := range queries {
			samples, err := p.query(grafanaQuery(expr, vendor))
			if err != nil {
				t.Errorf("vendor %s: %s: %v", vendor, where, err)
				continue
			}
			if vendorFilter.MatchString(expr) && len(samples) > 0 {
				answered++
			}
			// Whatever the query, no series of another vendor's device.
			for _, s := range samples {
				if v, ok := s.Metric["vendor"]; ok && v != vendor {
					t.Errorf("vendor %s: %s returns a %s device: %v", vendor, where, v, s.Metric)
				}
			}
		}
		// Each vendor's devices fill panels of every dashboard: far more
		// than the handful of its answers a misfiltered query would leave.
		if answered < 20 {
			t.Errorf("vendor %s: only %d device panel queries return data", vendor, answered)
		}
		t.Logf("vendor %s: %d device panel queries return data, of %d queries", vendor, answered, len(queries))
	}
}
