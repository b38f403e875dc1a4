package engines

import (
	"bytes"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
)

var update = flag.Bool("update", false, "rewrite the golden files in fixtures/engines/golden")

var fixtureDir = filepath.Join("..", "fixtures", "engines")

// fixtures are the real engine samples; see fixtures/engines/SOURCES.md.
var fixtures = []struct {
	file         string
	engine       Engine
	defaultModel string
}{
	{"vllm-v0-0.5-datadog-fixture.prom", VLLM, ""},
	{"vllm-v0-plus-v1-names-datadog-fixture.prom", VLLM, ""},
	{"vllm-0.10.0-v1-fragment-production-stack-issue617.prom", VLLM, ""},
	{"sglang-v0.4-docs-production-metrics.prom", SGLang, ""},
	{"sglang-v0.5.10.post1-datadog-fixture.prom", SGLang, ""},
	{"tgi-datadog-fixture.prom", TGI, "configured/tgi-model"},
	{"triton-densenet-t4-datadog-fixture.prom", Triton, ""},
	{"triton-trtllm-backend-readme.prom", Triton, ""},
	{"nim-llama3.1-8b-datadog-fixture.prom", NIM, ""},
}

// readFixture returns a sample with the final newline several of them lack,
// which the text parser rightly insists on.
func readFixture(t testing.TB, file string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(fixtureDir, file))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasSuffix(data, []byte("\n")) {
		data = append(data, '\n')
	}
	return data
}

func parseFixture(t *testing.T, file string) map[string]*dto.MetricFamily {
	t.Helper()
	families, err := parse(bytes.NewReader(readFixture(t, file)))
	if err != nil {
		t.Fatalf("parsing %s: %v", file, err)
	}
	return families
}

func TestGolden(t *testing.T) {
	for _, fx := range fixtures {
		t.Run(fx.file, func(t *testing.T) {
			families := parseFixture(t, fx.file)
			samples, err := Normalize(fx.engine, families, fx.defaultModel)
			if err != nil {
				t.Fatalf("Normalize: %v", err)
			}
			got := fmt.Sprintf("# %s normalised as %s, default model %q\n%s", fx.file, fx.engine, fx.defaultModel, render(samples))
			golden := filepath.Join(fixtureDir, "golden", strings.TrimSuffix(fx.file, ".prom")+".golden")
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./engines -update to create it)", err)
			}
			if got != string(want) {
				t.Errorf("output differs from %s (run go test ./engines -update and review the diff):\n%s", golden, got)
			}
		})
	}
}

func TestFixtureWithoutFinalNewlineIsRejected(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(fixtureDir, "vllm-v0-0.5-datadog-fixture.prom"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.HasSuffix(data, []byte("\n")) {
		t.Fatal("fixture gained a final newline; it is kept verbatim from its source")
	}
	if _, err := parse(bytes.NewReader(data)); err == nil {
		t.Error("parse accepted an exposition cut short of its final newline")
	}
}

// render writes samples in the text exposition format, one family after
// another, so golden files read like what the exporter will serve.
func render(samples []Sample) string {
	var b strings.Builder
	for i, s := range samples {
		if i == 0 || samples[i-1].Name != s.Name {
			fmt.Fprintf(&b, "# TYPE %s %s\n", s.Name, s.Kind)
		}
		if s.Kind != Histogram {
			fmt.Fprintf(&b, "%s%s %s\n", s.Name, labelKey(s.Labels), formatFloat(s.Value))
			continue
		}
		for _, bucket := range s.Buckets {
			labels := maps.Clone(s.Labels)
			labels["le"] = formatFloat(bucket.UpperBound)
			fmt.Fprintf(&b, "%s_bucket%s %d\n", s.Name, labelKey(labels), bucket.Count)
		}
		fmt.Fprintf(&b, "%s_sum%s %s\n", s.Name, labelKey(s.Labels), formatFloat(s.Sum))
		fmt.Fprintf(&b, "%s_count%s %d\n", s.Name, labelKey(s.Labels), s.Count)
	}
	return b.String()
}

func formatFloat(v float64) string {
	return strconv.FormatFloat(v, 'g', -1, 64)
}
