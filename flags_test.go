package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// Each bad serving flag is named at start, all of them at once; the
// defaults pass.
func TestCheckServeFlags(t *testing.T) {
	for _, c := range []struct {
		name                        string
		path                        string
		maxRequests                 int
		timeout, maxTimeout, offset time.Duration
		want                        []string
	}{
		{"defaults", "/metrics", 40, 10 * time.Second, 2 * time.Minute, 500 * time.Millisecond, nil},
		{"zero timeout", "/metrics", 40, 0, 2 * time.Minute, 0, []string{"--scrape.timeout"}},
		{"negative offset", "/metrics", 40, 10 * time.Second, 2 * time.Minute, -2 * time.Second, []string{"--scrape.timeout-offset"}},
		{"offset eats the timeout", "/metrics", 40, time.Second, 2 * time.Minute, time.Second, []string{"--scrape.timeout-offset"}},
		{"max below timeout", "/metrics", 40, 30 * time.Second, 5 * time.Second, 0, []string{"--scrape.max-timeout"}},
		{"path without slash", "metrics", 40, 10 * time.Second, 2 * time.Minute, 0, []string{"--web.telemetry-path"}},
		{"path clashing with /devices", "/devices", 40, 10 * time.Second, 2 * time.Minute, 0, []string{"--web.telemetry-path"}},
		// http.ServeMux pattern syntax, which panicked at start; a query
		// and an unclean path, which no request reaches (probe6-ops D1).
		{"path with a wildcard", "/m{", 40, 10 * time.Second, 2 * time.Minute, 0, []string{"--web.telemetry-path"}},
		{"path with a space", "/a b", 40, 10 * time.Second, 2 * time.Minute, 0, []string{"--web.telemetry-path"}},
		{"path with a query", "/metrics?x", 40, 10 * time.Second, 2 * time.Minute, 0, []string{"--web.telemetry-path"}},
		{"unclean path", "/a/../metrics", 40, 10 * time.Second, 2 * time.Minute, 0, []string{"--web.telemetry-path"}},
		{"root", "/", 40, 10 * time.Second, 2 * time.Minute, 0, nil},
		{"subtree", "/gpu/metrics/", 40, 10 * time.Second, 2 * time.Minute, 0, nil},
		{"negative request limit and zero timeout", "/metrics", -1, 0, 0, 0, []string{"--web.max-requests", "--scrape.timeout"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := checkServeFlags(c.path, c.maxRequests, c.timeout, c.maxTimeout, c.offset)
			if len(got) != len(c.want) {
				t.Fatalf("problems %v, want ones naming %v", got, c.want)
			}
			for i, w := range c.want {
				if !strings.Contains(got[i].Error(), w) {
					t.Errorf("problem %d: %v, want it to name %s", i, got[i], w)
				}
			}
		})
	}
}

// The landing page links Go's profiles only when they are served.
func TestLandingPageLinksPprofOnlyWhenServed(t *testing.T) {
	for _, on := range []bool{false, true} {
		h, err := landingPage("/metrics", false, on)
		if err != nil {
			t.Fatal(err)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
		if got := strings.Contains(rec.Body.String(), "debug/pprof"); got != on {
			t.Errorf("pprof on %v: page links it %v", on, got)
		}
	}
}
