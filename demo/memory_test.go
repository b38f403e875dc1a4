package demo

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// TestShippedScenariosHoldTheirProcessesMemory walks every shipped scenario
// (the embedded default and fixtures/scenarios) over a simulated hour, as
// the simulated NVML, amdgpu and hl-smi serve it, and checks every 10 s what
// a real driver keeps true: a device's used memory holds all of its
// processes' (nvml.h, nvmlMemory_v2_t: "Allocated device memory"), a GPU in
// MIG mode's all of its instances', and none uses more than it has
// (probe-http 11: GPU 3 of the default demo served 63 GiB used beside its
// process's 66 GiB).
func TestShippedScenariosHoldTheirProcessesMemory(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "fixtures", "scenarios", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios: %v", err)
	}
	start := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	for _, file := range append(files, "default.yaml") {
		t.Run(filepath.Base(file), func(t *testing.T) {
			s, err := Load(file)
			if err != nil {
				t.Fatal(err)
			}
			// Faults decide whether memory is read, not what it is.
			for i := range s.Devices {
				s.Devices[i].Faults, s.Devices[i].callLatency = Faults{}, 0
			}
			now := start
			lib := s.NVML(start, func() time.Time { return now })
			var amd *AMDSim
			dir := t.TempDir()
			if s.HasAMD() {
				amd = s.newAMDSim(filepath.Join(dir, "sys"), filepath.Join(dir, "proc"), start)
			}
			samples := 0
			for ; !now.After(start.Add(time.Hour)); now = now.Add(10 * time.Second) {
				at := now.Sub(start)
				samples += checkNVMLMemory(t, lib, at)
				if amd != nil {
					if err := amd.WriteAt(now); err != nil {
						t.Fatal(err)
					}
					samples += checkAMDMemory(t, s, dir, at)
				}
				samples += checkHLSMIMemory(t, s.HLSMITable(start, now), at)
				if t.Failed() {
					return // the first instant tells
				}
			}
			if s.NoDriver || len(s.Devices) == 0 {
				return
			}
			// Each scenario serves some device's memory at 361 instants.
			if samples < 361 {
				t.Errorf("%d memory readings checked in an hour", samples)
			}
		})
	}
}

// checkNVMLMemory checks every GPU and MIG device of lib that serves its
// memory, and returns how many it checked.
func checkNVMLMemory(t *testing.T, lib nvml.Interface, at time.Duration) int {
	t.Helper()
	checked := 0
	n, _ := lib.DeviceGetCount()
	for i := range n {
		gpu, _ := lib.DeviceGetHandleByIndex(i)
		used, ok := checkDeviceMemory(t, fmt.Sprintf("at %v: GPU %d", at, i), gpu)
		if ok {
			checked++
		}
		if mode, _, _ := gpu.GetMigMode(); mode != nvml.DEVICE_MIG_ENABLE {
			continue
		}
		instances := uint64(0)
		for j := 0; ; j++ {
			mig, ret := gpu.GetMigDeviceHandleByIndex(j)
			if ret != nvml.SUCCESS {
				break
			}
			if u, ok := checkDeviceMemory(t, fmt.Sprintf("at %v: GPU %d MIG device %d", at, i, j), mig); ok {
				instances += u
				checked++
			}
		}
		if ok && used < instances {
			t.Errorf("at %v: GPU %d: %d bytes used, less than its MIG devices' %d", at, i, used, instances)
		}
	}
	return checked
}

// checkDeviceMemory checks that d's used memory is at least its processes'
// (each PID once, in whichever lists it is) and, with the reserve, at most
// its total. It returns the used memory, and false when d serves none.
func checkDeviceMemory(t *testing.T, what string, d nvml.Device) (uint64, bool) {
	t.Helper()
	m, ret := d.GetMemoryInfo_v2()
	if ret != nvml.SUCCESS {
		return 0, false
	}
	held, seen := uint64(0), map[uint32]bool{}
	for _, list := range []func() ([]nvml.ProcessInfo, nvml.Return){d.GetComputeRunningProcesses, d.GetMPSComputeRunningProcesses, d.GetGraphicsRunningProcesses} {
		procs, _ := list()
		for _, p := range procs {
			if !seen[p.Pid] && p.UsedGpuMemory != math.MaxUint64 { // NVML_VALUE_NOT_AVAILABLE
				held += p.UsedGpuMemory
			}
			seen[p.Pid] = true
		}
	}
	if m.Used < held {
		t.Errorf("%s: %d bytes used, less than its processes' %d", what, m.Used, held)
	}
	if m.Used+m.Reserved > m.Total {
		t.Errorf("%s: %d bytes used and %d reserved, more than its %d", what, m.Used, m.Reserved, m.Total)
	}
	return m.Used, true
}

