package kubernetes

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// testCert is a certificate and its key, in PEM.
type testCert struct {
	certPEM, keyPEM []byte
	cert            *x509.Certificate
	key             *ecdsa.PrivateKey
}

// newTestCert makes a certificate for cn, signed by parent, or a
// self-signed CA without one.
func newTestCert(t *testing.T, cn string, parent *testCert) *testCert {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	signer, signerKey := tmpl, key
	if parent == nil {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage |= x509.KeyUsageCertSign
	} else {
		signer, signerKey = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return &testCert{
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		cert:    cert, key: key,
	}
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestLoadKubeconfig(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCert(t, "cluster-ca", nil)
	client := newTestCert(t, "system:serviceaccount:monitoring:xpu-exporter", ca)
	// Files beside the kubeconfig, in its directory "cfg", and above it.
	writeFile(t, filepath.Join(dir, "cfg", "ca.crt"), ca.certPEM)
	writeFile(t, filepath.Join(dir, "certs", "client.crt"), client.certPEM)
	writeFile(t, filepath.Join(dir, "certs", "client.key"), client.keyPEM)
	writeFile(t, filepath.Join(dir, "cfg", "token"), []byte("file-token\n"))
	b64 := base64.StdEncoding.EncodeToString
	caPool := x509.NewCertPool()
	caPool.AddCert(ca.cert)

	kubeconfig := func(cluster, user string) string {
		return `apiVersion: v1
kind: Config
current-context: exporter@prod
contexts:
- name: other
  context: {cluster: other, user: other}
- name: exporter@prod
  context: {cluster: prod, user: exporter}
clusters:
- name: other
  cluster: {server: "https://other.example:6443"}
- name: prod
  cluster:
` + cluster + `
users:
- name: other
  user: {token: other-token}
- name: exporter
  user:
` + user + "\n"
	}
	type want struct {
		host       string
		tls        bool
		roots      *x509.CertPool
		serverName string
		insecure   bool
		clientCert bool
		token      string
		proxy      string
	}
	tests := []struct {
		name    string
		config  string
		want    want
		wantErr string
	}{
		{"token and a CA file beside the kubeconfig",
			kubeconfig(`    server: https://api.prod.example:6443
    certificate-authority: ca.crt`, `    token: abc`),
			want{host: "https://api.prod.example:6443", tls: true, roots: caPool, token: "abc"}, ""},
		{"data fields",
			kubeconfig(`    server: https://10.0.0.1:6443
    certificate-authority-data: `+b64(ca.certPEM), `    client-certificate-data: `+b64(client.certPEM)+`
    client-key-data: `+b64(client.keyPEM)),
			want{host: "https://10.0.0.1:6443", tls: true, roots: caPool, clientCert: true}, ""},
		{"relative certificate files and token file",
			kubeconfig(`    server: https://api.prod.example
    certificate-authority: ./ca.crt`, `    client-certificate: ../certs/client.crt
    client-key: ../certs/client.key
    tokenFile: token`),
			want{host: "https://api.prod.example", tls: true, roots: caPool, clientCert: true, token: "file-token"}, ""},
		{"absolute paths",
			kubeconfig(`    server: https://api.prod.example
    certificate-authority: `+filepath.Join(dir, "cfg", "ca.crt"), `    tokenFile: `+filepath.Join(dir, "cfg", "token")),
			want{host: "https://api.prod.example", tls: true, roots: caPool, token: "file-token"}, ""},
		{"insecure, with a server name and a proxy",
			kubeconfig(`    server: https://10.0.0.1:6443
    insecure-skip-tls-verify: true
    tls-server-name: kubernetes.default.svc
    proxy-url: http://proxy.example:3128`, `    token: abc`),
			want{host: "https://10.0.0.1:6443", tls: true, serverName: "kubernetes.default.svc", insecure: true, token: "abc",
				proxy: "http://proxy.example:3128"}, ""},
		{"host:port with a CA is https",
			kubeconfig(`    server: api.prod.example:6443
    certificate-authority: ca.crt`, `    token: abc`),
			want{host: "https://api.prod.example:6443", tls: true, roots: caPool, token: "abc"}, ""},
		{"host:port alone is http",
			kubeconfig(`    server: localhost:8080`, `    token: abc`),
			want{host: "http://localhost:8080", token: "abc"}, ""},
		{"https without a CA: the system's roots",
			kubeconfig(`    server: https://api.prod.example/`, `    token: abc`),
			want{host: "https://api.prod.example", tls: true, token: "abc"}, ""},

		{"exec plugin", kubeconfig(`    server: https://api.prod.example`, `    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: aws
      args: [eks, get-token, --cluster-name, prod]`), want{},
			`user "exporter" authenticates with an exec credential plugin, which the exporter does not run: use a token, tokenFile or client certificate`},
		{"auth provider", kubeconfig(`    server: https://api.prod.example`, `    auth-provider:
      name: oidc
      config: {idp-issuer-url: "https://issuer.example"}`), want{}, `user "exporter" authenticates with an auth-provider`},
		{"username and password", kubeconfig(`    server: https://api.prod.example`, `    username: admin
    password: secret`), want{}, `user "exporter" authenticates with a username and password`},
		{"impersonation", kubeconfig(`    server: https://api.prod.example`, `    token: abc
    as: system:admin`), want{}, `user "exporter" impersonates another`},
		{"CA and insecure", kubeconfig(`    server: https://api.prod.example
    certificate-authority: ca.crt
    insecure-skip-tls-verify: true`, `    token: abc`), want{}, "a certificate authority and insecure-skip-tls-verify are given together"},
		{"CA file and data", kubeconfig(`    server: https://api.prod.example
    certificate-authority: ca.crt
    certificate-authority-data: `+b64(ca.certPEM), `    token: abc`), want{}, "both certificate-authority and certificate-authority-data"},
		{"certificate without key", kubeconfig(`    server: https://api.prod.example`, `    client-certificate: ../certs/client.crt`), want{},
			"a client certificate needs both a certificate and its key"},
		{"key of another certificate", kubeconfig(`    server: https://api.prod.example`, `    client-certificate: ../certs/client.crt
    client-key-data: `+b64(newTestCert(t, "other", nil).keyPEM)), want{}, "client certificate: tls: private key does not match public key"},
		{"missing CA file", kubeconfig(`    server: https://api.prod.example
    certificate-authority: missing.crt`, `    token: abc`), want{}, "missing.crt: open " + filepath.Join(dir, "cfg", "missing.crt")},
		{"CA file that is no certificate", kubeconfig(`    server: https://api.prod.example
    certificate-authority: token`, `    token: abc`), want{}, "no PEM certificate in it"},
		{"missing token file", kubeconfig(`    server: https://api.prod.example`, `    tokenFile: missing`), want{}, "token file " + filepath.Join(dir, "cfg", "missing")},
		{"no server", kubeconfig(`    insecure-skip-tls-verify: true`, `    token: abc`), want{}, `cluster "prod": no server`},
		{"no current context", "apiVersion: v1\nkind: Config\nclusters: []\n", want{}, "no current-context"},
		{"unknown current context", "current-context: nope\ncontexts: []\n", want{}, `current-context "nope" is not among the contexts`},
		{"unknown user", `current-context: c
contexts: [{name: c, context: {cluster: k, user: u}}]
clusters: [{name: k, cluster: {server: "https://k"}}]`, want{}, `context "c": user "u" not found`},
		{"not YAML", "current-context: [", want{}, "yaml"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, "cfg", "kubeconfig")
			writeFile(t, path, []byte(tt.config))
			cfg, err := loadKubeconfig(path)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Host != tt.want.host {
				t.Errorf("host %q, want %q", cfg.Host, tt.want.host)
			}
			if (cfg.TLS != nil) != tt.want.tls {
				t.Fatalf("TLS %+v, want TLS %v", cfg.TLS, tt.want.tls)
			}
			if cfg.TLS != nil {
				if (cfg.TLS.RootCAs == nil) != (tt.want.roots == nil) || cfg.TLS.RootCAs != nil && !cfg.TLS.RootCAs.Equal(tt.want.roots) {
					t.Errorf("roots are not the CA's")
				}
				if cfg.TLS.ServerName != tt.want.serverName || cfg.TLS.InsecureSkipVerify != tt.want.insecure {
					t.Errorf("server name %q, insecure %v; want %q, %v", cfg.TLS.ServerName, cfg.TLS.InsecureSkipVerify, tt.want.serverName, tt.want.insecure)
				}
				if tt.want.clientCert != (len(cfg.TLS.Certificates) == 1) ||
					tt.want.clientCert && string(cfg.TLS.Certificates[0].Certificate[0]) != string(client.cert.Raw) {
					t.Errorf("client certificates %d, want the client's: %v", len(cfg.TLS.Certificates), tt.want.clientCert)
				}
			}
			var token string
			if cfg.Token != nil {
				token = cfg.Token.get()
			}
			if token != tt.want.token {
				t.Errorf("token %q, want %q", token, tt.want.token)
			}
			var proxy string
			if cfg.Proxy != nil {
				proxy = cfg.Proxy.String()
			}
			if proxy != tt.want.proxy {
				t.Errorf("proxy %q, want %q", proxy, tt.want.proxy)
			}
		})
	}
}

