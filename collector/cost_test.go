package collector

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xpu-exporter/xpu_exporter/demo"
	"github.com/xpu-exporter/xpu_exporter/internal/syncbuf"
)

// usePrices points --cost.file at a price table holding body for the test.
func usePrices(t *testing.T, body string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "prices.yaml")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	old := *costFile
	*costFile = path
	t.Cleanup(func() { *costFile = old })
}

func TestCost(t *testing.T) {
	usePrices(t, "currency: EUR\nmodels:\n  NVIDIA H100 80GB HBM3: 2.5\nnodes:\n  demo-node:\n    NVIDIA H100 80GB HBM3: 1.75\n")

	out := scrapeText(t, newTestExporter(t, loadScenario(t, "mig"), map[string]bool{"nvidia": true, "cost": true}), 5*time.Second)
	if n := seriesCount(out, "xpu_device_hourly_cost"); n != 0 {
		t.Errorf("an A100 has no price in the table, yet %d cost series", n)
	}
	out = scrapeText(t, newTestExporter(t, loadScenario(t, "lost"), map[string]bool{"nvidia": true, "cost": true}), 5*time.Second)
	if v := sample(t, out, "xpu_device_hourly_cost", `gpu="0"`, `currency="EUR"`); v != 2.5 {
		t.Errorf("price %v, want the model's 2.5", v)
	}
}

func TestCostFileErrors(t *testing.T) {
	for body, want := range map[string]string{
		"models: {T4: 1}\n":                      "currency: missing",
		"currency: USD\nmodels: {T4: -1}\n":      `models["T4"]: price -1`,
		"currency: USD\nprices: {T4: 1}\n":       "field prices not found",
		"currency: USD\nnodes: {n1: {T4: .nan}}": `nodes.n1["T4"]`,
	} {
		_, err := parsePriceTable([]byte(body))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want %q", body, err, want)
		}
	}
}

func TestCostNodeOverride(t *testing.T) {
	usePrices(t, "currency: USD\nmodels: {A: 2, B: 3}\nnodes:\n  gpu-07: {A: 1}\n")
	for node, want := range map[string][2]float64{"gpu-07": {1, 3}, "gpu-08": {2, 3}} {
		c, err := newCostCollector(Config{NodeName: node})
		if err != nil {
			t.Fatal(err)
		}
		prices := c.(*costCollector).prices
		if prices["A"] != want[0] || prices["B"] != want[1] {
			t.Errorf("node %s: prices %v, want A=%v B=%v", node, prices, want[0], want[1])
		}
	}
}

// pricedExporter serves the scenario's NVIDIA GPUs with the nvidia and
// cost collectors under the price table, and returns its log.
func pricedExporter(t *testing.T, prices, scenario string) (*Exporter, *syncbuf.Buffer) {
	t.Helper()
	usePrices(t, prices)
	s, err := demo.Parse([]byte(scenario))
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncbuf.Buffer{}
	e := newExporterOf(t, Config{NVML: s.NVML(testStart, func() time.Time { return testNow }), Now: func() time.Time { return testNow },
		Logger: slog.New(slog.NewTextHandler(logs, nil))}, "nvidia", "cost")
	return e, logs
}

// TestCostUnpricedModels: devices whose model the table lacks have no price,
// and would drop out of every cost sum unseen: they are counted per model,
// and each model is logged once (found by probing).
func TestCostUnpricedModels(t *testing.T) {
	e, logs := pricedExporter(t, "currency: USD\nmodels:\n  NVIDIA H100 80GB HBM3: 4\n", `node: cost-node
devices:
  - {model: NVIDIA H100 80GB HBM3, memory_total: 80GiB}
  - {model: Tesla T4, memory_total: 16GiB}
  - {model: Tesla T4, memory_total: 16GiB}
`)
	for range 2 {
		out := scrapeText(t, e, 5*time.Second)
		// One H100 priced; two T4s not: a count of 2 for their model.
		if n := seriesCount(out, "xpu_device_hourly_cost"); n != 1 {
			t.Errorf("%d cost series, want the H100's alone", n)
		}
		if v := sample(t, out, "xpu_cost_unpriced_devices", `model="Tesla T4"`, `vendor="nvidia"`); v != 2 {
			t.Errorf("unpriced T4s: %v, want 2", v)
		}
		if strings.Contains(out, `xpu_cost_unpriced_devices{model="NVIDIA H100`) {
			t.Error("the priced H100 is counted as unpriced")
		}
	}
	if n := strings.Count(logs.String(), "no price for this device model"); n != 1 {
		t.Errorf("%d log lines for the unpriced model over two scrapes, want 1:\n%s", n, logs.String())
	}
}

// TestCostDeviceOfUnknownModel: a GPU lost before its model was read has
// no price the table could give it: it is counted unpriced, by its vendor
// alone, and told once, so that the node's cost is not taken for whole
// (found by probing: probe16-surfaces D1, a 2-GPU node costing one GPU's
// price with 0 devices unpriced).
func TestCostDeviceOfUnknownModel(t *testing.T) {
	e, logs := pricedExporter(t, "currency: USD\nmodels:\n  NVIDIA H100 80GB HBM3: 2.5\n", `node: cost-node
defaults: {model: NVIDIA H100 80GB HBM3, memory_total: 80GiB}
devices:
  - {}
  - {faults: {lost: true}}
`)
	for range 2 {
		out := scrapeText(t, e, 5*time.Second)
		// One GPU priced, the lost one unpriced: 1 + 1 = the 2 devices.
		if n := seriesCount(out, "xpu_device_hourly_cost"); n != 1 {
			t.Errorf("%d cost series, want the GPU that answered's", n)
		}
		if !strings.Contains(out, `xpu_cost_unpriced_devices{vendor="nvidia"} 1`+"\n") {
			t.Errorf("the lost GPU is not counted unpriced:\n%s", grepLines(out, "xpu_cost"))
		}
	}
	if n := strings.Count(logs.String(), "model is unknown"); n != 1 {
		t.Errorf("%d log lines for the device of unknown model over two scrapes, want 1:\n%s", n, logs.String())
	}
}

// TestCostNodesOnlyTable: a table of per-node prices alone (one cluster
// ConfigMap, a section per node pool) on a node it does not list prices
// none of its devices, and counts them as unpriced, as with an empty
// models: section; they dropped out of every cost sum unseen (found by
// probing). On a listed node its prices hold.
func TestCostNodesOnlyTable(t *testing.T) {
	usePrices(t, "currency: EUR\nnodes:\n  other-node: {NVIDIA H100 80GB HBM3: 1.8}\n")
	s, err := demo.Parse([]byte(`node: bill-node
devices:
  - {model: NVIDIA H100 80GB HBM3, memory_total: 80GiB}
  - {model: NVIDIA H100 80GB HBM3, memory_total: 80GiB}
`))
	if err != nil {
		t.Fatal(err)
	}
	for node, want := range map[string]string{
		"bill-node":  `xpu_cost_unpriced_devices{model="NVIDIA H100 80GB HBM3",vendor="nvidia"} 2`,
		"other-node": `xpu_device_hourly_cost{currency="EUR",gpu="0",`,
	} {
		e := newExporterOf(t, Config{NVML: s.NVML(testStart, func() time.Time { return testNow }), Now: func() time.Time { return testNow }, NodeName: node}, "nvidia", "cost")
		if out := scrapeText(t, e, 5*time.Second); !strings.Contains(out, want) {
			t.Errorf("node %s: no %s in\n%s", node, want, grepLines(out, "cost"))
		}
	}
}
