package engines

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// Normalize adds up the series that collapse into one canonical series: the
// engine cores of a vLLM V1 server (engine="0", "1", …), the ranks of a
// data-parallel deployment. A counter summed that way goes down when one
// of its parts restarts or goes away, and Prometheus reads any decrease as
// a reset of the whole sum: rate() would count the whole sum again as new
// (a core restarting at 20 beside one at 1,000,020 made 1,000,040 tokens of
// 30). Prometheus reading the engine itself sees the reset of that one
// series only.
//
// A Corrector keeps one target's counters monotonic before they are added
// up, as Prometheus's own reset handling would read each of them: a series
// whose value goes down (a histogram whose count or sum does) has restarted,
// and what it had counted before is kept as an offset added to it from then
// on; a series that disappears while its family still has a series of the
// same model is still given, frozen at its last value, for ghostTTL, so
// that the sum it was part of does not drop. Past ghostTTL its count is
// handed to a live series it was added up with (one that differs from it
// only in labels the engine's mapping adds up, such as the engine core),
// so that the sum goes on; where there is none, the canonical series it fed
// ends with it. A series whose model is no longer in its family has no sum
// to keep: the model ended (unloaded, a LoRA adapter rotated out), and so
// do its series, at once. A counter's value is therefore the engine's own
// until its first reset, and counts on from there after.
type Corrector struct {
	mu     sync.Mutex
	series map[string]*counterState
	now    func() time.Time
	// gen counts the calls of Correct; a series' gen says which last saw
	// it.
	gen uint64
}

// ghostTTL is how long a series that disappeared is still given as itself:
// an engine core that is gone for an hour is not coming back as the same
// process, and its count is handed to a live sibling.
const ghostTTL = time.Hour

// maxCorrected bounds the series a Corrector remembers, live and vanished:
// a target whose label values churn (a label per request) must not grow it
// without end. Past it, the vanished series longest unseen go first, as
// past ghostTTL.
const maxCorrected = 20000

// maxGhosts bounds the vanished series a Corrector gives as themselves. A
// target whose label values change at every answer (a label per request,
// an engine core numbered anew) leaves one at each answer, about 4 KiB
// each with its histograms, kept for ghostTTL: one such target grew the
// exporter's heap by 50 MiB in 1,500 scrapes, and every annotated pod is a
// target (probe K, PK2). Past it, the longest unseen are handed to a live
// series they were added up with, as past ghostTTL, so the sum goes on.
const maxGhosts = 1000

// counterState is one counter or histogram series of a target.
type counterState struct {
	family string
	typ    dto.MetricType
	labels []*dto.LabelPair // copied: the parse's own are freed with it
	seen   time.Time
	gen    uint64
	// last is what the engine gave at the last scrape, offset what its
	// resets took away since the Corrector first saw it.
	last, offset counts
}

// counts are a counter's value, or a histogram's count, sum and cumulative
// bucket counts in bound order.
type counts struct {
	value, count, sum float64
	bounds, buckets   []float64
}

// NewCorrector returns a Corrector that remembers nothing yet.
func NewCorrector() *Corrector {
	return &Corrector{series: map[string]*counterState{}, now: time.Now}
}

