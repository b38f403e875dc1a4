package amd

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xpu-exporter/xpu_exporter/internal/procfd"
	"github.com/xpu-exporter/xpu_exporter/internal/rawfile"
	"github.com/xpu-exporter/xpu_exporter/vendors/reading"
)

// DRM fdinfo follows the kernel documentation "DRM client usage stats"
// (Documentation/gpu/drm-usage-stats.rst): "File shall contain one key
// value pair per one line of text. Colon character (`:`) must be used to
// delimit keys and values", and "Whitespace between the delimiter and
// first non-whitespace character shall be ignored when parsing".
// Mandatory: "drm-driver: <valstr>". Optional: "drm-pdev: <aaaa:bb.cc.d>"
// ("For PCI devices this should contain the PCI slot address of the
// device in question"), "drm-client-id: <uint>" ("Unique value relating to
// the open DRM file descriptor used to distinguish duplicated and shared
// file descriptors"), "drm-engine-<keystr>: <uint> ns" ("GPUs usually
// contain multiple execution engines. Each shall be given a stable and
// unique name (keystr) ... Value shall be in specified time units which
// the respective GPU engine spent busy executing workloads belonging to
// this client"), "drm-engine-capacity-<keystr>: <uint>" ("Engine
// identifier string must be the same as the one specified in the
// drm-engine-<keystr> tag and shall contain a greater than zero number in
// case the exported engine corresponds to a group of identical hardware
// engines ... In the absence of this tag parser shall assume capacity of
// one. Zero capacity is not allowed."), and memory keys "drm-total-<region>",
// "drm-shared-<region>", "drm-resident-<region>", "drm-purgeable-",
// "drm-active-" and the deprecated "drm-memory-<region>": "<uint> [KiB|MiB]
// ... Default unit shall be bytes with optional unit specifiers of 'KiB'
// or 'MiB' indicating kibi- or mebi-bytes."

// maxFdinfoSize bounds one fdinfo file; amdgpu's is about 1 KiB.
const maxFdinfoSize = 64 << 10

// maxFDsPerProcess bounds how many fds of one process are examined.
const maxFDsPerProcess = 1 << 16

// Memory is what a client's fdinfo says about one memory region, in bytes.
type Memory struct {
	Total     Opt[uint64]
	Shared    Opt[uint64]
	Resident  Opt[uint64]
	Purgeable Opt[uint64]
	Active    Opt[uint64]
	// Legacy is drm-memory-<region>, which the document deprecates as an
	// alias of drm-resident-<region>; amdgpu printed only this form before
	// it adopted the drm-total-/drm-resident- keys.
	Legacy Opt[uint64]
}

// ClientKey identifies one DRM client: the device and the client ID the
// kernel gives each open DRM file.
type ClientKey struct {
	PDev     string
	ClientID uint64
}

// Fdinfo is one parsed DRM fdinfo file.
type Fdinfo struct {
	Driver   string
	PDev     string
	ClientID Opt[uint64]
	// Engines holds busy time in ns per engine name ("gfx", "compute",
	// "dec", "enc", …).
	Engines map[string]uint64
	// Capacity holds drm-engine-capacity-<name> where given.
	Capacity map[string]uint64
	Memory   map[string]Memory
}

// ParseFdinfo parses the content of one /proc/<pid>/fdinfo/<fd> file. It
// returns ok=false for an fd that is not a DRM client (no drm-driver key).
// Keys outside the DRM namespace (pos, flags, mnt_id, amd-*) are ignored; a
// DRM key with a malformed value is an error, since a misread engine time
// would corrupt every share computed from it. Lines end with "\n" (a "\r"
// before it is dropped, as bufio.ScanLines does); a line of maxFdinfoSize
// bytes or more is malformed.
//
// The lines are cut from b in place, and only what a client keeps (its
// driver, device, and the names of its engines and memory regions) is
// copied out: a scrape parses every DRM client's fdinfo, some fifteen lines
// each.
func ParseFdinfo(b []byte) (Fdinfo, bool, error) {
	var f Fdinfo
	for len(b) > 0 {
		var line []byte
		var err error
		line, b, err = nextLine(b)
		if err != nil {
			return Fdinfo{}, false, fmt.Errorf("%w: %v", ErrMalformed, err)
		}
		key, val, found := bytes.Cut(line, []byte(":"))
		if !found || !bytes.HasPrefix(key, []byte("drm-")) {
			continue
		}
		if err := f.set(key, bytes.TrimSpace(val)); err != nil {
			return Fdinfo{}, false, fmt.Errorf("%w: %s: %v", ErrMalformed, truncate(string(key)), err)
		}
	}
	return f, f.Driver != "", nil
}

