package amd

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
)

// TestFilesHeldReadTheSame: reading through held files gives what opening
// each file gives, the second read reopens nothing, and the files are
// closed when their card leaves class/drm and at Close.
func TestFilesHeldReadTheSame(t *testing.T) {
	files := NewFiles()
	defer files.Close()
	held := Reader{SysfsRoot: fixtureSys, Files: files}
	want := Reader{SysfsRoot: fixtureSys}.ReadDevice("card1")
	for i := range 2 {
		if got := held.ReadDevice("card1"); !reflect.DeepEqual(got, want) {
			t.Fatalf("read %d through held files:\n%+v\nwant\n%+v", i, got, want)
		}
	}
	n := files.Held()
	if n == 0 {
		t.Fatal("nothing held")
	}
	held.ReadDevice("card9")
	both := files.Held()
	if both <= n {
		t.Errorf("%d files held after reading card9 too, %d before", both, n)
	}
	files.keep([]string{"card9"})
	if got := files.Held(); got != both-n {
		t.Errorf("%d files held once card1 left, want card9's %d", got, both-n)
	}
	files.keep(nil)
	if got := files.Held(); got != 0 {
		t.Errorf("%d files held with no card listed", got)
	}
	held.ReadDevice("card1")
	files.Close()
	if got := files.Held(); got != 0 {
		t.Errorf("%d files held after Close", got)
	}
	if got := held.ReadDevice("card1"); !reflect.DeepEqual(got, want) || files.Held() != 0 {
		t.Errorf("after Close: %+v, %d held", got, files.Held())
	}
}

// TestFilesAfterENODEV: a held file whose kernfs node was removed (the
// driver reloaded, the GPU unbound) answers ENODEV (fs/kernfs/file.c). The
// read is then made on fresh opens, and every file of the card held before
// is let go, since the GPU's attributes were all re-registered: the next
// reads hold new descriptors, and read what opening each file gives. A
// file of a test tree cannot answer ENODEV, so the held gpu_metrics is made
// to.
func TestFilesAfterENODEV(t *testing.T) {
	files := NewFiles()
	defer files.Close()
	held := Reader{SysfsRoot: fixtureSys, Files: files}
	want := Reader{SysfsRoot: fixtureSys}.ReadDevice("card1")
	held.ReadDevice("card1")
	before := maps.Clone(files.cards["card1"].files)
	removeHeld(t, files.cards["card1"], "gpu_metrics")
	for i := range 2 {
		if got := held.ReadDevice("card1"); !reflect.DeepEqual(got, want) {
			t.Fatalf("read %d after ENODEV:\n%+v\nwant\n%+v", i, got, want)
		}
	}
	after := files.cards["card1"].files
	if len(after) != len(before) {
		t.Errorf("%d files held after the re-registration, %d before", len(after), len(before))
	}
	for path, h := range after {
		if before[path] == h {
			t.Errorf("%s is still read through the descriptor held before the ENODEV", path)
		}
	}
}

// TestFilesStaticAttributes: attributes fixed at registration are read
// once and kept, not held; a re-registration (ENODEV on a held reading)
// clears them before the same read asks for them again.
func TestFilesStaticAttributes(t *testing.T) {
	files := NewFiles()
	defer files.Close()
	held := Reader{SysfsRoot: fixtureSys, Files: files}
	want := Reader{SysfsRoot: fixtureSys}.ReadDevice("card1")
	held.ReadDevice("card1")
	cf := files.cards["card1"]
	var product string
	limits := 0
	for path := range cf.static {
		if strings.HasSuffix(path, "/product_name") {
			product = path
		}
		if strings.HasSuffix(path, "_crit") || strings.HasSuffix(path, "_emergency") {
			limits++
		}
		if cf.files[path] != nil {
			t.Errorf("%s is kept and held", path)
		}
	}
	if product == "" {
		t.Fatal("product_name is not kept")
	}
	// card1's hwmon has temp2_crit and temp3_crit, no emergency limits.
	if limits != 2 {
		t.Errorf("%d hwmon temperature limits kept, want card1's 2 (temp2_crit, temp3_crit)", limits)
	}
	for path := range cf.files {
		if strings.HasSuffix(path, "_crit") || strings.HasSuffix(path, "_emergency") {
			t.Errorf("temperature limit %s is held, read at every scrape", path)
		}
	}
	dir := strings.TrimSuffix(product, "/product_name")
	for _, name := range []string{"unique_id", "serial_number", "vbios_version", "max_link_speed", "max_link_width", "xgmi_device_id", "available_compute_partition"} {
		if _, ok := cf.static[dir+"/"+name]; !ok && !cf.missing[dir+"/"+name] {
			t.Errorf("%s is neither kept nor known missing", name)
		}
	}
	// Served from what was kept: a changed value would not be seen
	// before the GPU registers again.
	cf.static[product] = []byte("kept\n")
	if got := held.ReadDevice("card1"); got.ProductName.Value != "kept" {
		t.Fatalf("product name %q, want the kept one", got.ProductName.Value)
	}
	removeHeld(t, cf, "gpu_busy_percent")
	if got := held.ReadDevice("card1"); !reflect.DeepEqual(got, want) {
		t.Fatalf("read after ENODEV:\n%+v\nwant\n%+v", got, want)
	}
}