// checkAMDMemory checks each AMD GPU's mem_info_vram_used against its total
// and its processes' resident VRAM in their fdinfo.
func checkAMDMemory(t *testing.T, s *Scenario, dir string, at time.Duration) int {
	t.Helper()
	held := map[string]uint64{} // by drm-pdev
	clients, _ := filepath.Glob(filepath.Join(dir, "proc", "*", "fdinfo", "*"))
	for _, c := range clients {
		f, err := os.Open(c)
		if err != nil {
			t.Fatal(err)
		}
		var pdev string
		var kib uint64
		for sc := bufio.NewScanner(f); sc.Scan(); {
			k, v, _ := strings.Cut(sc.Text(), ":\t")
			switch k {
			case "drm-pdev":
				pdev = v
			case "drm-resident-vram":
				kib, _ = strconv.ParseUint(strings.TrimSuffix(v, " KiB"), 10, 64)
			}
		}
		f.Close()
		held[pdev] += kib << 10
	}
	checked := 0
	for _, d := range s.Devices {
		if !d.isAMD() {
			continue
		}
		read := func(name string) uint64 {
			b, err := os.ReadFile(filepath.Join(dir, "sys", "devices", "pci0000:00", "0000:00:01.1", d.PCIBusID, name))
			if err != nil {
				t.Fatal(err)
			}
			v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		used, total := read("mem_info_vram_used"), read("mem_info_vram_total")
		if used < held[d.PCIBusID] || used > total {
			t.Errorf("at %v: AMD GPU %s: %d bytes used of %d, its processes %d", at, d.PCIBusID, used, total, held[d.PCIBusID])
		}
		checked++
	}
	return checked
}

// checkHLSMIMemory checks each Gaudi's memory.used against memory.total in
// the demo's hl-smi table (hl-smi gives no memory per process).
func checkHLSMIMemory(t *testing.T, table []byte, at time.Duration) int {
	t.Helper()
	rows := strings.Split(strings.TrimSpace(string(table)), "\n")
	header := strings.Split(rows[0], ", ")
	usedCol, totalCol := slices.Index(header, "memory.used [MiB]"), slices.Index(header, "memory.total [MiB]")
	checked := 0
	for _, row := range rows[1:] {
		f := strings.Split(row, ", ")
		used, err1 := strconv.ParseUint(f[usedCol], 10, 64)
		total, err2 := strconv.ParseUint(f[totalCol], 10, 64)
		if err1 != nil || err2 != nil {
			continue // N/A: the scenario leaves it out
		}
		if used > total {
			t.Errorf("at %v: Gaudi %s: %d MiB used of %d", at, f[0], used, total)
		}
		checked++
	}
	return checked
}

// TestMIGMemoryDefaultsToItsProcesses: a MIG instance without memory_used
// uses what its processes hold; it served 0 beside their 5 to 9 GiB.
func TestMIGMemoryDefaultsToItsProcesses(t *testing.T) {
	s, err := Parse([]byte(`devices:
  - model: X
    memory_total: 80GiB
    mig:
      - {profile: 3g.40gb, gpu_instance: 1, processes: [{pid: 1, memory_used: 5GiB}, {pid: 2, memory_used: 2GiB, lists: [compute, graphics]}, {pid: 3}]}
      - {profile: 3g.40gb, gpu_instance: 2}
`))
	if err != nil {
		t.Fatal(err)
	}
	gpu, _ := s.NVML(time.Now(), time.Now).DeviceGetHandleByIndex(0)
	for j, want := range []uint64{
		7 << 30, // 5 + 2 GiB: pid 2 is one process in two lists, pid 3's memory unknown to NVML
		0,       // no process
	} {
		mig, _ := gpu.GetMigDeviceHandleByIndex(j)
		m, ret := mig.GetMemoryInfo_v2()
		if ret != nvml.SUCCESS || m.Used != want || m.Total != 40<<30 || m.Free != m.Total-want {
			t.Errorf("MIG device %d: %+v %v, want %d of %d bytes used", j, m, ret, want, uint64(40<<30))
		}
	}
}