// Correct makes the counters and histograms of one scrape of the target
// monotonic, in place, and adds back the series that vanished since.
// Gauges are left as they are. engine is the engine whose names families
// are read by: the labels its mapping keeps apart (Kept) say which live
// series a vanished one's count may be handed to, its rank labels whose
// series are copies of one another (Replicas) that a copy's count is never
// handed to another copy, and its model labels which model a series is of.
//
// A series holding NaN or an infinity is taken out of families and named
// in the error: kept as its last reading, +Inf became the offset of the
// next reset and the counter stayed +Inf for the exporter's life, and NaN
// handed to a sibling would do the same. Left out, it is in this scrape
// what a vanished series is, its last finite count kept in its sum. So is
// a series with a negative count (a counter, a histogram's count, sum or
// bucket), which no count of tokens, requests or seconds can be: served,
// a counter at -5 then 5 read as 10 made (probe D, PD6).
//
// A histogram Normalize cannot read (its count is not its +Inf bucket's,
// its buckets go down, it has no _sum) is left in families as the engine
// gave it, for Normalize to reject, and never becomes the last reading:
// a count one ahead of its +Inf bucket (a racing prometheus_client
// collection) made the next good answer a reset, whose offset kept the
// count one ahead, and the histogram unreadable, for the exporter's life.
// Being in the answer, it is not a vanished series either: given beside
// it, its ghost could be read in its place, and past ghostTTL its offset
// was forgotten.
func (c *Corrector) Correct(families map[string]*dto.MetricFamily, engine Engine) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	c.gen++
	var errs []error
	// unreadable and malformed are series of the answer Correct left
	// unread: neither has vanished.
	unreadable, malformed := map[string]bool{}, map[string]bool{}
	for name, f := range families {
		if !counting(name, f) {
			continue
		}
		// restarted says a series of the family went down (or changed
		// buckets), continued that one counted on from a count of its
		// own: only a family where the first holds and the second does
		// not was restarted whole.
		restarted, continued := false, false
		finite := f.Metric[:0]
		for _, m := range f.Metric {
			got, ok := countsOf(f.GetType(), m)
			if !ok {
				finite = append(finite, m)
				continued = true
				continue
			}
			var why string
			switch {
			case !got.finite():
				why = "a reading that is not a finite number"
			case got.negative():
				why = "a negative count"
			}
			if why != "" {
				errs = append(errs, fmt.Errorf("%s: %s is left out, not counted on from", seriesName(name, m), why))
				malformed[seriesKey(name, m.Label)] = true
				continued = true
				continue
			}
			finite = append(finite, m)
			key := seriesKey(name, m.Label)
			if f.GetType() == dto.MetricType_HISTOGRAM {
				if _, err := histogram(m, 1); err != nil {
					// Normalize must still see it, to reject and name it
					// and not take an older name's series or a sum
					// without it in its place.
					unreadable[key] = true
					continued = true
					continue
				}
			}
			st := c.series[key]
			switch {
			case st == nil:
				st = &counterState{family: name, typ: f.GetType(), labels: copyLabels(m.Label)}
				c.series[key] = st
			case !slices.Equal(st.last.bounds, got.bounds):
				// Other buckets than before (an engine upgrade): what was
				// counted in the old ones cannot be carried into these.
				st.offset = counts{}
				restarted = true
			case got.value < st.last.value || got.count < st.last.count || got.sum < st.last.sum:
				st.offset = st.offset.plus(st.last)
				restarted = true
			case !st.last.zero() || !st.offset.zero():
				continued = true
			}
			st.last, st.seen, st.gen = got, now, c.gen
			if !st.offset.zero() {
				setCounts(m, st.offset.plus(got))
			}
		}
		f.Metric = finite
		if restarted && !continued {
			c.restartWhole(name, f)
		}
	}
	c.addGhosts(families, engine, unreadable, malformed, now)
	return errors.Join(errs...)
}

// restartWhole serves the family f as the engine gives it, every series of
// which went down or is new in this scrape: the engine process restarted.
// The counts it made before were served, and Prometheus reads the fall as
// the reset it is, counting what was made since. An offset kept past such a
// restart lived only in this process's memory: the exporter restarting
// served the engine's own count, a fall worth the engine's whole count
// since its restart to increase(). The family's vanished series were the
// old process's, and go too.
func (c *Corrector) restartWhole(name string, f *dto.MetricFamily) {
	for _, m := range f.Metric {
		if st := c.series[seriesKey(name, m.Label)]; st != nil {
			st.offset = counts{}
			setCounts(m, st.last)
		}
	}
	for key, st := range c.series {
		if st.family == name && st.gen != c.gen {
			delete(c.series, key)
		}
	}
}