// nextLine cuts the first line off b (len(b) > 0) as bufio.Scanner with
// bufio.ScanLines and a maximum token size of maxFdinfoSize would: up to
// "\n", without a "\r" before it; bufio.ErrTooLong for a line of
// maxFdinfoSize bytes or more.
func nextLine(b []byte) (line, rest []byte, err error) {
	line, rest, _ = bytes.Cut(b, []byte("\n"))
	if len(line) >= maxFdinfoSize {
		return nil, nil, bufio.ErrTooLong
	}
	return bytes.TrimSuffix(line, []byte("\r")), rest, nil
}

// fdinfoName is a driver, engine or memory region name as a string: the names
// amdgpu prints without allocating, others copied. amdgpu names its engines
// by IP type (amdgpu_fdinfo.c, amdgpu_ip_name: "gfx", "compute", "dma",
// "dec", "enc", "enc_1", "jpeg", "vpe") and its memory regions by placement
// (amdgpu_show_fdinfo through drm_print_memory_stats: "cpu", "gtt",
// "vram").
func fdinfoName(b []byte) string {
	switch string(b) {
	case "amdgpu":
		return "amdgpu"
	case "gfx":
		return "gfx"
	case "compute":
		return "compute"
	case "dma":
		return "dma"
	case "dec":
		return "dec"
	case "enc":
		return "enc"
	case "enc_1":
		return "enc_1"
	case "jpeg":
		return "jpeg"
	case "vpe":
		return "vpe"
	case "cpu":
		return "cpu"
	case "gtt":
		return "gtt"
	case "vram":
		return "vram"
	}
	return string(b)
}

// memoryKeys are the memory keys of the DRM usage stats, each with the
// field of Memory it fills.
var memoryKeys = [...]struct {
	prefix string
	field  func(*Memory) *Opt[uint64]
}{
	{"drm-total-", func(m *Memory) *Opt[uint64] { return &m.Total }},
	{"drm-shared-", func(m *Memory) *Opt[uint64] { return &m.Shared }},
	{"drm-resident-", func(m *Memory) *Opt[uint64] { return &m.Resident }},
	{"drm-purgeable-", func(m *Memory) *Opt[uint64] { return &m.Purgeable }},
	{"drm-active-", func(m *Memory) *Opt[uint64] { return &m.Active }},
	{"drm-memory-", func(m *Memory) *Opt[uint64] { return &m.Legacy }},
}

func (f *Fdinfo) set(key, val []byte) error {
	switch {
	case string(key) == "drm-driver":
		if len(val) == 0 {
			return errors.New("empty")
		}
		f.Driver = fdinfoName(val)
	case string(key) == "drm-pdev":
		f.PDev = string(val)
	case string(key) == "drm-client-id":
		v, err := strconv.ParseUint(string(val), 10, 64)
		if err != nil {
			return err
		}
		f.ClientID = reading.Some(v)
	case bytes.HasPrefix(key, []byte("drm-engine-capacity-")):
		engine := key[len("drm-engine-capacity-"):]
		v, err := strconv.ParseUint(string(val), 10, 64)
		if err != nil || v == 0 || len(engine) == 0 {
			return fmt.Errorf("capacity %q", truncate(string(val)))
		}
		if f.Capacity == nil {
			f.Capacity = map[string]uint64{}
		}
		f.Capacity[fdinfoName(engine)] = v
	case bytes.HasPrefix(key, []byte("drm-engine-")):
		engine := key[len("drm-engine-"):]
		num, ok := bytes.CutSuffix(val, []byte(" ns"))
		v, err := strconv.ParseUint(string(bytes.TrimSpace(num)), 10, 64)
		if !ok || err != nil || len(engine) == 0 {
			return fmt.Errorf("engine time %q", truncate(string(val)))
		}
		if f.Engines == nil {
			f.Engines = map[string]uint64{}
		}
		f.Engines[fdinfoName(engine)] = v
	default:
		for _, m := range memoryKeys {
			region, ok := bytes.CutPrefix(key, []byte(m.prefix))
			if !ok {
				continue
			}
			v, err := parseMemory(val)
			if err != nil || len(region) == 0 {
				return fmt.Errorf("memory %q", truncate(string(val)))
			}
			if f.Memory == nil {
				f.Memory = map[string]Memory{}
			}
			r := fdinfoName(region)
			mem := f.Memory[r]
			*m.field(&mem) = reading.Some(v)
			f.Memory[r] = mem
			return nil
		}
		// Other drm- keys (drm-cycles-, drm-maxfreq-, drm-client-name…)
		// are not used.
	}
	return nil
}

