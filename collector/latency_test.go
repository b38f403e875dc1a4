package collector

import (
	"strings"
	"testing"
	"time"

	"github.com/xpu-exporter/xpu_exporter/demo"
)

// Devices are read in parallel: with every NVML call taking 5 ms, a scrape
// of 8 GPUs takes about as long as one GPU's calls, not all of theirs.
func TestScrapeTimeFollowsTheSlowestDevice(t *testing.T) {
	const latency = 5 * time.Millisecond
	y := "defaults:\n  model: NVIDIA H100 80GB HBM3\n  memory_total: 80GiB\n  call_latency: 5ms\n" +
		"  metrics: {utilization: 0.5, memory_utilization: 0.2, memory_used: 1GiB, temperature: 50, power: 300}\ndevices:\n" +
		strings.Repeat("  - {}\n", 8)
	s, err := demo.Parse([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	e := newTestExporter(t, s, map[string]bool{"nvidia": true})
	scrapeText(t, e, time.Minute) // the first read also sets up GPM and events
	calls, reads := s.Calls(), s.DeviceReads()
	began := time.Now()
	out := scrapeText(t, e, time.Minute)
	wall := time.Since(began)
	calls, reads = s.Calls()-calls, s.DeviceReads()-reads
	if reads != 8 {
		t.Fatalf("one scrape took %d device handles, want one per GPU (8)", reads)
	}
	up := 0
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "xpu_device_up{") && strings.HasSuffix(l, " 1") {
			up++
		}
	}
	if up != 8 {
		t.Fatalf("%d GPUs up, want 8:\n%s", up, out)
	}
	// Read one after another, the calls would take calls × 5 ms (e.g. 8
	// GPUs × 20 calls × 5 ms = 800 ms); in parallel about an eighth of that
	// (100 ms). Half the serial sum leaves a wide margin for a loaded
	// machine and still fails if the devices were read in turn.
	serial := time.Duration(calls) * latency
	t.Logf("%d calls (%d per GPU): serial %v, scrape took %v", calls, calls/8, serial, wall)
	if calls < 8*5 {
		t.Fatalf("only %d simulated calls in a scrape of 8 GPUs; the latency model is not applied", calls)
	}
	if wall >= serial/2 {
		t.Errorf("a scrape took %v; the devices' calls in turn would take %v, in parallel about %v", wall, serial, serial/8)
	}
}
