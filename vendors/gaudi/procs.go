package gaudi

// Which process uses which device: hl-smi lists no processes in its CSV
// form, so the processes are those that hold a device's compute node open,
// found in <procfs>/<pid>/fd. The habanalabs driver names the compute node
// /dev/accel/accel<n> since it moved to the kernel's accel subsystem and
// /dev/hl<n> before; the control nodes beside them (accel_controlD<n>,
// hl_controlD<n>) are what monitoring tools, hl-smi included, open, and are
// not counted as use.
//
// A node is tied to its device by the kernel's sysfs ABI for the driver,
// Documentation/ABI/testing/sysfs-driver-habanalabs:
//   /sys/class/accel/accel<n>/device/pci_addr  "Displays the PCI address of the device"
//   /sys/class/accel/accel<n>/device/module_id "Displays the device's module id"
//   (/sys/class/habanalabs/hl<n>/pci_addr in the pre-accel layout)
// and the PCI address is matched with hl-smi's bus_id, which gives the
// device's hl-smi index and module id. The node's name alone is not enough:
// the accel core hands out n in registration (probe) order, and nothing
// documents that order to be hl-smi's index or the module id, which already
// differ from each other on an 8-device node.
//
// The file a descriptor refers to is identified by its device number
// (stat of /proc/<pid>/fd/<fd>, matched with the node's "dev" file in
// sysfs), not by the path readlink shows: a process in a container opened the
// node under its own /dev, which the exporter may see as another path or as
// a path relative to that container's /dev mount. readlink's base name only
// preselects the descriptors worth a stat.

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/xpu-exporter/xpu_exporter/internal/pciaddr"
	"github.com/xpu-exporter/xpu_exporter/internal/procfd"
	"github.com/xpu-exporter/xpu_exporter/internal/rawfile"
)

const (
	// maxFDs bounds the descriptors read per process. The kernel allows
	// up to fs.nr_open (1048576 by default); a process holding more than
	// this many is not worth the scrape's time.
	maxFDs = 1 << 16
	// maxSysfsValue bounds a sysfs attribute read: an address or a number.
	maxSysfsValue = 4 << 10
)

// NodeUse is one process holding one device's compute node open.
type NodeUse struct {
	PID  int
	Node string // "accel3" or "hl3"
	// BusID is the device's PCI address from sysfs, in NormalizeBusID's
	// form; "" when sysfs did not say.
	BusID string
}

// ProcessScanner finds the processes that hold a Gaudi compute node open.
// Its exported fields must be set before first use; it must not be copied
// after. It is safe for concurrent use: a scan that arrives while the
// previous one is still stuck fails with ReasonBusy.
type ProcessScanner struct {
	// ProcRoot is the procfs mount point; /proc when empty. The exporter
	// needs the host's PID namespace and the right to read other users'
	// fd directories (CAP_SYS_PTRACE, or root) to see every process.
	ProcRoot string
	// SysRoot is the sysfs mount point; /sys when empty.
	SysRoot string

	running atomic.Bool
	// nodes is what sysfs said of the compute nodes, used by one scan at
	// a time (running).
	nodes nodeCache
	// addresses are the PCI addresses of the compute nodes the last scan
	// found in sysfs (NodeAddresses).
	addresses atomic.Pointer[[]string]
	// stat follows a descriptor to its file. Tests replace it to play a
	// stat that never returns.
	stat func(string) (fs.FileInfo, error)
}

// node is what sysfs says about one compute node.
type node struct {
	name  string
	busID string
}

type devNum struct{ major, minor uint32 }