// parseMemory parses "<uint> [KiB|MiB]" into bytes.
func parseMemory(s []byte) (uint64, error) {
	num, unit, _ := bytes.Cut(s, []byte(" "))
	v, err := strconv.ParseUint(string(num), 10, 64)
	if err != nil {
		return 0, err
	}
	var mult uint64
	switch string(bytes.TrimSpace(unit)) {
	case "":
		mult = 1
	case "KiB":
		mult = 1 << 10
	case "MiB":
		mult = 1 << 20
	default:
		return 0, fmt.Errorf("unit %q", unit)
	}
	if v > ^uint64(0)/mult {
		return 0, errors.New("overflows")
	}
	return v * mult, nil
}

// Client is one DRM client found in the fdinfo of the PIDs scanned: an
// open DRM file, possibly shared by several fds and processes.
type Client struct {
	Key    ClientKey
	Driver string
	// PIDs are the processes holding the client, sorted.
	PIDs []int
	// RenderMinor is the render node the client's file is open on
	// (/dev/dri/renderD129 → 129), CardMinor the primary node
	// (/dev/dri/card1 → 1), from the fd's link in /proc/<pid>/fd; unset
	// when the link cannot be read or names the other kind. They tell apart
	// the partitions of one GPU, which share drm-pdev.
	RenderMinor Opt[int]
	CardMinor   Opt[int]
	// NodeMinor is the DRM minor of the node the file is open on, from
	// stat(2) of the fd (st_rdev): a render node's minor is its renderD
	// number, a primary node's its card number. Unlike the link, which is
	// the node's name in the process's mount namespace, a container cannot
	// rename it (docker run --device=/dev/dri/renderD131:/dev/dri/renderD128
	// makes a renderD128 whose st_rdev is 226:131), and it tells apart the
	// partitions of one GPU, which share drm-pdev (probe G, PG2). Unset
	// where stat fails or gives no DRM node (the fd closed since, a tree
	// that is not procfs): the link's name is then all there is.
	NodeMinor Opt[int]
	Engines   map[string]uint64
	Capacity  map[string]uint64
	Memory    map[string]Memory
	// behind says Baseline kept counts of an earlier scan for some of the
	// client's engines, whose own fell: they are not this scan's. held
	// names those engines.
	behind bool
	held   map[string]bool
}

// FdinfoScanner reads the DRM clients of given processes.
type FdinfoScanner struct {
	// ProcRoot is the procfs mount ("/proc", or "/host/proc").
	ProcRoot string
	// Driver keeps only clients of this DRM driver ("amdgpu").
	Driver string
	// NodeMatters says whether a client of the GPU at PCI address pdev
	// needs its node's minor (Client.NodeMinor): where the GPU is one
	// device, drm-pdev names it and the node adds nothing, and the stat
	// of each client's fd was a system call per client and scrape. Nil:
	// every client's; a client without drm-pdev always.
	NodeMatters func(pdev string) bool
	// stat is fstatat(2) following links, replaced by tests: a DRM node's
	// st_rdev cannot be made without CAP_MKNOD.
	stat func(dirfd int, path string, st *unix.Stat_t) error
}

// nodeMatters applies NodeMatters.
func (s FdinfoScanner) nodeMatters(pdev string) bool {
	return pdev == "" || s.NodeMatters == nil || s.NodeMatters(pdev)
}

// drmMajor is the DRM subsystem's character device major
// (include/uapi/linux/major.h: "#define DRM_MAJOR 226").
const drmMajor = 226

