package collector

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"os"
	"slices"
	"sort"
	"sync"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"
	"gopkg.in/yaml.v3"
)

func init() {
	registerCollector("cost", true, "xpu_device_hourly_cost from the price table in --cost.file (nothing without one)", newCostCollector)
}

var costFile = kingpin.Flag("cost.file",
	"YAML price table: currency, an hourly price per device model, optional per-node prices. Without it no cost series is served, and cost panels say no price is configured.").Default("").String()

var (
	hourlyCost = gauge("device_hourly_cost", "Price of the device per hour, from the configured price table.")
	unpriced   = gauge("cost_unpriced_devices", "Devices of a model the price table has no price for: they have no xpu_device_hourly_cost, and cost rules leave them out.")
)

// priceTable is the --cost.file format.
type priceTable struct {
	Currency string                        `yaml:"currency"`
	Models   map[string]float64            `yaml:"models"`
	Nodes    map[string]map[string]float64 `yaml:"nodes"`
}

type costCollector struct {
	currency string
	prices   map[string]float64 // model → price on this node
	logger   *slog.Logger

	mu sync.Mutex
	// warned are the unpriced models (vendor/model; a device of unknown
	// model under vendor/) already logged, each once.
	warned map[string]bool
}

func newCostCollector(cfg Config) (Collector, error) {
	c := &costCollector{logger: cfg.Logger, warned: map[string]bool{}}
	if *costFile == "" {
		return c, nil
	}
	b, err := os.ReadFile(*costFile)
	if err != nil {
		return nil, fmt.Errorf("--cost.file: %w", err)
	}
	t, err := parsePriceTable(b)
	if err != nil {
		return nil, fmt.Errorf("--cost.file %s: %w", *costFile, err)
	}
	// A table is given: prices is never nil, even without a models:
	// section (per-node prices alone), so that a node it does not list
	// counts its devices unpriced rather than serving no cost at all.
	c.currency, c.prices = t.Currency, map[string]float64{}
	maps.Copy(c.prices, t.Models)
	if override, ok := t.Nodes[cfg.NodeName]; ok {
		maps.Copy(c.prices, override)
	}
	return c, nil
}

func parsePriceTable(b []byte) (priceTable, error) {
	var t priceTable
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&t); err != nil {
		return t, err
	}
	if t.Currency == "" {
		return t, fmt.Errorf("currency: missing (e.g. USD)")
	}
	check := func(where string, prices map[string]float64) error {
		models := make([]string, 0, len(prices))
		for m := range prices {
			models = append(models, m)
		}
		sort.Strings(models)
		for _, m := range models {
			if p := prices[m]; p < 0 || math.IsNaN(p) || math.IsInf(p, 0) {
				return fmt.Errorf("%s[%q]: price %g is not a non-negative number", where, m, p)
			}
		}
		return nil
	}
	if err := check("models", t.Models); err != nil {
		return t, err
	}
	for node, prices := range t.Nodes {
		if err := check("nodes."+node, prices); err != nil {
			return t, err
		}
	}
	return t, nil
}

// Update prices whole devices: a MIG instance's cost is its parent's, split
// by the mixin's chargeback rules.
func (c *costCollector) Update(_ context.Context, snap *Snapshot, ch chan<- prometheus.Metric) error {
	if c.prices == nil {
		return nil
	}
	e := newEmitter(ch)
	defer e.flush()
	// Models without a price, with their vendor (so that the dashboards'
	// Vendor variable filters the count): none on a priced node.
	type model struct{ vendor, name string }
	var missing map[model]int
	for _, d := range snap.Devices {
		// A device is priced by its model, whatever names it (a Gaudi
		// whose identity cells all print N/A too); one lost before its
		// model was read cannot be, and is counted unpriced by its vendor
		// alone.
		if d.MIG != nil {
			continue
		}
		if p, ok := c.prices[d.Model]; ok && d.Model != "" {
			e.emit(hourlyCost, identityLabels(d).with("currency", c.currency), p)
		} else {
			if missing == nil {
				missing = map[model]int{}
			}
			missing[model{d.Vendor, d.Model}]++
		}
	}
	// A device without a price would drop out of every cost sum without a
	// word: it is counted, and its model logged once.
	for _, m := range slices.SortedFunc(maps.Keys(missing), func(a, b model) int { return cmp.Or(cmp.Compare(a.vendor, b.vendor), cmp.Compare(a.name, b.name)) }) {
		l := labels{names: []string{"model", "vendor"}, values: []string{m.name, m.vendor}}
		if m.name == "" {
			l = labels{names: []string{"vendor"}, values: []string{m.vendor}}
		}
		e.emit(unpriced, l, float64(missing[m]))
		c.mu.Lock()
		first := !c.warned[m.vendor+"/"+m.name]
		c.warned[m.vendor+"/"+m.name] = true
		c.mu.Unlock()
		switch {
		case !first:
		case m.name == "":
			c.logger.Warn("a device's model is unknown (lost before it was read): it has no xpu_device_hourly_cost and is left out of cost, counted in xpu_cost_unpriced_devices", "vendor", m.vendor)
		default:
			c.logger.Warn("no price for this device model in --cost.file: its devices have no xpu_device_hourly_cost and are left out of cost", "model", m.name, "file", *costFile)
		}
	}
	return nil
}
