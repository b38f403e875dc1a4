package collector

import (
	"bytes"
	"context"
	"log/slog"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"google.golang.org/protobuf/proto"

	"github.com/xpu-exporter/xpu_exporter/attribution"
	"github.com/xpu-exporter/xpu_exporter/internal/syncbuf"
)

// replay is a recorded scrape, collected again.
type replay []prometheus.Metric

func (replay) Describe(chan<- *prometheus.Desc) {}
func (r replay) Collect(ch chan<- prometheus.Metric) {
	for _, m := range r {
		ch <- m
	}
}

func (r replay) channel() <-chan prometheus.Metric {
	ch := make(chan prometheus.Metric, len(r))
	r.Collect(ch)
	close(ch)
	return ch
}

// emitted is what fn emits, flushed and taken out of its batches.
func emitted(fn func(emitter)) replay {
	ch := make(chan prometheus.Metric, 1000)
	em := newEmitter(ch)
	fn(em)
	em.flush()
	close(ch)
	return unbatched(ch)
}

func record(e *Exporter) replay {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ch := make(chan prometheus.Metric)
	go func() {
		scrape{e: e, ctx: ctx}.Collect(ch)
		close(ch)
	}()
	var r replay
	for m := range ch {
		r = append(r, m)
	}
	return r
}

// registryText is what promhttp served before the text path: base and the
// scrape gathered by a registry, encoded by expfmt.
func registryText(t *testing.T, base prometheus.Gatherer, r replay) string {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(r)
	mfs, err := prometheus.Gatherers{base, reg}.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&buf, mf); err != nil {
			t.Fatal(err)
		}
	}
	return buf.String()
}

func writeText(t *testing.T, e *Exporter, base prometheus.Gatherer, r replay) string {
	t.Helper()
	mfs, err := base.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	e.writeText(r.channel(), &buf, mfs)
	return buf.String()
}

var droppedFamily = regexp.MustCompile(`(?m)^(# (HELP|TYPE) )?xpu_exposition_dropped_samples_total\b.*\n`)

// baseRegistry stands for main's registry: families that sort before,
// between and after ours.
func baseRegistry() *prometheus.Registry {
	base := prometheus.NewRegistry()
	for _, name := range []string{"go_goroutines", "xpu_exporter_build_info", "xpu_zz_last"} {
		base.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: name + " help"}, func() float64 { return 1 }))
	}
	return base
}

// TestTextMatchesRegistry: the text path writes, byte for byte, what the
// registry and expfmt write for the same samples, on the busiest scrape
// the tests have: attribution of shared GPUs, the process collector,
// engine counters, gauges and histograms, and the exporter's own metrics.
func TestTextMatchesRegistry(t *testing.T) {
	vllm := engineServer(t, "vllm-0.10.0-v1-fragment-production-stack-issue617.prom")
	triton := engineServer(t, "triton-densenet-t4-datadog-fixture.prom")
	setEngineFlags(t, []string{"vllm=" + vllm.URL + "/metrics", "triton=" + triton.URL + "/metrics"})
	e := newAttributedExporterWith(t, loadScenario(t, "sharing"),
		map[string]bool{"nvidia": true, "attribution": true, "process": true, "engines": true, "cost": true}, nil)
	base := baseRegistry()
	for range 2 { // the second scrape has the rates and windows the first starts
		r := record(e)
		want := registryText(t, base, r)
		got := writeText(t, e, base, r)
		if !strings.Contains(want, "_bucket{") || !strings.Contains(want, `container="`) {
			t.Fatalf("the scrape lacks histograms or owners, it proves little:\n%s", want)
		}
		if !strings.Contains(got, "\nxpu_exposition_dropped_samples_total{reason=\"duplicate_series\"} 0\n") {
			t.Errorf("no count of dropped samples:\n%s", grepLines(got, "xpu_exposition"))
		}
		if got := droppedFamily.ReplaceAllString(got, ""); got != want {
			t.Fatalf("text path differs from the registry's encoding:\n%s", lineDiff(want, got))
		}
	}
}

