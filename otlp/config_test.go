package otlp

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestOTLPResolve(t *testing.T) {
	for _, c := range []struct {
		name  string
		flags Flags
		env   map[string]string
		// want: URL, protocol, timeout, compression, headers
		url, protocol, compression string
		timeout                    time.Duration
		headers                    map[string]string
		warnings                   int
	}{
		{
			name:  "flag host:port keeps the old meaning: HTTPS, /v1/metrics",
			flags: Flags{Endpoint: "collector:4318"},
			url:   "https://collector:4318/v1/metrics", protocol: "http/protobuf", compression: "gzip", timeout: 10 * time.Second,
			headers: map[string]string{},
		},
		{
			name:  "flag host:port with --otlp.insecure and the old --otlp.url-path",
			flags: Flags{Endpoint: "collector:4318", Insecure: true, URLPath: "/v1/metrics"},
			url:   "http://collector:4318/v1/metrics", protocol: "http/protobuf", compression: "gzip", timeout: 10 * time.Second,
			headers: map[string]string{},
		},
		{
			name:  "flag URL is a base, as OTEL_EXPORTER_OTLP_ENDPOINT (Grafana Cloud's /otlp)",
			flags: Flags{Endpoint: "https://otlp-gateway.example.net/otlp/"},
			url:   "https://otlp-gateway.example.net/otlp/v1/metrics", protocol: "http/protobuf", compression: "gzip", timeout: 10 * time.Second,
			headers: map[string]string{},
		},
		{
			name: "generic environment: base URL plus v1/metrics; timeout in ms; headers percent-decoded",
			env: map[string]string{
				"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/mypath",
				"OTEL_EXPORTER_OTLP_TIMEOUT":  "2500",
				"OTEL_EXPORTER_OTLP_HEADERS":  "api-key=abc%2Cdef, X-Scope-OrgID = gpus ",
			},
			url: "http://collector:4318/mypath/v1/metrics", protocol: "http/protobuf", compression: "gzip", timeout: 2500 * time.Millisecond,
			headers: map[string]string{"api-key": "abc,def", "X-Scope-OrgID": "gpus"},
		},
		{
			name: "signal-specific environment wins and its URL is used as is",
			env: map[string]string{
				"OTEL_EXPORTER_OTLP_ENDPOINT":            "http://generic:4318",
				"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT":    "https://metrics.example.com/ingest",
				"OTEL_EXPORTER_OTLP_HEADERS":             "a=generic",
				"OTEL_EXPORTER_OTLP_METRICS_HEADERS":     "b=metrics",
				"OTEL_EXPORTER_OTLP_COMPRESSION":         "gzip",
				"OTEL_EXPORTER_OTLP_METRICS_COMPRESSION": "none",
			},
			url: "https://metrics.example.com/ingest", protocol: "http/protobuf", compression: "none", timeout: 10 * time.Second,
			headers: map[string]string{"b": "metrics"},
		},
		{
			name:  "flags win over the environment; header maps merge, flags per key",
			flags: Flags{Endpoint: "http://flag:4318", Headers: []string{"a=flag"}, Timeout: time.Second, Compression: "none"},
			env: map[string]string{
				"OTEL_EXPORTER_OTLP_ENDPOINT": "http://env:4318", "OTEL_EXPORTER_OTLP_HEADERS": "a=env,b=env",
				"OTEL_EXPORTER_OTLP_TIMEOUT": "5000", "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
			},
			url: "http://flag:4318", protocol: "grpc", compression: "none", timeout: time.Second,
			headers: map[string]string{"a": "flag", "b": "env"},
		},
		{
			name:  "protocol flag wins over the environment's",
			flags: Flags{Protocol: "http/protobuf"},
			env:   map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://env:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
			url:   "http://env:4318/v1/metrics", protocol: "http/protobuf", compression: "gzip", timeout: 10 * time.Second,
			headers: map[string]string{},
		},
		{
			name: "gRPC: no path; a bare host:port is TLS unless OTEL_EXPORTER_OTLP_INSECURE; plain text ignores TLS variables",
			env: map[string]string{
				"OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4317",
				"OTEL_EXPORTER_OTLP_INSECURE": "true", "OTEL_EXPORTER_OTLP_CERTIFICATE": "/etc/ca.pem",
			},
			url: "http://collector:4317", protocol: "grpc", compression: "gzip", timeout: 10 * time.Second,
			headers: map[string]string{},
		},
		{
			name:  "gRPC URL from the flag drops its path",
			flags: Flags{Endpoint: "https://collector:4317/ignored", Protocol: "grpc"},
			url:   "https://collector:4317", protocol: "grpc", compression: "gzip", timeout: 10 * time.Second,
			headers: map[string]string{},
		},
		{
			name: "bad environment values are warned about and ignored",
			env: map[string]string{
				"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json",
				"OTEL_EXPORTER_OTLP_TIMEOUT": "10s", "OTEL_EXPORTER_OTLP_COMPRESSION": "zstd",
				"OTEL_EXPORTER_OTLP_HEADERS": "novalue", "OTEL_RESOURCE_ATTRIBUTES": "a=%zz",
			},
			url: "http://c:4318/v1/metrics", protocol: "http/protobuf", compression: "gzip", timeout: 10 * time.Second,
			headers: map[string]string{}, warnings: 5,
		},
		{
			name: "OTEL_EXPORTER_OTLP_INSECURE neither true nor false: warned about, false (TLS), as the specification's booleans",
			env: map[string]string{
				"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4317", "OTEL_EXPORTER_OTLP_INSECURE": "maybe",
			},
			url: "https://collector:4317", protocol: "grpc", compression: "gzip", timeout: 10 * time.Second,
			headers: map[string]string{}, warnings: 1,
		},
		{
			name: "OTEL_EXPORTER_OTLP_METRICS_INSECURE=FALSE is a boolean too, without a warning",
			env: map[string]string{
				"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4317",
				"OTEL_EXPORTER_OTLP_METRICS_INSECURE": "FALSE", "OTEL_EXPORTER_OTLP_INSECURE": "true",
			},
			url: "https://collector:4317", protocol: "grpc", compression: "gzip", timeout: 10 * time.Second,
			headers: map[string]string{},
		},
		{
			name: "a header value with CR/LF can never be sent: the whole headers variable is ignored, like any bad member",
			env: map[string]string{
				"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_HEADERS": "a=b,Authorization=Bearer%20novalue%0D%0A",
			},
			url: "http://c:4318/v1/metrics", protocol: "http/protobuf", compression: "gzip", timeout: 10 * time.Second,
			headers: map[string]string{}, warnings: 1,
		},
		{
			name:  "HTTP carries a header value outside ASCII, and a tab",
			flags: Flags{Endpoint: "http://c:4318", Headers: []string{"X-Team=\u00e9quipe\tgpu"}},
			url:   "http://c:4318/v1/metrics", protocol: "http/protobuf", compression: "gzip", timeout: 10 * time.Second,
			headers: map[string]string{"X-Team": "\u00e9quipe\tgpu"},
		},
		{
			name:  "a header from the environment keeps secrets off the command line",
			flags: Flags{Endpoint: "http://c:4318", HeaderEnv: []string{"Authorization=MY_TOKEN"}},
			env:   map[string]string{"MY_TOKEN": "Bearer s3cr%t,x"},
			url:   "http://c:4318/v1/metrics", protocol: "http/protobuf", compression: "gzip", timeout: 10 * time.Second,
			headers: map[string]string{"Authorization": "Bearer s3cr%t,x"},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.flags.Interval == 0 {
				c.flags.Interval = 30 * time.Second
			}
			cfg, err := Resolve(c.flags, envOf(c.env))
			if err != nil || cfg == nil {
				t.Fatalf("Resolve: %v, %v", cfg, err)
			}
			if cfg.URL.String() != c.url || cfg.Protocol != c.protocol || cfg.Compression != c.compression || cfg.Timeout != c.timeout {
				t.Errorf("got %s %s %s %v, want %s %s %s %v", cfg.URL, cfg.Protocol, cfg.Compression, cfg.Timeout, c.url, c.protocol, c.compression, c.timeout)
			}
			if !reflect.DeepEqual(cfg.Headers, c.headers) {
				t.Errorf("headers %v, want %v", cfg.Headers, c.headers)
			}
			if len(cfg.Warnings) != c.warnings {
				t.Errorf("warnings %q, want %d", cfg.Warnings, c.warnings)
			}
			for _, w := range cfg.Warnings {
				if strings.Contains(w, "novalue") {
					t.Errorf("a warning quotes a header: %s", w)
				}
			}
		})
	}
}

