package mixin_test

// Lint for the monitoring mixin in the spirit of mixtool: the mixin is
// evaluated with the go-jsonnet library and its alerts, rules and
// dashboards are checked against the project's conventions. PromQL is
// parsed by promtool (every expression, dashboards included, written out
// as recording rules), so the heavy Prometheus module stays out of go.mod.

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-jsonnet"
	"gopkg.in/yaml.v3"

	"github.com/xpu-exporter/xpu_exporter/internal/testenv"
)

type rule struct {
	Alert       string            `json:"alert" yaml:"alert,omitempty"`
	Record      string            `json:"record" yaml:"record,omitempty"`
	Expr        string            `json:"expr" yaml:"expr"`
	For         string            `json:"for" yaml:"for,omitempty"`
	Labels      map[string]string `json:"labels" yaml:"labels,omitempty"`
	Annotations map[string]string `json:"annotations" yaml:"annotations,omitempty"`
}

type group struct {
	Name     string `json:"name" yaml:"name"`
	Interval string `json:"interval" yaml:"interval,omitempty"`
	Rules    []rule `json:"rules" yaml:"rules"`
}

type target struct {
	Expr string `json:"expr"`
}

type panel struct {
	ID          int                      `json:"id"`
	Type        string                   `json:"type"`
	Title       string                   `json:"title"`
	Description string                   `json:"description"`
	Targets     []target                 `json:"targets"`
	GridPos     struct{ X, Y, W, H int } `json:"gridPos"`
	FieldConfig struct {
		Defaults struct {
			NoValue string `json:"noValue"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
}

type variable struct {
	Name  string `json:"name"`
	Type  string `json:"type"`
	Query any    `json:"query"`
	Hide  int    `json:"hide"`
}

type dashboard struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []variable `json:"list"`
	} `json:"templating"`
}

type mixin struct {
	Config     map[string]any           `json:"config"`
	Alerts     struct{ Groups []group } `json:"alerts"`
	Rules      struct{ Groups []group } `json:"rules"`
	Dashboards map[string]dashboard     `json:"dashboards"`
}

// evaluate evaluates the mixin with a _config override (jsonnet object
// literal) and returns its three outputs and resolved config.
func evaluate(t *testing.T, config string) mixin {
	t.Helper()
	vm := jsonnet.MakeVM()
	out, err := vm.EvaluateAnonymousSnippet("mixin_test.jsonnet", fmt.Sprintf(`
		local m = (import 'mixin.libsonnet') + { _config+:: %s };
		{
			config: m._config,
			alerts: m.prometheusAlerts,
			rules: m.prometheusRules,
			dashboards: m.grafanaDashboards,
		}`, config))
	if err != nil {
		t.Fatalf("evaluating the mixin: %v", err)
	}
	var m mixin
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("decoding the mixin: %v", err)
	}
	return m
}

func (m mixin) allRules() []rule {
	var rules []rule
	for _, g := range append(m.Alerts.Groups, m.Rules.Groups...) {
		rules = append(rules, g.Rules...)
	}
	return rules
}

func (m mixin) records() map[string]bool {
	records := map[string]bool{}
	for _, r := range m.allRules() {
		if r.Record != "" {
			records[r.Record] = true
		}
	}
	return records
}

var (
	grafanaVariable = regexp.MustCompile(`\$\{?(\w+)\}?`)
	labelValues     = regexp.MustCompile(`^label_values\((.*),\s*\w+\)$`)
)

// queries returns every PromQL expression of the dashboards, keyed by
// where it comes from, with Grafana's variables replaced by values PromQL
// accepts.
func (m mixin) queries() map[string]string {
	grafana := func(expr string) string {
		return grafanaVariable.ReplaceAllStringFunc(expr, func(v string) string {
			switch strings.Trim(v, "${}") {
			case "__rate_interval", "__interval":
				return "5m"
			case "__range":
				return "1d"
			}
			return "value"
		})
	}
	queries := map[string]string{}
	for file, d := range m.Dashboards {
		for _, p := range d.Panels {
			for i, t := range p.Targets {
				queries[fmt.Sprintf("%s panel %q target %d", file, p.Title, i)] = grafana(t.Expr)
			}
		}
		for _, v := range d.Templating.List {
			if q, ok := v.Query.(string); ok && v.Type == "query" {
				if sub := labelValues.FindStringSubmatch(q); sub != nil {
					queries[fmt.Sprintf("%s variable %s", file, v.Name)] = grafana(sub[1])
				}
			}
		}
	}
	return queries
}

func TestAlertConventions(t *testing.T) {
	m := evaluate(t, "{}")
	runbook, err := os.ReadFile("runbook.md")
	if err != nil {
		t.Fatal(err)
	}
	wantGroups := map[string]int{"xpu-device": 8, "xpu-fleet": 3, "xpu-inference": 6}
	if len(m.Alerts.Groups) != len(wantGroups) {
		t.Errorf("%d alert groups, want %d", len(m.Alerts.Groups), len(wantGroups))
	}
	name := regexp.MustCompile(`^Xpu(?:[A-Z][a-z0-9]+)+$`)
	seen := map[string]bool{}
	total := 0
	for _, g := range m.Alerts.Groups {
		// A group may record what its alerts hold, before them
		// (util.heldRecord); those rules are the recording rules' tests'.
		alerts := slices.DeleteFunc(slices.Clone(g.Rules), func(r rule) bool { return r.Record != "" })
		if want, ok := wantGroups[g.Name]; !ok || len(alerts) != want {
			t.Errorf("alert group %s has %d alerts, want %d", g.Name, len(alerts), want)
		}
		for _, r := range alerts {
			total++
			if !name.MatchString(r.Alert) || len(r.Alert) > 40 {
				t.Errorf("alert name %q: want CamelCase starting with Xpu, at most 40 characters", r.Alert)
			}
			if seen[r.Alert] {
				t.Errorf("alert %s defined twice", r.Alert)
			}
			seen[r.Alert] = true
			if s := r.Labels["severity"]; !slices.Contains([]string{"critical", "warning", "info"}, s) {
				t.Errorf("%s: severity %q", r.Alert, s)
			}
			if _, err := time.ParseDuration(r.For); err != nil {
				t.Errorf("%s: for %q: %v", r.Alert, r.For, err)
			}
			summary := r.Annotations["summary"]
			if summary == "" || strings.Contains(summary, "{{") || !strings.HasSuffix(summary, ".") {
				t.Errorf("%s: summary %q: want an untemplated sentence ending with a period", r.Alert, summary)
			}
			description := r.Annotations["description"]
			if !strings.Contains(description, "{{") {
				t.Errorf("%s: description is not templated", r.Alert)
			}
			// Every alert but the fleet-wide idle fraction and a whole
			// exporter gone is about one device or server and names its
			// owner.
			notOneDevice := r.Alert == "XpuFleetIdleFractionHigh" || r.Alert == "XpuExporterDown"
			if !notOneDevice {
				for _, label := range []string{"$labels.pod", "$labels.slurm_job_id", "$labels.unit"} {
					if !strings.Contains(description, label) {
						t.Errorf("%s: description does not name the owner (%s)", r.Alert, label)
					}
				}
			}
			if g.Name != "xpu-inference" && !notOneDevice && !strings.Contains(description, "$labels.uuid") {
				t.Errorf("%s: description does not name the device", r.Alert)
			}
			anchor := strings.ToLower(r.Alert)
			if want := fmt.Sprintf(m.Config["runbookURLPattern"].(string), anchor); r.Annotations["runbook_url"] != want {
				t.Errorf("%s: runbook_url %q, want %q", r.Alert, r.Annotations["runbook_url"], want)
			}
			if !strings.Contains(string(runbook), "\n## "+r.Alert+"\n") {
				t.Errorf("%s: no section in runbook.md", r.Alert)
			}
		}
	}
	if total != 17 {
		t.Errorf("%d alerts, want 17", total)
	}
}

func TestRuleConventions(t *testing.T) {
	m := evaluate(t, "{}")
	// level:metric:operations, the operations from this list, newest
	// first (Prometheus's recording-rule naming practice): what a rule
	// does, never what its value means (no :allocated, :score, :weight).
	// rate without a window: over a configured one (inferenceRateWindow).
	record := regexp.MustCompile(`^[a-z_]+:xpu_[a-z0-9_]+:((sum|avg|max|min|count|group|ratio|mul|clamp_min|rate5m|rate)(_|$))+$`)
	names := map[string]bool{}
	for _, g := range append(m.Alerts.Groups, m.Rules.Groups...) {
		if names[g.Name] {
			t.Errorf("group %s defined twice", g.Name)
		}
		names[g.Name] = true
		if len(g.Rules) > 20 {
			t.Errorf("group %s has %d rules, want at most 20", g.Name, len(g.Rules))
		}
	}
	for _, g := range m.Rules.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" || !record.MatchString(r.Record) {
				t.Errorf("group %s: %q is not a recording rule named level:xpu_metric:operations", g.Name, r.Record+r.Alert)
			}
		}
	}
}

// Every aggregation and join keeps the cluster label, whatever it is
// called, so the same rules serve one cluster or many.
func TestAggregationsKeepCluster(t *testing.T) {
	clause := regexp.MustCompile(`\b(by|on)\s*\(([^)]*)\)`)
	for _, label := range []string{"cluster", "k8s_cluster"} {
		m := evaluate(t, fmt.Sprintf("{ clusterLabel: %q }", label))
		exprs := map[string]string{}
		for _, r := range m.Rules.Groups {
			for _, rr := range r.Rules {
				exprs[rr.Record] += rr.Expr
			}
		}
		for name, expr := range exprs {
			for _, c := range clause.FindAllStringSubmatch(expr, -1) {
				if !slices.Contains(strings.Split(strings.ReplaceAll(c[2], " ", ""), ","), label) {
					t.Errorf("clusterLabel %s: %s: %q drops it", label, name, c[0])
				}
			}
		}
	}
}

func TestConfigKnobs(t *testing.T) {
	m := evaluate(t, `{
		showMultiCluster: true,
		podLabelAllowList: ['team'],
		gridCarbonIntensityByCluster: { 'eu-1': 50, 'us-2': 350 },
	}`)
	var co2 string
	for _, r := range m.allRules() {
		if r.Record == "namespace:xpu_co2_grams_per_hour:sum" {
			co2 = r.Expr
		}
	}
	for _, want := range []string{
		`namespace:xpu_energy_kwh_per_hour:sum{cluster="eu-1"} * 50`,
		`namespace:xpu_energy_kwh_per_hour:sum{cluster="us-2"} * 350`,
		`namespace:xpu_energy_kwh_per_hour:sum{cluster!~"eu-1|us-2"} * 400`,
	} {
		if !strings.Contains(co2, want) {
			t.Errorf("CO2 rule %q lacks %q", co2, want)
		}
	}
	for file, d := range m.Dashboards {
		for _, v := range d.Templating.List {
			if v.Name == "cluster" && v.Hide != 0 {
				t.Errorf("%s: cluster variable hidden with showMultiCluster", file)
			}
		}
	}
	checkPromQL(t, m, m.queries())
}

func TestDashboards(t *testing.T) {
	m := evaluate(t, "{}")
	wantUIDs := map[string]string{
		"xpu-fleet-overview.json": "xpu-fleet-overview",
		"xpu-attribution.json":    "xpu-attribution",
		"xpu-profiling.json":      "xpu-profiling",
		"xpu-inference.json":      "xpu-inference",
		"xpu-health.json":         "xpu-health",
	}
	if len(m.Dashboards) != len(wantUIDs) {
		t.Errorf("%d dashboards, want %d", len(m.Dashboards), len(wantUIDs))
	}
	uids := map[string]bool{}
	for file, d := range m.Dashboards {
		if d.UID != wantUIDs[file] {
			t.Errorf("%s: uid %q, want the stable %q", file, d.UID, wantUIDs[file])
		}
		if uids[d.UID] {
			t.Errorf("%s: uid %q used twice", file, d.UID)
		}
		uids[d.UID] = true
		if d.Title == "" {
			t.Errorf("%s: no title", file)
		}
		var variables []string
		for _, v := range d.Templating.List {
			variables = append(variables, v.Name)
			if v.Name == "cluster" && v.Hide != 2 {
				t.Errorf("%s: cluster variable shown without showMultiCluster", file)
			}
		}
		if len(variables) < 4 || !slices.Equal(variables[:4], []string{"datasource", "cluster", "node", "vendor"}) {
			t.Errorf("%s: variables %v, want datasource, cluster, node, vendor first", file, variables)
		}
		// The fleet counts devices whoever owns them; every other
		// dashboard has per-owner panels and lets one pick the owner.
		owners := slices.Contains(variables, "namespace") && slices.Contains(variables, "workload") && slices.Contains(variables, "pod")
		if owners == (file == "xpu-fleet-overview.json") {
			t.Errorf("%s: variables %v: want namespace, workload and pod on every dashboard but the fleet overview", file, variables)
		}
		// Throttling panels count the reasons the alerts count, not the
		// power cap a busy GPU sits at.
		reasons := fmt.Sprintf(`reason=~"%s"`, strings.Join(anyStrings(m.Config["throttleReasons"]), "|"))
		for _, p := range d.Panels {
			for _, q := range p.Targets {
				if strings.Contains(q.Expr, "xpu_clock_throttled") && !strings.Contains(q.Expr, reasons) {
					t.Errorf("%s: panel %q counts throttle reasons other than %s: %s", file, p.Title, reasons, q.Expr)
				}
			}
		}
		// Series that never carry owner labels cannot be filtered by
		// owner: the panels would go blank when one is picked.
		for _, p := range d.Panels {
			for _, q := range p.Targets {
				for _, name := range []string{"xpu_device_info", "xpu_device_hourly_cost", "xpu_inference_up"} {
					if regexp.MustCompile(name + `\{[^}]*\$(namespace|workload|pod)\b`).MatchString(q.Expr) {
						t.Errorf("%s: panel %q filters %s by owner: %s", file, p.Title, name, q.Expr)
					}
				}
			}
		}
		ids := map[int]bool{}
		cells := map[[2]int]string{}
		for _, p := range d.Panels {
			if ids[p.ID] {
				t.Errorf("%s: panel id %d used twice", file, p.ID)
			}
			ids[p.ID] = true
			if g := p.GridPos; g.W < 1 || g.H < 1 || g.X+g.W > 24 {
				t.Errorf("%s: panel %q placed at %+v, outside the 24-column grid", file, p.Title, g)
			}
			for x := p.GridPos.X; x < p.GridPos.X+p.GridPos.W; x++ {
				for y := p.GridPos.Y; y < p.GridPos.Y+p.GridPos.H; y++ {
					if other, ok := cells[[2]int{x, y}]; ok {
						t.Errorf("%s: panels %q and %q overlap", file, other, p.Title)
					}
					cells[[2]int{x, y}] = p.Title
				}
			}
			if p.Type == "row" {
				continue
			}
			if p.Title == "" || p.Description == "" || len(p.Targets) == 0 {
				t.Errorf("%s: panel %q needs a title, a description and a query", file, p.Title)
			}
			// A missing price must not read as a cost of zero.
			for _, q := range p.Targets {
				if strings.Contains(q.Expr, "cost_per_hour") &&
					(p.FieldConfig.Defaults.NoValue != "no price configured" ||
						!strings.Contains(p.Description, "no price configured")) {
					t.Errorf("%s: cost panel %q does not say when no price is configured", file, p.Title)
				}
			}
		}
	}
}

// Every expression parses: promtool checks a rule file holding the
// mixin's rules plus every dashboard query as a recording rule.
func TestPromQLParses(t *testing.T) {
	m := evaluate(t, "{}")
	checkPromQL(t, m, m.queries())
}

func checkPromQL(t *testing.T, m mixin, queries map[string]string) {
	t.Helper()
	promtool := testenv.LookPath(t, "promtool", "make test-deps installs Debian's prometheus package")
	dashboards := group{Name: "dashboard-queries"}
	keys := slices.Sorted(maps.Keys(queries))
	for i, k := range keys {
		dashboards.Rules = append(dashboards.Rules, rule{Record: fmt.Sprintf("dashboard:query_%d:check", i), Expr: queries[k]})
	}
	file := filepath.Join(t.TempDir(), "rules.yaml")
	out, err := yaml.Marshal(map[string][]group{"groups": append(append(m.Alerts.Groups, m.Rules.Groups...), dashboards)})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, out, 0o644); err != nil {
		t.Fatal(err)
	}
	if msg, err := exec.Command(promtool, "check", "rules", file).CombinedOutput(); err != nil {
		// promtool names the failing rule by index: map it back.
		for i, k := range keys {
			msg = []byte(strings.ReplaceAll(string(msg), fmt.Sprintf("dashboard:query_%d:check", i), k))
		}
		t.Errorf("promtool check rules: %v\n%s", err, msg)
	}
}

// Every recorded name the rules and dashboards read is one the mixin
// records, and every recording rule is read by an alert or a dashboard.
// That the exporter serves every xpu_* metric they read is checked against
// the running demo exporter: TestMixinMetricsExistInDemo in ../e2e.
func TestRecordedNames(t *testing.T) {
	m := evaluate(t, "{}")
	records := m.records()
	exprs := m.queries()
	for _, r := range m.allRules() {
		exprs[r.Alert+r.Record] += "\n" + r.Expr
	}
	// A name starts with a letter where no other name character precedes
	// it: a subquery's [1h:1m] is no name.
	token := regexp.MustCompile(`(?:^|[^A-Za-z0-9_:])([A-Za-z_][A-Za-z0-9_:]*)`)
	used := map[string]bool{}
	for where, expr := range exprs {
		for _, m := range token.FindAllStringSubmatch(expr, -1) {
			name := m[1]
			if strings.Contains(name, ":") && !records[name] {
				t.Errorf("%s: %s is not recorded by the mixin", where, name)
			}
			used[name] = true
		}
	}
	for record := range records {
		if !used[record] {
			t.Errorf("%s is recorded but no alert or dashboard reads it", record)
		}
	}
}

// TestRecordingRulesReadTheirOwnGroup: a recording rule reads no series
// that another recording group records. Prometheus runs one group's rules
// in order at one evaluation time and orders nothing between groups
// ("rules within a group are run sequentially at a regular interval, with
// the same evaluation time"): read across groups, a series is the other
// group's previous evaluation, or none yet for an owner that has just
// appeared (found by probing: the idle cost of every new pod missing for
// an interval in one of the two phase orders). Alerts may read recorded
// series: a for: clause absorbs an evaluation's lag.
func TestRecordingRulesReadTheirOwnGroup(t *testing.T) {
	m := evaluate(t, "{}")
	recordedIn := map[string]string{}
	for _, g := range m.Rules.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				recordedIn[r.Record] = g.Name
			}
		}
	}
	token := regexp.MustCompile(`(?:^|[^A-Za-z0-9_:])([A-Za-z_][A-Za-z0-9_:]*)`)
	for _, g := range m.Rules.Groups {
		for _, r := range g.Rules {
			for _, tok := range token.FindAllStringSubmatch(r.Expr, -1) {
				if other, ok := recordedIn[tok[1]]; ok && other != g.Name {
					t.Errorf("%s (group %s) reads %s, recorded by group %s", r.Record+r.Alert, g.Name, tok[1], other)
				}
			}
		}
	}
}

// promtoolSuite is what the tests read of a promtool test file.
type promtoolSuite struct {
	Tests []struct {
		InputSeries []struct {
			Series string `yaml:"series"`
		} `yaml:"input_series"`
		Alerts []struct {
			Alertname string `yaml:"alertname"`
			ExpAlerts []any  `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
		Exprs []struct {
			Expr string `yaml:"expr"`
		} `yaml:"promql_expr_test"`
	} `yaml:"tests"`
}