// TestTextOrderWhenSeriesChange: a family's exposition order is kept from
// the scrape before (family.order); the same series sent in another order,
// fewer of them, or others, must still come out as the registry sorts them.
func TestTextOrderWhenSeriesChange(t *testing.T) {
	e := newAttributedExporterWith(t, loadScenario(t, "sharing"),
		map[string]bool{"nvidia": true, "attribution": true, "process": true}, nil)
	base := baseRegistry()
	r := record(e)
	reversed := slices.Clone(r)
	slices.Reverse(reversed)
	var fewer, swapped replay
	for i, m := range r {
		if i%3 != 0 {
			fewer = append(fewer, m)
		}
	}
	swapped = slices.Clone(r)
	for i := 0; i+1 < len(swapped); i += 2 {
		swapped[i], swapped[i+1] = swapped[i+1], swapped[i]
	}
	for _, c := range []struct {
		name string
		r    replay
	}{{"as sent", r}, {"as sent again", r}, {"reversed", reversed}, {"a third left out", fewer}, {"pairs swapped", swapped}, {"as sent at last", r}} {
		want := registryText(t, base, c.r)
		if got := droppedFamily.ReplaceAllString(writeText(t, e, base, c.r), ""); got != want {
			t.Fatalf("%s: text path differs from the registry's encoding:\n%s", c.name, lineDiff(want, got))
		}
	}
}

// lineDiff shows the first lines where two expositions part.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(w) || i < len(g); i++ {
		var a, b string
		if i < len(w) {
			a = w[i]
		}
		if i < len(g) {
			b = g[i]
		}
		if a != b {
			return "line " + strconv.Itoa(i+1) + ":\nwant " + a + "\ngot  " + b
		}
	}
	return "(equal)"
}

// TestTextDropsWhatTheRegistryRefuses: a label name that is not UTF-8, the
// same series twice, and a family the base registry serves too are left out
// and counted, the rest served; each reason is logged when it starts and
// when it ends, not at every scrape in between.
func TestTextDropsWhatTheRegistryRefuses(t *testing.T) {
	var logs syncbuf.Buffer
	e := &Exporter{logger: slog.New(slog.NewTextHandler(&logs, nil))}
	good := gauge("test_text_good", "A good series.")
	bad := gauge("test_text_bad", "A series with a label name that is not UTF-8.")
	conflict := gauge("test_text_conflict", "A family the base registry serves.")
	base := prometheus.NewRegistry()
	base.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "xpu_test_text_conflict", Help: "base's"}, func() float64 { return 7 }))

	faulty := func() replay {
		return emitted(func(em emitter) {
			em.emit(good, labels{names: []string{"gpu"}, values: []string{"0"}}, 1)
			em.emit(good, labels{names: []string{"gpu"}, values: []string{"0"}}, 2) // again
			em.emit(bad, labels{names: []string{"po\xffd"}, values: []string{"a"}}, 3)
			em.emit(conflict, labels{}, 4)
			em.emit(conflict, labels{names: []string{"gpu"}, values: []string{"1"}}, 5)
		})
	}
	want := []string{
		"xpu_test_text_good{gpu=\"0\"} 1\n",
		"xpu_test_text_conflict 7\n", // base's, once
		// Hand count after one scrape: one duplicate, one invalid label,
		// two samples of the conflicting family.
		"xpu_exposition_dropped_samples_total{reason=\"duplicate_series\"} 1\n",
		"xpu_exposition_dropped_samples_total{reason=\"invalid_label\"} 1\n",
		"xpu_exposition_dropped_samples_total{reason=\"family_conflict\"} 2\n",
		"xpu_exposition_dropped_samples_total{reason=\"unknown_metric\"} 0\n",
		"xpu_exposition_dropped_samples_total{reason=\"type_mismatch\"} 0\n",
	}
	out := writeText(t, e, base, faulty())
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("missing %q in:\n%s", w, out)
		}
	}
	for _, absent := range []string{"xpu_test_text_good{gpu=\"0\"} 2", "xpu_test_text_bad", "xpu_test_text_conflict 4", `xpu_test_text_conflict{gpu="1"}`} {
		if strings.Contains(out, absent) {
			t.Errorf("%q was served:\n%s", absent, out)
		}
	}
	if n := strings.Count(out, "# TYPE xpu_test_text_conflict "); n != 1 {
		t.Errorf("family written %d times", n)
	}
	if n := strings.Count(logs.String(), "level=WARN"); n != 1 {
		t.Errorf("%d warnings after the first faulty scrape, want 1:\n%s", n, logs.String())
	}
	out = writeText(t, e, base, faulty())
	// Two faulty scrapes: 2 duplicates, 2 invalid, 4 conflicting.
	if !strings.Contains(out, "xpu_exposition_dropped_samples_total{reason=\"family_conflict\"} 4\n") {
		t.Errorf("conflicts not counted again:\n%s", out)
	}
	if n := strings.Count(logs.String(), "level=WARN"); n != 1 {
		t.Errorf("a lasting fault logged again:\n%s", logs.String())
	}
	writeText(t, e, base, replay{})
	if n := strings.Count(logs.String(), "samples are exposed again"); n != 3 {
		t.Errorf("%d recoveries logged, want 3 (duplicate, invalid, conflict):\n%s", n, logs.String())
	}
}