func TestOTLPResolveOff(t *testing.T) {
	cfg, err := Resolve(Flags{Interval: time.Second}, envOf(map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "a=b"}))
	if cfg != nil || err != nil {
		t.Errorf("no endpoint anywhere must leave the bridge off: %v, %v", cfg, err)
	}
}

// A bad endpoint variable is ignored with a warning, unlike a bad flag:
// the bridge is then off.
func TestOTLPResolveIgnoresBadEndpointVariable(t *testing.T) {
	for _, name := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"} {
		cfg, err := Resolve(Flags{Interval: time.Second}, envOf(map[string]string{name: "ftp://c:21"}))
		var ignored *IgnoredEndpoint
		if cfg != nil || !errors.As(err, &ignored) || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v, %v; want an IgnoredEndpoint naming it", name, cfg, err)
		}
	}
}

func TestOTLPResolveRefuses(t *testing.T) {
	ok := Flags{Endpoint: "c:4318", Interval: time.Second}
	for _, c := range []struct {
		name string
		edit func(*Flags)
		env  map[string]string
		want string
	}{
		{"zero interval", func(f *Flags) { f.Interval = 0 }, nil, "interval"},
		{"endpoint neither URL nor host:port", func(f *Flags) { f.Endpoint = "collector" }, nil, "host:port"},
		{"unknown scheme", func(f *Flags) { f.Endpoint = "ftp://c:21" }, nil, "scheme"},
		{"credentials in the URL", func(f *Flags) { f.Endpoint = "https://user:pw@c:4318" }, nil, "without user"},
		{"https with --otlp.insecure", func(f *Flags) { f.Endpoint = "https://c:4318"; f.Insecure = true }, nil, "insecure"},
		{"relative url path", func(f *Flags) { f.URLPath = "v1/metrics" }, nil, "start with /"},
		{"unknown protocol", func(f *Flags) { f.Protocol = "http/json" }, nil, "protocol"},
		{"unknown semconv", func(f *Flags) { f.Semconv = "yes" }, nil, "semconv"},
		{"header without =", func(f *Flags) { f.Headers = []string{"Authorization"} }, nil, "KEY=VALUE"},
		{"header from an unset variable", func(f *Flags) { f.HeaderEnv = []string{"Authorization=NOPE"} }, nil, "NOPE"},
		{"header value with a line break", func(f *Flags) { f.Headers = []string{"Authorization=Bearer pw\r\n"} }, nil, "Authorization"},
		{"header value with a NUL", func(f *Flags) { f.Headers = []string{"X-Key=pw\x00"} }, nil, "X-Key"},
		{"header value outside printable ASCII over gRPC", func(f *Flags) { f.Protocol = "grpc"; f.Headers = []string{"X-Team=pw\u00e9quipe"} }, nil, "X-Team"},
		{"header from a variable ending in a line break", func(f *Flags) { f.HeaderEnv = []string{"Authorization=TOKEN"} },
			map[string]string{"TOKEN": "Bearer pw\n"}, "TOKEN"},
		{"certificate without key", func(f *Flags) { f.CertFile = "c.pem" }, nil, "both"},
		// Every push failed for it (probe6-otlp 04).
		{"header name with a blank", func(f *Flags) { f.Headers = []string{"Bad Key=v"} }, nil, "not a header name"},
		{"header-from-env name with a colon", func(f *Flags) { f.HeaderEnv = []string{"X:Y=TOKEN"} }, map[string]string{"TOKEN": "t"}, "not a header name"},
		// An HTTP token, but no gRPC metadata key (found in review).
		{"gRPC header name with !", func(f *Flags) { f.Protocol = ProtocolGRPC; f.Headers = []string{"X!Org=v"} }, nil, "not a header name"},
		{"CA for plain text", func(f *Flags) { f.Endpoint = "http://c:4318"; f.CAFile = "ca.pem" }, nil, "plain HTTP"},
		{"key for plain text", func(f *Flags) { f.Insecure = true; f.KeyFile = "k.pem" }, nil, "plain HTTP"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := ok
			if c.edit != nil {
				c.edit(&f)
			}
			_, err := Resolve(f, envOf(c.env))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("want an error mentioning %q, got %v", c.want, err)
			}
			if err != nil && strings.Contains(err.Error(), "pw") {
				t.Errorf("the error repeats a password: %v", err)
			}
		})
	}
}

