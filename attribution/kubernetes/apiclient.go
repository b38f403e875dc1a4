package kubernetes

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/xpu-exporter/xpu_exporter/internal/validutf8"
)

// Bounds on what is read from files and from the API server.
const (
	maxKubeconfigBytes = 4 << 20
	maxPEMFileBytes    = 1 << 20
	maxTokenBytes      = 64 << 10
	// maxErrorBodyBytes bounds the body of an answer that is not a
	// success: a Status, or a proxy's page.
	maxErrorBodyBytes = 64 << 10
	// maxErrorMessage bounds what of it goes into an error (and a log).
	maxErrorMessage = 512
)

// tokenReread is how long a token read from a file is used before the file
// is read again: bound service account tokens are rotated by the kubelet,
// and client-go re-reads its token file this often
// (k8s.io/client-go/transport/token_source.go, NewCachedFileTokenSource:
// "half of the duration between when the kubelet refreshes a projected
// service account token and when the original token expires").
const tokenReread = time.Minute

// serviceAccountDir holds the pod's service account token and the cluster's
// CA certificates ("Accessing the Kubernetes API from a Pod", Kubernetes
// docs, "Directly accessing the REST API": the token "at
// /var/run/secrets/kubernetes.io/serviceaccount/token"; "If available, a
// certificate bundle is placed [...] at
// /var/run/secrets/kubernetes.io/serviceaccount/ca.crt"). A variable for
// the tests.
var serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// apiConfig is how to reach the API server: what the exporter reads of a
// kubeconfig, or of the pod it runs in.
type apiConfig struct {
	// Host is the server's URL; a path in it prefixes every request (a
	// proxy in front of the API server, as client-go allows).
	Host string
	// TLS is nil for a plain-HTTP server.
	TLS *tls.Config
	// Token is nil without bearer token authentication.
	Token *tokenSource
	// Proxy is the kubeconfig cluster's proxy-url; nil takes it from
	// the environment (HTTPS_PROXY, NO_PROXY), as client-go does.
	Proxy *url.URL
}

// inClusterConfig is the configuration of a pod's service account: the
// API server at KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT (the
// kubernetes Service's environment variables, which client-go's
// rest.InClusterConfig reads; the docs name its _HTTPS port, the same
// 443), the token, and ca.crt when it is there, else the system's roots
// as client-go does. Outside a cluster, without the variables, it is
// nil, nil.
func inClusterConfig() (*apiConfig, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, nil
	}
	token, err := newTokenSource("", filepath.Join(serviceAccountDir, "token"))
	if err != nil {
		return nil, fmt.Errorf("in-cluster configuration: %w", err)
	}
	pool, err := readCAFile(filepath.Join(serviceAccountDir, "ca.crt"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("in-cluster configuration: %w", err)
	}
	return &apiConfig{
		Host:  "https://" + net.JoinHostPort(host, port),
		TLS:   &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		Token: token,
	}, nil
}

// kubeconfig is what the exporter reads of a kubeconfig file: the
// clientcmd v1 Config (k8s.io/client-go/tools/clientcmd/api/v1/types.go,
// whose JSON names these are).
type kubeconfig struct {
	CurrentContext string `json:"current-context"`
	Contexts       []struct {
		Name    string `json:"name"`
		Context struct {
			Cluster string `json:"cluster"`
			User    string `json:"user"`
		} `json:"context"`
	} `json:"contexts"`
	Clusters []struct {
		Name    string            `json:"name"`
		Cluster kubeconfigCluster `json:"cluster"`
	} `json:"clusters"`
	Users []struct {
		Name string         `json:"name"`
		User kubeconfigUser `json:"user"`
	} `json:"users"`
}

type kubeconfigCluster struct {
	Server                   string `json:"server"`
	TLSServerName            string `json:"tls-server-name"`
	InsecureSkipTLSVerify    bool   `json:"insecure-skip-tls-verify"`
	CertificateAuthority     string `json:"certificate-authority"`
	CertificateAuthorityData []byte `json:"certificate-authority-data"`
	ProxyURL                 string `json:"proxy-url"`
}

type kubeconfigUser struct {
	ClientCertificate     string `json:"client-certificate"`
	ClientCertificateData []byte `json:"client-certificate-data"`
	ClientKey             string `json:"client-key"`
	ClientKeyData         []byte `json:"client-key-data"`
	Token                 string `json:"token"`
	TokenFile             string `json:"tokenFile"`
	// What the exporter does not do; only whether each is there.
	Impersonate       string          `json:"as"`
	ImpersonateUID    string          `json:"as-uid"`
	ImpersonateGroups []string        `json:"as-groups"`
	Username          string          `json:"username"`
	Password          string          `json:"password"`
	AuthProvider      json.RawMessage `json:"auth-provider"`
	Exec              json.RawMessage `json:"exec"`
}