// nodeMinor is the DRM minor of the node that fd num of pid is open on,
// from stat(2) of /proc/<pid>/fd/<num>, which follows the fd to the file
// open whatever its name (Client.NodeMinor).
func (s FdinfoScanner) nodeMinor(rootFD int, rootErr error, root string, pid, num int) Opt[int] {
	stat := s.stat
	if stat == nil {
		stat = func(dirfd int, path string, st *unix.Stat_t) error { return unix.Fstatat(dirfd, path, st, 0) }
	}
	rel := strconv.Itoa(pid) + "/fd/" + strconv.Itoa(num)
	dirfd := rootFD
	if rootErr != nil {
		dirfd, rel = unix.AT_FDCWD, filepath.Join(root, rel)
	}
	var st unix.Stat_t
	if stat(dirfd, rel, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR || unix.Major(st.Rdev) != drmMajor {
		return Opt[int]{}
	}
	return reading.Some(int(unix.Minor(st.Rdev)))
}

// ScanError is one fd or process that could not be read.
type ScanError struct {
	PID  int
	File string
	Err  error
}

func (e ScanError) Error() string {
	return fmt.Sprintf("pid %d %s: %v", e.PID, e.File, e.Err)
}

func (e ScanError) Unwrap() error { return e.Err }

// Scan reads /proc/<pid>/fdinfo/<fd> of each PID's fds open on a DRM node
// (/dev/dri/…, from the fd's link in /proc/<pid>/fd; a process's other fds,
// often hundreds of sockets and files, are not opened) and returns the DRM
// clients of s.Driver as ScanHolders does. A process that exited before
// its fds were listed is not an error.
func (s FdinfoScanner) Scan(pids []int) ([]Client, []ScanError) {
	var holders []procfd.Holder
	var errs []ScanError
	ps := procfd.Scanner{Root: s.ProcRoot, MaxFDs: maxFDsPerProcess}
	for _, pid := range pids {
		fds, err := ps.Process(pid, isDRINode)
		if err != nil && !procfd.Gone(err) {
			errs = append(errs, ScanError{PID: pid, File: "fd", Err: err})
		}
		if len(fds) > 0 {
			holders = append(holders, procfd.Holder{PID: pid, FDs: fds})
		}
	}
	clients, _, ferrs := s.ScanHolders(holders)
	return clients, append(errs, ferrs...)
}

// Opaque is a file open on a DRM node whose fdinfo gives no usage stats
// this scanner can read: no drm-driver key (amdgpu printed its own format,
// "pdev:", "vram mem:", "gfx0: 45.0%", before it adopted the DRM usage
// stats keys), or no drm-client-id. Which device it is open on is known
// only from its node; the caller tells whether that is one of s.Driver's.
type Opaque struct {
	PID                    int
	RenderMinor, CardMinor Opt[int]
	NodeMinor              Opt[int] // as Client's
}

// ScanHolders reads /proc/<pid>/fdinfo/<fd> of the fds of each holder (as
// DRMHolders lists them) and returns the DRM clients of s.Driver,
// de-duplicated by (drm-pdev, drm-client-id): a client whose file was
// dup()ed or inherited appears once, with every PID holding it. An fd
// whose fdinfo has no drm-client-id cannot be de-duplicated: it is listed
// in opaque, with the fds that show no DRM usage stats at all. A process
// or fd gone before its fdinfo is read is not an error.
func (s FdinfoScanner) ScanHolders(holders []procfd.Holder) (_ []Client, opaque []Opaque, _ []ScanError) {
	root := s.ProcRoot
	if root == "" {
		root = "/proc"
	}
	byKey := map[ClientKey]*Client{}
	var errs []ScanError
	// amdgpu's fdinfo is about 1 KiB.
	buf := make([]byte, 0, 4<<10)
	// Each fdinfo is opened relative to the procfs root, held for the
	// scan, by a path built in place: "<pid>/fdinfo/<fd>".
	rootFD, rootErr := rawfile.Open(root, syscall.O_DIRECTORY)
	if rootErr == nil {
		defer syscall.Close(rootFD)
	}
	var rel []byte
	for _, h := range holders {
		pid := h.PID
		for _, fd := range h.FDs {
			rel = strconv.AppendInt(rel[:0], int64(pid), 10)
			rel = append(rel, "/fdinfo/"...)
			rel = strconv.AppendInt(rel, int64(fd.Num), 10)
			f, ok, err := s.readAt(rootFD, rootErr, root, rel, &buf)
			if err != nil {
				if !procfd.Gone(err) {
					errs = append(errs, ScanError{PID: pid, File: "fdinfo/" + strconv.Itoa(fd.Num), Err: err})
				}
				continue
			}
			if ok && f.Driver != s.Driver {
				continue // another driver's device (i915, simpledrm)
			}
			if !ok || !f.ClientID.OK {
				o := Opaque{PID: pid, NodeMinor: s.nodeMinor(rootFD, rootErr, root, pid, fd.Num)}
				o.RenderMinor, o.CardMinor = nodeMinorOf(fd.Target)
				opaque = append(opaque, o)
				continue
			}
			key := ClientKey{PDev: f.PDev, ClientID: f.ClientID.Value}
			c := byKey[key]
			if c == nil {
				c = &Client{Key: key, Driver: f.Driver, Engines: f.Engines, Capacity: f.Capacity, Memory: f.Memory}
				byKey[key] = c
			}
			if !c.RenderMinor.OK && !c.CardMinor.OK && !c.NodeMinor.OK {
				c.RenderMinor, c.CardMinor = nodeMinorOf(fd.Target)
				if s.nodeMatters(f.PDev) {
					c.NodeMinor = s.nodeMinor(rootFD, rootErr, root, pid, fd.Num)
				}
			}
			if n := len(c.PIDs); n == 0 || c.PIDs[n-1] != pid {
				c.PIDs = append(c.PIDs, pid)
			}
		}
	}
	out := make([]Client, 0, len(byKey))
	for _, c := range byKey {
		sort.Ints(c.PIDs)
		out = append(out, *c)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Key.PDev != out[j].Key.PDev {
			return out[i].Key.PDev < out[j].Key.PDev
		}
		return out[i].Key.ClientID < out[j].Key.ClientID
	})
	return out, opaque, errs
}

