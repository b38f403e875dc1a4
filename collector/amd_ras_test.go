package collector

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/xpu-exporter/xpu_exporter/attribution"
)

// unbatched is every sample of ch, the emitters' batches taken apart.
func unbatched(ch <-chan prometheus.Metric) []prometheus.Metric {
	var ms []prometheus.Metric
	for m := range ch {
		if b, ok := m.(batch); ok {
			for i := range b {
				ms = append(ms, &b[i])
			}
			continue
		}
		ms = append(ms, m)
	}
	return ms
}

// updateText is what one Update of c emits for snap, one sorted line per
// series with its labels sorted.
func updateText(t *testing.T, c Collector, snap *Snapshot) string {
	t.Helper()
	ch := make(chan prometheus.Metric, 10000)
	if err := c.Update(context.Background(), snap, ch); err != nil {
		t.Fatal(err)
	}
	close(ch)
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	var lines []string
	for _, m := range unbatched(ch) {
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			t.Fatal(err)
		}
		var ls []string
		for _, l := range pb.GetLabel() {
			ls = append(ls, l.GetName()+"="+strconv.Quote(l.GetValue()))
		}
		lines = append(lines, fmt.Sprintf("%s{%s} %g\n", fqName.FindStringSubmatch(m.Desc().String())[1], strings.Join(ls, ","), pb.GetGauge().GetValue()+pb.GetCounter().GetValue()))
	}
	slices.Sort(lines)
	return strings.Join(lines, "")
}

// TestAMDRASEventsOracle follows one GPU's RAS counts through six scrapes
// with the owner changing, and works out by hand what each owner is
// credited with:
//
//	scrape  owner  umc ce                  gfx ue                 credited
//	1       A      3 (baseline)            0 (baseline)           -
//	2       A      7: +4                   1: +1                  A: umc ce 4, gfx ue 1
//	3       B      7: +0                   file missing           -
//	4       B      2: went down (reload)   1: back, +0            B: umc ce 2
//	5       B      "Query currently        3: +2                  B: gfx ue 2
//	               inaccessible"
//	6       A, B   5: +3 since scrape 4    3: +0                  no owner: umc ce 3
//
// Scrape 4's umc count is lower than scrape 3's: the driver reloaded and
// counts from 0, so the 2 are new errors, never -5. In scrape 5 the umc
// block cannot be queried: its baseline stays 2, and scrape 6's 5 is +3.
// Shared by two pods in scrape 6, the GPU's series carry no owner, as
// every device series of a shared GPU. The umc de count (0 throughout)
// and the ue counts never move and give no series.
func TestAMDRASEventsOracle(t *testing.T) {
	tr := newAMDTree(t, map[string]string{
		"unique_id":         "00000000000000aa\n",
		"product_name":      "AMD Instinct MI300X OAM\n",
		"ras/umc_err_count": "ue: 0\nce: 3\nde: 0\n",
		"ras/gfx_err_count": "ue: 0\nce: 0\n",
	})
	dev := filepath.Join(tr.sysfs, "devices", "pci0000:00", "0000:0c:00.0")
	umc := func(content string) { tr.write(filepath.Join(dev, "ras", "umc_err_count"), content) }
	gfx := func(content string) { tr.write(filepath.Join(dev, "ras", "gfx_err_count"), content) }
	owner := func(pod string) attribution.Claim {
		return attribution.Claim{Share: 1, Owner: attribution.Owner{Kind: attribution.Kubernetes, Namespace: "ml", Pod: pod, Container: "main"}}
	}
	clk := &fakeClock{t: testNow}
	c := newAMDCollectorFor(t, tr, clk)
	var out string
	scrape := func(claims ...attribution.Claim) {
		t.Helper()
		clk.t = clk.t.Add(15 * time.Second)
		devs, err := c.readDevices(context.Background(), moveScrape)
		if err != nil || len(devs) != 1 {
			t.Fatalf("%d devices, %v", len(devs), err)
		}
		devs[0].Claims = claims
		snap := &Snapshot{Time: clk.t, Devices: devs}
		out = updateText(t, c, snap)
		// A coalesced scrape served from the same snapshot counts nothing
		// twice.
		if again := updateText(t, c, snap); again != out {
			t.Errorf("a second Update of one snapshot differs:\n%s\nthen\n%s", out, again)
		}
	}
	a, b := owner("a"), owner("b")

	scrape(a)
	if n := strings.Count(out, "xpu_amd_ras_events_total{"); n != 0 {
		t.Errorf("the first counts are a baseline, yet %d series:\n%s", n, out)
	}
	umc("ue: 0\nce: 7\nde: 0\n")
	gfx("ue: 1\nce: 0\n")
	scrape(a)
	if err := os.Remove(filepath.Join(dev, "ras", "gfx_err_count")); err != nil {
		t.Fatal(err)
	}
	scrape(b)
	umc("ue: 0\nce: 2\nde: 0\n")
	gfx("ue: 1\nce: 0\n")
	scrape(b)
	umc("Query currently inaccessible\n")
	gfx("ue: 3\nce: 0\n")
	scrape(b)
	umc("ue: 0\nce: 5\nde: 0\n")
	scrape(a, b)

	// Labels as the registry sorts them.
	ras := func(block, typ, pod string) string {
		owner := ""
		if pod != "" {
			owner = `,container="main"`
		}
		l := `xpu_amd_ras_events_total{block="` + block + `"` + owner + `,gpu="0",model="AMD Instinct MI300X OAM"`
		if pod != "" {
			l += `,namespace="ml",pod="` + pod + `"`
		}
		return l + `,type="` + typ + `",uuid="00000000000000aa",vendor="amd"}`
	}
	want := map[string]float64{
		ras("umc", "corrected", "a"):   4,
		ras("gfx", "uncorrected", "a"): 1,
		ras("umc", "corrected", "b"):   2,
		ras("gfx", "uncorrected", "b"): 2,
		ras("umc", "corrected", ""):    3,
	}
	got := map[string]float64{}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "xpu_amd_ras_events_total{") {
			i := strings.LastIndexByte(line, ' ')
			v, _ := strconv.ParseFloat(line[i+1:], 64)
			got[line[:i]] = v
		}
	}
	for name, v := range want {
		if g, ok := got[name]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", name, g, ok, v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d series, want %d:\n%s", len(got), len(want), out)
	}
	// The driver's own counters are served as they read, since its load.
	if !strings.Contains(out, `xpu_amd_ras_errors_total{block="umc",gpu="0",model="AMD Instinct MI300X OAM",type="corrected",uuid="00000000000000aa",vendor="amd"} 5`+"\n") {
		t.Errorf("raw umc count not 5:\n%s", out)
	}
}

