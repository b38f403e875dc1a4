package collector

import (
	"bytes"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/xpu-exporter/xpu_exporter/demo"

	"github.com/xpu-exporter/xpu_exporter/vendors/amd"
)

// TestXGMILinksSum: the probe's sequence (links in KB × 1000 = bytes). The
// served counter must grow by what the links carried, and never fall: a
// link that restarts counts on from 0.
func TestXGMILinksSum(t *testing.T) {
	link := func(kb ...int64) []amd.Opt[uint64] {
		out := make([]amd.Opt[uint64], len(kb))
		for i, v := range kb {
			if v >= 0 {
				out[i] = amd.Opt[uint64]{Value: uint64(v) * 1000, OK: true}
			}
		}
		return out
	}
	var x xgmiLinks
	for _, step := range []struct {
		name  string
		links []amd.Opt[uint64]
		want  float64
	}{
		// 1,000,000 + 2,000,000 + 3,000,000 KB = 6e9 bytes; slot 3 never
		// reported (a link the GPU does not have).
		{"first read", link(1_000_000, 2_000_000, 3_000_000, -1), 6e9},
		// Each link +100 KB: 6e9 + 300,000 = 6,000,300,000.
		{"all links", link(1_000_100, 2_000_100, 3_000_100, -1), 6_000_300_000},
		// Links 0 and 1 +100 KB, link 2 unreported: its last 3,000,100 KB
		// stays in the sum, 6,000,300,000 + 200,000 = 6,000,500,000.
		{"link 2 unreported", link(1_000_200, 2_000_200, -1, -1), 6_000_500_000},
		// All three back at 300 KB past their first read: 1,000,300 +
		// 2,000,300 + 3,000,300 KB = 6,000,900,000 bytes.
		{"link 2 back", link(1_000_300, 2_000_300, 3_000_300, -1), 6_000_900_000},
		// Slot 3 appears at 500 KB: only what it carries from now on
		// counts, 6,000,900,000 + 0.
		{"new link", link(1_000_300, 2_000_300, 3_000_300, 500), 6_000_900_000},
		// It carries 50 KB: 6,000,950,000.
		{"new link counts", link(1_000_300, 2_000_300, 3_000_300, 550), 6_000_950_000},
		// Driver reloaded: the accumulators start again at 10, 20, 30 KB,
		// link 3 unreported. Each counts on from 0: 6,000,950,000 + 60 KB
		// = 6,001,010,000, never a fall.
		{"driver reload", link(10, 20, 30, -1), 6_001_010_000},
		// Link 3 back at 5 KB, below its 550: it restarted too; its 50 KB
		// are kept and it counts from 0, +5 KB; the others +1 KB each:
		// 6,001,010,000 + 5,000 + 3,000 = 6,001,018,000.
		{"late link restarted", link(11, 21, 31, 5), 6_001_018_000},
	} {
		got, ok := x.sum(step.links)
		if !ok || got != step.want {
			t.Errorf("%s: %v (ok %v), want %v", step.name, got, ok, step.want)
		}
	}
	// Probe G's sequence (PG1): link 2 appears at 5,000 KB, then link 1
	// alone restarts. A: 1,000 + 2,000 + 0 = 3,000 KB. B: link 0 +500,
	// link 2 counts from its 5,000: 3,500 KB. C: link 0 +100, link 1 from
	// 0 to 100 (its 2,000 kept), link 2 +100: 3,500 + 300 = 3,800 KB,
	// never link 2's 5,000 from before it appeared (6,800 KB was served).
	var pg1 xgmiLinks
	for _, step := range []struct {
		links []amd.Opt[uint64]
		want  float64
	}{
		{link(1000, 2000, -1, 0), 3e6},
		{link(1500, 2000, 5000, 0), 3.5e6},
		{link(1600, 100, 5100, 0), 3.8e6},
	} {
		if got, ok := pg1.sum(step.links); !ok || got != step.want {
			t.Errorf("PG1 links %v: %v (ok %v), want %v", step.links, got, ok, step.want)
		}
	}
	var none xgmiLinks
	if _, ok := none.sum(link(-1, -1)); ok {
		t.Error("no link ever reported: a counter served")
	}
}

