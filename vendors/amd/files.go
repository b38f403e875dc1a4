package amd

import (
	"errors"
	"fmt"
	"os"
	"slices"
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
	// dirs are the node's directories listed at every scrape (class/drm),
	// held while Files is (heldDir).
	dirs map[string]*heldDir
}

// maxHeldFiles bounds the files and directories held open across all
// cards. A GPU has about fifty attribute files (value files, hwmon
// channels, RAS blocks, gpu_metrics), so this holds every file of 32 GPUs;
// past it, files are opened at each read as without Files.
const maxHeldFiles = 1600

// NewFiles returns an empty set of held files.
func NewFiles() *Files { return &Files{cards: map[string]*cardFiles{}, dirs: map[string]*heldDir{}} }

// cardFiles are the held files of one card, by path.
type cardFiles struct {
	fs    *Files
	files map[string]*heldFile
	// gen counts the reads of the card; a held file's used is the last
	// read that asked for it, which done compares with gen.
	gen uint64
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
	// listed are the directories of the card listed at every read (ras),
	// held open (heldDir) like its files.
	listed map[string]*heldDir
}

type heldFile struct {
	f  *os.File
	rc syscall.RawConn
	// read is pread, or in tests what a removed kernfs node answers.
	read func(buf []byte) (int, error)
	// used is the read of the card (cardFiles.gen) that last asked for
	// the file; fs.mu guards it.
	used uint64

	// mu guards the pread in progress: the function RawConn.Read calls
	// (onFD, made once when the file is opened, since a closure made at
	// each read would be allocated at each read, RawConn being an
	// interface) takes its buffer and leaves its result here.
	mu   sync.Mutex
	buf  []byte
	n    int
	err  error
	onFD func(fd uintptr) bool
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
		cf = &cardFiles{fs: fs, files: map[string]*heldFile{}, missing: map[string]bool{}, dirs: map[string][]string{}, static: map[string][]byte{}, listed: map[string]*heldDir{}}
		fs.cards[card] = cf
	}
	cf.gen++
	return cf
}

// errMissing is the error of a file known to be missing (cardFiles.missing):
// what opening it would answer, without a path to allocate at each read,
// since only absent looks at it.
var errMissing error = syscall.ENOENT

