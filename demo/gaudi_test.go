package demo

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xpu-exporter/xpu_exporter/vendors/gaudi"
)

func TestParseGaudiErrors(t *testing.T) {
	const g = "devices:\n  - {vendor: gaudi, model: HL-225, memory_total: 96GiB, "
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"unknown vendor", "devices:\n  - {vendor: intel, model: X, memory_total: 1GiB}\n", `devices[0].vendor: "intel" is not nvidia, amd or gaudi`},
		{"NVML-only reading", g + "metrics: {encoder_utilization: 0.5}}\n", "devices[0]: metrics.encoder_utilization: hl-smi gives no such reading"},
		{"Gaudi reading on an NVIDIA GPU", "devices:\n  - {model: X, memory_total: 1GiB, metrics: {clock_soc: 1800}}\n", "devices[0]: metrics.clock_soc: a Gaudi reading"},
		{"MIG", g + "mig: [{profile: 1g.10gb}]}\n", "devices[0]: mig: a Gaudi has no MIG"},
		{"NVIDIA clock", g + "max_clocks_mhz: {graphics: 1800}}\n", "max_clocks_mhz.graphics: unknown clock (a Gaudi's is soc)"},
		{"per-process memory", g + "processes: [{pid: 1, memory_used: 1GiB}]}\n", "processes[0]: hl-smi reports no memory or utilization per process"},
		{"NVML fault", g + "faults: {lost: true}}\n", "faults: NVML faults"},
		{"event on a Gaudi", g + "}\nevents: [{device: 0, xid: 79}]\n", "events[0].device: events are NVML's"},
		// The Intel Gaudi device plugin's ID is the serial: a pod holding
		// one the exporter's parser refuses would never be attributed.
		{"serial with a space", g + "serial: \"AN15 000001\"}\n", `devices[0]: serial: "AN15 000001" is not a board serial the Gaudi device plugin can name (letters and digits, dashes inside, at most 64)`},
		{"serial like a device name", g + "serial: hl1}\n", `devices[0]: serial: "hl1" is not a board serial`},
		{"unlisted NVIDIA GPU", "devices:\n  - {model: X, memory_total: 1GiB, faults: {unlisted: true}}\n", "devices[0]: faults: unlisted, unlisted_after and not_available are hl-smi's, for a Gaudi"},
		{"not_available on an AMD GPU", "devices:\n  - {vendor: amd, model: X, memory_total: 1GiB, faults: {not_available: [index]}}\n", "devices[0]: faults: unlisted, unlisted_after and not_available are hl-smi's"},
		{"bad unlisted_after", g + "faults: {unlisted_after: soon}}\n", `devices[0]: faults.unlisted_after: "soon" is not a positive duration`},
		{"field hl-smi is not asked for", g + "faults: {not_available: [\"memory.total [MiB]\"]}}\n", `devices[0]: faults.not_available: "memory.total [MiB]" is not an hl-smi field the exporter asks for (index, module_id, uuid`},
		{"bad hl-smi mode", g + "}\nhl_smi: {mode: explode}\n", `hl_smi: mode: "explode" is not hang, exit, garbage or cut`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Parse error = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

// The table is what hl-smi prints, values worked out by hand from the
// scenario: units as hl-smi's header names them, N/A for what is not set.
func TestHLSMITable(t *testing.T) {
	s, err := Parse([]byte(`node: t
devices:
  - {model: NVIDIA H100 80GB HBM3, memory_total: 80GiB}
  - vendor: gaudi
    model: HL-225
    memory_total: 96GiB
    power_limit_watts: 600
    metrics: {utilization: 0.874, memory_used: 1.5GiB, ecc_corrected: {start: 1, rate: 0.5}}
`))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	rows, err := csv.NewReader(bytes.NewReader(s.HLSMITable(start, start.Add(9*time.Second)))).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 {
		t.Fatalf("%d rows, want the header and the one Gaudi", len(rows))
	}
	got := map[string]string{}
	for i, h := range rows[0] {
		got[strings.TrimSpace(h)] = strings.TrimSpace(rows[1][i])
	}
	for column, want := range map[string]string{
		"index": "0", // the first Gaudi, whatever NVIDIA GPUs come before it
		"name":  "HL-225",
		// Scenario device 1: the generated Gaudi address, 0x19 + 1×0x10.
		"bus_id":              "0000:29:00.0",
		"serial":              "AN15000001",
		"utilization.aip [%]": "87", // 0.874 × 100 = 87.4, printed whole
		"memory.total [MiB]":  "98304",
		"memory.used [MiB]":   "1536",  // 1.5 GiB = 1536 MiB
		"memory.free [MiB]":   "96768", // 98304 − 1536
		"power.max [W]":       "600",
		"power.draw [W]":      notAvailable,
		// 1 + 0.5/s × 9 s = 5.5 errors; whole errors: 5.
		"ecc.errors.corrected.volatile.total": "5",
		"driver_version":                      "1.18.0-ee698fb",
	} {
		if got[column] != want {
			t.Errorf("%s = %q, want %q", column, got[column], want)
		}
	}
}

// The device faults change the table as hl-smi would print it: a device
// left out from unlisted_after on, the others keeping their index (the
// driver's), and the not_available fields printed as N/A in its row alone.
func TestHLSMITableFaults(t *testing.T) {
	s, err := Parse([]byte(`devices:
  - {vendor: gaudi, model: HL-225, memory_total: 96GiB}
  - {vendor: gaudi, model: HL-225, memory_total: 96GiB, faults: {unlisted_after: 10s}}
  - {vendor: gaudi, model: HL-225, memory_total: 96GiB, faults: {not_available: [index, bus_id, memory.total]}}
  - {vendor: gaudi, model: HL-225, memory_total: 96GiB, faults: {unlisted: true}}
`))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		at   time.Duration
		want [][3]string // index, bus_id, memory.total of each row
	}{
		// Bus ids are the generated ones, 0x19 + index×0x10; 96 GiB is
		// 98304 MiB.
		{9 * time.Second, [][3]string{{"0", "0000:19:00.0", "98304"}, {"1", "0000:29:00.0", "98304"}, {"N/A", "N/A", "N/A"}}},
		{10 * time.Second, [][3]string{{"0", "0000:19:00.0", "98304"}, {"N/A", "N/A", "N/A"}}},
	} {
		rows, err := csv.NewReader(bytes.NewReader(s.HLSMITable(start, start.Add(tc.at)))).ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		var got [][3]string
		for _, row := range rows[1:] {
			got = append(got, [3]string{strings.TrimSpace(row[0]), strings.TrimSpace(row[4]), strings.TrimSpace(row[8])})
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("at %v: rows (index, bus_id, memory.total) %q, want %q", tc.at, got, tc.want)
		}
	}
}

