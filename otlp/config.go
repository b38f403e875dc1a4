package otlp

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Protocols the bridge speaks. OTLP/JSON ("http/json") is not offered: the
// OpenTelemetry Go exporters do not implement it.
const (
	ProtocolGRPC         = "grpc"
	ProtocolHTTPProtobuf = "http/protobuf"
)

// Flags are the --otlp.* flags as given; empty or zero means "not given",
// so that the standard OTEL_* environment variables apply.
type Flags struct {
	Endpoint    string // URL or host:port
	URLPath     string
	Protocol    string
	Insecure    bool
	Headers     []string // KEY=VALUE
	HeaderEnv   []string // KEY=ENV_VAR: the value read from the environment
	Timeout     time.Duration
	Compression string
	CAFile      string
	CertFile    string
	KeyFile     string
	Interval    time.Duration
	ClusterName string
	Semconv     string
}

// Config is the bridge's resolved configuration: flags first, then the
// standard environment, then defaults.
type Config struct {
	Protocol string
	// URL is where to push: scheme http (plain) or https (TLS), host:port
	// and, for http/protobuf, the full path.
	URL         *url.URL
	Headers     map[string]string
	Timeout     time.Duration
	Compression string // "gzip" or "none"
	CAFile      string
	CertFile    string
	KeyFile     string
	Interval    time.Duration
	Semconv     Semconv
	// Resource attributes: what OTEL_RESOURCE_ATTRIBUTES and
	// OTEL_SERVICE_NAME say, over what the exporter knows (Node, K8sNode,
	// ClusterName); service.name defaults to xpu_exporter.
	ResourceEnv map[string]string
	ServiceName string
	// InstanceID is service.instance.id (see InstanceID), "" for none.
	InstanceID  string
	Version     string
	Node        string // host.name
	K8sNode     string // k8s.node.name, when running on Kubernetes
	ClusterName string // k8s.cluster.name
	// Warnings are environment variables that were ignored, with why.
	// Following the specification, a bad variable is reported and ignored
	// rather than fatal ("Configuration Environment Variables": "If a
	// value is invalid, implementations SHOULD generate a warning and
	// gracefully ignore the setting"); bad flags are errors.
	Warnings []string
}

// Semconv says under which names device and inference metrics are pushed.
type Semconv string

const (
	// SemconvNone pushes the names /metrics serves, and nothing else.
	SemconvNone Semconv = "none"
	// SemconvAlso pushes those and, in addition, the families that have an
	// OpenTelemetry semantic convention under its name and attributes.
	SemconvAlso Semconv = "also"
	// SemconvOnly pushes the convention's names instead of ours where one
	// exists, and OpenTelemetry's attribute names for owners everywhere.
	SemconvOnly Semconv = "only"
)

// Defaults where neither flag nor environment says. The timeout is the
// specification's default (OTEL_EXPORTER_OTLP_TIMEOUT: 10s). Compression
// departs from its default (none): every OTLP backend we target accepts
// gzip, and metric batches of a GPU node with owner labels shrink about
// tenfold.
const (
	defaultTimeout     = 10 * time.Second
	defaultCompression = "gzip"
	defaultServiceName = "xpu_exporter"
	metricsPath        = "v1/metrics"
)

// IgnoredEndpoint is Resolve's error for an endpoint variable that cannot
// be used. Like every bad variable it is to be logged and ignored ("If an
// invalid value is provided, the SDK MUST log a warning and ignore it",
// the specification's "Configuration options"); without an endpoint the
// bridge is off. A bad flag, by contrast, stops the exporter.
type IgnoredEndpoint struct{ Err error }

func (e *IgnoredEndpoint) Error() string { return e.Err.Error() }
func (e *IgnoredEndpoint) Unwrap() error { return e.Err }

