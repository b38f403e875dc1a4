package rawfile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"
)

func TestOpenAndRead(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "value")
	if err := os.WriteFile(path, []byte("42\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fd, err := Open(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	buf := make([]byte, 16)
	if n, err := Read(fd, buf); err != nil || string(buf[:n]) != "42\n" {
		t.Errorf("read %q, %v", buf[:n], err)
	}
	// After the read the offset is at the end; a pread at 0 reads the
	// whole file again, as a held sysfs attribute is re-read.
	if n, err := Pread(fd, buf, 0); err != nil || string(buf[:n]) != "42\n" {
		t.Errorf("pread at 0: %q, %v", buf[:n], err)
	}
	if _, err := Open(path, syscall.O_DIRECTORY); !errors.Is(err, syscall.ENOTDIR) {
		t.Errorf("a file opened as a directory: %v", err)
	}
	var pe *fs.PathError
	if _, err := Open(filepath.Join(dir, "missing"), 0); !errors.Is(err, fs.ErrNotExist) || !errors.As(err, &pe) || pe.Path != filepath.Join(dir, "missing") {
		t.Errorf("missing file: %v", err)
	}
}

func TestDirents(t *testing.T) {
	// Two linux_dirent64 records, 24 bytes each (19 + name + NUL, padded
	// to 8), then a record whose d_reclen runs past the buffer.
	rec := func(name string, reclen int) []byte {
		b := make([]byte, reclen)
		binary.NativeEndian.PutUint16(b[direntReclen:], uint16(reclen))
		copy(b[DirentNameOffset:], name)
		return b
	}
	buf := append(append(rec("12", 24), rec("3", 24)...), rec("4", 24)[:20]...)
	binary.NativeEndian.PutUint16(buf[48+direntReclen:], 24)
	var names []string
	for r := range Dirents(buf) {
		names = append(names, string(DirentName(r)))
	}
	if !reflect.DeepEqual(names, []string{"12", "3"}) {
		t.Errorf("names %q", names)
	}
}

// TestOpenAt: a path relative to an open directory, NUL-terminated; one
// without its NUL is refused rather than read past.
func TestOpenAt(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := Open(dir, syscall.O_DIRECTORY)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(d)
	fd, err := OpenAt(d, []byte("f\x00"), 0)
	if err != nil {
		t.Fatal(err)
	}
	syscall.Close(fd)
	if _, err := OpenAt(d, []byte("f"), 0); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("OpenAt of a path without its NUL: %v, want EINVAL", err)
	}
	if _, err := OpenAt(d, []byte("g\x00"), 0); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("OpenAt of a missing file: %v, want ENOENT", err)
	}
}

// FuzzDirents: whatever bytes a directory read returns (a filesystem of
// another's making, a short read), the records walked are whole ones that
// hold a name, and the names carry no NUL.
func FuzzDirents(f *testing.F) {
	rec := make([]byte, 24)
	binary.NativeEndian.PutUint16(rec[direntReclen:], 24)
	copy(rec[DirentNameOffset:], "12")
	f.Add(rec)
	f.Add(append(rec, rec[:20]...))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		total := 0
		for r := range Dirents(b) {
			if len(r) <= DirentNameOffset {
				t.Fatalf("record of %d bytes holds no name", len(r))
			}
			if n := DirentName(r); bytes.IndexByte(n, 0) >= 0 {
				t.Fatalf("name %q holds a NUL", n)
			}
			total += len(r)
		}
		if total > len(b) {
			t.Fatalf("records of %d bytes walked in %d", total, len(b))
		}
	})
}
