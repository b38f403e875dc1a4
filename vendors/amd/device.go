package amd

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/xpu-exporter/xpu_exporter/internal/rawfile"
	"github.com/xpu-exporter/xpu_exporter/vendors/reading"
)

// vendorAMD is the PCI vendor ID of AMD/ATI as the PCI core prints it in a
// device's "vendor" file.
const vendorAMD = "0x1002"

// Device is what the amdgpu sysfs files of one GPU say at one moment.
type Device struct {
	// Card is the DRM card directory name ("card1"). Its number follows
	// probe order; PCIBusID and UniqueID are the stable names.
	Card string
	// PCIBusID is the PCI address in sysfs form, "0000:0c:00.0", taken from
	// the device symlink.
	PCIBusID string
	// RenderMinor is the minor number of the device's render node
	// (renderD128 → 128), which DRM fdinfo clients are matched to.
	RenderMinor Opt[int]
	// Down is set when a read failed with ENODEV: the GPU was unplugged or
	// fell off the bus. The readings taken before it stay.
	Down bool

	// UniqueID is unique_id. amdgpu.rst (DOC: unique_id): "This will
	// provide a Unique ID that will persist from machine to machine. NOTE:
	// This will only work for GFX9 and newer."
	UniqueID Opt[string]
	// ProductName is product_name. amdgpu.rst (DOC: product_name): "returns
	// the product name as returned from the FRU. NOTE: This is only
	// available for certain server cards".
	ProductName Opt[string]
	// PCIDevice is the PCI device ID (the PCI core's "device" attribute,
	// "0x%04x\n", drivers/pci/pci-sysfs.c), lower-case hexadecimal without
	// the 0x: what names the model of a board without product_name.
	PCIDevice Opt[string]
	// VBIOSVersion is vbios_version. amdgpu.rst (DOC: vbios_version): "The
	// amdgpu driver provides a sysfs API for reading the VBIOS version".
	VBIOSVersion Opt[string]
	// Serial is serial_number. amdgpu.rst (DOC: serial_number): "returns
	// the serial number as returned from the FRU. NOTE: This is only
	// available for certain server cards".
	Serial Opt[string]

	// GPUBusy and MemBusy are ratios 0..1 (gpu_busy_percent,
	// mem_busy_percent).
	GPUBusy Opt[float64]
	MemBusy Opt[float64]
	// VRAMTotal and VRAMUsed are in bytes. amdgpu.rst (DOC:
	// mem_info_vram_total): "returns the total amount of VRAM in bytes";
	// (DOC: mem_info_vram_used): "returns the total amount of currently
	// used VRAM in bytes".
	VRAMTotal Opt[uint64]
	VRAMUsed  Opt[uint64]

	// PCIe link speeds in GT/s per lane and widths in lanes.
	LinkSpeed    Opt[float64]
	MaxLinkSpeed Opt[float64]
	LinkWidth    Opt[int]
	MaxLinkWidth Opt[int]

	// PCIeNAKs is pcie_replay_count: amdgpu.rst (DOC: pcie_replay_count)
	// "returns the total number of replays as a sum of the NAKs generated
	// and NAKs received". Each NAK asks the other end for a replay, so it
	// counts replays on both ends of the link, where gpu_metrics'
	// pcie_replay_count_acc (v1.4+) counts the GPU's own: a reading of its
	// own, which MI100 and MI200 (gpu_metrics v1.3) have and the table
	// lacks.
	PCIeNAKs Opt[uint64]

	// SClock and MClock are the active pp_dpm_sclk / pp_dpm_mclk levels in Hz.
	SClock Opt[float64]
	MClock Opt[float64]

	// RAS maps a RAS block ("umc", "gfx", "xgmi_wafl", …) to its counts,
	// from ras/<block>_err_count.
	RAS map[string]RASCount

	// XGMI is set on GPUs in an XGMI hive.
	XGMI *XGMI

	// Hwmon readings in base units.
	Temperatures map[string]float64 // °C by label: "edge", "junction", "mem"
	Power        Opt[float64]       // W
	// PowerSource names the file Power came from: "power1_average" or
	// "power1_input".
	PowerSource string
	PowerCap    Opt[float64] // W
	Energy      Opt[float64] // J
	// TempLimits are the driver's limits of each temperature channel, by
	// the labels of Temperatures; a channel without a limit file has no
	// entry.
	TempLimits map[string]TempLimit

	// ComputePartition and MemoryPartition are the current modes ("CPX",
	// "NPS4") of a GPU that can be partitioned (MI300).
	ComputePartition           Opt[string]
	AvailableComputePartitions []string
	MemoryPartition            Opt[string]
	AvailableMemoryPartitions  []string

	// Metrics is the decoded gpu_metrics table, nil when the file is
	// absent, empty or refused (the refusal is in Errors).
	Metrics *GPUMetrics

	// Errors lists each file that exists but could not be read or parsed.
	Errors []ReadError
}

