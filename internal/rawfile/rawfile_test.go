package rawfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
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