// loadKubeconfig reads the current context of the kubeconfig at path:
// its cluster and user. Relative file names in it are relative to the
// kubeconfig's directory, as kubectl resolves them (clientcmd
// ResolveLocalPaths). A user who authenticates in a way the exporter does
// not do is an error at start, not a client that is refused at every
// request.
func loadKubeconfig(path string) (*apiConfig, error) {
	b, err := readBounded(path, maxKubeconfigBytes)
	if err != nil {
		return nil, err
	}
	var kc kubeconfig
	if err := yaml.Unmarshal(b, &kc); err != nil {
		return nil, err
	}
	if kc.CurrentContext == "" {
		return nil, errors.New("no current-context")
	}
	var clusterName, userName string
	found := false
	for _, c := range kc.Contexts {
		if c.Name == kc.CurrentContext {
			clusterName, userName, found = c.Context.Cluster, c.Context.User, true
			break
		}
	}
	if !found {
		return nil, fmt.Errorf("current-context %q is not among the contexts", kc.CurrentContext)
	}
	var cluster *kubeconfigCluster
	for i := range kc.Clusters {
		if kc.Clusters[i].Name == clusterName {
			cluster = &kc.Clusters[i].Cluster
			break
		}
	}
	if cluster == nil {
		return nil, fmt.Errorf("context %q: cluster %q not found", kc.CurrentContext, clusterName)
	}
	var user *kubeconfigUser
	for i := range kc.Users {
		if kc.Users[i].Name == userName {
			user = &kc.Users[i].User
			break
		}
	}
	if user == nil {
		return nil, fmt.Errorf("context %q: user %q not found", kc.CurrentContext, userName)
	}
	dir, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	resolve := func(p string) string {
		if p == "" || filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(dir, p)
	}
	if err := user.supported(userName); err != nil {
		return nil, err
	}
	cfg := &apiConfig{}
	if cluster.ProxyURL != "" {
		if cfg.Proxy, err = url.Parse(cluster.ProxyURL); err != nil {
			return nil, fmt.Errorf("cluster %q: proxy-url: %w", clusterName, err)
		}
	}
	tlsCfg, err := kubeconfigTLS(cluster, user, resolve)
	if err != nil {
		return nil, fmt.Errorf("cluster %q, user %q: %w", clusterName, userName, err)
	}
	if cfg.Host, err = serverURL(cluster.Server, tlsCfg != nil); err != nil {
		return nil, fmt.Errorf("cluster %q: %w", clusterName, err)
	}
	if strings.HasPrefix(cfg.Host, "https://") {
		if tlsCfg == nil {
			tlsCfg = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		cfg.TLS = tlsCfg
	}
	if user.Token != "" || user.TokenFile != "" {
		if cfg.Token, err = newTokenSource(user.Token, resolve(user.TokenFile)); err != nil {
			return nil, fmt.Errorf("user %q: %w", userName, err)
		}
	}
	return cfg, nil
}

// supported says what of u the exporter does not do, and what to use
// instead.
func (u *kubeconfigUser) supported(name string) error {
	instead := "use a token, tokenFile or client certificate, or run the exporter in the cluster with its service account"
	switch {
	case len(u.Exec) > 0 && string(u.Exec) != "null":
		return fmt.Errorf("user %q authenticates with an exec credential plugin, which the exporter does not run: %s", name, instead)
	case len(u.AuthProvider) > 0 && string(u.AuthProvider) != "null":
		return fmt.Errorf("user %q authenticates with an auth-provider, which the exporter does not support: %s", name, instead)
	case u.Username != "" || u.Password != "":
		return fmt.Errorf("user %q authenticates with a username and password, which the exporter does not support: %s", name, instead)
	case u.Impersonate != "" || u.ImpersonateUID != "" || len(u.ImpersonateGroups) > 0:
		return fmt.Errorf("user %q impersonates another (as, as-uid, as-groups), which the exporter does not support: give the user itself the RBAC the exporter needs", name)
	}
	return nil
}

// kubeconfigTLS is the TLS configuration that cluster and user ask for;
// nil when they ask for none (system roots, no client certificate). The
// combinations clientcmd's validation or client-go's transport refuse are
// refused here too.
func kubeconfigTLS(cluster *kubeconfigCluster, user *kubeconfigUser, resolve func(string) string) (*tls.Config, error) {
	if cluster.CertificateAuthority != "" && len(cluster.CertificateAuthorityData) > 0 {
		return nil, errors.New("both certificate-authority and certificate-authority-data are given")
	}
	if user.ClientCertificate != "" && len(user.ClientCertificateData) > 0 {
		return nil, errors.New("both client-certificate and client-certificate-data are given")
	}
	if user.ClientKey != "" && len(user.ClientKeyData) > 0 {
		return nil, errors.New("both client-key and client-key-data are given")
	}
	hasCA := cluster.CertificateAuthority != "" || len(cluster.CertificateAuthorityData) > 0
	if hasCA && cluster.InsecureSkipTLSVerify {
		return nil, errors.New("a certificate authority and insecure-skip-tls-verify are given together")
	}
	hasCert := user.ClientCertificate != "" || len(user.ClientCertificateData) > 0
	hasKey := user.ClientKey != "" || len(user.ClientKeyData) > 0
	if hasCert != hasKey {
		return nil, errors.New("a client certificate needs both a certificate and its key")
	}
	if !hasCA && !hasCert && !cluster.InsecureSkipTLSVerify && cluster.TLSServerName == "" {
		return nil, nil
	}
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		ServerName: cluster.TLSServerName,
		// Asked for by the kubeconfig, which kubectl honours too.
		InsecureSkipVerify: cluster.InsecureSkipTLSVerify,
	}
	var err error
	switch {
	case len(cluster.CertificateAuthorityData) > 0:
		cfg.RootCAs, err = certPool(cluster.CertificateAuthorityData)
		if err != nil {
			return nil, fmt.Errorf("certificate-authority-data: %w", err)
		}
	case cluster.CertificateAuthority != "":
		if cfg.RootCAs, err = readCAFile(resolve(cluster.CertificateAuthority)); err != nil {
			return nil, err
		}
	}
	if hasCert {
		certPEM, keyPEM := user.ClientCertificateData, user.ClientKeyData
		if user.ClientCertificate != "" {
			if certPEM, err = readBounded(resolve(user.ClientCertificate), maxPEMFileBytes); err != nil {
				return nil, fmt.Errorf("client-certificate: %w", err)
			}
		}
		if user.ClientKey != "" {
			if keyPEM, err = readBounded(resolve(user.ClientKey), maxPEMFileBytes); err != nil {
				return nil, fmt.Errorf("client-key: %w", err)
			}
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// serverURL is the cluster's server as a URL. A host:port without a scheme
// is https when TLS is configured, else http, as client-go's
// rest.DefaultServerURL takes it.
func serverURL(server string, tlsConfigured bool) (string, error) {
	if server == "" {
		return "", errors.New("no server")
	}
	u, err := url.Parse(server)
	if err != nil || u.Scheme == "" || u.Host == "" {
		scheme := "http://"
		if tlsConfigured {
			scheme = "https://"
		}
		u, err = url.Parse(scheme + server)
		if err != nil {
			return "", fmt.Errorf("server %q: %w", server, err)
		}
	}
	if u.Scheme != "https" && u.Scheme != "http" {
		return "", fmt.Errorf("server %q: scheme %q is neither https nor http", server, u.Scheme)
	}
	if u.Host == "" {
		return "", fmt.Errorf("server %q has no host", server)
	}
	return strings.TrimSuffix(u.String(), "/"), nil
}

func readCAFile(path string) (*x509.CertPool, error) {
	b, err := readBounded(path, maxPEMFileBytes)
	if err != nil {
		return nil, fmt.Errorf("certificate authority %s: %w", path, err)
	}
	pool, err := certPool(b)
	if err != nil {
		return nil, fmt.Errorf("certificate authority %s: %w", path, err)
	}
	return pool, nil
}

func certPool(pem []byte) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, errors.New("no PEM certificate in it")
	}
	return pool, nil
}

// tokenSource is a bearer token, read again from its file at most once a
// tokenReread, as client-go's cachingTokenSource does: a token that cannot
// be read again is used until one can.
type tokenSource struct {
	path string
	now  func() time.Time

	mu    sync.Mutex
	token string
	read  time.Time
}

// newTokenSource starts from token, or from what path holds when token is
// empty; path, when given, is read again every tokenReread.
func newTokenSource(token, path string) (*tokenSource, error) {
	t := &tokenSource{path: path, now: time.Now, token: token}
	if token != "" {
		t.read = t.now()
		return t, nil
	}
	tok, err := readToken(path)
	if err != nil {
		return nil, err
	}
	t.token, t.read = tok, t.now()
	return t, nil
}

func (t *tokenSource) get() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.path == "" {
		return t.token
	}
	if now := t.now(); now.Sub(t.read) >= tokenReread {
		if tok, err := readToken(t.path); err == nil {
			t.token, t.read = tok, now
		}
	}
	return t.token
}

