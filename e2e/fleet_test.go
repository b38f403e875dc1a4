package e2e

// Fleet sizing by simulation (make fleet): N copies of the demo node, each
// a demo process of its own with its own node name and GPU UUIDs, scraped
// by a real Prometheus that evaluates the mixin's rules with their default
// settings. What Prometheus reports about itself goes to bench/fleet.md.

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"hash/fnv"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xpu-exporter/xpu_exporter/demo"
)

var (
	fleetGPUs     = flag.String("fleet.gpus", "", "comma-separated fleet sizes in GPUs for TestFleet (make fleet: 10,100,1000); empty skips it")
	fleetDuration = flag.Duration("fleet.duration", 4*time.Minute, "how long Prometheus scrapes each fleet size; the first minute is warm-up, the rest is measured")
	fleetInterval = flag.Duration("fleet.interval", 15*time.Second, "scrape and rule evaluation interval of TestFleet's Prometheus")
	fleetResults  = flag.String("fleet.results", "", "write TestFleet's table to this Markdown file (make fleet: bench/fleet.md)")
)

const (
	// gpusPerNode is the number of physical GPUs of demo/default.yaml (GPU 4
	// is also split into 4 MIG instances, devices of their own).
	gpusPerNode = 8
	// templateNode is demo/default.yaml's node name; its GPU UUIDs, and the
	// device IDs its kubelet hands to pods, carry templateNodeHash.
	templateNode     = "demo-h100-node"
	templateNodeHash = "2b149611"
	// fleetWarmup passes before measuring: every target scraped a few
	// times (profiling series appear from the second scrape, the demo's
	// first Xid 45 s after start).
	fleetWarmup = time.Minute
	// promPoll is how often Prometheus' own metrics are read while a size
	// runs.
	promPoll = 5 * time.Second
)

// fnv32a is the 32-bit FNV-1a hash, which the demo uses to derive GPU UUIDs
// from the node name (demo/scenario.go, hashString).
func fnv32a(s string) string {
	h := fnv.New32a()
	h.Write([]byte(s))
	return fmt.Sprintf("%08x", h.Sum32())
}

// fleetNodeName names the i-th simulated node.
func fleetNodeName(i int) string { return fmt.Sprintf("fleet-node-%03d", i) }

// fleetScenario returns demo/default.yaml renamed to node: its devices'
// UUIDs follow from the name, so the device IDs its pods hold are rewritten
// to match.
func fleetScenario(defaultYAML, node string) string {
	s := strings.Replace(defaultYAML, "\nnode: "+templateNode+"\n", "\nnode: "+node+"\n", 1)
	return strings.ReplaceAll(s, "-"+templateNodeHash+"-", "-"+fnv32a(node)+"-")
}

