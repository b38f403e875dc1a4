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
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

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

// computeNode matches the base name of a compute node.
var computeNode = regexp.MustCompile(`^(accel|hl)([0-9]+)$`)

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
		defer s.running.Store(false)
		u, n, err := s.scan(ctx)
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
	nodes := gaudiNodes(sysRoot)

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

// computeNodeLink preselects the descriptors worth a stat: those whose link's
// base name is a compute node's.
func computeNodeLink(target []byte) bool {
	target = bytes.TrimSuffix(target, []byte(" (deleted)"))
	return computeNode.Match(target[bytes.LastIndexByte(target, '/')+1:])
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
	return len(gaudiNodes(sysRoot)) > 0
}

// gaudiNodes reads the habanalabs compute nodes from sysfs, keyed by device
// number. Other drivers' accel nodes (Intel's NPU, Qualcomm's AIC) are left
// out by the driver link of their device.
func gaudiNodes(sysRoot string) map[devNum]node {
	nodes := map[devNum]node{}
	accel, _ := filepath.Glob(filepath.Join(sysRoot, "class", "accel", "accel*"))
	for _, dir := range accel {
		if driver, err := os.Readlink(filepath.Join(dir, "device", "driver")); err != nil || filepath.Base(driver) != "habanalabs" {
			continue
		}
		addNode(nodes, dir, filepath.Join(dir, "device"))
	}
	// The pre-accel driver has its own class, whose attributes sit on the
	// class device itself (the pre-accel sysfs-driver-habanalabs).
	hl, _ := filepath.Glob(filepath.Join(sysRoot, "class", "habanalabs", "hl*"))
	for _, dir := range hl {
		addNode(nodes, dir, dir)
	}
	return nodes
}

func addNode(nodes map[devNum]node, dir, attrs string) {
	name := filepath.Base(dir)
	if !computeNode.MatchString(name) {
		return
	}
	dev, ok := readDev(filepath.Join(dir, "dev"))
	if !ok {
		return
	}
	n := node{name: name}
	if v, err := readSysfs(filepath.Join(attrs, "pci_addr")); err == nil {
		n.busID = NormalizeBusID(v)
	}
	if n.busID == "" {
		// The class device's "device" link points at its PCI device, whose
		// directory is named by its address.
		if target, err := os.Readlink(filepath.Join(dir, "device")); err == nil {
			n.busID = NormalizeBusID(filepath.Base(target))
		}
	}
	nodes[dev] = n
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
// (internal/rawfile), for two attributes of each node at every scan.
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