// read reads path (a file's path, which the caller may reuse once read
// returns) through its held file into buf, opening and holding the file if
// it is not held yet; see Files for the errors. The content returned is
// buf's, len(buf) > limit.
func (cf *cardFiles) read(path []byte, limit int, buf []byte) ([]byte, error) {
	if cf == nil {
		return readInto(string(path), limit, buf)
	}
	fs := cf.fs
	fs.mu.Lock()
	// Indexed with string(path), which the compiler does not allocate.
	h, missing := cf.files[string(path)], cf.missing[string(path)]
	if h != nil {
		h.used = cf.gen
	}
	fs.mu.Unlock()
	if missing {
		return nil, errMissing
	}
	if h != nil {
		b, err := readLimited(h.read, limit, buf)
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
			cf.drop(string(path), h)
			return nil, err
		}
	}
	name := string(path)
	f, rc, err := openHeld(name)
	if errors.Is(err, os.ErrNotExist) {
		fs.mu.Lock()
		cf.missing[name] = true
		fs.mu.Unlock()
	}
	if err != nil {
		return nil, err
	}
	h = &heldFile{f: f, rc: rc}
	h.read = h.pread
	h.onFD = func(fd uintptr) bool {
		h.n, h.err = rawfile.Pread(int(fd), h.buf, 0)
		return true
	}
	b, err := readLimited(h.read, limit, buf)
	fs.mu.Lock()
	keep := err == nil && fs.cards != nil && cf.files[name] == nil && fs.held() < maxHeldFiles
	if keep {
		h.used = cf.gen
		cf.files[name] = h
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
// The content returned is kept: the caller must not change it.
func (cf *cardFiles) readStatic(path []byte, limit int, buf []byte) ([]byte, error) {
	if cf == nil {
		return readInto(string(path), limit, buf)
	}
	fs := cf.fs
	fs.mu.Lock()
	b, ok := cf.static[string(path)]
	missing := cf.missing[string(path)]
	fs.mu.Unlock()
	switch {
	case ok:
		return b, nil
	case missing:
		return nil, errMissing
	}
	name := string(path)
	b, err := readFile(name, limit)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	switch {
	case err == nil:
		cf.static[name] = b
	case errors.Is(err, os.ErrNotExist):
		cf.missing[name] = true
	}
	return b, err
}

// stableDir lists dir, a directory whose entries the GPU registers once
// and removes only with itself: its DRM minors (drm_dev_register) and its
// hwmon device (amdgpu_pm_sysfs_init). The listing is kept like the
// missing files.
func (cf *cardFiles) stableDir(dir []byte, limit int) ([]string, error) {
	if cf == nil {
		return readDirNames(string(dir), limit)
	}
	fs := cf.fs
	fs.mu.Lock()
	names, ok := cf.dirs[string(dir)]
	fs.mu.Unlock()
	if ok {
		return names, nil
	}
	name := string(dir)
	names, err := readDirNames(name, limit)
	if err == nil {
		fs.mu.Lock()
		cf.dirs[name] = names
		fs.mu.Unlock()
	}
	return names, err
}

// listDir lists dir, a directory of the card whose entries can change
// while the GPU is registered (ras: a block the driver fails to enable
// again after a reset is removed, amdgpu_ras_block_late_init), through its
// held directory.
func (cf *cardFiles) listDir(dir []byte, limit int) ([]string, error) {
	if cf == nil {
		return readDirNames(string(dir), limit)
	}
	return listIn(cf.fs, &cf.listed, cf.gen, dir, limit)
}

// listDir lists dir, a directory of the node listed at every scrape,
// through its held directory.
func (fs *Files) listDir(dir string, limit int) ([]string, error) {
	if fs == nil {
		return readDirNames(dir, limit)
	}
	return listIn(fs, &fs.dirs, 0, dir, limit)
}

// listIn lists dir through its held directory in *held (fs.mu guards the
// map, which a reset or Close replaces), used marking the read it serves.
// dir is a string or, built in a buffer, bytes, which string(dir) indexes
// the map with without allocating.
func listIn[P string | []byte](fs *Files, held *map[string]*heldDir, used uint64, dir P, limit int) ([]string, error) {
	fs.mu.Lock()
	var h *heldDir
	if *held != nil {
		h = (*held)[string(dir)]
	}
	if h != nil {
		h.used = used
	}
	fs.mu.Unlock()
	names, now, stale, err := listHeld(dir, limit, h)
	fs.mu.Lock()
	m := *held
	if stale != nil && m != nil && m[string(dir)] == stale {
		delete(m, string(dir))
	}
	keep := now != nil && now != h && m != nil && m[string(dir)] == nil && fs.held() < maxHeldFiles
	if keep {
		now.used = used
		m[string(dir)] = now
	}
	fs.mu.Unlock()
	if stale != nil {
		stale.f.Close()
	}
	if now != nil && now != h && !keep {
		now.f.Close()
	}
	return names, err
}

// openHeld opens path to hold it, with the raw descriptor that reads it.
func openHeld(path string) (*os.File, syscall.RawConn, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, rc, nil
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

// reset closes every held file and directory of the card and forgets its
// missing files.
func (cf *cardFiles) reset() {
	fs := cf.fs
	fs.mu.Lock()
	stale, listed := cf.files, cf.listed
	cf.files, cf.missing, cf.dirs, cf.static, cf.listed = map[string]*heldFile{}, map[string]bool{}, map[string][]string{}, map[string][]byte{}, map[string]*heldDir{}
	fs.mu.Unlock()
	for _, h := range stale {
		h.f.Close()
	}
	for _, h := range listed {
		h.f.Close()
	}
}

// done closes the files and directories of the card that the read which
// ends did not use.
func (cf *cardFiles) done() {
	if cf == nil {
		return
	}
	fs := cf.fs
	fs.mu.Lock()
	var stale []*os.File
	for path, h := range cf.files {
		if h.used != cf.gen {
			stale = append(stale, h.f)
			delete(cf.files, path)
		}
	}
	for path, h := range cf.listed {
		if h.used != cf.gen {
			stale = append(stale, h.f)
			delete(cf.listed, path)
		}
	}
	fs.mu.Unlock()
	for _, f := range stale {
		f.Close()
	}
}

// keep closes the files of every card not in cards: a card that left
// class/drm is not read again under that name.
func (fs *Files) keep(cards []string) {
	if fs == nil {
		return
	}
	fs.mu.Lock()
	var stale []*os.File
	for card, cf := range fs.cards {
		if slices.Contains(cards, card) {
			continue
		}
		stale = cf.appendFiles(stale)
		delete(fs.cards, card)
	}
	fs.mu.Unlock()
	for _, f := range stale {
		f.Close()
	}
}

// appendFiles appends the card's held files and directories to files;
// fs.mu must be held.
func (cf *cardFiles) appendFiles(files []*os.File) []*os.File {
	for _, h := range cf.files {
		files = append(files, h.f)
	}
	for _, h := range cf.listed {
		files = append(files, h.f)
	}
	return files
}

// Close closes every held file and directory. A read still in progress on
// one (a GPU whose sysfs read blocks) keeps its descriptor until it
// returns, as os.File guarantees, and no file is held afterwards.
func (fs *Files) Close() {
	if fs == nil {
		return
	}
	fs.mu.Lock()
	cards, dirs := fs.cards, fs.dirs
	fs.cards, fs.dirs = nil, nil
	var stale []*os.File
	for _, cf := range cards {
		stale = cf.appendFiles(stale)
	}
	for _, h := range dirs {
		stale = append(stale, h.f)
	}
	fs.mu.Unlock()
	for _, f := range stale {
		f.Close()
	}
}

// Held is the number of files and directories held open.
func (fs *Files) Held() int {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.held()
}

// held counts the held files; fs.mu must be held. Counted rather than kept
// as a total that every open and close would have to update: it is asked
// only when a file is opened, a few dozen cards at most.
func (fs *Files) held() int {
	n := len(fs.dirs)
	for _, cf := range fs.cards {
		n += len(cf.files) + len(cf.listed)
	}
	return n
}

// pread makes one pread(2) at offset 0 (see readFile for why one).
func (h *heldFile) pread(buf []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.buf, h.n, h.err = buf, 0, nil
	cerr := h.rc.Read(h.onFD)
	n, err := h.n, h.err
	h.buf = nil
	if cerr != nil {
		// RawConn.Read fails only on a closed file (a file that cannot be
		// polled is handed to onFD once), with internal/poll's "use of
		// closed file", which is not os.ErrClosed: read opens the file
		// anew on os.ErrClosed.
		return 0, fmt.Errorf("%w: %w", os.ErrClosed, cerr)
	}
	if n < 0 {
		n = 0
	}
	return n, err
}