// TempLimit is what amdgpu's hwmon interface gives of one temperature
// channel's limits, in °C. amdgpu.rst (hwmon interfaces, from amdgpu_pm.c):
// "temp[1-3]_crit: temperature critical max value in millidegrees Celsius"
// and "temp[1-3]_emergency: temperature emergency max value(asic shutdown)
// in millidegrees Celsius"; the hwmon ABI (sysfs-interface.rst) adds that
// the emergency value is for "chips supporting more than two upper
// temperature limits". On MI300 (smu_v13_0_6_ppt.c,
// smu_v13_0_6_get_thermal_temperature_range) the firmware's thermal
// throttle limits fill crit ("Get SOC thermal throttle limit", "Get HBM
// thermal throttle limit") and its CTF limits emergency ("Get SOC Max
// operating temperature", "Get HBM Max operating temperature").
type TempLimit struct {
	Crit      Opt[float64]
	Emergency Opt[float64]
}

// XGMI describes a GPU's place in an XGMI hive, from amdgpu_xgmi.c:
// xgmi_device_id prints the node ID (amdgpu_xgmi_show_device_id, "%llu"),
// xgmi_physical_id the physical node number (amdgpu_xgmi_show_physical_id,
// "%u", newer kernels), and xgmi_hive_info/xgmi_hive_id the hive
// (amdgpu_xgmi_show_attrs, "%llu"). xgmi_error is not read: reading it
// clears the hardware counter (amdgpu_xgmi_show_error ends with
// set_fica(…, 0, 0)), which would steal the count from anyone else.
type XGMI struct {
	DeviceID   string
	HiveID     string
	PhysicalID Opt[int]
}

// Reader reads amdgpu devices under a sysfs root.
type Reader struct {
	// SysfsRoot is the sysfs mount, "/sys" on a host and usually
	// "/host/sys" in a container.
	SysfsRoot string
	// Files, when set, keeps each card's files open between reads.
	Files *Files
}

func (r Reader) root() string {
	if r.SysfsRoot == "" {
		return "/sys"
	}
	return r.SysfsRoot
}

// Cards lists the DRM cards driven by amdgpu, sorted by number. A card
// counts when its device's driver symlink names amdgpu or, where the
// driver link cannot be read, its vendor is 0x1002. Connector entries
// ("card1-DP-1") and render nodes are skipped. The held Files of a card
// no longer listed are closed.
func (r Reader) Cards() ([]string, error) {
	dir := filepath.Join(r.root(), "class", "drm")
	names, err := r.Files.listDir(dir, maxDRMEntries)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	type card struct {
		name string
		n    int
	}
	var cards []card
	for _, name := range names {
		num, ok := strings.CutPrefix(name, "card")
		n, err := strconv.Atoi(num)
		if !ok || err != nil || n < 0 {
			continue
		}
		if r.isAMDGPU(filepath.Join(dir, name, "device")) {
			cards = append(cards, card{name, n})
		}
	}
	sort.Slice(cards, func(i, j int) bool { return cards[i].n < cards[j].n })
	out := make([]string, len(cards))
	for i, c := range cards {
		out[i] = c.name
	}
	r.Files.keep(out)
	return out, nil
}