func TestGaudiScenariosParse(t *testing.T) {
	for _, name := range []string{"gaudi", "mixed"} {
		s, err := Load(filepath.Join("..", "fixtures", "scenarios", name+".yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if len(s.gaudiDevices()) == 0 {
			t.Errorf("%s has no Gaudi device", name)
		}
	}
}

func TestServeHLSMI(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const scenario = "devices:\n  - {vendor: gaudi, model: HL-225, memory_total: 96GiB, metrics: {temperature: 41}}\n"
	spec := func(yaml string) string {
		return write("spec.json", `{"scenario": "`+write("s.yaml", yaml)+`", "start": "2026-01-01T00:00:00Z"}`)
	}
	args := []string{"--query-aip=index,temperature.aip,power.draw", "--format=csv,nounits"}

	var stdout, stderr bytes.Buffer
	if code := ServeHLSMI(spec(scenario), args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	// The asked columns in the asked order, header units kept; the power
	// the scenario leaves out is N/A.
	if want := "index, temperature.aip [C], power.draw [W]\n0, 41, N/A\n"; stdout.String() != want {
		t.Errorf("printed %q, want %q", stdout.String(), want)
	}

	stdout.Reset()
	stderr.Reset()
	code := ServeHLSMI(spec(scenario+"hl_smi: {mode: exit, stderr: \"habanalabs: device is in reset\"}\n"), args, &stdout, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "device is in reset") || stdout.Len() != 0 {
		t.Errorf("exit mode: code %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}

	// Cut: the table without its line end and the last cell's last
	// character, "N/A" becoming "N/", and a status that says nothing.
	stdout.Reset()
	stderr.Reset()
	if code := ServeHLSMI(spec(scenario+"hl_smi: {mode: cut}\n"), args, &stdout, &stderr); code != 0 {
		t.Errorf("cut mode exits %d, want 0: %s", code, stderr.String())
	}
	if want := "index, temperature.aip [C], power.draw [W]\n0, 41, N/"; stdout.String() != want {
		t.Errorf("cut mode printed %q, want %q", stdout.String(), want)
	}

	if code := ServeHLSMI(filepath.Join(dir, "missing.json"), args, &stdout, &stderr); code != 1 {
		t.Errorf("a missing spec exits %d, want 1", code)
	}
}

// The demo's procfs and sysfs are read by the production process scanner:
// each process is found on the device the scenario puts it on, by device
// number through sysfs, and a process on no Gaudi is not.
func TestDemoGaudiProcessesFoundByTheScanner(t *testing.T) {
	s, err := Load(filepath.Join("..", "fixtures", "scenarios", "mixed.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	sim := started(t, s)
	if sim.Sysfs == "" || sim.HLSMISpec == "" {
		t.Fatalf("no Gaudi simulation: sysfs %q, spec %q", sim.Sysfs, sim.HLSMISpec)
	}
	scanner := &gaudi.ProcessScanner{ProcRoot: sim.Procfs, SysRoot: sim.Sysfs}
	uses, unreadable, err := scanner.Scan(context.Background())
	if err != nil || unreadable != 0 {
		t.Fatalf("scan: %v, %d unreadable", err, unreadable)
	}
	got := map[int]string{}
	for _, u := range uses {
		got[u.PID] = u.BusID
	}
	// mixed.yaml: the Gaudi devices are scenario devices 2 and 3, at the
	// generated addresses 0x19 + 2×0x10 = 0x39 and 0x19 + 3×0x10 = 0x49;
	// PIDs 4001 and 4002 run on NVIDIA GPUs, which NVML lists instead.
	want := map[int]string{4101: "0000:39:00.0", 4102: "0000:49:00.0"}
	if len(got) != len(want) || got[4101] != want[4101] || got[4102] != want[4102] {
		t.Errorf("scanner found %v, want %v", got, want)
	}
}

// TestHLSMISpecCarriesTheDriverLoad: the demo's hl-smi runs in a process of
// its own, from its spec file: the spec carries Scenario.DriverLoaded, from
// which its counters count (TestCountersCountFromTheDriverLoad).
func TestHLSMISpecCarriesTheDriverLoad(t *testing.T) {
	s, err := Parse([]byte(`node: t
devices:
  - {vendor: gaudi, model: HL-225, memory_total: 96GiB, metrics: {ecc_corrected: {start: 1, rate: 0.5}}}
`))
	if err != nil {
		t.Fatal(err)
	}
	loaded := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s.DriverLoaded = loaded
	_, spec, err := s.writeGaudi(t.TempDir(), t.TempDir(), loaded.Add(9*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(spec)
	if err != nil {
		t.Fatal(err)
	}
	var sp hlsmiSpec
	if err := json.Unmarshal(b, &sp); err != nil || !sp.Loaded.Equal(loaded) {
		t.Errorf("hl-smi spec %s: load time %v (%v), want %v", b, sp.Loaded, err, loaded)
	}
}