// Resolve combines flags and environment into a Config. It returns nil and
// no error when no endpoint is given anywhere: the bridge is off.
//
// The environment variables and their meaning are those of the OpenTelemetry
// specification, "OpenTelemetry Protocol Exporter" (specification/protocol/
// exporter.md): a signal-specific variable (…_METRICS_…) wins over the
// generic one; OTEL_EXPORTER_OTLP_ENDPOINT is a base URL to which
// "v1/metrics" is appended for HTTP, OTEL_EXPORTER_OTLP_METRICS_ENDPOINT is
// used as is; the timeout is in milliseconds; headers are "k=v,k2=v2" with
// percent-encoded values.
func Resolve(f Flags, getenv func(string) string) (*Config, error) {
	env := func(name string) string {
		if v := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_METRICS_" + name)); v != "" {
			return v
		}
		return strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_" + name))
	}
	c := &Config{Interval: f.Interval, ClusterName: f.ClusterName}
	if c.Interval <= 0 {
		return nil, fmt.Errorf("--otlp.interval %v must be positive", f.Interval)
	}

	var err error
	if c.Semconv, err = parseSemconv(f.Semconv); err != nil {
		return nil, err
	}

	c.Protocol = f.Protocol
	if c.Protocol == "" {
		c.Protocol = env("PROTOCOL")
		if c.Protocol != "" && c.Protocol != ProtocolGRPC && c.Protocol != ProtocolHTTPProtobuf {
			c.warn("OTEL_EXPORTER_OTLP_[METRICS_]PROTOCOL=%q is not grpc or http/protobuf; using http/protobuf", c.Protocol)
			c.Protocol = ""
		}
		if c.Protocol == "" {
			// The specification's default: "SDKs SHOULD default endpoint
			// variables to use http/protobuf".
			c.Protocol = ProtocolHTTPProtobuf
		}
	} else if c.Protocol != ProtocolGRPC && c.Protocol != ProtocolHTTPProtobuf {
		return nil, fmt.Errorf("--otlp.protocol=%q: want grpc or http/protobuf", f.Protocol)
	}

	if c.URL, err = c.resolveURL(f, getenv); err != nil || c.URL == nil {
		return nil, err
	}

	if c.Headers, err = c.resolveHeaders(f, env, getenv); err != nil {
		return nil, err
	}

	c.Timeout = f.Timeout
	if f.Timeout < 0 {
		return nil, fmt.Errorf("--otlp.timeout %v must be positive", f.Timeout)
	}
	if c.Timeout == 0 {
		c.Timeout = defaultTimeout
		if v := env("TIMEOUT"); v != "" {
			if ms, err := strconv.ParseUint(v, 10, 31); err != nil || ms == 0 {
				c.warn("OTEL_EXPORTER_OTLP_[METRICS_]TIMEOUT=%q is not a positive number of milliseconds; using %v", v, defaultTimeout)
			} else {
				c.Timeout = time.Duration(ms) * time.Millisecond
			}
		}
	}

	c.Compression = f.Compression
	switch c.Compression {
	case "gzip", "none":
	case "":
		c.Compression = defaultCompression
		if v := env("COMPRESSION"); v == "gzip" || v == "none" {
			c.Compression = v
		} else if v != "" {
			c.warn("OTEL_EXPORTER_OTLP_[METRICS_]COMPRESSION=%q is not gzip or none; using %s", v, defaultCompression)
		}
	default:
		return nil, fmt.Errorf("--otlp.compression=%q: want gzip or none", f.Compression)
	}

	c.CAFile, c.CertFile, c.KeyFile = f.CAFile, f.CertFile, f.KeyFile
	if c.URL.Scheme == "http" && (c.CAFile != "" || c.CertFile != "" || c.KeyFile != "") {
		return nil, fmt.Errorf("OTLP endpoint %s is plain HTTP, but --otlp.tls.* files are given: use https", c.URL.Redacted())
	}
	if c.URL.Scheme == "https" {
		// A bad variable is logged and ignored, as the specification asks
		// of every variable: checked here, where a bad flag fails the
		// start, so that a missing file it names does not.
		if v := env("CERTIFICATE"); c.CAFile == "" && v != "" {
			if _, err := loadCA(v); err != nil {
				c.warn("OTEL_EXPORTER_OTLP_[METRICS_]CERTIFICATE ignored, using the system's roots: %v", err)
			} else {
				c.CAFile = v
			}
		}
		if cert, key := env("CLIENT_CERTIFICATE"), env("CLIENT_KEY"); c.CertFile == "" && c.KeyFile == "" && (cert != "" || key != "") {
			var err error
			if cert == "" || key == "" {
				err = errors.New("the certificate and the key go together: give both or neither")
			} else {
				_, err = loadKeyPair(cert, key)
			}
			if err != nil {
				c.warn("OTEL_EXPORTER_OTLP_[METRICS_]CLIENT_CERTIFICATE and CLIENT_KEY ignored, pushing without a client certificate: %v", err)
			} else {
				c.CertFile, c.KeyFile = cert, key
			}
		}
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return nil, errors.New("OTLP client certificate and key go together: give both or neither")
	}

	c.ServiceName = strings.TrimSpace(getenv("OTEL_SERVICE_NAME"))
	c.ResourceEnv = c.parseResourceEnv(getenv("OTEL_RESOURCE_ATTRIBUTES"))
	return c, nil
}

