package amd

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// TestHeldDirListsCurrentEntries: a directory listed through Files is held
// and listed again from its start, seeing the entries added and removed
// since; one removed while held, which kernfs lists empty, is listed anew
// from its path (here the old directory is moved aside and emptied, as
// kernfs empties a removed one, and a new one made in its place); one
// removed for good is absent, and no longer held.
func TestHeldDirListsCurrentEntries(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "ras")
	touch := func(names ...string) {
		t.Helper()
		for _, n := range names {
			if err := os.WriteFile(filepath.Join(dir, n), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	files := NewFiles()
	defer files.Close()
	list := func(want ...string) {
		t.Helper()
		got, err := files.listDir(dir, 64)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("listed %q, %v; want %q", got, err, want)
		}
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	touch("umc_err_count", "gfx_err_count")
	list("gfx_err_count", "umc_err_count")
	held := files.dirs[dir]
	if held == nil || files.Held() != 1 {
		t.Fatalf("%d held, %v", files.Held(), held)
	}
	touch("sdma_err_count")
	if err := os.Remove(filepath.Join(dir, "gfx_err_count")); err != nil {
		t.Fatal(err)
	}
	list("sdma_err_count", "umc_err_count")
	if files.dirs[dir] != held {
		t.Error("the held directory was opened anew for a listing that had entries")
	}

	// The directory registered anew: the held one lists nothing.
	old := filepath.Join(root, "ras.removed")
	if err := os.Rename(dir, old); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"sdma_err_count", "umc_err_count"} {
		if err := os.Remove(filepath.Join(old, n)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	touch("xgmi_wafl_err_count")
	list("xgmi_wafl_err_count")
	if files.dirs[dir] == held || files.Held() != 1 {
		t.Errorf("after the directory was made anew: %d held, the old one still", files.Held())
	}

	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if got, err := files.listDir(dir, 64); !errors.Is(err, fs.ErrNotExist) || got != nil {
		t.Errorf("removed: %q, %v", got, err)
	}
	if files.Held() != 0 {
		t.Errorf("%d held after the directory was removed", files.Held())
	}
}

// TestHwmonPathDroppedWithTheCard: the hwmon directory's name (hwmonN,
// numbered in probe order) is kept from one read of a card to the next,
// and dropped when the card's directory goes (it leaves class/drm), when
// the card is renamed (registered again as another cardN), and when its
// files answer ENODEV (registered again under the same name between two
// reads): each time the new hwmon directory is read, not the old one,
// whose files a test tree keeps readable.
func TestHwmonPathDroppedWithTheCard(t *testing.T) {
	root := buildCard(t, map[string]string{"vendor": "0x1002\n", "gpu_busy_percent": "5\n"})
	dev := filepath.Join(root, "devices", "pci0000:00", "0000:03:00.0")
	hwmon := func(name, millidegrees string) {
		t.Helper()
		old, _ := filepath.Glob(filepath.Join(dev, "hwmon", "hwmon*"))
		for _, o := range old {
			// Left in place elsewhere: a file still held reads its old
			// value.
			if err := os.Rename(o, filepath.Join(root, filepath.Base(o)+".removed")); err != nil {
				t.Fatal(err)
			}
		}
		d := filepath.Join(dev, "hwmon", name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "temp2_input"), []byte(millidegrees+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	files := NewFiles()
	defer files.Close()
	r := Reader{SysfsRoot: root, Files: files}
	read := func(card string, want float64) {
		t.Helper()
		cards, err := r.Cards()
		if err != nil || !reflect.DeepEqual(cards, []string{card}) {
			t.Fatalf("cards %q, %v; want %s", cards, err, card)
		}
		if got := r.ReadDevice(card).Temperatures["junction"]; got != want {
			t.Errorf("%s: junction %v °C, want %v", card, got, want)
		}
	}
	classDRM := filepath.Join(root, "class", "drm")

	hwmon("hwmon3", "40000")
	read("card0", 40)
	read("card0", 40)
	if _, ok := files.cards["card0"].dirs[filepath.Join(classDRM, "card0", "device", "hwmon")]; !ok {
		t.Fatal("the hwmon listing is not kept")
	}

	// The card's directory goes, and comes back with another hwmon.
	if err := os.Rename(filepath.Join(classDRM, "card0"), filepath.Join(root, "card0.away")); err != nil {
		t.Fatal(err)
	}
	if cards, err := r.Cards(); err != nil || len(cards) != 0 || files.cards["card0"] != nil {
		t.Fatalf("cards %q, %v; card0's files kept: %v", cards, err, files.cards["card0"] != nil)
	}
	hwmon("hwmon7", "50000")
	if err := os.Rename(filepath.Join(root, "card0.away"), filepath.Join(classDRM, "card0")); err != nil {
		t.Fatal(err)
	}
	read("card0", 50)

	// Renamed: registered again as card1.
	hwmon("hwmon9", "60000")
	if err := os.Rename(filepath.Join(classDRM, "card0"), filepath.Join(classDRM, "card1")); err != nil {
		t.Fatal(err)
	}
	read("card1", 60)
	if files.cards["card0"] != nil {
		t.Error("card0's files are kept after it became card1")
	}

	// Registered again as card1 between two reads: its held files answer
	// ENODEV.
	hwmon("hwmon2", "70000")
	removeHeld(t, files.cards["card1"], "gpu_busy_percent")
	read("card1", 70)
}