// Scan lists the processes holding a compute node open. A process that
// exits or cannot be read during the scan is skipped; unreadable counts
// those the exporter had no permission for, which hide their use.
//
// Scan returns at ctx's deadline. Reading procfs and sysfs does not block on
// a healthy host, but stat of a descriptor reaches the file's filesystem
// (a FUSE daemon, say) and a sysfs attribute its driver, so the scan runs
// aside and a scan stuck there keeps the scanner busy rather than piling up.
func (s *ProcessScanner) Scan(ctx context.Context) (uses []NodeUse, unreadable int, err error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, &Error{Reason: ReasonTimeout, Detail: "process scan", Err: err}
	}
	if !s.running.CompareAndSwap(false, true) {
		return nil, 0, &Error{Reason: ReasonBusy, Detail: "the previous process scan has not returned"}
	}
	type result struct {
		uses       []NodeUse
		unreadable int
		err        error
	}
	done := make(chan result, 1)
	go func() {
		u, n, err := s.scan(ctx)
		// Free before the answer is handed over: a scan asked as soon as
		// this one returned (a /devices read right after a scrape) found
		// it still running and was refused as busy.
		s.running.Store(false)
		done <- result{u, n, err}
	}()
	select {
	case r := <-done:
		return r.uses, r.unreadable, r.err
	case <-ctx.Done():
	}
	select {
	case r := <-done: // finished as the deadline passed: select may pick either
		return r.uses, r.unreadable, r.err
	default:
		return nil, 0, &Error{Reason: ReasonTimeout, Detail: "process scan", Err: ctx.Err()}
	}
}

func (s *ProcessScanner) scan(ctx context.Context) (uses []NodeUse, unreadable int, err error) {
	procRoot, sysRoot := s.ProcRoot, s.SysRoot
	if procRoot == "" {
		procRoot = "/proc"
	}
	if sysRoot == "" {
		sysRoot = "/sys"
	}
	nodes := s.nodes.read(sysRoot)
	addrs := make([]string, 0, len(nodes))
	for _, n := range nodes {
		if n.busID != "" && !slices.Contains(addrs, n.busID) {
			addrs = append(addrs, n.busID)
		}
	}
	slices.Sort(addrs)
	s.addresses.Store(&addrs)

	holders, perrs, err := procfd.Scanner{Root: procRoot, MaxFDs: maxFDs}.Scan(ctx, computeNodeLink)
	switch {
	case ctx.Err() != nil:
		return nil, 0, &Error{Reason: ReasonTimeout, Detail: "process scan", Err: ctx.Err()}
	case err != nil:
		return nil, 0, &Error{Reason: ReasonProcfs, Err: err}
	}
	for _, e := range perrs {
		// Other errors are of a process that exited during the scan.
		if errors.Is(e.Err, fs.ErrPermission) {
			unreadable++
		}
	}
	for _, h := range holders {
		fdDir := filepath.Join(procRoot, strconv.Itoa(h.PID), "fd")
		first := len(uses)
		for _, fd := range h.FDs {
			u, ok := s.describeFD(filepath.Join(fdDir, strconv.Itoa(fd.Num)), fd.Target, nodes)
			// Each node once per process.
			if ok && !slices.ContainsFunc(uses[first:], func(x NodeUse) bool { return x.Node == u.Node }) {
				u.PID = h.PID
				uses = append(uses, u)
			}
		}
	}
	return uses, unreadable, nil
}

// NodeAddresses are the PCI addresses (pciaddr.Canonical) of the compute
// nodes sysfs showed at the last scan, sorted: the devices the habanalabs
// driver has, whether or not hl-smi lists them. Nil before a scan read
// sysfs.
func (s *ProcessScanner) NodeAddresses() []string {
	if p := s.addresses.Load(); p != nil {
		return *p
	}
	return nil
}

// computeNodeLink preselects the descriptors worth a stat: those whose link's
// base name is a compute node's.
func computeNodeLink(target []byte) bool {
	target = bytes.TrimSuffix(target, []byte(" (deleted)"))
	return isComputeNode(target[bytes.LastIndexByte(target, '/')+1:])
}

// describeFD says whether the descriptor at path, whose link computeNodeLink
// accepted, refers to a Gaudi compute node.
func (s *ProcessScanner) describeFD(path, target string, nodes map[devNum]node) (NodeUse, bool) {
	base := filepath.Base(strings.TrimSuffix(target, " (deleted)"))
	stat := s.stat
	if stat == nil {
		stat = os.Stat
	}
	fi, err := stat(path)
	if err != nil || fi.Mode()&fs.ModeCharDevice == 0 {
		return NodeUse{}, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return NodeUse{}, false
	}
	if len(nodes) == 0 {
		// No sysfs to ask: trust the name, and leave the device unknown.
		return NodeUse{Node: base}, true
	}
	n, ok := nodes[decodeDev(st.Rdev)]
	if !ok {
		return NodeUse{}, false
	}
	return NodeUse{Node: n.name, BusID: n.busID}, true
}

