package gaudi

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// fakeHost builds a procfs and a sysfs tree in a temporary directory. The
// device nodes are symbolic links to character devices every Linux host has
// (/dev/null is 1:3, /dev/zero 1:5, /dev/full 1:7, /dev/random 1:8,
// /dev/urandom 1:9), so that stat through /proc/<pid>/fd sees a device number
// as it does for a real node.
func fakeHost(t *testing.T) (procRoot, sysRoot string) {
	t.Helper()
	root := t.TempDir()
	link := func(target, name string) {
		t.Helper()
		path := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, path); err != nil {
			t.Fatal(err)
		}
	}
	file := func(name, content string) {
		t.Helper()
		path := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	abs := func(name string) string { return filepath.Join(root, name) }

	// sysfs: two Gaudi nodes in the accel class, one Intel NPU node in it
	// too, and one node of the pre-accel habanalabs class with its control
	// node.
	pci := "sys/devices/pci0000:00/"
	file(pci+"0000:19:00.0/pci_addr", "0000:19:00.0\n")
	link(abs("sys/bus/pci/drivers/habanalabs"), pci+"0000:19:00.0/driver")
	link(abs(pci+"0000:19:00.0"), "sys/class/accel/accel0/device")
	file("sys/class/accel/accel0/dev", "1:3\n")
	// No pci_addr: the address comes from the device link, in upper case.
	file(pci+"0000:1A:00.0/vendor", "0x1da3\n")
	link(abs("sys/bus/pci/drivers/habanalabs"), pci+"0000:1A:00.0/driver")
	link(abs(pci+"0000:1A:00.0"), "sys/class/accel/accel1/device")
	file("sys/class/accel/accel1/dev", "1:5\n")
	file(pci+"0000:80:0b.0/vendor", "0x8086\n")
	link(abs("sys/bus/pci/drivers/intel_vpu"), pci+"0000:80:0b.0/driver")
	link(abs(pci+"0000:80:0b.0"), "sys/class/accel/accel9/device")
	file("sys/class/accel/accel9/dev", "1:7\n")
	file("sys/class/habanalabs/hl2/dev", "1:8\n")
	file("sys/class/habanalabs/hl2/pci_addr", "0000:33:00.0\n")
	file("sys/class/habanalabs/hl_controlD2/dev", "1:9\n")
	file("sys/class/habanalabs/hl_controlD2/pci_addr", "0000:33:00.0\n")

	// Device nodes, as the exporter would see them.
	link("/dev/null", "dev/accel/accel0")
	link("/dev/zero", "dev/accel/accel1")
	link("/dev/full", "dev/accel/accel9")
	link("/dev/random", "dev/hl2")
	link("/dev/urandom", "dev/hl_controlD2")
	// accel0 as a container made it: another name for the same device
	// number, since deleted. procfs shows such a link with " (deleted)" and
	// stat still reaches the open node; a second link plays that here.
	link("/dev/null", "ctr/dev/accel/accel5")
	link(abs("ctr/dev/accel/accel5"), "ctr/dev/accel/accel5 (deleted)")
	file("home/user/accel3", "not a device\n")

	// procfs.
	link(abs("dev/accel/accel0"), "proc/100/fd/0")
	link(abs("dev/accel/accel0"), "proc/100/fd/1") // the same node twice
	link("socket:[4242]", "proc/100/fd/2")
	link(abs("dev/hl2"), "proc/200/fd/3")
	link(abs("dev/hl_controlD2"), "proc/200/fd/4") // control node: monitoring, not use
	link(abs("ctr/dev/accel/accel5")+" (deleted)", "proc/300/fd/5")
	link(abs("dev/accel/accel9"), "proc/300/fd/6") // Intel NPU
	link(abs("home/user/accel3"), "proc/300/fd/7") // a file named like a node
	link(abs("dev/accel/accel1"), "proc/400/fd/8")
	file("proc/500/comm", "exited\n") // no fd directory: exited mid-scan
	file("proc/self/comm", "not a pid\n")
	return abs("proc"), abs("sys")
}

func sortUses(u []NodeUse) []NodeUse {
	slices.SortFunc(u, func(a, b NodeUse) int {
		if a.PID != b.PID {
			return a.PID - b.PID
		}
		return strings.Compare(a.Node, b.Node)
	})
	return u
}