// addGhosts gives each series that vanished its last corrected value
// while its family has a live series of its model, and forgets those whose
// model left the family, and those gone longer than ghostTTL or past
// maxGhosts or maxCorrected, handing their count to a sibling. unreadable and
// malformed are in the scrape, though Correct left them unread; a series
// left out as malformed (NaN, negative) is given at its last count as a
// vanished one is, but is not forgotten while its model has no other.
func (c *Corrector) addGhosts(families map[string]*dto.MetricFamily, engine Engine, unreadable, malformed map[string]bool, now time.Time) {
	kept, replicas, modelBy := Kept(engine), Replicas(engine), modelLabels(engine)
	var ghosts, expired []string
	for key, st := range c.series {
		switch {
		case st.gen == c.gen, unreadable[key]:
		case now.Sub(st.seen) > ghostTTL:
			expired = append(expired, key)
		default:
			ghosts = append(ghosts, key)
		}
	}
	// Past the bounds, the vanished series longest unseen go as the
	// expired do. Dropped without handing their count over, they took it
	// out of the sum they were in, and a served counter fell by billions
	// (probe K, PK1).
	if over := max(len(ghosts)-maxGhosts, len(c.series)-len(expired)-maxCorrected); over > 0 {
		slices.SortFunc(ghosts, func(a, b string) int {
			return cmp.Or(c.series[a].seen.Compare(c.series[b].seen), cmp.Compare(a, b))
		})
		n := min(over, len(ghosts))
		expired, ghosts = append(expired, ghosts[:n]...), ghosts[n:]
	}
	// The same sibling for the same series every time; of copies gone
	// together, the one furthest along is handed over, and alone.
	slices.SortFunc(expired, func(a, b string) int {
		return cmp.Or(cmp.Compare(c.series[b].progress(), c.series[a].progress()), cmp.Compare(a, b))
	})
	handed := map[string]bool{}
	for _, key := range expired {
		st := c.series[key]
		if group := seriesKey(st.family, without(st.labels, replicas)); !handed[group] {
			handed[group] = true
			c.handOver(st, families[st.family], kept, replicas)
		}
		delete(c.series, key)
	}
	slices.Sort(ghosts) // a stable order of series within each family
	// live is each family's live series, ahead of any ghost, and models
	// the models they are of.
	live, models := map[string]int{}, map[string]map[string]bool{}
	for _, key := range ghosts {
		st := c.series[key]
		f := families[st.family]
		n, ok := live[st.family]
		if !ok && f != nil {
			n = len(f.Metric)
			live[st.family] = n
			models[st.family] = map[string]bool{}
			for _, m := range f.Metric {
				models[st.family][modelOf(m.Label, modelBy)] = true
			}
		}
		// A model with no live series left in the family (a model
		// unloaded, a LoRA adapter rotated out, a broken histogram gone)
		// has no sum to keep from dropping: its series end, which
		// Prometheus reads as their end, not as a reset. Another model's
		// series are not its parts: kept for them, an engine rotating
		// adapters served each for an hour and went over
		// --engines.max-models with two in its answer (probe D, PD2).
		if !models[st.family][modelOf(st.labels, modelBy)] {
			if !malformed[key] {
				delete(c.series, key)
			}
			continue
		}
		if f.GetType() != st.typ {
			continue
		}
		// A histogram in other buckets than the live ones (the engine came
		// back upgraded: vLLM V1 has other TTFT bounds than V0) cannot be
		// added to them, and would veto the whole sum it is part of. It is
		// left out: the sum drops once, read as a reset, as the engine's
		// own restart is.
		if st.typ == dto.MetricType_HISTOGRAM && !boundsOf(f.Metric[:n], st.last.bounds) {
			continue
		}
		m := &dto.Metric{Label: st.labels}
		switch st.typ {
		case dto.MetricType_HISTOGRAM:
			m.Histogram = &dto.Histogram{}
		case dto.MetricType_UNTYPED:
			m.Untyped = &dto.Untyped{}
		default:
			m.Counter = &dto.Counter{}
		}
		setCounts(m, st.offset.plus(st.last))
		f.Metric = append(f.Metric, m)
	}
}