// decodeDev splits a Linux dev_t as glibc's gnu_dev_major/gnu_dev_minor
// (sys/sysmacros.h) do: 12 bits of major and 20 of minor, interleaved.
func decodeDev(dev uint64) devNum {
	return devNum{
		major: uint32((dev>>8)&0xfff) | uint32((dev>>32)&^0xfff),
		minor: uint32(dev&0xff) | uint32((dev>>12)&^0xff),
	}
}

// HasDevices says whether sysfs under sysRoot (/sys when empty) shows a
// compute node of the habanalabs driver: the node has Gaudi devices,
// whether or not hl-smi can list them.
func HasDevices(sysRoot string) bool {
	if sysRoot == "" {
		sysRoot = "/sys"
	}
	var c nodeCache
	return len(c.read(sysRoot)) > 0
}

// maxClassNodes bounds the compute nodes read from one class directory,
// and so the nodes cached. The kernel numbers at most 256 of each
// (ACCEL_MAX_MINORS in include/drm/drm_accel.h, HL_MAX_MINORS in the
// driver's habanalabs.h); a directory with more is not the kernel's.
const maxClassNodes = 1024

// nodeClass is a sysfs class whose entries are habanalabs compute nodes.
type nodeClass struct {
	dir string // under the sysfs root
	// attrs is where a node's pci_addr is, under its class entry.
	attrs string
	// otherDrivers says the class has other drivers' nodes too, told
	// apart by the driver link of the node's device.
	otherDrivers bool
}

var nodeClasses = [...]nodeClass{
	// Other drivers' accel nodes (Intel's NPU, Qualcomm's AIC) are left
	// out by the driver link of their device.
	{dir: "class/accel", attrs: "device", otherDrivers: true},
	// The pre-accel driver has its own class, whose attributes sit on the
	// class device itself (the pre-accel sysfs-driver-habanalabs).
	{dir: "class/habanalabs"},
}

// nodeCache keeps what sysfs said of each compute node from one scan to the
// next, so that a scan reads a node's attributes (its driver link, dev,
// pci_addr) once rather than at every scrape: they are fixed while the
// node exists. The driver creates a node's class device (through the
// accel core, or in its own class before) when it binds the PCI device,
// and removes it with all its attributes when it lets the device go, so
// neither the node's device number nor its PCI device nor its driver can
// change while it stays.
//
// What proves a node unchanged is its dev attribute file, by stat(2): the
// same file, not changed since. In sysfs, an inode number names one kernfs
// node for the whole boot (include/linux/kernfs.h, struct kernfs_node:
// "64bit unique ID. On 64bit ino setups, id is the ino"), so a node
// removed and created again, such as accel0 of another PCI device after
// the driver reloaded and probed the devices in another order, has a dev
// file of another inode. Elsewhere (the demo's tree, tests), where an
// inode number can be reused, the change and modification times must
// match too. A stat that differs only because sysfs gave the file a new
// in-memory inode (with new times) costs a read, never a stale answer.
//
// The entries are those the last scan listed, at most maxClassNodes per
// class. A nodeCache is used by one scan at a time.
type nodeCache struct {
	root    string
	classes [len(nodeClasses)]classCache
	scan    uint64 // counts scans; an entry not listed by this one is dropped
	nodes   map[devNum]node
	dirent  []byte
	listed  []*cachedNode
}

type classCache struct {
	dir     string // the class directory's path
	entries map[string]*cachedNode
}

// cachedNode is one class entry as last read.
type cachedNode struct {
	name    string // "accel3"
	entry   string // its path
	devPath string // its dev attribute's path
	devRel  string // the same, relative to the class directory
	scan    uint64 // the last scan that listed it
	read    bool   // id, dev, node and gaudi are set
	id      fileID
	dev     devNum
	node    node
	// gaudi says the node is the habanalabs driver's.
	gaudi bool
}

// fileID is what stat says of a file that changes when it is replaced.
type fileID struct {
	dev, ino     uint64
	ctime, mtime unix.Timespec
}

// direntBuf is the getdents64 buffer: a class directory holds a few dozen
// entries of some 32 bytes.
const direntBuf = 4 << 10