// nodeMinorOf is the minor of the DRM node an fd's link target names:
// render for "/dev/dri/renderD129", card for "/dev/dri/card1".
func nodeMinorOf(target string) (render, card Opt[int]) {
	name, ok := strings.CutPrefix(target, "/dev/dri/")
	if !ok {
		return
	}
	if v, ok := strings.CutPrefix(name, "card"); ok {
		if n, err := strconv.Atoi(v); err == nil && n >= 0 {
			card = reading.Some(n)
		}
		return
	}
	return renderDMinor(name), card
}

// readOne reads the fdinfo file at path into buf (see readFdinfo).
func (s FdinfoScanner) readOne(path string, buf *[]byte) (Fdinfo, bool, error) {
	fd, err := rawfile.Open(path, 0)
	if err != nil {
		return Fdinfo{}, false, err
	}
	defer syscall.Close(fd)
	return readFdinfo(fd, buf, func() string { return path })
}

// readAt reads the fdinfo file at rel, a path relative to the procfs root
// open at rootFD, into buf (see readFdinfo); root is the root's path, and
// rootErr why it could not be opened, if it could not: each file is then
// opened by its whole path, as readOne does.
func (s FdinfoScanner) readAt(rootFD int, rootErr error, root string, rel []byte, buf *[]byte) (Fdinfo, bool, error) {
	path := func() string { return filepath.Join(root, string(rel)) }
	if rootErr != nil {
		return s.readOne(path(), buf)
	}
	fd, err := rawfile.OpenAt(rootFD, append(rel, 0), 0)
	if err != nil {
		return Fdinfo{}, false, &os.PathError{Op: "open", Path: path(), Err: err}
	}
	defer syscall.Close(fd)
	return readFdinfo(fd, buf, path)
}

