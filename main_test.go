package main

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// net/http's error lines reach the exporter's logger: a failed TLS
// handshake (a client's doing) at debug level, the server's own failures
// as errors.
func TestHTTPErrorLogLevels(t *testing.T) {
	for _, tc := range []struct {
		line, want string
	}{
		{"http: TLS handshake error from 10.0.0.9:4711: client sent an HTTP request to an HTTPS server\n", "level=DEBUG"},
		{"http: TLS handshake error from 10.0.0.9:4711: EOF\n", "level=DEBUG"},
		{"http: panic serving 10.0.0.9:4711: boom\ngoroutine 7 [running]:\n", "level=ERROR"},
		{"http: Accept error: accept tcp [::]:9835: accept4: too many open files; retrying in 5ms\n", "level=ERROR"},
	} {
		var buf bytes.Buffer
		newServer(nil, 0, slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), "").ErrorLog.Print(tc.line)
		if got := buf.String(); !strings.Contains(got, tc.want) || !strings.Contains(got, strings.TrimSpace(strings.SplitN(tc.line, "\n", 2)[0])) {
			t.Errorf("%q logged as %q, want %s", tc.line, got, tc.want)
		}
	}
}

// TestBrokenWebConfigLoggedOnce: the web configuration file breaks while
// the exporter runs (it is read at every handshake), so every handshake
// fails: the first failure logs the file's error once, as an error, the
// next ones within a second do not check it again, nor do later ones
// while the error is the same; fixed, the file is logged usable once
// (probe H, PH3: debug lines only).
func TestBrokenWebConfigLoggedOnce(t *testing.T) {
	var buf bytes.Buffer
	fileErr := errors.New("open /etc/xpu/cert.pem: no such file or directory")
	checks := 0
	w := &httpErrors{logger: slog.New(slog.NewTextHandler(&buf, nil)), webConfig: "/etc/xpu/web.yml",
		validate: func(string) error { checks++; return fileErr }}
	const line = "http: TLS handshake error from 10.0.0.9:4711: tls: no certificates configured\n"
	for range 3 {
		w.Write([]byte(line))
	}
	w.checked = w.checked.Add(-2 * time.Second)
	w.Write([]byte(line))
	if checks != 2 {
		t.Errorf("the file checked %d times, want 2 (once a second)", checks)
	}
	fileErr = nil
	w.checked = w.checked.Add(-2 * time.Second)
	w.Write([]byte(line))
	got := buf.String()
	if n := strings.Count(got, `level=ERROR msg="the web configuration file cannot be used`); n != 1 || !strings.Contains(got, "no such file or directory") {
		t.Errorf("%d error lines naming the file's error, want 1:\n%s", n, got)
	}
	if n := strings.Count(got, "usable again"); n != 1 {
		t.Errorf("%d usable-again lines, want 1:\n%s", n, got)
	}
	if strings.Contains(got, "TLS handshake error") {
		t.Errorf("a handshake line logged at the default level:\n%s", got)
	}
}