// handOver adds what the vanished series st counted to the offset of a
// live series of its family f that the engine's mapping adds up with it:
// one with the same values of the labels kept apart (and, for a histogram,
// the same buckets), and to each live copy of that series, so that the
// copy Normalize reads has it. The live series' value in f is raised with
// it, so the sum it was part of carries on in this scrape. A vanished
// series with a live copy of its own hands nothing: that copy counts what
// it counted.
func (c *Corrector) handOver(st *counterState, f *dto.MetricFamily, kept map[string][]string, replicas []string) {
	if f == nil || f.GetType() != st.typ || kept == nil {
		return
	}
	group := func(labels []*dto.LabelPair) string { return seriesKey(st.family, without(labels, replicas)) }
	own := group(st.labels)
	var live []*dto.Metric
	for _, m := range f.Metric {
		if ls := c.series[seriesKey(st.family, m.Label)]; ls != nil && ls.gen == c.gen {
			if group(m.Label) == own {
				return
			}
			live = append(live, m)
		}
	}
	names := kept[st.family]
	for _, m := range live {
		if !sameValues(m.Label, st.labels, names) || !slices.Equal(c.series[seriesKey(st.family, m.Label)].last.bounds, st.last.bounds) {
			continue
		}
		to := group(m.Label)
		for _, peer := range live {
			ls := c.series[seriesKey(st.family, peer.Label)]
			if group(peer.Label) != to || !slices.Equal(ls.last.bounds, st.last.bounds) {
				continue
			}
			ls.offset = ls.offset.plus(st.offset.plus(st.last))
			setCounts(peer, ls.offset.plus(ls.last))
		}
		return
	}
}

// modelOf names the model of a series by the values of its model labels,
// a label absent read as empty, as Prometheus reads it.
func modelOf(labels []*dto.LabelPair, names []string) string {
	var b strings.Builder
	for _, n := range names {
		for _, lp := range labels {
			if lp.GetName() == n {
				b.WriteString(lp.GetValue())
			}
		}
		b.WriteByte(0xff)
	}
	return b.String()
}

// without is labels less those named in names.
func without(labels []*dto.LabelPair, names []string) []*dto.LabelPair {
	if len(names) == 0 {
		return labels
	}
	var out []*dto.LabelPair
	for _, lp := range labels {
		if !slices.Contains(names, lp.GetName()) {
			out = append(out, lp)
		}
	}
	return out
}

// progress is how far st has counted, in all: a histogram's count, else
// its value.
func (st *counterState) progress() float64 {
	total := st.offset.plus(st.last)
	if st.typ == dto.MetricType_HISTOGRAM {
		return total.count
	}
	return total.value
}

// sameValues says whether a and b give each label of names the same value
// (a label absent from both is the same).
func sameValues(a, b []*dto.LabelPair, names []string) bool {
	value := func(ls []*dto.LabelPair, name string) (string, bool) {
		for _, lp := range ls {
			if lp.GetName() == name {
				return lp.GetValue(), true
			}
		}
		return "", false
	}
	for _, n := range names {
		va, oka := value(a, n)
		vb, okb := value(b, n)
		if va != vb || oka != okb {
			return false
		}
	}
	return true
}

// boundsOf says whether every histogram of live has exactly bounds.
func boundsOf(live []*dto.Metric, bounds []float64) bool {
	for _, m := range live {
		got, ok := countsOf(dto.MetricType_HISTOGRAM, m)
		if ok && !slices.Equal(got.bounds, bounds) {
			return false
		}
	}
	return true
}

// maxSampleAge is how old an engine's own sample timestamp may be: what
// Prometheus, honouring timestamps, would still return for "now" (its
// lookback delta, 5 minutes by default).
const maxSampleAge = 5 * time.Minute

// DropStale removes the series whose own timestamp is more than
// maxSampleAge before now: served again without it, a reading an engine
// stamped long ago (a frozen or cached exposition) would pose as current,
// where Prometheus scraping the engine would store nothing for now. The
// error names what was dropped.
func DropStale(families map[string]*dto.MetricFamily, now time.Time) error {
	var errs []error
	for name, f := range families {
		kept := f.Metric[:0]
		for _, m := range f.Metric {
			if m.TimestampMs != nil && now.Sub(time.UnixMilli(m.GetTimestampMs())) > maxSampleAge {
				errs = append(errs, fmt.Errorf("%s: stamped %s, more than %v ago", seriesName(name, m), time.UnixMilli(m.GetTimestampMs()).UTC().Format(time.RFC3339), maxSampleAge))
				continue
			}
			kept = append(kept, m)
		}
		f.Metric = kept
		if len(kept) == 0 {
			delete(families, name)
		}
	}
	return errors.Join(errs...)
}

// counting says whether a family holds counters: a counter, a histogram,
// or an untyped _total family (an OpenMetrics counter, as the parser
// reads it).
func counting(name string, f *dto.MetricFamily) bool {
	switch f.GetType() {
	case dto.MetricType_COUNTER, dto.MetricType_HISTOGRAM:
		return true
	case dto.MetricType_UNTYPED:
		return strings.HasSuffix(name, "_total")
	}
	return false
}

