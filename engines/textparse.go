package engines

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	dto "github.com/prometheus/client_model/go"
)

// The engines' expositions are read by the parser in this file rather than
// by expfmt's TextParser, which reads a byte at a time through a state
// machine, compares each label with every other one (quadratic in the labels
// of a line), and panics on some malformed input (a summary named inside the
// braces before any line of it). Parsing was the largest single cost of a
// demo scrape.
//
// It reads the text format as the Exposition formats document
// (prometheus.io/docs/instrumenting/exposition_formats) describes it and as
// engines write it, OpenMetrics 1.0 bodies included the way expfmt read them:
// `# EOF` and `# UNIT` are comments, `x_total` under `# TYPE x counter` and
// `x_created` are families of their own, untyped. Where it accepts a body,
// it returns the families expfmt returned (FuzzParseMatchesExpfmt holds it to
// that). It fails a body, naming the line, where expfmt accepted something
// no engine writes and a reader could only guess at:
//
//   - a metric name inside the braces or quoted, or a quoted label name
//     (the UTF-8 names of format 1.0.0; engines' names are all legacy ones);
//   - a metric type written other than in lower case, or one of
//     OpenMetrics' in a text body (OpenMetrics bodies' info, stateset and
//     gaugehistogram families are left out, unknown is untyped);
//   - a histogram or summary line that is not what its name says: a bucket
//     without `le`, `le` or `quantile` on a _sum or _count line, a summary's
//     own name without `quantile`, a histogram's own name (expfmt dropped
//     such values silently);
//   - a timestamp on a histogram's or summary's line (expfmt kept the
//     first line's for a histogram, the last line's for a summary);
//   - a count of observations that is not a whole number (expfmt kept a
//     summary's truncated, a histogram's as a float, which Normalize
//     rejects), and a _sum, _count or quantile given twice for one series
//     (expfmt kept the last _sum or _count, and both quantiles).
//
// Families with no sample are left out, as expfmt did.

// textParser holds one body's families while its lines are read.
type textParser struct {
	families map[string]*parsedFamily
	// maxPairs bounds the label pairs of the series (0: no limit), and
	// pairCount counts them. internedBytes counts the bytes of the
	// distinct names and values kept, bounded by maxInternedBytes.
	maxPairs, pairCount, internedBytes int
	// openMetrics says the body is OpenMetrics, whose sample lines may end
	// in an exemplar.
	openMetrics bool
	// skip are the sample names of the OpenMetrics families of types no
	// mapping reads (info, stateset, gaugehistogram), left out.
	skip map[string]bool
	// strings interns names and label values: a model name is on every
	// line of an engine's exposition.
	strings map[string]*string

	// Per-line scratch, reused.
	labels []lineLabel
	order  []int
	key    []byte

	metrics  slab[dto.Metric]
	pairs    slab[dto.LabelPair]
	pairPtrs slab[*dto.LabelPair]
	floats   slab[float64]
	counts   slab[uint64]
	gauges   slab[dto.Gauge]
	counters slab[dto.Counter]
	untyped  slab[dto.Untyped]
	hists    slab[dto.Histogram]
	buckets  slab[dto.Bucket]
	sums     slab[dto.Summary]
	quants   slab[dto.Quantile]
}

// parsedFamily is a family being read. A family is typed (mf.Type set) by
// its TYPE line or by its first sample (untyped), after which a TYPE line is
// an error.
type parsedFamily struct {
	mf *dto.MetricFamily
	// series finds a series by its labels (without le or quantile), so that
	// a histogram's or summary's lines fold into one metric and a series
	// given twice is caught.
	series map[string]*dto.Metric
}

type lineLabel struct{ name, value []byte }

// slab hands out values from arrays allocated a few at a time: the
// families are built of many small messages, each of which would otherwise
// be an allocation of its own. The arrays double from 8 up to 256 values,
// so that a body of a dozen series does not pay for hundreds.
type slab[T any] struct {
	free []T
	size int // of the last array
}

func (s *slab[T]) grow(atLeast int) {
	s.size = min(max(2*s.size, 8), 256)
	s.free = make([]T, max(s.size, atLeast))
}