// maxDRMEntries bounds the listing of class/drm, an entry per DRM minor
// (card, render) and per connector of a card ("card1-DP-1"): a few dozen
// on a node of 8 GPUs.
const maxDRMEntries = 4096

// DriverVersion is /sys/module/amdgpu/version, which exists only when the
// module declares a MODULE_VERSION: AMD's out-of-tree amdgpu-dkms driver
// does, the in-tree driver does not (kernel/params.c, module_attr_show
// lists "version" only for modules with one), so it is often unset.
func (r Reader) DriverVersion() Opt[string] {
	b, err := readFile(filepath.Join(r.root(), "module", "amdgpu", "version"), maxValueSize)
	if err != nil {
		return Opt[string]{}
	}
	v, err := parseString(b)
	if err != nil {
		return Opt[string]{}
	}
	return reading.Some(v)
}

func (r Reader) isAMDGPU(devDir string) bool {
	if target, err := os.Readlink(filepath.Join(devDir, "driver")); err == nil {
		return filepath.Base(target) == "amdgpu"
	}
	b, err := readFile(filepath.Join(devDir, "vendor"), maxValueSize)
	return err == nil && strings.TrimSpace(string(b)) == vendorAMD
}

// devReader reads the files of one device directory and files the errors.
type devReader struct {
	dir   string
	d     *Device
	files *cardFiles
	// sub is the subdirectory of dir the names read are in ("" for dir
	// itself, "ras", "hwmon/hwmon3").
	sub string
	// static reads attributes fixed at registration (cardFiles.readStatic).
	static bool
	// s is the ReadDevice's scratch, which every copy of its devReader
	// shares.
	s *scratch
}

// scratch is what one ReadDevice reuses from file to file: the path of the
// file read and the buffer it is read into. A content read is parsed before
// the next file is read, and what is kept of it is copied by its parser, so
// one buffer serves every file of the device (some fifty per scrape).
type scratch struct {
	path []byte
	buf  []byte
}

var scratchPool = sync.Pool{New: func() any {
	return &scratch{path: make([]byte, 0, 256), buf: make([]byte, maxTableSize+1)}
}}

// fixed returns dr reading attributes whose value the driver fixes when the
// GPU registers.
func (dr devReader) fixed() devReader {
	dr.static = true
	return dr
}

// in returns dr reading the files of dr.dir's subdirectory sub.
func (dr devReader) in(sub string) devReader {
	dr.sub = sub
	return dr
}

// path is the path of name in dr.dir/dr.sub, built in dr.s.path: valid
// until the next path. dir is clean (ReadDevice builds it with
// filepath.Join) and so is every name read (a constant, or a directory
// entry's), so separators are all the join needs; filepath.Join would clean
// and allocate the path again at each of a scrape's some 250 reads.
func (dr devReader) path(name string) []byte {
	p := append(append(dr.s.path[:0], dr.dir...), '/')
	if dr.sub != "" {
		p = append(append(p, dr.sub...), '/')
	}
	p = append(p, name...)
	dr.s.path = p
	return p
}

// file is name as the errors name it: relative to the device directory.
func (dr devReader) file(name string) string {
	if dr.sub == "" {
		return name
	}
	return dr.sub + "/" + name
}

// read returns the content of name (in dr.sub), or nil when the reading is
// absent or failed; failures are filed. The content is dr.s.buf's, or a
// kept static attribute's, valid until the next read: the caller parses it
// and does not change it.
func (dr devReader) read(name string, limit int) []byte {
	if dr.d.Down {
		// Every further read of a device that answered ENODEV fails the
		// same way.
		return nil
	}
	read := dr.files.read
	if dr.static {
		read = dr.files.readStatic
	}
	b, err := read(dr.path(name), limit, dr.s.buf)
	switch {
	case err == nil:
		return b
	case absent(err):
	case gone(err):
		dr.d.Down = true
	default:
		dr.fail(name, err)
	}
	return nil
}

func (dr devReader) fail(name string, err error) {
	dr.d.Errors = append(dr.d.Errors, ReadError{File: dr.file(name), Err: err})
}

