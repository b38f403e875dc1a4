// Command xpu_exporter serves GPU and AI-accelerator metrics, each sample
// labelled at scrape time with the workload that owns the device.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"path"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/promslog"
	promslogflag "github.com/prometheus/common/promslog/flag"
	"github.com/prometheus/common/version"
	"github.com/prometheus/exporter-toolkit/web"
	"github.com/prometheus/exporter-toolkit/web/kingpinflag"

	"github.com/xpu-exporter/xpu_exporter/collector"
	"github.com/xpu-exporter/xpu_exporter/demo"
	"github.com/xpu-exporter/xpu_exporter/internal/procself"
	"github.com/xpu-exporter/xpu_exporter/otlp"
	"github.com/xpu-exporter/xpu_exporter/vendors/gaudi"
	"github.com/xpu-exporter/xpu_exporter/vendors/nvidia"
)

const program = "xpu_exporter"

func main() {
	// The demo's hl-smi stand-in is this binary, run again by the Gaudi
	// collector: it answers as hl-smi and never starts an exporter.
	if spec := os.Getenv(demo.HLSMIEnv); spec != "" {
		os.Exit(demo.ServeHLSMI(spec, os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(run())
}

// run is the exporter; it returns the exit status once its deferred
// clean-ups have run, so that a failure at start leaves nothing behind
// (the demo's generated tree, the attribution sources).
func run() int {
	// hlsmiPathSet says --gaudi.hl-smi-path was given: in demo mode it
	// replaces the simulated hl-smi, as the other source flags do.
	var hlsmiPathSet bool
	// maxProcsSet says --runtime.gomaxprocs was given, which overrules
	// $GOMAXPROCS.
	var maxProcsSet bool
	var (
		metricsPath = kingpin.Flag("web.telemetry-path",
			"Path under which to expose metrics.").Default("/metrics").String()
		maxRequests = kingpin.Flag("web.max-requests",
			"Maximum number of scrapes served at once; further ones get 503. 0 means no limit.").Default("40").Int()
		scrapeTimeout = kingpin.Flag("scrape.timeout",
			"Deadline of a scrape when Prometheus does not send X-Prometheus-Scrape-Timeout-Seconds, and the longest an OTLP push reads the devices (at most half of --otlp.interval).").Default("10s").Duration()
		maxTimeout = kingpin.Flag("scrape.max-timeout",
			"Longest scrape deadline a client may ask for with X-Prometheus-Scrape-Timeout-Seconds; the HTTP server's write and idle timeouts follow from it (a response once rendered has 10 s, and 10 s per MiB, to be read, so that a client that never reads its responses holds a request slot no longer).").Default("2m").Duration()
		enablePprof = kingpin.Flag("web.enable-pprof",
			"Serve Go's profiling endpoints under /debug/pprof/, to send profiles with a bug report.").Bool()
		timeoutOffset = kingpin.Flag("scrape.timeout-offset",
			"Time kept back from Prometheus' scrape timeout to write the response; devices that have not answered by then are reported down.").Default("500ms").Duration()
		nvmlLibrary = kingpin.Flag("nvidia.nvml-library",
			"Path of libnvidia-ml.so; empty finds the driver's library the usual way. A path given that cannot be loaded fails the nvidia collector (xpu_scrape_collector_success 0, an error naming it) until it can, unlike a node without the library.").Default("").String()
		hlsmiPath = kingpin.Flag("gaudi.hl-smi-path",
			"hl-smi binary, run once per scrape for every Gaudi device (never through a shell).").Default(gaudi.DefaultPath).IsSetByUser(&hlsmiPathSet).String()
		hlsmiFields = kingpin.Flag("gaudi.query-fields",
			"Comma-separated hl-smi --query-aip fields to ask for. If your hl-smi version refuses one (every run then fails, xpu_hlsmi_errors_total{reason=\"exit_status\"}), leave it out; index is required, and only fields the exporter reads are accepted.").Default(strings.Join(gaudi.DefaultFields, ",")).String()
		maxProcs = kingpin.Flag("runtime.gomaxprocs",
			"Most CPUs running the exporter's Go code at once (GOMAXPROCS); 0 keeps Go's default, every CPU the process may use, or what $GOMAXPROCS says when the flag is not given. 1, as node_exporter's default, costs the least CPU per scrape; device reads still overlap where NVML calls wait long in the driver (README \"Sizing\").").Default("1").IsSetByUser(&maxProcsSet).Int()
		demoMode = kingpin.Flag("demo",
			"Serve a simulated GPU node instead of real hardware (try it on any machine).").Bool()
		scenarioPath = kingpin.Flag("demo.scenario",
			"Scenario file for --demo; empty uses the embedded 8-GPU node. Format: README.md, \"Demo scenarios\".").Default("").String()
		otlpFlags    = addOTLPFlags(kingpin.CommandLine)
		toolkitFlags = kingpinflag.AddFlags(kingpin.CommandLine, ":9835")
		attrFlags    = addAttributionFlags(kingpin.CommandLine)
	)
	logConfig := &promslog.Config{}
	promslogflag.AddFlags(kingpin.CommandLine, logConfig)
	kingpin.Version(version.Print(program))
	kingpin.CommandLine.UsageWriter(os.Stdout)
	kingpin.HelpFlag.Short('h')
	kingpin.Parse()
	if *maxProcs < 0 {
		fmt.Fprintf(os.Stderr, "%s: --runtime.gomaxprocs=%d: a count of CPUs, or 0 for Go's default\n", program, *maxProcs)
		return 2
	}
	// $GOMAXPROCS is Go's own setting, which its runtime has applied when
	// the value is one it can use and ignored otherwise: kept as it is.
	if *maxProcs > 0 && (maxProcsSet || os.Getenv("GOMAXPROCS") == "") {
		runtime.GOMAXPROCS(*maxProcs)
	}
	if !*enablePprof {
		// Only /debug/pprof/heap reads the heap profile. Its records, one
		// per sampled allocation stack and never freed, and their hash
		// table cost about 1.2 MiB of resident memory (make rss).
		runtime.MemProfileRate = 0
	}
	logger := promslog.New(logConfig)
	// What writes through the log package goes to the same handler: the
	// demo's engine endpoints are HTTP servers without an error log of
	// their own, and a line of theirs must not break --log.format either.
	slog.SetDefault(logger)
	if problems := checkServeFlags(*metricsPath, *maxRequests, *scrapeTimeout, *maxTimeout, *timeoutOffset); len(problems) > 0 {
		for _, p := range problems {
			logger.Error("bad flag", "err", p)
		}
		return 2
	}

	if *scenarioPath != "" && !*demoMode {
		logger.Error("--demo.scenario needs --demo")
		return 2
	}
	cfg := collector.Config{Logger: logger, HLSMIPath: *hlsmiPath, HLSMIFields: splitList(*hlsmiFields), GRESByDeviceFile: *attrFlags.gresOrder == "device-file"}
	var demoScenario *demo.Scenario
	nodeName := attrFlags.node()
	if *demoMode {
		scenario, source, err := loadScenario(*scenarioPath)
		if err != nil {
			logger.Error("cannot start demo mode", "err", err)
			return 2
		}
		logger.Warn("DEMO MODE: serving a simulated node, no real hardware is read", "scenario", source, "node", scenario.Node, "devices", len(scenario.Devices))
		// The simulated driver was loaded when the host booted, so that its
		// counters (energy, ECC, NVLink) stay where they were when the
		// exporter restarts, as NVML's do ("since the driver was last
		// reloaded"); without the boot time they count from now.
		if boot, err := procself.BootTime("/proc"); err == nil {
			scenario.DriverLoaded = boot
		} else {
			logger.Info("demo counters count from the exporter's start: no host boot time", "err", err)
		}
		cfg.NVML, demoScenario = scenario.NVML(time.Now(), time.Now), scenario
		sim, err := scenario.StartAttribution()
		if err != nil {
			logger.Error("cannot start the demo's attribution sources", "err", err)
			return 1
		}
		defer sim.Close()
		if sim.AMD != nil {
			// The driver's values move between scrapes; so do the files,
			// often enough that a /devices read just after a scrape sees
			// engine time in its window.
			sim.AMD.Animate(200*time.Millisecond, time.Now)
		}
		attrFlags.useDemo(sim)
		nodeName = scenario.Node
		switch {
		case hlsmiPathSet:
			// The hl-smi given replaces the scenario's, like every source
			// flag given explicitly in demo mode (README "Demo scenarios").
		case sim.HLSMISpec != "":
			self, err := os.Executable()
			if err != nil {
				logger.Error("cannot find this binary to serve as the demo's hl-smi", "err", err)
				return 1
			}
			cfg.HLSMIPath = self
			if err := os.Setenv(demo.HLSMIEnv, sim.HLSMISpec); err != nil {
				logger.Error("cannot set up the demo's hl-smi", "err", err)
				return 1
			}
		default:
			// No Gaudi in the scenario: the host's hl-smi must not mix in.
			if err := collector.Enable(map[string]bool{"gaudi": false}); err != nil {
				logger.Error("cannot switch off the Gaudi collector", "err", err)
				return 1
			}
		}
	} else if *nvmlLibrary != "" {
		cfg.NVML = nvidia.Library(*nvmlLibrary)
	}
	resolver, podMetadata, closeAttribution, err := attrFlags.resolver(logger)
	defer closeAttribution()
	if err != nil {
		logger.Error("cannot set up attribution", "err", err)
		return 2
	}
	cfg.Attribution, cfg.PodMetadata, cfg.NodeName = resolver, podMetadata, nodeName
	cfg.Procfs, cfg.Sysfs = *attrFlags.procfs, *attrFlags.sysfs

	logger.Info("starting "+program, "version", version.Info(), "build_context", version.BuildContext(), "gomaxprocs", runtime.GOMAXPROCS(0))
	exporter, err := collector.New(cfg)
	if err != nil {
		logger.Error("cannot create collectors", "err", err)
		return 1
	}
	logger.Info("enabled collectors", "collectors", exporter.Collectors())

	base := prometheus.NewRegistry()
	base.MustRegister(
		collectors.NewGoCollector(),
		// Our own process_* metrics: client_golang's cost 8% of a demo
		// scrape and count the host's network traffic under hostNetwork.
		procself.New(),
		buildInfo(*demoMode),
	)
	if demoScenario != nil {
		base.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "xpu_demo_device_reads_total",
			Help: "Device handles the demo's simulated NVML handed out: one per device per hardware read, shared by concurrent scrapes.",
		}, func() float64 { return float64(demoScenario.DeviceReads()) }))
	}

	// Ends when scrapes under way at shutdown have had their grace.
	stopping, stopScrapes := context.WithCancel(context.Background())
	defer stopScrapes()
	mux := http.NewServeMux()
	// A path ending in "/" is a subtree to ServeMux: the telemetry path "/"
	// answered every path, /favicon.ico and /debug/pprof/ with pprof off
	// included, with a full read of every GPU (found by probe17-http). The
	// telemetry path is that path alone ("{$}").
	metricsPattern := *metricsPath
	if strings.HasSuffix(metricsPattern, "/") {
		metricsPattern += "{$}"
	}
	mux.Handle(metricsPattern, newMetricsHandler(exporter, base, handlerOpts{
		defaultTimeout: *scrapeTimeout,
		maxTimeout:     *maxTimeout,
		timeoutOffset:  *timeoutOffset,
		maxRequests:    *maxRequests,
		logger:         logger,
		stopping:       stopping,
	}))
	mux.Handle("/devices", &devicesHandler{exporter: exporter, node: nodeName, demo: *demoMode, timeout: *scrapeTimeout, logger: logger, metricsPath: *metricsPath, stopping: stopping})
	if *metricsPath != "/" {
		landing, err := landingPage(*metricsPath, *demoMode, *enablePprof)
		if err != nil {
			logger.Error("cannot build landing page", "err", err)
			return 1
		}
		mux.Handle("/", landing)
	}

	if *enablePprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	srv := newServer(mux, *maxTimeout, logger, *toolkitFlags.WebConfigFile)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// SIGHUP, which reloads Prometheus and Alertmanager, would otherwise
	// end the exporter without a word, and systemd takes that for a clean
	// exit that Restart=on-failure does not restart (found by
	// probe17-http). There is nothing to reload: the web configuration is
	// read at every connection, flags and --cost.file at the start.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for range hup {
			logger.Info("SIGHUP ignored: the web configuration is read at every connection; restart the exporter to apply changed flags or --cost.file")
		}
	}()
	// The collectors start (the warm-up read, event listening) once the
	// server serves: after every check that can fail the start (a bad flag,
	// the port taken, the web configuration, the systemd socket), which the
	// toolkit makes only as it starts serving. Started earlier, a failed
	// start cut the warm-up read, and that read's GPUs and attribution
	// sources were logged as down and failing beside the real error.
	var startOnce sync.Once
	srv.BaseContext = func(net.Listener) context.Context {
		startOnce.Do(func() { exporter.Start(ctx) })
		return context.Background()
	}
	stopPush := func() {}
	otlpCfg, err := otlp.Resolve(*otlpFlags, os.Getenv)
	var ignored *otlp.IgnoredEndpoint
	switch {
	case errors.As(err, &ignored):
		logger.Warn("OTLP endpoint variable ignored; not pushing over OTLP", "err", ignored.Err)
	case err != nil:
		logger.Error("bad OTLP configuration", "err", err)
		return 2
	}
	if otlpCfg != nil {
		for _, w := range otlpCfg.Warnings {
			logger.Warn(w)
		}
		otlpCfg.Version, otlpCfg.Node, otlpCfg.K8sNode = version.Version, nodeName, *attrFlags.nodeName
		otlpCfg.InstanceID = otlp.InstanceID(nodeName, strings.Join(*toolkitFlags.WebListenAddresses, ","), strings.Join(exporter.Collectors(), ","))
		if *demoMode {
			otlpCfg.K8sNode = nodeName // the demo simulates a Kubernetes node
		}
		pusher, err := otlp.Start(otlpCfg, boundGatherer(exporter, base, *scrapeTimeout), base, logger)
		if err != nil {
			logger.Error("cannot start the OTLP bridge", "err", err)
			return 2
		}
		stopPush = func() {
			shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := pusher.Shutdown(shutdownCtx); err != nil {
				logger.Warn("last OTLP push failed", "err", err)
			}
		}
	}
	stopped := make(chan struct{})
	go func() {
		<-ctx.Done()
		stop() // a second signal ends the exporter at once
		logger.Info("shutting down")
		if err := shutdown(srv, stopScrapes, shutdownGrace, shutdownDrain); err != nil {
			logger.Warn("requests still under way at exit", "err", err)
		}
		close(stopped)
	}()
	if err := web.ListenAndServe(srv, toolkitFlags, logger); err != nil && !errors.Is(err, http.ErrServerClosed) {
		logger.Error("server failed", "err", err)
		exporter.Close()
		return 1
	}
	// Serve returns as soon as Shutdown is called; the requests under way
	// are answered only once it returns (net/http: "Make sure the program
	// doesn't exit and waits instead for Shutdown to return").
	<-stopped
	// The last push gathers once more: before the collectors let go of NVML.
	stopPush()
	// Kills what collectors still run, such as an hl-smi run in its own
	// process group, which no signal to the exporter reaches.
	exporter.Close()
	return 0
}

