package demo

import (
	"errors"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xpu-exporter/xpu_exporter/vendors/amd"
)

func TestAMDParseErrors(t *testing.T) {
	const dev = "{vendor: amd, model: X, memory_total: 1GiB, power_limit_watts: 750"
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"unknown vendor", "devices:\n  - {vendor: intel, model: X, memory_total: 1GiB}\n", `devices[0].vendor: "intel" is not nvidia, amd or gaudi`},
		{"three partitions", "devices:\n  - " + dev + ", partitions: [{}, {}, {}]}\n", "partitions: 3; an MI300X has 2 (DPX), 4 (QPX) or 8 (CPX)"},
		{"partitions on NVIDIA", "devices:\n  - {model: X, memory_total: 1GiB, partitions: [{}, {}]}\n", "only AMD GPUs have compute partitions"},
		{"processes beside partitions", "devices:\n  - " + dev + ", partitions: [{}, {}], processes: [{pid: 1}]}\n", "a partitioned GPU runs processes in its partitions"},
		{"MIG on AMD", "devices:\n  - " + dev + ", mig: [{profile: 1g.10gb, gpu_instance: 1}]}\n", "an AMD GPU has compute partitions"},
		{"NVML bus id form", "devices:\n  - " + dev + ", pci_bus_id: \"00000000:0C:00.0\"}\n", "is not in sysfs form"},
		{"bus id not hexadecimal", "devices:\n  - " + dev + ", pci_bus_id: \"0000:0g:00.0\"}\n", `devices[0]: pci_bus_id: "0000:0g:00.0" is not in sysfs form`},
		{"bus id in upper case", "devices:\n  - " + dev + ", pci_bus_id: \"0000:0C:00.0\"}\n", `devices[0]: pci_bus_id: "0000:0C:00.0" is not in sysfs form`},
		{"unique_id not amdgpu's", "devices:\n  - " + dev + ", uuid: GPU-2b149611-0000-4000-8000-000000000000}\n", `devices[0]: uuid: "GPU-2b149611-0000-4000-8000-000000000000" is not an amdgpu unique_id (16 lower-case hexadecimal digits)`},
		{"unique_id in upper case", "devices:\n  - " + dev + ", uuid: \"3F61F84FA0000000\"}\n", `uuid: "3F61F84FA0000000" is not an amdgpu unique_id`},
		{"event on an AMD GPU", "devices:\n  - " + dev + "}\nevents:\n  - {device: 0, xid: 79}\n", "events[0].device: events are NVML's; device 0 is not an NVIDIA GPU"},
		{"partition pid twice", "devices:\n  - " + dev + ", partitions: [{processes: [{pid: 7}]}, {processes: [{pid: 7}]}]}\n", "partitions[1].processes[0].pid: 7 listed twice"},
		{"reloads on NVIDIA", "devices:\n  - {model: X, memory_total: 1GiB, metrics: {driver_reloads: 1}}\n", "metrics.driver_reloads: only an AMD GPU"},
		{"NVML fault on AMD", "devices:\n  - " + dev + ", faults: {hang: [power]}}\n", "faults: an AMD GPU takes only lost, lost_after, and unsupported and errors"},
		{"AMD fault off RAS", "devices:\n  - " + dev + ", faults: {unsupported: [power]}}\n", `faults.unsupported: "power"; an AMD GPU`},
		{"emergency limit as an error", "devices:\n  - " + dev + ", faults: {errors: [temperature_emergency]}}\n", `faults.errors: "temperature_emergency"; an AMD GPU`},
		{"two GPUs at one PCI address", "devices:\n  - " + dev + ", pci_bus_id: \"0000:0c:00.0\"}\n  - " + dev + ", pci_bus_id: \"0000:0c:00.0\"}\n", "devices[1]: pci_bus_id: 0000:0c:00.0 is already used by devices[0]"},
		// NVML prints an 8-digit domain and upper case, sysfs and hl-smi 4
		// digits and lower case: one address either way.
		{"one PCI address in two forms", "devices:\n  - {model: X, memory_total: 1GiB, pci_bus_id: \"00000000:0C:00.0\"}\n  - " + dev + ", pci_bus_id: \"0000:0c:00.0\"}\n", "devices[1]: pci_bus_id: 0000:0c:00.0 is already used by devices[0]"},
		// Device 1's default is 00000000:28:00.0 (0x18 + 1×0x10).
		{"a default PCI address taken", "devices:\n  - {model: X, memory_total: 1GiB, pci_bus_id: \"00000000:28:00.0\"}\n  - {model: X, memory_total: 1GiB}\n", "devices[1]: pci_bus_id: 00000000:28:00.0, its default, is already used by devices[0]; give it another"},
		// What the scenario's NVML and hl-smi take and amdgpu has not
		// (probe-http 13: accepted, and served by nothing).
		// 2 × 100 GiB in two partitions of one 192 GiB GPU.
		{"partitions' processes above memory_total", "devices:\n  - {vendor: amd, model: X, memory_total: 192GiB, power_limit_watts: 750, partitions: [{processes: [{pid: 1, memory_used: 100GiB}]}, {processes: [{pid: 2, memory_used: 100GiB}]}]}\n", "devices[0]: memory_total: 192 GiB, less than its processes' memory_used, up to 200 GiB together"},
		// 8 + 8 GiB in the partitions.
		{"AMD GPU below its partitions' processes", "devices:\n  - {vendor: amd, model: X, memory_total: 192GiB, power_limit_watts: 750, metrics: {memory_used: 10GiB}, partitions: [{processes: [{pid: 1, memory_used: 8GiB}]}, {processes: [{pid: 2, memory_used: 8GiB}]}]}\n", "devices[0]: metrics.memory_used: as low as 10 GiB, less than its processes' memory_used, up to 16 GiB together"},
		{"fan speed on AMD", "devices:\n  - " + dev + ", metrics: {fan_speed: 0.5}}\n", "devices[0]: metrics.fan_speed: the simulated amdgpu gives no such reading (an AMD GPU takes utilization, memory_utilization, memory_used, temperature, memory_temperature, power, energy, clock_graphics, clock_memory, pcie_generation, pcie_max_generation, pcie_width, pcie_max_width, pcie_replays, ecc_corrected, ecc_uncorrected, driver_reloads, xgmi_read, xgmi_write, pcie_naks)"},
		{"throttle reasons on AMD", "devices:\n  - " + dev + ", throttle_reasons: [sw_power_cap]}\n", "devices[0]: throttle_reasons: the simulated amdgpu reports none"},
		{"maximum clocks on AMD", "devices:\n  - " + dev + ", max_clocks_mhz: {graphics: 2100}}\n", "devices[0]: max_clocks_mhz: the simulated amdgpu serves no maximum clock"},
		{"emergency limit on NVIDIA", "devices:\n  - {model: X, memory_total: 1GiB, faults: {unsupported: [temperature_emergency]}}\n", "only an AMD GPU (vendor: amd) has hwmon emergency limits"},
		{"RAS interrupt on NVIDIA", "devices:\n  - {model: X, memory_total: 1GiB, faults: {ras_interrupt: true}}\n", "faults.ras_interrupt: only an AMD GPU (vendor: amd) has amdgpu's RAS interrupt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestAMDTakesWhatItServes checks amdKeys both ways: every other metric key
// is refused on an AMD GPU, and each of amdKeys changes the tree the
// simulated amdgpu writes (driver_reloads only restarts the RAS counts:
// TestAMDSimRASCounts).
func TestAMDTakesWhatItServes(t *testing.T) {
	const dev = "{vendor: amd, model: X, memory_total: 192GiB, power_limit_watts: 750"
	for _, k := range sortedKeys(MetricKeys) {
		if slices.Contains(amdKeys, k) {
			continue
		}
		_, err := Parse([]byte("devices:\n  - " + dev + ", metrics: {" + k + ": 1}}\n"))
		if want := "metrics." + k + ": the simulated amdgpu gives no such reading"; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want one containing %q", k, err, want)
		}
	}
	// tree is every file of the GPU's sysfs directory 10 s after boot.
	tree := func(metrics string) map[string]string {
		s, err := Parse([]byte("devices:\n  - " + dev + ", metrics: {" + metrics + "}}\n"))
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		start := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
		if err := s.newAMDSim(filepath.Join(dir, "sys"), filepath.Join(dir, "proc"), start).WriteAt(start.Add(10 * time.Second)); err != nil {
			t.Fatal(err)
		}
		files := map[string]string{}
		root := filepath.Join(dir, "sys", "devices", "pci0000:00", "0000:00:01.1", "0000:0c:00.0")
		filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
			if err == nil && e.Type().IsRegular() {
				b, _ := os.ReadFile(path)
				files[path[len(root):]] = string(b)
			}
			return err
		})
		return files
	}
	without := tree("")
	// Each value differs from what the simulation writes without the key.
	for k, v := range map[string]string{
		"utilization": "0.5", "memory_utilization": "0.9", "memory_used": "1GiB",
		"temperature": "99", "memory_temperature": "20", "power": "123", "energy": "{start: 1e6, rate: 1}",
		"clock_graphics": "1234", "clock_memory": "900", "pcie_generation": "3", "pcie_max_generation": "4",
		"pcie_width": "8", "pcie_max_width": "8", "pcie_replays": "7", "ecc_corrected": "3", "ecc_uncorrected": "2",
	} {
		if !slices.Contains(amdKeys, k) {
			t.Errorf("%s is not in amdKeys", k)
		}
		if reflect.DeepEqual(tree(k+": "+v), without) {
			t.Errorf("%s: %s changes no file", k, v)
		}
	}
}

