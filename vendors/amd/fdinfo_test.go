package amd

import (
	"bufio"
	"errors"
	"maps"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xpu-exporter/xpu_exporter/internal/procfd"
	"github.com/xpu-exporter/xpu_exporter/vendors/reading"
)

const fixtureProc = "../../fixtures/amd/proc"

func TestParseFdinfoLegacyAmdgpu(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(fixtureProc, "100/fdinfo/5"))
	if err != nil {
		t.Fatal(err)
	}
	f, ok, err := ParseFdinfo(b)
	if err != nil || !ok {
		t.Fatalf("ok %v err %v", ok, err)
	}
	if f.Driver != "amdgpu" || f.PDev != "0000:0c:00.0" || f.ClientID.Value != 17 {
		t.Errorf("identity %+v", f)
	}
	if want := map[string]uint64{"compute": 1500000000}; !reflect.DeepEqual(f.Engines, want) {
		t.Errorf("engines %v", f.Engines)
	}
	// 4194304 KiB × 1024 = 4294967296 bytes; 2048 KiB × 1024 = 2097152.
	// amdgpu pads "drm-memory-gtt: \t" with a space before the tab.
	wantU(t, "vram", f.Memory["vram"].Legacy, 4294967296)
	wantU(t, "gtt", f.Memory["gtt"].Legacy, 2097152)
	wantU(t, "cpu", f.Memory["cpu"].Legacy, 0)
	wantUnset(t, "vram total", f.Memory["vram"].Total)
}

func TestParseFdinfoCurrentAmdgpu(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(fixtureProc, "101/fdinfo/7"))
	if err != nil {
		t.Fatal(err)
	}
	f, ok, err := ParseFdinfo(b)
	if err != nil || !ok {
		t.Fatalf("ok %v err %v", ok, err)
	}
	// 1536 MiB × 2^20 = 1610612736; 512 MiB × 2^20 = 536870912;
	// 2 MiB = 2097152; a bare number is bytes.
	vram := f.Memory["vram"]
	wantU(t, "vram total", vram.Total, 1610612736)
	wantU(t, "vram shared", vram.Shared, 536870912)
	wantU(t, "vram resident", vram.Resident, 1610612736)
	wantU(t, "vram active", vram.Active, 0)
	wantU(t, "gtt resident", f.Memory["gtt"].Resident, 2097152)
	if want := map[string]uint64{"gfx": 300000000, "dec": 800000000}; !reflect.DeepEqual(f.Engines, want) {
		t.Errorf("engines %v", f.Engines)
	}
	if want := map[string]uint64{"dec": 2}; !reflect.DeepEqual(f.Capacity, want) {
		t.Errorf("capacity %v", f.Capacity)
	}
}

func TestParseFdinfoNotDRM(t *testing.T) {
	f, ok, err := ParseFdinfo([]byte("pos:\t0\nflags:\t0100002\nmnt_id:\t25\nino:\t3\n"))
	if ok || err != nil || f.Driver != "" {
		t.Errorf("got %+v %v %v", f, ok, err)
	}
}

func TestParseFdinfoMalformed(t *testing.T) {
	for _, in := range []string{
		"drm-driver:\tamdgpu\ndrm-engine-gfx:\t12 ms\n",
		"drm-driver:\tamdgpu\ndrm-engine-gfx:\t-12 ns\n",
		"drm-driver:\tamdgpu\ndrm-engine-capacity-dec:\t0\n",
		"drm-driver:\tamdgpu\ndrm-memory-vram:\t12 GiB\n",
		"drm-driver:\tamdgpu\ndrm-total-vram:\t18446744073709551615 MiB\n",
		"drm-driver:\tamdgpu\ndrm-client-id:\tx\n",
		"drm-driver:\t\n",
	} {
		if _, _, err := ParseFdinfo([]byte(in)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%q: %v", in, err)
		}
	}
}

func TestScanDeduplicatesClients(t *testing.T) {
	s := FdinfoScanner{ProcRoot: fixtureProc, Driver: "amdgpu"}
	// 999 does not exist: a process that exited is no error.
	got, errs := s.Scan([]int{100, 101, 102, 999})
	if len(errs) != 0 {
		t.Fatal(errs)
	}
	if len(got) != 2 {
		t.Fatalf("clients %+v", got)
	}
	// Client 17 is open twice in 100 (dup) and inherited by 101: once.
	// The fd links (fixtures/amd/proc/<pid>/fd) give the render nodes.
	if got[0].Key != (ClientKey{"0000:0c:00.0", 17}) || !reflect.DeepEqual(got[0].PIDs, []int{100, 101}) || got[0].RenderMinor != reading.Some(128) {
		t.Errorf("first client %+v", got[0])
	}
	if got[1].Key != (ClientKey{"0000:83:00.0", 18}) || !reflect.DeepEqual(got[1].PIDs, []int{101}) || got[1].RenderMinor != reading.Some(136) {
		t.Errorf("second client %+v", got[1])
	}
}