// servablePath says whether p is a path requests can reach: only
// characters a URL path carries as they are (RFC 3986, pchar without
// percent-encoding), so that no query ("?"), fragment, space or pattern
// syntax of http.ServeMux ("{…}", "METHOD /path") is taken for part of it,
// and clean, since ServeMux redirects a request for an unclean path to its
// clean form.
func servablePath(p string) bool {
	if !strings.HasPrefix(p, "/") || path.Clean(p) != strings.TrimSuffix(p, "/") && p != "/" {
		return false
	}
	return !strings.ContainsFunc(p, func(r rune) bool {
		return !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || strings.ContainsRune("-._~!$&'()*+,;=:@/", r))
	})
}

// checkServeFlags names every problem of the serving flags: a value that
// would report every device down at every scrape (a deadline of 0, an
// offset eating the whole timeout), answer after Prometheus has given up
// (a negative offset), or a path that would clash at start.
func checkServeFlags(path string, maxRequests int, timeout, maxTimeout, offset time.Duration) []error {
	var out []error
	if !servablePath(path) || path == "/devices" || strings.HasPrefix(path, "/debug/") {
		out = append(out, fmt.Errorf("--web.telemetry-path=%q: want a clean path starting with /, of letters, digits and -._~!$&'()*+,;=:@/, other than /devices and /debug/", path))
	}
	if maxRequests < 0 {
		out = append(out, fmt.Errorf("--web.max-requests=%d: want 0 (no limit) or more", maxRequests))
	}
	if timeout <= 0 {
		out = append(out, fmt.Errorf("--scrape.timeout=%v: want more than 0", timeout))
	}
	if maxTimeout < timeout {
		out = append(out, fmt.Errorf("--scrape.max-timeout=%v: want at least --scrape.timeout (%v)", maxTimeout, timeout))
	}
	if offset < 0 || (timeout > 0 && offset >= timeout) {
		out = append(out, fmt.Errorf("--scrape.timeout-offset=%v: want 0 or more, and less than --scrape.timeout (%v)", offset, timeout))
	}
	return out
}

