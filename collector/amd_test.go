package collector

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xpu-exporter/xpu_exporter/attribution"
	"github.com/xpu-exporter/xpu_exporter/demo"
	"github.com/xpu-exporter/xpu_exporter/internal/syncbuf"
	"github.com/xpu-exporter/xpu_exporter/vendors/amd"
	"github.com/xpu-exporter/xpu_exporter/vendors/reading"
)

// amdTree is a minimal amdgpu node written by hand: one GPU at
// 0000:0c:00.0 (card0, renderD128) in the layout of /sys/class/drm, and a
// procfs whose processes hold its render node.
type amdTree struct {
	t            *testing.T
	sysfs, procs string
}

func newAMDTree(t *testing.T, files map[string]string) *amdTree {
	t.Helper()
	root := t.TempDir()
	tr := &amdTree{t: t, sysfs: filepath.Join(root, "sys"), procs: filepath.Join(root, "proc")}
	files["drm/renderD128/dev"] = "226:128\n"
	tr.gpu("card0", "0000:0c:00.0", files)
	return tr
}

// gpu adds an amdgpu GPU at PCI address pci, registered as card, with
// these files in its device directory.
func (tr *amdTree) gpu(card, pci string, files map[string]string) {
	tr.t.Helper()
	dev := filepath.Join(tr.sysfs, "devices", "pci0000:00", pci)
	for name, content := range files {
		tr.write(filepath.Join(dev, name), content)
	}
	tr.link("../../../bus/pci/drivers/amdgpu", filepath.Join(dev, "driver"))
	tr.link(dev, filepath.Join(tr.sysfs, "class", "drm", card, "device"))
}

// unregister removes card from class/drm, as the DRM core does when its
// GPU leaves (PCI removal, a reset that re-registers it).
func (tr *amdTree) unregister(card string) {
	tr.t.Helper()
	if err := os.RemoveAll(filepath.Join(tr.sysfs, "class", "drm", card)); err != nil {
		tr.t.Fatal(err)
	}
}

func (tr *amdTree) write(path, content string) {
	tr.t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		tr.t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		tr.t.Fatal(err)
	}
}

func (tr *amdTree) link(target, path string) {
	tr.t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		tr.t.Fatal(err)
	}
	os.Remove(path)
	if err := os.Symlink(target, path); err != nil {
		tr.t.Fatal(err)
	}
}

// fd opens a DRM client for pid: fd n on renderD128 with this fdinfo body
// (after the keys every fdinfo has).
func (tr *amdTree) fd(pid, n int, body string) {
	tr.t.Helper()
	tr.fdOn(pid, n, "/dev/dri/renderD128", body)
}

// fdOn is fd on another DRM node, such as the primary node /dev/dri/card0.
func (tr *amdTree) fdOn(pid, n int, node, body string) {
	tr.t.Helper()
	dir := filepath.Join(tr.procs, strconv.Itoa(pid))
	tr.link(node, filepath.Join(dir, "fd", strconv.Itoa(n)))
	tr.write(filepath.Join(dir, "fdinfo", strconv.Itoa(n)), "pos:\t0\nflags:\t02100002\nmnt_id:\t24\n"+body)
}

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

// amdgpuClient is the fdinfo of an amdgpu DRM client of the test tree's
// GPU, with its VRAM in MiB and its gfx busy time in ns.
func amdgpuClient(id, vramMiB, gfxNs string) string {
	return "drm-driver:\tamdgpu\ndrm-client-id:\t" + id + "\ndrm-pdev:\t0000:0c:00.0\n" +
		"drm-total-vram:\t" + vramMiB + " MiB\ndrm-resident-vram:\t" + vramMiB + " MiB\ndrm-engine-gfx:\t" + gfxNs + " ns\n"
}

// busyMI300X is the sysfs of an MI300X 60 % busy with 16 GiB of VRAM in use.
func busyMI300X() map[string]string {
	return map[string]string{
		"unique_id":           "5C8A7E5D1B3F2A90\n",
		"product_name":        "AMD Instinct MI300X OAM\n",
		"gpu_busy_percent":    "60\n",
		"mem_info_vram_total": "205822885888\n",
		"mem_info_vram_used":  "17179869184\n",
	}
}

// sharedByPods makes pods ml/a and ml/b the owners of d, half each, a
// running the processes in pidsA and b those in pidsB.
func sharedByPods(d *Device, pidsA, pidsB []uint32) {
	a := attribution.Owner{Kind: attribution.Kubernetes, Namespace: "ml", Pod: "a", Container: "main"}
	b := attribution.Owner{Kind: attribution.Kubernetes, Namespace: "ml", Pod: "b", Container: "main"}
	d.Claims = []attribution.Claim{{Owner: a, Share: 0.5}, {Owner: b, Share: 0.5}}
	d.ProcessOwner = map[uint32]int{}
	for _, pid := range pidsA {
		d.ProcessOwner[pid] = 0
	}
	for _, pid := range pidsB {
		d.ProcessOwner[pid] = 1
	}
}

func newAMDCollectorFor(t *testing.T, tr *amdTree, clk *fakeClock) *amdCollector {
	t.Helper()
	c, err := newAMDCollector(Config{Sysfs: tr.sysfs, Procfs: tr.procs, Now: clk.now, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return c.(*amdCollector)
}

// TestAMDFdinfoSplitOracle: two pods' processes share one GPU; their DRM
// clients' engine times at two scrapes 2 s apart give each its share, and
// the device's utilization is split in that proportion.
func TestAMDFdinfoSplitOracle(t *testing.T) {
	tr := newAMDTree(t, busyMI300X())
	// Pod A: PID 200 opened client 17; its child 201 inherited the fd.
	// Newer amdgpu keys in MiB: 8 GiB resident, of 12 GiB created (the
	// rest evicted, which drm-total-vram counts and the device's used
	// memory does not).
	clientA := func(gfx string) string {
		return "drm-driver:\tamdgpu\ndrm-client-id:\t17\ndrm-pdev:\t0000:0c:00.0\n" +
			"drm-total-vram:\t12288 MiB\ndrm-resident-vram:\t8192 MiB\ndrm-engine-gfx:\t" + gfx + " ns\n"
	}
	// Pod B: PID 300, client 18, older amdgpu: drm-memory-vram in KiB;
	// no compute line at the first scrape (amdgpu prints only engines the
	// client used).
	clientB := func(engines string) string {
		return "drm-driver:\tamdgpu\ndrm-client-id:\t18\ndrm-pdev:\t0000:0c:00.0\n" +
			"drm-memory-vram:\t4194304 KiB\n" + engines
	}
	tr.fd(200, 5, clientA("1000000000"))
	tr.fd(201, 5, clientA("1000000000"))
	tr.fd(300, 7, clientB("drm-engine-gfx:\t500000000 ns\n"))
	// A process holding no render node is never read.
	tr.write(filepath.Join(tr.procs, "400", "fdinfo", "1"), "pos:\t0\n")

	clk := &fakeClock{t: testNow}
	c := newAMDCollectorFor(t, tr, clk)
	ctx := context.Background()
	first, err := c.readDevices(ctx, moveScrape)
	if err != nil || len(first) != 1 {
		t.Fatalf("first scrape: %d devices, %v", len(first), err)
	}
	for _, p := range first[0].Processes {
		if p.Utilization != nil {
			t.Errorf("pid %d has a utilization before any window: %v", p.PID, *p.Utilization)
		}
	}

	clk.t = testNow.Add(2 * time.Second)
	tr.fd(200, 5, clientA("1600000000"))
	tr.fd(201, 5, clientA("1600000000"))
	tr.fd(300, 7, clientB("drm-engine-gfx:\t700000000 ns\ndrm-engine-compute:\t100000000 ns\n"))
	devs, err := c.readDevices(ctx, moveScrape)
	if err != nil || len(devs) != 1 {
		t.Fatalf("second scrape: %d devices, %v", len(devs), err)
	}
	d := devs[0]
	if d.UUID != "5c8a7e5d1b3f2a90" || d.Index != "0" || d.Vendor != "amd" || d.PCIBusID != "0000:0c:00.0" {
		t.Errorf("identity %+v", d)
	}
	// Window 2 s = 2e9 ns.
	// PID 200 (client 17): gfx (1.6e9 - 1.0e9) / 2e9 = 0.3; VRAM 8192 MiB = 8 GiB.
	// PID 201 holds the same client: counted once, at the lowest PID, so 0.
	// PID 300 (client 18): gfx (0.7e9 - 0.5e9) / 2e9 = 0.1, plus compute
	// (0.1e9 - 0, absent at t0) / 2e9 = 0.05: 0.15; VRAM 4194304 KiB = 4 GiB.
	const gib = 1 << 30
	want := map[uint32][2]float64{200: {0.3, 8 * gib}, 201: {0, 0}, 300: {0.15, 4 * gib}}
	if len(d.Processes) != len(want) {
		t.Fatalf("processes %+v", d.Processes)
	}
	for _, p := range d.Processes {
		w, ok := want[p.PID]
		if !ok || p.Utilization == nil || p.MemoryUsed == nil {
			t.Fatalf("process %+v", p)
		}
		if math.Abs(*p.Utilization-w[0]) > 1e-12 || float64(*p.MemoryUsed) != w[1] {
			t.Errorf("pid %d: utilization %v memory %v, want %v %v", p.PID, *p.Utilization, *p.MemoryUsed, w[0], w[1])
		}
	}

	// Pod A owns 200 and 201, pod B 300: 0.3 + 0 and 0.15 of the window,
	// 0.45 in all, within the device: A 0.3, B 0.15 (gpu_busy_percent's 60
	// is of the moment, not the window's); memory is each pod's
	// processes' VRAM.
	sharedByPods(d, []uint32{200, 201}, []uint32{300})
	checkUsage(t, d.Usage(), []usageWant{{some(8 * gib), some(0.3)}, {some(4 * gib), some(0.15)}})

	// A read for /devices (moveNone) measures from the last scrape and
	// does not move the window: two seconds after the second scrape, PID
	// 200's client ran 0.2e9 ns more, (1.8e9 - 1.6e9) / 2e9 = 0.1, and the
	// next scrape still measures from the second scrape: 0.1 as well.
	clk.t = testNow.Add(4 * time.Second)
	tr.fd(200, 5, clientA("1800000000"))
	peek, _ := c.readDevices(ctx, moveNone)
	again, _ := c.readDevices(ctx, moveScrape)
	for _, devs := range [][]*Device{peek, again} {
		if got := *devs[0].Processes[0].Utilization; math.Abs(got-0.1) > 1e-12 {
			t.Errorf("pid 200 after the third read: %v, want 0.1", got)
		}
	}

	// A walk of procfs cut by the deadline, at 6 s (client 17 at 2.0e9
	// ns), attaches no process and leaves the window at the last complete
	// walk, 4 s (1.8e9 ns): at 8 s (2.6e9 ns) PID 200 has
	// (2.6e9 - 1.8e9) / 4e9 = 0.2, not (2.6e9 - 2.0e9) / 2e9 = 0.3.
	clk.t = testNow.Add(6 * time.Second)
	tr.fd(200, 5, clientA("2000000000"))
	cut, cancel := context.WithCancel(ctx)
	cancel()
	late := *again[0]
	late.Processes = nil
	c.attachProcesses(c.scanProcesses(cut), []*Device{&late}, moveScrape)
	if len(late.Processes) != 0 {
		t.Errorf("a walk cut by the deadline attached %+v", late.Processes)
	}
	clk.t = testNow.Add(8 * time.Second)
	tr.fd(200, 5, clientA("2600000000"))
	devs, _ = c.readDevices(ctx, moveScrape)
	if got := *devs[0].Processes[0].Utilization; math.Abs(got-0.2) > 1e-12 {
		t.Errorf("pid 200 after a cut walk: %v, want 0.2", got)
	}
}

// TestAMDPushesKeepTheirOwnWindow: a push with no scraper covers the time
// since the previous push and leaves the scrapes' window where it was, as
// on NVIDIA GPUs (TestFirstScrapeAfterPushes).
func TestAMDPushesKeepTheirOwnWindow(t *testing.T) {
	tr := newAMDTree(t, busyMI300X())
	client := func(gfx string) string {
		return "drm-driver:\tamdgpu\ndrm-client-id:\t17\ndrm-pdev:\t0000:0c:00.0\n" +
			"drm-resident-vram:\t8192 MiB\ndrm-engine-gfx:\t" + gfx + " ns\n"
	}
	clk := &fakeClock{t: testNow}
	c := newAMDCollectorFor(t, tr, clk)
	ctx := context.Background()
	util := func(m move) float64 {
		t.Helper()
		devs, err := c.readDevices(ctx, m)
		if err != nil || len(devs) != 1 || len(devs[0].Processes) != 1 || devs[0].Processes[0].Utilization == nil {
			t.Fatalf("%v: %+v", err, devs)
		}
		return *devs[0].Processes[0].Utilization
	}
	// The warm-up at 0 s (1.0e9 ns), pushes at 2 s (1.4e9 ns) and 4 s
	// (2.2e9 ns): the second push covers 2 … 4 s, (2.2e9 - 1.4e9) / 2e9 =
	// 0.4. The scrape at 6 s (2.6e9 ns) covers 0 … 6 s, whatever the
	// pushes did: (2.6e9 - 1.0e9) / 6e9 = 0.2666…; from the last push it
	// would be (2.6e9 - 2.2e9) / 2e9 = 0.2.
	for _, r := range []struct {
		at   time.Duration
		gfx  string
		m    move
		want float64
	}{
		{0, "1000000000", moveScrape, math.NaN()},
		{2 * time.Second, "1400000000", movePush, 0.2},
		{4 * time.Second, "2200000000", movePush, 0.4},
		{6 * time.Second, "2600000000", moveScrape, 1.6 / 6},
	} {
		clk.t = testNow.Add(r.at)
		tr.fd(200, 5, client(r.gfx))
		if math.IsNaN(r.want) {
			c.readDevices(ctx, r.m)
			continue
		}
		if got := util(r.m); math.Abs(got-r.want) > 1e-12 {
			t.Errorf("at %v: pid 200 %v, want %v", r.at, got, r.want)
		}
	}
}

// TestAMDEngineCounterDipCatchesUp: a client's engine counter may fall
// back for a while and must then catch up with the larger value read before
// it (kernel documentation, "DRM client usage stats", drm-engine-<keystr>).
// Client 17 (PID 200) reads 10.0, 11.0, 10.5, 12.0 and 13.0 s of gfx;
// client 18 (PID 300) runs a steady 0.5 s per 2 s window. The window of
// the dip is unknown, and so is the next: 12.0 - 11.0 is the time since
// 11.0 was read, two windows ago, which that window would take for its own
// (probe22-amdseq 01). The one after measures from 12.0.
func TestAMDEngineCounterDipCatchesUp(t *testing.T) {
	tr := newAMDTree(t, map[string]string{"unique_id": "00000000000000aa\n", "gpu_busy_percent": "75\n"})
	clk := &fakeClock{t: testNow}
	c := newAMDCollectorFor(t, tr, clk)
	var devs []*Device
	for i, gfx17 := range []string{"10000000000", "11000000000", "10500000000", "12000000000", "13000000000"} {
		clk.t = testNow.Add(time.Duration(2*i) * time.Second)
		tr.fd(200, 5, amdgpuClient("17", "1024", gfx17))
		tr.fd(300, 7, amdgpuClient("18", "1024", strconv.Itoa(500000000*(i+1))))
		var err error
		if devs, err = c.readDevices(context.Background(), moveScrape); err != nil || len(devs) != 1 {
			t.Fatalf("scrape %d: %d devices, %v", i, len(devs), err)
		}
		if i == 2 || i == 3 {
			// The dip and the window after it: what client 17 ran in
			// them is not known.
			if u := devs[0].Processes[0].Utilization; u != nil {
				t.Errorf("pid 200 in window %d: %v, want unknown", i, *u)
			}
		}
	}
	// Window 2 s = 2e9 ns. PID 200: (13.0e9 - 12.0e9) / 2e9 = 0.5; PID 300:
	// 0.5e9 / 2e9 = 0.25.
	// The device's 0.75 splits 0.5 : 0.25, 0.75 × 0.5/0.75 = 0.5 and
	// 0.75 × 0.25/0.75 = 0.25.
	d := devs[0]
	want := map[uint32]float64{200: 0.5, 300: 0.25}
	for _, p := range d.Processes {
		if p.Utilization == nil || math.Abs(*p.Utilization-want[p.PID]) > 1e-12 {
			t.Errorf("pid %d: utilization %v, want %v", p.PID, p.Utilization, want[p.PID])
		}
	}
	sharedByPods(d, []uint32{200}, []uint32{300})
	checkUsage(t, d.Usage(), []usageWant{{some(1 << 30), some(0.5)}, {some(1 << 30), some(0.25)}})
}

// TestAMDRemappedNodeFollowsPdev: a container started with
// --device=/dev/dri/renderD129:/dev/dri/renderD128 holds the second GPU
// through a node that, in its own mount namespace, bears the first GPU's
// name. drm-pdev names the GPU the file was opened on.
func TestAMDRemappedNodeFollowsPdev(t *testing.T) {
	tr := newAMDTree(t, map[string]string{"unique_id": "00000000000000aa\n"})
	tr.gpu("card1", "0000:22:00.0", map[string]string{"unique_id": "00000000000000bb\n", "drm/renderD129/dev": "226:129\n"})
	tr.fdOn(4242, 5, "/dev/dri/renderD128", "drm-driver:\tamdgpu\ndrm-client-id:\t7\ndrm-pdev:\t0000:22:00.0\ndrm-resident-vram:\t1024 MiB\n")
	c := newAMDCollectorFor(t, tr, &fakeClock{t: testNow})
	devs, err := c.readDevices(context.Background(), moveScrape)
	if err != nil || len(devs) != 2 {
		t.Fatalf("%d devices, %v", len(devs), err)
	}
	for _, d := range devs {
		var pids []uint32
		for _, p := range d.Processes {
			pids = append(pids, p.PID)
		}
		if onB := d.UUID == "00000000000000bb"; (len(pids) == 1 && pids[0] == 4242) != onB {
			t.Errorf("GPU %s (%s): processes %v", d.UUID, d.PCIBusID, pids)
		}
	}
}

// TestAMDModelWithoutProductName: amdgpu has product_name only for
// "certain server cards" (an MI100 on a 6.1 kernel prints an empty one, a
// Radeon on 6.8 none); the model is then the board's PCI IDs.
func TestAMDModelWithoutProductName(t *testing.T) {
	for name, files := range map[string]map[string]string{
		"empty":  {"product_name": "\n"},
		"absent": {},
	} {
		t.Run(name, func(t *testing.T) {
			files["unique_id"], files["device"] = "00000000000000aa\n", "0x738C\n"
			c := newAMDCollectorFor(t, newAMDTree(t, files), &fakeClock{t: testNow})
			devs, err := c.readDevices(context.Background(), moveScrape)
			if err != nil || len(devs) != 1 {
				t.Fatalf("%d devices, %v", len(devs), err)
			}
			if got := devs[0].Model; got != "AMD GPU [1002:738c]" {
				t.Errorf("model %q", got)
			}
		})
	}
}

// TestAMDScanHint: the warning names the likely cause: a procfs that
// cannot be listed is not the host's (it blamed a missing capability, found
// by probing with --path.procfs=/nonexistent); a process's files refused
// need CAP_SYS_PTRACE; a usage stats line not understood is the driver's.
func TestAMDScanHint(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  amd.ScanError
		want string
	}{
		{"procfs missing", amd.ScanError{File: "/nonexistent", Err: &fs.PathError{Op: "open", Path: "/nonexistent", Err: syscall.ENOENT}}, "--path.procfs must be the host's /proc"},
		{"fd refused", amd.ScanError{PID: 300, File: "fd", Err: &fs.PathError{Op: "open", Path: "/proc/300/fd", Err: syscall.EACCES}}, "CAP_SYS_PTRACE"},
		{"fdinfo refused", amd.ScanError{PID: 300, File: "fdinfo/7", Err: syscall.EPERM}, "CAP_SYS_PTRACE"},
		// A value the parser refuses is the driver's format, not a
		// permission (probe27 PA10: "3 GiB" pointed at least privilege).
		{"fdinfo malformed", amd.ScanError{PID: 300, File: "fdinfo/5", Err: fmt.Errorf("%w: drm-memory-vram: memory \"3 GiB\"", amd.ErrMalformed)}, "DRM client usage stats"},
	} {
		if got := scanHint(tc.err); !strings.Contains(got, tc.want) {
			t.Errorf("%s: hint %q, want one saying %q", tc.name, got, tc.want)
		}
	}
	if got := scanHint(amd.ScanError{File: "/proc", Err: syscall.ENOENT}); strings.Contains(got, "CAP_SYS_PTRACE") {
		t.Errorf("a procfs that cannot be listed blamed on a capability: %q", got)
	}
}

// TestAMDUnreadableProcessLeavesSplitOut: a process whose fds can be read
// neither through their links nor through fdinfo (on a real node: no
// CAP_SYS_PTRACE; here "directories" that are files, ENOTDIR, which root
// cannot read past either) may hold the GPU for another owner. The split is
// left out while it lasts, with one warning. A process whose links cannot
// be read but whose fdinfo can (another user's without
// CAP_DAC_READ_SEARCH) is found through fdinfo, and the split comes back.
func TestAMDUnreadableProcessLeavesSplitOut(t *testing.T) {
	tr := newAMDTree(t, map[string]string{"unique_id": "00000000000000aa\n", "gpu_busy_percent": "60\n"})
	a17 := func(gfx string) { tr.fd(200, 5, amdgpuClient("17", "1024", gfx)) }
	b18 := func(gfx string) {
		tr.write(filepath.Join(tr.procs, "300", "fdinfo", "7"), "pos:\t0\nflags:\t02100002\nmnt_id:\t24\n"+amdgpuClient("18", "2048", gfx))
	}
	a17("1000000000")
	tr.write(filepath.Join(tr.procs, "300", "fd"), "")
	tr.write(filepath.Join(tr.procs, "300", "fdinfo"), "")
	clk := &fakeClock{t: testNow}
	var logs bytes.Buffer
	c := newAMDCollectorFor(t, tr, clk)
	c.logger = slog.New(slog.NewTextHandler(&logs, nil))
	ctx := context.Background()
	// scrape reads the GPU 2 s after the previous read; pod a runs 200,
	// pod b 300.
	scrape := func() *Device {
		t.Helper()
		clk.t = clk.t.Add(2 * time.Second)
		devs, err := c.readDevices(ctx, moveScrape)
		if err != nil || len(devs) != 1 {
			t.Fatalf("%d devices, %v", len(devs), err)
		}
		d := devs[0]
		sharedByPods(d, []uint32{200}, []uint32{300})
		return d
	}
	const gib = 1 << 30

	scrape()
	a17("1600000000")
	d := scrape()
	if !d.ProcessesPartial {
		t.Error("the process list is not marked partial")
	}
	checkUsage(t, d.Usage(), []usageWant{{}, {}})
	if got := c.errs["fd"]; got != 2 {
		t.Errorf("fd read errors %v, want 2 (one per scrape)", got)
	}
	if n := strings.Count(logs.String(), "cannot read every process"); n != 1 {
		t.Errorf("%d warnings for one state, want 1:\n%s", n, logs.String())
	}

	// 300's fdinfo readable, its links still not: client 18 is found, new
	// in this window, so its share is unknown and so is the split; memory
	// is known: a 1024 MiB = 1 GiB, b 2048 MiB = 2 GiB.
	if err := os.Remove(filepath.Join(tr.procs, "300", "fdinfo")); err != nil {
		t.Fatal(err)
	}
	b18("200000000")
	a17("2200000000")
	d = scrape()
	if d.ProcessesPartial {
		t.Error("still partial with every process read")
	}
	checkUsage(t, d.Usage(), []usageWant{{mem: some(1 * gib)}, {mem: some(2 * gib)}})
	if !strings.Contains(logs.String(), "reads every process again") {
		t.Errorf("no log line when the scan recovered:\n%s", logs.String())
	}
	// Two seconds on: client 17 ran (2.6e9 - 2.2e9) / 2e9 = 0.2 of the
	// window, client 18 (0.6e9 - 0.2e9) / 2e9 = 0.2: 0.2 each.
	a17("2600000000")
	b18("600000000")
	checkUsage(t, scrape().Usage(), []usageWant{{some(1 * gib), some(0.2)}, {some(2 * gib), some(0.2)}})
}

// hungFile makes path a FIFO, a file whose read blocks as one of a GPU
// wedged in the driver does, until the test releases it by closing a
// writer (EOF); it is released at the test's end in any case, so that no
// reader is left behind.
func hungFile(t *testing.T, path string) (release func()) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Fatal(err)
	}
	release = func() {
		if w, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			w.Close()
		}
	}
	t.Cleanup(release)
	return release
}

