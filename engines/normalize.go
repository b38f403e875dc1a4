package engines

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"
)

// Engine names an inference engine. Its value is what the collector puts in
// the engine label.
type Engine string

// The engines this package knows.
const (
	VLLM   Engine = "vllm"
	SGLang Engine = "sglang"
	TGI    Engine = "tgi"
	Triton Engine = "triton"
	NIM    Engine = "nim"
)

var specs = map[Engine]spec{
	VLLM:   vllmSpec,
	SGLang: sglangSpec,
	TGI:    tgiSpec,
	Triton: tritonSpec,
	NIM:    nimSpec,
}

// detectOrder puts Triton first: it hosts other engines as backends (its
// vLLM backend serves vllm: families beside nv_inference_ ones), never the
// reverse. NIM is last: it is recognised by unprefixed vLLM-style names,
// which are the least specific.
var detectOrder = []Engine{Triton, VLLM, SGLang, TGI, NIM}

// ParseEngine validates an engine name taken from configuration, whatever
// its case: people write the names as the projects do (vLLM, SGLang, TGI),
// and no two engines differ in case only.
func ParseEngine(name string) (Engine, error) {
	if _, ok := specs[Engine(strings.ToLower(name))]; !ok {
		known := make([]string, len(detectOrder))
		for i, e := range detectOrder {
			known[i] = string(e)
		}
		return "", fmt.Errorf("unknown inference engine %q (known: %s)", name, strings.Join(known, ", "))
	}
	return Engine(strings.ToLower(name)), nil
}

// Wanted says whether an engine family is read by some mapping, or tells
// which engine exposed it: scrapes parse only such families.
func Wanted(name string) bool {
	if mappedFamilies[name] {
		return true
	}
	for _, e := range detectOrder {
		if specs[e].owns(name) {
			return true
		}
	}
	return false
}

// Serves says whether families hold any family of engine: one it is known
// by or one its mappings read. A 200 answer holding none (a login page, the
// wrong port, another engine's endpoint) is not that engine's metrics.
func Serves(engine Engine, families map[string]*dto.MetricFamily) bool {
	sp, ok := specs[engine]
	if !ok {
		return false
	}
	for name := range families {
		// A family another engine owns says nothing of this one: Triton
		// reads vllm: families, which a vLLM endpoint serves alone.
		if sp.owns(name) || readFamilies[engine][name] && !ownedByOther(engine, name) {
			return true
		}
	}
	return false
}

// ownedByOther says whether name is the family of an engine other than
// engine.
func ownedByOther(engine Engine, name string) bool {
	for e, sp := range specs {
		if e != engine && sp.owns(name) {
			return true
		}
	}
	return false
}

// readFamilies are the engine families each engine's mappings read,
// sources behind ratios and durations included.
var readFamilies = func() map[Engine]map[string]bool {
	out := map[Engine]map[string]bool{}
	for e, sp := range specs {
		reads := map[string]bool{}
		var add func(src source)
		add = func(src source) {
			reads[src.name] = true
			if src.over != nil {
				add(*src.over)
			}
			if src.count != nil {
				add(*src.count)
			}
		}
		for _, m := range sp.mappings {
			for _, src := range m.from {
				add(src)
			}
		}
		out[e] = reads
	}
	return out
}()

// mappedFamilies are the families some engine's mappings read.
var mappedFamilies = func() map[string]bool {
	out := map[string]bool{}
	for _, reads := range readFamilies {
		for name := range reads {
			out[name] = true
		}
	}
	return out
}()

// PassedThrough is the engine whose names an answer of engine that has none
// of engine's own families is read by: the backend whose families an
// engine that passes its backend's through serves (see spec.passesThrough).
// False for any other engine, or when no backend's families are there.
func PassedThrough(engine Engine, families map[string]*dto.MetricFamily) (Engine, bool) {
	if !specs[engine].passesThrough {
		return "", false
	}
	backend, err := Detect(families)
	return backend, err == nil
}

// Detect guesses which engine exposed families, for targets configured
// without one.
func Detect(families map[string]*dto.MetricFamily) (Engine, error) {
	for _, e := range detectOrder {
		for name := range families {
			if specs[e].owns(name) {
				return e, nil
			}
		}
	}
	return "", errors.New("no metric of a known inference engine found")
}

