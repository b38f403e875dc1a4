package collector

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"
	"gopkg.in/yaml.v3"

	"github.com/xpu-exporter/xpu_exporter/attribution"
	"github.com/xpu-exporter/xpu_exporter/attribution/kubernetes"
	"github.com/xpu-exporter/xpu_exporter/engines"
	"github.com/xpu-exporter/xpu_exporter/internal/flight"
	"github.com/xpu-exporter/xpu_exporter/internal/grace"
)

func init() {
	registerCollector("engines", true,
		"Inference engines (vLLM, SGLang, TGI, Triton, NIM) scraped at scrape time and joined to the pods and GPUs they run on", newEnginesCollector)
}

// Pod annotations that make a pod's inference engine scraped.
const (
	engineAnnotation = "xpu-exporter.io/engine"
	portAnnotation   = "xpu-exporter.io/port"
	pathAnnotation   = "xpu-exporter.io/path"
	schemeAnnotation = "xpu-exporter.io/scheme"
	modelAnnotation  = "xpu-exporter.io/model"
)

// defaultPorts are where each engine serves its metrics by default.
var defaultPorts = map[engines.Engine]string{
	engines.VLLM: "8000", engines.SGLang: "30000", engines.TGI: "80", engines.Triton: "8002", engines.NIM: "8000",
}

// metricsPath is where engine serves its metrics by default: NIM at
// /v1/metrics ("By default, these metrics are available at
// http://localhost:8000/v1/metrics", NVIDIA NIM for LLMs documentation,
// Observability, from 1.0), the others at /metrics.
func metricsPath(engine engines.Engine) string {
	if engine == engines.NIM {
		return "/v1/metrics"
	}
	return "/metrics"
}

// engineImages recognise an engine's official images, for pods without the
// annotation. A container is scraped only if it also declares the engine's
// metrics port: an image name alone says too little about where it listens.
var engineImages = []struct {
	engine engines.Engine
	image  string // a substring of the image reference
}{
	{engines.VLLM, "vllm/vllm-openai"},
	{engines.SGLang, "lmsysorg/sglang"},
	{engines.TGI, "huggingface/text-generation-inference"},
	{engines.Triton, "nvidia/tritonserver"},
	{engines.NIM, "nvcr.io/nim/"},
}

var (
	engineTargets = kingpin.Flag("engines.target",
		"An inference engine's metrics endpoint, ENGINE=URL (ENGINE: vllm, sglang, tgi, triton, nim, or auto). Repeatable.").Strings()
	engineConfig = kingpin.Flag("engines.config",
		"YAML file of engine targets: targets: [{engine, url, model, pod: namespace/name, unit}] (pod or unit joins a target to its GPUs on bare metal or outside discovery).").Default("").String()
	engineDiscover = kingpin.Flag("engines.discover",
		"Scrape the engines of this node's pods annotated "+engineAnnotation+": ENGINE (with "+portAnnotation+", "+pathAnnotation+"), and of pods running an engine's official image that declare its metrics port. Needs the kubelet Pods API for pod IPs.").Default("true").Bool()
	engineMaxBytes = kingpin.Flag("engines.max-bytes", "Largest engine response read; a larger one fails that target.").Default("16777216").Int64()
	engineParallel = kingpin.Flag("engines.concurrency", "Engine endpoints scraped at once; beside them, half as many that were slow at their last scrape, so that endpoints that stall hold no other's slot.").Default("8").Int()
	// A vLLM exposes a few hundred series per model; 20,000 is far above
	// any engine seen, and bounds one parse to some tens of megabytes.
	engineMaxSeries = kingpin.Flag("engines.max-series", "Most series of the families the exporter reads kept from one engine response; more fails that target.").Default("20000").Int()
	// Each model is a dozen series of the exporter's own, histograms
	// included, kept for every scrape: an endpoint naming thousands of
	// models would multiply the exporter's output and memory.
	engineMaxModels = kingpin.Flag("engines.max-models", "Most models one engine response may report (a Triton serving more: raise it); more fails that target. 0: no limit.").Default("100").Int()
)

var (
	inferenceUp       = gauge("inference_up", "1 if the inference engine's metrics endpoint answered with valid metrics in this scrape.")
	inferenceDuration = gauge("inference_scrape_duration_seconds", "Time scraping the inference engine's metrics endpoint took.")
	inferenceDevices  = gauge("inference_device_info", "A device the inference engine runs on, with its owner; always 1. Joins engine metrics to device metrics.")
)

// engineTarget is an endpoint to scrape and what it is joined to.
type engineTarget struct {
	Engine string `yaml:"engine"`
	URL    string `yaml:"url"`
	Model  string `yaml:"model"`
	// Pod (namespace/name) or Unit name the owner whose devices the engine
	// runs on.
	Pod  string `yaml:"pod"`
	Unit string `yaml:"unit"`
	// refused is why a pod's annotations give no endpoint to scrape; its
	// URL is then the pod's namespace/name.
	refused string
}