func (s *slab[T]) new() *T {
	if len(s.free) == 0 {
		s.grow(1)
	}
	p := &s.free[0]
	s.free = s.free[1:]
	return p
}

// take returns n consecutive values.
func (s *slab[T]) take(n int) []T {
	if len(s.free) < n {
		s.grow(n)
	}
	out := s.free[:n:n]
	s.free = s.free[n:]
	return out
}

func newTextParser() *textParser {
	return &textParser{families: map[string]*parsedFamily{}, strings: map[string]*string{}}
}

// parseLines parses the lines next returns, each ending in '\n' but
// perhaps the last, with their numbers in the body (for errors); next
// returns errEOF with or after the last line, or the error that cut the body
// short.
//
// maxPairs bounds the label pairs of all the series together (0: no limit):
// they are most of what a parse keeps in memory.
//
// openMetrics reads the body as OpenMetrics 1.0: an exemplar after a
// sample's value is checked and left out, as Prometheus ingests it apart.
func parseLines(next func() (line []byte, no int, err error), maxPairs int, openMetrics bool) (_ map[string]*dto.MetricFamily, err error) {
	// Targets are parsed in goroutines of their own, where a panic would
	// end the process: whatever a body does to the parser must cost its own
	// target only.
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("parsing metrics: the parser failed: %v", v)
		}
	}()
	p := newTextParser()
	p.maxPairs, p.openMetrics = maxPairs, openMetrics
	for {
		line, no, err := next()
		if err != nil && !errors.Is(err, errEOF) {
			// The body's own error, such as ErrTooLarge, even where it
			// cut a line short.
			return nil, err
		}
		if len(line) > 0 {
			if perr := p.line(line); perr != nil {
				return nil, fmt.Errorf("parsing metrics: line %d: %w", no, perr)
			}
		}
		if err != nil {
			return p.result()
		}
	}
}

// errEOF ends parseLines's input; the line filter returns it for io.EOF.
var errEOF = errors.New("end of body")

func (p *textParser) result() (map[string]*dto.MetricFamily, error) {
	out := make(map[string]*dto.MetricFamily, len(p.families))
	for name, f := range p.families {
		if len(f.mf.Metric) == 0 {
			continue
		}
		for _, m := range f.series {
			var err error
			switch f.mf.GetType() {
			case dto.MetricType_HISTOGRAM:
				b := m.Histogram.Bucket
				err = distinct("bucket le", len(b), func(i int) float64 { return b[i].GetUpperBound() })
			case dto.MetricType_SUMMARY:
				q := m.Summary.Quantile
				err = distinct("quantile", len(q), func(i int) float64 { return q[i].GetQuantile() })
			}
			if err != nil {
				return nil, fmt.Errorf("parsing metrics: %s: %w", seriesName(name, m), err)
			}
		}
		out[name] = f.mf
	}
	return out, nil
}

// distinct rejects a series giving one bucket bound or quantile (what) twice:
// n values, the i-th at(i). They come in increasing order from every
// client library; any other order is sorted, so a hostile body costs
// n log n, not n².
func distinct(what string, n int, at func(int) float64) error {
	increasing := true
	for i := 1; i < n && increasing; i++ {
		increasing = at(i) > at(i-1)
	}
	if increasing {
		return nil
	}
	values := make([]float64, n)
	for i := range values {
		values[i] = at(i)
	}
	slices.Sort(values)
	for i := 1; i < n; i++ {
		if values[i] == values[i-1] {
			return fmt.Errorf("duplicate %s=%g", what, values[i])
		}
	}
	return nil
}

// line parses one line, with its '\n' if it has one.
func (p *textParser) line(line []byte) error {
	b, terminated := bytes.CutSuffix(line, []byte("\n"))
	b = trimBlanks(b)
	switch {
	case len(b) == 0:
		return nil
	case !terminated:
		return errors.New("the body ends without a newline")
	case b[0] == '#':
		return p.comment(b[1:])
	}
	return p.sample(b)
}

