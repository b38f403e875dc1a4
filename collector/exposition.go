package collector

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/xpu-exporter/xpu_exporter/engines"
)

// The text exposition path. A scrape through prometheus.Registry turns every
// sample into a dto.Metric, checks its consistency, sorts and encodes it:
// most of a scrape's CPU and allocations once the hardware is read. Our
// series are cached with their labels already rendered (metric.go), so a
// scrape writes each sample as that text and its value, in the order the
// registry would (families by name, samples by label values), and keeps the
// checks the registry made that our own series can fail: label values that
// are not UTF-8 and the same series twice in one scrape.

// family is one metric family as the text format writes it.
type family struct {
	name   string
	id     int
	header []byte // # HELP and # TYPE lines
	dtype  dto.MetricType
	help   string
	last   atomic.Pointer[familyOrder]
}

// familyOrder is the exposition order of a family's samples in one scrape:
// in, its series as the collectors sent them, and perm, their indexes in
// the order client_golang's Gather writes them (compareSeries). Collectors
// send a family's series in the same order scrape after scrape, so the next
// scrape usually finds the very same series and takes perm as it is: a
// pointer comparison per sample instead of a sort's string comparisons.
// A familyOrder is never changed once stored, so concurrent scrapes can
// share it.
type familyOrder struct {
	in   []*series
	perm []int32
}

// order returns the indexes of the n series at(i) in exposition order.
func (f *family) order(n int, at func(int) *series) []int32 {
	if o := f.last.Load(); o != nil && len(o.in) == n && sameSeries(o.in, at) {
		return o.perm
	}
	o := &familyOrder{in: make([]*series, n), perm: make([]int32, n)}
	for i := range n {
		o.in[i], o.perm[i] = at(i), int32(i)
	}
	slices.SortFunc(o.perm, func(a, b int32) int { return compareSeries(o.in[a], o.in[b]) })
	f.last.Store(o)
	return o.perm
}

func sameSeries(in []*series, at func(int) *series) bool {
	for i, s := range in {
		if at(i) != s {
			return false
		}
	}
	return true
}

var (
	familiesMu sync.Mutex
	families   = map[string]*family{} // bounded: our families and the engines' fixed table
)

func familyOf(m metric) *family {
	familiesMu.Lock()
	defer familiesMu.Unlock()
	if f, ok := families[m.name]; ok {
		return f
	}
	f := &family{name: m.name, id: len(families), help: m.help, dtype: sampleType(m.typ, m.histogram)}
	typ := strings.ToLower(f.dtype.String())
	var h bytes.Buffer
	legacy := model.LegacyValidation.IsValidMetricName(m.name)
	h.WriteString("# HELP ")
	writeName(&h, m.name, legacy)
	h.WriteByte(' ')
	helpEscaper.WriteString(&h, m.help)
	h.WriteString("\n# TYPE ")
	writeName(&h, m.name, legacy)
	h.WriteString(" " + typ + "\n")
	f.header = h.Bytes()
	families[m.name] = f
	return f
}

var (
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
	valueEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
)

// writeName writes a metric or label name as the text format does: as it
// is when it is a legacy name (legacy), quoted otherwise.
func writeName(b *bytes.Buffer, name string, legacy bool) {
	if legacy {
		b.WriteString(name)
		return
	}
	b.WriteByte('"')
	valueEscaper.WriteString(b, name)
	b.WriteByte('"')
}

// seriesText renders a series' name and labels, or says why the series
// cannot be exposed: what prometheus.Registry's consistency check refuses.
// Values are valid UTF-8 already (seriesOf repairs them); a label name is
// not repaired, as it would no longer say what the label is.
func seriesText(name string, pairs []*dto.LabelPair) ([]byte, error) {
	for _, p := range pairs {
		if !model.UTF8Validation.IsValidLabelName(p.GetName()) {
			return nil, fmt.Errorf("%s: label name %q is not valid", name, p.GetName())
		}
	}
	var b bytes.Buffer
	legacy := model.LegacyValidation.IsValidMetricName(name)
	sep := byte('{')
	if !legacy {
		b.WriteByte('{')
		sep = ','
	}
	writeName(&b, name, legacy)
	for _, p := range pairs {
		b.WriteByte(sep)
		sep = ','
		writeName(&b, p.GetName(), model.LegacyValidation.IsValidLabelName(p.GetName()))
		b.WriteString(`="`)
		valueEscaper.WriteString(&b, p.GetValue())
		b.WriteByte('"')
	}
	if sep == ',' {
		b.WriteByte('}')
	}
	return b.Bytes(), nil
}