// Kept lists, for each family engine reads, the labels its mappings keep
// apart: the model, the labels renamed into canonical ones, a reason turned
// into an outcome, a label a source selects by. Every other label of the
// family (an engine core, a rank) is added up, so two series that differ
// only in those feed one canonical series. The map is shared: read it only.
func Kept(engine Engine) map[string][]string { return keptLabels[engine] }

// Replicas names the rank labels of engine whose series are copies of one
// another (see spec.replicas): Normalize reads one of them, never their
// sum. The slice is shared: read it only.
func Replicas(engine Engine) []string { return specs[engine].replicas }

// modelLabels are the labels of engine's series that tell one model from
// another: its model label and those kept with it (Triton's version), in
// a fixed order. Every other label is a part of the model's series or
// tells its series apart.
func modelLabels(engine Engine) []string {
	sp := specs[engine]
	names := slices.Sorted(maps.Keys(sp.keep))
	if sp.model != "" {
		names = append(names, sp.model)
	}
	return names
}

// keptLabels is Kept's answer for every engine, worked out once rather than
// at each scrape of each target.
var keptLabels = func() map[Engine]map[string][]string {
	all := map[Engine]map[string][]string{}
	for engine, sp := range specs {
		out := map[string][]string{}
		add := func(family string, names ...string) {
			for _, n := range names {
				if n != "" && !slices.Contains(out[family], n) {
					out[family] = append(out[family], n)
				}
			}
		}
		for _, m := range sp.mappings {
			var outcome string
			if m.outcome != nil {
				outcome = m.outcome.label
			}
			for _, src := range m.from {
				for _, s := range []*source{&src, src.over, src.count} {
					if s == nil {
						continue
					}
					add(s.name, sp.model, outcome, s.match.name)
					for k := range sp.keep {
						add(s.name, k)
					}
				}
			}
		}
		all[engine] = out
	}
	return all
}()

// Others lists the engines other than engine whose own families are among
// families, in detection order: an endpoint that merges two engines'
// metrics (a gateway in front of both) is read as one of them, and the rest
// must not go unmentioned. An engine whose families engine's mappings read
// is its backend, not another engine (Triton's vLLM backend).
func Others(engine Engine, families map[string]*dto.MetricFamily) []Engine {
	var out []Engine
	for _, e := range detectOrder {
		if e == engine || hosts(engine, e) {
			continue
		}
		for name := range families {
			if specs[e].owns(name) {
				out = append(out, e)
				break
			}
		}
	}
	return out
}

// hosts says whether engine's mappings read families of backend.
func hosts(engine, backend Engine) bool {
	for name := range readFamilies[engine] {
		if specs[backend].owns(name) {
			return true
		}
	}
	return false
}

// Normalize maps the families scraped from engine onto the canonical
// families. defaultModel names the model of series whose engine reports none
// (TGI never does).
//
// Like prometheus.Gatherer, Normalize returns what it could map together
// with an error describing the series it had to skip. The samples are sorted
// by name, then labels.
func Normalize(engine Engine, families map[string]*dto.MetricFamily, defaultModel string) ([]Sample, error) {
	s, ok := specs[engine]
	if !ok {
		return nil, fmt.Errorf("unknown inference engine %q", engine)
	}
	n := normalizer{spec: s, families: families, defaultModel: defaultModel}
	var (
		out  []keyedSample
		errs []error
	)
	for _, m := range s.mappings {
		chosen := map[string]Sample{}
		// A series a preferred source has but could not read is left out,
		// not taken from the next source: that one is an older name, or
		// another definition (per request rather than per token), which
		// would be served under this family's name as if it were this one.
		blocked := map[string]bool{}
		for _, src := range m.from {
			got, broken, err := n.read(familyByName[m.family], m, src)
			if err != nil {
				errs = append(errs, err)
			}
			for key, sample := range got {
				if _, taken := chosen[key]; !taken && !blocked[key] {
					chosen[key] = sample
				}
			}
			for key := range broken {
				if _, taken := chosen[key]; !taken {
					blocked[key] = true
				}
			}
		}
		for key, sample := range chosen {
			out = append(out, keyedSample{key, sample})
		}
	}
	slices.SortFunc(out, func(a, b keyedSample) int {
		return cmp.Or(cmp.Compare(a.s.Name, b.s.Name), cmp.Compare(a.key, b.key))
	})
	samples := make([]Sample, len(out))
	for i := range out {
		samples[i] = out[i].s
	}
	return samples, errors.Join(errs...)
}