func isBlank(c byte) bool { return c == ' ' || c == '\t' }

func trimBlanks(b []byte) []byte {
	for len(b) > 0 && isBlank(b[0]) {
		b = b[1:]
	}
	return b
}

// token splits b at its first blank.
func token(b []byte) (tok, rest []byte) {
	i := bytes.IndexAny(b, " \t")
	if i < 0 {
		return b, nil
	}
	return b[:i], b[i:]
}

// comment reads the text after '#': HELP and TYPE lines, blanks after '#'
// optional; any other comment is ignored.
func (p *textParser) comment(b []byte) error {
	keyword, rest := token(trimBlanks(b))
	isHelp := string(keyword) == "HELP"
	if !isHelp && string(keyword) != "TYPE" {
		return nil
	}
	name, rest := token(trimBlanks(rest))
	if len(name) == 0 {
		return nil // "# HELP" alone: a comment
	}
	if !validMetricName(name) {
		return fmt.Errorf("invalid metric name %q in %s line", name, keyword)
	}
	text := trimBlanks(rest)
	f := p.family(name)
	if isHelp {
		help, err := unescape(text, false)
		if err != nil {
			return fmt.Errorf("HELP of %s: %w", name, err)
		}
		switch {
		case help == "":
			// An empty HELP is no HELP.
		case f.mf.Help != nil:
			return fmt.Errorf("a second HELP line for %s", name)
		default:
			f.mf.Help = &help
		}
		return nil
	}
	if f.mf.Type != nil {
		return fmt.Errorf("a TYPE line for %s after its first TYPE line or sample", name)
	}
	if p.openMetrics {
		// OpenMetrics 1.0's types beyond the text format's: unknown is
		// untyped; info, stateset and gaugehistogram no mapping reads,
		// so their samples (named as "Metric types" gives them) are left
		// out rather than the body failed.
		var samples []string
		switch string(text) {
		case "unknown":
			text = []byte("untyped")
		case "info":
			samples = []string{"_info"}
		case "stateset":
			samples = []string{""}
		case "gaugehistogram":
			samples = []string{"_bucket", "_gcount", "_gsum"}
		}
		if samples != nil {
			if p.skip == nil {
				p.skip = map[string]bool{}
			}
			for _, suffix := range samples {
				p.skip[string(name)+suffix] = true
			}
			f.mf.Type = dto.MetricType_UNTYPED.Enum() // a second TYPE line is still an error
			return nil
		}
	}
	var t dto.MetricType
	switch string(text) {
	case "counter":
		t = dto.MetricType_COUNTER
	case "gauge":
		t = dto.MetricType_GAUGE
	case "histogram":
		t = dto.MetricType_HISTOGRAM
	case "summary":
		t = dto.MetricType_SUMMARY
	case "untyped":
		t = dto.MetricType_UNTYPED
	default:
		return fmt.Errorf("unsupported metric type %q for %s", text, name)
	}
	f.mf.Type = t.Enum()
	return nil
}

// family returns the family of exactly this name, made if new.
func (p *textParser) family(name []byte) *parsedFamily {
	if f, ok := p.families[string(name)]; ok {
		return f
	}
	n := string(name)
	f := &parsedFamily{mf: &dto.MetricFamily{Name: &n}, series: map[string]*dto.Metric{}}
	p.families[n] = f
	return f
}

// lineKind is what a sample line is to its family.
type lineKind int

const (
	plainLine lineKind = iota // a counter's, gauge's or untyped sample, or a summary's quantile
	bucketLine
	sumLine
	countLine
)

// familyOf finds the family a sample line belongs to: the family of its
// name, else the histogram or summary whose _bucket, _sum or _count it is,
// else a new one, as expfmt decides.
func (p *textParser) familyOf(name []byte) (*parsedFamily, lineKind) {
	if f, ok := p.families[string(name)]; ok {
		return f, plainLine
	}
	for _, s := range [...]struct {
		suffix string
		kind   lineKind
	}{{"_bucket", bucketLine}, {"_sum", sumLine}, {"_count", countLine}} {
		base, ok := bytes.CutSuffix(name, []byte(s.suffix))
		if !ok {
			continue
		}
		f, ok := p.families[string(base)]
		if !ok {
			break
		}
		switch f.mf.GetType() {
		case dto.MetricType_HISTOGRAM:
			return f, s.kind
		case dto.MetricType_SUMMARY:
			if s.kind != bucketLine {
				return f, s.kind
			}
		}
		break
	}
	return p.family(name), plainLine
}