// readOneAMD is one read of c's single GPU within budget.
func readOneAMD(t *testing.T, c *amdCollector, budget time.Duration) *Device {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	devs, err := c.readDevices(ctx, moveScrape)
	if err != nil || len(devs) != 1 {
		t.Fatalf("%d devices, %v", len(devs), err)
	}
	return devs[0]
}

// TestAMDHungCardIsDownOthersServed: a sysfs read that blocks (a FIFO
// stands in for a GPU wedged in the driver) makes that GPU down "timeout"
// until the read returns, without reading it again meanwhile.
func TestAMDHungCardIsDownOthersServed(t *testing.T) {
	tr := newAMDTree(t, map[string]string{"unique_id": "00000000000000aa\n", "gpu_busy_percent": "10\n"})
	fifo := filepath.Join(tr.sysfs, "devices", "pci0000:00", "0000:0c:00.0", "mem_busy_percent")
	release := hungFile(t, fifo)
	clk := &fakeClock{t: testNow}
	c := newAMDCollectorFor(t, tr, clk)
	scrape := func() *Device { return readOneAMD(t, c, 100*time.Millisecond) }
	for i := 0; i < 2; i++ {
		if d := scrape(); d.Up {
			t.Fatalf("scrape %d: a hung GPU is up", i)
		}
	}
	c.mu.Lock()
	reads := len(c.inflight)
	c.mu.Unlock()
	if reads != 1 {
		t.Errorf("%d reads in flight, want the one stuck read", reads)
	}
	release()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c.mu.Lock()
		n := len(c.inflight)
		c.mu.Unlock()
		if n == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	os.Remove(fifo)
	if d := scrape(); !d.Up || d.UUID != "00000000000000aa" {
		t.Errorf("after the read returned: up %v uuid %q", d.Up, d.UUID)
	}
}

// TestAMDHungFromStartNamedByItsAddress: a GPU whose reads hang from the
// exporter's start has never answered with its identity, but its card's
// sysfs link names its PCI address: it is down at that address, so that
// the ROCm device plugin's allocation (by address) and its processes'
// drm-pdev find it, and its holders are not logged as holding a device
// no card lists (found by probing: probe26 D2).
func TestAMDHungFromStartNamedByItsAddress(t *testing.T) {
	tr := newAMDTree(t, map[string]string{"unique_id": "00000000000000aa\n", "gpu_busy_percent": "10\n"})
	hungFile(t, filepath.Join(tr.sysfs, "devices", "pci0000:00", "0000:0c:00.0", "mem_busy_percent"))
	tr.fdOn(500, 4, "/dev/dri/renderD128", "drm-driver:\tamdgpu\ndrm-client-id:\t21\ndrm-pdev:\t0000:0c:00.0\n"+
		"drm-resident-vram:\t1024 MiB\ndrm-engine-gfx:\t1000000000 ns\n")
	var logs syncbuf.Buffer
	c, err := newAMDCollector(Config{Sysfs: tr.sysfs, Procfs: tr.procs, Now: (&fakeClock{t: testNow}).now, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	d := readOneAMD(t, c.(*amdCollector), 100*time.Millisecond)
	if d.Up || d.PCIBusID != "0000:0c:00.0" || d.Index != "0" {
		t.Errorf("up %v, PCI %q, index %q; want down at 0000:0c:00.0, index 0", d.Up, d.PCIBusID, d.Index)
	}
	if strings.Contains(logs.String(), "no card in class/drm lists") {
		t.Errorf("its holder was logged as holding a device no card lists:\n%s", logs.String())
	}
	// Its series and its log line name it by that address, which is all
	// there is to chase it by (probe27 PA6: gpu="0" alone, uuid="").
	if !strings.Contains(logs.String(), "pci=0000:0c:00.0") {
		t.Errorf("the down line does not name the address:\n%s", logs.String())
	}
	out := updateText(t, c, &Snapshot{Devices: []*Device{d}})
	if !strings.Contains(out, `xpu_device_info{gpu="0",pci_bus_id="0000:0c:00.0",vendor="amd"} 1`) {
		t.Errorf("no xpu_device_info naming 0000:0c:00.0:\n%s", out)
	}
}

// TestAMDSlowCardIsWaitedOn: a card read that a scrape with a tiny budget
// started, and that returns within a later scrape's budget, is waited for
// by that scrape: the GPU is up, not down at once as "previous query still
// running" (found by probing: a client sending a 1 ms scrape timeout made
// the next normal scrape report the GPU down).
func TestAMDSlowCardIsWaitedOn(t *testing.T) {
	tr := newAMDTree(t, map[string]string{"unique_id": "00000000000000aa\n", "gpu_busy_percent": "10\n"})
	fifo := filepath.Join(tr.sysfs, "devices", "pci0000:00", "0000:0c:00.0", "mem_busy_percent")
	release := hungFile(t, fifo)
	c := newAMDCollectorFor(t, tr, &fakeClock{t: testNow})
	read := func(budget time.Duration) *Device { return readOneAMD(t, c, budget) }
	if d := read(time.Millisecond); d.Up {
		t.Fatal("the card answered within 1 ms: the test proves nothing")
	}
	time.Sleep(50 * time.Millisecond)
	time.AfterFunc(200*time.Millisecond, release)
	if d := read(5 * time.Second); !d.Up {
		t.Error("a scrape with 5 s left, 50 ms after a 1 ms one started the read: down, want up once the read returns")
	}
}

// TestAMDHungCardKeepsOthersProcesses: the processes are read while the
// cards are. Read after them, the walk of procfs found the deadline spent
// by a hung card and every GPU came back with a partial process list: the
// GPUs that answered lost their owners for as long as the hung read held
// each scrape (found by probing a mixed node).
func TestAMDHungCardKeepsOthersProcesses(t *testing.T) {
	tr := newAMDTree(t, map[string]string{"unique_id": "00000000000000aa\n", "gpu_busy_percent": "10\n"})
	hungFile(t, filepath.Join(tr.sysfs, "devices", "pci0000:00", "0000:0c:00.0", "mem_busy_percent"))
	tr.gpu("card1", "0000:11:00.0", map[string]string{"unique_id": "00000000000000bb\n", "gpu_busy_percent": "50\n",
		"drm/renderD129/dev": "226:129\n"})
	tr.fdOn(500, 4, "/dev/dri/renderD129", "drm-driver:\tamdgpu\ndrm-client-id:\t21\ndrm-pdev:\t0000:11:00.0\n"+
		"drm-resident-vram:\t1024 MiB\ndrm-engine-gfx:\t1000000000 ns\n")
	c := newAMDCollectorFor(t, tr, &fakeClock{t: testNow})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	devs, err := c.readDevices(ctx, moveScrape)
	if err != nil || len(devs) != 2 {
		t.Fatalf("%d devices, %v", len(devs), err)
	}
	for _, d := range devs {
		switch d.UUID {
		case "": // never answered since the exporter started: known by its card alone
			if d.Up {
				t.Error("the hung GPU is up")
			}
		case "00000000000000bb":
			// One process, 1,024 MiB of VRAM: 1 GiB, 1 << 30 bytes.
			if !d.Up || d.ProcessesPartial || len(d.Processes) != 1 || d.Processes[0].PID != 500 ||
				d.Processes[0].MemoryUsed == nil || *d.Processes[0].MemoryUsed != 1<<30 {
				t.Errorf("the GPU that answered: up %v, partial %v, processes %+v; want up with process 500 holding 1 GiB",
					d.Up, d.ProcessesPartial, d.Processes)
			}
		default:
			t.Errorf("unexpected device %q", d.UUID)
		}
	}
}

// TestAMDStuckProcessScan: a process's fdinfo read that blocks (a FIFO
// stands in for one blocked on a GPU wedged in the driver) held the whole
// AMD read, and every GPU was reported down with no readings (found by
// probing). The GPU is served up with its readings and a partial process
// list, the scan is not started again while it is stuck, and once it
// returns the processes are read again.
func TestAMDStuckProcessScan(t *testing.T) {
	tr := newAMDTree(t, map[string]string{"unique_id": "00000000000000aa\n", "gpu_busy_percent": "40\n"})
	tr.fd(200, 5, amdgpuClient("17", "1024", "1000000000"))
	fifo := filepath.Join(tr.procs, "300", "fdinfo", "7")
	tr.link("/dev/dri/renderD128", filepath.Join(tr.procs, "300", "fd", "7"))
	release := hungFile(t, fifo)
	c := newAMDCollectorFor(t, tr, &fakeClock{t: testNow})
	read := func() *Device { return readOneAMD(t, c, 100*time.Millisecond) }
	for i := range 2 {
		// gpu_busy_percent 40: 0.4.
		if d := read(); !d.Up || d.Utilization == nil || *d.Utilization != 0.4 || !d.ProcessesPartial {
			t.Fatalf("read %d with the scan stuck: up %v, utilization %v, partial %v; want up, 0.4, partial", i, d.Up, d.Utilization, d.ProcessesPartial)
		}
	}
	c.mu.Lock()
	errs := c.errs["procfs"]
	c.mu.Unlock()
	if errs != 2 {
		t.Errorf("%v stuck scans counted over two reads, want 2", errs)
	}
	release()
	waitForCond(t, "the stuck scan to return", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.scanning == nil
	})
	os.Remove(fifo)
	if d := read(); d.ProcessesPartial || len(d.Processes) != 1 || d.Processes[0].PID != 200 {
		t.Errorf("after the scan returned: partial %v, processes %+v; want process 200 alone", d.ProcessesPartial, d.Processes)
	}
}

// TestAMDHungCardLeavesLaterCardsUp: the cards are awaited in order, so
// once the hung first card has used up the deadline, every later card's
// read has both answered and run out of time. Go's select picks one ready
// case at random, so without a look at the answer first about half of the
// healthy cards came back down (probe of 2026-11-25: 1 to 6 of 8).
func TestAMDHungCardLeavesLaterCardsUp(t *testing.T) {
	tr := newAMDTree(t, map[string]string{"unique_id": "00000000000000a0\n", "gpu_busy_percent": "10\n"})
	for i := 1; i <= 8; i++ {
		tr.gpu(fmt.Sprintf("card%d", i), fmt.Sprintf("0000:%02x:00.0", 0x10+i), map[string]string{
			"unique_id": fmt.Sprintf("00000000000000a%d\n", i), "gpu_busy_percent": "10\n"})
	}
	hungFile(t, filepath.Join(tr.sysfs, "devices", "pci0000:00", "0000:0c:00.0", "mem_busy_percent"))
	c := newAMDCollectorFor(t, tr, &fakeClock{t: testNow})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	devs, err := c.readDevices(ctx, moveScrape)
	if err != nil || len(devs) != 9 {
		t.Fatalf("%d devices, %v", len(devs), err)
	}
	var down []string
	for _, d := range devs {
		if !d.Up {
			down = append(down, d.Index)
		}
	}
	// card0 is the hung one: the first amdgpu card, index 0.
	if !slices.Equal(down, []string{"0"}) {
		t.Errorf("GPUs down: %v, want only the hung one, 0", down)
	}
}

// TestAMDEnergyKeepsItsSource: hwmon's energy1_input and the gpu_metrics
// accumulator count from different origins. A scrape in which the first
// could not be read served the second, so the counter went from hwmon's
// count to the table's and back, and Prometheus read a reset and a whole
// counter's worth of energy (found by probing). The counter stays with the
// source it was first read from and is left out while that one fails.
func TestAMDEnergyKeepsItsSource(t *testing.T) {
	table, err := os.ReadFile(filepath.Join("..", "fixtures", "amd", "sys", "devices", "pci0000:00", "0000:00:01.1", "0000:0c:00.0", "gpu_metrics"))
	if err != nil {
		t.Fatal(err)
	}
	tr := newAMDTree(t, map[string]string{"unique_id": "00000000000000aa\n", "gpu_busy_percent": "10\n", "gpu_metrics": string(table)})
	energy := filepath.Join(tr.sysfs, "devices", "pci0000:00", "0000:0c:00.0", "hwmon", "hwmon3", "energy1_input")
	c := newAMDCollectorFor(t, tr, &fakeClock{t: testNow})
	for _, step := range []struct {
		hwmon string // energy1_input, µJ
		want  amd.Opt[float64]
	}{
		// 100800000000 µJ = 100,800 J, though the table says 1e6 J.
		{"100800000000\n", amd.Opt[float64]{Value: 100800, OK: true}},
		// energy1_input unreadable: no energy, not the table's 1e6 J.
		{"garbage\n", amd.Opt[float64]{}},
		// 101600000000 µJ = 101,600 J.
		{"101600000000\n", amd.Opt[float64]{Value: 101600, OK: true}},
	} {
		tr.write(energy, step.hwmon)
		devs, err := c.readDevices(context.Background(), moveScrape)
		if err != nil || len(devs) != 1 {
			t.Fatalf("%d devices, %v", len(devs), err)
		}
		if got := devs[0].vendorData.(*amdData).energy; got != step.want {
			t.Errorf("energy1_input %q: energy %+v, want %+v", step.hwmon, got, step.want)
		}
	}
	// A GPU whose first read had only the table keeps the table: 65536000000
	// × 2^-16 J = 1e6 J (fixtures/amd/SOURCES.md), hwmon appearing later
	// or not.
	tr2 := newAMDTree(t, map[string]string{"unique_id": "00000000000000aa\n", "gpu_busy_percent": "10\n", "gpu_metrics": string(table)})
	c2 := newAMDCollectorFor(t, tr2, &fakeClock{t: testNow})
	for i := range 2 {
		devs, err := c2.readDevices(context.Background(), moveScrape)
		if err != nil || len(devs) != 1 {
			t.Fatalf("%d devices, %v", len(devs), err)
		}
		if got := devs[0].vendorData.(*amdData).energy; got != (amd.Opt[float64]{Value: 1e6, OK: true}) {
			t.Errorf("read %d: energy %+v, want the table's 1e6 J", i, got)
		}
		tr2.write(filepath.Join(tr2.sysfs, "devices", "pci0000:00", "0000:0c:00.0", "hwmon", "hwmon3", "energy1_input"), "5000000\n")
	}
}

// TestAMDFixtureGolden runs the collector on fixtures/amd (an MI300X in DPX
// mode with two live partitions, an MI210, a BMC VGA to skip); the facts
// below were read off SOURCES.md by hand, the golden guards the rest.
func TestAMDFixtureGolden(t *testing.T) {
	e := newAMDTestExporter(t, filepath.Join("..", "fixtures", "amd", "sys"), filepath.Join("..", "fixtures", "amd", "proc"), func() time.Time { return testNow })
	out := scrapeText(t, e, 5*time.Second)
	for _, c := range []struct {
		family   string
		want     float64
		matchers []string
	}{
		// MI300X: gpu_busy_percent 37; power1_input 312000000 µW = 312 W;
		// energy from gpu_metrics v1.5: 65536000000 × 2^-16 J = 1e6 J.
		{"xpu_utilization_ratio", 0.37, []string{`gpu="0"`, `uuid="5c8a7e5d1b3f2a90"`}},
		{"xpu_power_watts", 312, []string{`gpu="0"`}},
		{"xpu_energy_joules_total", 1e6, []string{`gpu="0"`}},
		// MI300X has no edge sensor: its junction is hwmon temp2, 48 °C.
		{"xpu_temperature_celsius", 48, []string{`gpu="0"`, `sensor="junction"`}},
		// Its limits: temp2_crit 100000 m°C = 100 °C, temp3_crit 95 °C.
		{"xpu_temperature_threshold_celsius", 100, []string{`gpu="0"`, `sensor="junction"`, `threshold="crit"`}},
		{"xpu_temperature_threshold_celsius", 95, []string{`gpu="0"`, `sensor="memory"`, `threshold="crit"`}},
		// MI210: temp1_emergency 105000 m°C (edge), temp2_emergency 115000
		// m°C (junction).
		{"xpu_temperature_threshold_celsius", 105, []string{`gpu="1"`, `sensor="edge"`, `threshold="emergency"`}},
		{"xpu_temperature_threshold_celsius", 115, []string{`gpu="1"`, `sensor="junction"`, `threshold="emergency"`}},
		// MI210: power1_average 150000000 µW = 150 W; link 16 GT/s = gen 4.
		{"xpu_power_watts", 150, []string{`gpu="1"`}},
		{"xpu_pcie_link_generation", 4, []string{`gpu="1"`}},
		// MI300X gpu_metrics: xgmi_read_data_acc[0] 2048 KB = 2 048 000
		// bytes, write 1024 KB = 1 024 000 bytes; the other links unset.
		{"xpu_amd_xgmi_data_bytes_total", 2048000, []string{`gpu="0"`, `direction="read"`}},
		{"xpu_amd_xgmi_data_bytes_total", 1024000, []string{`gpu="0"`, `direction="write"`}},
		// umc_err_count "ue: 1\nce: 5" on the MI210.
		{"xpu_ecc_errors_total", 5, []string{`gpu="1"`, `type="corrected"`}},
		// DPX: two partitions, each half the GPU.
		{"xpu_device_up", 1, []string{`uuid="5c8a7e5d1b3f2a90-xcp1"`, `mig_profile="dpx"`, `mig_instance="1"`}},
		{"xpu_partition_share_ratio", 0.5, []string{`uuid="5c8a7e5d1b3f2a90-xcp1"`}},
	} {
		if got := sample(t, out, c.family, c.matchers...); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("%s%v = %v, want %v", c.family, c.matchers, got, c.want)
		}
	}
	if strings.Contains(out, `xpu_temperature_celsius{gpu="0",model="AMD Instinct MI300X OAM",sensor="edge"`) {
		t.Error("the MI300X has no edge sensor, yet a series says it has")
	}
	if strings.Contains(out, `gpu="0",model="AMD Instinct MI300X OAM",sensor="junction",threshold="emergency"`) {
		t.Error("the MI300X fixture has no temp2_emergency, yet a limit is served")
	}
	golden(t, "amd-fixture", out)
}

