package e2e

import (
	"bytes"
	"debug/elf"
	"flag"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

var (
	rssScrapes = flag.Int("rss.scrapes", 0, "keep-alive scrapes of TestRSS (make rss: 1000); 0 skips it")
	rssIdle    = flag.Duration("rss.idle", 10*time.Second, "how long TestRSS leaves the exporter idle before its first scrape and after its last")
	rssEnv     = flag.String("rss.env", "", "environment given to TestRSS's exporter on top of the test's own, KEY=VALUE,… (e.g. GOGC=50)")
	rssResults = flag.String("rss.results", "", "write TestRSS's table to this Markdown file (make rss: bench/rss.md)")
	rssEvery   = 50
)

// smapsRollup reads the resident set of pid from /proc/<pid>/smaps_rollup,
// "the same fields as smaps, pre-summed across all mappings" (the kernel's
// Documentation/filesystems/proc.rst, section 1.1), in bytes: Rss, of which
// Anonymous; FilePmdMapped is file pages mapped whole 2 MiB at a time.
func smapsRollup(t *testing.T, pid int) map[string]float64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		t.Fatal(err)
	}
	m, err := parseSmapsRollup(b)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// parseSmapsRollup reads the "Name: value kB" lines of smaps_rollup into
// bytes by name; the first line, the address range, is not one.
func parseSmapsRollup(b []byte) (map[string]float64, error) {
	out := map[string]float64{}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 || f[2] != "kB" {
			continue
		}
		kb, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			return nil, fmt.Errorf("bad smaps_rollup line %q", line)
		}
		out[strings.TrimSuffix(f[0], ":")] = kb * 1024
	}
	return out, nil
}

// rssPoint is one reading: smaps_rollup taken just before a scrape, Go's
// own figures from that scrape.
type rssPoint struct {
	what                string
	scrapes             int
	rss, anon, pmd      float64
	goHeap, heapInuse   float64 // goHeap: in use + idle not yet released
	outside, stack      float64 // outside: anonymous memory not in goHeap
	nextGC, sys         float64
	cpu, allocated, gcs float64
	goroutines, threads float64
}

type rssRun struct {
	t      *testing.T
	e      *exporter
	client *http.Client
}

// scrape fetches /metrics as Prometheus does: on one keep-alive connection,
// gzip-encoded (the Transport asks for gzip itself and decodes it).
func (r *rssRun) scrape() string {
	resp, err := r.client.Get("http://" + r.e.addr + "/metrics")
	if err != nil {
		r.t.Fatalf("scrape: %v", err)
	}
	var body bytes.Buffer
	_, err = body.ReadFrom(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		r.t.Fatalf("scrape: %d %v", resp.StatusCode, err)
	}
	if !resp.Uncompressed {
		r.t.Fatalf("scrape not gzip-encoded: Content-Encoding %q", resp.Header.Get("Content-Encoding"))
	}
	return body.String()
}

func (r *rssRun) point(what string, scrapes int) rssPoint {
	m := smapsRollup(r.t, r.e.cmd.Process.Pid)
	body := r.scrape()
	v := func(name string) float64 { return value(r.t, body, name) }
	heap := v("go_memstats_heap_inuse_bytes") + v("go_memstats_heap_idle_bytes") - v("go_memstats_heap_released_bytes")
	return rssPoint{
		what: what, scrapes: scrapes, rss: m["Rss"], anon: m["Anonymous"], pmd: m["FilePmdMapped"],
		goHeap: heap, heapInuse: v("go_memstats_heap_inuse_bytes"), outside: m["Anonymous"] - heap,
		stack:  v("go_memstats_stack_sys_bytes"),
		nextGC: v("go_memstats_next_gc_bytes"), sys: v("go_memstats_sys_bytes"),
		cpu: v("process_cpu_seconds_total"), allocated: v("go_memstats_alloc_bytes_total"),
		gcs: v("go_gc_duration_seconds_count"), goroutines: v("go_goroutines"), threads: v("go_threads"),
	}
}

// loadedSize is the size of the binary's read-only loadable segments (code,
// read-only data, pclntab): the most its file-backed resident set can be.
func loadedSize(t *testing.T, path string) (file, readOnly int64) {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_W == 0 {
			readOnly += int64(p.Filesz)
		}
	}
	return st.Size(), readOnly
}