// TestTextEscaping: label values with a quote, a backslash and a newline,
// and help with a backslash and a newline, are escaped as expfmt does.
func TestTextEscaping(t *testing.T) {
	e := &Exporter{logger: slog.New(slog.DiscardHandler)}
	m := gauge("test_text_escaping", "Help with a \\ and a\nnewline.")
	r := emitted(func(em emitter) {
		em.emit(m, labels{names: []string{"model", "pod"}, values: []string{"a \"quoted\" \\ name\nnext", "ünïcode"}}, 0.25)
	})
	base := prometheus.NewRegistry()
	got := droppedFamily.ReplaceAllString(writeText(t, e, base, r), "")
	want := registryText(t, base, r)
	if got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
	if !strings.Contains(got, `model="a \"quoted\" \\ name\nnext"`) {
		t.Errorf("label value not escaped: %s", got)
	}
}

// TestCompareSeries: series are ordered as the registry orders metrics,
// by label count, then value by value, also where one value is a prefix of
// another or holds a NUL.
func TestCompareSeries(t *testing.T) {
	mk := func(values ...string) *series {
		names := []string{"a", "b"}[:len(values)]
		d := prometheus.NewDesc("x", "x", names, nil)
		pairs := prometheus.MakeLabelPairs(d, values)
		return &series{pairs: pairs}
	}
	for _, c := range []struct {
		a, b *series
		want int
	}{
		{mk("ab", "z"), mk("abc", "a"), -1}, // "ab" < "abc" decides before the second label
		{mk("a", "b"), mk("a", "c"), -1},
		{mk("b", "a"), mk("a", "z"), 1},
		{mk("a\x00", "z"), mk("a", "\x00z"), 1}, // "a\x00" > "a", though joined by NUL both would read "a\x00\x00z"
		{mk("x"), mk("a", "b"), -1},             // fewer labels first
		{mk("a", "b"), mk("a", "b"), 0},
	} {
		if got := sign(compareSeries(c.a, c.b)); got != c.want {
			t.Errorf("compare(%v, %v) = %d, want %d", c.a.pairs, c.b.pairs, got, c.want)
		}
		if got := sign(lessPairs(c.a.pairs, c.b.pairs)); got != c.want {
			t.Errorf("lessPairs disagrees on %v: %d", c, got)
		}
	}
}

func sign(i int) int { return min(max(i, -1), 1) }

// TestLabelsWith: pairs added by with are kept apart until a series is
// made, yet name the same series as the same pairs copied in; labels made
// from one base do not share what they add; a third pair copies them in.
func TestLabelsWith(t *testing.T) {
	base := labels{names: []string{"gpu"}, values: []string{"0"}}
	a, b := base.with("sensor", "gpu"), base.with("sensor", "memory")
	if fa, fb := a.flat(), b.flat(); !slices.Equal(fa.values, []string{"0", "gpu"}) || !slices.Equal(fb.values, []string{"0", "memory"}) {
		t.Errorf("labels from one base share pairs: %v, %v", fa.values, fb.values)
	}
	three := base.with("a", "1").with("b", "2").with("c", "3")
	if three.n != 0 || !slices.Equal(three.names, []string{"gpu", "a", "b", "c"}) || !slices.Equal(three.values, []string{"0", "1", "2", "3"}) {
		t.Errorf("three pairs: %+v", three)
	}
	m := gauge("test_labels_with", "A test family.")
	flat := labels{names: []string{"gpu", "type", "scope"}, values: []string{"0", "corrected", "volatile"}}
	if seriesOf(m, base.with("type", "corrected").with("scope", "volatile")) != seriesOf(m, flat) {
		t.Error("pending pairs and copied pairs name different series")
	}
	if got := string(seriesOf(m, base.with("sensor", "gpu")).text); got != `xpu_test_labels_with{gpu="0",sensor="gpu"}` {
		t.Errorf("series text %s", got)
	}
}

