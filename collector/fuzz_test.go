package collector

import (
	"math"
	"net/http"
	"strings"
	"testing"

	"github.com/xpu-exporter/xpu_exporter/engines"
)

// FuzzPriceTable checks that a price table is refused, or has a currency
// and only finite, non-negative prices: the cost series and the mixin's
// chargeback rules multiply them.
func FuzzPriceTable(f *testing.F) {
	// The README's example.
	f.Add([]byte("currency: USD\nmodels:\n  NVIDIA H100 80GB HBM3: 2.49\n  Tesla T4: 0.35\nnodes:\n  gpu-node-07:\n    NVIDIA H100 80GB HBM3: 1.80\n"))
	f.Add([]byte("currency: EUR\nmodels: {A: .inf, B: -0, C: 1e308}\nnodes: {n: {A: .nan}}\n"))
	f.Add([]byte("currency: USD\nmodels: &a {A: 1}\nnodes: {n: *a}\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		table, err := parsePriceTable(b)
		if err != nil {
			return
		}
		if table.Currency == "" {
			t.Fatal("price table accepted without a currency")
		}
		check := func(prices map[string]float64) {
			for m, p := range prices {
				if !(p >= 0) || math.IsInf(p, 0) {
					t.Fatalf("price %v for %q accepted", p, m)
				}
			}
		}
		check(table.Models)
		for _, prices := range table.Nodes {
			check(prices)
		}
	})
}

// FuzzEngineConfig checks that every target an --engines.config file makes
// valid can be requested: a known engine, and a URL net/http accepts with
// a host, whose label form carries no password.
func FuzzEngineConfig(f *testing.F) {
	// The README's example, and the forms of TestEnginesConfigFile.
	f.Add([]byte("targets: [{engine: vllm, url: http://127.0.0.1:8000/metrics, unit: vllm.service}]\n"))
	f.Add([]byte("targets:\n  - {engine: auto, url: 'https://u:p@[::1]:8443/m?x=1#f', pod: ns/name, model: m}\n"))
	f.Add([]byte("targets:\n  - {engine: vllm, url: http://x/metrics, gpu: 3}\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		targets, err := parseEngineConfig(b)
		if err != nil {
			return
		}
		for _, tg := range targets {
			if tg.validate() != nil {
				continue
			}
			if tg.Engine != "auto" {
				if _, err := engines.ParseEngine(tg.Engine); err != nil {
					t.Fatalf("target %+v: engine %v", tg, err)
				}
			}
			req, err := http.NewRequest(http.MethodGet, tg.URL, nil)
			if err != nil || req.URL.Host == "" {
				t.Fatalf("target %+v passed validation, but no request can be made: %v", tg, err)
			}
			// url.URL.Redacted writes any password as "xxxxx".
			if p, ok := req.URL.User.Password(); ok && p != "" && p != "xxxxx" && strings.Contains(redact(tg.URL), ":"+p+"@") {
				t.Fatalf("label %q of %q shows the password", redact(tg.URL), tg.URL)
			}
		}
	})
}