func countsOf(typ dto.MetricType, m *dto.Metric) (counts, bool) {
	switch typ {
	case dto.MetricType_COUNTER:
		return counts{value: m.GetCounter().GetValue()}, m.Counter != nil
	case dto.MetricType_UNTYPED:
		return counts{value: m.GetUntyped().GetValue()}, m.Untyped != nil
	}
	h := m.GetHistogram()
	if h == nil {
		return counts{}, false
	}
	c := counts{count: h.GetSampleCountFloat(), sum: h.GetSampleSum()}
	if h.SampleCount != nil {
		c.count = float64(h.GetSampleCount())
	}
	bs := slices.Clone(h.Bucket)
	slices.SortFunc(bs, func(a, b *dto.Bucket) int { return cmp.Compare(a.GetUpperBound(), b.GetUpperBound()) })
	for _, b := range bs {
		v := b.GetCumulativeCountFloat()
		if b.CumulativeCount != nil {
			v = float64(b.GetCumulativeCount())
		}
		c.bounds = append(c.bounds, b.GetUpperBound())
		c.buckets = append(c.buckets, v)
	}
	return c, true
}

// finite says every number of c is finite.
func (c counts) finite() bool {
	return !notFinite(c.value) && !notFinite(c.count) && !notFinite(c.sum) && !slices.ContainsFunc(c.buckets, notFinite)
}

// negative says a number of c is below 0, which no count is.
func (c counts) negative() bool {
	return c.value < 0 || c.count < 0 || c.sum < 0 || slices.ContainsFunc(c.buckets, func(v float64) bool { return v < 0 })
}

// zero says c counts nothing: a series that never restarted is left as the
// engine gave it.
func (c counts) zero() bool {
	return c.value == 0 && c.count == 0 && c.sum == 0 && !slices.ContainsFunc(c.buckets, func(v float64) bool { return v != 0 })
}

// plus adds b to a, bucket by bucket where a has buckets for b's bounds,
// else taking b's.
func (a counts) plus(b counts) counts {
	out := counts{value: a.value + b.value, count: a.count + b.count, sum: a.sum + b.sum, bounds: b.bounds}
	out.buckets = slices.Clone(b.buckets)
	if slices.Equal(a.bounds, b.bounds) {
		for i := range out.buckets {
			out.buckets[i] += a.buckets[i]
		}
	}
	return out
}

// setCounts writes c into m, whole counts as integers as the parser gives
// them, so that Normalize reads a corrected series as it reads any other.
func setCounts(m *dto.Metric, c counts) {
	switch {
	case m.Counter != nil:
		m.Counter = &dto.Counter{Value: &c.value}
	case m.Untyped != nil:
		m.Untyped = &dto.Untyped{Value: &c.value}
	case m.Histogram != nil:
		h := &dto.Histogram{SampleSum: &c.sum}
		setCount(c.count, &h.SampleCount, &h.SampleCountFloat)
		for i, bound := range c.bounds {
			b := &dto.Bucket{UpperBound: &bound}
			setCount(c.buckets[i], &b.CumulativeCount, &b.CumulativeCountFloat)
			h.Bucket = append(h.Bucket, b)
		}
		m.Histogram = h
	}
}

func setCount(v float64, whole **uint64, float **float64) {
	if v >= 0 && v < math.Exp2(64) && v == math.Trunc(v) {
		n := uint64(v)
		*whole = &n
		return
	}
	*float = &v
}

func copyLabels(in []*dto.LabelPair) []*dto.LabelPair {
	out := make([]*dto.LabelPair, len(in))
	for i, lp := range in {
		name, value := lp.GetName(), lp.GetValue()
		out[i] = &dto.LabelPair{Name: &name, Value: &value}
	}
	return out
}

// seriesKey identifies a series of a family by its labels, whatever their
// order.
func seriesKey(family string, labels []*dto.LabelPair) string {
	pairs := make([]string, len(labels))
	for i, lp := range labels {
		pairs[i] = lp.GetName() + "\xfe" + lp.GetValue()
	}
	slices.Sort(pairs)
	return family + "\xff" + strings.Join(pairs, "\xff")
}