// read returns the habanalabs compute nodes sysfs under sysRoot shows, by
// device number, reading the attributes of the nodes not seen unchanged
// before. The map is the cache's own, valid until the next read; nil
// when there is none.
func (c *nodeCache) read(sysRoot string) map[devNum]node {
	if c.classes[0].dir == "" || c.root != sysRoot {
		c.root = sysRoot
		for i, cl := range nodeClasses {
			c.classes[i] = classCache{dir: filepath.Join(sysRoot, cl.dir)}
		}
	}
	c.scan++
	clear(c.nodes)
	for i := range nodeClasses {
		cc := &c.classes[i]
		c.listed = c.list(cc, &nodeClasses[i], c.listed[:0])
		// In name order, as a listing sorted by name was: should two
		// nodes give one device number, the last one names it.
		slices.SortFunc(c.listed, func(a, b *cachedNode) int { return strings.Compare(a.name, b.name) })
		for _, e := range c.listed {
			if e.gaudi {
				if c.nodes == nil {
					c.nodes = map[devNum]node{}
				}
				c.nodes[e.dev] = e.node
			}
		}
		clear(c.listed) // no pointers kept past the scan
		maps.DeleteFunc(cc.entries, func(_ string, e *cachedNode) bool { return e.scan != c.scan })
	}
	return c.nodes
}

// list appends to listed the compute nodes of one class directory that
// could be read, each read anew unless its dev file is unchanged.
func (c *nodeCache) list(cc *classCache, cl *nodeClass, listed []*cachedNode) []*cachedNode {
	dir, err := rawfile.Open(cc.dir, syscall.O_DIRECTORY)
	if err != nil {
		return listed // no such class: none of its nodes
	}
	defer syscall.Close(dir)
	// Made here, not before: a node without Gaudi asks HasDevices at
	// every scrape, and has no class to list.
	if c.dirent == nil {
		c.dirent = make([]byte, direntBuf)
	}
	if cc.entries == nil {
		cc.entries = map[string]*cachedNode{}
	}
	for n := 0; ; {
		got, err := rawfile.ReadDirent(dir, c.dirent)
		if err != nil || got <= 0 {
			return listed
		}
		for rec := range rawfile.Dirents(c.dirent[:got]) {
			name := rawfile.DirentName(rec)
			if !isComputeNode(name) {
				continue
			}
			if n++; n > maxClassNodes {
				return listed
			}
			e := cc.entries[string(name)]
			if e == nil {
				e = &cachedNode{name: string(name)}
				e.entry = filepath.Join(cc.dir, e.name)
				e.devPath = filepath.Join(e.entry, "dev")
				e.devRel = e.name + "/dev"
				cc.entries[e.name] = e
			}
			if e.refresh(dir, cl) {
				e.scan = c.scan
				listed = append(listed, e)
			}
		}
	}
}

// refresh reads the node's attributes unless its dev file, stat relative
// to the class directory dir, is the one they were read with, and says
// whether the node could be read. One that could not is not kept: it is
// read again at the next scan.
func (e *cachedNode) refresh(dir int, cl *nodeClass) bool {
	var st unix.Stat_t
	if err := fstatat(dir, e.devRel, &st); err != nil {
		return false
	}
	id := fileID{dev: st.Dev, ino: st.Ino, ctime: st.Ctim, mtime: st.Mtim}
	if e.read && e.id == id {
		return true
	}
	// Read after the stat: a node replaced in between has a newer dev
	// file than id, and is read again at the next scan.
	e.read = false
	attrs := e.entry
	if cl.attrs != "" {
		attrs = filepath.Join(e.entry, cl.attrs)
	}
	e.gaudi = true
	if cl.otherDrivers {
		driver, err := os.Readlink(filepath.Join(e.entry, "device", "driver"))
		if err != nil {
			return false
		}
		e.gaudi = filepath.Base(driver) == "habanalabs"
	}
	if e.gaudi {
		dev, ok := readDev(e.devPath)
		if !ok {
			return false
		}
		e.dev, e.node = dev, node{name: e.name}
		if v, err := readSysfs(filepath.Join(attrs, "pci_addr")); err == nil {
			e.node.busID = pciaddr.Canonical(v)
		}
		if e.node.busID == "" {
			// The class device's "device" link points at its PCI device,
			// whose directory is named by its address.
			if target, err := os.Readlink(filepath.Join(e.entry, "device")); err == nil {
				e.node.busID = pciaddr.Canonical(filepath.Base(target))
			}
		}
	}
	// A node whose address could not be read is used without it for this
	// scan and read again at the next, as one that could not be read at
	// all: its address is not known to be fixed, only unread.
	e.id, e.read = id, !e.gaudi || e.node.busID != ""
	return true
}