func TestLoadKubeconfigTooLarge(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	writeFile(t, path, []byte("# "+strings.Repeat("x", maxKubeconfigBytes)))
	if _, err := loadKubeconfig(path); err == nil || !strings.Contains(err.Error(), "larger than 4194304 bytes") {
		t.Errorf("error %v, want the size bound", err)
	}
}

// A kubeconfig's CA and client certificate are used: the exporter talks
// TLS to a server that asks for the certificate.
func TestKubeconfigTLS(t *testing.T) {
	clientCA := newTestCert(t, "client-ca", nil)
	client := newTestCert(t, "xpu-exporter", clientCA)
	clientCAs := x509.NewCertPool()
	clientCAs.AddCert(clientCA.cert)
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		for _, c := range r.TLS.PeerCertificates {
			seen = append(seen, c.Subject.CommonName)
		}
		mu.Unlock()
		w.Write([]byte(`{"kind":"Status","code":200}`))
	}))
	srv.TLS = &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clientCAs}
	srv.StartTLS()
	defer srv.Close()
	serverPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	b64 := base64.StdEncoding.EncodeToString
	path := filepath.Join(t.TempDir(), "kubeconfig")
	writeFile(t, path, []byte(`current-context: c
contexts: [{name: c, context: {cluster: k, user: u}}]
clusters: [{name: k, cluster: {server: "`+srv.URL+`", certificate-authority-data: `+b64(serverPEM)+`}}]
users: [{name: u, user: {client-certificate-data: `+b64(client.certPEM)+`, client-key-data: `+b64(client.keyPEM)+`}}]
`))
	cfg, err := loadKubeconfig(path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := newAPIClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	var st apiStatus
	if err := c.getJSON(context.Background(), "/version", nil, "application/json", 1<<10, &st); err != nil || st.Code != 200 {
		t.Fatalf("GET: %+v, %v", st, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) == 0 || seen[0] != "xpu-exporter" {
		t.Errorf("client certificates seen: %q", seen)
	}
}

func TestInClusterConfig(t *testing.T) {
	dir := t.TempDir()
	old := serviceAccountDir
	serviceAccountDir = dir
	t.Cleanup(func() { serviceAccountDir = old })
	ca := newTestCert(t, "cluster-ca", nil)
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)

	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	if cfg, err := inClusterConfig(); cfg != nil || err != nil {
		t.Errorf("outside a cluster: %+v, %v; want nil, nil", cfg, err)
	}
	if cfg, err := apiServerConfig(""); cfg != nil || err != nil {
		t.Errorf("no kubeconfig, outside a cluster: %+v, %v; want nil, nil", cfg, err)
	}

	t.Setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
	t.Setenv("KUBERNETES_SERVICE_PORT", "443")
	if _, err := inClusterConfig(); err == nil || !strings.Contains(err.Error(), "token file "+filepath.Join(dir, "token")) {
		t.Errorf("without a token: %v", err)
	}
	writeFile(t, filepath.Join(dir, "token"), []byte("sa-token"))
	// ca.crt is there "if available": else the system's roots.
	if cfg, err := inClusterConfig(); err != nil || cfg.TLS == nil || cfg.TLS.RootCAs != nil {
		t.Errorf("without ca.crt: %+v, %v; want TLS with the system's roots", cfg, err)
	}
	writeFile(t, filepath.Join(dir, "ca.crt"), []byte("not a certificate"))
	if _, err := inClusterConfig(); err == nil || !strings.Contains(err.Error(), "certificate authority "+filepath.Join(dir, "ca.crt")+": no PEM certificate in it") {
		t.Errorf("with a ca.crt that is no certificate: %v", err)
	}
	writeFile(t, filepath.Join(dir, "ca.crt"), ca.certPEM)
	for _, tt := range []struct{ host, want string }{
		{"10.96.0.1", "https://10.96.0.1:443"},
		{"fd00:10:96::1", "https://[fd00:10:96::1]:443"},
	} {
		t.Setenv("KUBERNETES_SERVICE_HOST", tt.host)
		cfg, err := apiServerConfig("")
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Host != tt.want || cfg.TLS == nil || !cfg.TLS.RootCAs.Equal(pool) || cfg.Token.get() != "sa-token" || cfg.Proxy != nil {
			t.Errorf("config %+v, want host %s, the CA and the token", cfg, tt.want)
		}
	}
}

