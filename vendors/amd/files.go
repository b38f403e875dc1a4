package amd

import (
	"errors"
	"os"
	"sync"
	"syscall"

	"github.com/xpu-exporter/xpu_exporter/internal/rawfile"
)

// Files keeps the sysfs attribute files of each card open from one
// ReadDevice to the next and re-reads them with pread(2) at offset 0.
// Opening a sysfs file walks its path through the class/drm symlinks and
// sets up the kernel's open-file state each time, which was most of what a
// scrape of an AMD node cost. A held file gives a fresh value on every such
// read: Documentation/filesystems/sysfs.rst, "If userspace seeks back to
// zero or does a pread(2) with an offset of '0' the show() method will be
// called again, rearmed, to fill the buffer" (fs/seq_file.c,
// seq_read_iter, starts the show over for a read at offset 0).
//
// An attribute removed while held (the GPU unbound, the driver reloaded)
// answers every read of the held fd with ENODEV (fs/kernfs/file.c: a read
// of a node that is no longer active fails with -ENODEV). So any error of
// a held file closes it and the read is made once more on a fresh open:
// a reading is always what opening the file now would give, and a GPU that
// is really gone is reported as before. The files a read of a card no
// longer asked for (a RAS block or hwmon directory that went away) are
// closed when that read ends, and Close closes the rest.
//
// The zero Reader holds nothing and opens every file at every read.
type Files struct {
	mu    sync.Mutex
	cards map[string]*cardFiles
}

// maxHeldFiles bounds the files held open across all cards. A GPU has
// about fifty attribute files (value files, hwmon channels, RAS blocks,
// gpu_metrics), so this holds every file of 32 GPUs; past it, files are
// opened at each read as without Files.
const maxHeldFiles = 1600

// NewFiles returns an empty set of held files.
func NewFiles() *Files { return &Files{cards: map[string]*cardFiles{}} }

// cardFiles are the held files of one card, by path, and which of them the
// read in progress used.
type cardFiles struct {
	fs    *Files
	files map[string]*heldFile
	used  map[string]bool
	// missing are the files that did not exist when first asked for.
	// amdgpu decides which attributes a GPU has when it registers them
	// (amdgpu_pm.c, amdgpu_device_attr_create_groups creates only those
	// the ASIC supports; hwmon_attributes_visible hides the hwmon channels
	// it lacks), so a file missing once stays missing until the GPU is
	// registered again, which removes every file held (ENODEV) and clears
	// this set.
	missing map[string]bool
	// dirs are the listings of directories whose entries are registered
	// with the GPU and removed with it (stableDir), cleared with missing.
	dirs map[string][]string
	// static are the contents of attributes whose value the driver fixes
	// when the GPU registers (readStatic), cleared with missing.
	static map[string][]byte
}

type heldFile struct {
	f  *os.File
	rc syscall.RawConn
	// read is pread, or in tests what a removed kernfs node answers.
	read func(buf []byte) (int, error)
}

// card returns the held files of card for one ReadDevice, nil without Files.
func (fs *Files) card(card string) *cardFiles {
	if fs == nil {
		return nil
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.cards == nil {
		// Closed: read as without Files.
		return nil
	}
	cf := fs.cards[card]
	if cf == nil {
		cf = &cardFiles{fs: fs, files: map[string]*heldFile{}, missing: map[string]bool{}, dirs: map[string][]string{}, static: map[string][]byte{}}
		fs.cards[card] = cf
	}
	cf.used = map[string]bool{}
	return cf
}

// read reads path through its held file, opening and holding it if it is
// not held yet; see Files for the errors.
func (cf *cardFiles) read(path string, limit int) ([]byte, error) {
	if cf == nil {
		return readFile(path, limit)
	}
	fs := cf.fs
	fs.mu.Lock()
	cf.used[path] = true
	h, missing := cf.files[path], cf.missing[path]
	fs.mu.Unlock()
	if missing {
		return nil, &os.PathError{Op: "open", Path: path, Err: syscall.ENOENT}
	}
	if h != nil {
		b, err := readLimited(h.read, limit)
		switch {
		case err == nil:
			return b, nil
		case errors.Is(err, syscall.ENODEV):
			// The file may have been removed with all the GPU's others:
			// read them all anew.
			cf.reset()
		case errors.Is(err, os.ErrClosed):
			// Closed under this read by Close, or by the end of another
			// read of the card: open it anew.
		default:
			cf.drop(path, h)
			return nil, err
		}
	}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		fs.mu.Lock()
		cf.missing[path] = true
		fs.mu.Unlock()
	}
	if err != nil {
		return nil, err
	}
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	h = &heldFile{f: f, rc: rc}
	h.read = h.pread
	b, err := readLimited(h.read, limit)
	fs.mu.Lock()
	keep := err == nil && fs.cards != nil && cf.files[path] == nil && fs.held() < maxHeldFiles
	if keep {
		cf.files[path] = h
	}
	fs.mu.Unlock()
	if !keep {
		f.Close()
	}
	return b, err
}