// readFdinfo reads the fdinfo file open at fd into buf, reused across the
// files of a scan (ParseFdinfo keeps nothing of it), and parses it; path
// gives its name for an error. procfs files report size 0, so this
// reads until a read returns less than it asked for, up to a limit: an
// fdinfo file is a seq_file made by single_open (fs/proc/fd.c,
// proc_fdinfo_open), whose show function "is expected to generate all the
// content that the virtual file will contain" (Documentation/filesystems/
// seq_file.rst) into the seq_file's buffer before a read hands over as
// much of it as was asked (fs/seq_file.c, seq_read_iter), so a short read
// is the end of the content: one read(2) of a file that fits the buffer,
// where reading on to a read of 0 took two. The file is read with rawfile,
// as it cannot be polled either.
func readFdinfo(fd int, buf *[]byte, path func() string) (Fdinfo, bool, error) {
	b := (*buf)[:0]
	for len(b) <= maxFdinfoSize {
		if len(b) == cap(b) {
			b = slices.Grow(b, 4<<10)
		}
		want := min(cap(b), maxFdinfoSize+1) - len(b)
		n, err := rawfile.Read(fd, b[len(b):len(b)+want])
		if err != nil {
			return Fdinfo{}, false, &os.PathError{Op: "read", Path: path(), Err: err}
		}
		if n <= 0 {
			break
		}
		b = b[:len(b)+n]
		if n < want {
			break
		}
	}
	*buf = b
	if len(b) > maxFdinfoSize {
		return Fdinfo{}, false, fmt.Errorf("%w: more than %d bytes", ErrTooLarge, maxFdinfoSize)
	}
	return ParseFdinfo(b)
}

// EngineShare is the share of one engine's time a client used between two
// scans.
type EngineShare struct {
	Key    ClientKey
	Engine string
	// Ratio is busy time / (wall time × engine capacity), 0..1.
	Ratio float64
}

// EngineShares compares the clients of a scan at t0 with those of a scan
// at t1 and returns, for each client and engine present in both, the
// fraction of the window's engine time it used:
//
//	(ns at t1 - ns at t0) / ((t1 - t0) in ns × capacity)
//
// and in unknown the clients of the scan at t1 whose share cannot be told.
//
// A client absent at t0 has no baseline. If the scan at t0 read every
// process (complete), the client did not exist when its process was read,
// so all its engine time is the window's and it starts from 0: a DRM
// client's counters are "time which the respective GPU engine spent busy
// executing workloads belonging to this client" (kernel documentation,
// "DRM client usage stats", drm-engine-<keystr>), a client being one open
// DRM file. It may have run between the start of the scan at t0 and t0,
// which is the end of that scan: its ratio can exceed its due by that
// much of the window. Otherwise the client is unknown: it may have run
// before t0 while its process could not be read. So is a new client busier
// than the window allows (beyond maxShareJitter): its file existed before
// t0 out of the scan's sight (handed over from another process, say), and
// counting its whole past as this window's would bill its owner for the
// device. An engine of a known client that had no line at t0 starts from
// 0. A counter that went backwards, or whose line is gone (lostLine), makes
// the client unknown for the window, and for the next (Baseline):
// the kernel documentation allows it ("Values are not required to be
// constantly monotonic if it makes the driver implementation easier, but
// are required to catch up with the previously reported larger value
// within a reasonable period"), and what the client ran meanwhile is not
// known; Baseline keeps the larger value for the next window. The two
// scans are not atomic with the clock readings, so a ratio may exceed 1 by
// the jitter of reading the files; it is capped at 1. So is a known client's, whose engine's rings may also run
// at once: amdgpu sums a client's time over the rings of an IP type
// (amdgpu_ctx.c, amdgpu_ctx_mgr_usage), and prints no capacity.
func EngineShares(t0 time.Time, before []Client, complete bool, t1 time.Time, after []Client) (shares []EngineShare, unknown []ClientKey) {
	wall := t1.Sub(t0)
	if wall <= 0 {
		return nil, nil
	}
	prev := make(map[ClientKey]Client, len(before))
	for _, c := range before {
		prev[c.Key] = c
	}
	for _, c := range after {
		p, known := prev[c.Key]
		if known && Reused(p, c) {
			known, p = false, Client{}
		}
		if !known && !complete || known && (p.behind || lostLine(p, c)) {
			unknown = append(unknown, c.Key)
			continue
		}
		names := make([]string, 0, len(c.Engines))
		for name := range c.Engines {
			names = append(names, name)
		}
		sort.Strings(names)
		n := len(shares)
		for _, name := range names {
			now := c.Engines[name]
			// amdgpu prints an engine only once the client has used it
			// (amdgpu_fdinfo.c, amdgpu_show_fdinfo: "if (!usage[hw_ip])
			// continue;"), so an engine a known client lacked at t0 had
			// used 0 ns then.
			was := p.Engines[name]
			capacity := uint64(1)
			if v, ok := c.Capacity[name]; ok {
				capacity = v
			}
			ratio := float64(now-was) / (float64(wall.Nanoseconds()) * float64(capacity))
			if now < was || (!known && ratio > 1+maxShareJitter) {
				shares = shares[:n]
				unknown = append(unknown, c.Key)
				break
			}
			shares = append(shares, EngineShare{Key: c.Key, Engine: name, Ratio: min(ratio, 1)})
		}
	}
	return shares, unknown
}