// tokenClient is an API client whose token is read from a file holding
// token, on a clock the test moves (*now), against a server that records
// each request's Authorization and answers 401 where accept says no.
type tokenClient struct {
	c    *apiClient
	path string
	now  *time.Time
	mu   sync.Mutex
	auth []string
}

func newTokenClient(t *testing.T, token string, accept func(auth string) bool) *tokenClient {
	t.Helper()
	tc := &tokenClient{path: filepath.Join(t.TempDir(), "token")}
	writeFile(t, tc.path, []byte(token))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tc.mu.Lock()
		tc.auth = append(tc.auth, r.Header.Get("Authorization"))
		tc.mu.Unlock()
		if !accept(r.Header.Get("Authorization")) {
			http.Error(w, `{"kind":"Status","code":401,"reason":"Unauthorized","message":"Unauthorized"}`, http.StatusUnauthorized)
			return
		}
		w.Write([]byte(`{}`))
	}))
	t.Cleanup(srv.Close)
	now := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	tc.now = &now
	ts, err := newTokenSource("", tc.path)
	if err != nil {
		t.Fatal(err)
	}
	ts.now, ts.read = func() time.Time { return *tc.now }, now
	if tc.c, err = newAPIClient(&apiConfig{Host: srv.URL, Token: ts}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tc.c.close)
	return tc
}