// keyedSample is a sample with its labelKey, by which the sources key
// their samples already and Normalize sorts them.
type keyedSample struct {
	key string
	s   Sample
}

// spec is how one engine's metrics map onto the canonical families.
type spec struct {
	// owns tells whether a metric family name is one this engine exposes.
	owns func(name string) bool
	// passesThrough says the engine may serve its backend's own families
	// instead of its own (NIM 2.x): an answer without its own is read by
	// the backend's names.
	passesThrough bool
	// model is the engine label naming the model, if the engine has one.
	model string
	// keep renames the engine labels that tell models apart. Every other
	// label, engine core and rank labels included, is aggregated away.
	keep map[string]string
	// replicas are rank labels whose series hold copies of one state,
	// each rank writing what its peers write: of series that differ only
	// in them one is read, the one furthest along (the largest value or
	// count; a rank caught between two writes lags), where adding them up
	// would count the same requests once per rank.
	replicas []string
	mappings []mapping
}

// mapping feeds one canonical family.
type mapping struct {
	family string
	// from lists engine series, preferred first. For each canonical label
	// set the first source that has it wins, so a release exposing both an
	// old and a new name yields one series, from the new name.
	from []source
	// set adds a constant label, such as the token type.
	set label
	// outcome turns the engine's reason for ending a request into the
	// outcome label.
	outcome *outcomes
}

type label struct{ name, value string }

// source is an engine metric family feeding a mapping.
type source struct {
	name string
	// match keeps only the series with this label value: TRT-LLM packs
	// several readings into one family. An empty value keeps the series
	// without the label too, which Prometheus holds the same.
	match label
	// div converts values, sums and bucket bounds to base units. Dividing
	// by a power of ten keeps 100 ms exactly 0.1 s.
	div float64
	// hsum takes the _sum of a histogram as a counter: TGI counts tokens
	// only as per-request histograms.
	hsum bool
	// over divides the value by this source's series with the same
	// canonical labels.
	over *source
	// count makes the value a cumulative duration and this source's series
	// with the same canonical labels its observation count, giving a
	// histogram with only the +Inf bucket: the mean is right and no
	// quantile is made up.
	count *source
}

func sources(names ...string) []source {
	out := make([]source, len(names))
	for i, name := range names {
		out[i] = source{name: name}
	}
	return out
}

func (s source) divisor() float64 {
	if s.div == 0 {
		return 1
	}
	return s.div
}

func (s source) matches(m *dto.Metric) bool {
	if s.match.name == "" {
		return true
	}
	for _, lp := range m.GetLabel() {
		if lp.GetName() == s.match.name {
			return lp.GetValue() == s.match.value
		}
	}
	return s.match.value == ""
}

// outcomes maps an engine label carrying the reason a request ended.
type outcomes struct {
	label  string
	values map[string]string
	// other is the outcome of any other reason, or of no reason at all.
	other string
}

func (o *outcomes) of(reason string) string {
	if v, ok := o.values[reason]; ok {
		return v
	}
	return o.other
}

type normalizer struct {
	spec         spec
	families     map[string]*dto.MetricFamily
	defaultModel string
}

// read turns one source into samples keyed by their canonical labels, and
// gives the keys of the series it had to leave out.
func (n *normalizer) read(f Family, m mapping, src source) (map[string]Sample, map[string]bool, error) {
	switch {
	case src.over != nil:
		return n.ratio(f, m, src)
	case src.count != nil:
		return n.durations(f, m, src)
	}
	if n.families[src.name] == nil && f.Kind == Histogram && (n.families[src.name+"_bucket"] != nil || n.families[src.name+"_count"] != nil) {
		// Without its TYPE line a histogram's lines are untyped families
		// of their own (x_bucket, x_sum, x_count), which Prometheus reads
		// as such: told, not dropped unseen.
		return nil, nil, fmt.Errorf("%s: histogram lines without a \"# TYPE %s histogram\" line are untyped series, not read as a histogram", src.name, src.name)
	}
	out := map[string]Sample{}
	broken := map[string]bool{}
	var errs []error
	for _, metric := range n.series(src) {
		labels := n.labels(metric, m)
		key := labelKey(labels)
		s, err := src.sample(f.Kind, metric)
		if err == nil && f.Kind != Histogram {
			err = f.malformed(s.Value)
		}
		if prev, ok := out[key]; ok && err == nil {
			s, err = merge(f, prev, s)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", seriesName(src.name, metric), err))
			broken[key] = true
			continue
		}
		s.Name, s.Kind, s.Labels = f.Name, f.Kind, labels
		out[key] = s
	}
	// A series that lost one of its parts would be silently wrong.
	for key := range broken {
		delete(out, key)
	}
	return out, broken, errors.Join(errs...)
}

