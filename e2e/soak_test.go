package e2e

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

var (
	soakScrapes  = flag.Int("soak.scrapes", 0, "sequential scrapes of TestSoak (make soak: 100000); 0 skips it")
	soakDevices  = flag.Int("soak.devices-requests", 10000, "/devices requests of TestSoak after its scrapes")
	soakGrowth   = flag.Int("soak.rss-growth-mib", 16, "most RSS may grow after TestSoak's warm-up (the first tenth of its scrapes), MiB")
	soakResults  = flag.String("soak.results", "", "write TestSoak's memory curve to this Markdown file (make soak: bench/soak.md)")
	sampleEvery  = 1000
	rssLine      = regexp.MustCompile(`(?m)^VmRSS:\s+(\d+) kB$`)
	churnEvery   = "5ms"
	heapInUse    = "go_memstats_heap_inuse_bytes"
	goroutineKey = "go_goroutines"
)

// churnScenario is the default demo node with its pods and processes (so
// its engine targets) replaced every 5 ms: a scrape takes longer than that,
// so nearly every scrape sees new pod names, PIDs and engine targets.
func churnScenario(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "demo", "default.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "churn.yaml")
	if err := os.WriteFile(path, append(b, "\nchurn_every: "+churnEvery+"\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// rssBytes is the resident set of the process, from /proc/<pid>/status
// (proc(5): "VmRSS: Resident set size", in kB).
func rssBytes(t *testing.T, pid int) float64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	m := rssLine.FindSubmatch(b)
	if m == nil {
		t.Fatalf("no VmRSS in /proc/%d/status", pid)
	}
	kb, _ := strconv.ParseFloat(string(m[1]), 64)
	return kb * 1024
}

type memSample struct {
	what       string
	n          int
	rss, heap  float64
	goroutines float64
}

// soaker scrapes one exporter sequentially on a keep-alive connection.
type soaker struct {
	t      *testing.T
	e      *exporter
	client *http.Client
	last   string
}

func (s *soaker) fetch(path string) string {
	resp, err := s.client.Get("http://" + s.e.addr + path)
	if err != nil {
		s.t.Fatalf("GET %s: %v", path, err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		s.t.Fatalf("GET %s: %d %v", path, resp.StatusCode, err)
	}
	return string(body)
}

func (s *soaker) sample(what string, n int) memSample {
	body := s.fetch("/metrics")
	s.last = body
	return memSample{what: what, n: n, rss: rssBytes(s.t, s.e.cmd.Process.Pid),
		heap: value(s.t, body, heapInUse), goroutines: value(s.t, body, goroutineKey)}
}

// run makes n requests to path and samples memory every sampleEvery.
func (s *soaker) run(path string, n int, every int) []memSample {
	var out []memSample
	for i := 1; i <= n; i++ {
		if i%every == 0 {
			out = append(out, s.sample(path, i))
			continue
		}
		s.fetch(path)
	}
	return out
}

func startSoak(t *testing.T) *soaker {
	e := start(t, "--demo", "--demo.scenario="+churnScenario(t))
	return &soaker{t: t, e: e, client: &http.Client{Timeout: 30 * time.Second}}
}

// The demo exporter's memory stays flat while its pods, processes and
// engine targets churn (go-nvml's mocks once grew it by tens of kB a
// scrape: 1,500 scrapes would have added about 100 MB), and the churn is
// seen: the pods in the last scrape are not the scenario's own.
func TestMemoryFlatInDemoMode(t *testing.T) {
	s := startSoak(t)
	samples := s.run("/metrics", 2000, 500)
	for _, m := range samples {
		t.Logf("scrape %5d: RSS %.1f MiB, heap in use %.1f MiB, %v goroutines", m.n, m.rss/(1<<20), m.heap/(1<<20), m.goroutines)
	}
	at500, at2000 := samples[0], samples[len(samples)-1]
	if grew := at2000.rss - at500.rss; grew > 12<<20 {
		t.Errorf("RSS grew by %.1f MiB from scrape 500 to 2,000 (%.1f → %.1f MiB)", grew/(1<<20), at500.rss/(1<<20), at2000.rss/(1<<20))
	}
	if strings.Contains(s.last, `pod="llm-serve-7d9f8b6c5d-x2k4q"`) || !strings.Contains(s.last, `pod="llm-serve-7d9f8b6c5d-x2k4q-g`) {
		t.Errorf("the pods did not churn: the last scrape names the scenario's own pod or none of its successors")
	}
}

// TestSoak is make soak: a long run of scrapes with churn, then /devices
// requests, RSS and heap sampled every 1,000 requests, written to
// bench/soak.md. RSS may grow at most -soak.rss-growth-mib after warm-up.
func TestSoak(t *testing.T) {
	if *soakScrapes == 0 {
		t.Skip("run by make soak (-soak.scrapes=N)")
	}
	s := startSoak(t)
	began := time.Now()
	start := s.sample("start", 0)
	scrapes := s.run("/metrics", *soakScrapes, sampleEvery)
	scrapeTime := time.Since(began)
	devices := s.run("/devices", *soakDevices, sampleEvery)
	for _, m := range append(scrapes, devices...) {
		t.Logf("%s %6d: RSS %.1f MiB, heap %.1f MiB, %v goroutines", m.what, m.n, m.rss/(1<<20), m.heap/(1<<20), m.goroutines)
	}
	warm := max(1, len(scrapes)/10) - 1 // the sample ending the first tenth
	base := scrapes[warm]
	peak := base
	for _, m := range append(scrapes[warm:], devices...) {
		if m.rss > peak.rss {
			peak = m
		}
	}
	bound := float64(*soakGrowth << 20)
	growth := peak.rss - base.rss
	verdict := fmt.Sprintf("RSS after warm-up (%s %d: %.1f MiB) peaked at %.1f MiB (%s %d): +%.1f MiB, bound +%d MiB",
		base.what, base.n, base.rss/(1<<20), peak.rss/(1<<20), peak.what, peak.n, growth/(1<<20), *soakGrowth)
	t.Log(verdict)
	if growth > bound {
		t.Errorf("memory is not flat: %s", verdict)
	}
	if *soakResults != "" {
		var md bytes.Buffer
		fmt.Fprintf(&md, "# Soak\n\nWritten by `make soak` (e2e/soak_test.go, TestSoak); do not edit.\n\n")
		fmt.Fprintf(&md, "- date: %s\n- machine: %d CPUs, %s\n- run: the demo binary with `demo/default.yaml` plus `churn_every: %s` (new pod names, PIDs and engine targets every 5 ms), %d sequential scrapes of /metrics on one keep-alive connection (%.1f s, %.2f ms each), then %d /devices requests\n\n",
			time.Now().UTC().Format(time.RFC3339), runtime.NumCPU(), runtime.Version(), churnEvery, *soakScrapes, scrapeTime.Seconds(), scrapeTime.Seconds()*1000/float64(*soakScrapes), *soakDevices)
		fmt.Fprintf(&md, "**%s — %s.**\n\n", map[bool]string{true: "Flat", false: "NOT flat"}[growth <= bound], verdict)
		fmt.Fprintf(&md, "| requests | after | RSS MiB | Go heap in use MiB | goroutines |\n|---|---:|---:|---:|---:|\n")
		for _, m := range append(append([]memSample{start}, scrapes...), devices...) {
			fmt.Fprintf(&md, "| %s | %d | %.1f | %.1f | %.0f |\n", m.what, m.n, m.rss/(1<<20), m.heap/(1<<20), m.goroutines)
		}
		if err := os.WriteFile(*soakResults, md.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