func TestScanProcesses(t *testing.T) {
	procRoot, sysRoot := fakeHost(t)
	s := &ProcessScanner{ProcRoot: procRoot, SysRoot: sysRoot}
	uses, unreadable, err := s.Scan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []NodeUse{
		{PID: 100, Node: "accel0", BusID: "0000:19:00.0"},
		{PID: 200, Node: "hl2", BusID: "0000:33:00.0"},
		// Opened as accel5 in a container, identified by its device number.
		{PID: 300, Node: "accel0", BusID: "0000:19:00.0"},
		{PID: 400, Node: "accel1", BusID: "0000:1a:00.0"},
	}
	if got := sortUses(uses); !reflect.DeepEqual(got, want) {
		t.Errorf("got  %v\nwant %v", got, want)
	}
	if unreadable != 0 {
		t.Errorf("%d unreadable", unreadable)
	}
}

func TestScanProcessesWithoutSysfs(t *testing.T) {
	procRoot, _ := fakeHost(t)
	s := &ProcessScanner{ProcRoot: procRoot, SysRoot: filepath.Join(t.TempDir(), "no-sys")}
	uses, _, err := s.Scan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// Without sysfs the name is all there is: no address, the container's
	// name for accel0, and the NPU node cannot be told from a Gaudi one. A
	// plain file and a control node are still left out.
	want := []NodeUse{
		{PID: 100, Node: "accel0"},
		{PID: 200, Node: "hl2"},
		{PID: 300, Node: "accel5"},
		{PID: 300, Node: "accel9"},
		{PID: 400, Node: "accel1"},
	}
	if got := sortUses(uses); !reflect.DeepEqual(got, want) {
		t.Errorf("got  %v\nwant %v", got, want)
	}
}

func TestScanProcessesUnreadable(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root reads any directory")
	}
	procRoot, sysRoot := fakeHost(t)
	fd := filepath.Join(procRoot, "600", "fd")
	if err := os.MkdirAll(fd, 0o000); err != nil {
		t.Fatal(err)
	}
	s := &ProcessScanner{ProcRoot: procRoot, SysRoot: sysRoot}
	_, unreadable, err := s.Scan(context.Background())
	if err != nil || unreadable != 1 {
		t.Errorf("unreadable %d, err %v; want 1, nil", unreadable, err)
	}
}