// TestTextOneTypePerFamily: a counter sample in a family first made as a
// gauge is left out and counted, as the registry refuses it; the gauge's
// samples are served.
func TestTextOneTypePerFamily(t *testing.T) {
	e := &Exporter{logger: slog.New(slog.DiscardHandler)}
	r := emitted(func(em emitter) {
		em.emit(gauge("test_text_one_type", "A family."), labels{names: []string{"gpu"}, values: []string{"0"}}, 1)
		em.emit(counter("test_text_one_type", "A family."), labels{names: []string{"gpu"}, values: []string{"1"}}, 2)
	})
	out := writeText(t, e, prometheus.NewRegistry(), r)
	for _, want := range []string{
		"# TYPE xpu_test_text_one_type gauge\n",
		"xpu_test_text_one_type{gpu=\"0\"} 1\n",
		"xpu_exposition_dropped_samples_total{reason=\"type_mismatch\"} 1\n",
		"xpu_exposition_dropped_samples_total{reason=\"invalid_label\"} 0\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	if strings.Contains(out, `gpu="1"`) {
		t.Errorf("the counter sample was served:\n%s", out)
	}
}

// TestCompareSeriesOrdersAsLessPairs: the joined sort key orders series
// exactly as comparing their label values one by one does, also where a
// value is a prefix of another or holds a NUL (those fall back).
func TestCompareSeriesOrdersAsLessPairs(t *testing.T) {
	values := [][]string{
		{"a", "b"}, {"a", ""}, {"", "a"}, {"ab", "a"}, {"a", "ba"}, {"a\x00", "z"}, {"a", "\x00b"},
		{"a\x00b", ""}, {"b", "a"}, {"a", "b"}, {"é", "a"}, {"e", "\xffa"}, {"a"}, {"a", "b", "c"}, {},
	}
	var all []*series
	for _, vs := range values {
		var pairs []*dto.LabelPair
		for i, v := range vs {
			pairs = append(pairs, &dto.LabelPair{Name: proto.String("l" + strconv.Itoa(i)), Value: proto.String(v)})
		}
		all = append(all, &series{pairs: pairs, order: sortKey(pairs)})
	}
	sign := func(c int) int { return min(max(c, -1), 1) }
	for _, a := range all {
		for _, b := range all {
			if got, want := sign(compareSeries(a, b)), sign(lessPairs(a.pairs, b.pairs)); got != want {
				t.Errorf("%q against %q: %d, lessPairs %d", a.order, b.order, got, want)
			}
		}
	}
}

// TestSeriesKey: a series is found by the hash of its name and pairs in
// order, however they are split between names, owner and added pairs, and
// whether or not a device's labels were sealed; any other name, pair or
// order is another series.
func TestSeriesKey(t *testing.T) {
	m := gauge("test_series_key", "A test family.")
	owner := attribution.Owner{Kind: attribution.Kubernetes, Namespace: "ns", Pod: "p", Container: "c"}
	base := labels{names: []string{"gpu"}, values: []string{"0"}}
	withOwner := base.withOwner(owner).with("pid", "7")
	pairs, n := owner.LabelPairs()
	flat := labels{names: []string{"gpu"}, values: []string{"0"}}
	for _, p := range pairs[:n] {
		flat.names, flat.values = append(flat.names, p[0]), append(flat.values, p[1])
	}
	flat.names, flat.values = append(flat.names, "pid"), append(flat.values, "7")
	if seriesKey(m, withOwner) != seriesKey(m, flat) || seriesKey(m, flat) != seriesKey(m, flat.sealed()) {
		t.Error("the same pairs, split or sealed differently, hash differently")
	}
	// Labels made from sealed ones, as a device's owners are from its
	// identity, hash their own pairs.
	sealed := base.sealed()
	other := attribution.Owner{Kind: attribution.Kubernetes, Namespace: "ns", Pod: "q", Container: "c"}
	if seriesKey(m, sealed.withOwner(owner)) == seriesKey(m, sealed.withOwner(other)) || seriesKey(m, sealed.withOwner(owner)) == seriesKey(m, sealed) {
		t.Error("owners added to sealed labels are not hashed")
	}
	for name, other := range map[string]labels{
		"another value":    base.withOwner(owner).with("pid", "8"),
		"values swapped":   labels{names: []string{"gpu", "pid"}, values: []string{"7", "0"}},
		"pairs reordered":  labels{names: []string{"pid", "gpu"}, values: []string{"7", "0"}},
		"a pair less":      base.withOwner(owner),
		"a value split":    labels{names: []string{"gpu", "x"}, values: []string{"0", "7"}},
		"joined otherwise": labels{names: []string{"gpu"}, values: []string{"07"}},
	} {
		if seriesKey(m, other) == seriesKey(m, withOwner) || seriesKey(m, other) == seriesKey(m, labels{names: []string{"gpu", "pid"}, values: []string{"0", "7"}}) {
			t.Errorf("%s: same hash", name)
		}
	}
	if seriesKey(m, base) == seriesKey(gauge("test_series_key2", "Another."), base) {
		t.Error("two names, one hash")
	}
}
