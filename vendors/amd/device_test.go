package amd

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/xpu-exporter/xpu_exporter/vendors/reading"
)

func TestCardsSkipsOtherDrivers(t *testing.T) {
	got, err := Reader{SysfsRoot: fixtureSys}.Cards()
	if err != nil {
		t.Fatal(err)
	}
	// card0 is the BMC's ASPEED VGA (driver ast); card2 and card3 are the
	// MI300X's partition devices, whose "device" is a platform device
	// without a PCI vendor or driver link: listed by Partitions instead.
	if want := []string{"card1", "card9"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Cards() = %v, want %v", got, want)
	}
}

func TestReadDeviceMI300X(t *testing.T) {
	d := Reader{SysfsRoot: fixtureSys}.ReadDevice("card1")
	if len(d.Errors) != 0 || d.Down {
		t.Fatalf("errors %v, down %v", d.Errors, d.Down)
	}
	if d.PCIBusID != "0000:0c:00.0" || d.UniqueID.Value != "5c8a7e5d1b3f2a90" || d.ProductName.Value != "AMD Instinct MI300X OAM" {
		t.Errorf("identity %q %+v %+v", d.PCIBusID, d.UniqueID, d.ProductName)
	}
	wantF(t, "gpu busy (37 %)", d.GPUBusy, 0.37)
	wantF(t, "mem busy (12 %)", d.MemBusy, 0.12)
	wantU(t, "vram total", d.VRAMTotal, 205822885888)
	wantU(t, "vram used (64 GiB = 64 × 2^30)", d.VRAMUsed, 68719476736)
	wantF(t, "link speed", d.LinkSpeed, 32)
	if d.LinkWidth.Value != 16 || d.MaxLinkWidth.Value != 16 {
		t.Errorf("widths %+v %+v", d.LinkWidth, d.MaxLinkWidth)
	}
	wantF(t, "sclk (1300 MHz)", d.SClock, 1300e6)
	wantF(t, "mclk (1300 MHz)", d.MClock, 1300e6)
	if len(d.RAS) != 3 || d.RAS["umc"].Correctable.Value != 2 || !d.RAS["umc"].Deferred.OK {
		t.Errorf("RAS %+v", d.RAS)
	}
	if d.XGMI == nil || d.XGMI.HiveID != "1234567890123456789" || d.XGMI.DeviceID != "7821391920473019445" || d.XGMI.PhysicalID.Value != 2 {
		t.Errorf("XGMI %+v", d.XGMI)
	}
	// MI300 hides the edge sensor and power1_average.
	if want := map[string]float64{"junction": 48, "mem": 41}; !reflect.DeepEqual(d.Temperatures, want) {
		t.Errorf("temperatures %v, want %v", d.Temperatures, want)
	}
	// 100000 and 95000 m°C; this kernel's MI300X shows no temp*_emergency,
	// and a limit the driver does not show is unset, never zero.
	wantLimits(t, d, map[string]TempLimit{
		"junction": {Crit: reading.Some(100.0)},
		"mem":      {Crit: reading.Some(95.0)},
	})
	// 312 000 000 µW = 312 W; 750 000 000 µW = 750 W.
	wantF(t, "power", d.Power, 312)
	if d.PowerSource != "power1_input" {
		t.Errorf("power source %q", d.PowerSource)
	}
	wantF(t, "power cap", d.PowerCap, 750)
	wantUnset(t, "energy", d.Energy)
	if d.ComputePartition.Value != "DPX" || d.MemoryPartition.Value != "NPS1" ||
		!reflect.DeepEqual(d.AvailableComputePartitions, []string{"SPX", "DPX", "QPX", "CPX"}) ||
		!reflect.DeepEqual(d.AvailableMemoryPartitions, []string{"NPS1", "NPS4"}) {
		t.Errorf("partition modes %+v %+v %v %v", d.ComputePartition, d.MemoryPartition, d.AvailableComputePartitions, d.AvailableMemoryPartitions)
	}
	if d.Metrics == nil || d.Metrics.ContentRevision != 5 {
		t.Errorf("metrics %+v", d.Metrics)
	}
}

