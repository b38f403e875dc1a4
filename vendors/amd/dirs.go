package amd

import (
	"io"
	"os"
	"sort"
	"sync"
	"syscall"

	"github.com/xpu-exporter/xpu_exporter/internal/rawfile"
)

// heldDir is a directory that is listed at every scrape (a card's ras,
// class/drm), held open between listings and listed again from its start
// instead of being opened anew, which walks its whole path: rewinddir(3)
// is an lseek(2) to 0 (glibc's rewinddir makes the same call), and POSIX
// says of rewinddir: "It shall also cause the directory stream to refer to
// the current state of the corresponding directory, as a call to
// opendir() would have done." An entry added or removed since is seen.
//
// A directory removed while held lists no entries (kernfs removes a
// directory's entries with it, fs/kernfs/dir.c, __kernfs_remove) or fails
// (ENOENT, a disk filesystem's removed directory: fs/readdir.c,
// iterate_dir, IS_DEADDIR). So a listing that fails or is empty is made
// once more on a fresh open: a listing is always what opening the
// directory now gives, and a directory made anew under the same path (a
// GPU registered again, the drm module reloaded) is listed, not the
// removed one.
type heldDir struct {
	f  *os.File
	rc syscall.RawConn
	// used is as for heldFile.
	used uint64

	// mu guards the listing in progress, made by onFD (made once, as
	// heldFile's) with limit into buf; names are its names, in the order
	// read, err its error.
	mu    sync.Mutex
	limit int
	buf   []byte
	names []string
	err   error
	onFD  func(fd uintptr) bool
}

// direntBuf is the getdents64 buffer of a listing: a sysfs directory of a
// few dozen entries fits in one call.
const direntBuf = 8 << 10

// openDir opens dir to hold it.
func openDir(dir string) (*heldDir, error) {
	f, rc, err := openHeld(dir)
	if err != nil {
		return nil, err
	}
	h := &heldDir{f: f, rc: rc, buf: make([]byte, direntBuf)}
	h.onFD = func(fd uintptr) bool {
		h.names, h.err = h.readNames(int(fd), h.names)
		return true
	}
	return h, nil
}

// list lists the held directory from its start: at most limit names,
// sorted. A name listed the time before is given as the same string, so
// that an unchanged directory allocates nothing but the slice returned.
func (h *heldDir) list(limit int) ([]string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.limit = limit
	if err := h.rc.Read(h.onFD); err != nil {
		return nil, err
	}
	if h.err != nil {
		return nil, &os.PathError{Op: "readdirent", Path: h.f.Name(), Err: h.err}
	}
	names := append([]string(nil), h.names...)
	sort.Strings(names)
	return names, nil
}

// readNames lists the directory open at fd from its start, reusing the
// strings of prev (the names read before, in the order read).
func (h *heldDir) readNames(fd int, prev []string) ([]string, error) {
	if _, err := syscall.Seek(fd, 0, io.SeekStart); err != nil {
		return prev, err
	}
	var names []string
	for len(names) < h.limit {
		n, err := rawfile.ReadDirent(fd, h.buf)
		if err != nil {
			if len(names) > 0 {
				// As readDirNames: what was listed stands.
				break
			}
			return prev, err
		}
		if n <= 0 {
			break
		}
		for rec := range rawfile.Dirents(h.buf[:n]) {
			if len(names) >= h.limit {
				break
			}
			name := rawfile.DirentName(rec)
			if string(name) == "." || string(name) == ".." {
				continue
			}
			// The listing is mostly in the order of the one before.
			if i := len(names); i < len(prev) && prev[i] == string(name) {
				names = append(names, prev[i])
			} else {
				names = append(names, string(name))
			}
		}
	}
	return names, nil
}

// listHeld lists dir through the held directory h, or opens it when h is
// nil. An empty or failed listing of a held directory is made once more on
// a fresh open (see heldDir). It returns the directory to hold from now on
// (nil when none), and the one held before if it is let go, for the
// caller to close.
func listHeld[P string | []byte](dir P, limit int, h *heldDir) (names []string, held *heldDir, stale *heldDir, err error) {
	if h != nil {
		names, err = h.list(limit)
		if err == nil && len(names) > 0 {
			return names, h, nil, nil
		}
		stale = h
	}
	h, err = openDir(string(dir))
	if err != nil {
		return nil, nil, stale, err
	}
	names, err = h.list(limit)
	if err != nil {
		h.f.Close()
		return nil, nil, stale, err
	}
	return names, h, stale, nil
}