// Each fleet node is the demo node under its own name with GPU UUIDs of its
// own, and its pods still hold its own GPUs: the renaming is what makes
// 125 demo processes 125 distinct nodes to Prometheus and the mixin.
func TestFleetScenario(t *testing.T) {
	b, err := os.ReadFile("../demo/default.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defaultYAML := string(b)
	// The demo's own UUIDs are GPU-2b149611-…: the FNV-1a hash of its node
	// name, so the rewrite below derives new ones the way the demo does.
	if got := fnv32a(templateNode); got != templateNodeHash {
		t.Fatalf("fnv32a(%q) = %s, want %s (the prefix of demo/default.yaml's UUIDs)", templateNode, got, templateNodeHash)
	}
	seen := map[string]string{}
	for _, node := range []string{fleetNodeName(1), fleetNodeName(2)} {
		text := fleetScenario(defaultYAML, node)
		if strings.Contains(text, templateNodeHash) {
			t.Errorf("%s: the scenario still names the demo node's UUIDs", node)
		}
		s, err := demo.Parse([]byte(text))
		if err != nil {
			t.Fatalf("%s: %v", node, err)
		}
		if s.Node != node {
			t.Errorf("node %q, want %q", s.Node, node)
		}
		// The device IDs of the node: its GPUs and MIG instances, as the
		// demo derives them from the node name.
		ids := map[string]bool{}
		for _, d := range s.Devices {
			ids[d.UUID] = true
			for _, m := range d.MIG {
				ids[m.UUID] = true
			}
		}
		// 8 GPUs, and GPU 4's 4 MIG instances.
		if len(ids) != gpusPerNode+4 {
			t.Errorf("%s: %d device IDs, want %d", node, len(ids), gpusPerNode+4)
		}
		for id := range ids {
			if prev, dup := seen[id]; dup {
				t.Errorf("%s and %s both have device %s", prev, node, id)
			}
			seen[id] = node
		}
		held := 0
		for _, p := range s.Kubernetes.Pods {
			for _, c := range p.Containers {
				for _, d := range c.Devices {
					for _, id := range d.IDs {
						// A time-slicing replica's ID is <uuid>::<n>.
						id, _, _ = strings.Cut(id, "::")
						if !ids[id] {
							t.Errorf("%s: pod %s/%s holds %s, not a device of the node", node, p.Namespace, p.Name, id)
						}
						held++
					}
				}
			}
		}
		// GPUs 0+1 (llm-serve), 3 replicas of GPU 2, GPU 3, 3 MIG
		// instances: 2 + 3 + 1 + 3.
		if held != 9 {
			t.Errorf("%s: pods hold %d device IDs, want 9", node, held)
		}
	}
}

// fleetNode is one simulated node: a demo process.
type fleetNode struct {
	name string
	e    *exporter
}

// fleetConfig is a Prometheus configuration scraping nodes as job every
// interval, each target labelled with its node name as node and instance
// (as the chart's ServiceMonitor does), with ruleFile loaded. The scrape
// timeout is Prometheus' default, 10s, unless the interval is shorter:
// Prometheus refuses a timeout longer than the interval.
func fleetConfig(job, ruleFile string, interval time.Duration, nodes []fleetNode) string {
	var b strings.Builder
	fmt.Fprintf(&b, "global:\n  scrape_interval: %s\n  scrape_timeout: %s\n  evaluation_interval: %s\n", interval, min(interval, 10*time.Second), interval)
	fmt.Fprintf(&b, "scrape_configs:\n  - job_name: %q\n    static_configs:\n", job)
	for _, n := range nodes {
		fmt.Fprintf(&b, "      - targets: [%q]\n        labels: {node: %q, instance: %q}\n", n.e.addr, n.name, n.name)
	}
	fmt.Fprintf(&b, "rule_files:\n  - %q\n", ruleFile)
	return b.String()
}

// selfMetrics reads Prometheus' own /metrics: each series, as written in
// the exposition (name{labels}), with its value. Prometheus does not
// scrape itself here, so its metrics add no series to what is measured.
func (p *prometheus) selfMetrics() (map[string]float64, error) {
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(p.url + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out, sc.Err()
}

// ruleGroupDurations picks prometheus_rule_group_last_duration_seconds of
// every group, keyed by group name without its file.
func ruleGroupDurations(m map[string]float64) map[string]float64 {
	out := map[string]float64{}
	const prefix = `prometheus_rule_group_last_duration_seconds{rule_group="`
	for k, v := range m {
		if rest, ok := strings.CutPrefix(k, prefix); ok {
			_, group, _ := strings.Cut(strings.TrimSuffix(rest, `"}`), ";")
			out[group] = v
		}
	}
	return out
}

// sumPrefix sums the series of m whose key starts with name followed by
// "{" or nothing.
func sumPrefix(m map[string]float64, name string) float64 {
	var s float64
	for k, v := range m {
		if k == name || strings.HasPrefix(k, name+"{") {
			s += v
		}
	}
	return s
}

// fleetResult is what one fleet size measured.
type fleetResult struct {
	gpus, nodes int
	// From Prometheus' queries at the end of the run.
	seriesMin, seriesMax, seriesAvg float64 // scrape_samples_scraped per target
	devicesPerNode                  float64 // xpu_device_info series per target: GPUs and MIG instances
	scrapeSeconds                   float64 // average scrape_duration_seconds
	exporterRSS                     float64 // process_resident_memory_bytes of all targets
	exporterCPU                     float64 // CPU seconds per second of all targets
	// From Prometheus' /metrics.
	headSeries     float64
	appendedPerSec float64 // samples appended to the head per second over the window
	cpu            float64 // Prometheus' CPU seconds per second over the window
	rssMax, rssEnd float64
	heapEnd        float64
	groupMean      map[string]float64 // mean of the last-duration readings
	groupMax       map[string]float64
	missed         float64
	window         time.Duration
	// ruleSeries is what the head holds beyond the scraped series and the
	// 5 Prometheus adds per target (up, scrape_duration_seconds,
	// scrape_samples_scraped, scrape_samples_post_metric_relabeling,
	// scrape_series_added: "Jobs and instances" in its documentation):
	// recording-rule output and ALERTS.
	ruleSeries float64
	queries    []queryCost
}

// measureFleet runs a Prometheus with the mixin's rules over nodes for
// *fleetDuration and measures it.
func measureFleet(t *testing.T, job, ruleFile string, nodes []fleetNode, gpus int) fleetResult {
	p := startPrometheus(t, fleetConfig(job, ruleFile, *fleetInterval, nodes))
	began := time.Now()
	n := len(nodes)
	until(t, began.Add(2*(*fleetInterval)+30*time.Second), "every fleet target up",
		p.value(fmt.Sprintf(`count(up{job=%q} == 1)`, job), float64(n)))

	r := fleetResult{gpus: gpus, nodes: n, groupMean: map[string]float64{}, groupMax: map[string]float64{}}
	var first, last map[string]float64
	var firstAt, lastAt time.Time
	readings := map[string]int{}
	for time.Since(began) < *fleetDuration {
		time.Sleep(promPoll)
		m, err := p.selfMetrics()
		if err != nil {
			t.Fatalf("reading Prometheus' metrics: %v", err)
		}
		r.rssMax = max(r.rssMax, m["process_resident_memory_bytes"])
		if time.Since(began) < fleetWarmup {
			continue
		}
		if first == nil {
			first, firstAt = m, time.Now()
		}
		last, lastAt = m, time.Now()
		for g, d := range ruleGroupDurations(m) {
			r.groupMean[g] += d
			r.groupMax[g] = max(r.groupMax[g], d)
			readings[g]++
		}
	}
	if first == nil || lastAt.Sub(firstAt) < *fleetInterval {
		t.Fatalf("-fleet.duration %v leaves too little time after the %v warm-up to measure", *fleetDuration, fleetWarmup)
	}
	for g := range r.groupMean {
		r.groupMean[g] /= float64(readings[g])
	}
	r.window = lastAt.Sub(firstAt)
	r.headSeries = last["prometheus_tsdb_head_series"]
	// Prometheus 2.4x splits the counter by sample type (float, histogram).
	appended := "prometheus_tsdb_head_samples_appended_total"
	r.appendedPerSec = (sumPrefix(last, appended) - sumPrefix(first, appended)) / r.window.Seconds()
	r.cpu = (last["process_cpu_seconds_total"] - first["process_cpu_seconds_total"]) / r.window.Seconds()
	r.rssEnd = last["process_resident_memory_bytes"]
	r.heapEnd = last["go_memstats_heap_inuse_bytes"]
	r.missed = sumPrefix(last, "prometheus_rule_group_iterations_missed_total")
	if failures := sumPrefix(last, "prometheus_rule_evaluation_failures_total"); failures != 0 {
		t.Errorf("%v rule evaluations failed", failures)
	}

	one := func(q string) float64 {
		t.Helper()
		s, err := p.query(q)
		if err != nil || len(s) != 1 {
			t.Fatalf("%s: %v %v", q, s, err)
		}
		return s[0].Value
	}
	sel := fmt.Sprintf(`job=%q`, job)
	r.seriesMin = one(fmt.Sprintf(`min(scrape_samples_scraped{%s})`, sel))
	r.seriesMax = one(fmt.Sprintf(`max(scrape_samples_scraped{%s})`, sel))
	r.seriesAvg = one(fmt.Sprintf(`avg(scrape_samples_scraped{%s})`, sel))
	r.scrapeSeconds = one(fmt.Sprintf(`avg(avg_over_time(scrape_duration_seconds{%s}[2m]))`, sel))
	r.devicesPerNode = one(fmt.Sprintf(`avg(count by (instance) (xpu_device_info{%s}))`, sel))
	r.exporterRSS = one(fmt.Sprintf(`sum(process_resident_memory_bytes{%s})`, sel))
	r.exporterCPU = one(fmt.Sprintf(`sum(rate(process_cpu_seconds_total{%s}[2m]))`, sel))

	// Every node is its own: n node names, 8 GPU UUIDs each, and the
	// recording rules saw them all (model:xpu_devices:count counts GPUs,
	// not MIG instances).
	if got := one(fmt.Sprintf(`count(count by (node) (up{%s}))`, sel)); got != float64(n) {
		t.Errorf("%v node names, want %d", got, n)
	}
	if got := one(fmt.Sprintf(`count(count by (uuid) (xpu_device_info{%s, parent_uuid=""}))`, sel)); got != float64(gpusPerNode*n) {
		t.Errorf("%v GPU UUIDs, want %d × %d", got, gpusPerNode, n)
	}
	if got := one(`sum(model:xpu_devices:count)`); got != float64(gpusPerNode*n) {
		t.Errorf("model:xpu_devices:count sums to %v, want %d × %d", got, gpusPerNode, n)
	}
	r.ruleSeries = r.headSeries - r.seriesAvg*float64(n) - 5*float64(n)
	r.queries = queryCosts(t, p, ruleFile, lastAt)
	return r
}

// fleetPanels are the recording rules behind the fleet overview's and
// chargeback's cluster-wide stat panels.
var fleetPanels = []string{
	"model:xpu_devices:count",
	"model:xpu_utilization:avg",
	"cluster:xpu_cost_per_hour:sum",
	"cluster:xpu_idle_cost_per_hour:sum",
	"cluster:xpu_energy_kwh_per_hour:sum",
}

// queryCost is what a dashboard pays for one point of a panel: samples read from storage (Prometheus' query statistics,
// totalQueryableSamples) for the recorded series and for the rule's own
// expression.
type queryCost struct {
	record             string
	recorded, computed float64
}

// queryCosts evaluates each fleetPanels rule's recorded series and its
// expression at end, with stats=all.
func queryCosts(t *testing.T, p *prometheus, ruleFile string, end time.Time) []queryCost {
	t.Helper()
	b, err := os.ReadFile(ruleFile)
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Rules []struct{ Record, Expr string }
		}
	}
	if err := json.Unmarshal(b, &file); err != nil {
		t.Fatal(err)
	}
	exprs := map[string]string{}
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				exprs[r.Record] = r.Expr
			}
		}
	}
	samples := func(q string) float64 {
		t.Helper()
		var data struct {
			Stats struct {
				Samples struct{ TotalQueryableSamples float64 }
			}
		}
		path := fmt.Sprintf("/api/v1/query?stats=all&time=%d&query=%s", end.Unix(), url.QueryEscape(q))
		if err := p.api(path, &data); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return data.Stats.Samples.TotalQueryableSamples
	}
	var out []queryCost
	for _, rec := range fleetPanels {
		expr, ok := exprs[rec]
		if !ok {
			t.Fatalf("the mixin no longer records %s", rec)
		}
		out = append(out, queryCost{record: rec, recorded: samples(rec), computed: samples(expr)})
	}
	return out
}