// TestRSS is make rss: the demo binary (default 8-GPU scenario) idle,
// then scraped -rss.scrapes times on one keep-alive connection, then idle
// again: resident memory split into anonymous and file-backed pages, Go's
// heap, and CPU and allocation per scrape. A measurement, not a check: it
// fails only when the exporter does.
func TestRSS(t *testing.T) {
	if *rssScrapes == 0 {
		t.Skip("run by make rss (-rss.scrapes=N)")
	}
	for _, kv := range strings.Split(*rssEnv, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			t.Setenv(k, v)
		}
	}
	r := &rssRun{t: t, e: start(t, "--demo"), client: &http.Client{Timeout: 30 * time.Second}}
	time.Sleep(*rssIdle)
	first := r.point("idle, before scraping", 0)
	// The heap's share of RSS swings with the GC cycle a reading falls in,
	// so the scraping phase is read every rssEvery scrapes and summarised.
	var during []rssPoint
	began := time.Now()
	for i := 1; i <= *rssScrapes; i++ {
		if i%rssEvery == 0 || i == *rssScrapes {
			during = append(during, r.point("scraping", i))
			continue
		}
		r.scrape()
	}
	wall := time.Since(began)
	last := during[len(during)-1]
	last.what = "after the last scrape"
	time.Sleep(*rssIdle)
	points := []rssPoint{first, summarise("scraping, median", during, 0.5), summarise("scraping, max", during, 1), last,
		r.point(fmt.Sprintf("idle %s after", *rssIdle), *rssScrapes)}

	n := float64(last.scrapes)
	cpu := (last.cpu - first.cpu) / n
	alloc := (last.allocated - first.allocated) / n
	gcs := (last.gcs - first.gcs) / n
	size, readOnly := loadedSize(t, binary)
	mib := func(b float64) string { return fmt.Sprintf("%.1f", b/(1<<20)) }

	var md bytes.Buffer
	fmt.Fprintf(&md, "# Resident memory of the demo exporter\n\nWritten by `make rss` (e2e/rss_test.go, TestRSS); do not edit.\n\n")
	fmt.Fprintf(&md, "- date: %s\n- machine: %d CPUs, %s, kernel %s\n", time.Now().UTC().Format(time.RFC3339), runtime.NumCPU(), runtime.Version(), kernelRelease())
	fmt.Fprintf(&md, "- binary: %s MiB on disk, %s MiB of read-only loadable segments (code, rodata, pclntab)\n", mib(float64(size)), mib(float64(readOnly)))
	fmt.Fprintf(&md, "- run: `--demo` (default scenario), idle %s, %d sequential gzip scrapes of /metrics on one keep-alive connection (%.2f ms each, read every %d), idle %s\n", *rssIdle, *rssScrapes, wall.Seconds()*1000/n, rssEvery, *rssIdle)
	if *rssEnv != "" {
		fmt.Fprintf(&md, "- exporter environment: `%s`\n", *rssEnv)
	}
	fmt.Fprintf(&md, "- per scrape: %.2f ms CPU, %s MiB allocated, %.2f GCs\n\n", cpu*1000, mib(alloc), gcs)
	fmt.Fprintf(&md, "RSS and its anonymous part from /proc/<pid>/smaps_rollup; file = RSS − anonymous (the binary and libc), of it mapped 2 MiB at a time (FilePmdMapped); "+
		"Go heap = heap in use + heap idle not yet released (go_memstats_*); outside = anonymous − Go heap (stacks, runtime metadata, profiling records, C).\n\n")
	fmt.Fprintf(&md, "| when | scrapes | RSS MiB | anon MiB | file MiB | file PMD MiB | Go heap MiB | of it in use MiB | anon outside the heap MiB | next GC MiB | stacks MiB | Go sys MiB | goroutines | threads |\n")
	fmt.Fprintf(&md, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, p := range points {
		fmt.Fprintf(&md, "| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %.0f | %.0f |\n", p.what, p.scrapes,
			mib(p.rss), mib(p.anon), mib(p.rss-p.anon), mib(p.pmd), mib(p.goHeap), mib(p.heapInuse), mib(p.outside),
			mib(p.nextGC), mib(p.stack), mib(p.sys), p.goroutines, p.threads)
	}
	t.Logf("\n%s", md.String())
	if *rssResults != "" {
		if err := os.WriteFile(*rssResults, md.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// summarise is the q-quantile (0.5 median, 1 max) of each reading across
// ps, taken column by column, so its figures need not come from one point.
func summarise(what string, ps []rssPoint, q float64) rssPoint {
	pick := func(f func(rssPoint) float64) float64 {
		vs := make([]float64, len(ps))
		for i, p := range ps {
			vs[i] = f(p)
		}
		return quantile(vs, q)
	}
	return rssPoint{
		what: what, scrapes: ps[len(ps)-1].scrapes,
		rss:        pick(func(p rssPoint) float64 { return p.rss }),
		anon:       pick(func(p rssPoint) float64 { return p.anon }),
		pmd:        pick(func(p rssPoint) float64 { return p.pmd }),
		goHeap:     pick(func(p rssPoint) float64 { return p.goHeap }),
		heapInuse:  pick(func(p rssPoint) float64 { return p.heapInuse }),
		outside:    pick(func(p rssPoint) float64 { return p.outside }),
		nextGC:     pick(func(p rssPoint) float64 { return p.nextGC }),
		stack:      pick(func(p rssPoint) float64 { return p.stack }),
		sys:        pick(func(p rssPoint) float64 { return p.sys }),
		goroutines: pick(func(p rssPoint) float64 { return p.goroutines }),
		threads:    pick(func(p rssPoint) float64 { return p.threads }),
	}
}

// kernelRelease names the kernel, whose page cache decides how much of the
// binary is resident: uname(2)'s release, as procfs shows it.
func kernelRelease() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}
