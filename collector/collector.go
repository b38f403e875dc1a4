// Package collector turns one node snapshot per scrape into Prometheus
// metrics: device metrics per vendor, attribution and self-metrics.
package collector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/xpu-exporter/xpu_exporter/attribution"
	"github.com/xpu-exporter/xpu_exporter/attribution/kubernetes"
	"github.com/xpu-exporter/xpu_exporter/internal/flight"
)

const namespace = "xpu"

// Collector emits the metrics of one source family from a snapshot.
type Collector interface {
	Update(ctx context.Context, snap *Snapshot, ch chan<- prometheus.Metric) error
}

// Config carries what collectors need from the outside world. Tests and demo
// mode fill it with simulated backends.
type Config struct {
	Logger *slog.Logger
	NVML   nvml.Interface
	// HLSMIPath is the hl-smi binary; empty uses vendors/gaudi's default.
	HLSMIPath string
	// HLSMIFields are the --query-aip fields asked of hl-smi; empty asks
	// for vendors/gaudi's DefaultFields.
	HLSMIFields []string
	// Procfs and Sysfs are where procfs and sysfs are mounted (--path.*);
	// empty means /proc and /sys.
	Procfs, Sysfs string
	// Attribution resolves device owners; nil leaves devices unowned.
	Attribution *attribution.Resolver
	// PodMetadata lists the node's pods, to discover inference engines.
	PodMetadata kubernetes.MetadataSource
	// NodeName is this node's name, for per-node settings.
	NodeName string
	// GRESByDeviceFile numbers NVIDIA GPUs for Slurm's GRES indices by
	// their device files (/dev/nvidiaN) instead of NVML's order
	// (gresIndices).
	GRESByDeviceFile bool
	Now              func() time.Time
}

type factory struct {
	enabled *bool
	new     func(Config) (Collector, error)
}

var (
	factoriesMu sync.Mutex
	factories   = map[string]factory{}
)

// registerCollector declares a collector and its --collector.<name> flag,
// in the style of node_exporter.
func registerCollector(name string, enabledByDefault bool, help string, newFn func(Config) (Collector, error)) {
	def := "false"
	state := "disabled"
	if enabledByDefault {
		def, state = "true", "enabled"
	}
	flag := kingpin.Flag("collector."+name, fmt.Sprintf("%s (default: %s).", help, state)).Default(def).Bool()
	factoriesMu.Lock()
	defer factoriesMu.Unlock()
	factories[name] = factory{enabled: flag, new: newFn}
}

// Enable switches collectors on or off regardless of flags, for tests and
// programs that embed the exporter.
func Enable(states map[string]bool) error {
	factoriesMu.Lock()
	defer factoriesMu.Unlock()
	for name, on := range states {
		f, ok := factories[name]
		if !ok {
			return fmt.Errorf("unknown collector %q", name)
		}
		*f.enabled = on
	}
	return nil
}

// Exporter gathers every enabled collector from one shared snapshot.
type Exporter struct {
	logger     *slog.Logger
	collectors map[string]Collector
	names      []string
	snapshots  *snapshotter

	// Samples the text exposition left out, by reason, and whether the
	// last text scrape left out any for that reason.
	dropped  [dropReasons]atomic.Uint64
	dropping [dropReasons]atomic.Bool
	// lastScrape and prevScrape are when the last two scrapes asked for
	// the node, in Unix nanoseconds of the exporter's clock; 0 before.
	lastScrape, prevScrape atomic.Int64
}

// scrapesActive is how recent the last two scrapes must be for a push to
// leave the window to scrapes: Prometheus's default lookback. A server
// scraping less often than that sees gaps in every series anyway; one
// request alone (someone's curl) is not a server scraping.
const scrapesActive = 5 * time.Minute

var (
	collectorDuration = gauge("scrape_collector_duration_seconds",
		"Time a collector took in this scrape, including its part of the node snapshot.")
	collectorSuccess = gauge("scrape_collector_success",
		"1 if the collector succeeded in this scrape, 0 if it failed or missed the deadline.")
	scrapesCoalesced = counter("scrape_coalesced_total",
		"Scrapes served from a node snapshot, or a whole response, that a concurrent scrape was already taking.")
)