// promtoolSuites reads every file of promrules/tests, by file name.
func promtoolSuites(t *testing.T) map[string]promtoolSuite {
	t.Helper()
	files, err := filepath.Glob("../promrules/tests/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no promtool tests: %v", err)
	}
	suites := map[string]promtoolSuite{}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var suite promtoolSuite
		if err := yaml.Unmarshal(data, &suite); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		suites[file] = suite
	}
	return suites
}

// promrules/tests has a firing and a non-firing case for every alert and
// a test of every recording rule.
func TestPromrulesTestsCoverEveryRule(t *testing.T) {
	m := evaluate(t, "{}")
	firing, quiet, tested := map[string]bool{}, map[string]bool{}, ""
	for _, suite := range promtoolSuites(t) {
		for _, test := range suite.Tests {
			for _, a := range test.Alerts {
				if len(a.ExpAlerts) > 0 {
					firing[a.Alertname] = true
				} else {
					quiet[a.Alertname] = true
				}
			}
			for _, e := range test.Exprs {
				tested += e.Expr + "\n"
			}
		}
	}
	for _, r := range m.allRules() {
		switch {
		case r.Alert != "" && !(firing[r.Alert] && quiet[r.Alert]):
			t.Errorf("%s: needs a firing and a non-firing test (firing %v, non-firing %v)", r.Alert, firing[r.Alert], quiet[r.Alert])
		case r.Record != "" && !regexp.MustCompile(`\b`+regexp.QuoteMeta(r.Record)+`\b`).MatchString(tested):
			t.Errorf("%s: no promql_expr_test", r.Record)
		}
	}
}