// labelText is the series' labels as written inside the braces.
func (s *series) labelText() []byte {
	if len(s.pairs) == 0 {
		return nil
	}
	return s.text[len(s.fam.name)+1 : len(s.text)-1]
}

// histMetric is a histogram sample of a cached series: an inference
// engine's, whose buckets are ascending with +Inf last (engines.Sample).
type histMetric struct {
	series  *series
	buckets []engines.Bucket
	count   uint64
	sum     float64
}

func (h histMetric) Desc() *prometheus.Desc { return h.series.desc }

// Write leaves out the +Inf bucket, as client_golang's histograms do: the
// encoders add it from the sample count.
func (h histMetric) Write(out *dto.Metric) error {
	out.Label = h.series.pairs
	d := &dto.Histogram{SampleCount: &h.count, SampleSum: &h.sum}
	for _, b := range h.buckets {
		if math.IsInf(b.UpperBound, 1) {
			continue
		}
		d.Bucket = append(d.Bucket, &dto.Bucket{UpperBound: &b.UpperBound, CumulativeCount: &b.Count})
	}
	out.Histogram = d
	return nil
}

// Why a sample was left out of the text exposition.
const (
	dropInvalid   = iota // a label the format cannot carry
	dropDuplicate        // the same series twice in one scrape
	dropConflict         // a family the base registry serves too
	dropForeign          // a metric not made by this package
	dropType             // a sample of another type than its family's
	dropReasons
)

var dropReasonNames = [dropReasons]string{"invalid_label", "duplicate_series", "family_conflict", "unknown_metric", "type_mismatch"}

var (
	droppedSamples = counter("exposition_dropped_samples_total",
		"Samples left out of /metrics because they could not be written correctly, by reason; the first of each run of failures is logged.")
	textScrapes = atomic.Uint64{} // identifies a text scrape, for duplicate series
	textPool    = sync.Pool{New: func() any { return new(textScrape) }}
)

// textScrape is one scrape's samples, grouped by family. Pooled: the
// slices keep their capacity from scrape to scrape.
type textScrape struct {
	byFamily []familySamples // by family id
	used     []*family
	drops    [dropReasons]uint64
	firstErr [dropReasons]error
}

type familySamples struct {
	samples []textSample
	hists   []histMetric
}

type textSample struct {
	s *series
	v float64
}

// family returns the samples of f, noting f as used by this scrape.
func (t *textScrape) family(f *family) *familySamples {
	for len(t.byFamily) <= f.id {
		t.byFamily = append(t.byFamily, familySamples{})
	}
	fs := &t.byFamily[f.id]
	if len(fs.samples) == 0 && len(fs.hists) == 0 {
		t.used = append(t.used, f)
	}
	return fs
}

func (t *textScrape) drop(reason int, err error) {
	if t.drops[reason] == 0 {
		t.firstErr[reason] = err
	}
	t.drops[reason]++
}

// accept returns where to file a sample of s, or nil when it must be
// dropped.
func (t *textScrape) accept(s *series, id uint64, histogram bool) *familySamples {
	if s.invalid != nil {
		t.drop(dropInvalid, s.invalid)
		return nil
	}
	if want := s.fam.dtype; want != sampleType(s.typ, histogram) {
		// One family, one type: the registry refuses the sample too.
		t.drop(dropType, fmt.Errorf("%s: a %s sample in a %s family", s.text,
			strings.ToLower(sampleType(s.typ, histogram).String()), strings.ToLower(want.String())))
		return nil
	}
	if s.written.Swap(id) == id {
		t.drop(dropDuplicate, fmt.Errorf("%s was collected twice in one scrape", s.text))
		return nil
	}
	return t.family(s.fam)
}

func (fs *familySamples) clear() {
	fs.samples = fs.samples[:0]
	clear(fs.hists)
	fs.hists = fs.hists[:0]
}