// removeHeld makes the held file of the card's attribute name answer as a
// removed kernfs node does (ENODEV), which a file of a test tree cannot.
func removeHeld(t *testing.T, cf *cardFiles, name string) {
	t.Helper()
	failHeld(t, cf, name, syscall.ENODEV)
}

// failHeld makes the held file of the card's attribute name answer errno.
func failHeld(t *testing.T, cf *cardFiles, name string, errno syscall.Errno) {
	t.Helper()
	for path, h := range cf.files {
		if strings.HasSuffix(path, "/"+name) {
			h.read = func([]byte) (int, error) { return 0, errno }
			return
		}
	}
	t.Fatalf("%s is not held", name)
}

// TestFilesEIOIsOneFilesError: amdgpu answers EIO for one SMU message that
// failed (smu_cmn.c, SMU_RESP_CMD_FAIL) on a GPU whose other readings still
// answer: that file's reading is unset and filed, the GPU is not down.
func TestFilesEIOIsOneFilesError(t *testing.T) {
	files := NewFiles()
	defer files.Close()
	r := Reader{SysfsRoot: fixtureSys, Files: files}
	before := r.ReadDevice("card1")
	failHeld(t, files.cards["card1"], "gpu_busy_percent", syscall.EIO)
	got := r.ReadDevice("card1")
	if got.Down || got.GPUBusy.OK {
		t.Errorf("down %v, busy %+v; want up without the busy reading", got.Down, got.GPUBusy)
	}
	if files := errorFiles(got); !reflect.DeepEqual(files, []string{"gpu_busy_percent"}) || !errors.Is(got.Errors[0], syscall.EIO) {
		t.Errorf("errors %v", got.Errors)
	}
	if got.MemBusy != before.MemBusy || got.VRAMUsed != before.VRAMUsed || !reflect.DeepEqual(got.Temperatures, before.Temperatures) {
		t.Errorf("the other readings changed: %+v", got)
	}
}

// TestHeldFileClosedUnderRead: a held file closed between a read's lookup
// and its pread (by Close, or by the end of an overlapping read of the
// card) is opened anew and read, not taken for a failed read of the GPU
// (found by review25 R25-3: RawConn.Read answers "use of closed file",
// which the read did not take for os.ErrClosed).
func TestHeldFileClosedUnderRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gpu_busy_percent")
	if err := os.WriteFile(path, []byte("42\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fs := NewFiles()
	defer fs.Close()
	cf := fs.card("card0")
	buf := make([]byte, maxValueSize+1)
	if _, err := cf.read([]byte(path), maxValueSize, buf); err != nil {
		t.Fatal(err)
	}
	fs.mu.Lock()
	h := cf.files[path]
	fs.mu.Unlock()
	if h == nil {
		t.Fatal("the file is not held: the test proves nothing")
	}
	h.f.Close()
	if b, err := cf.read([]byte(path), maxValueSize, buf); err != nil || string(b) != "42\n" {
		t.Errorf("read of a held file closed under it = %q, %v; want 42 read anew", b, err)
	}
}
