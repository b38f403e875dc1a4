// Package otlp pushes the exporter's metrics to an OpenTelemetry (OTLP/HTTP)
// endpoint, for teams without Prometheus. It reads the same registry that
// /metrics serves, through the OpenTelemetry Prometheus bridge, so both
// carry the same series and owner labels.
package otlp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	prombridge "go.opentelemetry.io/contrib/bridges/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"

	"github.com/prometheus/client_golang/prometheus"
)

// Config says where and how often to push.
type Config struct {
	// Endpoint is host:port of the OTLP/HTTP receiver; URLPath defaults to
	// /v1/metrics.
	Endpoint string
	URLPath  string
	Interval time.Duration
	Insecure bool              // plain HTTP instead of HTTPS
	Headers  map[string]string // e.g. an API key
	// Node names the pushing host in the resource (host.name).
	Node    string
	Version string
}

// ParseHeaders reads KEY=VALUE flags.
func ParseHeaders(flags []string) (map[string]string, error) {
	h := map[string]string{}
	for _, f := range flags {
		k, v, ok := strings.Cut(f, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("OTLP header %q: want KEY=VALUE", f)
		}
		h[strings.TrimSpace(k)] = v
	}
	return h, nil
}

// Pusher pushes periodically until Shutdown.
type Pusher struct {
	provider *sdkmetric.MeterProvider
}

// Start begins pushing what gatherer gathers every cfg.Interval. A push that
// fails is retried by the OTLP exporter and logged through otel's error
// handler; it never stops /metrics.
func Start(cfg Config, gatherer prometheus.Gatherer, logger *slog.Logger) (*Pusher, error) {
	if cfg.Endpoint == "" {
		return nil, errors.New("OTLP endpoint is empty")
	}
	if cfg.Interval <= 0 {
		return nil, fmt.Errorf("OTLP interval %v must be positive", cfg.Interval)
	}
	opts := []otlpmetrichttp.Option{
		otlpmetrichttp.WithEndpoint(cfg.Endpoint),
		otlpmetrichttp.WithHeaders(cfg.Headers),
		otlpmetrichttp.WithTimeout(max(cfg.Interval/2, time.Second)),
	}
	if cfg.URLPath != "" {
		opts = append(opts, otlpmetrichttp.WithURLPath(cfg.URLPath))
	}
	if cfg.Insecure {
		opts = append(opts, otlpmetrichttp.WithInsecure())
	}
	exp, err := otlpmetrichttp.New(context.Background(), opts...)
	if err != nil {
		return nil, fmt.Errorf("OTLP exporter: %w", err)
	}
	node := cfg.Node
	if node == "" {
		node, _ = os.Hostname()
	}
	// Schemaless, so that the SDK's default resource, of whatever semantic
	// conventions version, merges with it.
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		attribute.String("service.name", "xpu_exporter"),
		attribute.String("service.version", cfg.Version),
		attribute.String("host.name", node)))
	if err != nil {
		return nil, fmt.Errorf("OTLP resource: %w", err)
	}
	reader := sdkmetric.NewPeriodicReader(exp,
		sdkmetric.WithInterval(cfg.Interval),
		sdkmetric.WithProducer(prombridge.NewMetricProducer(prombridge.WithGatherer(gatherer))))
	logger.Info("pushing metrics over OTLP/HTTP", "endpoint", cfg.Endpoint, "interval", cfg.Interval)
	return &Pusher{provider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader), sdkmetric.WithResource(res))}, nil
}

// Shutdown pushes once more and stops.
func (p *Pusher) Shutdown(ctx context.Context) error {
	return p.provider.Shutdown(ctx)
}