func (tc *tokenClient) get() error {
	var v struct{}
	return tc.c.getJSON(context.Background(), "/api", url.Values{}, "application/json", 1<<10, &v)
}

func (tc *tokenClient) sent() string {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	return strings.Join(tc.auth, ",")
}

// The service account token file is read again once a minute: the second
// request after the kubelet rotated it carries the new token; one that
// cannot be read leaves the last one in use.
func TestTokenRotation(t *testing.T) {
	tc := newTokenClient(t, "first\n", func(string) bool { return true })
	get := func() {
		t.Helper()
		if err := tc.get(); err != nil {
			t.Fatal(err)
		}
	}
	get()
	writeFile(t, tc.path, []byte("second"))
	*tc.now = tc.now.Add(59 * time.Second)
	get() // within the minute: not read again
	*tc.now = tc.now.Add(time.Second)
	get()
	if err := os.Remove(tc.path); err != nil {
		t.Fatal(err)
	}
	*tc.now = tc.now.Add(2 * time.Minute)
	get()
	if want := "Bearer first,Bearer first,Bearer second,Bearer second"; tc.sent() != want {
		t.Errorf("Authorization %q, want %q", tc.sent(), want)
	}
}

// A 401 makes the next request read the token file again, within the
// minute: the token was rotated and the old one revoked, and every retry
// sent the old one for up to a minute (probe23-k8sapi D3).
func TestTokenReadAgainAfter401(t *testing.T) {
	tc := newTokenClient(t, "old", func(auth string) bool { return auth == "Bearer new" })
	writeFile(t, tc.path, []byte("new"))
	if err := tc.get(); !isUnauthorized(err) {
		t.Fatalf("first request: %v, want 401", err)
	}
	*tc.now = tc.now.Add(time.Second)
	if err := tc.get(); err != nil {
		t.Fatalf("the request after the 401: %v", err)
	}
	if want := "Bearer old,Bearer new"; tc.sent() != want {
		t.Errorf("Authorization %q, want %q", tc.sent(), want)
	}
}