func TestReadDeviceMI210(t *testing.T) {
	d := Reader{SysfsRoot: fixtureSys}.ReadDevice("card9")
	if len(d.Errors) != 0 || d.Down {
		t.Fatalf("errors %v, down %v", d.Errors, d.Down)
	}
	if d.PCIBusID != "0000:83:00.0" {
		t.Errorf("bus id %q", d.PCIBusID)
	}
	wantF(t, "gpu busy", d.GPUBusy, 1)
	if want := map[string]float64{"edge": 35, "junction": 52, "mem": 60}; !reflect.DeepEqual(d.Temperatures, want) {
		t.Errorf("temperatures %v", d.Temperatures)
	}
	// temp1..3_crit 100000, 110000, 100000 m°C; _emergency 105000,
	// 115000, 105000 m°C.
	wantLimits(t, d, map[string]TempLimit{
		"edge":     {Crit: reading.Some(100.0), Emergency: reading.Some(105.0)},
		"junction": {Crit: reading.Some(110.0), Emergency: reading.Some(115.0)},
		"mem":      {Crit: reading.Some(100.0), Emergency: reading.Some(105.0)},
	})
	// 150 000 000 µW from power1_average = 150 W.
	wantF(t, "power", d.Power, 150)
	if d.PowerSource != "power1_average" {
		t.Errorf("power source %q", d.PowerSource)
	}
	wantF(t, "sclk", d.SClock, 1700e6)
	if d.XGMI != nil || d.ComputePartition.OK || d.AvailableComputePartitions != nil {
		t.Errorf("MI210 has no XGMI hive or partitions: %+v %+v", d.XGMI, d.ComputePartition)
	}
	if d.Metrics == nil || d.Metrics.ContentRevision != 3 {
		t.Errorf("metrics %+v", d.Metrics)
	}
}

func wantLimits(t *testing.T, d Device, want map[string]TempLimit) {
	t.Helper()
	if !reflect.DeepEqual(d.TempLimits, want) {
		t.Errorf("temperature limits %+v, want %+v", d.TempLimits, want)
	}
}