// timestamp reads a sample's timestamp into milliseconds: whole
// milliseconds in the text format ("an int64 (milliseconds since epoch)",
// Exposition formats), seconds in OpenMetrics 1.0 ("Timestamps MUST be in
// seconds since epoch", fractions allowed). A body cannot be both, so
// neither is guessed from the size of the number.
func (p *textParser) timestamp(text []byte) (int64, error) {
	if !p.openMetrics {
		ms, err := strconv.ParseInt(string(text), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("timestamp %q is not whole milliseconds", text)
		}
		return ms, nil
	}
	s, err := strconv.ParseFloat(string(text), 64)
	// Within ±2^53 ms (about 285,000 years) a millisecond is exact.
	if err != nil || math.IsNaN(s) || math.Abs(s) > 1<<53/1000 {
		return 0, fmt.Errorf("timestamp %q is not seconds since the epoch", text)
	}
	return int64(math.Round(s * 1000)), nil
}

// sample reads `name[{labels}] value [timestamp]`.
func (p *textParser) sample(b []byte) error {
	name, b := metricName(b)
	if len(name) == 0 {
		if len(b) > 0 && b[0] == '{' {
			return errors.New("a metric name inside the braces is not supported")
		}
		return fmt.Errorf("invalid metric name at %q", clip(b))
	}
	b = trimBlanks(b)
	p.labels = p.labels[:0]
	if len(b) > 0 && b[0] == '{' {
		var err error
		if b, err = p.readLabels(b[1:]); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		b = trimBlanks(b)
	}
	valueText, b := token(b)
	if len(valueText) == 0 {
		return fmt.Errorf("%s: no value", name)
	}
	value, err := parseValue(valueText)
	if err != nil {
		return fmt.Errorf("%s: value %q: %w", name, valueText, err)
	}
	if i := bytes.IndexByte(b, '#'); i >= 0 && p.openMetrics {
		// Neither the value nor a timestamp holds a '#': it starts the
		// exemplar (OpenMetrics 1.0, "Exemplars": " # " then a label set,
		// a value and an optional timestamp).
		if err := p.exemplar(b[i+1:]); err != nil {
			return fmt.Errorf("%s: exemplar: %w", name, err)
		}
		b = trimBlanks(b[:i])
	}
	var timestamp *int64
	if len(b) > 0 {
		tsText, rest := token(trimBlanks(b))
		if len(tsText) == 0 || len(rest) > 0 {
			return fmt.Errorf("%s: blanks or text after the value", name)
		}
		ts, err := p.timestamp(tsText)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		timestamp = &ts
	}

	if p.skip[string(name)] {
		return nil
	}
	f, kind := p.familyOf(name)
	if f.mf.Type == nil {
		f.mf.Type = dto.MetricType_UNTYPED.Enum()
	}
	special := ""
	switch f.mf.GetType() {
	case dto.MetricType_HISTOGRAM:
		special = "le"
	case dto.MetricType_SUMMARY:
		special = "quantile"
	}
	if special != "" && timestamp != nil {
		return fmt.Errorf("%s: a timestamp on a line of a %s", name, strings.ToLower(f.mf.GetType().String()))
	}
	bound, hasBound, err := p.signature(special)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	m, found := f.series[string(p.key)]
	if !found {
		if p.pairCount += len(p.labels); p.maxPairs > 0 && p.pairCount > p.maxPairs {
			return fmt.Errorf("%w of %d in all the series kept", ErrTooManyLabelPairs, p.maxPairs)
		}
		m = p.metrics.new()
		m.Label = p.labelPairs(special)
		if p.maxPairs > 0 && p.internedBytes > maxInternedBytes {
			return fmt.Errorf("%w: label values of more than %d bytes in all", ErrTooManyLabelPairs, maxInternedBytes)
		}
		m.TimestampMs = timestamp
		f.series[string(p.key)] = m
		f.mf.Metric = append(f.mf.Metric, m)
	}

	switch f.mf.GetType() {
	case dto.MetricType_COUNTER, dto.MetricType_GAUGE, dto.MetricType_UNTYPED:
		if found {
			return twice(name, m)
		}
		v := p.float(value)
		switch f.mf.GetType() {
		case dto.MetricType_COUNTER:
			m.Counter = p.counters.new()
			m.Counter.Value = v
		case dto.MetricType_GAUGE:
			m.Gauge = p.gauges.new()
			m.Gauge.Value = v
		default:
			m.Untyped = p.untyped.new()
			m.Untyped.Value = v
		}
		return nil
	case dto.MetricType_HISTOGRAM:
		return p.histogramLine(name, m, kind, hasBound, bound, value)
	default:
		return p.summaryLine(name, m, kind, hasBound, bound, value)
	}
}