func TestOTLPResolveResourceAndTLSFromEnvironment(t *testing.T) {
	pki := newTestPKI(t)
	cfg, err := Resolve(Flags{Interval: time.Second, ClusterName: "prod-eu"}, envOf(map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT":                   "https://c:4318",
		"OTEL_EXPORTER_OTLP_CERTIFICATE":                pki.caFile,
		"OTEL_EXPORTER_OTLP_METRICS_CLIENT_CERTIFICATE": pki.certFile,
		"OTEL_EXPORTER_OTLP_CLIENT_KEY":                 pki.keyFile,
		"OTEL_RESOURCE_ATTRIBUTES":                      "deployment.environment.name=prod,team=ml%20infra",
		"OTEL_SERVICE_NAME":                             "gpu-metrics",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.CAFile != pki.caFile || cfg.CertFile != pki.certFile || cfg.KeyFile != pki.keyFile || len(cfg.Warnings) != 0 {
		t.Errorf("TLS files %q %q %q, warnings %q", cfg.CAFile, cfg.CertFile, cfg.KeyFile, cfg.Warnings)
	}
	want := map[string]string{"deployment.environment.name": "prod", "team": "ml infra"}
	if !reflect.DeepEqual(cfg.ResourceEnv, want) || cfg.ServiceName != "gpu-metrics" || cfg.ClusterName != "prod-eu" {
		t.Errorf("resource %v, service %q, cluster %q", cfg.ResourceEnv, cfg.ServiceName, cfg.ClusterName)
	}
}

// TestOTLPServiceInstanceID: every exporter pushes under an identity of
// its own that stays across its restarts and rollouts: a version 5 UUID
// of its node, listen addresses and collectors, so that the two
// exporters of a node the chart runs for two vendors are two writers of
// their streams, where their resources were identical (probe20-otlp 01),
// and a restart or a new pod does not make every pushed series new
// (review20 O1, review21 F2: the pod's name changed it). The
// expected IDs are Python's, an independent RFC 4122 implementation:
//
//	python3 -c "import uuid; print(uuid.uuid5(uuid.UUID('4d63009a-8d0f-11ee-aad7-4c796ed8e320'),
//	  'gpu-node-01\x00:9835\x00attribution,cost,engines,nvidia'))"
//
// OTEL_RESOURCE_ATTRIBUTES may set it.
func TestOTLPServiceInstanceID(t *testing.T) {
	for _, tc := range []struct {
		parts []string
		want  string
	}{
		{[]string{"gpu-node-01", ":9835", "attribution,cost,engines,nvidia"}, "c57ddb46-e8d8-5bd2-ba64-e04e43b956b5"},
		{[]string{"gpu-node-01", ":9835", "amd,attribution,cost,engines"}, "616cad37-d767-52db-93b7-0ba92335abcf"},
	} {
		if got := InstanceID(tc.parts...); got != tc.want {
			t.Errorf("InstanceID(%q) = %s, want %s", tc.parts, got, tc.want)
		}
	}
	cfg, err := Resolve(Flags{Interval: time.Second}, envOf(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}))
	if err != nil {
		t.Fatal(err)
	}
	cfg.InstanceID = InstanceID("n1", ":9835", "nvidia")
	res, err := newResource(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if id, _ := res.Set().Value("service.instance.id"); id.AsString() != cfg.InstanceID {
		t.Errorf("service.instance.id %q, want %q", id.AsString(), cfg.InstanceID)
	}
	cfg, err = Resolve(Flags{Interval: time.Second}, envOf(map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_RESOURCE_ATTRIBUTES": "service.instance.id=xpu-a",
	}))
	if err != nil {
		t.Fatal(err)
	}
	cfg.InstanceID = InstanceID("n1", ":9835", "nvidia")
	if res, err = newResource(cfg); err != nil {
		t.Fatal(err)
	}
	if id, _ := res.Set().Value("service.instance.id"); id.AsString() != "xpu-a" {
		t.Errorf("service.instance.id %q, want the environment's xpu-a", id.AsString())
	}
}

// The environment is outside input: any value is resolved or refused,
// never a panic, and a header value never shows in an error or warning.
func FuzzResolve(f *testing.F) {
	f.Add("http://c:4318/p", "grpc", "a=b%20c,d=e", "1500", "k=v", "collector:4317")
	f.Add("c:4318", "http/json", "novalue", "-1", "a=%zz", "::1")
	f.Fuzz(func(t *testing.T, endpoint, protocol, headers, timeout, resource, flagEndpoint string) {
		env := map[string]string{
			"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
			"OTEL_EXPORTER_OTLP_HEADERS": "x-secret=SECRETVALUE," + headers, "OTEL_EXPORTER_OTLP_TIMEOUT": timeout,
			"OTEL_RESOURCE_ATTRIBUTES": resource,
		}
		cfg, err := Resolve(Flags{Endpoint: flagEndpoint, Interval: time.Second}, envOf(env))
		if err != nil && strings.Contains(err.Error(), "SECRETVALUE") {
			t.Errorf("error quotes a header: %v", err)
		}
		if cfg == nil {
			return
		}
		if cfg.URL.Scheme != "http" && cfg.URL.Scheme != "https" || cfg.Timeout <= 0 {
			t.Errorf("resolved %s with timeout %v", cfg.URL, cfg.Timeout)
		}
		for _, w := range cfg.Warnings {
			if strings.Contains(w, "SECRETVALUE") {
				t.Errorf("warning quotes a header: %s", w)
			}
		}
	})
}

// A TLS variable naming a file that is missing or holds no PEM, or a client
// key without its certificate, is logged and ignored, as the
// specification asks of a bad variable; it stopped the exporter at start
// (probe6-otlp 02). Flags naming such files still fail it
// (TestOTLPTLSFilesRefused).
func TestOTLPResolveIgnoresBadTLSVariables(t *testing.T) {
	notPEM := filepath.Join(t.TempDir(), "not.pem")
	os.WriteFile(notPEM, []byte("hello"), 0o600)
	for name, env := range map[string]map[string]string{
		"missing CA":      {"OTEL_EXPORTER_OTLP_CERTIFICATE": "/nonexistent/ca.pem"},
		"CA without PEM":  {"OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE": notPEM},
		"key alone":       {"OTEL_EXPORTER_OTLP_CLIENT_KEY": notPEM},
		"certificate bad": {"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": notPEM, "OTEL_EXPORTER_OTLP_CLIENT_KEY": notPEM},
	} {
		t.Run(name, func(t *testing.T) {
			for k, v := range env {
				t.Setenv(k, v) // the SDK reads them too
			}
			cfg, err := Resolve(Flags{Endpoint: "https://127.0.0.1:1", Interval: time.Second}, os.Getenv)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.CAFile != "" || cfg.CertFile != "" || cfg.KeyFile != "" || len(cfg.Warnings) != 1 || !strings.Contains(cfg.Warnings[0], "ignored") {
				t.Errorf("TLS files %q %q %q, warnings %q; want none, one warning", cfg.CAFile, cfg.CertFile, cfg.KeyFile, cfg.Warnings)
			}
			p, err := Start(cfg, gatherFrom(prometheus.NewRegistry()), prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatalf("the bridge does not start: %v", err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			p.Shutdown(ctx)
		})
	}
}