// TestAMDXGMILinkLeftOutKeepsTheSum runs the served series through a read
// whose gpu_metrics leaves the fixture MI300X's one XGMI link out (all-ones,
// as the SMU code leaves a link it did not map): the counter stays at its
// 2,048 KB × 1000 = 2,048,000 bytes rather than going (a fall to a sum
// without it), and counts on when the link is back at 3,072 KB:
// 3,072,000.
func TestAMDXGMILinkLeftOutKeepsTheSum(t *testing.T) {
	sys := filepath.Join(t.TempDir(), "sys")
	if out, err := exec.Command("cp", "-a", filepath.Join("..", "fixtures", "amd", "sys"), sys).CombinedOutput(); err != nil {
		t.Fatalf("copy the fixture tree: %v\n%s", err, out)
	}
	file := filepath.Join(sys, "devices", "pci0000:00", "0000:00:01.1", "0000:0c:00.0", "gpu_metrics")
	table, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	// xgmi_read_data_acc[0] is 2048 KB, [1] all-ones: the one place the
	// two are side by side.
	link0 := binary.LittleEndian.AppendUint64(nil, 2048)
	at := bytes.Index(table, append(slices.Clone(link0), bytes.Repeat([]byte{0xff}, 8)...))
	if at < 0 || bytes.Count(table, append(slices.Clone(link0), bytes.Repeat([]byte{0xff}, 8)...)) != 1 {
		t.Fatalf("link 0's read counter not found once in %s", file)
	}
	setLink0 := func(v uint64) {
		binary.LittleEndian.PutUint64(table[at:], v)
		if err := os.WriteFile(file, table, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	e := newAMDTestExporter(t, sys, filepath.Join("..", "fixtures", "amd", "proc"), func() time.Time { return testNow })
	for _, step := range []struct {
		link0 uint64
		want  float64
	}{{2048, 2_048_000}, {^uint64(0), 2_048_000}, {3072, 3_072_000}} {
		setLink0(step.link0)
		out := scrapeText(t, e, 5*time.Second)
		check, _ := oracleChecks(out)
		check(t, "xpu_amd_xgmi_data_bytes_total", step.want, `gpu="0"`, `direction="read"`)
	}
}

// TestAMDDemoXGMIGapsKeepTheSum runs the served XGMI counter on the demo's
// simulated MI300X, whose firmware leaves link 2 out of every other
// gpu_metrics table (faults.xgmi_gaps), from the file boundary on. It
// reads 7e5 bytes a second over its 7 links: 100 KB a second each, from
// the driver's load 5,400 s before testNow.
//
//	5,400 s  all links at 540,000 KB: 7 × 540,000 = 3,780,000 KB
//	5,410 s  link 2 left out, kept at 540,000 KB: 6 × 541,000 +
//	         540,000 = 3,786,000 KB
//	5,420 s  all links at 542,000 KB: 3,794,000 KB
//
// in bytes (KB × 1000): 3.78e9, 3.786e9, 3.794e9, never falling.
func TestAMDDemoXGMIGapsKeepTheSum(t *testing.T) {
	s, err := demo.Parse([]byte(`node: hive
devices:
  - {vendor: amd, model: AMD Instinct MI300X OAM, memory_total: 192GiB, power_limit_watts: 750, metrics: {xgmi_read: {start: 0, rate: 7e5}}, faults: {xgmi_gaps: [2]}}
`))
	if err != nil {
		t.Fatal(err)
	}
	clk := &testClock{t: testNow}
	e, sim := newAttributedExporterSim(t, s, func(c *Config) { c.Now = clk.now })
	sim.AMD.Reset(testNow.Add(-5400 * time.Second))
	for i, want := range []float64{3.78e9, 3.786e9, 3.794e9} {
		at := testNow.Add(time.Duration(i) * 10 * time.Second)
		clk.set(at)
		if err := sim.AMD.WriteAt(at); err != nil {
			t.Fatal(err)
		}
		check, _ := oracleChecks(scrapeText(t, e, 10*time.Second))
		check(t, "xpu_amd_xgmi_data_bytes_total", want, `gpu="0"`, `direction="read"`)
	}
}