// fstatat stats path relative to the directory dir, following links,
// retrying on EINTR.
func fstatat(dir int, path string, st *unix.Stat_t) error {
	for {
		if err := unix.Fstatat(dir, path, st, 0); !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// isComputeNode says whether name is a compute node's: "accel" or "hl"
// and a number. The control nodes beside them (accel_controlD<n>,
// hl_controlD<n>) are not.
func isComputeNode(name []byte) bool {
	var digits []byte
	switch {
	case bytes.HasPrefix(name, []byte("accel")):
		digits = name[len("accel"):]
	case bytes.HasPrefix(name, []byte("hl")):
		digits = name[len("hl"):]
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return false
		}
	}
	return len(digits) > 0
}

// readDev reads a sysfs "dev" attribute, "major:minor".
func readDev(path string) (devNum, bool) {
	v, err := readSysfs(path)
	if err != nil {
		return devNum{}, false
	}
	maj, minr, ok := strings.Cut(v, ":")
	if !ok {
		return devNum{}, false
	}
	a, err1 := strconv.ParseUint(maj, 10, 32)
	b, err2 := strconv.ParseUint(minr, 10, 32)
	if err1 != nil || err2 != nil {
		return devNum{}, false
	}
	return devNum{uint32(a), uint32(b)}, true
}

// readSysfs reads a small sysfs attribute in one read(2), as sysfs hands
// out a whole attribute per read, and trims it; without the poller
// (internal/rawfile).
func readSysfs(path string) (string, error) {
	fd, err := rawfile.Open(path, 0)
	if err != nil {
		return "", err
	}
	defer syscall.Close(fd)
	var buf [maxSysfsValue]byte
	n, err := rawfile.Read(fd, buf[:])
	if err != nil {
		return "", &fs.PathError{Op: "read", Path: path, Err: err}
	}
	return strings.TrimSpace(string(buf[:n])), nil
}

// AttachProcesses adds each use's PID to the device with the same PCI
// address, and returns the uses that match no device (a node sysfs could not
// place, or a device hl-smi did not list).
func AttachProcesses(devices []Device, uses []NodeUse) (unmatched []NodeUse) {
	byBus := make(map[string]*Device, len(devices))
	for i := range devices {
		if devices[i].BusID != "" {
			byBus[devices[i].BusID] = &devices[i]
		}
	}
	for _, u := range uses {
		d, ok := byBus[u.BusID]
		if u.BusID == "" || !ok {
			unmatched = append(unmatched, u)
			continue
		}
		if !slices.Contains(d.Processes, u.PID) {
			d.Processes = append(d.Processes, u.PID)
		}
	}
	for i := range devices {
		slices.Sort(devices[i].Processes)
	}
	return unmatched
}

// AttachByElimination ties to the one row without a bus_id (hl-smi printed
// N/A) the uses of the one compute node no row names, where the rows are as
// many as the driver's compute nodes (ProcessScanner.NodeAddresses): that
// node can be no other device. Such uses left untied made every device's
// list of processes not whole, taking the owners off devices whose lists
// were (probe I, PI4), and left a pod the sole owner of the nameless
// device beside a host daemon that held it too (PI3). It returns the uses
// still untied (AttachProcesses').
func AttachByElimination(nds []Device, nodes []string, untied []NodeUse) []NodeUse {
	if len(nodes) != len(nds) {
		return untied
	}
	nameless := -1
	named := make(map[string]bool, len(nds))
	for i := range nds {
		switch {
		case nds[i].BusID != "":
			named[nds[i].BusID] = true
		case nameless >= 0:
			return untied // two rows without one: which is which is not known
		default:
			nameless = i
		}
	}
	addr := ""
	for _, a := range nodes {
		switch {
		case named[a]:
		case addr != "":
			return untied
		default:
			addr = a
		}
	}
	if nameless < 0 || addr == "" {
		return untied
	}
	d := &nds[nameless]
	var still []NodeUse
	for _, u := range untied {
		if u.BusID != addr {
			still = append(still, u)
			continue
		}
		if !slices.Contains(d.Processes, u.PID) {
			d.Processes = append(d.Processes, u.PID)
		}
	}
	slices.Sort(d.Processes)
	return still
}