// The committed promrules/ and dashboards/ are what the mixin renders.
func TestGeneratedFilesUpToDate(t *testing.T) {
	for render, dir := range map[string]string{"promrules.jsonnet": "../promrules", "dashboards.jsonnet": "../dashboards"} {
		vm := jsonnet.MakeVM()
		data, err := os.ReadFile(render)
		if err != nil {
			t.Fatal(err)
		}
		files, err := vm.EvaluateAnonymousSnippet(render, string(data))
		if err != nil {
			t.Fatalf("%s: %v", render, err)
		}
		var contents map[string]string
		if err := json.Unmarshal([]byte(files), &contents); err != nil {
			t.Fatalf("%s: %v", render, err)
		}
		for name, want := range contents {
			got, err := os.ReadFile(filepath.Join(dir, name))
			// jsonnet -S -m ends every file with a newline.
			if err != nil || string(got) != want+"\n" {
				t.Errorf("%s/%s is out of date: run make promrules dashboards", dir, name)
			}
		}
	}
}

// The README's kube-prometheus snippet compiles and yields the rules and
// dashboards.
func TestKubePrometheusImport(t *testing.T) {
	vm := jsonnet.MakeVM()
	vm.Importer(&jsonnet.FileImporter{JPaths: []string{"testdata/jsonnet-path"}})
	out, err := vm.EvaluateFile("testdata/kube-prometheus-import.jsonnet")
	if err != nil {
		t.Fatal(err)
	}
	var kp struct {
		Dashboards struct {
			Items []struct {
				Metadata struct{ Name, Namespace string }
			}
		} `json:"grafana-dashboardDefinitions"`
		Rule struct {
			Kind string
			Spec struct{ Groups []group }
		} `json:"xpu-exporter-prometheusRule"`
	}
	if err := json.Unmarshal([]byte(out), &kp); err != nil {
		t.Fatal(err)
	}
	if n := len(kp.Dashboards.Items); n != 5 {
		t.Errorf("%d dashboard ConfigMaps, want 5", n)
	}
	alerts, records := 0, 0
	for _, g := range kp.Rule.Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				alerts++
			} else {
				records++
			}
		}
	}
	if kp.Rule.Kind != "PrometheusRule" || alerts != 17 || records == 0 {
		t.Errorf("%s with %d alerts and %d recording rules, want a PrometheusRule with 17 alerts and the recording rules", kp.Rule.Kind, alerts, records)
	}
}