// noValue reports whether b is an empty value, which amdgpu prints where it
// has none: product_name and serial_number on boards without an FRU EEPROM
// on kernels that created them for every GPU (amdgpu_device.c,
// sysfs_emit(buf, "%s\n", adev->product_name)), unique_id on an ASIC
// without one ("if (adev->unique_id) ... return 0"), power1_cap whose limit
// cannot be read (amdgpu_hwmon_show_power_cap_generic: sysfs_emit(buf,
// "\n")). That is an absent reading, not a malformed file.
func noValue(b []byte) bool { return len(bytes.TrimSpace(b)) == 0 }

// value reads name and parses it; a parse error is filed.
func value[T any](dr devReader, name string, parse func([]byte) (T, error)) Opt[T] {
	b := dr.read(name, maxValueSize)
	if b == nil || noValue(b) {
		return Opt[T]{}
	}
	v, err := parse(b)
	if err != nil {
		dr.fail(name, err)
		return Opt[T]{}
	}
	return reading.Some(v)
}

// optional is value for parsers that may say "no reading" without error.
func optional[T any](dr devReader, name string, parse func([]byte) (T, bool, error)) Opt[T] {
	b := dr.read(name, maxValueSize)
	if b == nil || noValue(b) {
		return Opt[T]{}
	}
	v, ok, err := parse(b)
	if err != nil {
		dr.fail(name, err)
		return Opt[T]{}
	}
	if !ok {
		return Opt[T]{}
	}
	return reading.Some(v)
}

// CardPCIAddress is the PCI address of a card's device, from its sysfs
// link alone, which kernfs answers without the driver (see ReadDevice):
// what names a GPU whose reads hang before any has answered. ok is false
// when the link cannot be read or names no PCI address.
func (r Reader) CardPCIAddress(card string) (addr string, ok bool) {
	target, err := os.Readlink(filepath.Join(r.root(), "class", "drm", card, "device"))
	if err != nil {
		return "", false
	}
	if base := filepath.Base(target); isPCIAddress(base) {
		return base, true
	}
	return "", false
}

