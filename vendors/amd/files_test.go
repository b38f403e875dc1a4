package amd

import (
	"reflect"
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