// engineName is name as the engine label spells it, for an engine known
// whatever its case (engines.ParseEngine) and auto; else name as given.
func engineName(name string) string {
	if strings.EqualFold(name, "auto") {
		return "auto"
	}
	if e, err := engines.ParseEngine(name); err == nil {
		return string(e)
	}
	return name
}

type enginesCollector struct {
	static   []engineTarget
	metadata kubernetes.MetadataSource
	client   *http.Client
	logger   *slog.Logger

	mu sync.Mutex
	// state is each target's last error, logged on change only, with the
	// scrape that last saw the target: targets of pods that are gone are
	// forgotten, so pod churn does not grow it.
	state map[string]targetState
	gen   uint64
	// late are the targets logged as scraped that miss the scrapes'
	// deadlines, not logged yet (logChange).
	late grace.Holds
	// detected remembers the engine found behind an "auto" target, so that
	// its xpu_inference_up series keeps its engine label while it is down.
	detected map[string]string
	// counters keep each target's counters monotonic across the restarts
	// of the series Normalize adds up (engines.Corrector), forgotten with
	// the target.
	counters map[string]*engines.Corrector
	// joins are the owner and GPUs each unit target was last joined to,
	// forgotten with the target (join).
	joins map[string]engineJoin
	// pace is each target's pace at its last fetch that says one (pace),
	// which orders the fetches (Update); forgotten with the target.
	pace map[string]pace
	// fetches are the fetches under way, which concurrent scrapes (an HA
	// pair of Prometheus servers) share as they share device reads: an
	// engine's /metrics is fetched and parsed once, not once per scraper.
	// A fetch is cut short at its scrape's deadline, so it is joined only
	// within flight.ScrapeSlack of the joiner's own, as a snapshot is: a
	// scrape with a longer timeout was served a shorter one's timeout, the
	// engine down and its series missing (probe D, PD1).
	fetches flight.Group[engineTarget, engineResult]
}

// checkEngineLimits refuses limits that would fail every target at every
// scrape (0 bytes or series) or never scrape one (no concurrency).
func checkEngineLimits(maxBytes int64, parallel, maxSeries, maxModels int) error {
	var problems []error
	if maxBytes <= 0 {
		problems = append(problems, fmt.Errorf("--engines.max-bytes=%d: want more than 0", maxBytes))
	}
	if parallel <= 0 {
		problems = append(problems, fmt.Errorf("--engines.concurrency=%d: want 1 or more", parallel))
	}
	if maxSeries <= 0 {
		problems = append(problems, fmt.Errorf("--engines.max-series=%d: want more than 0", maxSeries))
	}
	if maxModels < 0 {
		problems = append(problems, fmt.Errorf("--engines.max-models=%d: want 0 (no limit) or more", maxModels))
	}
	return errors.Join(problems...)
}

func newEnginesCollector(cfg Config) (Collector, error) {
	if err := checkEngineLimits(*engineMaxBytes, *engineParallel, *engineMaxSeries, *engineMaxModels); err != nil {
		return nil, err
	}
	c := &enginesCollector{client: &http.Client{CheckRedirect: sameHostRedirect}, logger: cfg.Logger, state: map[string]targetState{}, detected: map[string]string{}, counters: map[string]*engines.Corrector{}, joins: map[string]engineJoin{},
		pace: map[string]pace{}, fetches: flight.Group[engineTarget, engineResult]{Slack: flight.ScrapeSlack}}
	if *engineDiscover && cfg.PodMetadata != nil {
		c.metadata = cfg.PodMetadata
	}
	for _, t := range *engineTargets {
		engine, u, ok := strings.Cut(t, "=")
		if !ok {
			return nil, fmt.Errorf("--engines.target %q: want ENGINE=URL", t)
		}
		c.static = append(c.static, engineTarget{Engine: engine, URL: u})
	}
	if *engineConfig != "" {
		b, err := os.ReadFile(*engineConfig)
		if err != nil {
			return nil, fmt.Errorf("--engines.config: %w", err)
		}
		targets, err := parseEngineConfig(b)
		if err != nil {
			return nil, fmt.Errorf("--engines.config %s: %w", *engineConfig, err)
		}
		c.static = append(c.static, targets...)
	}
	first := map[string]engineTarget{}
	for i := range c.static {
		c.static[i].Engine = engineName(c.static[i].Engine)
		t := c.static[i]
		if err := t.validate(); err != nil {
			return nil, fmt.Errorf("engine target %d: %w", i, err)
		}
		// One endpoint is served once, as one engine of one owner: which
		// of two would win is up to the order of the flags, and the other
		// went unseen.
		u := redact(t.URL)
		if was, dup := first[u]; dup && was.Engine != t.Engine {
			return nil, fmt.Errorf("engine target %d: %s is configured as %s and as %s; an endpoint serves one engine", i, u, was.Engine, t.Engine)
		} else if dup && was != t {
			return nil, fmt.Errorf("engine target %d: %s is configured twice, with another pod, unit, model or credentials; an endpoint is one engine's", i, u)
		}
		first[u] = t
	}
	return c, nil
}