// New builds the enabled collectors.
func New(cfg Config) (*Exporter, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	e := &Exporter{
		logger:     cfg.Logger,
		collectors: map[string]Collector{},
		snapshots:  &snapshotter{sources: map[string]source{}, stuck: map[string]*read{}, resolver: cfg.Attribution, now: cfg.Now, gresByFile: cfg.GRESByDeviceFile, logger: cfg.Logger, builds: flight.Group[struct{}, build]{Slack: flight.ScrapeSlack}},
	}
	factoriesMu.Lock()
	defer factoriesMu.Unlock()
	for name, f := range factories {
		if !*f.enabled {
			continue
		}
		c, err := f.new(cfg)
		if err != nil {
			return nil, fmt.Errorf("collector %s: %w", name, err)
		}
		e.collectors[name] = c
		e.names = append(e.names, name)
		if src, ok := c.(source); ok {
			e.snapshots.sources[name] = src
		}
	}
	sort.Strings(e.names)
	if cfg.Attribution != nil {
		// Allocations of the vendors no collector reads here are another
		// exporter's (the chart's per-vendor DaemonSets), not IDs that
		// name no device.
		var vendors []string
		for name, vendor := range sourceVendors {
			if _, ok := e.snapshots.sources[name]; ok {
				vendors = append(vendors, vendor)
			}
		}
		cfg.Attribution.ServeVendors(vendors)
	}
	// A family that two collectors can fill is emitted by one of them,
	// which each learns once all are built.
	for _, c := range e.collectors {
		if p, ok := c.(interface{ peers(map[string]Collector) }); ok {
			p.peers(e.collectors)
		}
	}
	return e, nil
}

// Start runs the collectors' background work (NVML event listening) until
// ctx ends. Nothing else polls: everything else is read at scrape time. One
// snapshot is taken at once, so that readings that need two samples (GPM
// profiling, a MIG instance's utilization) are there at the first scrape.
func (e *Exporter) Start(ctx context.Context) {
	go func() {
		warm, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		// The warm-up is the start of the first scrape's window.
		e.snapshots.get(warm, moveScrape)
	}()
	for _, c := range e.collectors {
		if b, ok := c.(interface {
			background(context.Context, func(context.Context) *Snapshot)
		}); ok {
			go b.background(ctx, e.Snapshot)
		}
	}
}

// sourceVendors are the vendors of the collectors that read devices, as the
// kubelet's resource names and DRA drivers tell them.
var sourceVendors = map[string]string{
	"nvidia": kubernetes.VendorNVIDIA,
	"amd":    kubernetes.VendorAMD,
	"gaudi":  kubernetes.VendorHabana,
}

// lifetime is the exporter's run as a collector learns it in background:
// whether the exporter is stopping, so that what the stop cuts short (reads
// under way: the warm-up's at once, scrapes' after their grace) is not
// logged as the source failing.
type lifetime struct {
	lifeMu sync.Mutex
	life   context.Context // nil before the exporter starts
}

func (l *lifetime) begin(ctx context.Context) {
	l.lifeMu.Lock()
	defer l.lifeMu.Unlock()
	l.life = ctx
}

func (l *lifetime) stopping() bool {
	l.lifeMu.Lock()
	defer l.lifeMu.Unlock()
	return l.life != nil && l.life.Err() != nil
}

// Close releases what collectors hold, such as the NVML library.
func (e *Exporter) Close() {
	for _, c := range e.collectors {
		if closer, ok := c.(interface{ Close() }); ok {
			closer.Close()
		}
	}
}

// CountCoalesced counts a scrape served with the response of a concurrent
// scrape, which was taken from that scrape's snapshot.
func (e *Exporter) CountCoalesced() { e.snapshots.coalesced.Add(1) }

// Collectors lists the enabled collectors.
func (e *Exporter) Collectors() []string { return e.names }