func TestScanProcessesErrors(t *testing.T) {
	s := &ProcessScanner{ProcRoot: filepath.Join(t.TempDir(), "no-proc")}
	if _, _, err := s.Scan(context.Background()); ReasonOf(err) != ReasonProcfs {
		t.Errorf("missing procfs: %v", err)
	}
	procRoot, sysRoot := fakeHost(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s = &ProcessScanner{ProcRoot: procRoot, SysRoot: sysRoot}
	if _, _, err := s.Scan(ctx); ReasonOf(err) != ReasonTimeout {
		t.Errorf("cancelled scan: %v", err)
	}
}

func TestScanProcessesStuck(t *testing.T) {
	procRoot, sysRoot := fakeHost(t)
	release := make(chan struct{})
	s := &ProcessScanner{ProcRoot: procRoot, SysRoot: sysRoot}
	s.stat = func(path string) (fs.FileInfo, error) {
		<-release
		return os.Stat(path)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, _, err := s.Scan(ctx); ReasonOf(err) != ReasonTimeout {
		t.Fatalf("stuck scan: %v, want timeout", err)
	}
	if _, _, err := s.Scan(context.Background()); ReasonOf(err) != ReasonBusy {
		t.Fatalf("scan while stuck: %v, want busy", err)
	}
	close(release)
	waitFor(t, "the stuck scan to return", func() bool { return !s.running.Load() })
	if uses, _, err := s.Scan(context.Background()); err != nil || len(uses) != 4 {
		t.Errorf("after the stuck scan returned: %v, %v", uses, err)
	}
}

func TestAttachProcesses(t *testing.T) {
	devices, err := Parse(readFixture(t, "gaudi2-8x.csv"), tableFields, true)
	if err != nil {
		t.Fatal(err)
	}
	uses := []NodeUse{
		{PID: 300, Node: "accel0", BusID: "0000:19:00.0"},
		{PID: 100, Node: "accel0", BusID: "0000:19:00.0"},
		{PID: 100, Node: "accel0", BusID: "0000:19:00.0"},
		{PID: 400, Node: "accel1", BusID: "0000:1a:00.0"},
		{PID: 200, Node: "hl2", BusID: "0000:33:00.0"},
		{PID: 500, Node: "accel7"},                        // sysfs could not place it
		{PID: 600, Node: "accel8", BusID: "0000:ee:00.0"}, // hl-smi did not list it
	}
	unmatched := AttachProcesses(devices, uses)
	// 0000:19:00.0 is index 0, 0000:1a:00.0 index 1, 0000:33:00.0 index 2.
	for i, want := range [][]int{{100, 300}, {400}, {200}, nil} {
		if got := devices[i].Processes; !reflect.DeepEqual(got, want) {
			t.Errorf("device %d processes %v, want %v", i, got, want)
		}
	}
	if want := uses[5:]; !reflect.DeepEqual(unmatched, want) {
		t.Errorf("unmatched %v, want %v", unmatched, want)
	}
}

func TestDecodeDev(t *testing.T) {
	for _, tc := range []struct {
		dev  uint64
		want devNum
	}{
		{0x103, devNum{1, 3}},          // /dev/null
		{0x10500, devNum{261, 0}},      // accel0: major 261 in the low 12 major bits
		{0x10503, devNum{261, 3}},      // accel3
		{0x1105ff, devNum{261, 0x1ff}}, // minor 511: its bits above the low 8 start at bit 20
	} {
		if got := decodeDev(tc.dev); got != tc.want {
			t.Errorf("decodeDev(%#x) = %v, want %v", tc.dev, got, tc.want)
		}
	}
}

// TestScanRereadsReplacedNodes plays a driver reload that probed the two
// Gaudi devices in the other order: accel0 and accel1 keep their device
// numbers (the accel core numbers nodes in probe order) but are now each
// other's PCI device, with new dev files, as sysfs creates a node's
// attributes anew. The cached nodes must be read again, and a node whose
// dev file stayed the same must not be.
func TestScanRereadsReplacedNodes(t *testing.T) {
	procRoot, sysRoot := fakeHost(t)
	s := &ProcessScanner{ProcRoot: procRoot, SysRoot: sysRoot}
	scan := func() []NodeUse {
		t.Helper()
		uses, _, err := s.Scan(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return sortUses(uses)
	}
	scan()

	// The PCI device's pci_addr rewritten in place, its node's dev file
	// untouched: no sysfs does this, so it shows the cache is used.
	pci := filepath.Join(sysRoot, "devices", "pci0000:00")
	if err := os.WriteFile(filepath.Join(pci, "0000:19:00.0", "pci_addr"), []byte("0000:77:00.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := scan(); got[0].BusID != "0000:19:00.0" {
		t.Errorf("node with an unchanged dev file read again: %v", got)
	}
	if err := os.WriteFile(filepath.Join(pci, "0000:19:00.0", "pci_addr"), []byte("0000:19:00.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	// The reload: each class entry made anew beside the old one (so that
	// its dev file is another inode) and put in its place.
	class := filepath.Join(sysRoot, "class", "accel")
	for _, n := range []struct{ name, dev, pci string }{
		{"accel0", "1:3\n", "0000:1A:00.0"},
		{"accel1", "1:5\n", "0000:19:00.0"},
	} {
		fresh := filepath.Join(class, n.name+".new")
		if err := os.MkdirAll(fresh, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(fresh, "dev"), []byte(n.dev), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join(pci, n.pci), filepath.Join(fresh, "device")); err != nil {
			t.Fatal(err)
		}
		old := filepath.Join(class, n.name)
		if err := os.Rename(old, old+".old"); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(fresh, old); err != nil {
			t.Fatal(err)
		}
		if err := os.RemoveAll(old + ".old"); err != nil {
			t.Fatal(err)
		}
	}
	want := []NodeUse{
		{PID: 100, Node: "accel0", BusID: "0000:1a:00.0"},
		{PID: 200, Node: "hl2", BusID: "0000:33:00.0"},
		{PID: 300, Node: "accel0", BusID: "0000:1a:00.0"},
		{PID: 400, Node: "accel1", BusID: "0000:19:00.0"},
	}
	if got := scan(); !reflect.DeepEqual(got, want) {
		t.Errorf("after the reload:\ngot  %v\nwant %v", got, want)
	}

	// accel1 removed: its holder is no Gaudi user, and it is not kept.
	if err := os.RemoveAll(filepath.Join(class, "accel1")); err != nil {
		t.Fatal(err)
	}
	if got := scan(); !reflect.DeepEqual(got, want[:3]) {
		t.Errorf("after accel1 went:\ngot  %v\nwant %v", got, want[:3])
	}
	var cached []string
	for i := range s.nodes.classes {
		for name := range s.nodes.classes[i].entries {
			cached = append(cached, name)
		}
	}
	slices.Sort(cached)
	// accel9 is the NPU's, kept as not a Gaudi node.
	if want := []string{"accel0", "accel9", "hl2"}; !reflect.DeepEqual(cached, want) {
		t.Errorf("cached nodes %v, want %v", cached, want)
	}
}

// TestScanRereadsNodeWithoutAddress: a node whose PCI address could not be
// read is used without it, and read again at the next scan rather than
// kept without an address until its dev file changes (found by review25
// R25-4).
func TestScanRereadsNodeWithoutAddress(t *testing.T) {
	procRoot, sysRoot := fakeHost(t)
	s := &ProcessScanner{ProcRoot: procRoot, SysRoot: sysRoot}
	hl2 := func() string {
		t.Helper()
		uses, _, err := s.Scan(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range uses {
			if u.Node == "hl2" {
				return u.BusID
			}
		}
		t.Fatal("hl2's holder not found")
		return ""
	}
	addr := filepath.Join(sysRoot, "class", "habanalabs", "hl2", "pci_addr")
	if err := os.Remove(addr); err != nil {
		t.Fatal(err)
	}
	if got := hl2(); got != "" {
		t.Fatalf("hl2 without pci_addr has bus ID %q: the test proves nothing", got)
	}
	if err := os.WriteFile(addr, []byte("0000:33:00.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := hl2(); got != "0000:33:00.0" {
		t.Errorf("hl2 once its pci_addr reads: bus ID %q, want 0000:33:00.0", got)
	}
}

// TestScanBackToBack: a scan asked as soon as the last one returned runs;
// it is not refused as busy (it was, now and then, where the scanner was
// freed only after its answer was handed over).
func TestScanBackToBack(t *testing.T) {
	procRoot, sysRoot := fakeHost(t)
	s := &ProcessScanner{ProcRoot: procRoot, SysRoot: sysRoot}
	for i := range 200 {
		if _, _, err := s.Scan(context.Background()); err != nil {
			t.Fatalf("scan %d: %v", i+1, err)
		}
	}
}

// TestAttachByElimination: hl-smi printed N/A for one row's bus_id. The
// driver's compute nodes are as many as the rows, and one node's address
// is no row's: its uses are that row's (probe I, PI3, PI4). Not where two
// rows lack a bus_id, two nodes are no row's, or the counts differ (a
// device hl-smi does not list).
func TestAttachByElimination(t *testing.T) {
	rows := func(busIDs ...string) []Device {
		out := make([]Device, len(busIDs))
		for i, b := range busIDs {
			out[i] = Device{Index: i, BusID: b}
		}
		return out
	}
	uses := []NodeUse{{PID: 4102, BusID: "0000:29:00.0"}, {PID: 4101, BusID: "0000:29:00.0"}}
	for _, tc := range []struct {
		name      string
		rows      []Device
		nodes     []string
		tied      int // the row given the uses, -1 for none
		stillLeft int
	}{
		{"one nameless row, one unnamed node", rows("0000:19:00.0", "", "0000:39:00.0"), []string{"0000:19:00.0", "0000:29:00.0", "0000:39:00.0"}, 1, 0},
		{"two nameless rows", rows("", "", "0000:39:00.0"), []string{"0000:19:00.0", "0000:29:00.0", "0000:39:00.0"}, -1, 2},
		{"more nodes than rows", rows("0000:19:00.0", ""), []string{"0000:19:00.0", "0000:29:00.0", "0000:39:00.0"}, -1, 2},
		{"two unnamed nodes", rows("0000:19:00.0", "", "0000:49:00.0"), []string{"0000:19:00.0", "0000:29:00.0", "0000:39:00.0"}, -1, 2},
	} {
		nds := tc.rows
		still := AttachByElimination(nds, tc.nodes, slices.Clone(uses))
		if len(still) != tc.stillLeft {
			t.Errorf("%s: %d uses left untied, want %d", tc.name, len(still), tc.stillLeft)
		}
		for i := range nds {
			want := []int(nil)
			if i == tc.tied {
				want = []int{4101, 4102}
			}
			if !slices.Equal(nds[i].Processes, want) {
				t.Errorf("%s: row %d processes %v, want %v", tc.name, i, nds[i].Processes, want)
			}
		}
	}
}