const (
	// shutdownGrace is how long requests under way at shutdown may take
	// to finish as usual; shutdownDrain how long they then have to answer,
	// cut short, and be written.
	shutdownGrace = 5 * time.Second
	shutdownDrain = 2 * time.Second
)

// shutdown stops srv: no new connections, and the requests under way get
// grace to finish. Then stopScrapes cuts the scrapes still rendering short
// (a device not read yet is reported down, an hl-smi run waited for by no
// one else is killed) and they get drain to be written. It returns once
// every request is done, or Shutdown's error when drain is over too.
func shutdown(srv *http.Server, stopScrapes context.CancelFunc, grace, drain time.Duration) error {
	cut := time.AfterFunc(grace, stopScrapes)
	defer cut.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), grace+drain)
	defer cancel()
	return srv.Shutdown(ctx)
}

// newServer bounds every connection: a client that sends its headers slowly,
// never reads its response or idles on a keep-alive connection is cut off
// after a time that follows from the longest scrape allowed, so it cannot
// hold a request slot or a connection for ever. net/http's own error lines
// go to logger (httpErrors).
func newServer(h http.Handler, maxScrape time.Duration, logger *slog.Logger, webConfig string) *http.Server {
	errs := &httpErrors{logger: logger, webConfig: webConfig, validate: web.Validate}
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      maxScrape + 5*time.Second,
		IdleTimeout:       2 * maxScrape,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          log.New(errs, "", 0),
		// A connection that reads a request has been through its TLS
		// handshake: the web configuration file is usable again.
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateActive && errs.isBroken.Load() {
				errs.fixed()
			}
		},
	}
}