func (n *normalizer) ratio(f Family, m mapping, src source) (map[string]Sample, map[string]bool, error) {
	num, brokenNum, errNum := n.sums(m, src)
	den, brokenDen, errDen := n.sums(m, *src.over)
	broken := union(brokenNum, brokenDen)
	errs := []error{errNum, errDen}
	out := map[string]Sample{}
	for key, p := range num {
		d, ok := den[key]
		if !ok || !(d.value > 0) || broken[key] {
			continue
		}
		if err := f.malformed(p.value / d.value); err != nil {
			errs = append(errs, fmt.Errorf("%s%s over %s: %w", src.name, key, src.over.name, err))
			broken[key] = true
			continue
		}
		out[key] = Sample{Name: f.Name, Kind: f.Kind, Labels: p.labels, Value: p.value / d.value}
	}
	return out, broken, errors.Join(errs...)
}

func (n *normalizer) durations(f Family, m mapping, src source) (map[string]Sample, map[string]bool, error) {
	sums, brokenSum, errSum := n.sums(m, src)
	counts, brokenCount, errCount := n.sums(m, *src.count)
	broken := union(brokenSum, brokenCount)
	errs := []error{errSum, errCount}
	out := map[string]Sample{}
	for key, p := range sums {
		c, ok := counts[key]
		if !ok || broken[key] {
			continue
		}
		count, err := toCount(c.value)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s%s: %w", src.count.name, key, err))
			broken[key] = true
			continue
		}
		if p.value < 0 {
			errs = append(errs, fmt.Errorf("%s%s: %g is negative, which no count is", src.name, key, p.value))
			broken[key] = true
			continue
		}
		out[key] = Sample{
			Name: f.Name, Kind: f.Kind, Labels: p.labels,
			Buckets: []Bucket{{UpperBound: math.Inf(1), Count: count}},
			Count:   count,
			Sum:     p.value,
		}
	}
	return out, broken, errors.Join(errs...)
}

// union is the keys of a and b, in a new map.
func union(a, b map[string]bool) map[string]bool {
	out := make(map[string]bool, len(a)+len(b))
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}

type point struct {
	labels map[string]string
	value  float64
}

// sums reads a source's gauge or counter series, adding up those that share
// canonical labels. A sum missing one of its parts would be silently
// wrong: it is left out, and its key returned as broken.
func (n *normalizer) sums(m mapping, src source) (map[string]point, map[string]bool, error) {
	out := map[string]point{}
	broken := map[string]bool{}
	var errs []error
	for _, metric := range n.series(src) {
		labels := n.labels(metric, m)
		key := labelKey(labels)
		v, err := scalar(metric)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", seriesName(src.name, metric), err))
			broken[key] = true
			continue
		}
		p := out[key]
		p.labels = labels
		p.value += v / src.divisor()
		out[key] = p
	}
	for key := range broken {
		delete(out, key)
	}
	return out, broken, errors.Join(errs...)
}

// series are the series of src to read: those it matches, one of each
// set of replicas.
func (n *normalizer) series(src source) []*dto.Metric {
	var out []*dto.Metric
	at := map[string]int{} // the labels but the replicas' → index in out
	for _, m := range n.families[src.name].GetMetric() {
		if !src.matches(m) {
			continue
		}
		if len(n.spec.replicas) == 0 {
			out = append(out, m)
			continue
		}
		group := seriesKey(src.name, without(m.GetLabel(), n.spec.replicas))
		i, seen := at[group]
		switch {
		case !seen:
			at[group] = len(out)
			out = append(out, m)
		case progress(m) > progress(out[i]):
			out[i] = m
		}
	}
	return out
}