// parseEngineConfig reads an --engines.config file; unknown keys are errors.
func parseEngineConfig(b []byte) ([]engineTarget, error) {
	var file struct {
		Targets []engineTarget `yaml:"targets"`
	}
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&file); err != nil {
		return nil, err
	}
	return file.Targets, nil
}

func (t engineTarget) validate() error {
	if t.Engine != "auto" {
		if _, err := engines.ParseEngine(t.Engine); err != nil {
			return err
		}
	}
	if u, err := url.Parse(t.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q is not an http(s) URL", t.URL)
	}
	return nil
}

// targets are the static targets and the annotated pods of the node. A
// pod whose annotations give no endpoint is a target too, refused: one log
// line alone left nothing to alert on (probe D, PD7).
func (c *enginesCollector) targets() []engineTarget {
	out := append([]engineTarget(nil), c.static...)
	if c.metadata == nil {
		return out
	}
	for _, p := range c.metadata.Pods() {
		engine := p.Annotations[engineAnnotation]
		if engine == "" {
			if t, ok := imageTarget(p); ok {
				out = append(out, t)
			}
			continue
		}
		out = append(out, podTarget(p, engineName(engine)))
	}
	return out
}

// podTarget is the endpoint the annotations of pod p name, of engine.
func podTarget(p kubernetes.PodMeta, engine string) engineTarget {
	pod := p.Namespace + "/" + p.Name
	refuse := func(format string, args ...any) engineTarget {
		return engineTarget{Engine: engine, URL: pod, Pod: pod, refused: fmt.Sprintf(format, args...)}
	}
	e, err := engines.ParseEngine(engine)
	if err != nil && engine != "auto" {
		return refuse("pod annotation %s: %v", engineAnnotation, err)
	}
	if p.IP == "" {
		return refuse("no pod IP known (it comes from the kubelet Pods API)")
	}
	port := p.Annotations[portAnnotation]
	if port == "" {
		port = defaultPorts[e]
	}
	if port == "" {
		// auto has no usual port: port 80 would be a guess.
		return refuse("pod annotation %s: auto needs %s", engineAnnotation, portAnnotation)
	}
	path := p.Annotations[pathAnnotation]
	if path == "" {
		path = metricsPath(e)
	}
	// A query string is the endpoint's, as in a configured URL: kept as
	// a path, its ? was escaped and the engine answered 404.
	path, query, _ := strings.Cut(path, "?")
	scheme := p.Annotations[schemeAnnotation]
	if scheme != "https" {
		scheme = "http"
	}
	u := url.URL{Scheme: scheme, Host: net.JoinHostPort(p.IP, port), Path: path, RawQuery: query}
	if _, err := url.Parse(u.String()); err != nil {
		return refuse("pod annotations %s, %s: %v", portAnnotation, pathAnnotation, err)
	}
	return engineTarget{Engine: engine, URL: u.String(), Model: p.Annotations[modelAnnotation], Pod: pod}
}

// imageTarget is the engine of a pod found by its container's image and
// declared metrics port.
func imageTarget(p kubernetes.PodMeta) (engineTarget, bool) {
	if p.IP == "" {
		return engineTarget{}, false
	}
	for _, ctr := range p.Containers {
		for _, known := range engineImages {
			if !strings.Contains(ctr.Image, known.image) {
				continue
			}
			port := defaultPorts[known.engine]
			for _, declared := range ctr.Ports {
				if strconv.Itoa(int(declared)) == port {
					u := url.URL{Scheme: "http", Host: net.JoinHostPort(p.IP, port), Path: metricsPath(known.engine)}
					return engineTarget{Engine: string(known.engine), URL: u.String(), Pod: p.Namespace + "/" + p.Name}, true
				}
			}
		}
	}
	return engineTarget{}, false
}

type targetState struct {
	err string
	gen uint64
	// skipping says the target's last answer had series Normalize could
	// not map, logged when that starts and ends; skipped is which, and
	// why (skippedSet), logged when it changes.
	skipping bool
	skipped  uint64
}

// logChange logs a target's change of state. A target scraped before that
// misses a scrape's deadline is logged once it has not answered in time
// for grace.Period: an HA pair whose timeouts differ logged a target
// slower than one's and faster than the other's as lost and back at every
// round, and one scrape asking for a millisecond every target (probe H,
// PH4).
func (c *enginesCollector) logChange(target string, err error) {
	msg := errorState(err)
	c.mu.Lock()
	defer c.mu.Unlock()
	old, known := c.state[target]
	if known && old.err == "" && errors.Is(err, context.DeadlineExceeded) && c.late.Hold(target, time.Now()) {
		old.gen = c.gen
		c.state[target] = old
		return
	}
	delete(c.late, target)
	c.state[target] = targetState{err: msg, gen: c.gen, skipping: old.skipping, skipped: old.skipped}
	if known && old.err == msg {
		return
	}
	if err != nil {
		c.logger.Warn("inference engine not scraped", "target", target, "err", err)
	} else {
		c.logger.Info("inference engine scraped", "target", target)
	}
}