// podLabelAllowList changes what the alerts carry, not only their text:
// with 'team' allowed, a promtool run of the rendered inference alerts
// gives a pod's alert the label_team of the pod's xpu_workload_info (the
// only series the exporter puts it on), and leaves a Slurm job's alert,
// which has no pod, as it was.
func TestPodLabelAllowListReachesAlerts(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed (Debian: apt-get install prometheus)")
	}
	m := evaluate(t, `{ podLabelAllowList: ['team'] }`)
	var alerts []group
	for _, g := range m.Alerts.Groups {
		if g.Name == "xpu-inference" {
			alerts = append(alerts, g)
		}
	}
	dir := t.TempDir()
	out, err := yaml.Marshal(map[string][]group{"groups": alerts})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), out, 0o644); err != nil {
		t.Fatal(err)
	}
	// Both servers keep their KV cache above the 95% threshold; the alert
	// has for: 15m, so it fires at 20m.
	const tests = `rule_files: [rules.yaml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'xpu_inference_kv_cache_usage_ratio{job="xpu-exporter", instance="node-1", engine="vllm", model="llama", namespace="ml", pod="llm-0", container="vllm", workload="llm", workload_kind="Deployment"}'
        values: '0.99x30'
      - series: 'xpu_workload_info{job="xpu-exporter", instance="node-1", namespace="ml", pod="llm-0", container="vllm", workload="llm", workload_kind="Deployment", label_team="search"}'
        values: '1x30'
      - series: 'xpu_inference_kv_cache_usage_ratio{job="xpu-exporter", instance="node-2", engine="sglang", model="qwen", slurm_job_id="7", slurm_user="bob"}'
        values: '0.99x30'
      - series: 'xpu_workload_info{job="xpu-exporter", instance="node-2", slurm_job_id="7", slurm_user="bob"}'
        values: '1x30'
    alert_rule_test:
      - eval_time: 20m
        alertname: XpuInferenceKvCachePressure
        exp_alerts:
          - exp_labels: {severity: warning, job: xpu-exporter, instance: node-1, engine: vllm, model: llama, namespace: ml, pod: llm-0, container: vllm, workload: llm, workload_kind: Deployment, label_team: search}
            exp_annotations: {summary: An inference server is running out of KV cache., description: 'vllm serving llama on node-1 (owner: pod ml/llm-0) has used 99% of its KV cache for 15m; requests get preempted or queued.', runbook_url: 'https://github.com/xpu-exporter/xpu_exporter/blob/main/mixin/runbook.md#xpuinferencekvcachepressure'}
          - exp_labels: {severity: warning, job: xpu-exporter, instance: node-2, engine: sglang, model: qwen, slurm_job_id: "7", slurm_user: bob}
            exp_annotations: {summary: An inference server is running out of KV cache., description: 'sglang serving qwen on node-2 (owner: Slurm job 7 of bob) has used 99% of its KV cache for 15m; requests get preempted or queued.', runbook_url: 'https://github.com/xpu-exporter/xpu_exporter/blob/main/mixin/runbook.md#xpuinferencekvcachepressure'}
`
	if err := os.WriteFile(filepath.Join(dir, "tests.yaml"), []byte(tests), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(promtool, "test", "rules", "tests.yaml")
	cmd.Dir = dir
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool test rules: %v\n%s", err, msg)
	}
}

