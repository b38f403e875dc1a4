package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
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
		newServer(nil, 0, slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))).ErrorLog.Print(tc.line)
		if got := buf.String(); !strings.Contains(got, tc.want) || !strings.Contains(got, strings.TrimSpace(strings.SplitN(tc.line, "\n", 2)[0])) {
			t.Errorf("%q logged as %q, want %s", tc.line, got, tc.want)
		}
	}
}
