package collector

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestCost(t *testing.T) {
	path := filepath.Join(t.TempDir(), "prices.yaml")
	os.WriteFile(path, []byte("currency: EUR\nmodels:\n  NVIDIA H100 80GB HBM3: 2.5\nnodes:\n  demo-node:\n    NVIDIA H100 80GB HBM3: 1.75\n"), 0o644)
	old := *costFile
	*costFile = path
	t.Cleanup(func() { *costFile = old })

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
	path := filepath.Join(t.TempDir(), "prices.yaml")
	os.WriteFile(path, []byte("currency: USD\nmodels: {A: 2, B: 3}\nnodes:\n  gpu-07: {A: 1}\n"), 0o644)
	old := *costFile
	*costFile = path
	t.Cleanup(func() { *costFile = old })
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