func anyStrings(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	return out
}

// The promtool fixtures use the label sets the exporter emits: owner
// labels never on xpu_device_info, xpu_device_hourly_cost or the engine's
// xpu_inference_up, and instance is a node name (the chart's relabeling),
// not a pod address.
func TestPromrulesFixturesUseRealLabelSets(t *testing.T) {
	m := evaluate(t, "{}")
	var owners []string
	for _, kind := range []string{"kubernetes", "slurm", "process"} {
		owners = append(owners, anyStrings(m.Config["ownerLabels"].(map[string]any)[kind])...)
	}
	label := regexp.MustCompile(`([a-z_]+)="([^"]*)"`)
	for file, suite := range promtoolSuites(t) {
		for _, test := range suite.Tests {
			for _, in := range test.InputSeries {
				name := in.Series[:strings.IndexAny(in.Series+"{", "{")]
				for _, l := range label.FindAllStringSubmatch(in.Series, -1) {
					if l[1] == "instance" && strings.Contains(l[2], ":") {
						t.Errorf("%s: %s: instance %q is an address; the chart sets the node name", filepath.Base(file), in.Series, l[2])
					}
					if slices.Contains([]string{"xpu_device_info", "xpu_device_hourly_cost", "xpu_partition_share_ratio", "xpu_inference_up"}, name) && slices.Contains(owners, l[1]) {
						t.Errorf("%s: %s carries owner label %s, which the exporter never puts on %s", filepath.Base(file), in.Series, l[1], name)
					}
				}
			}
		}
	}
}