// buildCard makes a one-card sysfs tree under a temporary root with the
// given device files, in the layout of /sys/class/drm/cardN/device.
func buildCard(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	dev := filepath.Join(root, "devices", "pci0000:00", "0000:03:00.0")
	for name, content := range files {
		p := filepath.Join(dev, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	card := filepath.Join(root, "class", "drm", "card0")
	if err := os.MkdirAll(card, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(dev, filepath.Join(card, "device")); err != nil {
		t.Fatal(err)
	}
	return root
}

func errorFiles(d Device) []string {
	var out []string
	for _, e := range d.Errors {
		out = append(out, e.File)
	}
	return out
}

// TestSecondaryDiePowerIsNoReading: an MI250X's secondary die shows
// power1_average 0 and power1_cap 0, which the kernel says are no data
// (aldebaran_ppt.c, aldebaran_get_power_limit: "For secondary die show the
// value as 0"), and so is its gpu_metrics v1.3 average_socket_power: no
// power and no limit, not 0 W. The primary die's 380 W of 560 W are read.
func TestSecondaryDiePowerIsNoReading(t *testing.T) {
	table := func(watts uint16) string {
		b := make([]byte, 120) // gpu_metrics_v1_3
		binary.LittleEndian.PutUint16(b, 120)
		b[2], b[3] = 1, 3
		binary.LittleEndian.PutUint16(b[22:], watts)
		return string(b)
	}
	for _, c := range []struct {
		name         string
		avg, cap     string
		socket       uint16
		power, limit float64 // 0: unset
	}{
		{"primary die", "380000000\n", "560000000\n", 380, 380, 560},
		{"secondary die", "0\n", "0\n", 0, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := buildCard(t, map[string]string{
				"vendor":                      "0x1002\n",
				"hwmon/hwmon0/power1_average": c.avg,
				"hwmon/hwmon0/power1_cap":     c.cap,
				"gpu_metrics":                 table(c.socket),
			})
			d := Reader{SysfsRoot: root}.ReadDevice("card0")
			for _, r := range []struct {
				name string
				got  Opt[float64]
				want float64
			}{{"power", d.Power, c.power}, {"power cap", d.PowerCap, c.limit}, {"socket power", d.Metrics.SocketPower, c.power}} {
				if c.power == 0 {
					wantUnset(t, r.name, r.got)
				} else {
					wantF(t, r.name, r.got, r.want)
				}
			}
		})
	}
}

// TestReadDeviceUsedAboveTotal: VRAM used above VRAM total cannot both be
// right (probe27 PA8: 3e11 bytes used of 2.06e11 served): used is filed as
// malformed and unset, total kept; used equal to total is a full GPU.
func TestReadDeviceUsedAboveTotal(t *testing.T) {
	for _, tc := range []struct {
		used     string
		wantUsed bool
	}{
		{"300000000000\n", false},
		{"205822885888\n", true},
	} {
		root := buildCard(t, map[string]string{"vendor": "0x1002\n", "mem_info_vram_total": "205822885888\n", "mem_info_vram_used": tc.used})
		d := Reader{SysfsRoot: root}.ReadDevice("card0")
		if !d.VRAMTotal.OK || d.VRAMTotal.Value != 205822885888 {
			t.Errorf("used %s: total %+v, want 205822885888", tc.used, d.VRAMTotal)
		}
		if d.VRAMUsed.OK != tc.wantUsed {
			t.Errorf("used %s: read %+v, want set %v", tc.used, d.VRAMUsed, tc.wantUsed)
		}
		if got, want := errorFiles(d), []string{"mem_info_vram_used"}; tc.wantUsed == (len(got) > 0) || !tc.wantUsed && !reflect.DeepEqual(got, want) {
			t.Errorf("used %s: errors in %v", tc.used, got)
		}
	}
}

func TestReadDeviceMissingMalformedOversized(t *testing.T) {
	root := buildCard(t, map[string]string{
		"vendor":                       "0x1002\n",
		"gpu_busy_percent":             "12a\n",
		"mem_busy_percent":             "250\n",
		"mem_info_vram_total":          strings.Repeat("9", maxValueSize+10),
		"pp_dpm_sclk":                  "0: 500Mhz *\n1: 800Mhz *\n",
		"ras/umc_err_count":            "ue: x\n",
		"ras/gfx_err_count":            "ue: 0\nce: 3\n",
		"hwmon/hwmon0/temp1_input":     "hot\n",
		"hwmon/hwmon0/temp2_input":     "-5000\n",
		"hwmon/hwmon0/temp2_crit":      "0\n",
		"hwmon/hwmon0/temp2_emergency": "105C\n",
		"hwmon/hwmon0/temp1_crit":      "90000\n",
		"hwmon/hwmon0/power1_input":    "15000000\n",
		"hwmon/hwmon0/power1_cap":      "\n",
		"gpu_metrics":                  "\x78\x00\x01\x03short",
		"current_compute_partition":    "SPX\n",
		"available_memory_partition":   "\n",
		// The driver's "no value": absent, not malformed.
		"product_name":  "\n",
		"serial_number": "\n",
		"unique_id":     "",
	})
	d := Reader{SysfsRoot: root}.ReadDevice("card0")
	want := []string{
		"gpu_busy_percent", "mem_busy_percent", "mem_info_vram_total", "pp_dpm_sclk",
		"ras/umc_err_count", "hwmon/hwmon0/temp1_input", "hwmon/hwmon0/temp2_emergency", "gpu_metrics",
	}
	if got := errorFiles(d); !reflect.DeepEqual(got, want) {
		t.Errorf("errors in %v, want %v", got, want)
	}
	for _, e := range d.Errors {
		if e.File == "mem_info_vram_total" && !errors.Is(e, ErrTooLarge) {
			t.Errorf("oversized file: %v", e)
		}
		if e.File == "gpu_metrics" && !errors.Is(e, ErrMetricsShort) {
			t.Errorf("gpu_metrics: %v", e)
		}
	}
	// Malformed and missing readings are unset, never zero.
	for name, v := range map[string]Opt[float64]{"gpu busy": d.GPUBusy, "mem busy": d.MemBusy, "sclk": d.SClock, "link speed": d.LinkSpeed, "power cap": d.PowerCap} {
		wantUnset(t, name, v)
	}
	wantUnset(t, "vram total", d.VRAMTotal)
	for name, v := range map[string]Opt[string]{"unique id": d.UniqueID, "product name": d.ProductName, "serial": d.Serial} {
		wantUnset(t, name, v)
	}
	if len(d.RAS) != 1 || d.RAS["gfx"].Correctable.Value != 3 {
		t.Errorf("RAS %+v", d.RAS)
	}
	// temp2 has no label file: amdgpu's temp2 is the junction sensor
	// (amdgpu_pm.c, temp2_label's PP_TEMP_JUNCTION). Negative temperatures
	// are valid hwmon readings.
	if want := map[string]float64{"junction": -5}; !reflect.DeepEqual(d.Temperatures, want) {
		t.Errorf("temperatures %v", d.Temperatures)
	}
	// A crit of 0 is no limit; a malformed emergency is filed and unset;
	// temp1's crit goes with its unreadable input.
	wantLimits(t, d, nil)
	wantF(t, "power from power1_input", d.Power, 15)
	if d.Metrics != nil || d.Down {
		t.Errorf("metrics %v down %v", d.Metrics, d.Down)
	}
	if d.ComputePartition.Value != "SPX" {
		t.Errorf("compute partition %+v", d.ComputePartition)
	}
}

func TestReadDeviceEmptyGPUMetricsIsAbsent(t *testing.T) {
	root := buildCard(t, map[string]string{"gpu_metrics": ""})
	d := Reader{SysfsRoot: root}.ReadDevice("card0")
	if d.Metrics != nil || len(d.Errors) != 0 {
		t.Errorf("metrics %v errors %v", d.Metrics, d.Errors)
	}
}

func TestReadDeviceVanishedCardIsDown(t *testing.T) {
	d := Reader{SysfsRoot: t.TempDir()}.ReadDevice("card4")
	if !d.Down || len(d.Errors) != 0 {
		t.Errorf("down %v errors %v", d.Down, d.Errors)
	}
}

func TestReadDeviceUnreadableFileIsCounted(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root reads files whatever their mode")
	}
	root := buildCard(t, map[string]string{"gpu_busy_percent": "5\n"})
	if err := os.Chmod(filepath.Join(root, "devices", "pci0000:00", "0000:03:00.0", "gpu_busy_percent"), 0); err != nil {
		t.Fatal(err)
	}
	d := Reader{SysfsRoot: root}.ReadDevice("card0")
	if got := errorFiles(d); !reflect.DeepEqual(got, []string{"gpu_busy_percent"}) || d.GPUBusy.OK {
		t.Errorf("errors %v busy %+v", got, d.GPUBusy)
	}
}

func TestPartitions(t *testing.T) {
	r := Reader{SysfsRoot: fixtureSys}
	gpus := []Device{r.ReadDevice("card1"), r.ReadDevice("card9")}
	got, errs := r.Partitions(gpus)
	if len(errs) != 0 {
		t.Fatal(errs)
	}
	// The MI300X in DPX has two partitions: partition 0 on its own PCI
	// function (card1) and amdgpu_xcp_0 (card2, renderD129, whose KFD node
	// has location_id 3073 = 0x0c00 | 1: bus 0x0c, device 0, and the
	// kernel's partition number 1 in the function bits, 0c:00.1, which is
	// no GPU: its parent is the GPU at 0c:00, and it is partition 1).
	// amdgpu_xcp_1 has no KFD node, so it is idle; the MI210 is in no
	// partition mode.
	want := []Partition{
		{Name: "0000:0c:00.0", DevicePluginID: "0000:0c:00.0", ParentPCIBusID: "0000:0c:00.0", Card: 1, RenderMinor: 128, Number: reading.Some(0)},
		{Name: "amdgpu_xcp_0", DevicePluginID: "amdgpu_xcp_0", ParentPCIBusID: "0000:0c:00.0", Card: 2, RenderMinor: 129, Number: reading.Some(1)},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Partitions() =\n%+v\nwant\n%+v", got, want)
	}
	// The same node while current_compute_partition reads "UNKNOWN" (a
	// mode switch under way): amdgpu_xcp_0 is live, so the MI300X is
	// partitioned and its own function is still partition 0.
	gpus[0].ComputePartition = Opt[string]{}
	if got, _ := r.Partitions(gpus); !reflect.DeepEqual(got, want) {
		t.Errorf("mode unknown: Partitions() =\n%+v\nwant\n%+v", got, want)
	}
}

// TestPartitionNumber: a platform partition's number is the function bits
// of its KFD node's address when its GPU's own function is 0 (the kernel
// ORs node_id into them); 0 (partition 0's, on the GPU's own function) and
// any address of another slot or of a GPU on another function tell none.
func TestPartitionNumber(t *testing.T) {
	for _, tc := range []struct {
		kfd, parent string
		want        Opt[int]
	}{
		{"0000:0c:00.3", "0000:0c:00.0", reading.Some(3)},
		{"0000:0c:00.7", "0000:0c:00.0", reading.Some(7)},
		{"0000:0c:00.0", "0000:0c:00.0", Opt[int]{}},
		{"0000:0c:00.3", "0000:0c:00.1", Opt[int]{}},
		{"0000:1c:00.3", "0000:0c:00.0", Opt[int]{}},
		{"0000:0c:00", "0000:0c:00.0", Opt[int]{}},
	} {
		if got := partitionNumber(tc.kfd, tc.parent); got != tc.want {
			t.Errorf("partitionNumber(%q, %q) = %v, want %v", tc.kfd, tc.parent, got, tc.want)
		}
	}
}

// TestParentOf: a KFD node's address names its GPU exactly, or by domain,
// bus and device where the function bits carry a partition's number; an
// address two GPUs could have, or none, names no GPU.
func TestParentOf(t *testing.T) {
	gpus := []Device{{PCIBusID: "0000:0c:00.0"}, {PCIBusID: "0000:22:00.0"}, {PCIBusID: "0000:41:00.0"}, {PCIBusID: "0000:41:00.1"}}
	for _, c := range []struct{ kfd, want string }{
		{"0000:0c:00.0", "0000:0c:00.0"},
		{"0000:0c:00.7", "0000:0c:00.0"},
		{"0000:22:00.3", "0000:22:00.0"},
		{"0000:41:00.1", "0000:41:00.1"},
		{"0000:41:00.5", "0000:41:00.5"},
		{"0000:5c:00.2", "0000:5c:00.2"},
	} {
		if got := parentOf(c.kfd, gpus); got != c.want {
			t.Errorf("parentOf(%s) = %s, want %s", c.kfd, got, c.want)
		}
	}
}

func TestParseKFDProperties(t *testing.T) {
	for _, c := range []struct {
		in    string
		minor int
		bus   string
		err   bool
	}{
		// 33536 = 0x8300: bus 0x83, devfn 0.
		{"drm_render_minor 136\ndomain 0\nlocation_id 33536\n", 136, "0000:83:00.0", false},
		// 0x1a0b: bus 0x1a, devfn 0x0b = device 1, function 3.
		{"drm_render_minor 130\ndomain 2\nlocation_id 6667\n", 130, "0002:1a:01.3", false},
		{"cpu_cores_count 96\ndrm_render_minor 0\n", 0, "", false},
		{"drm_render_minor 128\n", 0, "", true},
		{"drm_render_minor x\n", 0, "", true},
	} {
		minor, bus, err := parseKFDProperties([]byte(c.in))
		if minor != c.minor || bus != c.bus || (err != nil) != c.err {
			t.Errorf("%q: %d %q %v", c.in, minor, bus, err)
		}
	}
}

func TestCardsOddTree(t *testing.T) {
	root := t.TempDir()
	mk := func(card, vendor string) {
		dev := filepath.Join(root, "devices", card)
		if err := os.MkdirAll(dev, 0o755); err != nil {
			t.Fatal(err)
		}
		if vendor != "" {
			if err := os.WriteFile(filepath.Join(dev, "vendor"), []byte(vendor), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		dir := filepath.Join(root, "class", "drm", card)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(dev, filepath.Join(dir, "device")); err != nil {
			t.Fatal(err)
		}
	}
	// No driver link: the PCI vendor decides. card10 sorts after card9,
	// connectors and render nodes are no cards.
	mk("card10", "0x1002\n")
	mk("card9", "0x1002\n")
	mk("card2", "0x10de\n")
	mk("card3", "")
	mk("card9-DP-1", "0x1002\n")
	mk("renderD128", "0x1002\n")
	got, err := Reader{SysfsRoot: root}.Cards()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"card9", "card10"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Cards() = %v, want %v", got, want)
	}
	if _, err := (Reader{SysfsRoot: filepath.Join(root, "nowhere")}).Cards(); err == nil {
		t.Error("a sysfs root without class/drm gave no error")
	}
}

func TestReadDeviceDirectoryInPlaceOfFile(t *testing.T) {
	root := buildCard(t, map[string]string{"unique_id/x": "y"})
	d := Reader{SysfsRoot: root}.ReadDevice("card0")
	if got := errorFiles(d); !reflect.DeepEqual(got, []string{"unique_id"}) || d.UniqueID.OK || d.Down {
		t.Errorf("errors %v unique id %+v down %v", got, d.UniqueID, d.Down)
	}
}

func TestIsPCIAddress(t *testing.T) {
	for s, want := range map[string]bool{
		"0000:0c:00.0": true, "0001:c1:1f.7": true, "10000:01:00.0": true,
		"0000:0C:00.0": false, "0000:0c:00.8": false, "0c:00.0": false,
		"amdgpu_xcp_0": false, "0000:0c:00.00": false, "0000-0c:00.0": false,
	} {
		if got := isPCIAddress(s); got != want {
			t.Errorf("isPCIAddress(%q) = %v", s, got)
		}
	}
}

// TestReadDevicePCIeNAKs: pcie_replay_count, "%llu\n" (amdgpu_device.c,
// amdgpu_device_get_pcie_replay_count), is read as a count; a card
// without it (an APU) has none, and a malformed one is the file's error.
func TestReadDevicePCIeNAKs(t *testing.T) {
	d := Reader{SysfsRoot: buildCard(t, map[string]string{"pcie_replay_count": "17\n"})}.ReadDevice("card0")
	if !d.PCIeNAKs.OK || d.PCIeNAKs.Value != 17 || len(d.Errors) != 0 {
		t.Errorf("NAKs %+v, errors %v; want 17", d.PCIeNAKs, d.Errors)
	}
	if d := (Reader{SysfsRoot: buildCard(t, map[string]string{"gpu_busy_percent": "5\n"})}).ReadDevice("card0"); d.PCIeNAKs.OK {
		t.Errorf("no pcie_replay_count: NAKs %+v, want none", d.PCIeNAKs)
	}
	d = Reader{SysfsRoot: buildCard(t, map[string]string{"pcie_replay_count": "-1\n"})}.ReadDevice("card0")
	if got := errorFiles(d); d.PCIeNAKs.OK || !reflect.DeepEqual(got, []string{"pcie_replay_count"}) {
		t.Errorf("-1: NAKs %+v, errors %v; want none, the file's error", d.PCIeNAKs, got)
	}
}