func (t *textScrape) reset() {
	for _, f := range t.used {
		t.byFamily[f.id].clear()
	}
	t.used = t.used[:0]
	t.drops = [dropReasons]uint64{}
	t.firstErr = [dropReasons]error{}
}

func sampleType(typ prometheus.ValueType, histogram bool) dto.MetricType {
	switch {
	case histogram:
		return dto.MetricType_HISTOGRAM
	case typ == prometheus.CounterValue:
		return dto.MetricType_COUNTER
	case typ == prometheus.UntypedValue:
		return dto.MetricType_UNTYPED
	}
	return dto.MetricType_GAUGE
}

// compareSeries orders two series of one family as prometheus.Registry
// orders its metrics: by the number of labels, then by the label values in
// label-name order.
func compareSeries(a, b *series) int {
	if len(a.pairs) == len(b.pairs) && a.order != "" && b.order != "" {
		return strings.Compare(a.order, b.order)
	}
	return lessPairs(a.pairs, b.pairs)
}

// sortKey joins the label values with NULs. NUL sorts below every other
// byte, so for values without NULs the keys compare as the value lists do,
// value by value; a value holding a NUL gives no key.
func sortKey(pairs []*dto.LabelPair) string {
	n := 0
	for _, p := range pairs {
		if strings.IndexByte(p.GetValue(), 0) >= 0 {
			return ""
		}
		n += len(p.GetValue()) + 1
	}
	if n == 0 {
		return ""
	}
	var b strings.Builder
	b.Grow(n)
	for _, p := range pairs {
		b.WriteString(p.GetValue())
		b.WriteByte(0)
	}
	return b.String()
}

func lessPairs(a, b []*dto.LabelPair) int {
	if len(a) != len(b) {
		return len(a) - len(b)
	}
	for i := range a {
		if c := strings.Compare(a[i].GetValue(), b[i].GetValue()); c != 0 {
			return c
		}
	}
	return 0
}

// WriteText writes one scrape bounded by ctx in the text exposition format
// (version 0.0.4), merged by family name with base, the families of the
// process's own registry. It writes what prometheus.Gatherers{base, Bind(ctx)}
// would encode, without building a dto.Metric per sample.
func (e *Exporter) WriteText(ctx context.Context, out *bytes.Buffer, base []*dto.MetricFamily) {
	ch := make(chan prometheus.Metric, 256)
	go func() {
		scrape{e: e, ctx: ctx}.collect(ch)
		close(ch)
	}()
	e.writeText(ch, out, base)
}

// writeText writes the metrics of ch, a scrape's, merged with base.
func (e *Exporter) writeText(ch <-chan prometheus.Metric, out *bytes.Buffer, base []*dto.MetricFamily) {
	t := textPool.Get().(*textScrape)
	defer func() {
		t.reset()
		textPool.Put(t)
	}()
	id := textScrapes.Add(1)
	for m := range ch {
		switch m := m.(type) {
		case batch:
			for i := range m {
				if fs := t.accept(m[i].series, id, false); fs != nil {
					fs.samples = append(fs.samples, textSample{m[i].series, m[i].value})
				}
			}
		case *cachedMetric:
			if fs := t.accept(m.series, id, false); fs != nil {
				fs.samples = append(fs.samples, textSample{m.series, m.value})
			}
		case *createdMetric:
			// The text format has no created timestamp.
			if fs := t.accept(m.series, id, false); fs != nil {
				fs.samples = append(fs.samples, textSample{m.series, m.value})
			}
		case histMetric:
			if fs := t.accept(m.series, id, true); fs != nil {
				fs.hists = append(fs.hists, m)
			}
		default:
			t.drop(dropForeign, fmt.Errorf("%s is not a series of this exporter", m.Desc()))
		}
	}

	t.leaveOutConflicts(base)
	e.countDrops(t, id)
	slices.SortFunc(t.used, func(a, b *family) int { return strings.Compare(a.name, b.name) })

	ours := t.used
	for len(ours) > 0 || len(base) > 0 {
		if len(ours) == 0 || (len(base) > 0 && base[0].GetName() < ours[0].name) {
			if _, err := expfmt.MetricFamilyToText(out, base[0]); err != nil {
				e.logger.Error("cannot encode a family of the exporter's registry", "family", base[0].GetName(), "err", err)
			}
			base = base[1:]
			continue
		}
		t.write(out, ours[0])
		ours = ours[1:]
	}
}