// TestDefaultPCIAddressesDiffer parses 64 devices of each vendor with the
// PCI addresses Parse gives them: device i is on bus base + 0x10 × (i mod
// 14), device number i / 14, so that no two are one address (bus base +
// 0x10 × 14 = base + 0xe0 would leave the byte).
func TestDefaultPCIAddressesDiffer(t *testing.T) {
	for _, tc := range []struct {
		dev                     string
		first, fourteenth, last string // devices 0, 14 and 63
	}{
		// 63 = 4×14 + 7: bus 0x18 + 0x70 = 0x88, device 4.
		{"{model: X, memory_total: 1GiB}", "00000000:18:00.0", "00000000:18:01.0", "00000000:88:04.0"},
		{"{vendor: gaudi, model: HL-225, memory_total: 96GiB}", "0000:19:00.0", "0000:19:01.0", "0000:89:04.0"},
		{"{vendor: amd, model: X, memory_total: 1GiB, power_limit_watts: 750}", "0000:0c:00.0", "0000:0c:01.0", "0000:7c:04.0"},
	} {
		s, err := Parse([]byte("devices:\n" + strings.Repeat("  - "+tc.dev+"\n", 64)))
		if err != nil {
			t.Errorf("64 × %s: %v", tc.dev, err)
			continue
		}
		got := []string{s.Devices[0].PCIBusID, s.Devices[14].PCIBusID, s.Devices[63].PCIBusID}
		if want := []string{tc.first, tc.fourteenth, tc.last}; !reflect.DeepEqual(got, want) {
			t.Errorf("%s: devices 0, 14 and 63 at %q, want %q", tc.dev, got, want)
		}
	}
}