// ReadDevice reads every file of card. It never fails as a whole: a card
// whose directory vanished comes back Down.
func (r Reader) ReadDevice(card string) Device {
	dir := filepath.Join(r.root(), "class", "drm", card, "device")
	d := Device{Card: card}
	s := scratchPool.Get().(*scratch)
	defer scratchPool.Put(s)
	dr := devReader{dir: dir, d: &d, files: r.Files.card(card), s: s}
	defer dr.files.done()
	// The device link names the PCI device it points to last: sysfs links
	// read as the relative path to their target (fs/kernfs/symlink.c,
	// kernfs_get_target_path), "../../../0000:0c:00.0".
	if target, err := os.Readlink(dir); err == nil {
		if base := filepath.Base(target); isPCIAddress(base) {
			d.PCIBusID = base
		} else {
			dr.fail("device", fmt.Errorf("%w: %q is not a PCI address", ErrMalformed, truncate(base)))
		}
	} else if absent(err) {
		d.Down = true
		return d
	} else {
		dr.fail("device", err)
	}

	if names, err := dr.files.stableDir(dr.path("drm"), 16); err == nil {
		d.RenderMinor = renderMinor(names)
	}

	// Readings first: the first held file read after the GPU registered
	// anew answers ENODEV, which clears the attributes kept from its last
	// registration before they are asked for.
	d.GPUBusy = value(dr, "gpu_busy_percent", parsePercent)
	d.MemBusy = value(dr, "mem_busy_percent", parsePercent)
	d.VRAMTotal = value(dr, "mem_info_vram_total", parseUint)
	d.VRAMUsed = value(dr, "mem_info_vram_used", parseUint)
	if d.VRAMUsed.OK && d.VRAMTotal.OK && d.VRAMUsed.Value > d.VRAMTotal.Value {
		// Used is part of total (amdgpu.rst: "the total amount of
		// currently used VRAM" of "the total amount of VRAM"): more than
		// it is a misread, not a reading (probe27 PA8).
		dr.fail("mem_info_vram_used", fmt.Errorf("%w: %d bytes used of %d", ErrMalformed, d.VRAMUsed.Value, d.VRAMTotal.Value))
		d.VRAMUsed = Opt[uint64]{}
	}
	d.LinkSpeed = optional(dr, "current_link_speed", parseLinkSpeed)
	d.LinkWidth = optional(dr, "current_link_width", parseLinkWidth)
	d.PCIeNAKs = value(dr, "pcie_replay_count", parseUint)

	// Fixed when the GPU registers: amdgpu reads the product name, serial
	// and unique ID from the FRU and SMU at init
	// (amdgpu_fru_get_product_info), and vbios_version prints a field of
	// the atom context parsed from the VBIOS at init (amdgpu_atombios.c,
	// vbios_version_show, formerly amdgpu_atombios_get_vbios_version:
	// sysfs_emit of ctx->vbios_pn); the PCI core reads the maximum link
	// speed and width from the Link Capabilities register, the hardware's.
	st := dr.fixed()
	d.UniqueID = value(st, "unique_id", parseString)
	d.ProductName = value(st, "product_name", parseString)
	d.VBIOSVersion = value(st, "vbios_version", parseString)
	d.PCIDevice = value(st, "device", parsePCIID)
	d.Serial = value(st, "serial_number", parseString)
	d.MaxLinkSpeed = optional(st, "max_link_speed", parseLinkSpeed)
	d.MaxLinkWidth = optional(st, "max_link_width", parseLinkWidth)

	d.SClock = optional(dr, "pp_dpm_sclk", parseDPMCurrent)
	d.MClock = optional(dr, "pp_dpm_mclk", parseDPMCurrent)

	r.readRAS(dr)
	r.readXGMI(dr)
	r.readHwmon(dr)

	// Partition modes (MI300): current_compute_partition prints the mode
	// ("SPX", "DPX", "TPX", "QPX", "CPX") and available_compute_partition
	// the modes the GPU supports (amdgpu_gfx.c,
	// amdgpu_gfx_get_current_compute_partition and
	// amdgpu_gfx_get_available_compute_partition); the memory partition
	// files likewise print "NPS1", "NPS4"….
	d.ComputePartition = optional(dr, "current_compute_partition", parseMode)
	d.MemoryPartition = optional(dr, "current_memory_partition", parseMode)
	// The modes a GPU supports are its ASIC's.
	if v := optional(st, "available_compute_partition", parseList); v.OK {
		d.AvailableComputePartitions = v.Value
	}
	if v := optional(st, "available_memory_partition", parseList); v.OK {
		d.AvailableMemoryPartitions = v.Value
	}

	// amdgpu.rst (DOC: gpu_metrics): "The amdgpu driver provides a sysfs
	// API for retrieving current gpu metrics data. The file gpu_metrics is
	// used for this. Reading the file will dump all the current gpu
	// metrics data." An ASIC without the table gives an empty file.
	if b := dr.read("gpu_metrics", maxTableSize); len(b) > 0 {
		m, err := DecodeGPUMetrics(b)
		switch {
		case err != nil:
			dr.fail("gpu_metrics", err)
		case len(m.OutOfRange) > 0:
			// Its other fields are read as usual.
			dr.fail("gpu_metrics", fmt.Errorf("%w: %s", ErrMalformed, strings.Join(m.OutOfRange, ", ")))
			d.Metrics = m
		default:
			d.Metrics = m
		}
	}
	return d
}

// maxRASBlocks bounds the ras directory; amdgpu has about 15 RAS blocks.
const maxRASBlocks = 64