// httpErrors writes net/http's error lines to the exporter's logger, which
// would otherwise print them as plain text to stderr, whatever --log.format
// and --log.level say. A failed TLS handshake is logged at debug level: it
// is a client's doing (a port scanner, a load-balancer probe, a scrape job
// still on http://, which sees its own error), one line per connection.
// The other lines are the server's failures (a handler's panic, accept
// failing), logged as errors.
//
// But the web configuration file is read at every handshake: once it
// cannot be used (a certificate or key gone, a bad edit), every handshake
// fails, and the only trace was a client's-doing debug line per
// connection (probe H, PH3). At a failed handshake, at most once a
// second, the file is checked, and its failure logged as an error once
// until it is usable again.
type httpErrors struct {
	logger    *slog.Logger
	webConfig string
	validate  func(path string) error // web.Validate

	mu       sync.Mutex
	checked  time.Time
	broken   string // the file's error as last logged, "" when usable
	isBroken atomic.Bool
}

func (w *httpErrors) Write(p []byte) (int, error) {
	msg := strings.TrimSuffix(string(p), "\n")
	level := slog.LevelError
	if strings.HasPrefix(msg, "http: TLS handshake error") {
		level = slog.LevelDebug
		w.checkConfig()
	}
	w.logger.Log(context.Background(), level, msg)
	return len(p), nil
}

