package collector

import (
	"errors"
	"fmt"
	"hash/maphash"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/model"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/xpu-exporter/xpu_exporter/attribution"
	"github.com/xpu-exporter/xpu_exporter/internal/validutf8"
)

// metric is one family: its name, help and type are fixed; its label names
// vary from device to device (MIG and owner labels), so descriptors are made
// per label set and cached.
type metric struct {
	name      string
	help      string
	typ       prometheus.ValueType
	histogram bool
}

func gauge(name, help string) metric {
	return metric{name: namespace + "_" + name, help: help, typ: prometheus.GaugeValue}
}

func counter(name, help string) metric {
	return metric{name: namespace + "_" + name, help: help, typ: prometheus.CounterValue}
}

var descs sync.Map // name + label names → *prometheus.Desc

func (m metric) desc(labelNames []string) *prometheus.Desc {
	key := m.name + "\xff" + strings.Join(labelNames, "\xff")
	if d, ok := descs.Load(key); ok {
		return d.(*prometheus.Desc)
	}
	d, _ := descs.LoadOrStore(key, prometheus.NewDesc(m.name, m.help, labelNames, nil))
	return d.(*prometheus.Desc)
}

// labels is a label set under construction: names and values, then an
// owner's pairs and up to two pairs added by with, neither yet copied into
// them. Most series are a device's labels, an owner's, and one or two of
// their own ("sensor", "clock", "type" and "scope"); keeping those apart
// lets emit find a cached series without allocating, and copies them only
// for a new one.
type labels struct {
	names  []string
	values []string
	owner  [attribution.MaxLabelPairs][2]string // name, value
	no     int
	extra  [2][2]string // name, value
	n      int
	// sum is the hash of names, values and owner when summed: worked out
	// once for a device's or an owner's labels rather than for each of
	// their series (sealed).
	sum    seriesHash
	summed bool
}

// sealed returns l with the hash of its names, values and owner worked
// out, for labels that many series start from.
func (l labels) sealed() labels {
	l.summed = false // l may be made from sealed labels with fewer pairs
	l.sum, l.summed = l.prefixSum(), true
	return l
}

// prefixSum hashes the pairs of l that come before those added by with.
func (l labels) prefixSum() seriesHash {
	if l.summed {
		return l.sum
	}
	h := seriesHash{seriesHashInit, seriesHashInit}
	for i := range l.names {
		h = hashPair(h, l.names[i], l.values[i])
	}
	for _, x := range l.owner[:l.no] {
		h = hashPair(h, x[0], x[1])
	}
	return h
}

func (l labels) with(name, value string) labels {
	if l.n < len(l.extra) {
		l.extra[l.n] = [2]string{name, value}
		l.n++
		return l
	}
	l = l.flat()
	return labels{
		names:  append(l.names[:len(l.names):len(l.names)], name),
		values: append(l.values[:len(l.values):len(l.values)], value),
	}
}

// flat returns l with its added pairs copied into names and values.
func (l labels) flat() labels {
	if l.n == 0 && l.no == 0 {
		return l
	}
	f := labels{
		names:  append(make([]string, 0, len(l.names)+l.no+l.n), l.names...),
		values: append(make([]string, 0, len(l.values)+l.no+l.n), l.values...),
	}
	for _, x := range l.owner[:l.no] {
		f.names = append(f.names, x[0])
		f.values = append(f.values, x[1])
	}
	for _, x := range l.extra[:l.n] {
		f.names = append(f.names, x[0])
		f.values = append(f.values, x[1])
	}
	return f
}

// emitter sends one collector's metrics for one scrape, in batches cut
// from slabs: a busy node's scrape has thousands of samples, and boxing
// each and sending it on its own was a fifth of the scrape's CPU. A slab
// is never reused, so a metric stays valid for as long as anything holds
// it. The collector calls flush when it is done.
type emitter struct {
	ch  chan<- prometheus.Metric
	buf *[]cachedMetric
}

func newEmitter(ch chan<- prometheus.Metric) emitter {
	return emitter{ch: ch, buf: new([]cachedMetric)}
}

const slabSize = 64

func (e emitter) emit(m metric, l labels, v float64) {
	s := *e.buf
	if s == nil {
		s = make([]cachedMetric, 0, slabSize)
	}
	s = append(s, cachedMetric{series: seriesOf(m, l), value: v})
	if len(s) == cap(s) {
		e.ch <- batch(s)
		s = nil
	}
	*e.buf = s
}

// flush sends what emit has not sent yet.
func (e emitter) flush() {
	if s := *e.buf; len(s) > 0 {
		e.ch <- batch(s)
		*e.buf = nil
	}
}

