package e2e

// The monitoring mixin (../mixin) against the real exporter: every metric
// it reads is one the demo serves, and a real Prometheus loading its rules
// and scraping the demo records what the rules promise and fires the XID
// alert with the owner of the device.

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-jsonnet"
)

// evalMixin evaluates ../mixin/mixin.libsonnet, bound to m with the _config
// override config (a jsonnet object literal), and returns output (a jsonnet
// expression over m) as JSON.
func evalMixin(t *testing.T, config, output string) string {
	t.Helper()
	vm := jsonnet.MakeVM()
	vm.Importer(&jsonnet.FileImporter{JPaths: []string{"../mixin"}})
	out, err := vm.EvaluateAnonymousSnippet("e2e-mixin.jsonnet", fmt.Sprintf(`
		local base = import 'mixin.libsonnet';
		local m = base + { _config+:: %s };
		%s`, config, output))
	if err != nil {
		t.Fatalf("evaluating the mixin: %v", err)
	}
	return out
}

// xidScenario writes a copy of the default demo scenario whose only driver
// event is an Xid 31 on GPU 3 (pod search/embeddings-0) every second, instead
// of the first one 45 s after start, and returns its path.
func xidScenario(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("../demo/default.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	i := strings.LastIndex(s, "\nevents:\n")
	if i < 0 {
		t.Fatal("demo/default.yaml has no top-level events: section")
	}
	path := filepath.Join(t.TempDir(), "xid.yaml")
	if err := os.WriteFile(path, []byte(s[:i+1]+"events:\n  - {device: 3, xid: 31, every: 1s}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// demoPrice is the hourly price of a demo GPU in the price table the tests
// pass with --cost.file.
const demoPrice = 4

// costFile writes a price table for the demo's GPU model and returns its
// path.
func costFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "prices.yaml")
	table := fmt.Sprintf("currency: USD\nmodels:\n  NVIDIA H100 80GB HBM3: %d\n", demoPrice)
	if err := os.WriteFile(path, []byte(table), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// A metric name in PromQL: recording-rule names (level:xpu_metric:ops) are
// tokens with colons and are left out.
var promToken = regexp.MustCompile(`[A-Za-z0-9_:]+`)

// mixinMetricNames returns every xpu_* metric the mixin's alerts, recording
// rules and dashboards (panel queries, variables, annotations) read, each
// with one place that reads it.
func mixinMetricNames(t *testing.T) map[string]string {
	t.Helper()
	var m struct {
		Groups []struct {
			Name  string
			Rules []struct{ Alert, Record, Expr string }
		}
		Dashboards map[string]any
	}
	out := evalMixin(t, "{}", `{
		groups: m.prometheusAlerts.groups + m.prometheusRules.groups,
		dashboards: m.grafanaDashboards,
	}`)
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatal(err)
	}
	names := map[string]string{}
	add := func(where, expr string) {
		for _, tok := range promToken.FindAllString(expr, -1) {
			if strings.HasPrefix(tok, "xpu_") && !strings.Contains(tok, ":") && names[tok] == "" {
				names[tok] = where
			}
		}
	}
	for _, g := range m.Groups {
		for _, r := range g.Rules {
			add(fmt.Sprintf("rule group %s, %s%s", g.Name, r.Alert, r.Record), r.Expr)
		}
	}
	// Every "expr" and "query" string anywhere in a dashboard: panel
	// targets (also inside collapsed rows), template variables, annotations.
	var walk func(where string, v any)
	walk = func(where string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if s, ok := x.(string); ok && (k == "expr" || k == "query") {
					add(where, s)
				} else {
					walk(where, x)
				}
			}
		case []any:
			for _, x := range v {
				walk(where, x)
			}
		}
	}
	for file, d := range m.Dashboards {
		walk("dashboard "+file, d)
	}
	if len(names) < 20 {
		t.Fatalf("found only %d xpu_* names in the mixin: %v", len(names), names)
	}
	return names
}

// servedFamilies returns the metric families of an exposition that have at
// least one sample, with their types. A histogram's or summary's samples
// (_bucket, _sum, _count) count for their family.
func servedFamilies(exposition string) map[string]string {
	types := map[string]string{}
	for _, line := range strings.Split(exposition, "\n") {
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			types[f[2]] = f[3]
		}
	}
	served := map[string]string{}
	for _, line := range strings.Split(exposition, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		name := line[:strings.IndexAny(line+" ", "{ ")]
		if typ, ok := types[name]; ok {
			served[name] = typ
			continue
		}
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			family := strings.TrimSuffix(name, suffix)
			if typ := types[family]; family != name && (typ == "histogram" || typ == "summary") {
				served[family] = typ
			}
		}
	}
	return served
}