// checkConfig logs the web configuration file's change between usable and
// not, checking it at most once a second.
func (w *httpErrors) checkConfig() {
	if w.webConfig == "" {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if time.Since(w.checked) < time.Second {
		return
	}
	w.checked = time.Now()
	err := w.validate(w.webConfig)
	switch {
	case err != nil && err.Error() != w.broken:
		w.broken = err.Error()
		w.isBroken.Store(true)
		w.logger.Error("the web configuration file cannot be used: every TLS handshake fails until it is fixed", "file", w.webConfig, "err", err)
	case err == nil:
		w.fixedLocked()
	}
}

// fixed logs the web configuration file usable again, if it was not.
func (w *httpErrors) fixed() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.fixedLocked()
}

func (w *httpErrors) fixedLocked() {
	if w.broken != "" {
		w.broken = ""
		w.isBroken.Store(false)
		w.logger.Info("the web configuration file is usable again", "file", w.webConfig)
	}
}

// addOTLPFlags declares the OTLP bridge's flags. Each one left unset falls
// back to its standard OTEL_EXPORTER_OTLP_* variable (otlp.Resolve).
func addOTLPFlags(app *kingpin.Application) *otlp.Flags {
	f := &otlp.Flags{}
	app.Flag("otlp.endpoint",
		"Push the metrics to this OTLP receiver as well as serving them: a URL (https://collector:4318, http://… for plain text) or host:port. Empty: $OTEL_EXPORTER_OTLP_METRICS_ENDPOINT, $OTEL_EXPORTER_OTLP_ENDPOINT, else no push.").StringVar(&f.Endpoint)
	app.Flag("otlp.protocol", "grpc or http/protobuf. Empty: $OTEL_EXPORTER_OTLP_[METRICS_]PROTOCOL, else http/protobuf.").EnumVar(&f.Protocol, "", otlp.ProtocolGRPC, otlp.ProtocolHTTPProtobuf)
	app.Flag("otlp.url-path", "URL path of an http/protobuf receiver. Empty: the endpoint's path followed by /v1/metrics.").StringVar(&f.URLPath)
	app.Flag("otlp.interval", "How often to push; each push (retries included) ends within it, and a failed one is dropped, so nothing queues while the receiver is down.").Default("30s").DurationVar(&f.Interval)
	app.Flag("otlp.timeout", "Deadline of one push, retries included; never beyond --otlp.interval. 0: $OTEL_EXPORTER_OTLP_[METRICS_]TIMEOUT, else 10s.").Default("0s").DurationVar(&f.Timeout)
	app.Flag("otlp.insecure", "Plain text to a host:port endpoint instead of TLS.").BoolVar(&f.Insecure)
	app.Flag("otlp.header", "Header sent with each push, KEY=VALUE. Repeatable; added to $OTEL_EXPORTER_OTLP_[METRICS_]HEADERS. Anyone on the host can read a command line: put secrets in --otlp.header-from-env.").StringsVar(&f.Headers)
	app.Flag("otlp.header-from-env", "Header sent with each push, HEADER=ENV_VAR: the value of environment variable ENV_VAR (e.g. Authorization=OTLP_TOKEN). Repeatable.").StringsVar(&f.HeaderEnv)
	app.Flag("otlp.compression", "gzip or none. Empty: $OTEL_EXPORTER_OTLP_[METRICS_]COMPRESSION, else gzip.").EnumVar(&f.Compression, "", "gzip", "none")
	app.Flag("otlp.tls.ca-file", "CA certificates (PEM) to verify the receiver with. Empty: $OTEL_EXPORTER_OTLP_[METRICS_]CERTIFICATE, else the system's.").StringVar(&f.CAFile)
	app.Flag("otlp.tls.cert-file", "Client certificate (PEM) for mutual TLS, with --otlp.tls.key-file. Empty: $OTEL_EXPORTER_OTLP_[METRICS_]CLIENT_CERTIFICATE.").StringVar(&f.CertFile)
	app.Flag("otlp.tls.key-file", "Client key (PEM). Empty: $OTEL_EXPORTER_OTLP_[METRICS_]CLIENT_KEY.").StringVar(&f.KeyFile)
	app.Flag("otlp.k8s-cluster-name", "Resource attribute k8s.cluster.name of every push.").StringVar(&f.ClusterName)
	app.Flag("otlp.semconv", "none: push the names /metrics serves; also: add device and inference metrics under OpenTelemetry's semantic conventions (hw.gpu.*, gen_ai.*); only: those names instead of ours where one exists, and k8s.* owner attributes everywhere.").Default("none").EnumVar(&f.Semconv, "none", "also", "only")
	return f
}