// emitCreated sends a counter the exporter counts itself from 0, with the
// moment its series was made: the start of its count (a created
// timestamp), which the OTLP bridge needs to push its first point as an
// increase from 0 rather than a baseline of unknown start.
func (e emitter) emitCreated(m metric, l labels, v float64, created time.Time) {
	e.ch <- &createdMetric{cachedMetric: cachedMetric{series: seriesOf(m, l), value: v}, created: timestamppb.New(created)}
}

// createdMetric is a cachedMetric counter with its created timestamp.
type createdMetric struct {
	cachedMetric
	created *timestamppb.Timestamp
}

func (c *createdMetric) Write(out *dto.Metric) error {
	if err := c.cachedMetric.Write(out); err != nil {
		return err
	}
	if out.Counter != nil {
		out.Counter.CreatedTimestamp = c.created
	}
	return nil
}

// emitOne sends one sample on its own, for the few sent outside a
// collector's Update.
func emitOne(ch chan<- prometheus.Metric, m metric, l labels, v float64) {
	ch <- &cachedMetric{series: seriesOf(m, l), value: v}
}

// batch is samples of one emitter sent as one value. Only the text path
// (writeText) and scrape.Collect, which hands a registry the samples one
// by one, take it; anything else is given an error.
type batch []cachedMetric

var errBatch = errors.New("a batch of samples is not a metric: collect it through scrape.Collect")

func (batch) Desc() *prometheus.Desc  { return prometheus.NewInvalidDesc(errBatch) }
func (batch) Write(*dto.Metric) error { return errBatch }

// A series' descriptor and sorted label pairs are built once and reused by
// every scrape while the series exists: a device's and owner's labels change
// rarely, and building them was most of a scrape's work. Series unused for
// seriesMaxAge scrapes are forgotten, so churning pods cannot grow the cache
// without bound.
type series struct {
	desc  *prometheus.Desc
	typ   prometheus.ValueType
	pairs []*dto.LabelPair
	used  atomic.Uint64 // the scrape generation that last used it

	// For the text exposition (exposition.go): the family, the series'
	// name and labels as written before the value, why the series cannot
	// be written (nil if it can), and the text scrape that last wrote it.
	fam     *family
	text    []byte
	invalid error
	written atomic.Uint64
	// order is the label values joined by NULs, which sorts the series of
	// one family as lessPairs does with one comparison of strings; empty
	// (and unused) when a value holds a NUL itself.
	order string
}

const seriesMaxAge = 10

var (
	seriesMu    sync.RWMutex
	seriesCache = map[seriesHash]*series{}
	seriesGen   atomic.Uint64
	seriesSeeds = [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}
)

// seriesHash names a series by two independent 64-bit hashes of its name
// and label pairs, so that the cache is looked up without joining the pairs
// into a key. Two series of one node would have to collide in both, one
// chance in 2^128, to be taken for each other: far below the chance of a
// memory error corrupting a joined key.
type seriesHash [2]uint64

const (
	seriesHashInit  = 14695981039346656037
	seriesHashPrime = 1099511628211
)

func (h seriesHash) add(s string) seriesHash {
	return seriesHash{
		(h[0] ^ maphash.String(seriesSeeds[0], s)) * seriesHashPrime,
		(h[1] ^ maphash.String(seriesSeeds[1], s)) * seriesHashPrime,
	}
}

// hashPair folds one label pair into h. The pairs are folded in order, so
// labels whose pairs are split differently between names, owner and extra
// hash alike, as they name the same series.
func hashPair(h seriesHash, name, value string) seriesHash {
	return h.add(name).add(value)
}

func seriesKey(m metric, l labels) seriesHash {
	h := l.prefixSum()
	for _, x := range l.extra[:l.n] {
		h = hashPair(h, x[0], x[1])
	}
	return h.add(m.name)
}

// seriesOf finds the series of m with labels l, building it the first
// time. A device's or owner's pairs are hashed once for all their series
// (labels.sealed), so a scrape hashes little more than each series' own
// pairs and its name.
func seriesOf(m metric, l labels) *series {
	h := seriesKey(m, l)
	gen := seriesGen.Load()
	seriesMu.RLock()
	s, ok := seriesCache[h]
	seriesMu.RUnlock()
	if ok {
		if s.used.Load() != gen {
			s.used.Store(gen) // a store each time costs a fence
		}
		return s
	}
	l = l.flat()
	desc := m.desc(l.names)
	s = &series{desc: desc, typ: m.typ, pairs: prometheus.MakeLabelPairs(desc, validUTF8(l.values)), fam: familyOf(m)}
	s.text, s.invalid = seriesText(m.name, s.pairs)
	s.order = sortKey(s.pairs)
	if m.histogram && !model.LegacyValidation.IsValidMetricName(m.name) {
		// Its _bucket, _sum and _count lines are written after the name.
		s.invalid = fmt.Errorf("histogram %q: the name is not a legacy metric name", m.name)
	}
	s.used.Store(gen)
	seriesMu.Lock()
	defer seriesMu.Unlock()
	if old, ok := seriesCache[h]; ok {
		return old
	}
	seriesCache[h] = s
	return s
}