// instanceNamespace is the namespace of service.instance.id's version 5
// UUIDs, as the convention names it.
var instanceNamespace = uuid.MustParse("4d63009a-8d0f-11ee-aad7-4c796ed8e320")

// InstanceID is an exporter's service.instance.id: a version 5 UUID of
// what tells it from any other exporter (its node, the addresses it
// listens on and the collectors it runs; not its host name, a pod's random
// name on Kubernetes, which every rollout changes: review21 F2), as the
// convention asks where the ID should be stable ("the ID
// SHOULD be used as source of a UUID Version 5 and SHOULD use the
// following UUID as the namespace: 4d63009a-8d0f-11ee-aad7-4c796ed8e320").
// Without it the two exporters of a node the chart's per-vendor
// DaemonSets run pushed streams of one identity, breaking OTLP's
// single-writer rule (found by probe20-otlp: their counters' start times
// alternated at every push); a random one would make every series of a
// node new at each restart (review20 O1).
func InstanceID(parts ...string) string {
	return uuid.NewSHA1(instanceNamespace, []byte(strings.Join(parts, "\x00"))).String()
}

func parseSemconv(s string) (Semconv, error) {
	switch Semconv(s) {
	case "", SemconvNone:
		return SemconvNone, nil
	case SemconvAlso, SemconvOnly:
		return Semconv(s), nil
	}
	return "", fmt.Errorf("--otlp.semconv=%q: want none, also or only", s)
}

func (c *Config) warn(format string, args ...any) {
	c.Warnings = append(c.Warnings, fmt.Sprintf(format, args...))
}

// resolveURL finds the endpoint: --otlp.endpoint, else
// OTEL_EXPORTER_OTLP_METRICS_ENDPOINT, else OTEL_EXPORTER_OTLP_ENDPOINT.
func (c *Config) resolveURL(f Flags, getenv func(string) string) (*url.URL, error) {
	var (
		u    *url.URL
		asIs bool // the path is the metrics path itself, not a base
		err  error
	)
	switch {
	case f.Endpoint != "":
		if u, err = parseEndpoint(f.Endpoint, f.Insecure); err != nil {
			return nil, fmt.Errorf("--otlp.endpoint: %w", err)
		}
		if f.Insecure && u.Scheme == "https" {
			return nil, fmt.Errorf("--otlp.endpoint=%s is https, yet --otlp.insecure asks for plain text", u.Redacted())
		}
	default:
		name := "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"
		v := strings.TrimSpace(getenv(name))
		asIs = v != ""
		if !asIs {
			name = "OTEL_EXPORTER_OTLP_ENDPOINT"
			v = strings.TrimSpace(getenv(name))
		}
		if v == "" {
			return nil, nil
		}
		// The specification's OTEL_EXPORTER_OTLP_INSECURE: "Whether to
		// enable client transport security for the exporter's gRPC
		// connection. This option only applies to OTLP/gRPC when an
		// endpoint is provided without the http or https scheme."
		insecure := false
		for _, n := range []string{"OTEL_EXPORTER_OTLP_METRICS_INSECURE", "OTEL_EXPORTER_OTLP_INSECURE"} {
			b := strings.TrimSpace(getenv(n))
			if b == "" {
				continue
			}
			// A boolean of the specification ("Configuration Environment
			// Variables", "Boolean value"): only "true" is true, and any
			// value but "false" "SHOULD" be warned about.
			insecure = strings.EqualFold(b, "true")
			if !insecure && !strings.EqualFold(b, "false") {
				c.warn("%s=%q is not true or false; using false (TLS)", n, b)
			}
			break
		}
		// --otlp.insecure, a flag, applies to a bare host:port from the
		// environment too.
		if u, err = parseEndpoint(v, (c.Protocol == ProtocolGRPC && insecure) || f.Insecure); err != nil {
			return nil, &IgnoredEndpoint{Err: fmt.Errorf("%s: %w", name, err)}
		}
	}
	if c.Protocol == ProtocolGRPC {
		u.Path = ""
		return u, nil
	}
	switch {
	case f.URLPath != "":
		if !strings.HasPrefix(f.URLPath, "/") {
			return nil, fmt.Errorf("--otlp.url-path=%q must start with /", f.URLPath)
		}
		u.Path = f.URLPath
	case asIs:
		if u.Path == "" {
			u.Path = "/"
		}
	default:
		u.Path = strings.TrimSuffix(u.Path, "/") + "/" + metricsPath
	}
	return u, nil
}