// twice reports a series given twice.
func twice(name []byte, m *dto.Metric) error {
	return fmt.Errorf("%s given twice", seriesName(string(name), m))
}

func (p *textParser) histogramLine(name []byte, m *dto.Metric, kind lineKind, hasBound bool, bound, value float64) error {
	h := m.Histogram
	if h == nil {
		h = p.hists.new()
		m.Histogram = h
	}
	switch {
	case kind == plainLine:
		return fmt.Errorf("%s: a histogram's samples are its _bucket, _sum and _count lines", name)
	case kind == bucketLine && !hasBound:
		return fmt.Errorf("%s: a bucket without an le label", name)
	case kind != bucketLine && hasBound:
		return fmt.Errorf("%s: le on a line that is not a bucket", name)
	case kind != bucketLine:
		return p.sumOrCount(name, m, kind, value, &h.SampleSum, &h.SampleCount)
	}
	n, err := p.wholeCount(value)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	b := p.buckets.new()
	b.UpperBound, b.CumulativeCount = p.float(bound), n
	h.Bucket = append(h.Bucket, b)
	return nil
}

func (p *textParser) summaryLine(name []byte, m *dto.Metric, kind lineKind, hasBound bool, bound, value float64) error {
	sm := m.Summary
	if sm == nil {
		sm = p.sums.new()
		m.Summary = sm
	}
	switch {
	case kind == plainLine && !hasBound:
		return fmt.Errorf("%s: a summary's sample without a quantile label", name)
	case kind != plainLine && hasBound:
		return fmt.Errorf("%s: quantile on a _sum or _count line", name)
	case kind != plainLine:
		return p.sumOrCount(name, m, kind, value, &sm.SampleSum, &sm.SampleCount)
	}
	q := p.quants.new()
	q.Quantile, q.Value = p.float(bound), p.float(value)
	sm.Quantile = append(sm.Quantile, q)
	return nil
}

// sumOrCount files the _sum or _count line of a histogram's or summary's
// series into sum or count, once each.
func (p *textParser) sumOrCount(name []byte, m *dto.Metric, kind lineKind, value float64, sum **float64, count **uint64) error {
	if kind == sumLine {
		if *sum != nil {
			return twice(name, m)
		}
		*sum = p.float(value)
		return nil
	}
	if *count != nil {
		return twice(name, m)
	}
	n, err := p.wholeCount(value)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	*count = n
	return nil
}

// float returns v in a value of the parser's slab.
func (p *textParser) float(v float64) *float64 {
	f := p.floats.new()
	*f = v
	return f
}

// wholeCount reads a count of observations.
func (p *textParser) wholeCount(v float64) (*uint64, error) {
	if !(v >= 0 && v < math.Exp2(64)) || v != math.Trunc(v) {
		return nil, fmt.Errorf("%g is not a count of observations", v)
	}
	n := p.counts.new()
	*n = uint64(v)
	return n, nil
}