// rasBaseline is an AMD GPU whose umc block counts 1 uncorrected error,
// read once by a scrape: its baseline. It returns the tree, the GPU's
// device directory, the collector's clock and the collector.
func rasBaseline(t *testing.T) (*amdTree, string, *fakeClock, *amdCollector) {
	t.Helper()
	tr := newAMDTree(t, map[string]string{"unique_id": "00000000000000aa\n", "ras/umc_err_count": "ue: 1\nce: 0\n"})
	clk := &fakeClock{t: testNow}
	c := newAMDCollectorFor(t, tr, clk)
	if _, err := c.readDevices(context.Background(), moveScrape); err != nil {
		t.Fatal(err)
	}
	return tr, filepath.Join(tr.sysfs, "devices", "pci0000:00", "0000:0c:00.0"), clk, c
}

// TestAMDRASEventsWaitForAScrape: increases seen by reads that serve no
// scrape (a /devices page, an Xid owner look-up) are not lost: the next
// scrape credits them to its owner.
func TestAMDRASEventsWaitForAScrape(t *testing.T) {
	tr, dev, _, c := rasBaseline(t)
	ctx := context.Background()
	// 1 → 3 seen by a /devices read, then 3 → 4 by the scrape: 2 + 1 = 3.
	tr.write(filepath.Join(dev, "ras", "umc_err_count"), "ue: 3\nce: 0\n")
	if _, err := c.readDevices(ctx, moveNone); err != nil {
		t.Fatal(err)
	}
	tr.write(filepath.Join(dev, "ras", "umc_err_count"), "ue: 4\nce: 0\n")
	devs, err := c.readDevices(ctx, moveScrape)
	if err != nil {
		t.Fatal(err)
	}
	out := updateText(t, c, &Snapshot{Devices: devs})
	if !strings.Contains(out, `xpu_amd_ras_events_total{block="umc",gpu="0",type="uncorrected",uuid="00000000000000aa",vendor="amd"} 3`+"\n") {
		t.Errorf("want 3 uncorrected umc events:\n%s", out)
	}
}

// TestAMDRASCountersStartAtTheirBaseline: an AMD RAS counter is made when
// the first increase is served, but the errors it counts happened after
// the read that set the baseline, not at the serve. Its created timestamp
// (the OTLP bridge's start) is that read's time: otherwise a first point
// spanned only the milliseconds between the serve and its push, with the
// whole count as its increase (review13 R13-7).
func TestAMDRASCountersStartAtTheirBaseline(t *testing.T) {
	tr, dev, clk, c := rasBaseline(t)
	ctx := context.Background()
	baseline := clk.t
	// 30 s later: 1 → 4, three errors since the baseline read.
	clk.t = clk.t.Add(30 * time.Second)
	tr.write(filepath.Join(dev, "ras", "umc_err_count"), "ue: 4\nce: 0\n")
	devs, err := c.readDevices(ctx, moveScrape)
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan prometheus.Metric, 1000)
	if err := c.Update(ctx, &Snapshot{Devices: devs}, ch); err != nil {
		t.Fatal(err)
	}
	close(ch)
	n := 0
	for _, m := range unbatched(ch) {
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(m.Desc().String(), "amd_ras_events_total") {
			continue
		}
		n++
		if got := pb.GetCounter().GetCreatedTimestamp(); pb.GetCounter().GetValue() != 3 || got == nil || !got.AsTime().Equal(baseline) {
			t.Errorf("RAS counter %v created %v; want 3 created at the baseline read, %v", pb.GetCounter().GetValue(), got.AsTime(), baseline)
		}
	}
	if n != 1 {
		t.Errorf("%d RAS counters, want 1", n)
	}
}