// progress is how far a series has counted: a histogram's count, else its
// value; NaN or a series that cannot be read is behind any other.
func progress(m *dto.Metric) float64 {
	v, err := scalar(m)
	if h := m.GetHistogram(); h != nil {
		v, err = h.GetSampleCountFloat(), nil
		if h.SampleCount != nil {
			v = float64(h.GetSampleCount())
		}
	}
	if err != nil || math.IsNaN(v) {
		return math.Inf(-1)
	}
	return v
}

// labels builds the canonical labels of an engine series.
func (n *normalizer) labels(metric *dto.Metric, m mapping) map[string]string {
	out := map[string]string{modelLabel: n.defaultModel}
	reason := ""
	for _, lp := range metric.GetLabel() {
		name, value := lp.GetName(), lp.GetValue()
		if value == "" {
			// An empty label value is the same as no label.
			continue
		}
		switch {
		case n.spec.model != "" && name == n.spec.model:
			out[modelLabel] = value
		case m.outcome != nil && name == m.outcome.label:
			reason = value
		default:
			if to, ok := n.spec.keep[name]; ok {
				out[to] = value
			}
		}
	}
	if m.set.name != "" {
		out[m.set.name] = m.set.value
	}
	if m.outcome != nil {
		out[outcomeLabel] = m.outcome.of(reason)
	}
	return out
}

// sample reads one engine series as the given canonical kind.
func (s source) sample(kind Kind, metric *dto.Metric) (Sample, error) {
	switch {
	case kind == Histogram:
		return histogram(metric, s.divisor())
	case s.hsum:
		// A histogram the Corrector could not read (a count ahead of its
		// +Inf bucket, a collection racing an observation) was left
		// uncorrected: its _sum would lack the offset of an earlier
		// restart and read as a counter reset. Left out like the
		// histogram itself.
		if _, err := histogram(metric, 1); err != nil {
			return Sample{}, err
		}
		return Sample{Value: metric.GetHistogram().GetSampleSum() / s.divisor()}, nil
	}
	v, err := scalar(metric)
	return Sample{Value: v / s.divisor()}, err
}

func scalar(m *dto.Metric) (float64, error) {
	switch {
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue(), nil
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue(), nil
	case m.GetUntyped() != nil:
		// OpenMetrics counters reach the text parser as untyped _total
		// series.
		return m.GetUntyped().GetValue(), nil
	}
	return 0, errors.New("not a gauge or counter")
}

// histogram converts a classic histogram, completing a missing +Inf bucket
// from the count (which is that bucket's by definition) and rejecting what
// Prometheus would misread or what would have to be made up.
func histogram(m *dto.Metric, div float64) (Sample, error) {
	h := m.GetHistogram()
	if h == nil {
		return Sample{}, errors.New("not a histogram")
	}
	buckets := make([]Bucket, 0, len(h.GetBucket())+1)
	for _, b := range h.GetBucket() {
		if math.IsNaN(b.GetUpperBound()) {
			return Sample{}, errors.New("bucket bound is NaN")
		}
		c, err := bucketCount(b.CumulativeCount, b.CumulativeCountFloat)
		if err != nil {
			return Sample{}, fmt.Errorf("bucket le=%g: %w", b.GetUpperBound(), err)
		}
		buckets = append(buckets, Bucket{UpperBound: b.GetUpperBound(), Count: c})
	}
	slices.SortFunc(buckets, func(a, b Bucket) int { return cmp.Compare(a.UpperBound, b.UpperBound) })
	for i := 1; i < len(buckets); i++ {
		if buckets[i].UpperBound == buckets[i-1].UpperBound {
			return Sample{}, fmt.Errorf("bucket le=%g appears twice", buckets[i].UpperBound)
		}
		if buckets[i].Count < buckets[i-1].Count {
			return Sample{}, fmt.Errorf("bucket le=%g holds fewer observations than the one below", buckets[i].UpperBound)
		}
	}
	count, hasCount, err := sampleCount(h)
	if err != nil {
		return Sample{}, err
	}
	last := len(buckets) - 1
	switch {
	case last >= 0 && math.IsInf(buckets[last].UpperBound, 1):
		if hasCount && count != buckets[last].Count {
			return Sample{}, fmt.Errorf("count %d differs from the +Inf bucket %d", count, buckets[last].Count)
		}
	case hasCount:
		if last >= 0 && count < buckets[last].Count {
			return Sample{}, fmt.Errorf("count %d is below bucket le=%g", count, buckets[last].UpperBound)
		}
		buckets = append(buckets, Bucket{UpperBound: math.Inf(1), Count: count})
	case last >= 0:
		// How many observations lie above the last bound is unknown: taking
		// none would cap every quantile there.
		return Sample{}, fmt.Errorf("histogram has neither a +Inf bucket nor a count, so what lies above le=%g is unknown", buckets[last].UpperBound)
	default:
		return Sample{}, errors.New("histogram has neither buckets nor a count")
	}
	if h.SampleSum == nil {
		// A mean latency of 0 would be read from the missing sum.
		return Sample{}, errors.New("histogram has no _sum")
	}
	for i := range buckets {
		buckets[i].UpperBound /= div
		if i > 0 && buckets[i].UpperBound <= buckets[i-1].UpperBound {
			return Sample{}, errors.New("bucket bounds collapse when converted to base units")
		}
	}
	return Sample{Buckets: buckets, Count: buckets[len(buckets)-1].Count, Sum: h.GetSampleSum() / div}, nil
}