// validUTF8 returns values with every byte that is not part of a UTF-8
// character replaced by U+FFFD, as /devices' JSON writes them. The text
// format cannot carry such a value, and leaving the series out would let any
// user hide a GPU's health: a process names itself with any bytes it likes
// (prctl PR_SET_NAME), the kernel cuts a name at 15 bytes even inside a
// character, and a sole owner's labels are on every series of its device.
func validUTF8(values []string) []string {
	for i, v := range values {
		if utf8.ValidString(v) {
			continue
		}
		fixed := append([]string(nil), values...)
		for j := i; j < len(fixed); j++ {
			fixed[j] = validutf8.String(fixed[j])
		}
		return fixed
	}
	return values
}

// sweepSeries ends a scrape generation and forgets the series no scrape of
// the last seriesMaxAge generations used.
func sweepSeries() {
	gen := seriesGen.Add(1)
	if gen%seriesMaxAge != 0 {
		return
	}
	seriesMu.Lock()
	defer seriesMu.Unlock()
	for h, s := range seriesCache {
		if gen-s.used.Load() > seriesMaxAge {
			delete(seriesCache, h)
		}
	}
}

// cachedMetric is one sample of a cached series.
type cachedMetric struct {
	series *series
	value  float64
}

func (c cachedMetric) Desc() *prometheus.Desc { return c.series.desc }

// Write shares the series' label pairs: the registry and encoders only read
// them.
func (c cachedMetric) Write(out *dto.Metric) error {
	out.Label = c.series.pairs
	v := c.value
	switch c.series.typ {
	case prometheus.CounterValue:
		out.Counter = &dto.Counter{Value: &v}
	default:
		out.Gauge = &dto.Gauge{Value: &v}
	}
	return nil
}

// deviceLabels are the labels of every device series: the device's identity
// and, when it has exactly one owner, the owner's labels. A GPU in MIG mode
// never carries owner labels: its owners own its instances, not the GPU,
// even when only one instance is in use.
func deviceLabels(d *Device) labels {
	l := identityLabels(d)
	if o, ok := d.owner(); ok && !d.HasMIG {
		l = l.withOwner(o)
	}
	return l
}

func (l labels) withOwner(o attribution.Owner) labels {
	if l.no > 0 || l.n > 0 {
		l = l.flat() // the owner's pairs follow those already added
	}
	l.owner, l.no = o.LabelPairs()
	return l.sealed()
}

// identityLabels identify a device: gpu, uuid, vendor, model, and for MIG
// instances their parent, profile and instance.
//
// A device that stopped answering before it was ever identified has only
// gpu and vendor: an empty uuid or model would be a made-up value.
func identityLabels(d *Device) labels {
	l := labels{names: make([]string, 0, 7), values: make([]string, 0, 7)}
	add := func(name, value string) {
		l.names = append(l.names, name)
		l.values = append(l.values, value)
	}
	add("gpu", d.Index)
	if d.UUID != "" {
		add("uuid", d.UUID)
	}
	add("vendor", d.Vendor)
	if d.Model != "" {
		add("model", d.Model)
	}
	if d.MIG != nil {
		add("parent_uuid", d.MIG.ParentUUID)
		add("mig_profile", d.MIG.Profile)
		add("mig_instance", d.MIG.Instance)
	}
	// Cut to length: labels made from this one append to copies.
	l.names, l.values = l.names[:len(l.names):len(l.names)], l.values[:len(l.values):len(l.values)]
	return l.sealed()
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// sortDevices orders devices by vendor and numeric index, each whole GPU
// before its MIG instances, so that output and /devices are stable.
func sortDevices(devs []*Device) {
	sort.SliceStable(devs, func(i, j int) bool {
		a, b := devs[i], devs[j]
		if a.Vendor != b.Vendor {
			return a.Vendor < b.Vendor
		}
		if ai, bi := atoi(a.Index), atoi(b.Index); ai != bi {
			return ai < bi
		}
		if (a.MIG == nil) != (b.MIG == nil) {
			return a.MIG == nil
		}
		if a.MIG != nil && a.MIG.Instance != b.MIG.Instance {
			return atoi(a.MIG.Instance) < atoi(b.MIG.Instance)
		}
		return a.UUID < b.UUID
	})
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return -1
	}
	return n
}
