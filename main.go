// Command xpu_exporter serves GPU and AI-accelerator metrics, each sample
// labelled at scrape time with the workload that owns the device.
package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
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
	"github.com/xpu-exporter/xpu_exporter/otlp"
)

const program = "xpu_exporter"

func main() {
	var (
		metricsPath = kingpin.Flag("web.telemetry-path",
			"Path under which to expose metrics.").Default("/metrics").String()
		maxRequests = kingpin.Flag("web.max-requests",
			"Maximum number of scrapes served at once; further ones get 503. 0 means no limit.").Default("40").Int()
		scrapeTimeout = kingpin.Flag("scrape.timeout",
			"Deadline of a scrape when Prometheus does not send X-Prometheus-Scrape-Timeout-Seconds.").Default("10s").Duration()
		timeoutOffset = kingpin.Flag("scrape.timeout-offset",
			"Time kept back from Prometheus' scrape timeout to write the response; devices that have not answered by then are reported down.").Default("500ms").Duration()
		nvmlLibrary = kingpin.Flag("nvidia.nvml-library",
			"Path of libnvidia-ml.so; empty finds the driver's library the usual way.").Default("").String()
		demoMode = kingpin.Flag("demo",
			"Serve a simulated GPU node instead of real hardware (try it on any machine).").Bool()
		scenarioPath = kingpin.Flag("demo.scenario",
			"Scenario file for --demo; empty uses the embedded 8-GPU node. Format: README.md, \"Demo scenarios\".").Default("").String()
		otlpEndpoint = kingpin.Flag("otlp.endpoint",
			"Push the metrics to this OTLP/HTTP receiver (host:port) as well as serving them; empty pushes nothing.").Default("").String()
		otlpPath     = kingpin.Flag("otlp.url-path", "URL path of the OTLP receiver.").Default("/v1/metrics").String()
		otlpInterval = kingpin.Flag("otlp.interval", "How often to push over OTLP.").Default("30s").Duration()
		otlpInsecure = kingpin.Flag("otlp.insecure", "Push over plain HTTP instead of HTTPS.").Bool()
		otlpHeaders  = kingpin.Flag("otlp.header", "Header sent with each OTLP push, KEY=VALUE (e.g. an API key). Repeatable.").Strings()
		toolkitFlags = kingpinflag.AddFlags(kingpin.CommandLine, ":9835")
		attrFlags    = addAttributionFlags(kingpin.CommandLine)
	)
	logConfig := &promslog.Config{}
	promslogflag.AddFlags(kingpin.CommandLine, logConfig)
	kingpin.Version(version.Print(program))
	kingpin.CommandLine.UsageWriter(os.Stdout)
	kingpin.HelpFlag.Short('h')
	kingpin.Parse()
	logger := promslog.New(logConfig)

	if *scenarioPath != "" && !*demoMode {
		logger.Error("--demo.scenario needs --demo")
		os.Exit(2)
	}
	cfg := collector.Config{Logger: logger}
	var passwd string // the demo's users; empty reads the host's
	nodeName := attrFlags.node()
	if *demoMode {
		scenario, source, err := loadScenario(*scenarioPath)
		if err != nil {
			logger.Error("cannot start demo mode", "err", err)
			os.Exit(2)
		}
		logger.Warn("DEMO MODE: serving a simulated node, no real hardware is read", "scenario", source, "node", scenario.Node, "devices", len(scenario.Devices))
		cfg.NVML = scenario.NVML(time.Now(), time.Now)
		sim, err := scenario.StartAttribution()
		if err != nil {
			logger.Error("cannot start the demo's attribution sources", "err", err)
			os.Exit(1)
		}
		defer sim.Close()
		attrFlags.useDemo(sim)
		passwd, nodeName = sim.Passwd, scenario.Node
	} else if *nvmlLibrary != "" {
		cfg.NVML = nvml.New(nvml.WithLibraryPath(*nvmlLibrary))
	}
	resolver, podMetadata, closeAttribution, err := attrFlags.resolver(logger, passwd)
	defer closeAttribution()
	if err != nil {
		logger.Error("cannot set up attribution", "err", err)
		os.Exit(2)
	}
	cfg.Attribution, cfg.PodMetadata, cfg.NodeName = resolver, podMetadata, nodeName

	logger.Info("starting "+program, "version", version.Info(), "build_context", version.BuildContext())
	exporter, err := collector.New(cfg)
	if err != nil {
		logger.Error("cannot create collectors", "err", err)
		os.Exit(1)
	}
	logger.Info("enabled collectors", "collectors", exporter.Collectors())

	base := prometheus.NewRegistry()
	base.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		buildInfo(*demoMode),
	)

	mux := http.NewServeMux()
	mux.Handle(*metricsPath, newMetricsHandler(exporter, base, handlerOpts{
		defaultTimeout: *scrapeTimeout,
		timeoutOffset:  *timeoutOffset,
		maxRequests:    *maxRequests,
		logger:         logger,
	}))
	mux.Handle("/devices", &devicesHandler{exporter: exporter, node: nodeName, demo: *demoMode, timeout: *scrapeTimeout, logger: logger})
	if *metricsPath != "/" {
		landing, err := landingPage(*metricsPath, *demoMode)
		if err != nil {
			logger.Error("cannot build landing page", "err", err)
			os.Exit(1)
		}
		mux.Handle("/", landing)
	}

	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	exporter.Start(ctx)
	stopPush := func() {}
	if *otlpEndpoint != "" {
		headers, err := otlp.ParseHeaders(*otlpHeaders)
		if err != nil {
			logger.Error("bad --otlp.header", "err", err)
			os.Exit(2)
		}
		pusher, err := otlp.Start(otlp.Config{
			Endpoint: *otlpEndpoint, URLPath: *otlpPath, Interval: *otlpInterval, Insecure: *otlpInsecure,
			Headers: headers, Node: nodeName, Version: version.Version,
		}, boundGatherer(exporter, base, *scrapeTimeout), logger)
		if err != nil {
			logger.Error("cannot start the OTLP bridge", "err", err)
			os.Exit(2)
		}
		stopPush = func() {
			shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := pusher.Shutdown(shutdownCtx); err != nil {
				logger.Warn("last OTLP push failed", "err", err)
			}
		}
	}
	go func() {
		<-ctx.Done()
		logger.Info("shutting down")
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	}()
	if err := web.ListenAndServe(srv, toolkitFlags, logger); err != nil && !errors.Is(err, http.ErrServerClosed) {
		logger.Error("server failed", "err", err)
		os.Exit(1)
	}
	// The last push gathers once more: before the collectors let go of NVML.
	stopPush()
	exporter.Close()
}

// boundGatherer gathers like a scrape does, under a deadline of its own, for
// pushes that no HTTP request bounds.
func boundGatherer(e *collector.Exporter, base prometheus.Gatherer, timeout time.Duration) prometheus.Gatherer {
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		reg := prometheus.NewRegistry()
		reg.MustRegister(e.Bind(ctx))
		return prometheus.Gatherers{base, reg}.Gather()
	})
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

func landingPage(metricsPath string, demoMode bool) (http.Handler, error) {
	desc := "Prometheus exporter for GPUs and AI accelerators, with the workload that owns each device on every sample."
	if demoMode {
		desc = "DEMO MODE: this exporter serves a simulated node, not real hardware. " + desc
	}
	return web.NewLandingPage(web.LandingConfig{
		Name:        program,
		Description: desc,
		Version:     version.Info(),
		Links: []web.LandingLinks{
			{Address: metricsPath, Text: "Metrics"},
			{Address: "/devices", Text: "Devices", Description: "every device now, with the pod, job or unit using it (JSON: ?format=json)"},
		},
	})
}