// readStatic reads path, an attribute whose value the driver fixes when the
// GPU registers (its identity, PCIe capabilities, partition modes, XGMI
// hive, sensor labels), once: the content is kept, and no file held, until
// the GPU registers again (reset). A read of the card makes its held reads
// before its static ones, so that a re-registration (ENODEV) is seen first.
func (cf *cardFiles) readStatic(path string, limit int) ([]byte, error) {
	if cf == nil {
		return readFile(path, limit)
	}
	fs := cf.fs
	fs.mu.Lock()
	b, ok := cf.static[path]
	missing := cf.missing[path]
	fs.mu.Unlock()
	switch {
	case ok:
		return b, nil
	case missing:
		return nil, &os.PathError{Op: "open", Path: path, Err: syscall.ENOENT}
	}
	b, err := readFile(path, limit)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	switch {
	case err == nil:
		cf.static[path] = b
	case errors.Is(err, os.ErrNotExist):
		cf.missing[path] = true
	}
	return b, err
}

// stableDir lists dir, a directory whose entries the GPU registers once
// and removes only with itself: its DRM minors (drm_dev_register) and its
// hwmon device (amdgpu_pm_sysfs_init). The listing is kept like the
// missing files.
func (cf *cardFiles) stableDir(dir string, limit int) ([]string, error) {
	if cf == nil {
		return readDirNames(dir, limit)
	}
	fs := cf.fs
	fs.mu.Lock()
	names, ok := cf.dirs[dir]
	fs.mu.Unlock()
	if ok {
		return names, nil
	}
	names, err := readDirNames(dir, limit)
	if err == nil {
		fs.mu.Lock()
		cf.dirs[dir] = names
		fs.mu.Unlock()
	}
	return names, err
}

// drop closes h if it is still the held file of path.
func (cf *cardFiles) drop(path string, h *heldFile) {
	fs := cf.fs
	fs.mu.Lock()
	if cf.files[path] == h {
		delete(cf.files, path)
	}
	fs.mu.Unlock()
	h.f.Close()
}

// reset closes every held file of the card and forgets its missing files.
func (cf *cardFiles) reset() {
	fs := cf.fs
	fs.mu.Lock()
	stale := cf.files
	cf.files, cf.missing, cf.dirs, cf.static = map[string]*heldFile{}, map[string]bool{}, map[string][]string{}, map[string][]byte{}
	fs.mu.Unlock()
	for _, h := range stale {
		h.f.Close()
	}
}

// done closes the files of the card that the read which ends did not use.
func (cf *cardFiles) done() {
	if cf == nil {
		return
	}
	fs := cf.fs
	fs.mu.Lock()
	var stale []*heldFile
	for path, h := range cf.files {
		if !cf.used[path] {
			stale = append(stale, h)
			delete(cf.files, path)
		}
	}
	fs.mu.Unlock()
	for _, h := range stale {
		h.f.Close()
	}
}

// keep closes the files of every card not in cards: a card that left
// class/drm is not read again under that name.
func (fs *Files) keep(cards []string) {
	if fs == nil {
		return
	}
	listed := make(map[string]bool, len(cards))
	for _, c := range cards {
		listed[c] = true
	}
	fs.mu.Lock()
	var stale []*heldFile
	for card, cf := range fs.cards {
		if listed[card] {
			continue
		}
		for _, h := range cf.files {
			stale = append(stale, h)
		}
		delete(fs.cards, card)
	}
	fs.mu.Unlock()
	for _, h := range stale {
		h.f.Close()
	}
}

// Close closes every held file. A read still in progress on one (a GPU
// whose sysfs read blocks) keeps its descriptor until it returns, as
// os.File guarantees, and no file is held afterwards.
func (fs *Files) Close() {
	if fs == nil {
		return
	}
	fs.mu.Lock()
	cards := fs.cards
	fs.cards = nil
	fs.mu.Unlock()
	for _, cf := range cards {
		for _, h := range cf.files {
			h.f.Close()
		}
	}
}

// Held is the number of files held open.
func (fs *Files) Held() int {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.held()
}

// held counts the held files; fs.mu must be held. Counted rather than kept
// as a total that every open and close would have to update: it is asked
// only when a file is opened, a few dozen cards at most.
func (fs *Files) held() int {
	n := 0
	for _, cf := range fs.cards {
		n += len(cf.files)
	}
	return n
}

// pread makes one pread(2) at offset 0 (see readFile for why one).
func (h *heldFile) pread(buf []byte) (n int, err error) {
	cerr := h.rc.Read(func(fd uintptr) bool {
		n, err = rawfile.Pread(int(fd), buf, 0)
		return true
	})
	if cerr != nil {
		return 0, cerr
	}
	if n < 0 {
		n = 0
	}
	return n, err
}
