package e2e

// The monitoring mixin (../mixin) against the real exporter: every metric
// it reads is one the demo serves, and a real Prometheus loading its rules
// and scraping the demo records what the rules promise, fires the XID
// alert with the owner of the device, and keeps working through an owner
// change and a lost GPU.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-jsonnet"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/xpu-exporter/xpu_exporter/internal/syncbuf"
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
// event is a hardware Xid 94 (contained ECC error) on GPU 3 (pod
// search/embeddings-0) every second, instead of the first one 45 s after
// start, and returns its path.
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
	if err := os.WriteFile(path, []byte(s[:i+1]+"events:\n  - {device: 3, xid: 94, every: 1s}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// amdRASScenario writes fixtures/scenarios/amd.yaml with an uncorrected
// RAS error a second on the GPU of pod ml/train, so that the AMD demo
// serves its RAS event series, with an owner, from its second read on.
func amdRASScenario(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("../fixtures/scenarios/amd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	gpu := []byte("- pci_bus_id: \"0000:0c:00.0\"\n")
	if !bytes.Contains(data, gpu) {
		t.Fatal("fixtures/scenarios/amd.yaml has no GPU 0000:0c:00.0")
	}
	path := filepath.Join(t.TempDir(), "amd.yaml")
	data = bytes.Replace(data, gpu, append(gpu, "    metrics: {ecc_uncorrected: {start: 0, rate: 1}}\n"...), 1)
	if err := os.WriteFile(path, data, 0o644); err != nil {
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
// demo exporter (process series on, an Xid every second on GPU 3) or, for
// AMD's own families, by the AMD demo (an uncorrected RAS error a second),
// or for Gaudi's and unpriced devices by the Gaudi demo.
func TestMixinMetricsExistInDemo(t *testing.T) {
	used := mixinMetricNames(t)
	exporters := []*exporter{
		start(t, "--demo", "--demo.scenario="+xidScenario(t), "--collector.process", "--cost.file="+costFile(t)),
		start(t, "--demo", "--demo.scenario="+amdRASScenario(t), "--collector.process"),
		// Gaudi's own families (its HBM ECC), and devices the price
		// table lacks (xpu_cost_unpriced_devices: it prices H100s only).
		start(t, "--demo", "--demo.scenario=../fixtures/scenarios/gaudi.yaml", "--cost.file="+costFile(t)),
	}
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
		for _, e := range exporters {
			code, body := get(t, client, "http://"+e.addr+"/metrics")
			if code != http.StatusOK {
				t.Fatalf("scrape %d: status %d:\n%s", i+1, code, body)
			}
			for name, typ := range servedFamilies(body) {
				served[name] = typ
			}
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

// prometheus is a running Prometheus server.
type prometheus struct {
	url  string
	logs *syncbuf.Buffer
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
	p := &prometheus{url: "http://" + addr, logs: &syncbuf.Buffer{}}
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
			t.Logf("prometheus log (last 40 lines):\n%s", p.logs.Tail(40))
		}
	})
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case <-exited:
			t.Fatalf("prometheus exited early:\n%s", p.logs.Tail(40))
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

// testRulesConfig is the mixin's _config for the tests with a real
// Prometheus: every `…For` knob to 0s, the usage groups (1m by default)
// every second, and the counter windows short.
const testRulesConfig = `{ [k]: '0s' for k in std.objectFields(base._config) if std.endsWith(k, 'For') } + {
	usageRulesInterval: '1s',
	xidWindow: '1m',
	eccUncorrectableWindow: '1m',
	healthWindow: '5m',
	throttleWindow: '1m',
}`

// mixinRules writes the mixin's recording and alerting rules with config
// to a rule file and returns it with the job name its selector picks.
func mixinRules(t *testing.T, config string) (job, ruleFile string) {
	t.Helper()
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
	m := regexp.MustCompile(`^job="([^"]+)"$`).FindStringSubmatch(rules.Selector)
	if m == nil {
		t.Fatalf("xpuSelector %q is not a job matcher this test can scrape under", rules.Selector)
	}
	// A rule file is YAML, and JSON is YAML.
	ruleFile = filepath.Join(t.TempDir(), "xpu-mixin.rules.json")
	if err := os.WriteFile(ruleFile, rules.File, 0o644); err != nil {
		t.Fatal(err)
	}
	return m[1], ruleFile
}

// scrapeConfig is a Prometheus configuration scraping target as job every
// second, with ruleFile loaded.
func scrapeConfig(job, target, ruleFile string) string {
	return fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: %q
    static_configs:
      - targets: [%q]
rule_files:
  - %q
`, job, target, ruleFile)
}

// targetUp reports until job's target is up.
func (p *prometheus) targetUp(job string) func() string {
	return func() string {
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
			if tg.Labels["job"] == job && tg.Health == "up" {
				return ""
			}
		}
		return fmt.Sprintf("no %s target up: %+v", job, data.ActiveTargets)
	}
}

// value reports until query returns one series of value want.
func (p *prometheus) value(query string, want float64) func() string {
	return func() string {
		samples, err := p.query(query)
		switch {
		case err != nil:
			return err.Error()
		case len(samples) != 1:
			return fmt.Sprintf("%d series, want 1: %v", len(samples), samples)
		case math.Abs(samples[0].Value-want) > 1e-9:
			return fmt.Sprintf("%v, want %v", samples[0].Value, want)
		}
		return ""
	}
}

// alertFiring reports until an alert name with labels fires.
func (p *prometheus) alertFiring(name string, labels map[string]string) func() string {
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

// rulesHealthy reports until every rule group has been evaluated after
// since, every rule's last evaluation succeeded, and Prometheus has counted
// no failed rule evaluation at all (prometheus_rule_evaluation_failures_total
// on its own /metrics): a join that is many-to-many on real series fails
// the rule, and the rule then records nothing.
func (p *prometheus) rulesHealthy(since time.Time) func() string {
	return func() string {
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
			if !g.LastEvaluation.After(since) {
				problems = append(problems, fmt.Sprintf("group %s not evaluated since %s", g.Name, since.Format(time.RFC3339Nano)))
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
		failures, err := p.ruleEvaluationFailures()
		if err != nil {
			problems = append(problems, err.Error())
		} else if failures != 0 {
			problems = append(problems, fmt.Sprintf("prometheus_rule_evaluation_failures_total adds up to %g", failures))
		}
		return strings.Join(problems, "; ")
	}
}

// ruleEvaluationFailures sums prometheus_rule_evaluation_failures_total
// over the rule groups, from Prometheus's own /metrics.
func (p *prometheus) ruleEvaluationFailures() (float64, error) {
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(p.url + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return 0, err
	}
	var sum float64
	seen := false
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, "prometheus_rule_evaluation_failures_total{") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("prometheus /metrics: %q: %w", line, err)
		}
		sum += v
		seen = true
	}
	if !seen {
		return 0, errors.New("prometheus /metrics has no prometheus_rule_evaluation_failures_total")
	}
	return sum, nil
}

// A real Prometheus scrapes the demo exporter with the mixin's rules (with
// short for: durations and windows) and records and alerts as the demo
// scenario says it must.
func TestPrometheusRulesAndAlerts(t *testing.T) {
	job, ruleFile := mixinRules(t, testRulesConfig)
	e := start(t, "--demo", "--demo.scenario="+xidScenario(t), "--cost.file="+costFile(t))
	p := startPrometheus(t, scrapeConfig(job, e.addr, ruleFile))
	deadline := time.Now().Add(45 * time.Second)
	until(t, deadline, "target", p.targetUp(job))

	// Recording rules, with values the default scenario fixes:
	// - notebooks holds two of GPU 2's four time-slice replicas: 0.5 GPU;
	// - the node has eight physical H100s (GPU 4's MIG instances are not
	//   counted again);
	// - GPU 6 (ollama.service) is thermally throttled (penalty 0.3) and its
	//   busy PCIe link runs at gen 4 of 5 (0.3): health score 0.4;
	// - chargeback: notebooks pay their 0.5 GPU, the node its 8 GPUs, at
	//   the price of the table passed with --cost.file;
	// - GPU 3's hardware Xids take the xid weight (0.3) off its score.
	checks := []struct {
		query string
		want  float64
	}{
		{`namespace:xpu_allocated_devices:sum{namespace="notebooks"}`, 0.5},
		{`model:xpu_devices:count{model="NVIDIA H100 80GB HBM3"}`, 8},
		{`device:xpu_health_score:clamp_min{gpu="6", unit="ollama.service"}`, 0.4},
		{`namespace:xpu_cost_per_hour:sum{namespace="notebooks", currency="USD"}`, 0.5 * demoPrice},
		{`cluster:xpu_cost_per_hour:sum{currency="USD"}`, 8 * demoPrice},
		{`device:xpu_health_score:clamp_min{gpu="3", pod="embeddings-0"}`, 0.7},
	}
	for _, c := range checks {
		until(t, deadline, c.query, p.value(c.query, c.want))
	}
	// A MIG instance's share of its GPU, from the instance's split and its
	// 3 of the H100's 7 slices: the ray pod is the instance's only owner,
	// so its split is the instance's utilization.
	until(t, deadline, "MIG utilized share", func() string {
		samples, err := p.query(`device_owner:xpu_utilized_devices:ratio{pod="raycluster-llm-gpu-group-worker-q8n4d"} / on (uuid) xpu_utilization_ratio{mig_profile="3g.40gb"}`)
		if err != nil {
			return err.Error()
		}
		if len(samples) != 1 || math.Abs(samples[0].Value-3.0/7) > 1e-9 {
			return fmt.Sprintf("%v, want one series of 3/7", samples)
		}
		return ""
	})

	// The hardware Xid on GPU 3 names the pod that owned the device.
	until(t, deadline, "XpuXidErrors", p.alertFiring("XpuXidErrors", map[string]string{
		"namespace": "search", "pod": "embeddings-0", "gpu": "3", "xid": "94", "severity": "warning",
	}))
	// GPU 6's thermal throttling names its systemd unit, once for the
	// device.
	until(t, deadline, "XpuClocksThrottled", p.alertFiring("XpuClocksThrottled", map[string]string{
		"unit": "ollama.service", "gpu": "6",
	}))

	// Every rule evaluated on the demo's data without an error: wait for an
	// evaluation of every group that started after the checks above.
	until(t, deadline, "rule health", p.rulesHealthy(time.Now()))
}

// A real Prometheus watches a node through an owner change and a lost GPU:
// the exporter is stopped and started again on the same address (same
// target, as after a rollout) with the node's next state
// (fixtures/scenarios/owner-change-*.yaml). GPU 0 goes from pod trainer-a
// to trainer-c; GPU 1 falls off the bus.
func TestPrometheusOwnerChangeAndLostGPU(t *testing.T) {
	job, ruleFile := mixinRules(t, testRulesConfig)
	costs := costFile(t)
	before := start(t, "--demo", "--demo.scenario=../fixtures/scenarios/owner-change-before.yaml", "--cost.file="+costs)
	p := startPrometheus(t, scrapeConfig(job, before.addr, ruleFile))
	deadline := time.Now().Add(60 * time.Second)
	until(t, deadline, "target", p.targetUp(job))
	// trainer-a's share of GPU 0's energy, and its counter has a rate: the
	// rule alone would not tell, since a device whose counter has one
	// sample yet takes its mean power instead.
	until(t, deadline, "trainer-a's energy", p.value(`count(device_owner:xpu_energy_kwh_per_hour:mul{pod="trainer-a"})`, 1))
	until(t, deadline, "trainer-a's energy counter", p.value(`count(rate(xpu_energy_joules_total{gpu="0", pod="trainer-a"}[5m]))`, 1))

	stopExporter(t, before)
	startAt(t, before.addr, "--demo", "--demo.scenario=../fixtures/scenarios/owner-change-after.yaml", "--cost.file="+costs)

	// GPU 0's energy counter now has two series with a rate in the 5m
	// window, trainer-a's and trainer-c's: the case a join on the counter
	// as it is cannot take.
	until(t, deadline, "two energy series of GPU 0", p.value(`count(rate(xpu_energy_joules_total{gpu="0"}[5m]))`, 2))
	// The new owner pays for the GPU and its energy; the namespace total
	// goes on.
	until(t, deadline, "trainer-c's energy", p.value(`count(device_owner:xpu_energy_kwh_per_hour:mul{pod="trainer-c"})`, 1))
	until(t, deadline, "trainer-c's cost", p.value(`device_owner:xpu_cost_per_hour:mul{pod="trainer-c", currency="USD"}`, demoPrice))
	until(t, deadline, "ml's energy", p.value(`count(namespace:xpu_energy_kwh_per_hour:sum{namespace="ml"})`, 1))
	// GPU 1 is lost: the critical alert names it.
	until(t, deadline, "XpuDeviceLost", p.alertFiring("XpuDeviceLost", map[string]string{
		"gpu": "1", "severity": "critical",
	}))
	// No rule failed at any time, before, during or after the change.
	until(t, deadline, "rule health", p.rulesHealthy(time.Now()))
}

// stopExporter stops e and waits until its address is free again.
func stopExporter(t *testing.T, e *exporter) {
	t.Helper()
	if err := e.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		c, err := net.Dial("tcp", e.addr)
		if err != nil {
			return
		}
		c.Close()
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("exporter on %s still listening 10s after SIGINT", e.addr)
}

// scaledObject is the part of KEDA's ScaledObject (keda.sh/v1alpha1) the
// example uses; unknown fields are refused, so a misspelt key fails.
type scaledObject struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	Spec struct {
		ScaleTargetRef struct {
			Name string `json:"name"`
		} `json:"scaleTargetRef"`
		MinReplicaCount int `json:"minReplicaCount"`
		MaxReplicaCount int `json:"maxReplicaCount"`
		Triggers        []struct {
			Type       string `json:"type"`
			MetricType string `json:"metricType"`
			Metadata   struct {
				ServerAddress string `json:"serverAddress"`
				Query         string `json:"query"`
				Threshold     string `json:"threshold"`
			} `json:"metadata"`
		} `json:"triggers"`
	} `json:"spec"`
}

// adapterValues is the part of the prometheus-adapter chart's values the
// example sets.
type adapterValues struct {
	Prometheus struct {
		URL  string `json:"url"`
		Port int    `json:"port"`
	} `json:"prometheus"`
	Rules struct {
		Default bool `json:"default"`
		Custom  []struct {
			SeriesQuery string `json:"seriesQuery"`
			Resources   struct {
				Overrides map[string]struct {
					Resource string `json:"resource"`
				} `json:"overrides"`
			} `json:"resources"`
			Name struct {
				As string `json:"as"`
			} `json:"name"`
			MetricsQuery string `json:"metricsQuery"`
		} `json:"custom"`
	} `json:"rules"`
}

// The scaling examples in ../examples parse, name the demo's inference
// Deployment, and every query in them returns a value from a Prometheus
// scraping the demo: the KEDA triggers one number each, the adapter's
// rules (with its templates filled in as the adapter does for one pod) one
// number per pod.
func TestScalingExamples(t *testing.T) {
	read := func(path string, v any) {
		t.Helper()
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := sigsyaml.UnmarshalStrict(data, v); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	var keda scaledObject
	read("../examples/keda/scaledobject.yaml", &keda)
	var adapter adapterValues
	read("../examples/hpa/prometheus-adapter-values.yaml", &adapter)
	var hpa autoscalingv2.HorizontalPodAutoscaler
	read("../examples/hpa/hpa.yaml", &hpa)

	if keda.APIVersion != "keda.sh/v1alpha1" || keda.Kind != "ScaledObject" || keda.Spec.ScaleTargetRef.Name != "llm-serve" ||
		keda.Metadata.Namespace != "inference" || len(keda.Spec.Triggers) != 2 {
		t.Fatalf("ScaledObject %+v: want two triggers for inference/llm-serve", keda)
	}
	if hpa.APIVersion != "autoscaling/v2" || hpa.Kind != "HorizontalPodAutoscaler" || hpa.Spec.ScaleTargetRef.Name != "llm-serve" ||
		hpa.Namespace != "inference" || len(hpa.Spec.Metrics) != 2 {
		t.Fatalf("HPA %+v: want two metrics for inference/llm-serve", hpa)
	}
	served := map[string]bool{}
	for _, r := range adapter.Rules.Custom {
		served[r.Name.As] = true
		if r.Resources.Overrides["namespace"].Resource != "namespace" || r.Resources.Overrides["pod"].Resource != "pod" {
			t.Errorf("adapter rule %s does not map namespace and pod to their resources", r.Name.As)
		}
	}
	for _, m := range hpa.Spec.Metrics {
		if m.Pods == nil || !served[m.Pods.Metric.Name] {
			t.Errorf("HPA metric %+v is not a pod metric the adapter rules serve (%v)", m, served)
		}
	}

	job, ruleFile := mixinRules(t, testRulesConfig)
	e := start(t, "--demo")
	p := startPrometheus(t, scrapeConfig(job, e.addr, ruleFile))
	deadline := time.Now().Add(45 * time.Second)
	until(t, deadline, "target", p.targetUp(job))

	number := func(query string, series int) func() string {
		return func() string {
			samples, err := p.query(query)
			if err != nil {
				return err.Error()
			}
			if len(samples) != series {
				return fmt.Sprintf("%s: %d series, want %d: %v", query, len(samples), series, samples)
			}
			for _, s := range samples {
				if math.IsNaN(s.Value) || math.IsInf(s.Value, 0) || s.Value < 0 {
					return fmt.Sprintf("%s: %v", query, s)
				}
			}
			return ""
		}
	}
	for _, tr := range keda.Spec.Triggers {
		if tr.Type != "prometheus" || tr.Metadata.Threshold == "" {
			t.Errorf("trigger %+v", tr)
		}
		until(t, deadline, "KEDA trigger", number(tr.Metadata.Query, 1))
	}
	// The demo's llm-serve pod holds GPUs 0 and 1 alone: its GPUs'
	// utilization is the mean of theirs, whatever the moving values are.
	until(t, deadline, "GPU utilization of llm-serve", func() string {
		q := fmt.Sprintf(`(%s) - avg(xpu_utilization_ratio{gpu=~"0|1"})`, keda.Spec.Triggers[1].Metadata.Query)
		samples, err := p.query(q)
		if err != nil || len(samples) != 1 || math.Abs(samples[0].Value) > 1e-9 {
			return fmt.Sprintf("%s: %v %v, want 0", q, samples, err)
		}
		return ""
	})
	for _, r := range adapter.Rules.Custom {
		series := strings.TrimSpace(r.SeriesQuery[:strings.Index(r.SeriesQuery, "{")])
		q := strings.NewReplacer(
			"<<.Series>>", series,
			"<<.LabelMatchers>>", `namespace="inference",pod="llm-serve-7d9f8b6c5d-x2k4q"`,
			"<<.GroupBy>>", "pod",
		).Replace(r.MetricsQuery)
		until(t, deadline, "adapter rule "+r.Name.As, number(q, 1))
		until(t, deadline, "adapter series "+r.Name.As, number(fmt.Sprintf("count(%s)", r.SeriesQuery), 1))
	}
}

// The promtool fixtures of the mixin (../promrules/tests) use label sets the
// exporter emits: every label on an xpu_* input series, but the target
// labels Prometheus adds, is one the demo exporter serves on that family
// (with its Kubernetes, Slurm and systemd owners, an Xid, engines and
// prices), and owner labels appear only on families that carry owners.
func TestPromrulesFixturesMatchDemoLabels(t *testing.T) {
	exporters := []*exporter{
		start(t, "--demo", "--demo.scenario="+xidScenario(t), "--collector.process", "--cost.file="+costFile(t)),
		start(t, "--demo", "--demo.scenario="+amdRASScenario(t), "--collector.process"),
		// Gaudi's own families (its HBM ECC), and devices the price
		// table lacks (xpu_cost_unpriced_devices: it prices H100s only).
		start(t, "--demo", "--demo.scenario=../fixtures/scenarios/gaudi.yaml", "--cost.file="+costFile(t)),
	}
	client := &http.Client{Timeout: 10 * time.Second}
	served := map[string]map[string]bool{}
	label := regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="`)
	// GPM series come from the second scrape, the first Xid a second in,
	// the first RAS event from the second read of the counts.
	for i := 0; i < 3; i++ {
		time.Sleep(1100 * time.Millisecond)
		for _, e := range exporters {
			code, body := get(t, client, "http://"+e.addr+"/metrics")
			if code != http.StatusOK {
				t.Fatalf("scrape: status %d", code)
			}
			for _, line := range strings.Split(body, "\n") {
				if !strings.HasPrefix(line, "xpu_") {
					continue
				}
				name := line[:strings.IndexAny(line+" ", "{ ")]
				if served[name] == nil {
					served[name] = map[string]bool{}
				}
				for _, m := range label.FindAllStringSubmatch(line, -1) {
					served[name][m[1]] = true
				}
			}
		}
	}
	// exporter: the vendor DaemonSet, which the chart's ServiceMonitor sets.
	target := map[string]bool{"job": true, "instance": true, "node": true, "cluster": true, "exporter": true}
	// A family that carries one kind of owner carries any kind: which one
	// depends on who owns the device, and the demo's Xid is on a pod's GPU.
	owner := map[string]bool{}
	for _, l := range []string{"namespace", "pod", "container", "workload", "workload_kind",
		"slurm_job_id", "slurm_user", "slurm_account", "slurm_partition", "slurm_qos", "unit", "user", "command"} {
		owner[l] = true
	}
	for _, labels := range served {
		for l := range labels {
			if owner[l] {
				for o := range owner {
					labels[o] = true
				}
				break
			}
		}
	}
	files, err := filepath.Glob("../promrules/tests/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no promtool tests: %v", err)
	}
	series := regexp.MustCompile(`series: '(xpu_[a-z0-9_]+)\{([^}]*)\}'`)
	checked := 0
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range series.FindAllStringSubmatch(string(data), -1) {
			name, labels := m[1], served[m[1]]
			if labels == nil {
				t.Errorf("%s: %s is not a family the demo serves", filepath.Base(file), name)
				continue
			}
			for _, l := range label.FindAllStringSubmatch(m[2], -1) {
				if !target[l[1]] && !labels[l[1]] {
					t.Errorf("%s: %s{%s}: the exporter never puts %s on %s", filepath.Base(file), name, m[2], l[1], name)
				}
			}
			checked++
		}
	}
	t.Logf("%d fixture series checked against %d families served by the demo", checked, len(served))
}

// An engine in a pod holding an H100 and two MI300X, on a node where the
// chart runs one exporter per vendor (fixtures/scenarios/mixed-engine.yaml):
// Prometheus scrapes both as the chart's ServiceMonitor does (one
// instance, the node; exporter names the DaemonSet's vendor), and the
// engine's recording rules count all three GPUs at their own prices
// (probe18-multigpu D1: the engine cost what the H100 alone does).
func TestPrometheusMixedVendorEngineAcrossExporters(t *testing.T) {
	job, ruleFile := mixinRules(t, testRulesConfig)
	prices := filepath.Join(t.TempDir(), "prices.yaml")
	if err := os.WriteFile(prices, []byte("currency: USD\nmodels:\n  NVIDIA H100 80GB HBM3: 4\n  AMD Instinct MI300X OAM: 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	both := []string{"--demo", "--demo.scenario=../fixtures/scenarios/mixed-engine.yaml", "--cost.file=" + prices,
		"--kubernetes.exporter-vendor=nvidia", "--kubernetes.exporter-vendor=amd"}
	nvidia := start(t, append(both, "--no-collector.amd")...)
	amd := start(t, append(both, "--no-collector.nvidia")...)
	// The two exporters as the chart's ServiceMonitor labels them. Each
	// demo process serves its own simulated engine on a port of its own;
	// on a cluster both exporters find the one pod IP and port.
	p := startPrometheus(t, strings.Replace(scrapeConfig(job, nvidia.addr, ruleFile),
		fmt.Sprintf("      - targets: [%q]\n", nvidia.addr),
		fmt.Sprintf(`      - targets: [%q]
        labels: {exporter: nvidia}
      - targets: [%q]
        labels: {exporter: amd}
    relabel_configs:
      - {target_label: instance, replacement: mix-node}
    metric_relabel_configs:
      - {source_labels: [target], regex: 'http://127\.0\.0\.1:[0-9]+/metrics', target_label: target, replacement: 'http://10.0.0.9:8000/metrics'}
`, nvidia.addr, amd.addr), 1))
	deadline := time.Now().Add(45 * time.Second)
	until(t, deadline, "target", p.targetUp(job))
	checks := []struct {
		query string
		want  float64
	}{
		{`engine:xpu_allocated_devices:sum{pod="hybrid-0", vendor="nvidia"}`, 1},
		{`engine:xpu_allocated_devices:sum{pod="hybrid-0", vendor="amd"}`, 2},
		// 1 × 4 + 2 × 3 USD/h
		{`engine:xpu_cost_per_hour:sum{pod="hybrid-0", currency="USD"}`, 10},
		// One engine endpoint, served by the NVIDIA exporter.
		{`count(xpu_inference_up)`, 1},
	}
	for _, c := range checks {
		until(t, deadline, c.query, p.value(c.query, c.want))
	}
}

// Compute instances that share a GPU instance and profile
// (fixtures/scenarios/mig-ci.yaml) are served as series that differ by
// uuid alone. A real Prometheus evaluates every rule of the mixin on them
// without an error, where four chargeback and capacity rules failed for
// every GPU once such a pair had one owner (review19's layout), the pod
// holds 1/7 + 1/7 of its H100, and every dashboard panel's query runs
// (two failed so: "Devices down", "Unhealthy devices").
func TestPrometheusComputeInstancesOfOneGPUInstance(t *testing.T) {
	job, ruleFile := mixinRules(t, testRulesConfig)
	e := start(t, "--demo", "--demo.scenario=../fixtures/scenarios/mig-ci.yaml", "--cost.file="+costFile(t))
	p := startPrometheus(t, scrapeConfig(job, e.addr, ruleFile))
	deadline := time.Now().Add(45 * time.Second)
	until(t, deadline, "target", p.targetUp(job))
	// 2/7 of the GPU at demoPrice an hour.
	until(t, deadline, "the pod's cost", p.value(`namespace:xpu_cost_per_hour:sum{namespace="ml"}`, 2.0/7*demoPrice))
	until(t, deadline, "rule health", p.rulesHealthy(time.Now()))
	for where, expr := range panelQueries(t) {
		if _, err := p.query(grafanaQuery(expr, ".*")); err != nil {
			t.Errorf("%s: %v", where, err)
		}
	}
}