// TestGPUMetricsV1_6RoundTrip decodes the demo's table with the exporter's
// decoder: the simulated file must read back as written.
func TestGPUMetricsV1_6RoundTrip(t *testing.T) {
	b := gpuMetricsV1_6(gpuMetricsValues{junction: 61, mem: 55, power: 445, energy: 1e6, gfx: 0.5, umc: 0.17,
		pcieGen: 5, pcieWidth: 16, replays: 3, sclk: 1300, mclk: 1300, partitions: []float64{0.8, 0.2}})
	m, err := amd.DecodeGPUMetrics(b)
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		got  amd.Opt[float64]
		want float64
	}{
		"hotspot":                              {m.TemperatureHotspot, 61},
		"mem":                                  {m.TemperatureMem, 55},
		"socket power":                         {m.SocketPower, 445},
		"energy (1e6 J × 65536 units ÷ 65536)": {m.Energy, 1e6},
		"gfx activity":                         {m.GFXActivity, 0.5},
		"umc activity":                         {m.UMCActivity, 0.17},
		"link speed (320 × 0.1 GT/s)":          {m.PCIeLinkSpeed, 32},
		"gfxclk[0]":                            {m.CurrentGFXClock[0], 1300e6},
	} {
		if !c.got.OK || math.Abs(c.got.Value-c.want) > 1e-9 {
			t.Errorf("%s = %+v, want %v", name, c.got, c.want)
		}
	}
	if m.TemperatureEdge.OK || m.ThrottleStatus.OK {
		t.Errorf("fields not written must read as unavailable: edge %+v throttle %+v", m.TemperatureEdge, m.ThrottleStatus)
	}
	// DPX: two partitions of 8/2 = 4 XCCs each; the others are unset.
	if len(m.Partitions) != 2 {
		t.Fatalf("%d partitions", len(m.Partitions))
	}
	for p, want := range []float64{0.8, 0.2} {
		busy := m.Partitions[p].GFXBusy
		for x := 0; x < 8; x++ {
			if set := x < 4; busy[x].OK != set || (set && busy[x].Value != want) {
				t.Errorf("partition %d XCC %d: %+v, want %v set=%v", p, x, busy[x], want, set)
			}
		}
	}
}