// elsewhere says the pod ("namespace/name") of a target is not on this
// node, as far as the node's pod metadata tells (it lists this node's pods
// only); the caller asks the kubelet's view too. Every node's exporter is given the same configured targets (the
// chart's extraArgs): one of a pod elsewhere is the engine of the exporter
// of the pod's node, and each node served it, counting its tokens once per
// node (review22 F5). Without pod metadata, or while it is not being kept
// current, nothing says so.
func (c *enginesCollector) elsewhere(pod string) bool {
	if c.metadata == nil || c.metadata.Name() == kubernetes.SourceNone || c.metadata.Healthy() != nil {
		return false
	}
	ns, name, _ := strings.Cut(pod, "/")
	_, ok := c.metadata.Pod(ns, name)
	return !ok
}

// logElsewhere logs, once, that target is left to the exporter of the node
// its pod runs on (elsewhere).
func (c *enginesCollector) logElsewhere(target, pod string) {
	const state = "pod elsewhere"
	c.mu.Lock()
	defer c.mu.Unlock()
	old, known := c.state[target]
	c.state[target] = targetState{err: state, gen: c.gen}
	if known && old.err == state {
		return
	}
	c.logger.Info("inference engine not scraped here: its configured pod is not on this node; the exporter of the pod's node serves it", "target", target, "pod", pod)
}

// logSkipped logs a target whose answer has series that cannot be mapped
// (a histogram Prometheus would misread, a value of the wrong type) when
// that starts, with why, when the series left out or why change, and when
// it ends: the target stays up with the rest of its series, so without
// this they would go missing unseen. A family left out while another
// problem was still told went unnamed (probe D, PD5).
func (c *enginesCollector) logSkipped(target string, skipped error) {
	set := skippedSet(skipped)
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.state[target]
	if st.skipping == (skipped != nil) && st.skipped == set {
		return
	}
	st.skipping, st.skipped = skipped != nil, set
	c.state[target] = st
	if skipped != nil {
		c.logger.Warn("inference engine series left out: they cannot be mapped without misreading them", "target", target, "err", skipped)
	} else {
		c.logger.Info("inference engine series all mapped again", "target", target)
	}
}

// skippedSet identifies the series an answer left out and why, from the
// errors skipped joins, whatever their order, with the numbers of each
// reason masked: a count one ahead of its +Inf bucket, or a sample stamped
// long ago, gives other numbers at every scrape and is still one problem.
// A hash, so that a target leaving out thousands of series keeps 8 bytes.
func skippedSet(skipped error) uint64 {
	if skipped == nil {
		return 0
	}
	var leaves []string
	var walk func(error)
	walk = func(err error) {
		if joined, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range joined.Unwrap() {
				walk(e)
			}
			return
		}
		msg := err.Error()
		// A series' labels are not masked: adapter-1 and adapter-2 are two
		// series.
		cut := strings.Index(msg, "}: ") + 1
		if cut == 0 {
			cut = strings.Index(msg, ": ") + 1
		}
		leaves = append(leaves, msg[:cut]+digits.ReplaceAllString(msg[cut:], "#"))
	}
	walk(skipped)
	slices.Sort(leaves)
	h := fnv.New64a()
	for _, l := range slices.Compact(leaves) {
		h.Write([]byte(l))
		h.Write([]byte{0})
	}
	return h.Sum64()
}

var digits = regexp.MustCompile(`[0-9]+`)

// A target's own failures, told apart by errorState.
var (
	errTooManyModels = errors.New("models, more than --engines.max-models")
	errAllStale      = errors.New("every series is stale")
	errOtherHost     = errors.New("redirected to another host, not followed")
)

// sameHostRedirect follows an engine's redirect only to the host and port
// its target names, and at most 10 of them, as Go's client does by
// default. An annotated pod's endpoint is its tenant's to answer, and the
// exporter often runs in the host's network: followed anywhere, a
// redirect made it fetch node-local addresses for that tenant (probe K).
func sameHostRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	if req.URL.Host != via[0].URL.Host {
		return fmt.Errorf("%w: %s", errOtherHost, req.URL.Redacted())
	}
	return nil
}