// newAMDTestExporter serves the amd and process collectors alone from the
// given trees.
func newAMDTestExporter(t testing.TB, sysfs, procfs string, now func() time.Time) *Exporter {
	t.Helper()
	e := newExporterOf(t, Config{Sysfs: sysfs, Procfs: procfs, Now: now}, "amd", "process")
	return e
}

// TestAMDScenarioEngineDip runs the production reader on the demo's
// simulated fdinfo with engine_dip, from the file boundary on. One MI300X,
// booted 5,400 s before testNow, runs PID 3001 (a.service, busy 0.4,
// engine_dip) and PID 3002 (b.service, busy 0.2); gpu_busy_percent is
// 0.4 + 0.2 = 60. Written every 10 s, PID 3001's gfx time is
//
//	write 1 (5,400 s)  0.4 × 5,400e9 = 2,160e9 ns
//	write 2 (5,410 s)  2,164e9
//	write 3 (5,420 s)  2,164e9 − 1e6: the dip (true 2,168e9)
//	write 4 (5,430 s)  2,172e9, caught up
//	write 5 (5,440 s)  2,176e9
//
// Scrape 2: PID 3001 (2,164e9 − 2,160e9) / 10e9 = 0.4, PID 3002 0.2.
// Scrape 3: PID 3001 unknown, so the device's split is left out.
// Scrape 4: unknown too. From the larger 2,164e9, (2,172e9 − 2,164e9) /
// 10e9 = 0.8 is the time of two windows, the dip's and this one, served as
// this one's (probe22-amdseq 01: 0.8 was served for a process busy 0.4).
// Scrape 5 measures from 2,172e9: (2,176e9 − 2,172e9) / 10e9 = 0.4; PID
// 3002 0.2; a 0.4, b 0.2.
// With engine_dip_to_zero, write 3 has no gfx line (a count of 0, which
// amdgpu prints as none): measured from it, scrape 3 read 0 and scrape 4
// (2,172e9 − 0) / 10e9, capped at 1 (probe22-amdseq 01); the same oracles
// hold.
func TestAMDScenarioEngineDip(t *testing.T) {
	for _, option := range []string{"engine_dip", "engine_dip_to_zero"} {
		t.Run(option, func(t *testing.T) {
			for i, out := range scrapeAMDPair(t, option+": true", 5) {
				check, absent := oracleChecks(out)
				switch i {
				case 1:
					check(t, "xpu_process_utilization_ratio", 0.4, `pid="3001"`)
					check(t, "xpu_process_utilization_ratio", 0.2, `pid="3002"`)
				case 2, 3:
					absent(t, "xpu_process_utilization_ratio", `pid="3001"`)
					absent(t, "xpu_workload_utilization_ratio", `unit="a.service"`)
					absent(t, "xpu_workload_utilization_ratio", `unit="b.service"`)
				case 4:
					check(t, "xpu_utilization_ratio", 0.6, `gpu="0"`)
					check(t, "xpu_process_utilization_ratio", 0.4, `pid="3001"`)
					check(t, "xpu_process_utilization_ratio", 0.2, `pid="3002"`)
					check(t, "xpu_workload_utilization_ratio", 0.4, `unit="a.service"`)
					check(t, "xpu_workload_utilization_ratio", 0.2, `unit="b.service"`)
				}
			}
		})
	}
}

// TestAMDScenarioOracles scrapes fixtures/scenarios/amd.yaml, served
// through the demo's generated sysfs and fdinfo, at testNow (5400 s after
// boot) and 15 s later; the second scrape's window is those 15 s.
func TestAMDScenarioOracles(t *testing.T) {
	s := loadScenario(t, "amd")
	clk := &testClock{t: testNow}
	e, sim := newAttributedExporterSim(t, s, func(c *Config) { c.Now = clk.now })
	sim.AMD.Reset(testStart)
	if err := sim.AMD.WriteAt(testNow); err != nil {
		t.Fatal(err)
	}
	scrapeText(t, e, 10*time.Second)
	clk.set(testNow.Add(15 * time.Second))
	if err := sim.AMD.WriteAt(testNow.Add(15 * time.Second)); err != nil {
		t.Fatal(err)
	}
	out := scrapeText(t, e, 10*time.Second)
	check := func(family string, want float64, matchers ...string) {
		t.Helper()
		if got := sample(t, out, family, matchers...); math.Abs(got-want) > 1e-9 {
			t.Errorf("%s%v = %v, want %v", family, matchers, got, want)
		}
	}
	const gib = 1 << 30
	// GPU 0: the train pod's process is busy 0.5 all the time: 7.5e9 ns of
	// gfx in 15 s; gpu_busy_percent 50; sole owner, so its series carry the
	// pod. Power 140 + 0.5 × (750 - 140) = 445 W; energy from gpu_metrics,
	// (140 + 0.5 × 610) W × 5415 s since boot = 2 409 675 J.
	check("xpu_utilization_ratio", 0.5, `gpu="0"`, `pod="train"`)
	check("xpu_workload_utilization_ratio", 0.5, `gpu="0"`, `pod="train"`)
	check("xpu_workload_memory_used_bytes", 96*gib, `gpu="0"`, `pod="train"`)
	check("xpu_power_watts", 445, `gpu="0"`)
	check("xpu_energy_joules_total", 2409675, `gpu="0"`)
	// GPU 1: two replicas. fdinfo shares 0.3 and 0.15; gpu_busy_percent
	// round(45) = 0.45, split 0.45 × 0.3/0.45 = 0.3 and 0.45 × 0.15/0.45 =
	// 0.15; each pod allocated 1/2; no owner labels on the device.
	check("xpu_utilization_ratio", 0.45, `gpu="1"`)
	check("xpu_workload_utilization_ratio", 0.3, `gpu="1"`, `pod="infer-a"`)
	check("xpu_workload_utilization_ratio", 0.15, `gpu="1"`, `pod="infer-b"`)
	check("xpu_workload_allocated_devices", 0.5, `gpu="1"`, `pod="infer-a"`)
	check("xpu_workload_memory_used_bytes", 40*gib, `gpu="1"`, `pod="infer-a"`)
	check("xpu_workload_memory_used_bytes", 20*gib, `gpu="1"`, `pod="infer-b"`)
	check("xpu_ecc_errors_total", 3, `gpu="1"`, `type="corrected"`)
	// Its XGMI links, 100 KB a second each read and 50 written since boot:
	// at 5,400 s all 7 at 540,000 KB (read); at 5,415 s the firmware left
	// link 2 out (every other table), kept at 540,000: 6 × 541,500 +
	// 540,000 = 3,789,000 KB = 3.789e9 bytes; written, 6 × 270,750 +
	// 270,000 = 1,894,500 KB = 1.8945e9 bytes.
	check("xpu_amd_xgmi_data_bytes_total", 3.789e9, `gpu="1"`, `direction="read"`)
	check("xpu_amd_xgmi_data_bytes_total", 1.8945e9, `gpu="1"`, `direction="write"`)
	// GPU 2 in DPX: partition 0's four XCCs at 80 %, partition 1's at
	// 20 % (gpu_metrics xcp_stats); the GPU's busy is their mean, 0.5.
	check("xpu_utilization_ratio", 0.8, `gpu="2"`, `mig_profile="dpx"`, `mig_instance="0"`)
	check("xpu_utilization_ratio", 0.2, `gpu="2"`, `mig_profile="dpx"`, `mig_instance="1"`)
	check("xpu_utilization_ratio", 0.5, `gpu="2"`, `,uuid="3f61f84fa0000002"`)
	// Each partition is its pod's, named by the ROCm device plugin's IDs:
	// the GPU's PCI address for partition 0, amdgpu_xcp_0 for partition 1;
	// each holds half the GPU. The GPU counts its partitions' two owners, as
	// a GPU in MIG mode counts its instances', without their labels.
	check("xpu_utilization_ratio", 0.8, `mig_instance="0"`, `pod="part-a"`)
	check("xpu_workload_allocated_devices", 0.5, `mig_instance="0"`, `pod="part-a"`)
	check("xpu_workload_allocated_devices", 0.5, `mig_instance="1"`, `pod="part-b"`)
	// A fact of the partition, without its owner: 1 of 2 partitions.
	check("xpu_partition_share_ratio", 0.5, `,uuid="3f61f84fa0000002-xcp0"`)
	if regexp.MustCompile(`(?m)^xpu_partition_share_ratio\{[^}]*pod=`).MatchString(out) {
		t.Error("xpu_partition_share_ratio carries an owner")
	}
	check("xpu_workload_memory_used_bytes", 8*gib, `mig_instance="1"`, `pod="part-b"`)
	// part-a's process opened the GPU's primary node, card3: partition 0's.
	check("xpu_workload_memory_used_bytes", 16*gib, `mig_instance="0"`, `pod="part-a"`)
	check("xpu_device_owners", 2, `,uuid="3f61f84fa0000002"`)
	check("xpu_device_up", 1, `,uuid="3f61f84fa0000002"`)
	if !strings.Contains(out, "\nxpu_attribution_unknown_device_ids 0\n") {
		t.Error("a device plugin ID of the scenario was not understood")
	}
	// GPU 3: idle and unallocated, 140 W.
	check("xpu_utilization_ratio", 0, `gpu="3"`)
	check("xpu_power_watts", 140, `gpu="3"`)
	// Temperature limits, per sensor: the demo's MI300X temp2_crit 100000
	// and temp3_emergency 105000 m°C; GPU 3's kernel shows no emergency
	// limits, so it has crit alone.
	check("xpu_temperature_threshold_celsius", 100, `gpu="0"`, `sensor="junction"`, `threshold="crit"`)
	check("xpu_temperature_threshold_celsius", 105, `gpu="0"`, `sensor="memory"`, `threshold="emergency"`)
	check("xpu_temperature_threshold_celsius", 100, `gpu="3"`, `sensor="junction"`, `threshold="crit"`)
	if strings.Contains(out, `gpu="3",model="AMD Instinct MI300X OAM",sensor="junction",threshold="emergency"`) {
		t.Error("GPU 3 shows no temp2_emergency, yet its emergency limit is served")
	}
	golden(t, "amd-scenario", out)
}