// readLabels reads `name="value", ...}` after the '{' into p.labels and
// returns what follows the '}'. Blanks may surround names, '=', values and
// commas, and a comma may end the list, as expfmt allows.
func (p *textParser) readLabels(b []byte) ([]byte, error) {
	for {
		b = trimBlanks(b)
		if len(b) > 0 && b[0] == '}' {
			return b[1:], nil
		}
		name, rest := labelName(b)
		if len(name) == 0 {
			if len(b) > 0 && b[0] == '"' {
				return nil, errors.New("quoted names in the braces are not supported")
			}
			return nil, fmt.Errorf("invalid label name at %q", clip(b))
		}
		if string(name) == "__name__" {
			return nil, errors.New("the label name __name__ is reserved")
		}
		b = trimBlanks(rest)
		if len(b) == 0 || b[0] != '=' {
			return nil, fmt.Errorf("label %s: no '='", name)
		}
		b = trimBlanks(b[1:])
		if len(b) == 0 || b[0] != '"' {
			return nil, fmt.Errorf("label %s: its value is not quoted", name)
		}
		value, rest, err := quoted(b[1:])
		if err != nil {
			return nil, fmt.Errorf("label %s: %w", name, err)
		}
		if len(p.labels) == maxLabels {
			return nil, fmt.Errorf("%w: more than %d", ErrTooManyLabels, maxLabels)
		}
		p.labels = append(p.labels, lineLabel{name, value})
		b = trimBlanks(rest)
		switch {
		case len(b) > 0 && b[0] == ',':
			b = b[1:]
		case len(b) > 0 && b[0] == '}':
			return b[1:], nil
		default:
			return nil, fmt.Errorf("label %s: expected ',' or '}' after its value", name)
		}
	}
}

// exemplar checks an OpenMetrics exemplar, what follows its '#': a label
// set, a value and an optional timestamp. It is left out of the families.
func (p *textParser) exemplar(b []byte) error {
	b = trimBlanks(b)
	if len(b) == 0 || b[0] != '{' {
		return errors.New("no label set")
	}
	n := len(p.labels)
	rest, err := p.readLabels(b[1:])
	// The exemplar's labels are not the series'.
	p.labels = p.labels[:n]
	if err != nil {
		return err
	}
	valueText, rest := token(trimBlanks(rest))
	if _, err := parseValue(valueText); err != nil || len(valueText) == 0 {
		return fmt.Errorf("value %q", valueText)
	}
	if tsText, rest := token(trimBlanks(rest)); len(tsText) > 0 {
		if _, err := parseValue(tsText); err != nil || len(trimBlanks(rest)) > 0 {
			return fmt.Errorf("timestamp %q or text after it", tsText)
		}
	}
	return nil
}

// quoted reads a label value up to its closing quote, escapes left in, and
// returns what follows the quote. The escapes are \\, \" and \n only, so a
// value has one spelling: the escaped text identifies it.
func quoted(b []byte) (value, rest []byte, err error) {
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
			if i == len(b) || (b[i] != '\\' && b[i] != '"' && b[i] != 'n') {
				return nil, nil, errors.New("an escape other than \\\\, \\\" or \\n")
			}
		case '"':
			if !utf8.Valid(b[:i]) {
				return nil, nil, errors.New("value is not UTF-8")
			}
			return b[:i], b[i+1:], nil
		}
	}
	return nil, nil, errors.New("value has no closing quote")
}

// signature sorts the line's labels, checks that no name is given twice,
// takes out the special label (le or quantile) and parses it, and writes
// the other labels into p.key: the series' identity within its family.
func (p *textParser) signature(special string) (bound float64, hasBound bool, err error) {
	p.order = p.order[:0]
	for i := range p.labels {
		p.order = append(p.order, i)
	}
	slices.SortFunc(p.order, func(i, j int) int { return bytes.Compare(p.labels[i].name, p.labels[j].name) })
	p.key = p.key[:0]
	for k, i := range p.order {
		l := p.labels[i]
		if k > 0 && bytes.Equal(l.name, p.labels[p.order[k-1]].name) {
			return 0, false, fmt.Errorf("label %s given twice", l.name)
		}
		if special != "" && string(l.name) == special {
			bound, err = parseValue(l.value)
			if err != nil {
				return 0, false, fmt.Errorf("%s=%q is not a number", special, l.value)
			}
			hasBound = true
			continue
		}
		p.key = append(p.key, l.name...)
		p.key = append(p.key, 0xff)
		p.key = append(p.key, l.value...) // escaped: one spelling per value
		p.key = append(p.key, 0xff)
	}
	return bound, hasBound, nil
}