func (r Reader) readRAS(dr devReader) {
	names, err := dr.files.listDir(dr.path("ras"), maxRASBlocks*4)
	if err != nil {
		if !absent(err) {
			dr.fail("ras", err)
		}
		return
	}
	for _, name := range names {
		block, ok := strings.CutSuffix(name, "_err_count")
		if !ok || block == "" {
			continue
		}
		if len(dr.d.RAS) >= maxRASBlocks {
			dr.fail("ras", fmt.Errorf("%w: more than %d blocks", ErrTooLarge, maxRASBlocks))
			return
		}
		v := optional(dr.in("ras"), name, parseRASCount)
		if v.OK {
			if dr.d.RAS == nil {
				dr.d.RAS = map[string]RASCount{}
			}
			dr.d.RAS[block] = v.Value
		}
	}
}

// readXGMI reads the GPU's place in its XGMI hive, which amdgpu sets up
// when the GPU registers (amdgpu_xgmi_add_device).
func (r Reader) readXGMI(dr devReader) {
	dr = dr.fixed()
	dev := value(dr, "xgmi_device_id", parseString)
	hive := value(dr, "xgmi_hive_info/xgmi_hive_id", parseString)
	if !dev.OK && !hive.OK {
		return
	}
	x := &XGMI{DeviceID: dev.Value, HiveID: hive.Value}
	if v := value(dr, "xgmi_physical_id", parseUint); v.OK && v.Value < 1<<16 {
		x.PhysicalID = reading.Some(int(v.Value))
	}
	dr.d.XGMI = x
}

// hwmonTempLabels are amdgpu's temperature channels in order.
var hwmonTempLabels = [...]string{"edge", "junction", "mem"}

// tempChannel names the files of one hwmon temperature channel.
type tempChannel struct{ input, label, crit, emergency, name string }

// tempChannels are the channels readHwmon looks for, temp1 to temp8, named
// once rather than at every read.
var tempChannels = func() (chs [8]tempChannel) {
	for i := range chs {
		name := "temp" + strconv.Itoa(i+1)
		chs[i] = tempChannel{name + "_input", name + "_label", name + "_crit", name + "_emergency", name}
	}
	return chs
}()

// readHwmon reads the hwmon directory of the device. Hwmon readings follow
// Documentation/hwmon/sysfs-interface.rst: temp[1-*]_input "Unit:
// millidegree Celsius"; power[1-*]_average "Average power use. Unit:
// microWatt"; power[1-*]_input "Instantaneous power use. Unit: microWatt";
// power[1-*]_cap "Unit: microWatt"; energy[1-*]_input "Cumulative energy
// use. Unit: microJoule". amdgpu's own list (amdgpu.rst, "hwmon
// interfaces") names temp1 "edge", temp2 "junction" and temp3 "mem" through
// temp*_label, and hides the channels a model lacks (MI300 has no edge
// sensor and no power1_average, only power1_input).
func (r Reader) readHwmon(dr devReader) {
	names, err := dr.files.stableDir(dr.path("hwmon"), 16)
	if err != nil {
		if !absent(err) {
			dr.fail("hwmon", err)
		}
		return
	}
	// A device has one hwmon directory; its number follows probe order.
	var hw string
	for _, n := range names {
		if strings.HasPrefix(n, "hwmon") {
			hw = "hwmon/" + n
			break
		}
	}
	if hw == "" {
		return
	}
	dr = dr.in(hw)
	for i, ch := range tempChannels {
		v := value(dr, ch.input, parseInt)
		if !v.OK {
			continue
		}
		// A channel's label is fixed: amdgpu_pm.c defines temp1_label,
		// temp2_label and temp3_label with PP_TEMP_EDGE, PP_TEMP_JUNCTION
		// and PP_TEMP_MEM, the sensors of temp1_input … temp3_input, and
		// hides a label only with its input; a tree without the label
		// file still numbers its channels that way.
		label := ch.name
		if i < len(hwmonTempLabels) {
			label = hwmonTempLabels[i]
		}
		if l := value(dr.fixed(), ch.label, parseString); l.OK {
			label = l.Value
		}
		if dr.d.Temperatures == nil {
			dr.d.Temperatures = map[string]float64{}
		}
		dr.d.Temperatures[label] = float64(v.Value) / 1000
		// The limits are the thermal range the power firmware gave when the
		// GPU registered: amdgpu_hwmon_show_temp_thresh and its hotspot and
		// mem siblings print adev->pm.dpm.thermal.max_temp,
		// max_hotspot_crit_temp and max_mem_crit_temp, and
		// amdgpu_hwmon_show_temp_emergency the max_*_emergency_temp beside
		// them, fields the SMU code fills at hardware init and nothing
		// writes after; read once like the label.
		lim := TempLimit{
			Crit:      optional(dr.fixed(), ch.crit, parseTempLimit),
			Emergency: optional(dr.fixed(), ch.emergency, parseTempLimit),
		}
		if lim.Crit.OK || lim.Emergency.OK {
			if dr.d.TempLimits == nil {
				dr.d.TempLimits = map[string]TempLimit{}
			}
			dr.d.TempLimits[label] = lim
		}
	}
	// A power or power cap of 0 is no reading: the secondary die of an
	// MI250X shows both as 0 (aldebaran_ppt.c, aldebaran_get_power_limit:
	// "Valid power data is available only from primary die. For secondary
	// die show the value as 0"; the same for its socket power), and no
	// powered GPU draws 0 W.
	for _, src := range [...]string{"power1_average", "power1_input"} {
		if v := value(dr, src, parseUint); v.OK {
			if v.Value > 0 {
				dr.d.Power, dr.d.PowerSource = reading.Some(float64(v.Value)/1e6), src
			}
			break
		}
	}
	if v := value(dr, "power1_cap", parseUint); v.OK && v.Value > 0 {
		dr.d.PowerCap = reading.Some(float64(v.Value) / 1e6)
	}
	if v := value(dr, "energy1_input", parseUint); v.OK {
		dr.d.Energy = reading.Some(float64(v.Value) / 1e6)
	}
}