// errorState names a target's failure for logging on change: by its kind
// where the message varies from scrape to scrape (a redirect loop whose URLs
// count up, a deadline, a parse error's line, a network error naming the
// connection's ephemeral local port), else by its message.
func errorState(err error) string {
	var uerr *url.Error
	var operr *net.OpError
	var errno syscall.Errno
	var status *engines.StatusError
	switch {
	case err == nil:
		return ""
	case errors.As(err, &status):
		// By its code: its reason phrase is the server's to word, and one
		// with a request ID in it was logged at every scrape (probe K, PK3).
		return fmt.Sprintf("status %d", status.Code)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return "timeout"
	case errors.Is(err, engines.ErrTooLarge):
		return "too large"
	case errors.Is(err, engines.ErrTooManySeries):
		return "too many series"
	case errors.Is(err, engines.ErrTooManyLabelPairs):
		return "too many label pairs"
	case errors.Is(err, errTooManyModels):
		return "too many models"
	case errors.Is(err, errAllStale):
		return "stale"
	case errors.As(err, &operr) && errors.As(operr.Err, &errno):
		return operr.Op + ": " + errno.Error()
	case errors.As(err, &operr):
		return operr.Op + " failed"
	case errors.Is(err, errOtherHost):
		return "redirect to another host"
	case errors.As(err, &uerr) && strings.Contains(uerr.Err.Error(), "redirects"):
		return "redirect loop"
	case strings.Contains(err.Error(), "parsing metrics"):
		return "invalid exposition"
	}
	return err.Error()
}

// engineResult is what one target gave in this scrape.
type engineResult struct {
	target   engineTarget
	engine   string
	samples  []engines.Sample
	err      error
	skipped  error // the series of a good answer Normalize left out, and why
	duration time.Duration
}

func (c *enginesCollector) Update(ctx context.Context, snap *Snapshot, ch chan<- prometheus.Metric) error {
	c.mu.Lock()
	c.gen++
	gen := c.gen
	c.mu.Unlock()
	defer c.forget(gen)
	// Another exporter of this node (the chart's DaemonSet of another
	// vendor) serves the engines of the pods that hold its devices. Where
	// such a pod holds this exporter's devices too, the engine is joined
	// to them here all the same (joinOnly): each exporter names the
	// devices it reads in xpu_inference_device_info, and the recording
	// rules, which sum over the node's exporters, count all of the
	// engine's devices (found by probing: probe18-multigpu D1, an engine
	// on an H100 and two MI300X cost what the H100 does).
	// A target that is no listed pod's (a configured one of a unit, of no
	// owner, or of a pod the kubelet does not list where no pod metadata
	// says it is elsewhere) is served by one exporter of the node too
	// (snap.engineOthers), the others naming the devices they read its
	// unit's processes on.
	var targets []engineTarget
	var joinOnly map[engineTarget]bool // nil on the common node
	for _, t := range c.targets() {
		mine, listed := snap.enginePods[t.Pod]
		if t.Pod != "" && !listed && c.elsewhere(t.Pod) {
			// Pod metadata is a second view, which may lag the kubelet's:
			// a pod whose process holds a device here is here (review23
			// F4: its engine was served by no node).
			if _, devices := joinEngine(snap, c.metadata, t); len(devices) == 0 {
				c.logElsewhere(redact(t.URL), t.Pod)
				continue
			}
		}
		if t.Pod == "" || !listed {
			mine = snap.engineOthers
		}
		if snap.enginePods != nil && !mine {
			if _, devices := joinEngine(snap, c.metadata, t); len(devices) == 0 {
				continue
			}
			if joinOnly == nil {
				joinOnly = map[engineTarget]bool{}
			}
			joinOnly[t] = true
		}
		targets = append(targets, t)
	}
	results := make([]engineResult, len(targets))
	// Endpoints that accept and never answer held every slot until the
	// deadline when there were as many as --engines.concurrency, and every
	// engine after them was reported down (probe J, PJ5): any tenant can
	// annotate pods. So targets that were slow at their last fetch wait
	// for slots of their own, half as many, and targets of no known pace
	// (new ones) take theirs after every target that was quick: a stalling
	// endpoint costs its own series, and from the next scrape on no other
	// target's slot.
	quick := make(chan struct{}, max(1, *engineParallel))
	slow := make(chan struct{}, max(1, *engineParallel/2))
	begun := time.Now()
	fetched := make([]bool, len(targets))
	paces := make([]pace, len(targets))
	var quickFirst sync.WaitGroup // the quick targets' turns at a slot
	c.mu.Lock()
	for i, t := range targets {
		paces[i] = c.pace[redact(t.URL)]
	}
	c.mu.Unlock()
	for i, t := range targets {
		switch {
		case t.refused != "":
			results[i] = engineResult{target: t, engine: t.Engine, err: errors.New(t.refused)}
		case joinOnly[t] && t.Engine != "auto":
			// Named by its configuration or annotation: no need to ask.
			// An "auto" one is asked at every scrape, as the serving
			// exporter does, so that both name it alike when another
			// engine takes its endpoint (review19 R1).
			results[i] = engineResult{target: t, engine: t.Engine}
		default:
			fetched[i] = true
			// Counted before any fetch starts, or a new target's could
			// find none yet to wait for.
			if paces[i] == paceQuick {
				quickFirst.Add(1)
			}
		}
	}
	var wg sync.WaitGroup
	for i, t := range targets {
		if !fetched[i] {
			continue
		}
		sem := quick
		if paces[i] == paceSlow {
			sem = slow
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if paces[i] == paceUnknown {
				quickFirst.Wait()
			}
			sem <- struct{}{}
			if paces[i] == paceQuick {
				quickFirst.Done()
			}
			defer func() { <-sem }()
			results[i] = c.shared(ctx, t)
		}()
	}
	wg.Wait()
	c.notePaces(ctx, begun, results, fetched)

	e := newEmitter(ch)
	defer e.flush()
	seen := map[string]engineTarget{} // by endpoint, the target served
	for _, r := range results {
		target := redact(r.target.URL)
		if first, ok := seen[target]; ok {
			// The same endpoint configured and found on a pod (two
			// configured targets are refused at start), or found on two
			// pods (a pod's IP handed to its successor while it ends):
			// scraped once, as the first, which the pod's owner is told
			// of, naming which it is (probe H, PH5).
			switch {
			case r.target.Pod == "":
			case first.Pod == "":
				c.logChange(r.target.Pod, fmt.Errorf("its endpoint %s is a configured target's too; scraped once, as that one", target))
			default:
				c.logChange(r.target.Pod, fmt.Errorf("its endpoint %s is pod %s's too (a pod's IP handed to another while it ends); scraped once, as that pod's", target, first.Pod))
			}
			continue
		}
		seen[target] = r.target
		if joinOnly[r.target] {
			c.keep(target)
		} else {
			c.logChange(target, r.err)
			if r.err == nil {
				c.logSkipped(target, r.skipped)
			}
		}
		engine := c.engineLabel(target, r)
		tl := labels{names: []string{"engine", "target"}, values: []string{engine, target}}
		if !joinOnly[r.target] {
			e.emit(inferenceUp, tl, boolValue(r.err == nil))
			if r.target.refused == "" {
				e.emit(inferenceDuration, tl, r.duration.Seconds())
			}
		}
		owner, devices := c.join(snap, target, r.target)
		base := tl
		if owner != nil {
			base = base.withOwner(*owner)
		}
		// Served while the endpoint is down too: an engine that stopped
		// answering still holds its pod's devices, and the alert on it
		// names the owner from here.
		for _, d := range devices {
			e.emit(inferenceDevices, base.with("gpu", d.Index).with("uuid", d.UUID), 1)
		}
		if r.err != nil || joinOnly[r.target] {
			continue
		}
		// One device: its labels go on every engine series too, so that
		// the common single-GPU server joins without the info metric;
		// not where another exporter reads the rest of the pod's.
		if len(devices) == 1 && !snap.engineSplitPods[r.target.Pod] {
			base = base.with("gpu", devices[0].Index).with("uuid", devices[0].UUID)
		}
		for _, s := range r.samples {
			emitSample(e, base, s)
		}
	}
	return nil
}