// Baseline is the scan at t1 as the start of the next window, with every
// engine counter that fell below the same client's at t0 kept at t0's:
// "Upon observing a value lower than what was previously read, userspace
// is expected to stay with that larger previous value until a monotonic
// update is seen" (kernel documentation, "DRM client usage stats",
// drm-engine-<keystr>). Measured from the lower value, the next window
// would count again time already counted; measured from t0's, it would
// count the time run between t0 and t1 as its own (the counter catches up
// with what it missed), so that window leaves the client unknown too
// (behind), and the one after measures from what it reads. A counter still
// below the kept value a whole window later has not dipped but started
// again (a reset, which the documentation's "catch up ... within a
// reasonable period" does not describe): kept on, the value would leave
// the device's split out until the client had run as long again, days for
// a long job's (probe27 PA1), so it is taken as read.
func Baseline(before, after []Client) []Client {
	prev := make(map[ClientKey]Client, len(before))
	for _, c := range before {
		prev[c.Key] = c
	}
	out, copied := after, false
	for i, c := range after {
		p := prev[c.Key]
		if Reused(p, c) {
			continue
		}
		was := p.Engines
		var raised map[string]uint64
		var held map[string]bool
		for name, v := range was {
			// An engine without its line is at 0 (amdgpu prints none for
			// an engine at 0): fallen too, unless it was 0.
			if now := c.Engines[name]; now >= v || p.held[name] {
				continue
			}
			if raised == nil {
				raised = maps.Clone(c.Engines)
				if raised == nil {
					raised = map[string]uint64{}
				}
				held = map[string]bool{}
			}
			raised[name], held[name] = v, true
		}
		if raised == nil {
			continue
		}
		if !copied {
			out, copied = slices.Clone(after), true // the caller's scan stays as read
		}
		out[i].Engines, out[i].behind, out[i].held = raised, true, held
	}
	return out
}

// Reused says whether after is another DRM file than before, which had
// its client ID: a counter went backwards, and none of the processes that
// hold it held before. The kernel documentation asks the ID to be unique
// among open files ("should map 1:1 to the in kernel representation of
// struct drm_file instances"), not never to be given again once its file
// is closed. Taken for the same client, the new file's counts, below the
// closed one's, would leave the device's split unknown until they caught
// up with them (probe12-time D1), hours for a long job's. A file that
// stays open across the window keeps a holder, and one handed to another
// process (SCM_RIGHTS) keeps its counts, which do not fall.
func Reused(before, after Client) bool {
	if len(before.PIDs) == 0 || len(after.PIDs) == 0 {
		return false
	}
	fell := lostLine(before, after)
	for name, now := range after.Engines {
		if was, ok := before.Engines[name]; ok && now < was {
			fell = true
			break
		}
	}
	if !fell {
		return false
	}
	for _, pid := range after.PIDs {
		if _, held := slices.BinarySearch(before.PIDs, pid); held {
			return false
		}
	}
	return true
}

// lostLine says whether an engine with time at before has no line at
// after. amdgpu prints an engine only once its time is not 0
// (amdgpu_fdinfo.c, amdgpu_show_fdinfo: "if (!usage[hw_ip]) continue;"):
// read as printed, the count fell to 0, which the kernel documentation
// allows for a while ("Values are not required to be constantly monotonic")
// and which is no measure of the window; measured from 0, the next one
// would bill the client's whole past (found by probing: probe22-amdseq 01).
func lostLine(before, after Client) bool {
	for name, was := range before.Engines {
		if _, ok := after.Engines[name]; !ok && was > 0 {
			return true
		}
	}
	return false
}

// maxShareJitter is how far beyond 1 the scans' timing may push a new
// client's ratio: a client that ran through the whole scan at t0 gains the
// scan's length, a quarter of the window only for a scan of nearly 4 s
// between scrapes 15 s apart (a scan costs ~4 µs per open fd, README).
const maxShareJitter = 0.25