// TestFleet is make fleet: for each size in -fleet.gpus, enough 8-GPU demo
// nodes to hold it, scraped by a fresh Prometheus with the mixin's rules
// at their defaults for -fleet.duration; written to -fleet.results.
func TestFleet(t *testing.T) {
	if *fleetGPUs == "" {
		t.Skip("run by make fleet (-fleet.gpus=10,100,1000)")
	}
	var sizes []int
	for _, f := range strings.Split(*fleetGPUs, ",") {
		g, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || g <= 0 {
			t.Fatalf("-fleet.gpus: %q is not a number of GPUs", f)
		}
		sizes = append(sizes, g)
	}
	slices.Sort(sizes)
	// The smallest whole number of 8-GPU nodes holding each size.
	nodesFor := func(gpus int) int { return (gpus + gpusPerNode - 1) / gpusPerNode }

	b, err := os.ReadFile("../demo/default.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	prices := costFile(t)
	var nodes []fleetNode
	began := time.Now()
	for i := 1; i <= nodesFor(sizes[len(sizes)-1]); i++ {
		name := fleetNodeName(i)
		path := filepath.Join(dir, name+".yaml")
		if err := os.WriteFile(path, []byte(fleetScenario(string(b), name)), 0o644); err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, fleetNode{name: name, e: start(t, "--demo", "--demo.scenario="+path, "--cost.file="+prices)})
	}
	t.Logf("%d demo nodes started in %v", len(nodes), time.Since(began).Round(time.Second))

	// The mixin's rules as shipped: only the selector is read back.
	job, ruleFile := mixinRules(t, "{}")
	var results []fleetResult
	for _, gpus := range sizes {
		t.Run(fmt.Sprintf("%dGPUs", gpus), func(t *testing.T) {
			r := measureFleet(t, job, ruleFile, nodes[:nodesFor(gpus)], gpus)
			t.Logf("%d GPUs (%d nodes): %.0f series per node, %.0f head series, %.0f samples/s, RSS %.0f MiB (max %.0f), heap %.0f MiB, rule groups %.1f ms in all",
				gpus, r.nodes, r.seriesAvg, r.headSeries, r.appendedPerSec, r.rssEnd/(1<<20), r.rssMax/(1<<20), r.heapEnd/(1<<20), sumValues(r.groupMean)*1000)
			results = append(results, r)
		})
	}
	if *fleetResults != "" && len(results) == len(sizes) {
		if err := os.WriteFile(*fleetResults, []byte(fleetMarkdown(results)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func sumValues(m map[string]float64) float64 {
	var s float64
	for _, v := range m {
		s += v
	}
	return s
}

// promVersion is the first line of prometheus --version.
func promVersion() string {
	out, err := exec.Command("prometheus", "--version").CombinedOutput()
	if err != nil {
		return "unknown"
	}
	line, _, _ := strings.Cut(string(out), "\n")
	return line
}

// machineInfo names the CPU, its count and the memory of this machine.
func machineInfo() string {
	model, mem := "unknown", "unknown"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		// proc(5): "MemTotal %lu: Total usable RAM", in kB.
		if f := strings.Fields(string(b)); len(f) >= 2 && f[0] == "MemTotal:" {
			if kb, err := strconv.ParseFloat(f[1], 64); err == nil {
				mem = fmt.Sprintf("%.1f GiB", kb/(1<<20))
			}
		}
	}
	// proc(5): the first three fields of /proc/loadavg are the load
	// averages over 1, 5 and 15 minutes.
	load := "unknown"
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			load = strings.Join(f[:3], " ")
		}
	}
	return fmt.Sprintf("%d CPUs (%s), %s RAM, shared with other jobs (load average at the end: %s)", runtime.NumCPU(), model, mem, load)
}

func fleetMarkdown(results []fleetResult) string {
	mib := func(b float64) string { return fmt.Sprintf("%.0f", b/(1<<20)) }
	var b strings.Builder
	fmt.Fprintf(&b, "# Fleet sizing\n\nWritten by `make fleet` (e2e/fleet_test.go, TestFleet); do not edit.\n\n")
	fmt.Fprintf(&b, "- date: %s\n- machine: %s\n- Prometheus: %s; %s\n", time.Now().UTC().Format(time.RFC3339), machineInfo(), promVersion(), runtime.Version())
	fmt.Fprintf(&b, "- fleet: N copies of the demo node (`demo/default.yaml`: 8 H100 GPUs, one split into 4 MIG instances, pods, a Slurm job, a systemd service, 3 inference engines), each its own `xpu_exporter --demo` process with default flags and a price table, renamed `fleet-node-NNN` (own UUIDs), `node` and `instance` target labels set to that name; N is the smallest number of 8-GPU nodes holding the size\n")
	fmt.Fprintf(&b, "- Prometheus: one fresh server per size, scrape and evaluation interval %v, the mixin's recording and alerting rules with their default settings (usage groups every 1m); %v per size, the first %v warm-up; its own metrics read from its /metrics every %v (it does not scrape itself)\n\n", *fleetInterval, *fleetDuration, fleetWarmup, promPoll)

	b.WriteString("| size, GPUs | simulated GPUs (nodes) | series per node | series per GPU | devices per node | head series | rule series | samples appended/s | Prometheus CPU cores | Prometheus RSS MiB (max) | heap in use MiB | rule groups ms per round | missed rounds | scrape s | exporters RSS MiB | exporters CPU cores |\n")
	b.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range results {
		fmt.Fprintf(&b, "| %d | %d (%d) | %.0f (%.0f–%.0f) | %.1f | %.0f | %.0f | %.0f | %.0f | %.2f | %s (%s) | %s | %.1f | %.0f | %.3f | %s | %.2f |\n",
			r.gpus, r.nodes*gpusPerNode, r.nodes, r.seriesAvg, r.seriesMin, r.seriesMax, r.seriesAvg/gpusPerNode, r.devicesPerNode,
			r.headSeries, r.ruleSeries, r.appendedPerSec, r.cpu, mib(r.rssEnd), mib(r.rssMax), mib(r.heapEnd),
			sumValues(r.groupMean)*1000, r.missed, r.scrapeSeconds, mib(r.exporterRSS), r.exporterCPU)
	}
	b.WriteString("\n- series per node: `scrape_samples_scraped` of the targets at the end, average (min–max): they differ by the Xid and ECC event counters that have appeared by then; series per GPU is that over 8 (MIG instances, owners and self-metrics included)\n")
	b.WriteString("- head series: `prometheus_tsdb_head_series` at the end: the scraped series, 5 per target that Prometheus adds (up, scrape_*), the recording rules' output and ALERTS; rule series: head series − nodes × (series per node + 5)\n")
	b.WriteString("- samples appended/s: the increase of `prometheus_tsdb_head_samples_appended_total` over the measured window, scrapes and rules together; Prometheus CPU cores: the increase of its `process_cpu_seconds_total` over the window divided by its length (CPU time, so less sensitive than the rule groups' wall times to other jobs on the machine)\n")
	b.WriteString("- rule groups ms per round: the sum over the groups of the mean of `prometheus_rule_group_last_duration_seconds` readings in the window; missed rounds: `prometheus_rule_group_iterations_missed_total`, all groups\n")
	b.WriteString("- scrape s: mean `scrape_duration_seconds`; exporters RSS and CPU: `process_resident_memory_bytes` summed and `rate(process_cpu_seconds_total[2m])` summed over the demo processes (the simulated node included), i.e. the harness' own cost\n\n")

	b.WriteString("## Rule groups\n\nMean (max) of `prometheus_rule_group_last_duration_seconds` in ms, per group and size.\n\n| group |")
	for _, r := range results {
		fmt.Fprintf(&b, " %d GPUs |", r.nodes*gpusPerNode)
	}
	b.WriteString("\n|---|")
	for range results {
		b.WriteString("---:|")
	}
	b.WriteString("\n")
	var groups []string
	for g := range results[len(results)-1].groupMean {
		groups = append(groups, g)
	}
	slices.Sort(groups)
	for _, g := range groups {
		fmt.Fprintf(&b, "| %s |", g)
		for _, r := range results {
			fmt.Fprintf(&b, " %.2f (%.2f) |", r.groupMean[g]*1000, r.groupMax[g]*1000)
		}
		b.WriteString("\n")
	}

	b.WriteString("\n## Fleet panels: recorded series against the rule's expression\n\n")
	b.WriteString("Samples read from storage (`stats=all`, `totalQueryableSamples`) by one evaluation at the end of the run, i.e. one point of a panel: of the recording rule's series, and of the rule's expression that a panel would run without it. A panel over a range evaluates once per step, so a range multiplies both.\n\n| recording rule |")
	for _, r := range results {
		fmt.Fprintf(&b, " %d GPUs: recorded / expression |", r.nodes*gpusPerNode)
	}
	b.WriteString("\n|---|")
	for range results {
		b.WriteString("---:|")
	}
	b.WriteString("\n")
	for i, rec := range fleetPanels {
		fmt.Fprintf(&b, "| `%s` |", rec)
		for _, r := range results {
			fmt.Fprintf(&b, " %.0f / %.0f |", r.queries[i].recorded, r.queries[i].computed)
		}
		b.WriteString("\n")
	}
	return b.String()
}