// Names the mixin reads that the demo does not serve, with the reason. Each
// entry must still be read by the mixin and still be missing from the demo,
// so the list cannot go stale. (xpu_device_hourly_cost is not here: the
// tests pass a price table with --cost.file.)
var notInDemo = map[string]string{}

// Every xpu_* metric the mixin's rules and dashboards read is served by the
// demo exporter (process series on, an Xid every second on GPU 3).
func TestMixinMetricsExistInDemo(t *testing.T) {
	used := mixinMetricNames(t)
	e := start(t, "--demo", "--demo.scenario="+xidScenario(t), "--collector.process", "--cost.file="+costFile(t))
	client := &http.Client{Timeout: 10 * time.Second}

	// Profiling (GPM) series appear from the second scrape and the first Xid
	// a second after start: scrape until every name is there, at most 6
	// times 1.1 s apart.
	served := map[string]string{}
	// isServed: the name is a served family, or a _bucket, _sum or _count
	// series of a served histogram or summary.
	isServed := func(name string) bool {
		if _, ok := served[name]; ok {
			return true
		}
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if family, ok := strings.CutSuffix(name, suffix); ok && (served[family] == "histogram" || served[family] == "summary") {
				return true
			}
		}
		return false
	}
	missing := func() []string {
		var names []string
		for name := range used {
			if !isServed(name) && notInDemo[name] == "" {
				names = append(names, name)
			}
		}
		slices.Sort(names)
		return names
	}
	for i := 0; i < 6; i++ {
		if i > 0 {
			time.Sleep(1100 * time.Millisecond)
		}
		code, body := get(t, client, "http://"+e.addr+"/metrics")
		if code != http.StatusOK {
			t.Fatalf("scrape %d: status %d:\n%s", i+1, code, body)
		}
		for name, typ := range servedFamilies(body) {
			served[name] = typ
		}
		if i > 0 && len(missing()) == 0 {
			break
		}
	}
	for _, name := range missing() {
		t.Errorf("the mixin reads %s (%s), but the demo exporter does not serve it", name, used[name])
	}
	for name, why := range notInDemo {
		if _, ok := used[name]; !ok {
			t.Errorf("exception for %s (%s): the mixin no longer reads it, remove the entry", name, why)
		}
		if isServed(name) {
			t.Errorf("exception for %s (%s): the demo serves it now, remove the entry", name, why)
		}
	}
	t.Logf("%d xpu_* names read by the mixin, %d families served by the demo", len(used), len(served))
}

// lockedBuffer collects a process's output.
type lockedBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) tail(lines int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	all := strings.Split(strings.TrimRight(b.buf.String(), "\n"), "\n")
	return strings.Join(all[max(0, len(all)-lines):], "\n")
}

// prometheus is a running Prometheus server.
type prometheus struct {
	url  string
	logs *lockedBuffer
}

// startPrometheus runs /usr/bin/prometheus (or the one on PATH) with
// config, in a temporary storage directory on a free loopback port, and
// waits until it is ready. It is stopped when the test ends.
func startPrometheus(t *testing.T, config string) *prometheus {
	t.Helper()
	bin := "/usr/bin/prometheus"
	if _, err := os.Stat(bin); err != nil {
		if bin, err = exec.LookPath("prometheus"); err != nil {
			t.Fatal("prometheus not found: install Debian's prometheus package (make test-deps does)")
		}
	}
	dir := t.TempDir()
	configFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(configFile, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freePort(t)
	p := &prometheus{url: "http://" + addr, logs: &lockedBuffer{}}
	cmd := exec.Command(bin,
		"--config.file="+configFile,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
		"--log.level=info",
	)
	cmd.Stdout, cmd.Stderr = p.logs, p.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
			t.Errorf("prometheus did not stop on SIGINT")
		}
		if t.Failed() {
			t.Logf("prometheus log (last 40 lines):\n%s", p.logs.tail(40))
		}
	})
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case <-exited:
			t.Fatalf("prometheus exited early:\n%s", p.logs.tail(40))
		default:
		}
		if resp, err := client.Get(p.url + "/-/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready on %s after 20s", addr)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// api GETs a Prometheus API path and decodes its data into v.