// parseEndpoint reads "scheme://host:port[/path]" or "host:port"; the
// latter is plain text when insecure is set, else TLS.
func parseEndpoint(s string, insecure bool) (*url.URL, error) {
	if !strings.Contains(s, "://") {
		if _, _, err := net.SplitHostPort(s); err != nil {
			return nil, fmt.Errorf("%q is neither a URL nor host:port: %w", s, err)
		}
		scheme := "https"
		if insecure {
			scheme = "http"
		}
		return &url.URL{Scheme: scheme, Host: s}, nil
	}
	u, err := url.Parse(s)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("%s: scheme must be http or https", u.Redacted())
	}
	if u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("%s: want scheme://host[:port][/path], without user, query or fragment", u.Redacted())
	}
	// A URL without a port means the scheme's (443 or 80), as for any
	// URL: the specification's 4317 and 4318 are the ports of its default
	// endpoint, which this bridge does not assume.
	return u, nil
}

// resolveHeaders merges the environment's headers with the flags', the
// flags winning per key.
func (c *Config) resolveHeaders(f Flags, env func(string) string, getenv func(string) string) (map[string]string, error) {
	h := map[string]string{}
	if v := env("HEADERS"); v != "" {
		parsed, err := parseKeyValues(v)
		if k := c.unsendable(parsed); err == nil && k != "" {
			err = fmt.Errorf("header %s: %s", k, unsendableWhy)
		}
		if k := c.badName(parsed); err == nil && k != "" {
			err = fmt.Errorf("header name %q: %s", k, badNameWhy)
		}
		if err != nil {
			// The value is never quoted back: it holds credentials.
			c.warn("OTEL_EXPORTER_OTLP_[METRICS_]HEADERS is ignored: %v", err)
			parsed = nil
		}
		for k, v := range parsed {
			h[k] = v
		}
	}
	fromFlags, err := ParseHeaders(f.Headers)
	if err != nil {
		return nil, err
	}
	if k := c.unsendable(fromFlags); k != "" {
		return nil, fmt.Errorf("--otlp.header %s: %s", k, unsendableWhy)
	}
	if k := c.badName(fromFlags); k != "" {
		return nil, fmt.Errorf("--otlp.header name %q: %s", k, badNameWhy)
	}
	for k, v := range fromFlags {
		h[k] = v
	}
	for _, e := range f.HeaderEnv {
		k, name, ok := strings.Cut(e, "=")
		k, name = strings.TrimSpace(k), strings.TrimSpace(name)
		if !ok || k == "" || name == "" {
			return nil, fmt.Errorf("--otlp.header-from-env=%q: want HEADER=ENV_VAR", e)
		}
		if c.badName(map[string]string{k: ""}) != "" {
			return nil, fmt.Errorf("--otlp.header-from-env: header name %q: %s", k, badNameWhy)
		}
		v := getenv(name)
		if v == "" {
			return nil, fmt.Errorf("--otlp.header-from-env: header %s: environment variable %s is empty or not set", k, name)
		}
		if c.unsendable(map[string]string{k: v}) != "" {
			return nil, fmt.Errorf("--otlp.header-from-env: header %s: environment variable %s: %s (a secret ending in a line break?)", k, name, unsendableWhy)
		}
		h[k] = v
	}
	return h, nil
}