// TestAMDLostPartitionedGPUKeepsItsPartitions: GPU 2 of the AMD scenario
// (DPX, partition 0 part-a's by the GPU's PCI address, partition 1
// part-b's by amdgpu_xcp_0) falls off the bus after two scrapes: its DRM
// nodes and KFD nodes leave sysfs. Its partitions stay, down, with their
// pods: each still holds 1/2 of the GPU, and the GPU has their 2 owners.
// They vanished, and part-a held the whole GPU (1), part-b's ID named
// nothing (found by probing). On a
// Slurm node GRES keep their places too.
func TestAMDLostPartitionedGPUKeepsItsPartitions(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "fixtures", "scenarios", "amd.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// Lost 5420 s after boot: after the scrape at 5415 s.
	gpu2 := "  - pci_bus_id: \"0000:38:00.0\"\n"
	if !bytes.Contains(b, []byte(gpu2)) {
		t.Fatal("amd.yaml has no GPU at 0000:38:00.0")
	}
	s, err := demo.Parse(bytes.Replace(b, []byte(gpu2), []byte(gpu2+"    faults: {lost_after: 5420s}\n"), 1))
	if err != nil {
		t.Fatal(err)
	}
	clk := &testClock{t: testNow}
	e, sim := newAttributedExporterSim(t, s, func(c *Config) { c.Now = clk.now })
	sim.AMD.Reset(testStart)
	var out string
	for _, after := range []time.Duration{0, 15 * time.Second, 30 * time.Second} {
		clk.set(testNow.Add(after))
		if err := sim.AMD.WriteAt(testNow.Add(after)); err != nil {
			t.Fatal(err)
		}
		out = scrapeText(t, e, 10*time.Second)
	}
	check, _ := oracleChecks(out)
	check(t, "xpu_device_up", 0, `,uuid="3f61f84fa0000002"`)
	check(t, "xpu_device_up", 0, `,uuid="3f61f84fa0000002-xcp0"`, `pod="part-a"`)
	check(t, "xpu_device_up", 0, `,uuid="3f61f84fa0000002-xcp1"`, `pod="part-b"`)
	check(t, "xpu_workload_allocated_devices", 0.5, `mig_instance="0"`, `pod="part-a"`)
	check(t, "xpu_workload_allocated_devices", 0.5, `mig_instance="1"`, `pod="part-b"`)
	check(t, "xpu_workload_allocated_devices", 1, `gpu="0"`, `pod="train"`)
	// The GPU's owners are its partitions' pods, known from the kubelet
	// whatever its processes: 2, as an NVIDIA GPU in MIG mode that is lost
	// keeps its instances' (it had none, found by probing: probe13-reconf
	// D2).
	check(t, "xpu_device_owners", 2, `,uuid="3f61f84fa0000002"`)
	if !strings.Contains(out, "\nxpu_attribution_unknown_device_ids 0\n") {
		t.Error("a device plugin ID names no device while its GPU is down")
	}
	// The lost GPU's processes still hold its nodes open: which of its
	// partitions each ran on is unknown, which is no doubt about the other
	// GPUs (found by probing: every GPU lost its split). GPU 1 splits as in
	// TestAMDScenarioOracles, 0.3 and 0.15, 40 and 20 GiB; idle GPU 3 has
	// no owner.
	check(t, "xpu_workload_utilization_ratio", 0.3, `gpu="1"`, `pod="infer-a"`)
	check(t, "xpu_workload_utilization_ratio", 0.15, `gpu="1"`, `pod="infer-b"`)
	check(t, "xpu_workload_memory_used_bytes", 40<<30, `gpu="1"`, `pod="infer-a"`)
	check(t, "xpu_device_owners", 0, `gpu="3"`)
	if regexp.MustCompile(`(?m)^xpu_workload_allocated_devices\{[^}]*pod="part-a"[^}]*\} 1$`).MatchString(out) {
		t.Error("part-a holds the whole GPU")
	}
	// Slurm's GRES (one per ROCm SMI device, partitions being devices:
	// Slurm gpu_rsmi.c) keep their places: GPU 0 → 0, GPU 1 → 1, GPU 2's
	// partitions → 2 and 3, GPU 3 → 4, not 3, which made a job of GRES 3
	// the owner of a GPU it never ran on (found by probing).
	snap := e.Snapshot(context.Background())
	got := map[string]int{}
	for d, i := range gresIndices(snap.Devices, false, false) {
		key := d.Index
		if d.MIG != nil {
			key += "/" + d.MIG.Instance
		}
		got[key] = i
	}
	if want := map[string]int{"0": 0, "1": 1, "2/0": 2, "2/1": 3, "3": 4}; !maps.Equal(got, want) {
		t.Errorf("GRES indices %v, want %v", got, want)
	}
}

