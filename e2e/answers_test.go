package e2e

// The mixin's answer book (../mixin/answers.libsonnet, printed in
// ../mixin/README.md "Questions and answers") against a real Prometheus
// scraping the default demo node: every documented query returns what the
// demo scenario (../demo/default.yaml) makes the answer, worked out by hand
// below from the scenario's numbers.

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// answerBookConfig is testRulesConfig with rate windows short enough to be
// covered by samples within the test: a rate over a window the series
// does not yet fill is extrapolated low.
const answerBookConfig = `(` + testRulesConfig + `) + {
	energyRateWindow: '10s',
	inferenceRateWindow: '10s',
}`

// The periods the test evaluates the answers over: "this month" becomes
// the last 20 s (20 evaluations of the 1 s usage rules), "the last week"
// the last 10 minutes.
const (
	answerMonth = "20s"
	answerWeek  = "10m"
)

// The target labels the Helm chart's ServiceMonitor sets (node) and a
// remote-write setup adds (cluster), which the answers select and keep.
const (
	demoNode    = "demo-h100-node"
	demoCluster = "demo"
)

// The usage rules run every second here (testRulesConfig): a total over a
// period is the sum of their per-hour values / 3600.
const evaluationsPerHour = 3600

type answer struct {
	Question string
	Query    string
}

// answerBook evaluates the mixin's answers with config over the given
// periods.
func answerBook(t *testing.T, config, month, week string) []answer {
	t.Helper()
	var answers []answer
	out := evalMixin(t, config, fmt.Sprintf("m.answers(%q, %q)", month, week))
	if err := json.Unmarshal([]byte(out), &answers); err != nil {
		t.Fatal(err)
	}
	return answers
}

// queryAt runs an instant query evaluated at a given time, keeping the
// order of the result (sort_desc).
func (p *prometheus) queryAt(q string, at time.Time) ([]promSample, error) {
	var data struct {
		Result []struct {
			Metric map[string]string
			Value  [2]any
		}
	}
	ts := strconv.FormatFloat(float64(at.UnixMilli())/1000, 'f', 3, 64)
	if err := p.api("/api/v1/query?query="+url.QueryEscape(q)+"&time="+ts, &data); err != nil {
		return nil, err
	}
	var samples []promSample
	for _, r := range data.Result {
		s, _ := r.Value[1].(string)
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: value %q", q, s)
		}
		samples = append(samples, promSample{r.Metric, v})
	}
	return samples, nil
}

// labelledScrapeConfig is scrapeConfig with target labels.
func labelledScrapeConfig(job, target, ruleFile string, labels map[string]string) string {
	var l []string
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		l = append(l, fmt.Sprintf("%s: %q", k, labels[k]))
	}
	return strings.Replace(scrapeConfig(job, target, ruleFile),
		fmt.Sprintf("      - targets: [%q]\n", target),
		fmt.Sprintf("      - targets: [%q]\n        labels: {%s}\n", target, strings.Join(l, ", ")), 1)
}

// want is one series an answer must return: the labels it must have and
// its value between lo and hi.
type want struct {
	labels map[string]string
	lo, hi float64
}

// exactly is a value known to the float: relative error 1e-9.
func exactly(labels map[string]string, v float64) want {
	d := math.Abs(v) * 1e-9
	return want{labels, v - d, v + d}
}

// near is a value from counter rates, whose sample timestamps are the
// scrapes' start while the demo computes the counters when it reads them:
// within 2%.
func near(labels map[string]string, v float64) want {
	return want{labels, v * 0.98, v * 1.02}
}

func between(labels map[string]string, lo, hi float64) want {
	return want{labels, lo, hi}
}

// match reports "" when samples are exactly the wanted series (in any
// order), each within its bounds.
func match(samples []promSample, wants []want) string {
	if len(samples) != len(wants) {
		return fmt.Sprintf("%d series, want %d: %v", len(samples), len(wants), samples)
	}
	used := make([]bool, len(samples))
	for _, w := range wants {
		found := false
		for i, s := range samples {
			if used[i] || !hasLabels(s.Metric, w.labels) {
				continue
			}
			if s.Value < w.lo || s.Value > w.hi {
				return fmt.Sprintf("%v = %v, want %v..%v", s.Metric, s.Value, w.lo, w.hi)
			}
			used[i], found = true, true
			break
		}
		if !found {
			return fmt.Sprintf("no series with %v in %v", w.labels, samples)
		}
	}
	return ""
}