// forget drops what is kept of the targets that the scrape of generation
// gen did not see, nor any scrape started since: a scrape that overlaps a
// later one (two Prometheus servers) must not drop what the later one has
// not reached yet, the counters' reset offsets with it (found by review19:
// a served counter could fall).
func (c *enginesCollector) forget(gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	// Each map by its own keys: what a scrape kept without a state of
	// its own goes too.
	gone := func(k string) bool { return c.state[k].gen < gen }
	maps.DeleteFunc(c.detected, func(k, _ string) bool { return gone(k) })
	maps.DeleteFunc(c.counters, func(k string, _ *engines.Corrector) bool { return gone(k) })
	maps.DeleteFunc(c.joins, func(k string, _ engineJoin) bool { return gone(k) })
	maps.DeleteFunc(c.late, func(k string, _ time.Time) bool { return gone(k) })
	maps.DeleteFunc(c.pace, func(k string, _ pace) bool { return gone(k) })
	maps.DeleteFunc(c.state, func(_ string, st targetState) bool { return st.gen < gen })
}

// keep keeps what is known of a target this scrape reads without logging
// its state: one whose engine another exporter serves (joinOnly).
func (c *enginesCollector) keep(target string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.state[target]
	st.gen = c.gen
	c.state[target] = st
}