// expire makes the next get read the file again.
func (t *tokenSource) expire() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.read = time.Time{}
}

func readToken(path string) (string, error) {
	b, err := readBounded(path, maxTokenBytes)
	if err != nil {
		return "", fmt.Errorf("token file %s: %w", path, err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("token file %s is empty", path)
	}
	return tok, nil
}

// apiClient makes the exporter's GET requests of the API server.
type apiClient struct {
	base      *url.URL
	http      *http.Client
	transport *http.Transport
	token     *tokenSource
}

func newAPIClient(cfg *apiConfig) (*apiClient, error) {
	base, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, fmt.Errorf("API server %q: %w", cfg.Host, err)
	}
	proxy := http.ProxyFromEnvironment
	if cfg.Proxy != nil {
		proxy = http.ProxyURL(cfg.Proxy)
	}
	// The timeouts of client-go's transport (transport/cache.go,
	// apimachinery util/net SetTransportDefaults), with its HTTP/2 health
	// check: a connection that is silent for 30 s is pinged, and closed
	// when the ping goes unanswered for 15 s, so that a watch on a dead
	// connection ends long before its deadline.
	tr := &http.Transport{
		Proxy:               proxy,
		DialContext:         (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:     cfg.TLS,
		TLSHandshakeTimeout: 10 * time.Second,
		IdleConnTimeout:     90 * time.Second,
		MaxIdleConnsPerHost: 4,
		ForceAttemptHTTP2:   true,
		HTTP2:               &http.HTTP2Config{SendPingTimeout: 30 * time.Second, PingTimeout: 15 * time.Second},
	}
	return &apiClient{base: base, http: &http.Client{Transport: tr}, transport: tr, token: cfg.Token}, nil
}

// close drops the idle connections.
func (c *apiClient) close() { c.transport.CloseIdleConnections() }

// apiError is an answer of the API server that is not a success, with
// what its Status says (metav1.Status: code, reason, message).
type apiError struct {
	Path    string
	Code    int
	Reason  string
	Message string
}

func (e *apiError) Error() string {
	msg := fmt.Sprintf("GET %s: %d %s", e.Path, e.Code, http.StatusText(e.Code))
	if e.Message != "" {
		msg += ": " + e.Message
	}
	return msg
}

// isGone says the API server no longer has the resource version asked for
// (410 Gone: "Efficient detection of changes", Kubernetes API concepts).
func isGone(err error) bool {
	var e *apiError
	return errors.As(err, &e) && e.Code == http.StatusGone
}

// versionUnavailable says err is the API server's answer that it cannot
// serve the resource version asked for: gone (410), or newer than its
// cache (a 504 "Too large resource version", which client-go's reflector,
// isTooLargeResourceVersionError, also tells by its message).
func versionUnavailable(err error) bool {
	var e *apiError
	return isGone(err) || errors.As(err, &e) && e.Code == http.StatusGatewayTimeout && strings.Contains(e.Message, "Too large resource version")
}

// apiStatus is what the exporter reads of a metav1.Status.
type apiStatus struct {
	Code    int    `json:"code"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// get sends GET path?query with accept and returns the response of a
// success; any other answer is an *apiError.
func (c *apiClient) get(ctx context.Context, path string, query url.Values, accept string) (*http.Response, error) {
	u := *c.base
	u.Path = strings.TrimSuffix(u.Path, "/") + path
	u.RawPath = ""
	u.RawQuery = query.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", accept)
	req.Header.Set("User-Agent", "xpu_exporter")
	if c.token != nil {
		req.Header.Set("Authorization", "Bearer "+c.token.get())
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return resp, nil
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusUnauthorized && c.token != nil {
		// The token may have been rotated and the old one revoked: the
		// next request reads the file again, as client-go's cached file
		// token source does on a 401, where the source stayed down for
		// up to a minute more (probe23-k8sapi D3).
		c.token.expire()
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBodyBytes))
	e := &apiError{Path: path, Code: resp.StatusCode}
	var st apiStatus
	if json.Unmarshal(body, &st) == nil && (st.Message != "" || st.Reason != "") {
		e.Reason, e.Message = st.Reason, st.Message
	} else {
		e.Message = strings.TrimSpace(string(body))
	}
	e.Message = validutf8.String(truncate(e.Message, maxErrorMessage))
	return nil, e
}

// getJSON decodes the answer to GET path?query, of at most limit bytes,
// into v.
func (c *apiClient) getJSON(ctx context.Context, path string, query url.Values, accept string, limit int64, v any) error {
	resp, err := c.get(ctx, path, query, accept)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	if int64(len(b)) > limit {
		return fmt.Errorf("GET %s: answer larger than %d bytes", path, limit)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
