package e2e

import (
	"bytes"
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"
)

var loadDuration = flag.Duration("load.duration", 10*time.Second, "how long TestLoad's 10-scraper phase runs (make load: 30s); the 1- and 2-scraper phases run half as long")

// loadResult is what a phase of scrapers saw.
type loadResult struct {
	scrapers  int
	elapsed   time.Duration
	latencies []time.Duration
	errors    []string
	// down counts xpu_device_up 0 series over all responses: the demo's
	// GPUs are all healthy, so any is a flap.
	down  int
	reads float64 // device reads the simulator counted during the phase
	cpu   float64 // the exporter's CPU seconds during the phase
}

func (r *loadResult) quantile(q float64) time.Duration {
	if len(r.latencies) == 0 {
		return 0
	}
	return quantile(r.latencies, q)
}

// quantile is the q-quantile of vs by nearest rank: the smallest value with
// at least q of all values at or below it (1 is the largest). vs is not
// modified and must not be empty.
func quantile[T cmp.Ordered](vs []T, q float64) T {
	s := slices.Clone(vs)
	slices.Sort(s)
	// The tolerance keeps a rank such as 0.99 × 100 from rounding up to
	// 100 in floating point.
	rank := int(math.Ceil(q*float64(len(s)) - 1e-9))
	return s[min(max(rank, 1), len(s))-1]
}

func (r *loadResult) String() string {
	secs := r.elapsed.Seconds()
	n := float64(max(1, len(r.latencies)))
	return fmt.Sprintf("%2d scrapers: %6d requests (%6.1f/s), p50 %v, p99 %v, %d errors, %d GPUs reported down, %.0f device reads (%.1f/s, %.3f per request), exporter CPU %.2f ms per request",
		r.scrapers, len(r.latencies), float64(len(r.latencies))/secs, r.quantile(0.5).Round(10*time.Microsecond), r.quantile(0.99).Round(10*time.Microsecond),
		len(r.errors), r.down, r.reads, r.reads/secs, r.reads/n, r.cpu*1000/n)
}

// probe reads the simulator's count of device reads and the exporter's CPU
// time (client_golang's process_cpu_seconds_total, from /proc/self/stat)
// from a scrape of its own, which adds one read per GPU.
func probe(t *testing.T, addr string) (reads, cpu float64) {
	t.Helper()
	_, body := get(t, http.DefaultClient, "http://"+addr+"/metrics")
	return value(t, body, "xpu_demo_device_reads_total"), value(t, body, "process_cpu_seconds_total")
}