// engineLabel is the engine a result names, or for an "auto" target that
// failed, the engine last detected behind it.
func (c *enginesCollector) engineLabel(target string, r engineResult) string {
	if r.target.Engine != "auto" {
		return r.engine
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if r.err == nil {
		c.detected[target] = r.engine
		return r.engine
	}
	if e, ok := c.detected[target]; ok {
		return e
	}
	return r.engine
}

// shared joins a fetch of t under way that ends by ctx's deadline, and not
// more than flight.ScrapeSlack sooner, else fetches t itself
// (internal/flight).
func (c *enginesCollector) shared(ctx context.Context, t engineTarget) engineResult {
	call, leader := c.fetches.Join(t, flight.Deadline(ctx), engineResult{}, nil)
	if leader {
		call.Val = c.scrape(ctx, t)
		c.fetches.Finish(t, call)
		return call.Val
	}
	start := time.Now()
	if !call.Wait(ctx) {
		return engineResult{target: t, engine: t.Engine, duration: time.Since(start),
			err: fmt.Errorf("waiting for a concurrent scrape's fetch of %s: %w", redact(t.URL), ctx.Err())}
	}
	return call.Val
}

func (c *enginesCollector) scrape(ctx context.Context, t engineTarget) engineResult {
	start := time.Now()
	r := engineResult{target: t, engine: t.Engine}
	families, err := engines.Scrape(ctx, c.client, t.URL, engines.Limits{MaxBytes: *engineMaxBytes, MaxSeries: *engineMaxSeries, Keep: engines.Wanted})
	var stale error
	if err == nil {
		stale = engines.DropStale(families, time.Now())
		engine := engines.Engine(t.Engine)
		// read is the engine whose names the answer is read by: the
		// engine's own, or its backend's where it passes them through.
		read := engine
		switch {
		case len(families) == 0 && stale != nil:
			err = fmt.Errorf("GET %s: %w: %w", redact(t.URL), errAllStale, stale)
		case t.Engine == "auto":
			engine, err = engines.Detect(families)
			read = engine
		case len(families) == 0:
			// Only the families of known engines are parsed: an HTML page
			// or an unrelated exporter leaves none.
			err = fmt.Errorf("GET %s: no inference engine metrics in the response", redact(t.URL))
		case !engines.Serves(engine, families):
			// Still the engine configured where it passes its backend's
			// families through.
			var ok bool
			if read, ok = engines.PassedThrough(engine, families); !ok {
				err = fmt.Errorf("GET %s: none of %s's metrics in the response, only another engine's", redact(t.URL), engine)
			}
		}
		if err == nil {
			r.engine = string(engine)
			// Series left out, a counter reading NaN or ±Inf or one
			// Normalize cannot map, are told but do not fail the target:
			// the rest is still right.
			notFinite := c.corrector(t).Correct(families, read)
			r.samples, r.skipped = engines.Normalize(read, families, t.Model)
			r.skipped = errors.Join(stale, notFinite, r.skipped)
			if others := engines.Others(read, families); len(others) > 0 {
				why := "an auto target is read as the first engine found, " + string(engine)
				if t.Engine != "auto" {
					// Triton configured as vllm reads the vLLM backend's
					// families without their model label.
					why = "the target is configured as " + t.Engine
				}
				r.skipped = errors.Join(r.skipped, fmt.Errorf("the answer has %s metrics too, not read: %s", joinEngines(others), why))
			}
			if n := models(r.samples); *engineMaxModels > 0 && n > *engineMaxModels {
				r.samples, r.skipped = nil, nil
				err = fmt.Errorf("GET %s: %d %w=%d", redact(t.URL), n, errTooManyModels, *engineMaxModels)
			}
		}
	}
	r.err, r.duration = err, time.Since(start)
	return r
}

// pace is how long a target's last fetch that said so took.
type pace uint8

const (
	paceUnknown pace = iota // never fetched, or only with its slot late
	paceQuick               // answered, or failed, in less than half the scrape's time
	paceSlow                // took half the scrape's time or more
)

// notePaces notes the pace of the targets fetched: slow where their fetch
// (from when it had a slot) took half the scrape's time or more. One that
// ran out of time in less had its slot late, behind slow ones, which says
// nothing of it: its pace stays as it was.
func (c *enginesCollector) notePaces(ctx context.Context, begun time.Time, results []engineResult, fetched []bool) {
	deadline, ok := ctx.Deadline()
	if !ok {
		return
	}
	budget := deadline.Sub(begun)
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, r := range results {
		key := redact(r.target.URL)
		switch {
		case !fetched[i]:
		case r.duration >= budget/2:
			c.pace[key] = paceSlow
		case !errors.Is(r.err, context.DeadlineExceeded):
			c.pace[key] = paceQuick
		}
	}
}

func joinEngines(es []engines.Engine) string {
	names := make([]string, len(es))
	for i, e := range es {
		names[i] = string(e)
	}
	return strings.Join(names, " and ")
}

// corrector is the target's engines.Corrector, kept under the name its
// state is logged under.
func (c *enginesCollector) corrector(t engineTarget) *engines.Corrector {
	key := redact(t.URL)
	c.mu.Lock()
	defer c.mu.Unlock()
	k := c.counters[key]
	if k == nil {
		k = engines.NewCorrector()
		c.counters[key] = k
	}
	return k
}

// models counts the distinct models of samples.
func models(samples []engines.Sample) int {
	seen := map[string]bool{}
	for _, s := range samples {
		seen[s.Labels["model"]] = true
	}
	return len(seen)
}

// engineJoin is an owner and the GPUs, by uuid, a target was joined to.
type engineJoin struct {
	owner attribution.Owner
	uuids []string
}

// join is joinEngine, which for a unit target finds the GPUs through its
// processes: where it finds none while no GPU the target was last joined
// to had its processes read whole (down, or a list refused), the engine still
// runs there as far as anyone can tell, and keeps that owner and those
// GPUs; else its series would all start anew under other labels the moment
// its GPU fails. A pod's GPUs come from the kubelet, which keeps them.
func (c *enginesCollector) join(snap *Snapshot, key string, t engineTarget) (*attribution.Owner, []*Device) {
	owner, devices := joinEngine(snap, c.metadata, t)
	if t.Unit == "" {
		return owner, devices
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(devices) > 0 {
		j := engineJoin{owner: *owner, uuids: make([]string, len(devices))}
		for i, d := range devices {
			j.uuids[i] = d.UUID
		}
		c.joins[key] = j
		return owner, devices
	}
	last, ok := c.joins[key]
	if !ok {
		return owner, nil
	}
	held := make([]*Device, 0, len(last.uuids))
	for _, uuid := range last.uuids {
		i := slices.IndexFunc(snap.Devices, func(d *Device) bool { return d.UUID == uuid })
		if i < 0 || snap.Devices[i].Up && !snap.Devices[i].ProcessesPartial && !snap.Devices[i].OwnersUnknown {
			// Gone, or read whole and none of the unit's processes on it:
			// it left.
			delete(c.joins, key)
			return owner, nil
		}
		held = append(held, snap.Devices[i])
	}
	return &last.owner, held
}

// joinEngine finds the owner a target runs as and the devices it holds;
// the owner a target is configured with where none of its devices is
// found, a pod named with its workload as md names it, as are the pods
// that hold devices (found by probing: probe22-mixed D2, a router without
// a GPU was left out of every per-workload engine view). An engine is its pod's: where several of the pod's containers
// hold its devices, or the node's per-vendor exporters each read some of
// them, no container is the engine's. The exporters of a split pod then
// name its engine alike, where one would take the container of the GPUs
// it reads (found by probe19-engines: an engine on one container's H100
// and another's MI300X had two costs, and the cost per million tokens
// rule failed for every engine).
func joinEngine(snap *Snapshot, md kubernetes.MetadataSource, t engineTarget) (*attribution.Owner, []*Device) {
	if t.Pod == "" && t.Unit == "" {
		return nil, nil
	}
	ns, pod, _ := strings.Cut(t.Pod, "/")
	var owner *attribution.Owner
	var devices []*Device
	several := false // containers of the pod
	for _, d := range snap.Devices {
		if d.HasMIG {
			continue // its instances are the devices
		}
		held := false
		for i := range d.Claims {
			o := d.Claims[i].Owner
			if (t.Pod != "" && o.Namespace == ns && o.Pod == pod) || (t.Unit != "" && o.Unit == t.Unit) {
				if owner == nil {
					owner = &d.Claims[i].Owner
				}
				several = several || o.Container != owner.Container
				held = true
			}
		}
		if held {
			devices = append(devices, d)
		}
	}
	switch {
	case owner != nil && owner.Container != "" && (several || snap.engineSplitPods[t.Pod]):
		o := *owner
		o.Container = ""
		owner = &o
	case owner != nil:
	case t.Pod != "":
		o, _, _ := attribution.PodOwner(md, ns, pod, "")
		owner = &o
	default:
		owner = &attribution.Owner{Kind: attribution.Process, Unit: t.Unit}
	}
	sort.Slice(devices, func(i, j int) bool { return devices[i].UUID < devices[j].UUID })
	return owner, devices
}

var engineFamilies = func() map[string]engines.Family {
	m := map[string]engines.Family{}
	for _, f := range engines.Families() {
		m[f.Name] = f
	}
	return m
}()

func emitSample(e emitter, base labels, s engines.Sample) {
	f := engineFamilies[s.Name]
	keys := make([]string, 0, len(s.Labels))
	for k := range s.Labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	l := base
	for _, k := range keys {
		l = l.with(k, s.Labels[k])
	}
	m := metric{name: s.Name, help: f.Help}
	switch s.Kind {
	case engines.Gauge:
		m.typ = prometheus.GaugeValue
		e.emit(m, l, s.Value)
	case engines.Counter:
		m.typ = prometheus.CounterValue
		e.emit(m, l, s.Value)
	case engines.Histogram:
		m.histogram = true
		e.ch <- histMetric{series: seriesOf(m, l), buckets: s.Buckets, count: s.Count, sum: s.Sum}
	}
}

// redact drops a password from a target URL before it becomes a label.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	return u.Redacted()
}