func hasLabels(metric, labels map[string]string) bool {
	for k, v := range labels {
		if metric[k] != v {
			return false
		}
	}
	return true
}

// Every query of the answer book, run against the real Prometheus with the
// mixin's rules scraping the default demo node, returns the answer the
// scenario makes right.
func TestAnswerBook(t *testing.T) {
	answers := answerBook(t, answerBookConfig, answerMonth, answerWeek)
	job, ruleFile := mixinRules(t, answerBookConfig)
	e := start(t, "--demo", "--cost.file="+costFile(t))
	p := startPrometheus(t, labelledScrapeConfig(job, e.addr, ruleFile, map[string]string{"node": demoNode, "cluster": demoCluster}))
	deadline := time.Now().Add(150 * time.Second)
	until(t, deadline, "target", p.targetUp(job))
	// The Xid of question 3 comes 45 s after the demo starts: by then the
	// 20 s period and the 10 s rate windows every answer reads are filled.
	until(t, deadline, "the demo's Xid", p.value(`count(xpu_xid_errors_total)`, 1))

	// n is how many times the usage rules recorded series in the period
	// before at: totals are n per-hour values / 3600.
	n := func(series string, at time.Time) (float64, error) {
		s, err := p.queryAt(fmt.Sprintf("count_over_time(%s[%s])", series, answerMonth), at)
		if err != nil || len(s) != 1 {
			return 0, fmt.Errorf("counting the evaluations of %s: %v %v", series, s, err)
		}
		return s[0].Value, nil
	}
	inference := map[string]string{"cluster": demoCluster, "namespace": "inference"}
	ns := func(name, hours string) map[string]string {
		return map[string]string{"cluster": demoCluster, "namespace": name, "gpu_hours": hours}
	}

	checks := []func(samples []promSample, at time.Time) string{
		// 1. GPU-hours per team. Allocated GPUs, from the kubelet's
		// device assignments (demo/default.yaml): inference holds GPUs 0
		// and 1: 2; search GPU 3: 1; Slurm account nlp-research GPU 5: 1;
		// notebooks two of GPU 2's four time-slice replicas: 2/4 = 0.5;
		// gpu-operator one replica: 0.25; on GPU 4 (7 compute slices) ray
		// 3g: 3/7, eval 2g: 2/7, training 1g: 1/7. Each is recorded n times
		// in the period, so a team's GPU-hours are allocation × n / 3600.
		// Used: inference keeps GPUs 0 and 1 busy at 0.55..0.98 each (the
		// scenario's utilization sine): 1.1..1.96 per evaluation, more than
		// any other team can use (one GPU at most 0.98), so it tops both
		// lists; the allocated line comes first (2 ≥ 1.96).
		func(samples []promSample, at time.Time) string {
			na, err := n(`namespace:xpu_allocated_devices:sum{namespace="inference"}`, at)
			if err != nil {
				return err.Error()
			}
			nu, err := n(`namespace:xpu_utilized_devices:sum{namespace="inference"}`, at)
			if err != nil {
				return err.Error()
			}
			h := na / evaluationsPerHour
			wants := []want{
				exactly(ns("inference", "allocated"), 2*h),
				exactly(ns("search", "allocated"), 1*h),
				exactly(ns("notebooks", "allocated"), 0.5*h),
				exactly(ns("gpu-operator", "allocated"), 0.25*h),
				exactly(ns("ray", "allocated"), 3.0/7*h),
				exactly(ns("eval", "allocated"), 2.0/7*h),
				exactly(ns("training", "allocated"), 1.0/7*h),
				exactly(map[string]string{"slurm_account": "nlp-research", "gpu_hours": "allocated"}, 1*h),
				between(ns("inference", "used"), 1.1*nu/evaluationsPerHour, 1.96*nu/evaluationsPerHour),
			}
			// The other teams' used GPU-hours move with their loads; none
			// keeps more than one GPU busy (notebooks, the largest of them
			// on a shared GPU, at most 0.55 + 0.3).
			for _, team := range []map[string]string{ns("search", "used"), ns("notebooks", "used"), ns("gpu-operator", "used"),
				ns("ray", "used"), ns("eval", "used"), ns("training", "used"),
				{"slurm_account": "nlp-research", "gpu_hours": "used"}} {
				wants = append(wants, between(team, 0, 1.0*h))
			}
			if msg := match(samples, wants); msg != "" {
				return msg
			}
			if top := samples[0].Metric; top["namespace"] != "inference" || top["gpu_hours"] != "allocated" {
				return fmt.Sprintf("first row %v, want inference's allocated GPU-hours", top)
			}
			return ""
		},
		// 2. The top three owners on the node by utilized GPUs: llm-serve
		// (GPUs 0 and 1 at 0.55..0.98 each: 1.1..1.96) is first; no other
		// owner holds more than one GPU (≤ 0.98).
		func(samples []promSample, _ time.Time) string {
			if len(samples) != 3 {
				return fmt.Sprintf("%d series, want 3: %v", len(samples), samples)
			}
			slices.SortFunc(samples, func(a, b promSample) int { return -cmpFloat(a.Value, b.Value) })
			if msg := match(samples[:1], []want{between(map[string]string{"node": demoNode, "namespace": "inference", "pod": "llm-serve-7d9f8b6c5d-x2k4q"}, 1.1, 1.96)}); msg != "" {
				return msg
			}
			for _, s := range samples[1:] {
				if s.Value > 0.98 || s.Metric["node"] != demoNode {
					return fmt.Sprintf("%v = %v: want at most one GPU's 0.98 on %s", s.Metric, s.Value, demoNode)
				}
			}
			return ""
		},
		// 3. The scenario's only event: an Xid 31 on GPU 3 45 s after
		// start (then every 20 minutes), counted once with the pod that
		// held the GPU.
		func(samples []promSample, _ time.Time) string {
			return match(samples, []want{exactly(map[string]string{
				"node": demoNode, "gpu": "3", "xid": "31", "namespace": "search", "pod": "embeddings-0", "workload": "embeddings", "workload_kind": "StatefulSet",
			}, 1)})
		},
		// 4. The Ray worker's vLLM gets no requests (requests_per_second:
		// 0) while holding its 3g.40gb MIG instance: 3 of GPU 4's 7
		// slices. llm-serve (6 requests/s, 60% finished: 3.6/s) and the
		// Triton of search (40 × 0.6 = 24/s) serve.
		func(samples []promSample, _ time.Time) string {
			return match(samples, []want{exactly(map[string]string{
				"engine": "vllm", "namespace": "ray", "pod": "raycluster-llm-gpu-group-worker-q8n4d", "workload": "raycluster-llm",
			}, 3.0/7)})
		},
		// 5. The node's capacity, 8 H100s: unallocated are GPU 7 (1),
		// GPU 2's fourth replica (1/4) and GPU 4's free 1g instance (1/7):
		// 1 + 1/4 + 1/7. Allocated is the rest, 8 - (1 + 1/4 + 1/7), split
		// into busy and idle by the loads: busy at least GPUs 0, 1, 3, 5
		// and 6 at 0.55 each, GPU 2's pods at 0.35 + 0.1 + 0.02, GPU 4's
		// instances at 3/7 × 0.6 + 2/7 × 0.2 + 1/7 × 0.12, and at most
		// 0.98 each, GPU 2 its allocated 0.75 and GPU 4 3/7 × 0.9 + 2/7 ×
		// 0.5 + 1/7 × 0.12.
		func(samples []promSample, _ time.Time) string {
			model := func(state string) map[string]string {
				return map[string]string{"cluster": demoCluster, "vendor": "nvidia", "model": "NVIDIA H100 80GB HBM3", "state": state}
			}
			unallocated := 1 + 1.0/4 + 1.0/7
			allocated := 8 - unallocated
			busyLo := 5*0.55 + (0.35 + 0.1 + 0.02) + (3.0/7*0.6 + 2.0/7*0.2 + 1.0/7*0.12)
			busyHi := 5*0.98 + 0.75 + (3.0/7*0.9 + 2.0/7*0.5 + 1.0/7*0.12)
			if msg := match(samples, []want{
				exactly(model("unallocated"), unallocated),
				between(model("allocated_busy"), busyLo, busyHi),
				between(model("allocated_idle"), allocated-busyHi, allocated-busyLo),
			}); msg != "" {
				return msg
			}
			var sum float64
			for _, s := range samples {
				if s.Metric["state"] != "unallocated" {
					sum += s.Value
				}
			}
			if math.Abs(sum-allocated) > 1e-9 {
				return fmt.Sprintf("busy + idle = %v, want the allocated %v", sum, allocated)
			}
			return ""
		},
		// 6. Slurm job 4242 of carol, account nlp-research, holds GPU 5
		// alone: 1 GPU-hour per hour, at the price table's 4 USD per GPU
		// and hour, drawing the scenario's energy counter rate of 510 J/s:
		// 510 × 3600 / 3.6e6 = 0.51 kWh per hour. Totals: n evaluations of
		// each / 3600.
		func(samples []promSample, at time.Time) string {
			job := func(quantity string) map[string]string {
				return map[string]string{"cluster": demoCluster, "slurm_account": "nlp-research", "slurm_user": "carol", "slurm_job_id": "4242", "quantity": quantity}
			}
			var wants []want
			for _, q := range []struct {
				rule, quantity string
				perHour        float64
			}{
				{"slurm_job:xpu_allocated_devices:sum", "gpu_hours", 1},
				{"slurm_job:xpu_cost_per_hour:sum", "cost", demoPrice},
				{"slurm_job:xpu_energy_kwh_per_hour:sum", "kwh", 0.51},
			} {
				count, err := n(q.rule+`{slurm_job_id="4242"}`, at)
				if err != nil {
					return err.Error()
				}
				if q.quantity == "kwh" {
					wants = append(wants, near(job(q.quantity), q.perHour*count/evaluationsPerHour))
					continue
				}
				wants = append(wants, exactly(job(q.quantity), q.perHour*count/evaluationsPerHour))
			}
			if msg := match(samples, wants); msg != "" {
				return msg
			}
			for _, s := range samples {
				if s.Metric["quantity"] == "cost" && s.Metric["currency"] != "USD" {
					return fmt.Sprintf("%v: want currency USD", s.Metric)
				}
			}
			return ""
		},
		// 7. llm-serve's vLLM finishes 6 × 0.6 = 3.6 requests/s of 256
		// generated tokens: 921.6 tokens/s, 921.6 × 3600 = 3.31776 million
		// an hour, on GPUs 0 and 1 at 4 USD each: 8 USD an hour, so
		// 8 / 3.31776 USD per million tokens, for its model and for its
		// namespace. The Ray worker's vLLM generates none (no ratio); the
		// Triton of search counts no tokens.
		func(samples []promSample, _ time.Time) string {
			perMillion := 8 / 3.31776
			return match(samples, []want{
				near(map[string]string{"cluster": demoCluster, "engine": "vllm", "model": "meta-llama/Llama-3.1-70B-Instruct", "currency": "USD"}, perMillion),
				near(inference, perMillion),
			})
		},
	}
	if len(answers) != len(checks) {
		t.Fatalf("the answer book has %d questions, this test checks %d", len(answers), len(checks))
	}
	for i, a := range answers {
		t.Run(fmt.Sprintf("q%d", i+1), func(t *testing.T) {
			until(t, deadline, a.Question+"\n"+a.Query, func() string {
				// Evaluated a second back, so that the rule evaluations and
				// scrapes of that instant are in.
				at := time.Now().Add(-time.Second)
				samples, err := p.queryAt(a.Query, at)
				if err != nil {
					return err.Error()
				}
				if msg := checks[i](samples, at); msg != "" {
					return msg
				}
				t.Logf("%s\n%s", a.Query, formatSamples(samples))
				return ""
			})
		})
	}
	until(t, deadline, "rule health", p.rulesHealthy(time.Now()))

	// Hours later the pod is gone: here the whole exporter is, its series
	// go stale, and question 3 still names the pod that held GPU 3.
	stopExporter(t, e)
	until(t, deadline, "the Xid series gone stale", p.value(`count(xpu_xid_errors_total) or vector(0)`, 0))
	t.Run("q3 after the pod is gone", func(t *testing.T) {
		until(t, deadline, answers[2].Query, func() string {
			samples, err := p.queryAt(answers[2].Query, time.Now().Add(-time.Second))
			if err != nil {
				return err.Error()
			}
			return checks[2](samples, time.Now())
		})
	})
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func formatSamples(samples []promSample) string {
	var b strings.Builder
	for _, s := range samples {
		fmt.Fprintf(&b, "  %v %g\n", s.Metric, s.Value)
	}
	return b.String()
}