// amdScenarioSim is the simulator of fixtures/scenarios/amd.yaml writing
// under a temporary directory, its clock started at a fixed moment.
func amdScenarioSim(t *testing.T) (sim *AMDSim, dir string, start time.Time) {
	t.Helper()
	s, err := Load(filepath.Join("..", "fixtures", "scenarios", "amd.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dir = t.TempDir()
	start = time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	return s.newAMDSim(filepath.Join(dir, "sys"), filepath.Join(dir, "proc"), start), dir, start
}

// TestAMDSimTreeReadsBack reads the generated tree with the exporter's
// reader: identity, partitions and a process's fdinfo client.
func TestAMDSimTreeReadsBack(t *testing.T) {
	sim, dir, start := amdScenarioSim(t)
	if err := os.MkdirAll(filepath.Join(dir, "proc", "3001"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := sim.WriteAt(start.Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	r := amd.Reader{SysfsRoot: filepath.Join(dir, "sys")}
	cards, err := r.Cards()
	if err != nil || strings.Join(cards, " ") != "card1 card2 card3 card4" {
		t.Fatalf("cards %v %v", cards, err)
	}
	var devs []amd.Device
	for _, c := range cards {
		d := r.ReadDevice(c)
		if len(d.Errors) > 0 || d.Down {
			t.Fatalf("%s: %v down %v", c, d.Errors, d.Down)
		}
		devs = append(devs, d)
	}
	if devs[0].PCIBusID != "0000:0c:00.0" || devs[0].ProductName.Value != "AMD Instinct MI300X OAM" || devs[2].ComputePartition.Value != "DPX" {
		t.Errorf("identity %q %+v %+v", devs[0].PCIBusID, devs[0].ProductName, devs[2].ComputePartition)
	}
	// GPU 2 (card3, renderD130) is in DPX: partition 0 on its own function,
	// partition 1 the first platform device, renderD132 (four GPUs take
	// 128..131).
	parts, errs := r.Partitions(devs)
	if len(errs) > 0 || len(parts) != 2 || parts[0].RenderMinor != 130 || parts[1].Name != "amdgpu_xcp_0" || parts[1].RenderMinor != 132 || parts[1].ParentPCIBusID != "0000:38:00.0" {
		t.Errorf("partitions %+v %v", parts, errs)
	}
	// PID 3001 busy 0.5 for 10 s: 5e9 ns of gfx; 96 GiB of VRAM resident
	// (and in the legacy alias), plus the evicted 512 MiB buffer in its
	// total: 96 GiB + 512 MiB.
	clients, serrs := amd.FdinfoScanner{ProcRoot: filepath.Join(dir, "proc"), Driver: "amdgpu"}.Scan([]int{3001})
	if len(serrs) > 0 || len(clients) != 1 {
		t.Fatalf("clients %+v %v", clients, serrs)
	}
	c := clients[0]
	if c.Engines["gfx"] != 5e9 || c.Memory["vram"].Resident.Value != 96<<30 || c.Memory["vram"].Legacy.Value != 96<<30 || c.Memory["vram"].Total.Value != 96<<30+512<<20 || !c.RenderMinor.OK || c.RenderMinor.Value != 128 {
		t.Errorf("client %+v", c)
	}
}

// TestAMDSimLostGPU: GPU 2 of the AMD scenario (card3, in DPX with
// amdgpu_xcp_0 on card5) lost 20 s after boot: at 10 s it is there, at 30 s
// its cards and its two KFD nodes are gone, the other GPUs' stay.
func TestAMDSimLostGPU(t *testing.T) {
	sim, dir, start := amdScenarioSim(t)
	sim.gpus[2].spec.Faults.lostAfter = 20 * time.Second
	r := amd.Reader{SysfsRoot: filepath.Join(dir, "sys")}
	nodes := filepath.Join(dir, "sys", "class/kfd/kfd/topology/nodes")
	for _, tc := range []struct {
		at    time.Duration
		cards string
		gpus  string // the reader's: amdgpu PCI cards, not partitions'
		nodes int    // the CPU's, GPUs 0, 1 and 3's, GPU 2's two partitions'
	}{
		{10 * time.Second, "card1 card2 card3 card4 card5", "card1 card2 card3 card4", 6},
		{30 * time.Second, "card1 card2 card4", "card1 card2 card4", 4},
	} {
		if err := sim.WriteAt(start.Add(tc.at)); err != nil {
			t.Fatal(err)
		}
		entries, _ := os.ReadDir(filepath.Join(dir, "sys", "class", "drm"))
		var cards []string
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), "card") {
				cards = append(cards, e.Name())
			}
		}
		if got := strings.Join(cards, " "); got != tc.cards {
			t.Errorf("at %v: class/drm cards %q, want %q", tc.at, got, tc.cards)
		}
		if n, _ := os.ReadDir(nodes); len(n) != tc.nodes {
			t.Errorf("at %v: %d KFD nodes, want %d", tc.at, len(n), tc.nodes)
		}
		if got, _ := r.Cards(); strings.Join(got, " ") != tc.gpus {
			t.Errorf("at %v: the reader lists cards %v, want %s", tc.at, got, tc.gpus)
		}
	}
}

// A mixed node: NVML sees only the NVIDIA GPU, and an event naming it by
// its place in the scenario reaches it.
func TestMixedNodeNVMLSkipsAMD(t *testing.T) {
	s, err := Parse([]byte("devices:\n  - {vendor: amd, model: AMD Instinct MI300X OAM, memory_total: 192GiB, power_limit_watts: 750}\n  - {model: NVIDIA H100 80GB HBM3, memory_total: 80GiB}\nevents:\n  - {device: 1, xid: 79}\n"))
	if err != nil {
		t.Fatal(err)
	}
	lib := s.NVML(time.Now(), time.Now)
	if n, _ := lib.DeviceGetCount(); n != 1 {
		t.Fatalf("NVML counts %d devices, want the NVIDIA one", n)
	}
	set, _ := lib.EventSetCreate()
	es := set.(*eventSet)
	if es.devices[0] != nil || es.devices[1] == nil {
		t.Errorf("event devices %v: want none for the AMD GPU at 0 and the NVIDIA GPU at 1", es.devices)
	}
}

// TestAMDSimRASCounts reads the simulated ras/umc_err_count back with the
// exporter's reader as it jumps, restarts at a driver reload, goes missing
// and cannot be queried. The corrected count rises 1 per 10 s from 2
// (start 2, rate 0.1) and the driver reloads once a minute (driver_reloads
// rate 1/60):
//
//	t      raw ce  reloads  file says
//	5 s    2.5     0.08     ce 2 (int of 2.5)
//	35 s   5.5     0.58     ce 5: jumped by 3
//	65 s   8.5     1.08     ce 0: reloaded at 60 s, counts from 8.0
//	95 s   11.5    1.58     ce 3: int of 11.5 - 8.0
//	then unsupported: no file; errors: "Query currently inaccessible".
func TestAMDSimRASCounts(t *testing.T) {
	s, err := Parse([]byte("devices:\n  - {vendor: amd, model: AMD Instinct MI300X OAM, memory_total: 192GiB, power_limit_watts: 750, metrics: {ecc_corrected: {start: 2, rate: 0.1}, driver_reloads: {start: 0, rate: 0.016666666666666666}}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	start := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	sim := s.newAMDSim(filepath.Join(dir, "sys"), filepath.Join(dir, "proc"), start)
	r := amd.Reader{SysfsRoot: filepath.Join(dir, "sys")}
	read := func(at time.Duration) amd.Device {
		t.Helper()
		if err := sim.WriteAt(start.Add(at)); err != nil {
			t.Fatal(err)
		}
		d := r.ReadDevice("card1")
		if len(d.Errors) > 0 {
			t.Fatalf("at %v: %v", at, d.Errors)
		}
		return d
	}
	for _, c := range []struct {
		at time.Duration
		ce uint64
	}{{5 * time.Second, 2}, {35 * time.Second, 5}, {65 * time.Second, 0}, {95 * time.Second, 3}} {
		umc, ok := read(c.at).RAS["umc"]
		if !ok || umc.Correctable.Value != c.ce || umc.Uncorrectable.Value != 0 || !umc.Deferred.OK {
			t.Errorf("at %v: umc %+v (present %v), want ce %d", c.at, umc, ok, c.ce)
		}
	}
	// An exporter started at 70 s on a host whose driver loaded at 0 s
	// (the reload at 60 s before it): the same file at 95 s, 3, not the
	// 11 counted since the first load (review11 R8).
	s.DriverLoaded = start
	restarted := s.newAMDSim(filepath.Join(dir, "sys"), filepath.Join(dir, "proc"), start.Add(70*time.Second))
	if err := restarted.WriteAt(start.Add(95 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if umc := r.ReadDevice("card1").RAS["umc"]; umc.Correctable.Value != 3 {
		t.Errorf("after an exporter restart at 70 s: umc %+v at 95 s, want ce 3", umc)
	}
	s.DriverLoaded = time.Time{}
	s.Devices[0].Faults.Unsupported = []string{"ecc_corrected"}
	if d := read(100 * time.Second); len(d.RAS) != 1 || d.RAS["gfx"].Correctable.Value != 0 {
		t.Errorf("umc unsupported: RAS %+v, want the gfx block alone", d.RAS)
	}
	s.Devices[0].Faults.Unsupported, s.Devices[0].Faults.Errors = nil, []string{"ecc_corrected"}
	if _, ok := read(105 * time.Second).RAS["umc"]; ok {
		t.Error("umc inaccessible, yet read")
	}
	b, err := os.ReadFile(filepath.Join(dir, "sys", "devices", "pci0000:00", "0000:00:01.1", "0000:0c:00.0", "ras", "umc_err_count"))
	if err != nil || string(b) != "Query currently inaccessible\n" {
		t.Errorf("umc file %q, %v", b, err)
	}
}

// TestAMDSimTemperatureLimits reads the simulated hwmon limits back with
// the exporter's reader: every MI300X shows temp2 (junction) crit 100 °C
// and emergency 110 °C, temp3 (mem) 95 and 105 °C (amdTempLimits); the
// second GPU is one whose kernel hides temp*_emergency.
func TestAMDSimTemperatureLimits(t *testing.T) {
	r, cards := twoMI300X(t, "{}", "{faults: {unsupported: [temperature_emergency]}}")
	c := func(v float64) amd.Opt[float64] { return amd.Opt[float64]{Value: v, OK: true} }
	for i, want := range []map[string]amd.TempLimit{
		{"junction": {Crit: c(100), Emergency: c(110)}, "mem": {Crit: c(95), Emergency: c(105)}},
		{"junction": {Crit: c(100)}, "mem": {Crit: c(95)}},
	} {
		d := r.ReadDevice(cards[i])
		if len(d.Errors) > 0 || !reflect.DeepEqual(d.TempLimits, want) {
			t.Errorf("GPU %d: limits %+v (errors %v), want %+v", i, d.TempLimits, d.Errors, want)
		}
	}
}

// TestAMDSimRASInterrupt: a fatal RAS interrupt on one GPU raises the
// driver's one flag for the node, so every GPU's pp_dpm_sclk and
// pp_dpm_mclk print "unavailable" (no clock reading, and no read error),
// and the reset of their XGMI hive leaves every RAS file "Query currently
// inaccessible" (no UMC or GFX counts); the rest of each GPU still reads. Without
// the fault, the same node has its clocks.
func TestAMDSimRASInterrupt(t *testing.T) {
	for _, tc := range []struct {
		faults      string
		interrupted bool
	}{
		{"{}", false},
		{"{ras_interrupt: true}", true},
	} {
		r, cards := twoMI300X(t, "{faults: "+tc.faults+"}", "{}")
		for i, card := range cards {
			d := r.ReadDevice(card)
			_, umc := d.RAS["umc"]
			_, gfx := d.RAS["gfx"]
			if d.SClock.OK == tc.interrupted || d.MClock.OK == tc.interrupted || umc == tc.interrupted || gfx == tc.interrupted || len(d.Errors) > 0 || !d.Power.OK {
				t.Errorf("faults %s, GPU %d: clocks %+v %+v, UMC counts %v, GFX counts %v, power %+v, errors %v; want clocks and RAS counts %v, power, no errors",
					tc.faults, i, d.SClock, d.MClock, umc, gfx, d.Power, d.Errors, !tc.interrupted)
			}
		}
	}
}

// twoMI300X writes the tree of a node of two MI300X, the devices given in
// scenario YAML, as of a second after the start, and gives a reader of it
// and its two cards.
func twoMI300X(t *testing.T, dev0, dev1 string) (amd.Reader, []string) {
	t.Helper()
	s, err := Parse([]byte("defaults: {vendor: amd, model: AMD Instinct MI300X OAM, memory_total: 192GiB, power_limit_watts: 750}\ndevices:\n  - " + dev0 + "\n  - " + dev1 + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	start := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	if err := s.newAMDSim(filepath.Join(dir, "sys"), filepath.Join(dir, "proc"), start).WriteAt(start.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	r := amd.Reader{SysfsRoot: filepath.Join(dir, "sys")}
	cards, err := r.Cards()
	if err != nil || len(cards) != 2 {
		t.Fatalf("cards %v %v", cards, err)
	}
	return r, cards
}

// TestAMDSimUpdatesReachHeldFiles: the exporter keeps a GPU's sysfs files
// open between scrapes (amd.Files), so the simulator must rewrite them in
// place; a reader holding the files sees each WriteAt.
func TestAMDSimUpdatesReachHeldFiles(t *testing.T) {
	sim, dir, start := amdScenarioSim(t)
	files := amd.NewFiles()
	defer files.Close()
	r := amd.Reader{SysfsRoot: filepath.Join(dir, "sys"), Files: files}
	energy := func(at time.Duration) float64 {
		t.Helper()
		if err := sim.WriteAt(start.Add(at)); err != nil {
			t.Fatal(err)
		}
		d := r.ReadDevice("card1")
		if len(d.Errors) > 0 || d.Down || d.Metrics == nil || !d.Metrics.Energy.OK {
			t.Fatalf("at %v: errors %v down %v", at, d.Errors, d.Down)
		}
		return d.Metrics.Energy.Value
	}
	// The energy counter runs at the mean of the power curve, 140 W plus
	// half of the 750 W limit's headroom: 140 + 0.5 × (750 - 140) = 445 W.
	// 445 W × 10 s = 4450 J.
	if got := energy(10 * time.Second); got != 4450 {
		t.Errorf("energy at 10 s = %v J, want 4450", got)
	}
	held := files.Held()
	if held == 0 {
		t.Fatal("no file held open after a read")
	}
	// 445 W × 70 s = 31150 J, read through the files held since 10 s.
	if got := energy(70 * time.Second); got != 31150 {
		t.Errorf("energy at 70 s = %v J through the held gpu_metrics, want 31150", got)
	}
	if files.Held() != held {
		t.Errorf("%d files held after the second read, %d after the first: a file was reopened", files.Held(), held)
	}
}

// TestWriteInPlaceKeepsTheInode: a reader that opened the file before the
// rewrite reads the new content, shorter than the old, with no tail left.
func TestWriteInPlaceKeepsTheInode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mem_info_vram_used")
	if err := writeInPlace(path, "1234567\n"); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := writeInPlace(path, "99\n"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, err := f.ReadAt(buf, 0)
	if got := string(buf[:n]); got != "99\n" || !errors.Is(err, io.EOF) {
		t.Errorf("held reader read %q, %v; want \"99\\n\"", got, err)
	}
}

// TestAMDSimEngineDip: a process with engine_dip, busy 0.5, has its fdinfo
// written every 10 s. Its true gfx time is 0.5 × 10 s per write: 5e9,
// 10e9, 15e9, 20e9 ns. The third write prints a millisecond below the
// second's, 10e9 − 1e6; the fourth the true 20e9 again. With
// engine_dip_to_zero the third write has no gfx line, as amdgpu prints an
// engine at 0.
func TestAMDSimEngineDip(t *testing.T) {
	const none = 0 // no line
	for option, wants := range map[string][]uint64{
		"engine_dip":         {5e9, 10e9, 10e9 - 1e6, 20e9},
		"engine_dip_to_zero": {5e9, 10e9, none, 20e9},
	} {
		t.Run(option, func(t *testing.T) {
			s, err := Parse([]byte("devices:\n  - {vendor: amd, model: AMD Instinct MI300X OAM, memory_total: 192GiB, power_limit_watts: 750, processes: [{pid: 3001, unit: a.service, memory_used: 1GiB, utilization: 0.5, " + option + ": true}]}\n"))
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			start := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
			sim := s.newAMDSim(filepath.Join(dir, "sys"), filepath.Join(dir, "proc"), start)
			scanner := amd.FdinfoScanner{ProcRoot: filepath.Join(dir, "proc"), Driver: "amdgpu"}
			for i, want := range wants {
				if err := sim.WriteAt(start.Add(time.Duration(i+1) * 10 * time.Second)); err != nil {
					t.Fatal(err)
				}
				clients, errs := scanner.Scan([]int{3001})
				if len(errs) > 0 || len(clients) != 1 {
					t.Fatalf("write %d: clients %+v %v", i+1, clients, errs)
				}
				got, printed := clients[0].Engines["gfx"]
				if got != want || printed != (want != none) {
					t.Errorf("write %d: gfx %d ns (line printed: %v), want %d", i+1, got, printed, want)
				}
			}
		})
	}
}

// With churn, an AMD process's DRM client moves to the new generation's
// PID, a new client from nothing at its first write, and none is written
// for the old PID (found by probing: the client stayed on the first PID,
// with no cgroup, so every later pod's GPU was billed to nobody).
func TestAMDSimClientsFollowChurn(t *testing.T) {
	s, err := Parse([]byte("churn_every: 1h\ndevices:\n  - {vendor: amd, model: AMD Instinct MI300X OAM, memory_total: 192GiB, power_limit_watts: 750, processes: [{pid: 3001, unit: a.service, memory_used: 1GiB, utilization: 0.5}]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	a := started(t, s)
	start := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	a.AMD.Reset(start)
	scanner := amd.FdinfoScanner{ProcRoot: a.Procfs, Driver: "amdgpu"}
	if err := a.AMD.WriteAt(start.Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	a.Churn(1, start.Add(10*time.Second))
	// 0.5 busy: the new process's client counts from its first write at
	// 20 s, so 0 then and 0.5 × 10 s = 5e9 ns at 30 s.
	for i, want := range []uint64{0, 5e9} {
		if err := a.AMD.WriteAt(start.Add(time.Duration(i+2) * 10 * time.Second)); err != nil {
			t.Fatal(err)
		}
		clients, errs := scanner.Scan([]int{3001, 103001})
		if len(errs) > 0 || len(clients) != 1 || len(clients[0].PIDs) != 1 || clients[0].PIDs[0] != 103001 {
			t.Fatalf("write %d: clients %+v %v, want PID 103001's alone", i+2, clients, errs)
		}
		if got := clients[0].Engines["gfx"]; got != want {
			t.Errorf("write %d: gfx %d ns, want %d", i+2, got, want)
		}
	}
}

// TestIdleAMDNodeHasProcfs: a simulated node with an AMD GPU and no
// process still has a procfs, which the exporter's process scan lists
// without error (it counted an error at every scrape, as for a wrong
// --path.procfs, found by probing).
func TestIdleAMDNodeHasProcfs(t *testing.T) {
	s, err := Parse([]byte("devices:\n  - {vendor: amd, model: AMD Instinct MI300X OAM, memory_total: 192GiB, power_limit_watts: 750, metrics: {utilization: 0.5}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.StartAttribution()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	holders, errs, err := amd.DRMHolders(t.Context(), a.Procfs)
	if err != nil || len(errs) != 0 || len(holders) != 0 {
		t.Errorf("scan of the idle node's procfs: %d holders, errors %v, %v; want none", len(holders), errs, err)
	}
}

// TestAMDSimEnergyFollowsPower: an idle MI300X (power limit 750 W) draws
// 140 W, so its energy counter reads 140 × 10 = 1,400 J at 10 s and 2,800 J
// at 20 s; it grew at 445 W (the middle of 140..750) whatever the load,
// billing an idle GPU's owner 3.2 times its energy (probe6-rules R6).
func TestAMDSimEnergyFollowsPower(t *testing.T) {
	s, err := Parse([]byte(`node: idle
defaults: {vendor: amd, model: AMD Instinct MI300X OAM, memory_total: 192GiB, power_limit_watts: 750, metrics: {utilization: 0}}
devices:
  - pci_bus_id: "0000:0c:00.0"
`))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	start := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	sim := s.newAMDSim(filepath.Join(dir, "sys"), filepath.Join(dir, "proc"), start)
	for _, tc := range []struct {
		at   time.Duration
		want float64
	}{{10 * time.Second, 1400}, {20 * time.Second, 2800}} {
		if err := sim.WriteAt(start.Add(tc.at)); err != nil {
			t.Fatal(err)
		}
		d := amd.Reader{SysfsRoot: filepath.Join(dir, "sys")}.ReadDevice("card1")
		if d.Metrics == nil || !d.Metrics.Energy.OK || math.Abs(d.Metrics.Energy.Value-tc.want) > 0.01 || d.Power.Value != 140 {
			t.Errorf("at %v: power %+v, metrics %+v; want 140 W and %v J", tc.at, d.Power, d.Metrics, tc.want)
		}
	}
}

// Every DRM minor links back to its device, render nodes too, as the DRM
// core registers them: GPU 0's renderD128 to its PCI device, a partition's
// render node to its amdgpu_xcp platform device (which names no PCI
// address of its own).
func TestAMDSimRenderNodesLinkTheirDevice(t *testing.T) {
	sim, dir, start := amdScenarioSim(t)
	if err := sim.WriteAt(start.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	for node, want := range map[string]string{"renderD128": "0000:0c:00.0", "renderD132": "amdgpu_xcp_0"} {
		got, err := filepath.EvalSymlinks(filepath.Join(dir, "sys", "class", "drm", node, "device"))
		if err != nil || filepath.Base(got) != want {
			t.Errorf("%s's device: %q, %v; want %s", node, got, err, want)
		}
	}
}

// TestGfxClockTable: pp_dpm_sclk as smu_v13_0_6_print_clk_levels prints
// it, the awkward forms included: a clock at its soft minimum or maximum
// gives two lines, the unmarked one ending in a space, and a locked clock
// (minimum = maximum) marks both (probe L, PL1, PL3).
func TestGfxClockTable(t *testing.T) {
	for _, tc := range []struct {
		min, max, now int
		want          string
	}{
		{500, 2100, 1300, "0: 500Mhz\n1: 1300Mhz *\n2: 2100Mhz\n"},
		{500, 2100, 2100, "0: 500Mhz \n1: 2100Mhz *\n"},
		{500, 2100, 501, "0: 500Mhz *\n1: 2100Mhz \n"}, // 1 MHz off: the same level
		{500, 2100, 502, "0: 500Mhz\n1: 502Mhz *\n2: 2100Mhz\n"},
		{1700, 1700, 1700, "0: 1700Mhz *\n1: 1700Mhz *\n"},
	} {
		if got := gfxClockTable(tc.min, tc.max, tc.now); got != tc.want {
			t.Errorf("%d..%d at %d: %q, want %q", tc.min, tc.max, tc.now, got, tc.want)
		}
	}
}

// TestDRMSize: fdinfo sizes in the unit print_size picks (probe L, PL3:
// the demo wrote every size in KiB).
func TestDRMSize(t *testing.T) {
	for _, tc := range []struct {
		bytes uint64
		want  string
	}{
		{0, "0"},
		{1000, "1000"},                      // not KiB-aligned
		{3 << 10, "3 KiB"},                  // 3,072 B
		{(1 << 20) + (1 << 10), "1025 KiB"}, // 1,049,600 B: KiB- not MiB-aligned
		{2 << 20, "2 MiB"},
		{96 << 30, "98304 MiB"}, // MiB is the largest unit: 96 GiB = 98,304 MiB
	} {
		if got := drmSize(tc.bytes); got != tc.want {
			t.Errorf("%d B: %q, want %q", tc.bytes, got, tc.want)
		}
	}
}