// TestAMDPartitionsNotAllListed: GPU 2 of the AMD scenario is in DPX, and
// gpu_metrics says 2 partitions, but the KFD topology has partition 0's
// node alone (amdkfd adds them one at a time during a mode switch or a
// driver load). The partition found has no share (not 1, the whole GPU:
// found by probing), no utilization (its number is unknown), and Slurm's
// GRES from GPU 2 on are unknown. At the next whole listing all is back.
func TestAMDPartitionsNotAllListed(t *testing.T) {
	s := loadScenario(t, "amd")
	clk := &testClock{t: testNow}
	var logs syncbuf.Buffer
	e, sim := newAttributedExporterSim(t, s, func(c *Config) {
		c.Now = clk.now
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	sim.AMD.Reset(testStart)
	for _, after := range []time.Duration{0, 15 * time.Second} {
		clk.set(testNow.Add(after))
		if err := sim.AMD.WriteAt(testNow.Add(after)); err != nil {
			t.Fatal(err)
		}
		scrapeText(t, e, 10*time.Second)
	}
	// KFD nodes: 0 the CPU, 1 and 2 GPUs 0 and 1, 3 and 4 GPU 2's
	// partitions, 5 GPU 3. Partition 1's is not there yet.
	if err := os.RemoveAll(filepath.Join(sim.Sysfs, "class/kfd/kfd/topology/nodes/4")); err != nil {
		t.Fatal(err)
	}
	clk.set(testNow.Add(30 * time.Second))
	out := scrapeText(t, e, 10*time.Second)
	_, absent := oracleChecks(out)
	absent(t, "xpu_workload_allocated_devices", `pod="part-a"`)
	absent(t, "xpu_partition_share_ratio", `,uuid="3f61f84fa0000002-xcp0"`)
	absent(t, "xpu_utilization_ratio", `,uuid="3f61f84fa0000002-xcp0"`)
	// Two pods hold the GPU's two partitions; with partition 1 unlisted
	// the GPU's owners are unknown, not part-a's 1 (found by probing:
	// probe26 D4).
	absent(t, "xpu_device_owners", `,uuid="3f61f84fa0000002"`)
	got := map[string]int{}
	for d, i := range gresIndices(e.Snapshot(context.Background()).Devices, false, false) {
		got[d.Index] = i
	}
	if want := map[string]int{"0": 0, "1": 1}; !maps.Equal(got, want) {
		t.Errorf("GRES indices %v, want GPUs 0 and 1 alone", got)
	}

	clk.set(testNow.Add(45 * time.Second))
	if err := sim.AMD.WriteAt(testNow.Add(45 * time.Second)); err != nil {
		t.Fatal(err)
	}
	check, _ := oracleChecks(scrapeText(t, e, 10*time.Second))
	check(t, "xpu_workload_allocated_devices", 0.5, `pod="part-a"`)
	check(t, "xpu_workload_allocated_devices", 0.5, `pod="part-b"`)
	check(t, "xpu_device_owners", 2, `,uuid="3f61f84fa0000002"`)

	// Partition 1 leaves class/drm instead (its card, render node and
	// platform device), as a mode switch does: the GPU's owners are
	// unknown again, then 2 once it is back.
	moved := filepath.Join(t.TempDir(), "amdgpu_xcp_0")
	for _, f := range []string{"class/drm/card5", "class/drm/renderD132"} {
		if err := os.Remove(filepath.Join(sim.Sysfs, f)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Rename(filepath.Join(sim.Sysfs, "devices/platform/amdgpu_xcp_0"), moved); err != nil {
		t.Fatal(err)
	}
	clk.set(testNow.Add(60 * time.Second))
	_, absent = oracleChecks(scrapeText(t, e, 10*time.Second))
	absent(t, "xpu_device_owners", `,uuid="3f61f84fa0000002"`)
	if err := os.Rename(moved, filepath.Join(sim.Sysfs, "devices/platform/amdgpu_xcp_0")); err != nil {
		t.Fatal(err)
	}
	clk.set(testNow.Add(75 * time.Second))
	if err := sim.AMD.WriteAt(testNow.Add(75 * time.Second)); err != nil {
		t.Fatal(err)
	}
	check, _ = oracleChecks(scrapeText(t, e, 10*time.Second))
	check(t, "xpu_device_owners", 2, `,uuid="3f61f84fa0000002"`)
	// Said once each way (found by probing: probe13-reconf D3, nothing
	// logged while shares were left out).
	for msg, want := range map[string]int{
		`msg="AMD GPU's compute partitions are not all listed`:                                         2,
		`msg="AMD GPU's compute partitions all listed again" gpu=2 uuid=3f61f84fa0000002 partitions=2`: 2,
		`msg="AMD GPU's compute partition mode changed"`:                                               0,
	} {
		if n := strings.Count(logs.String(), msg); n != want {
			t.Errorf("%d lines %s, want %d:\n%s", n, msg, want, logs.String())
		}
	}
}

// TestAMDPartitionModeChangeLogged: a GPU switched from DPX to CPX, and
// back to SPX, is logged once at each switch, when its partitions are all
// listed; an unchanged GPU is not.
func TestAMDPartitionModeChangeLogged(t *testing.T) {
	var logs strings.Builder
	c := &amdCollector{logger: slog.New(slog.NewTextHandler(&logs, nil)), layouts: map[string]partLayout{}, partlyListed: map[string]bool{}}
	gpu := &Device{Index: "2", UUID: "3f61f84fa0000002"}
	byPCI := map[string]*Device{"0000:38:00.0": gpu}
	for _, l := range []partLayout{
		{profile: "dpx", ids: []string{"0000:38:00.0", "amdgpu_xcp_0"}},
		{profile: "dpx", ids: []string{"0000:38:00.0", "amdgpu_xcp_0"}},
		{profile: "cpx", ids: []string{"0000:38:00.0", "amdgpu_xcp_0", "amdgpu_xcp_1", "amdgpu_xcp_2", "amdgpu_xcp_3", "amdgpu_xcp_4", "amdgpu_xcp_5", "amdgpu_xcp_6"}},
		{},
	} {
		whole := map[string]partLayout{"0000:38:00.0": l}
		c.logPartitions(byPCI, whole)
		maps.Copy(c.layouts, whole)
	}
	want := `msg="AMD GPU's compute partition mode changed" gpu=2 uuid=3f61f84fa0000002 mode=cpx was=dpx partitions=8` + "\n" +
		`msg="AMD GPU's compute partition mode changed" gpu=2 uuid=3f61f84fa0000002 mode=spx was=cpx partitions=0`
	var got []string
	for line := range strings.SplitSeq(strings.TrimSpace(logs.String()), "\n") {
		_, msg, _ := strings.Cut(line, " level=INFO ")
		got = append(got, msg)
	}
	if strings.Join(got, "\n") != want {
		t.Errorf("logged:\n%s\nwant:\n%s", logs.String(), want)
	}
}

// TestAMDNoDeviceLogsOnce: a node without amdgpu (no class/drm, or only
// other drivers' cards) serves no AMD device, succeeds, and says so once.
func TestAMDNoDeviceLogsOnce(t *testing.T) {
	for name, sysfs := range map[string]string{"no sysfs": filepath.Join(t.TempDir(), "missing"), "BMC VGA only": t.TempDir()} {
		t.Run(name, func(t *testing.T) {
			if name == "BMC VGA only" {
				dev := filepath.Join(sysfs, "devices", "pci0000:00", "0000:02:00.0")
				if err := os.MkdirAll(dev, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dev, "vendor"), []byte("0x1a03\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.MkdirAll(filepath.Join(sysfs, "class", "drm", "card0"), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(dev, filepath.Join(sysfs, "class", "drm", "card0", "device")); err != nil {
					t.Fatal(err)
				}
			}
			var logs strings.Builder
			c, err := newAMDCollector(Config{Sysfs: sysfs, Procfs: t.TempDir(), Now: time.Now, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 3; i++ {
				devs, err := c.(*amdCollector).readDevices(context.Background(), moveScrape)
				if err != nil || len(devs) != 0 {
					t.Fatalf("scrape %d: %d devices, %v", i, len(devs), err)
				}
			}
			if n := strings.Count(logs.String(), "found no amdgpu device"); n != 1 {
				t.Errorf("%d log lines, want 1:\n%s", n, logs.String())
			}
		})
	}
}

// TestAMDLostGPUStaysDown: a GPU whose card leaves class/drm (it fell off
// the bus and the PCI core removed it) is reported down under its last
// identity; one that reads ENODEV/EIO is down "gone" the same way.
func TestAMDLostGPUStaysDown(t *testing.T) {
	tr := newAMDTree(t, map[string]string{"unique_id": "00000000000000bb\n", "product_name": "AMD Instinct MI300X OAM\n", "gpu_busy_percent": "10\n"})
	c := newAMDCollectorFor(t, tr, &fakeClock{t: testNow})
	devs, err := c.readDevices(context.Background(), moveScrape)
	if err != nil || len(devs) != 1 || !devs[0].Up {
		t.Fatalf("%d devices, %v", len(devs), err)
	}
	if err := os.Remove(filepath.Join(tr.sysfs, "class", "drm", "card0", "device")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(tr.sysfs, "class", "drm", "card0")); err != nil {
		t.Fatal(err)
	}
	devs, err = c.readDevices(context.Background(), moveScrape)
	if err != nil || len(devs) != 1 {
		t.Fatalf("after the loss: %d devices, %v", len(devs), err)
	}
	if d := devs[0]; d.Up || d.UUID != "00000000000000bb" || d.Index != "0" || d.Model != "AMD Instinct MI300X OAM" {
		t.Errorf("lost GPU %+v", d)
	}
}

// TestAMDIndicesStayWithTheirGPU: DRM hands out card minors at
// registration, so a GPU re-registered (a reset, a PCI rescan) may come
// back as another card. It must come back as itself, its index and uuid,
// not stay down as a ghost of its old card next to its live self; nor may
// the other GPUs be renumbered when one leaves or one arrives.
func TestAMDIndicesStayWithTheirGPU(t *testing.T) {
	gpu := func(uuid string) map[string]string {
		return map[string]string{"unique_id": uuid + "\n", "gpu_busy_percent": "10\n"}
	}
	tr := newAMDTree(t, gpu("00000000000000aa"))
	tr.gpu("card1", "0000:0d:00.0", gpu("00000000000000bb"))
	tr.gpu("card2", "0000:0e:00.0", gpu("00000000000000cc"))
	var logs bytes.Buffer
	c, err := newAMDCollector(Config{Sysfs: tr.sysfs, Procfs: tr.procs, Now: (&fakeClock{t: testNow}).now, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	check := func(step string, want map[string]string) {
		t.Helper()
		devs, err := c.(*amdCollector).readDevices(context.Background(), moveScrape)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, d := range devs {
			if _, dup := got[d.UUID]; dup {
				t.Errorf("%s: GPU %s served twice", step, d.UUID)
			}
			got[d.UUID] = d.Index + " " + map[bool]string{true: "up", false: "down"}[d.Up]
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: uuid → index, state %v, want %v", step, got, want)
		}
	}
	check("three cards", map[string]string{"00000000000000aa": "0 up", "00000000000000bb": "1 up", "00000000000000cc": "2 up"})
	tr.unregister("card1")
	check("card1 gone", map[string]string{"00000000000000aa": "0 up", "00000000000000bb": "1 down", "00000000000000cc": "2 up"})
	tr.gpu("card5", "0000:0d:00.0", gpu("00000000000000bb"))
	check("back as card5", map[string]string{"00000000000000aa": "0 up", "00000000000000bb": "1 up", "00000000000000cc": "2 up"})
	check("back as card5 again", map[string]string{"00000000000000aa": "0 up", "00000000000000bb": "1 up", "00000000000000cc": "2 up"})
	if n := strings.Count(logs.String(), `msg="AMD device is back" gpu=1 uuid=00000000000000bb card=card5 was=card1`); n != 1 {
		t.Errorf("%d lines say card1's GPU is back as card5, want 1:\n%s", n, logs.String())
	}
	// A new GPU takes the lowest index free; card0 leaving renumbers no one.
	tr.unregister("card0")
	tr.gpu("card6", "0000:0f:00.0", gpu("00000000000000dd"))
	check("card0 gone, a new GPU", map[string]string{"00000000000000aa": "0 down", "00000000000000bb": "1 up", "00000000000000cc": "2 up", "00000000000000dd": "3 up"})
	// DRM gives a re-registered GPU the lowest minor free (drm_minor_alloc,
	// xa_alloc): card2's GPU reset comes back as card0, the number of the
	// GPU that fell off the bus, which stays down under its index (it was
	// left out, its down state taken for card2's GPU's: probe13-reconf D1).
	logs.Reset()
	tr.unregister("card2")
	tr.gpu("card0", "0000:0e:00.0", gpu("00000000000000cc"))
	check("card2's GPU back as card0", map[string]string{"00000000000000aa": "0 down", "00000000000000bb": "1 up", "00000000000000cc": "2 up", "00000000000000dd": "3 up"})
	check("card2's GPU back as card0 again", map[string]string{"00000000000000aa": "0 down", "00000000000000bb": "1 up", "00000000000000cc": "2 up", "00000000000000dd": "3 up"})
	// Neither GPU changed state: card2's was never seen down, card0's
	// stays down (its down state was taken for card2's GPU coming back).
	if strings.Contains(logs.String(), `msg="AMD device is back"`) || strings.Contains(logs.String(), `msg="AMD device down"`) {
		t.Errorf("a GPU is logged back or down:\n%s", logs.String())
	}
	// The GPU that fell off comes back, as another card again.
	tr.gpu("card7", "0000:0c:00.0", gpu("00000000000000aa"))
	check("card0's GPU back as card7", map[string]string{"00000000000000aa": "0 up", "00000000000000bb": "1 up", "00000000000000cc": "2 up", "00000000000000dd": "3 up"})
}

// TestAMDGPUBackAtAnotherAddress: a PCI remove and rescan can give a GPU
// another bus number; unique_id, which amdgpu says "will persist from
// machine to machine" (amdgpu_pm.c, DOC: unique_id), names it still. It is
// the same GPU, back under its index, not a second device carrying its
// uuid next to its old self reported down for good (probe22-amdseq 03).
// Two boards whose firmware reports one unique_id are two GPUs: one of
// them leaving is not the other coming back.
func TestAMDGPUBackAtAnotherAddress(t *testing.T) {
	gpu := func(uuid string) map[string]string {
		return map[string]string{"unique_id": uuid + "\n", "gpu_busy_percent": "10\n"}
	}
	read := func(t *testing.T, c *amdCollector) map[string]string {
		t.Helper()
		devs, err := c.readDevices(context.Background(), moveScrape)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{} // gpu index → uuid, address, state
		for _, d := range devs {
			if _, dup := got[d.Index]; dup {
				t.Errorf("index %s served twice", d.Index)
			}
			got[d.Index] = d.UUID + " " + d.PCIBusID + " " + map[bool]string{true: "up", false: "down"}[d.Up]
		}
		return got
	}
	t.Run("one GPU re-enumerated", func(t *testing.T) {
		tr := newAMDTree(t, gpu("00000000000000aa"))
		tr.gpu("card1", "0000:0d:00.0", gpu("00000000000000bb"))
		tr.gpu("card2", "0000:0e:00.0", gpu("00000000000000cc"))
		var logs bytes.Buffer
		c := newAMDCollectorFor(t, tr, &fakeClock{t: testNow})
		c.logger = slog.New(slog.NewTextHandler(&logs, nil))
		read(t, c)
		tr.unregister("card1")
		read(t, c)
		tr.gpu("card3", "0000:5d:00.0", gpu("00000000000000bb"))
		want := map[string]string{
			"0": "00000000000000aa 0000:0c:00.0 up",
			"1": "00000000000000bb 0000:5d:00.0 up",
			"2": "00000000000000cc 0000:0e:00.0 up",
		}
		for _, step := range []string{"back at 0000:5d:00.0", "a scrape later"} {
			if got := read(t, c); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%s: index → uuid, address, state\n%v\nwant\n%v", step, got, want)
			}
		}
		if n := strings.Count(logs.String(), `msg="AMD device is back" gpu=1 uuid=00000000000000bb card=card3 was=card1`); n != 1 {
			t.Errorf("%d lines say card1's GPU is back as card3, want 1:\n%s", n, logs.String())
		}
		// Its new address is its name from now on: leaving again, it is
		// reported down there, under its index.
		tr.unregister("card3")
		if got := read(t, c)["1"]; got != "00000000000000bb 0000:5d:00.0 down" {
			t.Errorf("after it left again, index 1 is %q, want it down at 0000:5d:00.0", got)
		}
	})
	t.Run("RAS errors a /devices read saw before the move", func(t *testing.T) {
		ras := func(ue string) map[string]string {
			return map[string]string{"unique_id": "00000000000000bb\n", "ras/umc_err_count": "ue: " + ue + "\nce: 0\n"}
		}
		tr := newAMDTree(t, ras("1"))
		c := newAMDCollectorFor(t, tr, &fakeClock{t: testNow})
		read(t, c)
		tr.write(filepath.Join(tr.sysfs, "devices", "pci0000:00", "0000:0c:00.0", "ras", "umc_err_count"), "ue: 3\nce: 0\n")
		if _, err := c.readDevices(context.Background(), moveNone); err != nil {
			t.Fatal(err)
		}
		tr.unregister("card0")
		tr.gpu("card1", "0000:5d:00.0", ras("3"))
		devs, err := c.readDevices(context.Background(), moveScrape)
		if err != nil {
			t.Fatal(err)
		}
		// Seen at the old address: 3 − 1 = 2 uncorrected umc errors, served
		// at the new one (its own count, 3, is its baseline there).
		out := updateText(t, c, &Snapshot{Devices: devs})
		if want := `xpu_amd_ras_events_total{block="umc",gpu="0",type="uncorrected",uuid="00000000000000bb",vendor="amd"} 2` + "\n"; !strings.Contains(out, want) {
			t.Errorf("want %s in\n%s", want, grepLines(out, "ras_events"))
		}
	})
	t.Run("two boards with one unique_id", func(t *testing.T) {
		tr := newAMDTree(t, gpu("00000000000000aa"))
		tr.gpu("card1", "0000:0d:00.0", gpu("00000000000000aa"))
		c := newAMDCollectorFor(t, tr, &fakeClock{t: testNow})
		read(t, c)
		tr.unregister("card1")
		want := map[string]string{
			"0": "00000000000000aa 0000:0c:00.0 up",
			"1": "00000000000000aa 0000:0d:00.0 down",
		}
		if got := read(t, c); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("index → uuid, address, state\n%v\nwant\n%v", got, want)
		}
		// One comes back at a new address: either board, so neither is
		// taken for it, while board 0 is listed (review23 F3) and, at
		// every run alike, when both had left (it was Go's map order).
		tr.gpu("card2", "0000:5d:00.0", gpu("00000000000000aa"))
		want["2"] = "00000000000000aa 0000:5d:00.0 up"
		if got := read(t, c); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("one back at a new address, board 0 listed: index → uuid, address, state\n%v\nwant\n%v", got, want)
		}
		for range 20 {
			tr := newAMDTree(t, gpu("00000000000000aa"))
			tr.gpu("card1", "0000:0d:00.0", gpu("00000000000000aa"))
			c := newAMDCollectorFor(t, tr, &fakeClock{t: testNow})
			read(t, c)
			tr.unregister("card0")
			tr.unregister("card1")
			tr.gpu("card2", "0000:5d:00.0", gpu("00000000000000aa"))
			want := map[string]string{
				"0": "00000000000000aa 0000:0c:00.0 down",
				"1": "00000000000000aa 0000:0d:00.0 down",
				"2": "00000000000000aa 0000:5d:00.0 up",
			}
			if got := read(t, c); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("both left, one back at a new address: index → uuid, address, state\n%v\nwant\n%v", got, want)
			}
		}
	})
}

// TestAMDRASOfTwoBoardsWithOneUniqueID: unique_id is the board firmware's;
// two GPUs that report the same one keep their RAS counts apart (by PCI
// address), so counts that never change make no events. Keyed by uuid, the
// counts 5 and 100 alternated in one baseline: +95 at every second read.
func TestAMDRASOfTwoBoardsWithOneUniqueID(t *testing.T) {
	gpu := func(ce string) map[string]string {
		return map[string]string{"unique_id": "1111222233334444\n", "ras/umc_err_count": "ue: 0\nce: " + ce + "\n"}
	}
	tr := newAMDTree(t, gpu("5"))
	tr.gpu("card1", "0000:0d:00.0", gpu("100"))
	c := newAMDCollectorFor(t, tr, &fakeClock{t: testNow})
	for i := range 4 {
		devs, err := c.readDevices(context.Background(), moveScrape)
		if err != nil || len(devs) != 2 {
			t.Fatalf("read %d: %d devices, %v", i, len(devs), err)
		}
		if out := updateText(t, c, &Snapshot{Devices: devs}); strings.Contains(out, "xpu_amd_ras_events_total") {
			t.Fatalf("read %d: RAS events from counts that never changed:\n%s", i, grepLines(out, "ras_events"))
		}
	}
}

// TestAMDReadErrorsCounted: a file that exists but does not parse is
// counted by name (the hwmon directory's probe-order number left out) and
// its series omitted, never served as 0; the rest of the GPU is served.
func TestAMDReadErrorsCounted(t *testing.T) {
	tr := newAMDTree(t, map[string]string{
		"unique_id":                 "00000000000000cc\n",
		"gpu_busy_percent":          "busy\n",
		"mem_info_vram_total":       "205822885888\n",
		"hwmon/hwmon7/temp2_input":  "hot\n",
		"hwmon/hwmon7/temp2_label":  "junction\n",
		"hwmon/hwmon7/power1_input": "312000000\n",
	})
	e := newAMDTestExporter(t, tr.sysfs, tr.procs, func() time.Time { return testNow })
	out := scrapeText(t, e, 5*time.Second)
	for _, c := range []struct {
		family   string
		want     float64
		matchers []string
	}{
		{"xpu_amd_read_errors_total", 1, []string{`file="gpu_busy_percent"`}},
		{"xpu_amd_read_errors_total", 1, []string{`file="hwmon/temp2_input"`}},
		{"xpu_power_watts", 312, []string{`uuid="00000000000000cc"`}},
		{"xpu_device_up", 1, []string{`uuid="00000000000000cc"`}},
	} {
		if got := sample(t, out, c.family, c.matchers...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.family, c.matchers, got, c.want)
		}
	}
	for _, family := range []string{"xpu_utilization_ratio", "xpu_temperature_celsius"} {
		if strings.Contains(out, "\n"+family+"{") {
			t.Errorf("%s served from a file that did not parse", family)
		}
	}
}

// TestAMDFdinfoClientOfAPartitionedGPU: a client found through fdinfo alone
// (its process's fd links unreadable) is known by its GPU's PCI address,
// not by the render node of the partition it opened: on a GPU in CPX or
// DPX mode it could be any partition's, so their lists are partial rather
// than the client dropped unseen.
func TestAMDFdinfoClientOfAPartitionedGPU(t *testing.T) {
	tr := newAMDTree(t, map[string]string{"unique_id": "00000000000000aa\n"})
	tr.write(filepath.Join(tr.procs, "300", "fd"), "")
	tr.write(filepath.Join(tr.procs, "300", "fdinfo", "7"),
		"drm-driver:\tamdgpu\ndrm-client-id:\t18\ndrm-pdev:\t0000:0c:00.0\ndrm-resident-vram:\t2048 MiB\n")
	c := newAMDCollectorFor(t, tr, &fakeClock{t: testNow})
	parent := &Device{Vendor: "amd", Up: true, HasMIG: true, PCIBusID: "0000:0c:00.0", vendorData: &amdData{}}
	parts := []*Device{
		{Vendor: "amd", Up: true, PCIBusID: "0000:0c:00.0", vendorData: &amdPartition{amdData: &amdData{}, renderMinor: 128}},
		{Vendor: "amd", Up: true, PCIBusID: "0000:0c:00.0", vendorData: &amdPartition{amdData: &amdData{}, renderMinor: 129}},
	}
	c.attachProcesses(c.scanProcesses(context.Background()), append([]*Device{parent}, parts...), moveScrape)
	for i, d := range parts {
		if !d.ProcessesPartial || len(d.Processes) != 0 {
			t.Errorf("partition %d: partial %v, processes %+v", i, d.ProcessesPartial, d.Processes)
		}
	}
	// The GPU has no processes of its own: its owners are its
	// partitions', unknown through them.
	if parent.ProcessesPartial {
		t.Error("the partitioned GPU's own process list is partial")
	}
}

// TestAMDNewClientAfterACompleteScan: a client that was not there when the
// previous scan read every process opened its DRM file since, so all its
// engine time is the window's: the split is made at once, not a window
// later (short jobs would otherwise never be split).
func TestAMDNewClientAfterACompleteScan(t *testing.T) {
	tr := newAMDTree(t, map[string]string{"unique_id": "00000000000000aa\n", "gpu_busy_percent": "60\n"})
	tr.fd(200, 5, amdgpuClient("17", "1024", "1000000000"))
	clk := &fakeClock{t: testNow}
	c := newAMDCollectorFor(t, tr, clk)
	ctx := context.Background()
	if _, err := c.readDevices(ctx, moveScrape); err != nil {
		t.Fatal(err)
	}
	// Two seconds on, client 17 at 1.6e9 ns: (1.6e9 - 1.0e9) / 2e9 = 0.3;
	// client 19, new, at 0.2e9 ns: 0.2e9 / 2e9 = 0.1. gpu_busy_percent's
	// 60 is of the moment: the parts are the window's, 0.3 and 0.1 (0.4 in
	// all, within the device); each client has 1024 MiB = 1 GiB.
	clk.t = clk.t.Add(2 * time.Second)
	tr.fd(200, 5, amdgpuClient("17", "1024", "1600000000"))
	tr.fd(400, 3, amdgpuClient("19", "1024", "200000000"))
	devs, err := c.readDevices(ctx, moveScrape)
	if err != nil || len(devs) != 1 {
		t.Fatalf("%d devices, %v", len(devs), err)
	}
	d := devs[0]
	sharedByPods(d, []uint32{200}, []uint32{400})
	const gib = 1 << 30
	checkUsage(t, d.Usage(), []usageWant{{some(1 * gib), some(0.3)}, {some(1 * gib), some(0.1)}})
}

// TestAMDPrimaryNodeAndUntrustworthyClients: a client on the primary node
// (/dev/dri/card0) is a client like any other, and a client whose engine
// time cannot be this window's (a new one busier than the window, a
// counter that went backwards) leaves the utilization split out rather
// than taking the device or counting as idle.
func TestAMDPrimaryNodeAndUntrustworthyClients(t *testing.T) {
	tr := newAMDTree(t, map[string]string{"unique_id": "00000000000000aa\n", "gpu_busy_percent": "60\n"})
	clk := &fakeClock{t: testNow}
	c := newAMDCollectorFor(t, tr, clk)
	const gib = 1 << 30
	scrape := func(step string, want []usageWant) {
		t.Helper()
		devs, err := c.readDevices(context.Background(), moveScrape)
		if err != nil || len(devs) != 1 {
			t.Fatalf("%s: %d devices, %v", step, len(devs), err)
		}
		sharedByPods(devs[0], []uint32{200}, []uint32{300, 400})
		t.Run(step, func(t *testing.T) { checkUsage(t, devs[0].Usage(), want) })
		clk.t = clk.t.Add(2 * time.Second)
	}
	tr.fd(200, 5, amdgpuClient("17", "1024", "1000000000"))
	tr.fdOn(300, 4, "/dev/dri/card0", amdgpuClient("13", "1024", "2000000000"))
	scrape("first scan", []usageWant{{some(gib), nil}, {some(gib), nil}})
	// 2 s on: 17 (1.6e9 - 1.0e9) / 2e9 = 0.3, 13 on card0 (2.4e9 - 2.0e9) /
	// 2e9 = 0.2; 0.5 in all, within the device: the parts are 0.3 and 0.2
	// (the device's 60 % is of the moment).
	tr.fd(200, 5, amdgpuClient("17", "1024", "1600000000"))
	tr.fdOn(300, 4, "/dev/dri/card0", amdgpuClient("13", "1024", "2400000000"))
	scrape("a primary-node client", []usageWant{{some(gib), some(0.3)}, {some(gib), some(0.2)}})
	// Client 21 appears after a complete scan with 1e11 ns, 50 times the
	// 2e9 ns window: it ran before out of sight (it would have taken the
	// whole 0.6). Memory stands: b holds 13's and 21's, 2 GiB.
	tr.fd(200, 5, amdgpuClient("17", "1024", "2000000000"))
	tr.fdOn(300, 4, "/dev/dri/card0", amdgpuClient("13", "1024", "2600000000"))
	tr.fd(400, 3, amdgpuClient("21", "1024", "100000000000"))
	scrape("a new client busier than the window", []usageWant{{some(gib), nil}, {some(2 * gib), nil}})
	// Now 21 has a baseline: 17 0.2e9 / 2e9 = 0.1, 13 0.2e9 / 2e9 = 0.1,
	// 21 0.4e9 / 2e9 = 0.2; a 0.1, b 0.1 + 0.2 = 0.3.
	tr.fd(200, 5, amdgpuClient("17", "1024", "2200000000"))
	tr.fdOn(300, 4, "/dev/dri/card0", amdgpuClient("13", "1024", "2800000000"))
	tr.fd(400, 3, amdgpuClient("21", "1024", "100400000000"))
	scrape("the new client's next window", []usageWant{{some(gib), some(0.1)}, {some(2 * gib), some(0.3)}})
	// 13 goes back to 1e9: its share is unknown, not 0.
	tr.fd(200, 5, amdgpuClient("17", "1024", "2400000000"))
	tr.fdOn(300, 4, "/dev/dri/card0", amdgpuClient("13", "1024", "1000000000"))
	tr.fd(400, 3, amdgpuClient("21", "1024", "100600000000"))
	scrape("a counter that went backwards", []usageWant{{some(gib), nil}, {some(2 * gib), nil}})
}

// TestAMDClientNamedByItsNodeAlone: drm-pdev is optional in the kernel's
// list of fdinfo keys; a client without it is its GPU's by the DRM node its
// fd is open on (renderD128 here, card0 for the primary node), not lost.
func TestAMDClientNamedByItsNodeAlone(t *testing.T) {
	tr := newAMDTree(t, map[string]string{"unique_id": "00000000000000aa\n", "gpu_busy_percent": "60\n"})
	noPdev := func(id, mib string) string {
		return "drm-driver:\tamdgpu\ndrm-client-id:\t" + id + "\ndrm-resident-vram:\t" + mib + " MiB\n"
	}
	tr.fd(200, 5, noPdev("17", "1024"))
	tr.fdOn(300, 4, "/dev/dri/card0", noPdev("13", "2048"))
	c := newAMDCollectorFor(t, tr, &fakeClock{t: testNow})
	devs, err := c.readDevices(context.Background(), moveScrape)
	if err != nil || len(devs) != 1 {
		t.Fatalf("%d devices, %v", len(devs), err)
	}
	sharedByPods(devs[0], []uint32{200}, []uint32{300})
	const gib = 1 << 30
	checkUsage(t, devs[0].Usage(), []usageWant{{some(1 * gib), nil}, {some(2 * gib), nil}})
}

// TestAMDReadErrorsLoggedOnChange: a file that stops parsing is named in
// one warning with why, not one a scrape, and its return in one line.
func TestAMDReadErrorsLoggedOnChange(t *testing.T) {
	tr := newAMDTree(t, map[string]string{"unique_id": "00000000000000aa\n", "gpu_busy_percent": "12a\n"})
	var logs bytes.Buffer
	c, err := newAMDCollector(Config{Sysfs: tr.sysfs, Procfs: tr.procs, Now: (&fakeClock{t: testNow}).now, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	read := func() {
		t.Helper()
		if _, err := c.(*amdCollector).readDevices(context.Background(), moveScrape); err != nil {
			t.Fatal(err)
		}
	}
	read()
	tr.write(filepath.Join(tr.sysfs, "devices", "pci0000:00", "0000:0c:00.0", "gpu_busy_percent"), "13b\n")
	read()
	if n := strings.Count(logs.String(), `msg="amdgpu file cannot be read; its readings are left out (xpu_amd_read_errors_total)" card=card0 file=gpu_busy_percent`); n != 1 {
		t.Errorf("%d warnings for two malformed reads, want 1:\n%s", n, logs.String())
	}
	tr.write(filepath.Join(tr.sysfs, "devices", "pci0000:00", "0000:0c:00.0", "gpu_busy_percent"), "14\n")
	read()
	read()
	if n := strings.Count(logs.String(), `msg="amdgpu file reads again" card=card0 file=gpu_busy_percent`); n != 1 {
		t.Errorf("%d lines for the file's return, want 1:\n%s", n, logs.String())
	}
}

// scrapeOneAMD reads a one-GPU tree at testNow + at, as a scrape moving
// the window does.
func scrapeOneAMD(t *testing.T, c *amdCollector, clk *fakeClock) func(at time.Duration) *Device {
	return func(at time.Duration) *Device {
		t.Helper()
		clk.t = testNow.Add(at)
		devs, err := c.readDevices(context.Background(), moveScrape)
		if err != nil || len(devs) != 1 {
			t.Fatalf("scrape at %v: %d devices, %v", at, len(devs), err)
		}
		return devs[0]
	}
}

// TestAMDClosedClientIDReused: TestAMDClientClosedMidWindow where the
// closed client's ID is given to a new file of another process. Pod b's
// busy client 18 (PID 300) closes with its process between 2 s and 4 s;
// PID 400 opens a file that gets ID 18 again, 0.1e9 ns by 4 s. The new
// file is a new client (amd.Reused), and the old one closed: PID 300
// exited with its utilization unknown, and the split is left out, not
// served as b's 0.1e9 / 2e9 = 0.05 alone for a window in which 300 ran
// until it closed (review13 R13-2).
func TestAMDClosedClientIDReused(t *testing.T) {
	tr := newAMDTree(t, busyMI300X())
	clk := &fakeClock{t: testNow}
	c := newAMDCollectorFor(t, tr, clk)
	scrape := scrapeOneAMD(t, c, clk)
	tr.fd(200, 5, amdgpuClient("17", "1024", "0"))
	tr.fd(300, 5, amdgpuClient("18", "2048", "0"))
	scrape(0)
	tr.fd(200, 5, amdgpuClient("17", "1024", "400000000"))
	tr.fd(300, 5, amdgpuClient("18", "2048", "600000000"))
	scrape(2 * time.Second)
	tr.fd(200, 5, amdgpuClient("17", "1024", "800000000"))
	if err := os.RemoveAll(filepath.Join(tr.procs, "300")); err != nil {
		t.Fatal(err)
	}
	tr.fd(400, 5, amdgpuClient("18", "16", "100000000"))
	d := scrape(4 * time.Second)
	if len(d.Exited) != 1 || d.Exited[0].PID != 300 || d.Exited[0].Utilization != nil {
		t.Errorf("exited %+v; want PID 300, its utilization unknown", d.Exited)
	}
	sharedByPods(d, []uint32{200}, []uint32{300, 400})
	checkUsage(t, d.Usage(), []usageWant{{some(1 << 30), nil}, {some(16 << 20), nil}})
}

// TestAMDClientClosedMidWindow: fdinfo ends with its file, so a client that
// closes between two scrapes leaves its last part of the window unknown.
// One busy in the previous window makes its process's utilization unknown
// (an exited process here), and the split is left out rather than its time
// divided among the clients still open; one idle before is taken to have
// stayed idle.
func TestAMDClientClosedMidWindow(t *testing.T) {
	tr := newAMDTree(t, busyMI300X())
	clk := &fakeClock{t: testNow}
	c := newAMDCollectorFor(t, tr, clk)
	scrape := func(at time.Duration, a, b, idle string) *Device {
		t.Helper()
		clk.t = testNow.Add(at)
		tr.fd(200, 5, amdgpuClient("17", "1024", a))
		if b != "" {
			tr.fd(300, 5, amdgpuClient("18", "2048", b))
		} else {
			os.RemoveAll(filepath.Join(tr.procs, "300")) // pod b's process exited
		}
		if idle != "" {
			tr.fd(400, 5, amdgpuClient("19", "16", idle))
		} else {
			os.RemoveAll(filepath.Join(tr.procs, "400")) // a tool closed its file
		}
		devs, err := c.readDevices(context.Background(), moveScrape)
		if err != nil || len(devs) != 1 {
			t.Fatalf("scrape at %v: %d devices, %v", at, len(devs), err)
		}
		return devs[0]
	}
	scrape(0, "0", "0", "0")
	// 2 s later: a 0.2 (0.4e9 ns of 2e9), b 0.3 (0.6e9), the tool 0.
	d := scrape(2*time.Second, "400000000", "600000000", "0")
	if len(d.Exited) != 0 {
		t.Fatalf("exited %+v before anything closed", d.Exited)
	}
	// Then b's and the tool's clients close. a alone is open at 4 s (0.2
	// again); b may have run until it closed.
	d = scrape(4*time.Second, "800000000", "", "")
	if len(d.Processes) != 1 || d.Processes[0].PID != 200 || d.Processes[0].Utilization == nil || math.Abs(*d.Processes[0].Utilization-0.2) > 1e-12 {
		t.Fatalf("processes %+v, want pid 200 at 0.2", d.Processes)
	}
	if len(d.Exited) != 1 || d.Exited[0].PID != 300 || d.Exited[0].Utilization != nil {
		t.Fatalf("exited %+v, want pid 300 with its utilization unknown (the idle tool not at all)", d.Exited)
	}
	// Shared by pods a and b: the device's 0.6 was split 0.6 × 0.2/0.2,
	// all of it a's; now neither part is known. Memory: a's 1 GiB, b's
	// exited process none.
	sharedByPods(d, []uint32{200}, []uint32{300})
	checkUsage(t, d.Usage(), []usageWant{{mem: some(1 << 30)}, {mem: some(0)}})
	// Had b been a's own worker, a as sole owner keeps the device's 0.6.
	d.Claims, d.ProcessOwner = d.Claims[:1], map[uint32]int{200: 0, 300: 0}
	d.OwnersAllocated = true
	checkUsage(t, d.Usage(), []usageWant{{some(1 << 30), some(0.6)}})
}

// TestAMDClosedClientOfAReusedPID: a client busy in the previous window
// that closed since makes its process's utilization unknown
// (TestAMDClientClosedMidWindow), but only if that process is still the
// one behind the PID. The kernel gives a PID out again once its PID space
// wraps around; /proc/<pid>/stat field 22, "starttime: The time the process
// started after system boot" (proc(5)), tells the new process from the one
// that held the closed client. The new process opened its own client after
// a scan that read every process, so that client counts from 0, as it does
// under a fresh PID. The closed client's part of the window stays unknown,
// and so does its owner, whom the PID names no more: the split is left
// out, a sole owner's too.
//
// Window 1, 0 to 2 s: PID 100's client 17 gfx 0 → 0.4e9 ns, 0.4e9 / 2e9 =
// 0.2; PID 200's client 20 gfx 0 → 1.0e9 ns, 1.0e9 / 2e9 = 0.5 (busy).
// Window 2, 2 to 4 s: client 17 0.4e9 → 0.8e9 ns, 0.4e9 / 2e9 = 0.2; client
// 20 has closed with its process; the new process's client 40, unseen at
// 2 s, 0 → 0.3e9 ns: 0.3e9 / 2e9 = 0.15.
func TestAMDClosedClientOfAReusedPID(t *testing.T) {
	const gib, mib = 1 << 30, 1 << 20
	for _, tc := range []struct {
		name string
		// pid and start are the process holding client 40, startB the
		// start of the one that held client 20 as PID 200; 0 writes no
		// stat file.
		pid, start, startB int
		util               *float64
		exited             []uint32
		usage, soleUsage   []usageWant
	}{
		{
			name: "PID reused", pid: 200, start: 9000, startB: 1200, util: some(0.15),
			// The new process has 512 MiB, pod a 1 GiB.
			usage:     []usageWant{{mem: some(gib)}, {mem: some(512 * mib)}},
			soleUsage: []usageWant{{mem: some(gib + 512*mib)}},
		},
		{name: "a fresh PID", pid: 400, start: 9000, startB: 1200, util: some(0.15), exited: []uint32{200}},
		// The process that held client 20 opened client 40: what it ran on
		// client 20 until it closed it is unknown (f61e280).
		{name: "the same process", pid: 200, start: 1200, startB: 1200},
		{name: "no start time to tell", pid: 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := newAMDTree(t, busyMI300X())
			stat := func(pid, start int) {
				if start != 0 {
					tr.write(filepath.Join(tr.procs, strconv.Itoa(pid), "stat"),
						fmt.Sprintf("%d (python3) S 1 %d %d 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 %d 0 0\n", pid, pid, pid, start))
				}
			}
			clk := &fakeClock{t: testNow}
			c := newAMDCollectorFor(t, tr, clk)
			scrape := scrapeOneAMD(t, c, clk)
			stat(200, tc.startB)
			tr.fd(100, 5, amdgpuClient("17", "1024", "0"))
			tr.fd(200, 3, amdgpuClient("20", "2048", "0"))
			scrape(0)
			tr.fd(100, 5, amdgpuClient("17", "1024", "400000000"))
			tr.fd(200, 3, amdgpuClient("20", "2048", "1000000000"))
			scrape(2 * time.Second)
			tr.fd(100, 5, amdgpuClient("17", "1024", "800000000"))
			if err := os.RemoveAll(filepath.Join(tr.procs, "200")); err != nil {
				t.Fatal(err)
			}
			stat(tc.pid, tc.start)
			tr.fd(tc.pid, 4, amdgpuClient("40", "512", "300000000"))
			d := scrape(4 * time.Second)

			if len(d.Processes) != 2 || d.Processes[0].PID != 100 || d.Processes[1].PID != uint32(tc.pid) {
				t.Fatalf("processes %+v, want 100 and %d", d.Processes, tc.pid)
			}
			if u := d.Processes[0].Utilization; u == nil || math.Abs(*u-0.2) > 1e-12 {
				t.Errorf("pid 100 utilization %v, want 0.2", deref(u))
			}
			switch u := d.Processes[1].Utilization; {
			case (u == nil) != (tc.util == nil):
				t.Errorf("pid %d utilization %v, want %v", tc.pid, deref(u), deref(tc.util))
			case u != nil && math.Abs(*u-*tc.util) > 1e-12:
				t.Errorf("pid %d utilization %v, want %v", tc.pid, *u, *tc.util)
			}
			var exited []uint32
			for _, p := range d.Exited {
				if p.Utilization != nil {
					t.Errorf("exited pid %d with utilization %v, want unknown", p.PID, *p.Utilization)
				}
				exited = append(exited, p.PID)
			}
			if !slices.Equal(exited, tc.exited) {
				t.Errorf("exited %v, want %v", exited, tc.exited)
			}
			if tc.usage == nil {
				return
			}
			sharedByPods(d, []uint32{100}, []uint32{uint32(tc.pid)})
			checkUsage(t, d.Usage(), tc.usage)
			d.Claims, d.ProcessOwner = d.Claims[:1], map[uint32]int{100: 0, uint32(tc.pid): 0}
			d.OwnersAllocated = true
			checkUsage(t, d.Usage(), tc.soleUsage)
		})
	}
}

// TestAMDKFDWorkLeavesTheSplitOut: ROCm work runs on KFD user-mode queues,
// which the kernel does not schedule, so a KFD process's fdinfo shows its
// VRAM and none of that work (amdgpu_top issue #49). An MI300X 90 % busy
// is shared by pod a's PID 200 (8 GiB, no engine line) and pod b's PID 300
// (256 MiB; gfx 1,000,000,000 → 1,100,000,000 ns over the 2 s window:
// 100,000,000 / 2,000,000,000 = 0.05). Split by fdinfo alone, pod b would
// get 0.9 × 0.05 / 0.05 = 0.9 and pod a 0. Memory splits all the same:
// 8 GiB and 256 MiB.
func TestAMDKFDWorkLeavesTheSplitOut(t *testing.T) {
	const gib, mib = 1 << 30, 1 << 20
	for _, tc := range []struct {
		name string
		kfd  func(tr *amdTree)
		want []usageWant
	}{
		{
			// No KFD driver: PID 200 submits nothing, so it is idle, and
			// pod b's (1.1e9 - 1.0e9) / 2e9 = 0.05 is all the work fdinfo
			// saw in the window: a 0, b 0.05 (the device's 90 % is of
			// the moment, not the window's).
			name: "no amdkfd",
			kfd:  func(*amdTree) {},
			want: []usageWant{{some(8 * gib), some(0)}, {some(256 * mib), some(0.05)}},
		},
		{
			name: "PID 200 is a KFD process",
			kfd: func(tr *amdTree) {
				tr.write(filepath.Join(tr.sysfs, "class/kfd/kfd/proc/200/pasid"), "32769\n")
			},
			want: []usageWant{{some(8 * gib), nil}, {some(256 * mib), nil}},
		},
		{
			// amdkfd loaded, its process list unreadable: any process
			// may have KFD work.
			name: "KFD processes unknown",
			kfd: func(tr *amdTree) {
				tr.write(filepath.Join(tr.sysfs, "class/kfd/kfd/topology/generation_id"), "1\n")
			},
			want: []usageWant{{some(8 * gib), nil}, {some(256 * mib), nil}},
		},
		{
			// Another process's KFD work is not these two's: a 0, b 0.05.
			name: "another KFD process",
			kfd: func(tr *amdTree) {
				tr.write(filepath.Join(tr.sysfs, "class/kfd/kfd/proc/4242/pasid"), "32770\n")
			},
			want: []usageWant{{some(8 * gib), some(0)}, {some(256 * mib), some(0.05)}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := busyMI300X()
			files["gpu_busy_percent"] = "90\n"
			tr := newAMDTree(t, files)
			tc.kfd(tr)
			hip := "drm-driver:\tamdgpu\ndrm-client-id:\t21\ndrm-pdev:\t0000:0c:00.0\n" +
				"drm-total-vram:\t8192 MiB\ndrm-resident-vram:\t8192 MiB\n"
			tr.fd(200, 5, hip)
			tr.fd(300, 6, amdgpuClient("22", "256", "1000000000"))
			clk := &fakeClock{t: testNow}
			c := newAMDCollectorFor(t, tr, clk)
			if _, err := c.readDevices(context.Background(), moveScrape); err != nil {
				t.Fatal(err)
			}
			clk.t = testNow.Add(2 * time.Second)
			tr.fd(300, 6, amdgpuClient("22", "256", "1100000000"))
			devs, err := c.readDevices(context.Background(), moveScrape)
			if err != nil || len(devs) != 1 {
				t.Fatalf("%d devices, %v", len(devs), err)
			}
			sharedByPods(devs[0], []uint32{200}, []uint32{300})
			checkUsage(t, devs[0].Usage(), tc.want)
		})
	}
}

// TestAMDKFDSoleOwnerKeepsTheDevice: a GPU one pod holds is that pod's,
// KFD work or not: its utilization is the device's 90 %.
func TestAMDKFDSoleOwnerKeepsTheDevice(t *testing.T) {
	files := busyMI300X()
	files["gpu_busy_percent"] = "90\n"
	tr := newAMDTree(t, files)
	tr.write(filepath.Join(tr.sysfs, "class/kfd/kfd/proc/200/pasid"), "32769\n")
	tr.fd(200, 5, "drm-driver:\tamdgpu\ndrm-client-id:\t21\ndrm-pdev:\t0000:0c:00.0\ndrm-resident-vram:\t8192 MiB\n")
	clk := &fakeClock{t: testNow}
	c := newAMDCollectorFor(t, tr, clk)
	if _, err := c.readDevices(context.Background(), moveScrape); err != nil {
		t.Fatal(err)
	}
	clk.t = testNow.Add(2 * time.Second)
	devs, err := c.readDevices(context.Background(), moveScrape)
	if err != nil || len(devs) != 1 {
		t.Fatalf("%d devices, %v", len(devs), err)
	}
	d := devs[0]
	d.Claims = []attribution.Claim{{Owner: attribution.Owner{Kind: attribution.Kubernetes, Namespace: "ml", Pod: "a", Container: "main"}, Share: 1}}
	d.ProcessOwner = map[uint32]int{200: 0}
	d.OwnersAllocated = true
	checkUsage(t, d.Usage(), []usageWant{{some(8 << 30), some(0.9)}})
}

// TestAMDScenarioKFDProcess: the demo's kfd process, as the exporter reads
// it from the generated sysfs and fdinfo. GPU busy 0.4 + 0.2 = 0.6. a's
// PID 3001 runs ROCm work (kfd: true): its fdinfo has its 8 GiB and no
// engine time. b's PID 3002 shows 0.2 of gfx over the 10 s window. a's
// utilization is unknown, so neither owner's is served; both memories
// are (8 GiB = 8,589,934,592 bytes, 4 GiB = 4,294,967,296).
func TestAMDScenarioKFDProcess(t *testing.T) {
	out := scrapeAMDPair(t, "kfd: true", 2)[1]
	check, absent := oracleChecks(out)
	check(t, "xpu_utilization_ratio", 0.6, `gpu="0"`)
	absent(t, "xpu_process_utilization_ratio", `pid="3001"`)
	check(t, "xpu_process_utilization_ratio", 0.2, `pid="3002"`)
	absent(t, "xpu_workload_utilization_ratio", `unit="a.service"`)
	absent(t, "xpu_workload_utilization_ratio", `unit="b.service"`)
	check(t, "xpu_workload_memory_used_bytes", 8589934592, `unit="a.service"`)
	check(t, "xpu_workload_memory_used_bytes", 4294967296, `unit="b.service"`)
	if strings.Contains(out, `file="class/kfd/kfd/proc"`) {
		t.Error("the demo's KFD process list could not be read")
	}
}

// TestAMDPartitionShareAndUtilization states each compute partition's
// share of its GPU (xpu_partition_share_ratio, and the factor of its
// owner's allocation and so of its cost) and its utilization (the mean of
// its XCCs' gfx_busy_inst in the gpu_metrics xcp_stats block) from the raw
// readings. The scenario tests have DPX GPUs alone (1/2) and XCCs all
// equally busy, where a constant 1/2, the busiest XCC or the first gives
// the same values.
//
// GPU A (0000:0c:00.0) in DPX, two partitions; GPU B (0000:83:00.0) in QPX,
// four. Each partition's XCC readings, in percent of the table (unset:
// 0xFFFFFFFF, an XCC the partition does not have):
//
//	A xcp0  80, 60           → (0.8 + 0.6) / 2 = 0.7
//	A xcp1  10, 30           → (0.1 + 0.3) / 2 = 0.2
//	B xcp0  90, 50, 40, 20   → (0.9 + 0.5 + 0.4 + 0.2) / 4 = 0.5
//	B xcp1  unset, 50        → 0.5 (the unset XCC is not an idle one: not
//	                           (0 + 0.5) / 2 = 0.25)
//	B xcp2  25               → 0.25
//	B xcp3  all unset        → no utilization
//
// Shares: A's 1 / 2 = 0.5 each, B's 1 / 4 = 0.25 each (not 1 / 6, the
// node's partitions).
func TestAMDPartitionShareAndUtilization(t *testing.T) {
	busy := func(percents ...int) amd.XCPMetrics {
		x := amd.XCPMetrics{GFXBusy: make([]amd.Opt[float64], 8)}
		for i, p := range percents {
			if p >= 0 {
				x.GFXBusy[i] = amd.Opt[float64]{Value: float64(p) / 100, OK: true}
			}
		}
		return x
	}
	gpu := func(bus, uuid, mode string, parts ...amd.XCPMetrics) *Device {
		pd := &amd.Device{ComputePartition: amd.Opt[string]{Value: mode, OK: true}, Metrics: &amd.GPUMetrics{Partitions: parts}}
		return &Device{Vendor: "amd", Index: bus[5:7], UUID: uuid, PCIBusID: bus, Up: true, vendorData: &amdData{dev: pd, partition: -1}}
	}
	a := gpu("0000:0c:00.0", "00000000000000aa", "DPX", busy(80, 60), busy(10, 30))
	b := gpu("0000:83:00.0", "00000000000000bb", "QPX", busy(90, 50, 40, 20), busy(-1, 50), busy(25), busy())
	var parts []amd.Partition
	for _, g := range []struct {
		d *Device
		n int
	}{{a, 2}, {b, 4}} {
		for i := range g.n {
			parts = append(parts, amd.Partition{Name: fmt.Sprint("amdgpu_xcp_", i), ParentPCIBusID: g.d.PCIBusID, Card: -1, RenderMinor: -1})
		}
	}
	devs := (&amdCollector{}).partitions(parts, map[string]*Device{a.PCIBusID: a, b.PCIBusID: b})
	want := []struct {
		uuid     string
		fraction float64
		util     *float64 // nil: none
	}{
		{"00000000000000aa-xcp0", 0.5, some(0.7)},
		{"00000000000000aa-xcp1", 0.5, some(0.2)},
		{"00000000000000bb-xcp0", 0.25, some(0.5)},
		{"00000000000000bb-xcp1", 0.25, some(0.5)},
		{"00000000000000bb-xcp2", 0.25, some(0.25)},
		{"00000000000000bb-xcp3", 0.25, nil},
	}
	if len(devs) != len(want) {
		t.Fatalf("%d partitions, want %d", len(devs), len(want))
	}
	for i, w := range want {
		d := devs[i]
		if d.UUID != w.uuid || d.MIG == nil {
			t.Fatalf("partition %d: %+v, want %s", i, d, w.uuid)
		}
		if math.Abs(d.MIG.Fraction-w.fraction) > 1e-12 {
			t.Errorf("%s: share of its GPU %v, want %v", w.uuid, d.MIG.Fraction, w.fraction)
		}
		switch {
		case (d.Utilization == nil) != (w.util == nil):
			t.Errorf("%s: utilization %v, want %v", w.uuid, deref(d.Utilization), deref(w.util))
		case d.Utilization != nil && math.Abs(*d.Utilization-*w.util) > 1e-12:
			t.Errorf("%s: utilization %v, want %v", w.uuid, *d.Utilization, *w.util)
		}
	}
	// What the owner of a whole QPX partition is allocated, and billed
	// for: share 1 × 1/4 of the GPU = 0.25.
	if v, ok := devs[2].AllocatedDevices(attributionClaim(1)); !ok || v != 0.25 {
		t.Errorf("allocation of a QPX partition's owner %v, %v; want 0.25", v, ok)
	}
}

// TestAMDProcessShareCappedAtOne: a process's utilization is the gfx and
// compute shares of every DRM client it holds, summed and capped at 1
// (attachProcesses): amdgpu adds up the run time of an engine type's rings,
// which may run at once, and a process may hold several clients. Before,
// no test had a process whose sum passed 1.
//
// Window 2 s = 2e9 ns; every counter starts at 0 at the first scrape.
//
//	PID 200, client 17: gfx 1.4e9 / 2e9 = 0.7, compute 1.0e9 / 2e9 = 0.5:
//	         1.2, capped at 1.
//	PID 201, clients 18 and 19: gfx 1.2e9 / 2e9 = 0.6 each: 1.2 → 1.
//	PID 300, client 20: gfx 0.6e9 / 2e9 = 0.3.
//
// Pod a runs 200 and 201, pod b 300: 1 + 1 = 2 against 0.3, 2.3 in all,
// more than the whole device, which the parts divide: a 2/2.3 = 0.869565…,
// b 0.3/2.3 = 0.130434… (uncapped: 2.4/2.7 = 0.888… and 0.3/2.7 =
// 0.111…). The device's 60 % is of the moment, not the window's.
func TestAMDProcessShareCappedAtOne(t *testing.T) {
	tr := newAMDTree(t, busyMI300X())
	client := func(id, engines string) string {
		return "drm-driver:\tamdgpu\ndrm-client-id:\t" + id + "\ndrm-pdev:\t0000:0c:00.0\n" +
			"drm-resident-vram:\t1024 MiB\n" + engines
	}
	write := func(gfx17, compute17, gfx18, gfx19, gfx20 string) {
		tr.fd(200, 5, client("17", "drm-engine-gfx:\t"+gfx17+" ns\ndrm-engine-compute:\t"+compute17+" ns\n"))
		tr.fd(201, 5, client("18", "drm-engine-gfx:\t"+gfx18+" ns\n"))
		tr.fd(201, 6, client("19", "drm-engine-gfx:\t"+gfx19+" ns\n"))
		tr.fd(300, 5, client("20", "drm-engine-gfx:\t"+gfx20+" ns\n"))
	}
	clk := &fakeClock{t: testNow}
	c := newAMDCollectorFor(t, tr, clk)
	write("0", "0", "0", "0", "0")
	if _, err := c.readDevices(context.Background(), moveScrape); err != nil {
		t.Fatal(err)
	}
	clk.t = testNow.Add(2 * time.Second)
	write("1400000000", "1000000000", "1200000000", "1200000000", "600000000")
	devs, err := c.readDevices(context.Background(), moveScrape)
	if err != nil || len(devs) != 1 {
		t.Fatalf("%d devices, %v", len(devs), err)
	}
	d := devs[0]
	want := map[uint32]float64{200: 1, 201: 1, 300: 0.3}
	if len(d.Processes) != len(want) {
		t.Fatalf("processes %+v", d.Processes)
	}
	for _, p := range d.Processes {
		if p.Utilization == nil || math.Abs(*p.Utilization-want[p.PID]) > 1e-12 {
			t.Errorf("pid %d: utilization %v, want %v", p.PID, deref(p.Utilization), want[p.PID])
		}
	}
	// Memory: 1 GiB each for 200 and 300; 2 GiB for 201's two clients.
	sharedByPods(d, []uint32{200, 201}, []uint32{300})
	checkUsage(t, d.Usage(), []usageWant{{some(3 << 30), some(2 / 2.3)}, {some(1 << 30), some(0.3 / 2.3)}})
}

// TestAMDIdleGPUWithAnUnknownClient: an AMD GPU's utilization is
// gpu_busy_percent, read at the scrape, while its clients' shares cover
// the window since the previous scrape. A GPU idle at the scrape (0) whose
// clients were busy earlier in the window is split by the window, as any
// other: with one client's share unknown (its counter went back:
// TestAMDEngineCounterDipCatchesUp) there is no split, neither pod b's
// own 0.3 beside an unknown a (served once, found by probing) nor 0 for
// both because the GPU reads 0 now.
//
// Window 2 s = 2e9 ns. Client 17 (PID 200, pod a): gfx 10.0e9 then 9.9e9
// ns, a dip: unknown. Client 18 (PID 300, pod b): gfx 0.5e9 then 1.1e9:
// (1.1e9 - 0.5e9) / 2e9 = 0.3. gpu_busy_percent 0: no split.
func TestAMDIdleGPUWithAnUnknownClient(t *testing.T) {
	tr := newAMDTree(t, map[string]string{"unique_id": "00000000000000aa\n", "gpu_busy_percent": "0\n"})
	clk := &fakeClock{t: testNow}
	c := newAMDCollectorFor(t, tr, clk)
	var devs []*Device
	for i, gfx := range [][2]string{{"10000000000", "500000000"}, {"9900000000", "1100000000"}} {
		clk.t = testNow.Add(time.Duration(2*i) * time.Second)
		tr.fd(200, 5, amdgpuClient("17", "1024", gfx[0]))
		tr.fd(300, 7, amdgpuClient("18", "1024", gfx[1]))
		var err error
		if devs, err = c.readDevices(context.Background(), moveScrape); err != nil || len(devs) != 1 {
			t.Fatalf("scrape %d: %d devices, %v", i, len(devs), err)
		}
	}
	d := devs[0]
	if d.Utilization == nil || *d.Utilization != 0 {
		t.Fatalf("device utilization %v, want gpu_busy_percent's 0", deref(d.Utilization))
	}
	for _, p := range d.Processes {
		switch {
		case p.PID == 200 && p.Utilization != nil:
			t.Errorf("pid 200 after its counter dipped: %v, want unknown", *p.Utilization)
		case p.PID == 300 && (p.Utilization == nil || math.Abs(*p.Utilization-0.3) > 1e-12):
			t.Errorf("pid 300: %v, want 0.3", deref(p.Utilization))
		}
	}
	sharedByPods(d, []uint32{200}, []uint32{300})
	checkUsage(t, d.Usage(), []usageWant{{some(1 << 30), nil}, {some(1 << 30), nil}})
}

// TestAMDScrapeTooSoonServesThePreviousWindow: pods a (client 21) and b
// (client 22) share an MI300X 45 % busy. Over the 2 s after the first
// scan a's gfx time grows 1,000,000,000 → 1,600,000,000 ns (0.6 s / 2 s =
// 0.3) and b's 1,000,000,000 → 1,300,000,000 (0.15): a 0.45 × 0.3/0.45 =
// 0.3, b 0.15. A scrape 5 ms later sees no counter move: it serves that
// window again, not 0 for both; so does a /devices read 3 ms after that
// scrape, which moves no window (found by probing: both owners' parts
// unknown on /devices just after a scrape).
// The next scrape, 1.5 s after the second, measures from the second: a's
// process 1,600,000,000 → 2,050,000,000 (0.45 s / 1.5 s = 0.3), b's
// 1,300,000,000 → 1,525,000,000 (0.15); from the 5 ms scrape a's would be
// 0.45/1.495 = 0.30100… (the owners' split, in proportion, is the same).
func TestAMDScrapeTooSoonServesThePreviousWindow(t *testing.T) {
	const mib = 1 << 20
	files := busyMI300X()
	files["gpu_busy_percent"] = "45\n"
	tr := newAMDTree(t, files)
	at := func(a, b string) {
		tr.fd(200, 5, amdgpuClient("21", "1024", a))
		tr.fd(300, 6, amdgpuClient("22", "512", b))
	}
	clk := &fakeClock{t: testNow}
	c := newAMDCollectorFor(t, tr, clk)
	for _, step := range []struct {
		after time.Duration
		m     move
		a, b  string
		want  []usageWant
	}{
		{0, moveScrape, "1000000000", "1000000000", nil},
		{2 * time.Second, moveScrape, "1600000000", "1300000000", []usageWant{{some(1024 * mib), some(0.3)}, {some(512 * mib), some(0.15)}}},
		{3 * time.Millisecond, moveNone, "1600000000", "1300000000", []usageWant{{some(1024 * mib), some(0.3)}, {some(512 * mib), some(0.15)}}},
		{2 * time.Millisecond, moveScrape, "1600000000", "1300000000", []usageWant{{some(1024 * mib), some(0.3)}, {some(512 * mib), some(0.15)}}},
		{1495 * time.Millisecond, moveScrape, "2050000000", "1525000000", []usageWant{{some(1024 * mib), some(0.3)}, {some(512 * mib), some(0.15)}}},
	} {
		clk.t = clk.t.Add(step.after)
		at(step.a, step.b)
		devs, err := c.readDevices(context.Background(), step.m)
		if err != nil || len(devs) != 1 {
			t.Fatalf("%d devices, %v", len(devs), err)
		}
		if step.want == nil {
			continue
		}
		sharedByPods(devs[0], []uint32{200}, []uint32{300})
		t.Run(clk.t.Sub(testNow).String(), func(t *testing.T) {
			checkUsage(t, devs[0].Usage(), step.want)
			for _, p := range devs[0].Processes {
				if p.PID == 200 && (p.Utilization == nil || math.Abs(*p.Utilization-0.3) > 1e-12) {
					t.Errorf("PID 200's utilization %v, want 0.3", p.Utilization)
				}
			}
		})
	}
}

// TestAMDClosedClientScrapeTooSoon: a scrape too soon after one that found
// a busy client closed serves that window again, the closed client with
// it. Pod a's PID 200 (client 21, 1 GiB) is the GPU's sole allocated owner;
// PID 300 (client 22), of an owner gone, ran beside it and exits between
// the scrapes at 2 s and 4 s, busy in the window before (1e9 → 1.3e9 ns
// over 2 s, 0.15). Its time in the window 2 to 4 s is unknown, so a's part
// is too, not the GPU's whole 0.45: at 4 s and again at 4.005 s (the
// re-scrape found no client closed against the 4 s scan, and billed a
// 0.45, probe27 PA2). a's process's own time is its client's: 1.6e9 →
// 2.2e9 ns, 0.6e9 / 2e9 = 0.3. At 5.5 s the window 4 to 5.5 s has a
// alone: the moment's 0.45, its process 2.2e9 → 2.65e9 ns, 0.45e9 / 1.5e9
// = 0.3.
func TestAMDClosedClientScrapeTooSoon(t *testing.T) {
	const mib = 1 << 20
	files := busyMI300X()
	files["gpu_busy_percent"] = "45\n"
	tr := newAMDTree(t, files)
	clk := &fakeClock{t: testNow}
	c := newAMDCollectorFor(t, tr, clk)
	for _, step := range []struct {
		after time.Duration
		a, b  string // gfx ns; b "": PID 300 has exited
		want  []usageWant
		proc  *float64 // PID 200's utilization
	}{
		{0, "1000000000", "1000000000", nil, nil},
		{2 * time.Second, "1600000000", "1300000000", nil, nil},
		{2 * time.Second, "2200000000", "", []usageWant{{some(1024 * mib), nil}}, some(0.3)},
		{5 * time.Millisecond, "2200000000", "", []usageWant{{some(1024 * mib), nil}}, some(0.3)},
		{1495 * time.Millisecond, "2650000000", "", []usageWant{{some(1024 * mib), some(0.45)}}, some(0.3)},
	} {
		clk.t = clk.t.Add(step.after)
		tr.fd(200, 5, amdgpuClient("21", "1024", step.a))
		if step.b != "" {
			tr.fd(300, 6, amdgpuClient("22", "512", step.b))
		} else if err := os.RemoveAll(filepath.Join(tr.procs, "300")); err != nil {
			t.Fatal(err)
		}
		devs, err := c.readDevices(context.Background(), moveScrape)
		if err != nil || len(devs) != 1 {
			t.Fatalf("%d devices, %v", len(devs), err)
		}
		if step.want == nil {
			continue
		}
		d := devs[0]
		d.Claims = []attribution.Claim{{Owner: attribution.Owner{Kind: attribution.Kubernetes, Namespace: "ml", Pod: "a", Container: "main"}, Share: 1}}
		d.ProcessOwner, d.OwnersAllocated = map[uint32]int{200: 0}, true
		t.Run(clk.t.Sub(testNow).String(), func(t *testing.T) {
			checkUsage(t, d.Usage(), step.want)
			if len(d.Processes) != 1 || d.Processes[0].PID != 200 {
				t.Fatalf("processes %+v, want PID 200 alone", d.Processes)
			}
			if u := d.Processes[0].Utilization; (u == nil) != (step.proc == nil) || u != nil && math.Abs(*u-*step.proc) > 1e-12 {
				t.Errorf("PID 200's utilization %v, want %v", deref(u), deref(step.proc))
			}
		})
	}
}

// scrapeAMDPair scrapes, every 10 s from testNow (5400 s after boot), an
// MI300X whose PID 3001 (a.service, 8 GiB, 0.4 busy) has option and PID
// 3002 (b.service, 4 GiB, 0.2) none, served through the demo's sysfs and
// fdinfo: n scrapes, in order.
func scrapeAMDPair(t *testing.T, option string, n int) []string {
	t.Helper()
	s, err := demo.Parse([]byte("node: pair\ndevices:\n  - {vendor: amd, model: AMD Instinct MI300X OAM, memory_total: 192GiB, power_limit_watts: 750, processes: [" +
		"{pid: 3001, unit: a.service, memory_used: 8GiB, utilization: 0.4, " + option + "}, {pid: 3002, unit: b.service, memory_used: 4GiB, utilization: 0.2}]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	clk := &testClock{t: testNow}
	e, sim := newAttributedExporterSim(t, s, func(c *Config) { c.Now = clk.now })
	sim.AMD.Reset(testNow.Add(-5400 * time.Second))
	outs := make([]string, n)
	for i := range n {
		at := testNow.Add(time.Duration(i) * 10 * time.Second)
		clk.set(at)
		if err := sim.AMD.WriteAt(at); err != nil {
			t.Fatal(err)
		}
		outs[i] = scrapeText(t, e, 10*time.Second)
	}
	return outs
}

// TestAMDOpaqueFdinfoOwnersUnknown: PID 500 holds the GPU's render node,
// and its fdinfo is in amdgpu's own format of before Linux 5.19 ("pdev:",
// "vram mem:", "gfx0: 45.0%"), which has no DRM usage stats: it is one of
// the GPU's owners, whose usage cannot be read, so the GPU's owners are
// unknown, not none (probe7-amd D1: 0 owners, nothing logged). A file of
// another driver's node (i915's card1) says nothing of the AMD GPU.
func TestAMDOpaqueFdinfoOwnersUnknown(t *testing.T) {
	tr := newAMDTree(t, busyMI300X())
	tr.fd(500, 5, "pdev:\t0000:0c:00.0\npasid:\t32771\nvram mem:\t4194304 kB\ngtt mem:\t2048 kB\ncpu mem:\t0 kB\ngfx0:\t45.0%\n")
	c, clk, log := loggedAMDCollector(t, tr)
	for i := range 2 {
		clk.t = testNow.Add(time.Duration(i) * 2 * time.Second)
		devs, err := c.readDevices(context.Background(), moveScrape)
		if err != nil || len(devs) != 1 {
			t.Fatalf("%d devices, %v", len(devs), err)
		}
		if !devs[0].ProcessesPartial {
			t.Errorf("read %d: the GPU's process list is whole, though PID 500's usage cannot be read", i)
		}
	}
	if n := strings.Count(log.String(), "no DRM usage stats"); n != 1 {
		t.Errorf("%d log lines for the opaque file, want 1:\n%s", n, log.String())
	}
	// The same process on another driver's node only: the AMD GPU's list
	// is whole.
	tr2 := newAMDTree(t, busyMI300X())
	tr2.fdOn(501, 5, "/dev/dri/card1", "drm-driver:\ti915\ndrm-client-id:\t3\n")
	tr2.fdOn(502, 5, "/dev/dri/card7", "pdev:\t0000:00:02.0\n")
	devs, err := newAMDCollectorFor(t, tr2, clk).readDevices(context.Background(), moveScrape)
	if err != nil || len(devs) != 1 || devs[0].ProcessesPartial {
		t.Errorf("another driver's files: %d devices, partial %v, %v", len(devs), len(devs) == 1 && devs[0].ProcessesPartial, err)
	}
}

// TestAMDClientOfAnUnlistedGPU: PID 402's client names an amdgpu device,
// 0000:85:00.0, that no card in class/drm lists (a render node alone): it
// cannot be served, and that is told once, and once more when it ends,
// rather than the device and its 5 GiB going unseen (probe7-amd D3).
func TestAMDClientOfAnUnlistedGPU(t *testing.T) {
	tr := newAMDTree(t, busyMI300X())
	tr.fdOn(402, 5, "/dev/dri/renderD129", "drm-driver:\tamdgpu\ndrm-client-id:\t9\ndrm-pdev:\t0000:85:00.0\ndrm-resident-vram:\t5120 MiB\ndrm-engine-gfx:\t0 ns\n")
	c, clk, log := loggedAMDCollector(t, tr)
	for i := range 2 {
		clk.t = testNow.Add(time.Duration(i) * 2 * time.Second)
		if devs, err := c.readDevices(context.Background(), moveScrape); err != nil || len(devs) != 1 {
			t.Fatalf("%d devices, %v", len(devs), err)
		}
	}
	if n := strings.Count(log.String(), "devices=0000:85:00.0"); n != 1 {
		t.Errorf("%d log lines naming the unlisted device, want 1:\n%s", n, log.String())
	}
	if err := os.RemoveAll(filepath.Join(tr.procs, "402")); err != nil {
		t.Fatal(err)
	}
	clk.t = testNow.Add(4 * time.Second)
	c.readDevices(context.Background(), moveScrape)
	if !strings.Contains(log.String(), "listed again") {
		t.Errorf("no line when the client is gone:\n%s", log.String())
	}
}

// loggedAMDCollector is newAMDCollectorFor at testNow, logging to the
// returned buffer.
func loggedAMDCollector(t *testing.T, tr *amdTree) (*amdCollector, *fakeClock, *bytes.Buffer) {
	t.Helper()
	var log bytes.Buffer
	clk := &fakeClock{t: testNow}
	c := newAMDCollectorFor(t, tr, clk)
	c.logger = slog.New(slog.NewTextHandler(&log, nil))
	return c, clk, &log
}

// TestAMDClientClosedAfterAnUnknownWindow: client 18 (PID 300) runs 0.6 of
// the time: 1.0e9, 2.2e9, then a dip to 2.0e9 (its window unknown), then
// either 3.4e9 (caught up: that window unknown too, being measured from
// before the dip) and the close, or the close at once. A client whose last
// window is unknown may have run until it closed: its process is listed as
// exited with its time unknown, as one busy before it closed is
// (TestAMDClientClosedMidWindow), not taken to have stayed idle, which gave
// its owner a known 0 (found in review: review22 F7).
func TestAMDClientClosedAfterAnUnknownWindow(t *testing.T) {
	for name, gfx18 := range map[string][]string{
		"after the window behind the dip": {"1000000000", "2200000000", "2000000000", "3400000000", ""},
		"after the dip":                   {"1000000000", "2200000000", "2000000000", ""},
	} {
		t.Run(name, func(t *testing.T) {
			tr := newAMDTree(t, busyMI300X())
			clk := &fakeClock{t: testNow}
			c := newAMDCollectorFor(t, tr, clk)
			var d *Device
			for i, gfx := range gfx18 {
				clk.t = testNow.Add(time.Duration(2*i) * time.Second)
				tr.fd(200, 5, amdgpuClient("17", "1024", strconv.Itoa(400000000*i)))
				if gfx != "" {
					tr.fd(300, 5, amdgpuClient("18", "2048", gfx))
				} else if err := os.RemoveAll(filepath.Join(tr.procs, "300")); err != nil {
					t.Fatal(err)
				}
				devs, err := c.readDevices(context.Background(), moveScrape)
				if err != nil || len(devs) != 1 {
					t.Fatalf("scan %d: %d devices, %v", i, len(devs), err)
				}
				d = devs[0]
			}
			if len(d.Exited) != 1 || d.Exited[0].PID != 300 {
				t.Errorf("window of the close: exited %+v, want PID 300, its time unknown", d.Exited)
			}
		})
	}
}

// TestNodeDeviceByMinor: a QPX GPU's partitions have render nodes
// renderD128..131 and primary nodes card1..4. A client in a container
// whose renderD128 is the host's renderD131 (stat's minor 131) is
// partition 3's, not partition 0's its link names (probe G, PG2); a minor
// of a primary node finds its card (card2, partition 1); where stat gave
// no minor, the link's render name, else its card name, places it; a
// minor no node has places it nowhere, whatever the link says.
func TestNodeDeviceByMinor(t *testing.T) {
	parts := make([]*Device, 4)
	byMinor, byCard := map[int]*Device{}, map[int]*Device{}
	for i := range parts {
		parts[i] = &Device{Index: strconv.Itoa(i)}
		byMinor[128+i], byCard[1+i] = parts[i], parts[i]
	}
	none := amd.Opt[int]{}
	some := reading.Some[int]
	for _, tc := range []struct {
		name                string
		minor, render, card amd.Opt[int]
		want                *Device
	}{
		{"renamed render node", some(131), some(128), none, parts[3]},
		{"primary node by minor", some(2), none, some(2), parts[1]},
		{"no minor: the link's render name", none, some(129), none, parts[1]},
		{"no minor: the link's card name", none, none, some(4), parts[3]},
		{"a minor of no node", some(200), some(128), none, nil},
	} {
		if got := nodeDevice(byMinor, byCard, tc.minor, tc.render, tc.card); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestAMDPartitionsListedInPartKeepTheirNumbers: a QPX GPU (4 partitions)
// in a mode switch lists partition 0 and the platform partitions whose KFD
// nodes say they are partitions 2 and 3 (amdgpu_xcp_1 and _2; partition
// 1's node is gone). Each keeps its own number, -xcp0, -xcp2, -xcp3,
// never -xcp1 for the one that is partition 2 (probe G, PG3); the listing
// is in part, so none has a share. A partition whose KFD node tells no
// number takes its place among those found.
func TestAMDPartitionsListedInPartKeepTheirNumbers(t *testing.T) {
	pd := &amd.Device{ComputePartition: amd.Opt[string]{Value: "QPX", OK: true}}
	gpu := &Device{Vendor: "amd", Index: "0", UUID: "00000000000000aa", PCIBusID: "0000:0c:00.0", Up: true, vendorData: &amdData{dev: pd, partition: -1}}
	parts := []amd.Partition{
		{Name: "0000:0c:00.0", ParentPCIBusID: gpu.PCIBusID, Card: 1, RenderMinor: 128, Number: reading.Some(0)},
		{Name: "amdgpu_xcp_1", ParentPCIBusID: gpu.PCIBusID, Card: 3, RenderMinor: 130, Number: reading.Some(2)},
		{Name: "amdgpu_xcp_2", ParentPCIBusID: gpu.PCIBusID, Card: 4, RenderMinor: 131, Number: reading.Some(3)},
	}
	c := &amdCollector{logger: slog.New(slog.DiscardHandler), layouts: map[string]partLayout{}, partlyListed: map[string]bool{}}
	devs := c.partitions(parts, map[string]*Device{gpu.PCIBusID: gpu})
	var got []string
	for _, d := range devs {
		got = append(got, d.UUID+" "+d.MIG.Instance)
		if d.MIG.Fraction != 0 {
			t.Errorf("%s: share %v in a listing in part, want none", d.UUID, d.MIG.Fraction)
		}
	}
	if want := []string{"00000000000000aa-xcp0 0", "00000000000000aa-xcp2 2", "00000000000000aa-xcp3 3"}; !slices.Equal(got, want) {
		t.Errorf("partitions %v, want %v", got, want)
	}
	if gpu.MIGListed {
		t.Error("the GPU's partitions are taken as all listed")
	}
	parts[2].Number = amd.Opt[int]{}
	devs = c.partitions(parts, map[string]*Device{gpu.PCIBusID: gpu})
	if d := devs[2]; d.UUID != "00000000000000aa-xcp2" {
		t.Errorf("a partition of no known number, third found: %s, want -xcp2", d.UUID)
	}
	// The GPU's mode unreadable (UNKNOWN during a switch), its two
	// partitions listed: their profile is "unknown", never empty (probe G,
	// PG4).
	pd.ComputePartition = amd.Opt[string]{}
	if devs = c.partitions(parts[:2], map[string]*Device{gpu.PCIBusID: gpu}); devs[0].MIG.Profile != "unknown" || devs[1].MIG.Profile != "unknown" {
		t.Errorf("mode unknown: profiles %q, %q, want unknown", devs[0].MIG.Profile, devs[1].MIG.Profile)
	}
	// In SPX mode with a platform partition's KFD node left over from a
	// switch (partition 1): the listing is not whole, so it has no share
	// of a GPU that is one partition (probe G, PG3).
	pd.ComputePartition = amd.Opt[string]{Value: "SPX", OK: true}
	left := []amd.Partition{{Name: "amdgpu_xcp_7", ParentPCIBusID: gpu.PCIBusID, Card: 9, RenderMinor: 137, Number: reading.Some(1)}}
	devs = c.partitions(left, map[string]*Device{gpu.PCIBusID: gpu})
	if len(devs) != 1 || devs[0].UUID != "00000000000000aa-xcp1" || devs[0].MIG.Fraction != 0 || gpu.MIGListed || devs[0].MIG.Profile != "unknown" {
		t.Errorf("SPX with a leftover partition: %+v (GPU's listing whole %v), want -xcp1 with no share, profile unknown (PJ7)", devs[0], gpu.MIGListed)
	}
}

// TestAMDPCIeNAKsServedApart: the simulated MI300X's pcie_replay_count
// file says 42 NAKs (pcie_naks) and its gpu_metrics replay count 7
// (pcie_replays): each is served as read, under its own family, never one
// for the other (probe G, PG5: the file was not read).
func TestAMDPCIeNAKsServedApart(t *testing.T) {
	s, err := demo.Parse([]byte(`node: naks
devices:
  - {vendor: amd, model: AMD Instinct MI300X OAM, memory_total: 192GiB, power_limit_watts: 750, metrics: {pcie_naks: 42, pcie_replays: 7}}
`))
	if err != nil {
		t.Fatal(err)
	}
	e, sim := newAttributedExporterSim(t, s)
	sim.AMD.Reset(testStart)
	if err := sim.AMD.WriteAt(testNow); err != nil {
		t.Fatal(err)
	}
	check, _ := oracleChecks(scrapeText(t, e, 10*time.Second))
	check(t, "xpu_amd_pcie_naks_total", 42, `gpu="0"`)
	check(t, "xpu_pcie_replays_total", 7, `gpu="0"`)
}