func (p *prometheus) api(path string, v any) error {
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(p.url + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var r struct {
		Status string
		Error  string
		Data   json.RawMessage
	}
	if err := json.Unmarshal(body, &r); err != nil || r.Status != "success" {
		return fmt.Errorf("GET %s: %d %s %s", path, resp.StatusCode, r.Error, body)
	}
	return json.Unmarshal(r.Data, v)
}

type promSample struct {
	Metric map[string]string
	Value  float64
}

// query runs an instant query.
func (p *prometheus) query(q string) ([]promSample, error) {
	var data struct {
		ResultType string
		Result     []struct {
			Metric map[string]string
			Value  [2]any
		}
	}
	if err := p.api("/api/v1/query?query="+url.QueryEscape(q), &data); err != nil {
		return nil, err
	}
	var samples []promSample
	for _, r := range data.Result {
		var v float64
		if s, ok := r.Value[1].(string); ok {
			fmt.Sscan(s, &v)
		}
		samples = append(samples, promSample{r.Metric, v})
	}
	return samples, nil
}

// until polls check every 250 ms until it returns "" (done) or the deadline
// passes, then fails the test with what check last reported.
func until(t *testing.T, deadline time.Time, what string, check func() string) {
	t.Helper()
	for {
		last := check()
		if last == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s", what, last)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// A real Prometheus scrapes the demo exporter with the mixin's rules (with
// short for: durations and windows) and records and alerts as the demo
// scenario says it must.
func TestPrometheusRulesAndAlerts(t *testing.T) {
	// Every `…For` knob to 0s, the usage groups (1m by default) every
	// second, and the counter windows short.
	const config = `{ [k]: '0s' for k in std.objectFields(base._config) if std.endsWith(k, 'For') } + {
		usageRulesInterval: '1s',
		xidWindow: '1m',
		eccUncorrectableWindow: '1m',
		healthWindow: '5m',
	}`
	var rules struct {
		Selector string `json:"selector"`
		File     json.RawMessage
	}
	out := evalMixin(t, config, `{
		selector: m._config.xpuSelector,
		file: { groups: m.prometheusRules.groups + m.prometheusAlerts.groups },
	}`)
	if err := json.Unmarshal([]byte(out), &rules); err != nil {
		t.Fatal(err)
	}
	job := regexp.MustCompile(`^job="([^"]+)"$`).FindStringSubmatch(rules.Selector)
	if job == nil {
		t.Fatalf("xpuSelector %q is not a job matcher this test can scrape under", rules.Selector)
	}
	// A rule file is YAML, and JSON is YAML.
	ruleFile := filepath.Join(t.TempDir(), "xpu-mixin.rules.json")
	if err := os.WriteFile(ruleFile, rules.File, 0o644); err != nil {
		t.Fatal(err)
	}

	e := start(t, "--demo", "--demo.scenario="+xidScenario(t), "--cost.file="+costFile(t))
	p := startPrometheus(t, fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: %q
    static_configs:
      - targets: [%q]
rule_files:
  - %q
`, job[1], e.addr, ruleFile))
	deadline := time.Now().Add(45 * time.Second)

	until(t, deadline, "target", func() string {
		var data struct {
			ActiveTargets []struct {
				Labels    map[string]string
				Health    string
				LastError string
			}
		}
		if err := p.api("/api/v1/targets", &data); err != nil {
			return err.Error()
		}
		for _, tg := range data.ActiveTargets {
			if tg.Labels["job"] == job[1] && tg.Health == "up" {
				return ""
			}
		}
		return fmt.Sprintf("no %s target up: %+v", job[1], data.ActiveTargets)
	})

	// Recording rules, with values the default scenario fixes:
	// - notebooks holds two of GPU 2's four time-slice replicas: 0.5 GPU;
	// - the node has eight physical H100s (GPU 4's MIG instances are not
	//   counted again);
	// - GPU 6 (ollama.service) is thermally throttled (penalty 0.3) and its
	//   busy PCIe link runs at gen 4 of 5 (0.3): health score 0.4;
	// - chargeback: notebooks pay their 0.5 GPU, the node its 8 GPUs, at
	//   the price of the table passed with --cost.file.
	type recorded struct {
		query string
		want  float64
	}
	checks := []recorded{
		{`namespace:xpu_allocated_devices:sum{namespace="notebooks"}`, 0.5},
		{`model:xpu_devices:count{model="NVIDIA H100 80GB HBM3"}`, 8},
		{`device:xpu_health:score{gpu="6", unit="ollama.service"}`, 0.4},
		{`namespace:xpu_cost_per_hour:sum{namespace="notebooks", currency="USD"}`, 0.5 * demoPrice},
		{`cluster:xpu_cost_per_hour:sum{currency="USD"}`, 8 * demoPrice},
	}
	// GPU 3's Xids take the xid weight (0.3) off its score.
	checks = append(checks, recorded{`device:xpu_health:score{gpu="3", pod="embeddings-0"}`, 0.7})
	for _, c := range checks {
		until(t, deadline, c.query, func() string {
			samples, err := p.query(c.query)
			switch {
			case err != nil:
				return err.Error()
			case len(samples) != 1:
				return fmt.Sprintf("%d series, want 1: %v", len(samples), samples)
			case math.Abs(samples[0].Value-c.want) > 1e-9:
				return fmt.Sprintf("%v, want %v", samples[0].Value, c.want)
			}
			return ""
		})
	}

	alertFiring := func(name string, labels map[string]string) func() string {
		return func() string {
			var data struct {
				Alerts []struct {
					Labels map[string]string
					State  string
				}
			}
			if err := p.api("/api/v1/alerts", &data); err != nil {
				return err.Error()
			}
			var seen []string
		alerts:
			for _, a := range data.Alerts {
				if a.Labels["alertname"] != name {
					continue
				}
				seen = append(seen, fmt.Sprintf("%s %v", a.State, a.Labels))
				for k, v := range labels {
					if a.Labels[k] != v {
						continue alerts
					}
				}
				if a.State == "firing" {
					return ""
				}
			}
			return fmt.Sprintf("no firing %s alert with %v; saw %v", name, labels, seen)
		}
	}
	// The Xid on GPU 3 names the pod that owned the device.
	until(t, deadline, "XpuXidErrors", alertFiring("XpuXidErrors", map[string]string{
		"namespace": "search", "pod": "embeddings-0", "gpu": "3", "xid": "31", "severity": "warning",
	}))
	// GPU 6's thermal throttling names its systemd unit.
	until(t, deadline, "XpuClocksThrottled", alertFiring("XpuClocksThrottled", map[string]string{
		"unit": "ollama.service", "gpu": "6", "reason": "hw_thermal_slowdown",
	}))

	// Every rule evaluated on the demo's data without an error (a join
	// that is many-to-many on real series, say): wait for an evaluation of
	// every group that started after the checks above.
	checked := time.Now()
	until(t, deadline, "rule health", func() string {
		var data struct {
			Groups []struct {
				Name           string
				LastEvaluation time.Time
				Rules          []struct {
					Name, Health, LastError string
				}
			}
		}
		if err := p.api("/api/v1/rules", &data); err != nil {
			return err.Error()
		}
		var problems []string
		for _, g := range data.Groups {
			if !g.LastEvaluation.After(checked) {
				problems = append(problems, fmt.Sprintf("group %s not evaluated since %s", g.Name, checked.Format(time.RFC3339Nano)))
				continue
			}
			for _, r := range g.Rules {
				if r.Health != "ok" {
					problems = append(problems, fmt.Sprintf("group %s rule %s: health %s %s", g.Name, r.Name, r.Health, r.LastError))
				}
			}
		}
		if len(data.Groups) == 0 {
			problems = append(problems, "no rule groups loaded")
		}
		return strings.Join(problems, "; ")
	})
}