// ParseHeaders reads KEY=VALUE flags. Errors name the key only: values are
// credentials.
func ParseHeaders(flags []string) (map[string]string, error) {
	h := map[string]string{}
	for _, f := range flags {
		k, v, ok := strings.Cut(f, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("OTLP header %q: want KEY=VALUE", strings.TrimSpace(k))
		}
		h[strings.TrimSpace(k)] = v
	}
	return h, nil
}

// unsendableWhy says what unsendable found, never quoting the value: it is
// a credential.
const unsendableWhy = "the value holds a character no request of the protocol can carry, such as CR or LF"

const badNameWhy = "not a header name the protocol carries (HTTP: an RFC 9110 token, letters, digits and !#$%&'*+-.^_`|~; gRPC metadata: letters, digits and -_.), which every request would be refused for"

// badName returns a key of h that no request of the protocol can carry as
// a header name, "" if none. gRPC metadata keys are lower-cased and then
// may hold only [0-9a-z-_.] (grpc-go, metadata.ValidateKey).
func (c *Config) badName(h map[string]string) string {
	for _, k := range slices.Sorted(maps.Keys(h)) {
		if k == "" || strings.ContainsFunc(k, func(r rune) bool {
			alnum := 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9'
			if c.Protocol == ProtocolGRPC {
				return !alnum && !strings.ContainsRune("-_.", r)
			}
			return !alnum && !strings.ContainsRune("!#$%&'*+-.^_`|~", r)
		}) {
			return k
		}
	}
	return ""
}

// unsendable names the first header of h, in name order, whose value no
// push could carry, or returns "". Go's HTTP client refuses control
// characters but the tab (RFC 9110's field-value); gRPC anything outside
// printable ASCII (its metadata's ASCII-Value). Caught at start, such a
// value would otherwise fail every push.
func (c *Config) unsendable(h map[string]string) string {
	for _, k := range slices.Sorted(maps.Keys(h)) {
		for _, b := range []byte(h[k]) {
			control := b < ' ' && b != '\t' || b == 0x7f
			printable := ' ' <= b && b <= '~'
			if control || c.Protocol == ProtocolGRPC && !printable {
				return k
			}
		}
	}
	return ""
}

// parseKeyValues reads the list format shared by OTEL_EXPORTER_OTLP_HEADERS
// and OTEL_RESOURCE_ATTRIBUTES: "key1=value1,key2=value2", keys and values
// trimmed, values percent-decoded (the W3C Baggage format without
// properties, as exporter.md and the SDK environment variables page
// specify). One bad member spoils the whole list, as the specification's
// resource section says for OTEL_RESOURCE_ATTRIBUTES ("the entire
// environment variable value SHOULD be discarded").
func parseKeyValues(s string) (map[string]string, error) {
	out := map[string]string{}
	for i, member := range strings.Split(s, ",") {
		if strings.TrimSpace(member) == "" {
			continue
		}
		k, v, ok := strings.Cut(member, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("member %d is not key=value", i+1)
		}
		dv, err := url.PathUnescape(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("member %d (%s): bad percent-encoding", i+1, k)
		}
		out[k] = dv
	}
	return out, nil
}

func (c *Config) parseResourceEnv(s string) map[string]string {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	m, err := parseKeyValues(s)
	if err != nil {
		c.warn("OTEL_RESOURCE_ATTRIBUTES is ignored: %v", err)
		return nil
	}
	return m
}