func sampleCount(h *dto.Histogram) (uint64, bool, error) {
	if h.SampleCount == nil && h.SampleCountFloat == nil {
		return 0, false, nil
	}
	c, err := bucketCount(h.SampleCount, h.SampleCountFloat)
	if err != nil {
		return 0, false, fmt.Errorf("count: %w", err)
	}
	return c, true, nil
}

// bucketCount reads an observation count, which the text parser stores as a
// float when it is not a whole number.
func bucketCount(integer *uint64, float *float64) (uint64, error) {
	if float != nil {
		return toCount(*float)
	}
	if integer == nil {
		return 0, errors.New("missing")
	}
	return *integer, nil
}

func toCount(v float64) (uint64, error) {
	if !(v >= 0 && v < math.Exp2(64)) || v != math.Trunc(v) {
		return 0, fmt.Errorf("%g is not a count of observations", v)
	}
	return uint64(v), nil
}

// merge adds up two series that collapsed into the same canonical labels.
func merge(f Family, a, b Sample) (Sample, error) {
	if f.Kind != Histogram {
		if notFinite(a.Value) || notFinite(b.Value) {
			// Added up or taken the largest of, a NaN makes the whole
			// NaN: one engine core's broken gauge would hide the others'
			// (a full KV cache among them), and the others' alone are not
			// the model's. A series of its own passes through as the
			// engine gave it.
			return Sample{}, errors.New("added up with a part that is not a finite number")
		}
		if f.max {
			a.Value = max(a.Value, b.Value)
		} else {
			a.Value += b.Value
		}
		return a, nil
	}
	if !slices.EqualFunc(a.Buckets, b.Buckets, func(x, y Bucket) bool { return x.UpperBound == y.UpperBound }) {
		return Sample{}, errors.New("cannot add up histograms with different buckets")
	}
	buckets := make([]Bucket, len(a.Buckets))
	for i := range buckets {
		buckets[i] = Bucket{UpperBound: a.Buckets[i].UpperBound, Count: a.Buckets[i].Count + b.Buckets[i].Count}
	}
	a.Buckets = buckets
	a.Count += b.Count
	a.Sum += b.Sum
	return a, nil
}

func notFinite(v float64) bool { return math.IsNaN(v) || math.IsInf(v, 0) }

// labelKey renders labels in a stable, unambiguous order.
func labelKey(labels map[string]string) string {
	names := make([]string, 0, len(labels))
	for name := range labels {
		names = append(names, name)
	}
	slices.Sort(names)
	var b strings.Builder
	b.WriteByte('{')
	for i, name := range names {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(name)
		b.WriteByte('=')
		b.WriteString(strconv.Quote(labels[name]))
	}
	b.WriteByte('}')
	return b.String()
}

// seriesName names an engine series in errors.
func seriesName(family string, m *dto.Metric) string {
	labels := make(map[string]string, len(m.GetLabel()))
	for _, lp := range m.GetLabel() {
		labels[lp.GetName()] = lp.GetValue()
	}
	return family + labelKey(labels)
}