// boundGatherer gathers for a push like a scrape does: within the push's
// own deadline, and no longer than a scrape without
// X-Prometheus-Scrape-Timeout-Seconds. While Prometheus scrapes, a push
// leaves the averaging window to the scrapes (collector.BindPush).
func boundGatherer(e *collector.Exporter, base prometheus.Gatherer, timeout time.Duration) otlp.GatherFunc {
	return func(ctx context.Context) ([]*dto.MetricFamily, error) {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		reg := prometheus.NewRegistry()
		reg.MustRegister(e.BindPush(ctx))
		return prometheus.Gatherers{base, reg}.Gather()
	}
}

func loadScenario(path string) (*demo.Scenario, string, error) {
	if path == "" {
		return demo.Default(), "embedded default", nil
	}
	s, err := demo.Load(path)
	return s, path, err
}

// buildInfo is xpu_exporter_build_info, with a demo label so that dashboards
// and alerts can tell simulated nodes from real ones.
func buildInfo(demoMode bool) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "xpu_exporter_build_info",
		Help: "A metric with a constant '1' value labelled by version, revision, branch, goversion and whether the exporter runs in demo mode.",
		ConstLabels: prometheus.Labels{
			"version":   version.Version,
			"revision":  version.GetRevision(),
			"branch":    version.Branch,
			"goversion": version.GoVersion,
			"demo":      fmt.Sprint(demoMode),
		},
	})
	g.Set(1)
	return g
}

func landingPage(metricsPath string, demoMode, pprofOn bool) (http.Handler, error) {
	desc := "Prometheus exporter for GPUs and AI accelerators, with the workload that owns each device on every sample."
	if demoMode {
		desc = "DEMO MODE: this exporter serves a simulated node, not real hardware. " + desc
	}
	return web.NewLandingPage(web.LandingConfig{
		Name:        program,
		Description: desc,
		Version:     version.Info(),
		// The toolkit links the profiles unless told not to; they answer
		// only with --web.enable-pprof.
		Profiling: strconv.FormatBool(pprofOn),
		Links: []web.LandingLinks{
			{Address: metricsPath, Text: "Metrics"},
			{Address: "/devices", Text: "Devices", Description: "every device now, with the pod, job or unit using it (JSON: ?format=json)"},
		},
	})
}

// splitList splits a comma-separated flag value, dropping blanks around
// and between its items.
func splitList(v string) []string {
	var out []string
	for _, f := range strings.Split(v, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