// leaveOutConflicts drops our families that base serves too: two blocks of
// one family would make the whole exposition invalid.
func (t *textScrape) leaveOutConflicts(base []*dto.MetricFamily) {
	kept := t.used[:0]
	for _, f := range t.used {
		_, found := slices.BinarySearchFunc(base, f.name, func(mf *dto.MetricFamily, name string) int {
			return strings.Compare(mf.GetName(), name)
		})
		if !found {
			kept = append(kept, f)
			continue
		}
		fs := &t.byFamily[f.id]
		t.drop(dropConflict, fmt.Errorf("family %s is served by the exporter's own registry too", f.name))
		t.drops[dropConflict] += uint64(len(fs.samples) + len(fs.hists) - 1)
		fs.clear()
	}
	t.used = kept
}

// countDrops adds this scrape's left-out samples to the totals, logs a
// reason when it starts and when it ends (not at every scrape it lasts),
// and files the totals as a family of this scrape.
func (e *Exporter) countDrops(t *textScrape, id uint64) {
	var errs []error
	for r := range dropReasons {
		n := t.drops[r]
		e.dropped[r].Add(n)
		if n > 0 && !e.dropping[r].Swap(true) {
			errs = append(errs, t.firstErr[r])
		} else if n == 0 && e.dropping[r].Swap(false) {
			e.logger.Info("samples are exposed again", "reason", dropReasonNames[r])
		}
	}
	if len(errs) > 0 {
		e.logger.Warn("samples left out of /metrics", "err", errors.Join(errs...))
	}
	for r := range dropReasons {
		s := seriesOf(droppedSamples, labels{}.with("reason", dropReasonNames[r]))
		if fs := t.accept(s, id, false); fs != nil {
			fs.samples = append(fs.samples, textSample{s, float64(e.dropped[r].Load())})
		}
	}
}

func (t *textScrape) write(out *bytes.Buffer, f *family) {
	if f.dtype == dto.MetricType_HISTOGRAM {
		t.writeHistograms(out, f)
		return
	}
	ss := t.byFamily[f.id].samples
	out.Write(f.header)
	for _, i := range f.order(len(ss), func(i int) *series { return ss[i].s }) {
		s := ss[i]
		out.Write(s.s.text)
		out.WriteByte(' ')
		out.Write(appendFloat(out.AvailableBuffer(), s.v))
		out.WriteByte('\n')
	}
}

// writeHistograms writes a histogram family as expfmt does: the buckets
// with their upper bound as the last label, le="+Inf" holding the count,
// then _sum and _count.
func (t *textScrape) writeHistograms(out *bytes.Buffer, f *family) {
	hs := t.byFamily[f.id].hists
	out.Write(f.header)
	for _, i := range f.order(len(hs), func(i int) *series { return hs[i].series }) {
		h := hs[i]
		inner := h.series.labelText()
		line := func(suffix string, le float64, withLE bool, v float64) {
			out.WriteString(f.name)
			out.WriteString(suffix)
			if len(inner) > 0 || withLE {
				out.WriteByte('{')
				out.Write(inner)
				if withLE {
					if len(inner) > 0 {
						out.WriteByte(',')
					}
					out.WriteString(`le="`)
					out.Write(appendFloat(out.AvailableBuffer(), le))
					out.WriteByte('"')
				}
				out.WriteByte('}')
			}
			out.WriteByte(' ')
			out.Write(appendFloat(out.AvailableBuffer(), v))
			out.WriteByte('\n')
		}
		for _, b := range h.buckets {
			if !math.IsInf(b.UpperBound, 1) {
				line("_bucket", b.UpperBound, true, float64(b.Count))
			}
		}
		line("_bucket", math.Inf(1), true, float64(h.count))
		line("_sum", 0, false, h.sum)
		line("_count", 0, false, float64(h.count))
	}
}

func appendFloat(b []byte, v float64) []byte { return strconv.AppendFloat(b, v, 'g', -1, 64) }