// readDirNames lists at most limit names of dir, sorted, without the
// poller (internal/rawfile), as a card's ras is listed at every scrape.
func readDirNames(dir string, limit int) ([]string, error) {
	fd, err := rawfile.Open(dir, syscall.O_DIRECTORY)
	if err != nil {
		return nil, err
	}
	defer syscall.Close(fd)
	bp := tableBufs.Get().(*[]byte)
	defer tableBufs.Put(bp)
	var names []string
	for len(names) < limit {
		n, err := syscall.ReadDirent(fd, *bp)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			if len(names) > 0 {
				break
			}
			return nil, &os.PathError{Op: "readdirent", Path: dir, Err: err}
		}
		if n <= 0 {
			break
		}
		// ParseDirent leaves out "." and "..".
		_, _, names = syscall.ParseDirent((*bp)[:n], limit-len(names), names)
	}
	sort.Strings(names)
	return names, nil
}

// renderMinor finds "renderD<n>" among the entries of a drm directory.
func renderMinor(names []string) Opt[int] {
	for _, name := range names {
		if m := renderDMinor(name); m.OK {
			return m
		}
	}
	return Opt[int]{}
}

// renderDMinor is n of a render node's name, "renderD<n>".
func renderDMinor(name string) Opt[int] {
	if v, ok := strings.CutPrefix(name, "renderD"); ok {
		if n, err := strconv.Atoi(v); err == nil && n >= 0 {
			return reading.Some(n)
		}
	}
	return Opt[int]{}
}

// isPCIAddress accepts the form the PCI core names devices in sysfs,
// "dddd:bb:dd.f" in lower-case hexadecimal (probe.c, pci_setup_device:
// dev_set_name(&dev->dev, "%04x:%02x:%02x.%d", …)); the domain may have
// more than 4 digits (VMD domains start at 0x10000).
func isPCIAddress(s string) bool {
	parts := strings.Split(s, ":")
	if len(parts) != 3 || len(parts[0]) < 4 || len(parts[0]) > 8 || len(parts[1]) != 2 {
		return false
	}
	dev, fn, ok := strings.Cut(parts[2], ".")
	if !ok || len(dev) != 2 || len(fn) != 1 || fn[0] < '0' || fn[0] > '7' {
		return false
	}
	for _, c := range []byte(parts[0] + parts[1] + dev) {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