func TestScanReportsUnreadableFdinfo(t *testing.T) {
	root := t.TempDir()
	// A directory where a file is expected reads with EISDIR.
	if err := os.MkdirAll(filepath.Join(root, "7", "fdinfo", "3"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Only the fdinfo of fds open on a DRM node is read.
	for _, fd := range []string{"3", "4"} {
		if err := os.MkdirAll(filepath.Join(root, "7", "fd"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("/dev/dri/renderD128", filepath.Join(root, "7", "fd", fd)); err != nil {
			t.Fatal(err)
		}
	}
	big := make([]byte, maxFdinfoSize+1)
	if err := os.WriteFile(filepath.Join(root, "7", "fdinfo", "4"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	_, errs := FdinfoScanner{ProcRoot: root, Driver: "amdgpu"}.Scan([]int{7})
	if len(errs) != 2 || errs[0].File != "fdinfo/3" || errs[1].File != "fdinfo/4" || !errors.Is(errs[1], ErrTooLarge) {
		t.Errorf("errors %v", errs)
	}
}

func TestEngineShares(t *testing.T) {
	t0 := time.Unix(1000, 0)
	t1 := t0.Add(2 * time.Second) // window: 2 000 000 000 ns
	a := ClientKey{"0000:0c:00.0", 17}
	b := ClientKey{"0000:83:00.0", 18}
	c := ClientKey{"0000:83:00.0", 19}
	d := ClientKey{"0000:83:00.0", 20}
	e := ClientKey{"0000:83:00.0", 21}
	f := ClientKey{"0000:83:00.0", 22}
	g := ClientKey{"0000:83:00.0", 23}
	h := ClientKey{"0000:83:00.0", 24}
	before := []Client{
		{Key: a, Engines: map[string]uint64{"compute": 1500000000}},
		{Key: b, Engines: map[string]uint64{"dec": 0}, Capacity: map[string]uint64{"dec": 2}},
		{Key: d, Engines: map[string]uint64{"gfx": 9000000000, "compute": 100}},
		{Key: g, Engines: map[string]uint64{"compute": 0}},
		{Key: h, Engines: map[string]uint64{"gfx": 4000000000, "compute": 1000000000}},
	}
	after := []Client{
		{Key: a, Engines: map[string]uint64{"compute": 2500000000}},
		{Key: b, Engines: map[string]uint64{"gfx": 300000000, "dec": 800000000}, Capacity: map[string]uint64{"dec": 2}},
		{Key: c, Engines: map[string]uint64{"gfx": 500000000}},
		{Key: d, Engines: map[string]uint64{"gfx": 1000, "compute": 2200000100}},
		{Key: e, Engines: map[string]uint64{"gfx": 100000000000}},
		{Key: f, Engines: map[string]uint64{"gfx": 2400000000}},
		{Key: g, Engines: map[string]uint64{"compute": 3500000000}},
		{Key: h, Engines: map[string]uint64{"compute": 1500000000}},
	}
	got, unknown := EngineShares(t0, before, false, t1, after)
	want := []EngineShare{
		// (2.5e9 - 1.5e9) / 2e9 = 0.5
		{a, "compute", 0.5},
		// dec: (8e8 - 0) / (2e9 × capacity 2) = 0.2
		{b, "dec", 0.2},
		// gfx had no line at t0 (amdgpu omits unused engines): 3e8 / 2e9 = 0.15
		{b, "gfx", 0.15},
		// d: gfx went backwards (9e9 → 1000), so its compute (1.1) is not
		// told either: d is unknown. So is h, whose gfx line is gone: a
		// count of 4e9 printed as none, that is 0 (amdgpu prints no line
		// for an engine at 0), where measured from 0 the next window
		// billed h the whole 4e9 (probe22-amdseq 01).
		// g, known: (3.5e9 - 0) / 2e9 = 1.75, capped at 1 (amdgpu sums the
		// time of an IP type's rings, which may run at once).
		{g, "compute", 1},
	}
	// c, e and f are new at t1 after a scan that missed processes: no
	// baseline.
	wantUnknown := []ClientKey{c, d, e, f, h}
	if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(unknown, wantUnknown) {
		t.Errorf("EngineShares =\n%+v, unknown %v\nwant\n%+v, unknown %v", got, unknown, want, wantUnknown)
	}
	if s, u := EngineShares(t1, before, false, t0, after); s != nil || u != nil {
		t.Errorf("reversed window gave %v, %v", s, u)
	}
	// After a scan that read every process, a new client did not exist at
	// t0 and its time is the window's: c 5e8 / 2e9 = 0.25; f 2.4e9 / 2e9 =
	// 1.2, within the 0.25 of jitter, capped at 1. e's 1e11 / 2e9 = 50 it
	// cannot have used in the window: it ran before t0 out of sight, and
	// stays unknown.
	got, unknown = EngineShares(t0, before, true, t1, after)
	want = []EngineShare{want[0], want[1], want[2], {c, "gfx", 0.25}, {f, "gfx", 1}, want[3]}
	wantUnknown = []ClientKey{d, e, h}
	if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(unknown, wantUnknown) {
		t.Errorf("EngineShares after a complete scan =\n%+v, unknown %v\nwant\n%+v, unknown %v", got, unknown, want, wantUnknown)
	}
}

func FuzzParseFdinfo(f *testing.F) {
	for _, p := range []string{"100/fdinfo/5", "101/fdinfo/7", "102/fdinfo/4", "100/fdinfo/0"} {
		b, err := os.ReadFile(filepath.Join(fixtureProc, p))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fd, ok, err := ParseFdinfo(b)
		if err != nil && (ok || fd.Driver != "" || fd.Engines != nil) {
			t.Fatalf("error %v with a result %+v", err, fd)
		}
		if ok && fd.Driver == "" {
			t.Fatal("DRM client without a driver")
		}
		for name, c := range fd.Capacity {
			if c == 0 || name == "" {
				t.Fatalf("capacity %q = %d", name, c)
			}
		}
	})
}

// TestEngineSharesReusedClientID: a DRM file closed with its process and
// a new one given its client ID by another process (the kernel promises
// the ID unique among open files only) is a new client, whose counts
// start at 0: not the old client's counter gone backwards, which left the
// device's split unknown until the new counts caught up (probe12-time
// D1). The same process's counter going backwards is the documented
// non-monotonic value: unknown for the window, the larger value kept.
func TestEngineSharesReusedClientID(t *testing.T) {
	t0 := time.Unix(1000, 0)
	t1 := t0.Add(2 * time.Second) // window: 2 000 000 000 ns
	k := ClientKey{"0000:0c:00.0", 3001}
	old := Client{Key: k, PIDs: []int{3001}, Engines: map[string]uint64{"gfx": 17000000000}}
	for _, tc := range []struct {
		name         string
		pids         []int
		complete     bool
		want         []EngineShare
		wantUnknown  bool
		wantBaseline uint64
	}{
		// Another process, the scan at t0 whole: 5e8 / 2e9 = 0.25, and
		// the next window measures from 5e8.
		{"new holder", []int{3005}, true, []EngineShare{{k, "gfx", 0.25}}, false, 500000000},
		// Its file may have been open at t0 out of the scan's sight.
		{"new holder, scan at t0 partial", []int{3005}, false, nil, true, 500000000},
		// A holder kept: the same file, whose count fell for a while.
		{"same holder", []int{3001}, true, nil, true, 17000000000},
		{"holder kept beside a new one", []int{3001, 3005}, true, nil, true, 17000000000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			after := []Client{{Key: k, PIDs: tc.pids, Engines: map[string]uint64{"gfx": 500000000}}}
			got, unknown := EngineShares(t0, []Client{old}, tc.complete, t1, after)
			if !slices.Equal(got, tc.want) || (len(unknown) == 1) != tc.wantUnknown {
				t.Errorf("shares %v, unknown %v; want %v, unknown %v", got, unknown, tc.want, tc.wantUnknown)
			}
			if b := Baseline([]Client{old}, after); b[0].Engines["gfx"] != tc.wantBaseline {
				t.Errorf("baseline %d, want %d", b[0].Engines["gfx"], tc.wantBaseline)
			}
		})
	}
}

// TestEngineSharesAfterALineIsGone: a client busy 0.3 of the time, scans 2 s
// apart, whose gfx line is missing from one scan (its count read as 0). That
// window is unknown, and so is the next: measured from the count kept from
// before the gap, 4e9 + 2 × 6e8 - 4e9 = 1.2e9 over 2e9 is 0.6, the time of
// both windows in one; measured from 0, 5.2e9 / 2e9, capped at 1 (probe22-
// amdseq 01: 0 served, then 1). The one after measures from what it read:
// 6e8 / 2e9 = 0.3. A count that fell (5e9 → 3e9) and caught up is alike.
//
// A count that fell and stays below (a reset: 4e9 → 1e8, then 6e8 a
// window) is unknown for the same two windows, and the one after measures
// from what it read, not from 4e9 until the count passed it, six windows
// on (probe27 PA1): 1.3e9 - 7e8 = 6e8 over 2e9 is 0.3, and so on.
func TestEngineSharesAfterALineIsGone(t *testing.T) {
	k := ClientKey{"0000:22:00.0", 3101}
	start := time.Unix(1000, 0)
	for _, tc := range []struct {
		name  string
		scans []map[string]uint64
		want  []float64 // per window; -1: unknown
	}{
		{"line gone", []map[string]uint64{{"gfx": 4000000000}, {}, {"gfx": 5200000000}, {"gfx": 5800000000}}, []float64{-1, -1, 0.3}},
		{"count fell", []map[string]uint64{{"gfx": 4000000000}, {"gfx": 3000000000}, {"gfx": 5200000000}, {"gfx": 5800000000}}, []float64{-1, -1, 0.3}},
		{"count started again", []map[string]uint64{{"gfx": 4000000000}, {"gfx": 100000000}, {"gfx": 700000000}, {"gfx": 1300000000}, {"gfx": 1900000000}}, []float64{-1, -1, 0.3, 0.3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			scans, want := tc.scans, tc.want
			prev := []Client{{Key: k, PIDs: []int{3101}, Engines: scans[0]}}
			for i, engines := range scans[1:] {
				t0, t1 := start.Add(time.Duration(2*i)*time.Second), start.Add(time.Duration(2*i+2)*time.Second)
				after := []Client{{Key: k, PIDs: []int{3101}, Engines: engines}}
				shares, unknown := EngineShares(t0, prev, true, t1, after)
				switch {
				case want[i] < 0 && (len(shares) != 0 || len(unknown) != 1):
					t.Errorf("window %d: %v, unknown %v; want unknown", i+1, shares, unknown)
				case want[i] >= 0 && (len(shares) != 1 || math.Abs(shares[0].Ratio-want[i]) > 1e-9):
					t.Errorf("window %d: %v, unknown %v; want %v", i+1, shares, unknown, want[i])
				}
				prev = Baseline(prev, after)
			}
		})
	}
}

// Baseline raises only the counters that fell, and leaves the scan it was
// given as read.
func TestBaseline(t *testing.T) {
	k17, k18 := ClientKey{PDev: "0000:0c:00.0", ClientID: 17}, ClientKey{PDev: "0000:0c:00.0", ClientID: 18}
	k20 := ClientKey{PDev: "0000:0c:00.0", ClientID: 20}
	before := []Client{
		{Key: k17, Engines: map[string]uint64{"gfx": 11, "compute": 5}},
		{Key: k18, Engines: map[string]uint64{"gfx": 3}},
		{Key: k20, Engines: map[string]uint64{"gfx": 7, "compute": 2}},
	}
	after := []Client{
		{Key: k17, Engines: map[string]uint64{"gfx": 10, "compute": 6, "dma": 1}},
		{Key: k18, Engines: map[string]uint64{"gfx": 4}},
		{Key: ClientKey{PDev: "0000:0c:00.0", ClientID: 19}, Engines: map[string]uint64{"gfx": 1}},
		// k20's gfx line is gone: its count fell to 0, and 7 is kept.
		{Key: k20, Engines: map[string]uint64{"compute": 3}},
	}
	got := Baseline(before, after)
	want := []map[string]uint64{{"gfx": 11, "compute": 6, "dma": 1}, {"gfx": 4}, {"gfx": 1}, {"gfx": 7, "compute": 3}}
	for i := range want {
		if !maps.Equal(got[i].Engines, want[i]) {
			t.Errorf("client %d: %v, want %v", i, got[i].Engines, want[i])
		}
	}
	if after[0].Engines["gfx"] != 10 {
		t.Errorf("the scan given was changed: %v", after[0].Engines)
	}
}

// TestNextLineIsScanLines: ParseFdinfo cuts lines in place as the
// bufio.Scanner it replaced did (bufio.ScanLines, tokens up to
// maxFdinfoSize): the same lines, "\r" dropped only before "\n" or at the
// end, and bufio.ErrTooLong from the same line on.
func TestNextLineIsScanLines(t *testing.T) {
	long := func(n int, end string) string { return "drm-" + strings.Repeat("x", n-4) + end }
	for _, in := range []string{
		"", "\n", "\n\n", "a", "a\n", "a\r\n", "a\r", "\r", "\r\n\r\n", "a\rb\nc",
		"drm-driver:\tamdgpu\r\ndrm-pdev:\t0000:0c:00.0\n\ndrm-engine-gfx: 1 ns",
		long(maxFdinfoSize-1, ""), long(maxFdinfoSize-1, "\n"), long(maxFdinfoSize-1, "\r\n"),
		long(maxFdinfoSize, ""), long(maxFdinfoSize, "\n"), "a\n" + long(maxFdinfoSize, "\nb\n"),
		long(maxFdinfoSize+1, ""),
	} {
		var want []string
		sc := bufio.NewScanner(strings.NewReader(in))
		sc.Buffer(make([]byte, 0, 1024), maxFdinfoSize)
		for sc.Scan() {
			want = append(want, sc.Text())
		}
		var got []string
		var err error
		for b := []byte(in); len(b) > 0 && err == nil; {
			var line []byte
			if line, b, err = nextLine(b); err == nil {
				got = append(got, string(line))
			}
		}
		if !reflect.DeepEqual(got, want) || err != sc.Err() {
			t.Errorf("%.40q (%d bytes): lines %d %.60q, %v; bufio.Scanner %d %.60q, %v", in, len(in), len(got), got, err, len(want), want, sc.Err())
		}
	}
}

// TestParseFdinfoNamesKept: the names a client keeps are its own strings,
// whether amdgpu's (given without a copy) or another driver's, and do not
// change when the buffer they were read from is reused.
func TestParseFdinfoNamesKept(t *testing.T) {
	b := []byte("drm-driver:\txe\ndrm-pdev:\t0000:0c:00.0\ndrm-client-id:\t7\ndrm-engine-gfx:\t5 ns\ndrm-engine-rcs:\t6 ns\ndrm-engine-capacity-vcs:\t2\ndrm-total-vram:\t1 KiB\ndrm-total-stolen:\t2\n")
	f, ok, err := ParseFdinfo(b)
	if !ok || err != nil {
		t.Fatal(ok, err)
	}
	clear(b)
	want := Fdinfo{
		Driver: "xe", PDev: "0000:0c:00.0", ClientID: reading.Some[uint64](7),
		Engines:  map[string]uint64{"gfx": 5, "rcs": 6},
		Capacity: map[string]uint64{"vcs": 2},
		Memory:   map[string]Memory{"vram": {Total: reading.Some[uint64](1024)}, "stolen": {Total: reading.Some[uint64](2)}},
	}
	if !reflect.DeepEqual(f, want) {
		t.Errorf("after the buffer was cleared:\n%+v\nwant\n%+v", f, want)
	}
}

// TestScanReadsLongFdinfoWhole: an fdinfo longer than the first read's
// buffer (4 KiB), or exactly its size, is read on to its end: its last
// line counts. A read returning all it was asked for is not taken for the
// end.
func TestScanReadsLongFdinfoWhole(t *testing.T) {
	for _, size := range []int{4 << 10, 4<<10 + 1, 9000} {
		root := t.TempDir()
		head := "drm-driver:\tamdgpu\ndrm-pdev:\t0000:0c:00.0\ndrm-client-id:\t9\n"
		last := "drm-engine-gfx:\t77 ns\n"
		pad := "amd-pad:\t" + strings.Repeat("x", size-len(head)-len(last)-len("amd-pad:\t\n")) + "\n"
		content := head + pad + last
		if len(content) != size {
			t.Fatalf("built %d bytes, want %d", len(content), size)
		}
		if err := os.MkdirAll(filepath.Join(root, "7", "fdinfo"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "7", "fdinfo", "5"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		holders := []procfd.Holder{{PID: 7, FDs: []procfd.FD{{Num: 5, Target: "/dev/dri/renderD128"}}}}
		clients, _, errs := FdinfoScanner{ProcRoot: root, Driver: "amdgpu"}.ScanHolders(holders)
		if len(errs) != 0 || len(clients) != 1 || clients[0].Engines["gfx"] != 77 {
			t.Errorf("%d bytes: clients %+v, errors %v", size, clients, errs)
		}
	}
}

// TestScanNodeMinorFromStat: in a container run with
// --device=/dev/dri/renderD131:/dev/dri/renderD128, PID 7's fd 5 links to
// "/dev/dri/renderD128" while the file is open on minor 131 (stat's
// st_rdev 226:131): the client's NodeMinor is 131, its RenderMinor from
// the link 128 (probe G, PG2). PID 8's fd 6 is a primary node, card1
// (226:1), under its own name; PID 9's fd 4 is no DRM node by stat (a
// character device of another major, as a tree that is not procfs may
// give): its NodeMinor is unset, the link's renderD130 is all there is.
// Each fdinfo's stat is asked at "<pid>/fd/<fd>" under the procfs root.
func TestScanNodeMinorFromStat(t *testing.T) {
	root := t.TempDir()
	for _, f := range []struct{ pid, fd, id string }{{"7", "5", "1"}, {"8", "6", "2"}, {"9", "4", "3"}} {
		if err := os.MkdirAll(filepath.Join(root, f.pid, "fdinfo"), 0o755); err != nil {
			t.Fatal(err)
		}
		content := "drm-driver:\tamdgpu\ndrm-pdev:\t0000:0c:00.0\ndrm-client-id:\t" + f.id + "\n"
		if err := os.WriteFile(filepath.Join(root, f.pid, "fdinfo", f.fd), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rdev := map[string]uint64{"7/fd/5": unix.Mkdev(drmMajor, 131), "8/fd/6": unix.Mkdev(drmMajor, 1), "9/fd/4": unix.Mkdev(1, 3)}
	var asked []string
	s := FdinfoScanner{ProcRoot: root, Driver: "amdgpu", stat: func(_ int, path string, st *unix.Stat_t) error {
		asked = append(asked, path)
		dev, ok := rdev[path]
		if !ok {
			return unix.ENOENT
		}
		*st = unix.Stat_t{Mode: unix.S_IFCHR | 0o666, Rdev: dev}
		return nil
	}}
	holders := []procfd.Holder{
		{PID: 7, FDs: []procfd.FD{{Num: 5, Target: "/dev/dri/renderD128"}}},
		{PID: 8, FDs: []procfd.FD{{Num: 6, Target: "/dev/dri/card1"}}},
		{PID: 9, FDs: []procfd.FD{{Num: 4, Target: "/dev/dri/renderD130"}}},
	}
	clients, _, errs := s.ScanHolders(holders)
	if len(errs) != 0 || len(clients) != 3 {
		t.Fatalf("clients %+v, errors %v", clients, errs)
	}
	for i, want := range []struct{ node, render, card Opt[int] }{
		{reading.Some(131), reading.Some(128), Opt[int]{}},
		{reading.Some(1), Opt[int]{}, reading.Some(1)},
		{Opt[int]{}, reading.Some(130), Opt[int]{}},
	} {
		c := clients[i] // sorted by client ID: PIDs 7, 8, 9
		if c.NodeMinor != want.node || c.RenderMinor != want.render || c.CardMinor != want.card {
			t.Errorf("PID %v: node %v, render %v, card %v; want %v, %v, %v", c.PIDs, c.NodeMinor, c.RenderMinor, c.CardMinor, want.node, want.render, want.card)
		}
	}
	if want := []string{"7/fd/5", "8/fd/6", "9/fd/4"}; !slices.Equal(asked, want) {
		t.Errorf("stat asked for %v, want %v", asked, want)
	}
	// The GPU at 0000:0c:00.0 is one device (not partitioned): its
	// clients' nodes are not asked for, drm-pdev names it.
	asked = nil
	s.NodeMatters = func(pdev string) bool { return pdev != "0000:0c:00.0" }
	clients, _, _ = s.ScanHolders(holders)
	if len(asked) != 0 || clients[0].NodeMinor.OK || !clients[0].RenderMinor.OK {
		t.Errorf("an unpartitioned GPU's clients: stat asked for %v, node %v, render %v; want none asked, the link's render name kept", asked, clients[0].NodeMinor, clients[0].RenderMinor)
	}
}