// Series of no device: the exporter's own, owners (xpu_workload_info) and
// inference engines. Every other xpu_* family is a device's and carries
// its vendor.
var notDeviceFamily = regexp.MustCompile(`^xpu_(inference_|workload_info$|scrape_|attribution_|exporter_|nvml_|demo_|hlsmi_|gaudi_processes_)`)

// Recording rules that keep the vendor label: per device and owner, per
// device, and per model.
var vendorRule = regexp.MustCompile(`^(device_owner:|device:xpu_health_score:|device:xpu_(allocated|utilized|owners_unknown)_devices:|engine:xpu_(idle_)?allocated_devices:|model:|model_state:)`)

// A mixed fleet: every dashboard query of device series filters them by
// the vendor variable, and no query of other series does (they have no
// vendor label, and picking a vendor would blank them).
func TestDashboardsFilterByVendor(t *testing.T) {
	m := evaluate(t, "{}")
	selector := regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_:]*)\{([^}]*)\}`)
	filtered := 0
	for file, d := range m.Dashboards {
		for _, p := range d.Panels {
			for _, q := range p.Targets {
				for _, sel := range selector.FindAllStringSubmatch(q.Expr, -1) {
					name, matchers := sel[1], sel[2]
					device := strings.HasPrefix(name, "xpu_") && !notDeviceFamily.MatchString(name) || vendorRule.MatchString(name)
					has := strings.Contains(matchers, `vendor=~"$vendor"`)
					switch {
					case device && !has:
						t.Errorf("%s: panel %q: %s is a device series not filtered by $vendor: %s", file, p.Title, name, q.Expr)
					case !device && strings.Contains(matchers, "$vendor"):
						t.Errorf("%s: panel %q: %s has no vendor label but is filtered by $vendor: %s", file, p.Title, name, q.Expr)
					case device:
						filtered++
					}
				}
			}
		}
	}
	if filtered < 50 {
		t.Errorf("only %d device selectors in the dashboards filter by $vendor", filtered)
	}
}

type answer struct {
	Question string              `json:"question"`
	Query    string              `json:"query"`
	Panels   map[string][]string `json:"panels"`
}

// The answer book (answers.libsonnet) is what README.md's "Questions and
// answers" shows, question by question and query by query, and each answer
// names panels the dashboards have. ../e2e/answers_test.go runs the
// queries against the demo.
func TestAnswerBookInReadme(t *testing.T) {
	vm := jsonnet.MakeVM()
	out, err := vm.EvaluateAnonymousSnippet("answers.jsonnet", `(import 'mixin.libsonnet').answers()`)
	if err != nil {
		t.Fatal(err)
	}
	var answers []answer
	if err := json.Unmarshal([]byte(out), &answers); err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n## Questions and answers\n")
	if !ok {
		t.Fatal(`README.md has no section "## Questions and answers"`)
	}
	if i := strings.Index(section, "\n## "); i >= 0 {
		section = section[:i]
	}
	question := regexp.MustCompile(`(?m)^### [0-9]+\. (.*)$`)
	block := regexp.MustCompile("(?s)```promql\n(.*?)\n```")
	questions := question.FindAllStringSubmatch(section, -1)
	blocks := block.FindAllStringSubmatch(section, -1)
	if len(questions) != len(answers) || len(blocks) != len(answers) {
		t.Fatalf("README.md answers %d questions with %d promql blocks; answers.libsonnet has %d", len(questions), len(blocks), len(answers))
	}
	m := evaluate(t, "{}")
	for i, a := range answers {
		if questions[i][1] != a.Question {
			t.Errorf("README.md question %d is %q, answers.libsonnet says %q", i+1, questions[i][1], a.Question)
		}
		if blocks[i][1] != a.Query {
			t.Errorf("README.md question %d shows\n%s\nanswers.libsonnet says\n%s", i+1, blocks[i][1], a.Query)
		}
		if len(a.Panels) == 0 {
			t.Errorf("question %d names no dashboard panel", i+1)
		}
		for file, titles := range a.Panels {
			for _, title := range titles {
				if !slices.ContainsFunc(m.Dashboards[file].Panels, func(p panel) bool { return p.Title == title }) {
					t.Errorf("question %d: %s has no panel %q", i+1, file, title)
				}
			}
		}
	}
	checkPromQL(t, m, func() map[string]string {
		queries := map[string]string{}
		for i, a := range answers {
			queries[fmt.Sprintf("answer %d", i+1)] = a.Query
		}
		return queries
	}())
}

// util.seconds reads any Prometheus duration a user may configure
// (review21 F5: "2m30s", "500ms" and "0" stopped the mixin's build, whose
// alert timings are compared in seconds), and refuses what is none.
func TestSeconds(t *testing.T) {
	for in, want := range map[string]string{
		"1m": "60", "2m30s": "150", "500ms": "0.5", "0": "0", "1h30m": "5400", "999ms": "0.999", "1d": "86400",
		"5x": "error", "3": "error", "m": "error",
	} {
		vm := jsonnet.MakeVM()
		got, err := vm.EvaluateAnonymousSnippet("seconds", fmt.Sprintf("(import 'lib/util.libsonnet').seconds(%q)", in))
		got = strings.TrimSpace(got)
		if err != nil {
			got = "error"
		}
		if got != want {
			t.Errorf("seconds(%q) = %s (%v), want %s", in, got, err, want)
		}
	}
}