// labelPairs makes the new series' labels, in the order of the line, the
// special label left out.
func (p *textParser) labelPairs(special string) []*dto.LabelPair {
	n := 0
	for _, l := range p.labels {
		if string(l.name) != special {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	out := p.pairPtrs.take(n)
	k := 0
	for _, l := range p.labels {
		if string(l.name) == special {
			continue
		}
		lp := p.pairs.new()
		lp.Name = p.intern(l.name, false)
		lp.Value = p.intern(l.value, true)
		out[k] = lp
		k++
	}
	return out
}

// intern returns a shared copy of b, unescaped first if escaped is set
// (quoted validated the escapes).
func (p *textParser) intern(b []byte, escaped bool) *string {
	if s, ok := p.strings[string(b)]; ok {
		return s
	}
	s := new(string)
	if escaped && bytes.IndexByte(b, '\\') >= 0 {
		*s, _ = unescape(b, true)
	} else {
		*s = string(b)
	}
	p.strings[string(b)] = s
	p.internedBytes += len(b)
	return s
}

// maxInternedBytes bounds the distinct label names and values one parse
// keeps (with a label pair limit, see parseLines): engines name a few
// models in a few dozen bytes each, and 20,000 series of long unique
// values, within the byte and series limits, took 100 MiB a parse.
const maxInternedBytes = 4 << 20

// unescape undoes the escapes of a HELP text (\\ and \n) or of a label
// value (\" too).
func unescape(b []byte, quote bool) (string, error) {
	if bytes.IndexByte(b, '\\') < 0 {
		return string(b), nil
	}
	var out strings.Builder
	out.Grow(len(b))
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c != '\\' {
			out.WriteByte(c)
			continue
		}
		i++
		switch {
		case i == len(b):
			return "", errors.New("a backslash at the end")
		case b[i] == '\\':
			out.WriteByte('\\')
		case b[i] == 'n':
			out.WriteByte('\n')
		case b[i] == '"' && quote:
			out.WriteByte('"')
		default:
			return "", fmt.Errorf("unknown escape \\%c", b[i])
		}
	}
	return out.String(), nil
}

// parseValue reads a sample value or a bound as expfmt does: Go's float
// syntax without hexadecimal exponents or digit separators.
func parseValue(b []byte) (float64, error) {
	if bytes.ContainsAny(b, "pP_") {
		return 0, errors.New("not a number")
	}
	return strconv.ParseFloat(string(b), 64)
}

func isNameStart(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_'
}

func isNameByte(c byte) bool { return isNameStart(c) || c >= '0' && c <= '9' }

// metricName splits the metric name, [a-zA-Z_:][a-zA-Z0-9_:]*, off b.
func metricName(b []byte) (name, rest []byte) {
	i := 0
	for i < len(b) && (isNameByte(b[i]) || b[i] == ':') && (i > 0 || b[i] < '0' || b[i] > '9') {
		i++
	}
	return b[:i], b[i:]
}

// labelName splits a label name, [a-zA-Z_][a-zA-Z0-9_]*, off b.
func labelName(b []byte) (name, rest []byte) {
	i := 0
	for i < len(b) && isNameByte(b[i]) && (i > 0 || isNameStart(b[i])) {
		i++
	}
	return b[:i], b[i:]
}

func validMetricName(b []byte) bool {
	name, rest := metricName(b)
	return len(name) > 0 && len(rest) == 0
}

// clip shortens input quoted in an error.
func clip(b []byte) []byte {
	if len(b) > 32 {
		return b[:32]
	}
	return b
}