// scrapeLoad runs n scrapers for d, each on its own keep-alive connection,
// asking as Prometheus does (scrape timeout header, gzip).
func scrapeLoad(t *testing.T, addr string, n int, d time.Duration) *loadResult {
	t.Helper()
	res := &loadResult{scrapers: n}
	readsBefore, cpuBefore := probe(t, addr)
	var mu sync.Mutex
	var wg sync.WaitGroup
	began := time.Now()
	stop := began.Add(d)
	for range n {
		wg.Go(func() {
			client := &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
			defer client.CloseIdleConnections()
			for time.Now().Before(stop) {
				req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/metrics", nil)
				req.Header.Set("X-Prometheus-Scrape-Timeout-Seconds", "10")
				t0 := time.Now()
				resp, err := client.Do(req)
				var body []byte
				if err == nil {
					body, err = io.ReadAll(resp.Body)
					resp.Body.Close()
					if err == nil && resp.StatusCode != http.StatusOK {
						err = fmt.Errorf("status %d", resp.StatusCode)
					}
				}
				lat := time.Since(t0)
				var down int
				if err == nil {
					down, err = devicesDown(body)
				}
				mu.Lock()
				res.latencies = append(res.latencies, lat)
				res.down += down
				if err != nil {
					res.errors = append(res.errors, err.Error())
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	res.elapsed = time.Since(began)
	reads, cpu := probe(t, addr)
	res.reads, res.cpu = reads-readsBefore, cpu-cpuBefore
	return res
}

// devicesDown counts the xpu_device_up series at 0 in a response, without
// splitting it into lines: the scrapers share the exporter's two cores, and
// the less of them they take, the more the latencies are the exporter's.
func devicesDown(body []byte) (int, error) {
	series := []byte("\nxpu_device_up{")
	if !bytes.Contains(body, series) {
		return 0, errors.New("no xpu_device_up in the response")
	}
	down := 0
	for rest := body; ; {
		i := bytes.Index(rest, series)
		if i < 0 {
			return down, nil
		}
		rest = rest[i+1:]
		line, _, _ := bytes.Cut(rest, []byte("\n"))
		if bytes.HasSuffix(line, []byte(" 0")) {
			down++
		}
	}
}

// TestLoad scrapes the demo binary as 1, 2 (an HA pair) and 10 Prometheus
// servers would: no errors, no healthy GPU ever reported down, and the
// hardware read about as often whatever the number of scrapers, because
// concurrent scrapes share one read. Latencies are reported, not asserted
// (a shared machine; issue 12 sets p99 ≤ 25 ms as the target).
func TestLoad(t *testing.T) {
	e := start(t, "--demo")
	probe(t, e.addr) // the GPUs are known and the windows started from here on
	half := max(*loadDuration/2, 2*time.Second)
	phases := []*loadResult{
		scrapeLoad(t, e.addr, 1, half),
		scrapeLoad(t, e.addr, 2, half),
		scrapeLoad(t, e.addr, 10, *loadDuration),
	}
	for _, r := range phases {
		t.Log(r)
		if len(r.errors) > 0 {
			t.Errorf("%d scrapers: %d of %d requests failed, e.g. %s", r.scrapers, len(r.errors), len(r.latencies), r.errors[0])
		}
		if r.down > 0 {
			t.Errorf("%d scrapers: %d healthy GPUs reported xpu_device_up 0", r.scrapers, r.down)
		}
	}
	one, ten := phases[0], phases[2]
	perSec := func(r *loadResult) float64 { return r.reads / r.elapsed.Seconds() }
	// A lone scraper reads the hardware once per request; ten share the
	// reads in flight, so the rate of reads stays that of back-to-back
	// reads. Had each scrape read the hardware, ten scrapers on this
	// machine would read several times as often as one. Twice one
	// scraper's rate is the margin for a noisy machine.
	if perSec(ten) > 2*perSec(one) {
		t.Errorf("device reads grew with the scrapers: %.1f/s with one, %.1f/s with ten", perSec(one), perSec(ten))
	}
}

func TestQuantile(t *testing.T) {
	var ms []time.Duration
	for i := 100; i >= 1; i-- { // 100 ms … 1 ms, unsorted
		ms = append(ms, time.Duration(i)*time.Millisecond)
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{
		// Nearest rank: ⌈q·100⌉-th smallest of 1 … 100 ms.
		{0.5, 50 * time.Millisecond},  // ⌈50⌉ = 50th
		{0.99, 99 * time.Millisecond}, // ⌈99⌉ = 99th, not the maximum
		{1, 100 * time.Millisecond},
		{0.001, time.Millisecond}, // ⌈0.1⌉ = 1st
		{0, time.Millisecond},
	} {
		if got := quantile(ms, c.q); got != c.want {
			t.Errorf("quantile(%v) = %v, want %v", c.q, got, c.want)
		}
	}
	// Four values: the median is the 2nd (⌈0.5·4⌉), the maximum the 4th.
	if got := quantile([]float64{4, 1, 3, 2}, 0.5); got != 2 {
		t.Errorf("median of 1…4 = %v, want 2", got)
	}
	if got := quantile([]float64{4, 1, 3, 2}, 1); got != 4 {
		t.Errorf("max of 1…4 = %v, want 4", got)
	}
	if ms[0] != 100*time.Millisecond {
		t.Error("quantile sorted its argument")
	}
}

func TestParseSmapsRollup(t *testing.T) {
	// A smaps_rollup as Linux 6.1 prints it (abridged).
	in := "55d0c0000000-7ffc5e3fe000 ---p 00000000 00:00 0                          [rollup]\n" +
		"Rss:               44876 kB\nPss:               44012 kB\nAnonymous:         13412 kB\nFilePmdMapped:         0 kB\n"
	m, err := parseSmapsRollup([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	// 44876 kB × 1024 = 45,953,024 B; 13412 kB × 1024 = 13,733,888 B.
	if m["Rss"] != 45953024 || m["Anonymous"] != 13733888 || m["FilePmdMapped"] != 0 || len(m) != 4 {
		t.Errorf("parsed %v", m)
	}
	if _, err := parseSmapsRollup([]byte("Rss: x kB\n")); err == nil {
		t.Error("a bad value was accepted")
	}
}

func TestDevicesDown(t *testing.T) {
	body := "# TYPE xpu_device_up gauge\nxpu_device_up{gpu=\"0\"} 1\nxpu_device_up{gpu=\"1\"} 0\nxpu_device_up{gpu=\"2\"} 10\nxpu_device_up{gpu=\"3\"} 0\nxpu_device_upx{gpu=\"4\"} 0\n"
	if down, err := devicesDown([]byte(body)); err != nil || down != 2 {
		t.Errorf("devicesDown = %d, %v; want 2 (GPUs 1 and 3)", down, err)
	}
	if _, err := devicesDown([]byte("# nothing\n")); err == nil {
		t.Error("a response without xpu_device_up is not an error")
	}
}
