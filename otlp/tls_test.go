package otlp

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"net"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	colmetricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// testPKI is a CA with a server certificate for 127.0.0.1 and a client
// certificate, all written as PEM files.
type testPKI struct {
	caFile, certFile, keyFile string
	server                    tls.Certificate
	clientCAs                 *x509.CertPool
}

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	dir := t.TempDir()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	issue := func(serial int64, usage x509.ExtKeyUsage) (certPEM, keyPEM []byte) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "test"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, _ := x509.MarshalECPrivateKey(key)
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	}
	p := testPKI{caFile: filepath.Join(dir, "ca.pem"), certFile: filepath.Join(dir, "client.pem"), keyFile: filepath.Join(dir, "client-key.pem")}
	write := func(path string, b []byte) {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(p.caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}))
	clientCert, clientKey := issue(2, x509.ExtKeyUsageClientAuth)
	write(p.certFile, clientCert)
	write(p.keyFile, clientKey)
	serverCert, serverKey := issue(3, x509.ExtKeyUsageServerAuth)
	if p.server, err = tls.X509KeyPair(serverCert, serverKey); err != nil {
		t.Fatal(err)
	}
	p.clientCAs = x509.NewCertPool()
	p.clientCAs.AddCert(ca)
	return p
}

func (p testPKI) serverTLS() *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{p.server}, ClientCAs: p.clientCAs, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}
}

// Mutual TLS over both protocols: the receiver's certificate is checked
// against --otlp.tls.ca-file, and it accepts only our client certificate.
func TestOTLPMutualTLS(t *testing.T) {
	pki := newTestPKI(t)
	for _, protocol := range []string{ProtocolHTTPProtobuf, ProtocolGRPC} {
		t.Run(protocol, func(t *testing.T) {
			var r *receiver
			if protocol == ProtocolGRPC {
				r = &receiver{pushes: make(chan push, 64)}
				lis, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(pki.serverTLS())))
				colmetricpb.RegisterMetricsServiceServer(srv, grpcReceiver{r: r})
				go srv.Serve(lis)
				t.Cleanup(srv.Stop)
				r.url = &url.URL{Scheme: "https", Host: lis.Addr().String()}
			} else {
				r = &receiver{pushes: make(chan push, 64)}
				srv := httptest.NewUnstartedServer(r.httpHandler())
				srv.TLS = pki.serverTLS()
				srv.StartTLS()
				t.Cleanup(srv.Close)
				r.url, _ = url.Parse(srv.URL)
			}
			startPusher(t, r, protocol, Flags{CAFile: pki.caFile, CertFile: pki.certFile, KeyFile: pki.keyFile},
				testRegistry(), prometheus.NewRegistry(), nil)
			if p := nextPush(t, r); len(metrics(p)) == 0 {
				t.Error("empty push")
			}
		})
	}
}

func TestOTLPTLSFilesRefused(t *testing.T) {
	pki := newTestPKI(t)
	notPEM := filepath.Join(t.TempDir(), "not.pem")
	os.WriteFile(notPEM, []byte("hello"), 0o600)
	for _, c := range []struct {
		name string
		f    Flags
		want string
	}{
		{"missing CA file", Flags{CAFile: "/nonexistent/ca.pem"}, "CA file"},
		{"CA file without certificates", Flags{CAFile: notPEM}, "no PEM certificate"},
		{"key that is not the certificate's", Flags{CertFile: pki.certFile, KeyFile: notPEM}, "client certificate"},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.f.Endpoint, c.f.Interval = "https://127.0.0.1:1", time.Second
			cfg, err := Resolve(c.f, func(string) string { return "" })
			if err != nil {
				t.Fatal(err)
			}
			_, err = Start(cfg, gatherFrom(prometheus.NewRegistry()), prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("want an error mentioning %q, got %v", c.want, err)
			}
		})
	}
}

// The SDK reads OTEL_EXPORTER_OTLP_CERTIFICATE itself and refuses a TLS
// configuration for a plain-text endpoint; Resolve ignores the variable
// there, and so must the exporter.
func TestOTLPPlainTextIgnoresCertificateVariable(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", newTestPKI(t).caFile)
	r := newHTTPReceiver(t)
	startPusher(t, r, ProtocolHTTPProtobuf, Flags{}, testRegistry(), prometheus.NewRegistry(), nil)
	nextPush(t, r)
}