// Snapshot returns the node as it is now, sharing a snapshot already being
// built by a concurrent scrape. It is nil when ctx ends first. Readings
// averaged since the previous scrape (utilization samples, GPM) cover the
// time since that scrape; only scrapes move that window on, so /devices and
// event owner look-ups never shorten it.
func (e *Exporter) Snapshot(ctx context.Context) *Snapshot { return e.snapshots.get(ctx, moveNone) }

// Bind returns a prometheus.Collector for one scrape bounded by ctx.
func (e *Exporter) Bind(ctx context.Context) prometheus.Collector {
	return scrape{e: e, ctx: ctx}
}

// BindPush returns a prometheus.Collector for one push (OTLP) bounded by
// ctx. While Prometheus scrapes the exporter (its last two scrapes within
// scrapesActive), a push reads the time since the last scrape and leaves
// the window where it was, as /devices does: a push moving it would
// shorten the next scrape's window, and what Prometheus stores would
// change with the push interval. Otherwise pushes move a window of their
// own, from the previous push, and leave the scrapes' where it was: a
// Prometheus's first scrape after start, or after one request alone,
// covers the time since the warm-up or that request, as with no bridge.
func (e *Exporter) BindPush(ctx context.Context) prometheus.Collector {
	return scrape{e: e, ctx: ctx, push: true}
}

type scrape struct {
	e    *Exporter
	ctx  context.Context
	push bool
}

// move says which window this read moves on, noting a scrape's time.
func (s scrape) move() move {
	now := s.e.snapshots.now()
	if !s.push {
		s.e.prevScrape.Store(s.e.lastScrape.Swap(now.UnixNano()))
		return moveScrape
	}
	if prev := s.e.prevScrape.Load(); prev == 0 || now.Sub(time.Unix(0, prev)) > scrapesActive {
		return movePush
	}
	return moveNone
}

// Describe sends nothing: the exporter is an unchecked collector, because
// owner labels make label sets differ from device to device.
func (scrape) Describe(chan<- *prometheus.Desc) {}

// Collect hands a registry the scrape's samples one by one.
func (s scrape) Collect(ch chan<- prometheus.Metric) {
	in := make(chan prometheus.Metric, 16)
	go func() {
		s.collect(in)
		close(in)
	}()
	for m := range in {
		if b, ok := m.(batch); ok {
			for i := range b {
				ch <- &b[i]
			}
			continue
		}
		ch <- m
	}
}

// collect sends the scrape's samples, many of them in batches.
func (s scrape) collect(ch chan<- prometheus.Metric) {
	e := s.e
	snap := e.snapshots.get(s.ctx, s.move())
	emitOne(ch, scrapesCoalesced, labels{}, float64(e.snapshots.coalesced.Load()))
	if snap == nil {
		for _, name := range e.names {
			e.report(ch, name, 0, errors.New("deadline passed while waiting for the node snapshot"))
		}
		return
	}
	defer sweepSeries()
	var wg sync.WaitGroup
	for _, name := range e.names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			err := e.update(s.ctx, name, snap, ch)
			d := time.Since(start)
			if r, ok := snap.sources[name]; ok {
				d += r.duration
				if err == nil {
					err = r.err
				}
			}
			e.report(ch, name, d, err)
		}()
	}
	wg.Wait()
}

// update runs one collector, turning a panic into a failure of that
// collector alone.
func (e *Exporter) update(ctx context.Context, name string, snap *Snapshot, ch chan<- prometheus.Metric) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return e.collectors[name].Update(ctx, snap, ch)
}

func (e *Exporter) report(ch chan<- prometheus.Metric, name string, d time.Duration, err error) {
	success := 1.0
	if err != nil {
		success = 0
		// Debug only: collectors log state changes themselves, once, rather
		// than the same failure at every scrape.
		e.logger.Debug("collector failed", "collector", name, "duration_seconds", d.Seconds(), "err", err)
	}
	l := labels{}.with("collector", name)
	emitOne(ch, collectorDuration, l, d.Seconds())
	emitOne(ch, collectorSuccess, l, success)
}