func isUnauthorized(err error) bool {
	var e *apiError
	return errors.As(err, &e) && e.Code == http.StatusUnauthorized
}

// A kubeconfig's token is used first, and its tokenFile read after a
// minute, as client-go does with both.
func TestTokenAndTokenFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	writeFile(t, path, []byte("from-file"))
	ts, err := newTokenSource("inline", path)
	if err != nil {
		t.Fatal(err)
	}
	now := ts.read
	ts.now = func() time.Time { return now }
	if got := ts.get(); got != "inline" {
		t.Errorf("token %q, want inline", got)
	}
	now = now.Add(time.Minute)
	if got := ts.get(); got != "from-file" {
		t.Errorf("token %q a minute on, want from-file", got)
	}
}

// An answer that is not a success is an error with the Status's message,
// bounded, and 410 Gone is told apart.
func TestAPIError(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A server URL's path prefixes every request's.
		switch r.URL.Path {
		case "/prefix/gone":
			w.WriteHeader(http.StatusGone)
			w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","message":"too old resource version: 5 (9)","reason":"Expired","code":410}`))
		case "/prefix/proxy":
			w.WriteHeader(http.StatusBadGateway)
			w.Write([]byte(strings.Repeat("\xff", 2000)))
		case "/prefix/big":
			w.Write([]byte(`{"items":"` + strings.Repeat("x", 100) + `"}`))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	c, err := newAPIClient(&apiConfig{Host: srv.URL + "/prefix/"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	var v map[string]any
	err = c.getJSON(context.Background(), "/gone", nil, "application/json", 1<<10, &v)
	if !isGone(err) || err.Error() != "GET /gone: 410 Gone: too old resource version: 5 (9)" {
		t.Errorf("error %v, want 410 Gone with the Status's message", err)
	}
	err = c.getJSON(context.Background(), "/proxy", nil, "application/json", 1<<10, &v)
	if err == nil || isGone(err) || !strings.HasPrefix(err.Error(), "GET /proxy: 502 Bad Gateway: \ufffd") || len(err.Error()) > 2000 {
		t.Errorf("error %q, want a 502 with a bounded, valid message", err)
	}
	err = c.getJSON(context.Background(), "/big", nil, "application/json", 50, &v)
	if err == nil || err.Error() != "GET /big: answer larger than 50 bytes" {
		t.Errorf("error %v, want the size bound", err)
	}
}
