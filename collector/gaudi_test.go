package collector

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/alecthomas/kingpin/v2"

	"github.com/xpu-exporter/xpu_exporter/demo"
	"github.com/xpu-exporter/xpu_exporter/demo/hlsmisim"
	"github.com/xpu-exporter/xpu_exporter/internal/pciaddr"
	"github.com/xpu-exporter/xpu_exporter/internal/syncbuf"
	"github.com/xpu-exporter/xpu_exporter/vendors/gaudi"
)

// TestMain lets this test binary be the hl-smi stand-in (demo/hlsmisim):
// the Gaudi collector runs it like a real hl-smi, from the process boundary
// on, and no binary has to be built; and a benchmark's fake kubelet
// (bench_kubelet_test.go). The collectors' flags take their
// defaults, as in the exporter.
func TestMain(m *testing.M) {
	if os.Getenv("HLSMI_FAKE_TABLE") != "" || os.Getenv("HLSMI_FAKE_MODE") != "" {
		os.Exit(hlsmisim.Main(os.Args[1:]))
	}
	if dir := os.Getenv(fakeKubeletDirEnv); dir != "" {
		os.Exit(serveFakeKubelet(dir, os.Getenv(fakeKubeletScenarioEnv)))
	}
	if _, err := kingpin.CommandLine.Parse(nil); err != nil {
		fmt.Fprintln(os.Stderr, "flag defaults:", err)
		os.Exit(2)
	}
	os.Exit(m.Run())
}

// selfPath is this test binary, run as hl-smi.
func selfPath(t testing.TB) string {
	t.Helper()
	p, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// gaudiTable writes the scenario's hl-smi table at testNow and points the
// stand-in at it.
func gaudiTable(t testing.TB, s *demo.Scenario) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "table.csv")
	if err := os.WriteFile(path, s.HLSMITable(testStart, testNow), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HLSMI_FAKE_TABLE", path)
	return path
}

// gaudiTableWith is gaudiTable with the named cells of device row set to
// values (setCells).
func gaudiTableWith(t *testing.T, s *demo.Scenario, row int, cells map[string]string) {
	t.Helper()
	path := gaudiTable(t, s)
	if err := os.WriteFile(path, []byte(setCells(t, string(s.HLSMITable(testStart, testNow)), row, cells)), 0o644); err != nil {
		t.Fatal(err)
	}
}

func scrapeGaudiScenario(t *testing.T) string {
	t.Helper()
	s := loadScenario(t, "gaudi")
	gaudiTable(t, s)
	e := newAttributedExporterFor(t, s, func(c *Config) { c.HLSMIPath = selfPath(t) })
	return scrapeText(t, e, 10*time.Second)
}

func TestGaudiGolden(t *testing.T) {
	golden(t, "gaudi", scrapeGaudiScenario(t))
}

// Every expected value below is worked out by hand from
// fixtures/scenarios/gaudi.yaml, the arithmetic in a comment. testNow is
// 5400 s after the node booted.
func TestGaudiOracles(t *testing.T) {
	out := scrapeGaudiScenario(t)
	check, absent := oracleChecks(out)
	const mib = 1 << 20

	t.Run("readings in base units", func(t *testing.T) {
		gpu := `gpu="1"`
		// hl-smi prints utilization.aip in %: 0.87 → "87" → 87/100.
		check(t, "xpu_utilization_ratio", 0.87, gpu, `vendor="habana"`)
		// memory.used in MiB: 64 GiB = 65536 MiB → 65536 × 1048576 B.
		check(t, "xpu_memory_used_bytes", 65536*mib, gpu)
		// memory.total: 96 GiB = 98304 MiB → 98304 × 1048576 = 103079215104 B.
		check(t, "xpu_memory_total_bytes", 103079215104, gpu)
		check(t, "xpu_power_watts", 431, gpu)
		check(t, "xpu_power_limit_watts", 600, gpu)
		// clocks.current.soc 1800 MHz = 1.8e9 Hz.
		check(t, "xpu_clock_hertz", 1.8e9, gpu, `clock="soc"`)
		check(t, "xpu_temperature_celsius", 57, gpu, `sensor="gpu"`)
		check(t, "xpu_pcie_link_generation", 4, gpu)
		check(t, "xpu_pcie_link_width", 16, gpu)
	})
	t.Run("a counter read at the scrape", func(t *testing.T) {
		// ECC corrected on device 3: 3 + 0.001/s × 5400 s = 8.4 errors;
		// hl-smi counts whole errors: 8.
		check(t, "xpu_ecc_errors_total", 8, `gpu="3"`, `type="corrected"`, `scope="volatile"`)
		check(t, "xpu_gaudi_dram_ecc_errors_total", 8, `gpu="3"`, `type="corrected"`, `scope="volatile"`)
		check(t, "xpu_ecc_errors_total", 0, `gpu="3"`, `type="uncorrected"`, `scope="aggregate"`)
	})
	t.Run("a reading hl-smi prints as N/A is omitted", func(t *testing.T) {
		// Device 7 has no clock_soc in the scenario: hl-smi prints N/A.
		absent(t, "xpu_clock_hertz", `gpu="7"`)
		check(t, "xpu_clock_max_hertz", 1.8e9, `gpu="7"`, `clock="soc"`)
	})
	t.Run("a device with one owner", func(t *testing.T) {
		pod := `pod="tgi-gaudi-6b8d7f9c5-m2p7x"`
		// The device plugin's serial AN15000001 names device 1, whose series
		// carry the pod: it is the only owner.
		check(t, "xpu_utilization_ratio", 0.87, `gpu="1"`, pod)
		check(t, "xpu_workload_allocated_devices", 1, `gpu="1"`, pod)
		// A sole owner has the device's utilization: 0.87.
		check(t, "xpu_workload_utilization_ratio", 0.87, `gpu="1"`, pod)
		// hl-smi gives no memory per process, so the owner's memory (its
		// processes' memory) is unknown, not 0.
		absent(t, "xpu_workload_memory_used_bytes", `gpu="1"`)
	})
	t.Run("a shared device has no per-owner split", func(t *testing.T) {
		gpu := `gpu="6"`
		// Two host services hold device 6 open: two owners, each half of
		// the device (1/2 = 0.5), and device series without owner labels.
		check(t, "xpu_device_owners", 2, gpu)
		check(t, "xpu_workload_allocated_devices", 0.5, gpu, `unit="hl-qual.service"`)
		check(t, "xpu_workload_allocated_devices", 0.5, gpu, `unit="habana-perf.service"`)
		check(t, "xpu_utilization_ratio", 0.4, gpu)
		absent(t, "xpu_utilization_ratio", gpu, `unit=`)
		// Neither utilization nor memory is known per process on a Gaudi:
		// the split is left out rather than guessed.
		absent(t, "xpu_workload_utilization_ratio", gpu)
		absent(t, "xpu_workload_memory_used_bytes", gpu)
	})
	t.Run("every device, no failure", func(t *testing.T) {
		for family, want := range map[string]int{
			"xpu_device_info":                8,
			"xpu_device_up":                  8,
			"xpu_hlsmi_errors_total":         12, // every reason but procfs, the scan's
			"xpu_gaudi_processes_unreadable": 1,
		} {
			if got := seriesCount(out, family); got != want {
				t.Errorf("%s: %d series, want %d", family, got, want)
			}
		}
		check(t, "xpu_scrape_collector_success", 1, `collector="gaudi"`)
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "xpu_hlsmi_errors_total{") && !strings.HasSuffix(line, " 0") {
				t.Errorf("hl-smi failed: %s", line)
			}
		}
	})
}

// TestGaudiFailedScanLeavesOwnerMemoryOut: with no process seen because
// the procfs scan failed, an owner's memory is unknown, not the 0 bytes of
// an owner without processes.
func TestGaudiFailedScanLeavesOwnerMemoryOut(t *testing.T) {
	s := loadScenario(t, "gaudi")
	gaudiTable(t, s)
	missing := filepath.Join(t.TempDir(), "no-proc")
	e := newAttributedExporterFor(t, s, func(c *Config) { c.HLSMIPath, c.Procfs = selfPath(t), missing })
	out := scrapeText(t, e, 10*time.Second)
	check, absent := oracleChecks(out)
	check(t, "xpu_gaudi_process_scan_errors_total", 1, `reason="procfs"`)
	// Device 1 is still the pod's (kubelet), with the device's 0.87.
	pod := `pod="tgi-gaudi-6b8d7f9c5-m2p7x"`
	check(t, "xpu_workload_utilization_ratio", 0.87, `gpu="1"`, pod)
	absent(t, "xpu_workload_memory_used_bytes", `vendor="habana"`)
}

// TestGaudiFailedScanLoggedOnChange: a procfs that cannot be scanned is
// named in one warning, not one per scrape, and its return in one line.
func TestGaudiFailedScanLoggedOnChange(t *testing.T) {
	s := loadScenario(t, "gaudi")
	gaudiTable(t, s)
	missing := filepath.Join(t.TempDir(), "no-proc")
	var logs syncbuf.Buffer
	e := newAttributedExporterFor(t, s, func(c *Config) {
		c.HLSMIPath, c.Procfs = selfPath(t), missing
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	scrapeText(t, e, 10*time.Second)
	scrapeText(t, e, 10*time.Second)
	if err := os.Mkdir(missing, 0o755); err != nil {
		t.Fatal(err)
	}
	scrapeText(t, e, 10*time.Second)
	scrapeText(t, e, 10*time.Second)
	out := logs.String()
	if n := strings.Count(out, "cannot scan processes for the Gaudi device nodes"); n != 1 {
		t.Errorf("%d warnings, want 1:\n%s", n, out)
	}
	if n := strings.Count(out, "Gaudi process scan works again"); n != 1 {
		t.Errorf("%d recovery lines, want 1:\n%s", n, out)
	}
}

func newGaudiExporter(t *testing.T, hlsmi string, logs *syncbuf.Buffer) *Exporter {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(logs, nil))
	e := newExporterOf(t, Config{Logger: logger, HLSMIPath: hlsmi, Procfs: t.TempDir(), Sysfs: t.TempDir(), Now: func() time.Time { return testNow }}, "gaudi")
	return e
}

// gaudiExporterThen is a Gaudi exporter whose hl-smi answers with table
// first for one scrape, then with table then; it returns the first table's
// file, to go back to.
func gaudiExporterThen(t *testing.T, first, then string) (*Exporter, *syncbuf.Buffer, string) {
	t.Helper()
	dir := t.TempDir()
	firstPath, thenPath := filepath.Join(dir, "first.csv"), filepath.Join(dir, "then.csv")
	for path, content := range map[string]string{firstPath: first, thenPath: then} {
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("HLSMI_FAKE_TABLE", firstPath)
	logs := &syncbuf.Buffer{}
	e := newGaudiExporter(t, selfPath(t), logs)
	scrapeText(t, e, 5*time.Second)
	t.Setenv("HLSMI_FAKE_TABLE", thenPath)
	return e, logs, firstPath
}

func TestGaudiNoHLSMI(t *testing.T) {
	logs := &syncbuf.Buffer{}
	e := newGaudiExporter(t, filepath.Join(t.TempDir(), "hl-smi"), logs)
	var out string
	for range 3 {
		out = scrapeText(t, e, 5*time.Second)
	}
	if n := seriesCount(out, "xpu_device_up"); n != 0 {
		t.Errorf("%d devices without hl-smi, want none", n)
	}
	// Three scrapes, three runs that found no binary.
	if got := sample(t, out, "xpu_hlsmi_errors_total", `reason="missing_binary"`); got != 3 {
		t.Errorf("missing_binary counted %v times, want 3", got)
	}
	// No binary and never a Gaudi device: a node without Gaudi, where a
	// failing collector would be noise on every NVIDIA node.
	if !strings.Contains(out, `xpu_scrape_collector_success{collector="gaudi"} 1`) {
		t.Error("a node without hl-smi and without Gaudi devices reports the collector failing")
	}
	if n := strings.Count(logs.String(), "found no hl-smi"); n != 1 {
		t.Errorf("%d log lines about the missing hl-smi over three scrapes, want 1:\n%s", n, logs.String())
	}
}

// After a good run, each failing run reports every device known so far
// down, counts its reason, and logs once per change of reason.
func TestGaudiFailuresReportKnownDevicesDown(t *testing.T) {
	s := loadScenario(t, "gaudi")
	table := gaudiTable(t, s)
	logs := &syncbuf.Buffer{}
	e := newGaudiExporter(t, selfPath(t), logs)
	out := scrapeText(t, e, 5*time.Second)
	if got := seriesCount(out, "xpu_utilization_ratio"); got != 8 {
		t.Fatalf("good run: %d devices with utilization, want 8", got)
	}
	notCSV := filepath.Join(t.TempDir(), "garbage")
	if err := os.WriteFile(notCSV, []byte("hl-smi: \"unterminated\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// hl-smi's answer cut inside its last cell, without its line end
	// (probe A PA3): device 7's pcie.link.width.max "16" became "1".
	query := exec.Command(selfPath(t), (&gaudi.Runner{}).Args()...)
	query.Env = append(os.Environ(), "HLSMI_FAKE_TABLE="+table)
	answer, err := query.Output()
	if err != nil {
		t.Fatal(err)
	}
	cut := filepath.Join(t.TempDir(), "cut")
	if err := os.WriteFile(cut, answer[:len(answer)-2], 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, mode, table, reason string
		timeout                   time.Duration
	}{
		// A hung hl-smi is killed at the deadline: the scrape still lists
		// all eight devices, down.
		{"hang", "hang", table, "timeout", 1500 * time.Millisecond},
		{"not UTF-8", "nonutf8", table, "non_utf8", 5 * time.Second},
		{"not CSV", "raw", notCSV, "malformed", 5 * time.Second},
		{"exit status", "exit", table, "exit_status", 5 * time.Second},
		{"cut short", "raw", cut, "malformed", 5 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("HLSMI_FAKE_MODE", tt.mode)
			t.Setenv("HLSMI_FAKE_TABLE", tt.table)
			before := strings.Count(logs.String(), fmt.Sprintf("reason=%s", tt.reason))
			counted := sample(t, out, "xpu_hlsmi_errors_total", `reason="`+tt.reason+`"`)
			start := time.Now()
			for range 2 {
				out = scrapeText(t, e, tt.timeout)
				// A killed run is reaped in the background: wait for it,
				// or the next run would be refused as busy (a fixed 200 ms
				// was too short on a loaded machine).
				runner := e.collectors["gaudi"].(*gaudiCollector).runner
				for deadline := time.Now().Add(10 * time.Second); runner.Busy() && time.Now().Before(deadline); {
					time.Sleep(10 * time.Millisecond)
				}
			}
			if took := time.Since(start); took > 2*tt.timeout+10*time.Second {
				t.Errorf("two scrapes took %v", took)
			}
			if got := seriesCount(out, "xpu_device_up"); got != 8 {
				t.Errorf("%d devices listed, want all 8", got)
			}
			if got := strings.Count(out, `vendor="habana"} 0`); got < 8 {
				t.Errorf("want 8 devices down, output:\n%s", out)
			}
			if got := seriesCount(out, "xpu_utilization_ratio"); got != 0 {
				t.Errorf("%d readings served from a failed run, want none", got)
			}
			if got := sample(t, out, "xpu_hlsmi_errors_total", `reason="`+tt.reason+`"`) - counted; got != 2 {
				t.Errorf("%s counted %v times over two scrapes, want 2", tt.reason, got)
			}
			if n := strings.Count(logs.String(), fmt.Sprintf("reason=%s", tt.reason)) - before; n != 1 {
				t.Errorf("%d log lines for two failures of one reason, want 1:\n%s", n, logs.String())
			}
		})
	}
	// hl-smi removed from a node whose devices it listed: failing, not a
	// node without Gaudi.
	t.Run("binary gone", func(t *testing.T) {
		t.Setenv("HLSMI_FAKE_MODE", "")
		runner := e.collectors["gaudi"].(*gaudiCollector).runner
		path := runner.Path
		runner.Path = filepath.Join(t.TempDir(), "hl-smi")
		defer func() { runner.Path = path }()
		for range 2 {
			out = scrapeText(t, e, 5*time.Second)
		}
		if got := strings.Count(out, `vendor="habana"} 0`); got < 8 {
			t.Errorf("want 8 devices down, output:\n%s", out)
		}
		if !strings.Contains(out, `xpu_scrape_collector_success{collector="gaudi"} 0`) {
			t.Error("the collector does not fail")
		}
		if n := strings.Count(logs.String(), "level=WARN msg=\"hl-smi failed; Gaudi devices known so far are reported down\" reason=missing_binary"); n != 1 || strings.Contains(logs.String(), "found no hl-smi") {
			t.Errorf("%d warnings for the missing hl-smi, want 1 (and no \"found no hl-smi\"):\n%s", n, logs.String())
		}
	})
	t.Run("answers again", func(t *testing.T) {
		t.Setenv("HLSMI_FAKE_MODE", "")
		out := scrapeText(t, e, 5*time.Second)
		if got := seriesCount(out, "xpu_utilization_ratio"); got != 8 {
			t.Errorf("%d devices with utilization after recovery, want 8", got)
		}
		if n := strings.Count(logs.String(), "reading devices through hl-smi"); n != 2 {
			t.Errorf("%d lines saying hl-smi answers (start and recovery), want 2", n)
		}
	})
}

// On a mixed node each device plugin's ID names its own vendor's device:
// the NVIDIA index "1" is the second H100, Gaudi's "hl1" the second HL-225,
// and a Gaudi serial its device.
func TestMixedNodeOwners(t *testing.T) {
	s := loadScenario(t, "mixed")
	gaudiTable(t, s)
	e := newAttributedExporterFor(t, s, func(c *Config) { c.HLSMIPath = selfPath(t) })
	out := scrapeText(t, e, 10*time.Second)
	for _, tt := range []struct {
		vendor, gpu, pod string
		util             float64
	}{
		{"nvidia", "0", "nv-uuid", 0.5},
		{"nvidia", "1", "nv-index", 0.5},
		// hl-smi prints 75 % and 25 %: 0.75 and 0.25.
		{"habana", "0", "gaudi-serial", 0.75},
		{"habana", "1", "gaudi-hl", 0.25},
	} {
		got := sample(t, out, "xpu_utilization_ratio", `vendor="`+tt.vendor+`"`, `gpu="`+tt.gpu+`"`, `pod="`+tt.pod+`"`)
		if got != tt.util {
			t.Errorf("%s %s: utilization %v, want %v", tt.vendor, tt.gpu, got, tt.util)
		}
	}
	if n := seriesCount(out, "xpu_device_up"); n != 4 {
		t.Errorf("%d devices, want 4", n)
	}
	for _, c := range []string{"nvidia", "gaudi"} {
		if !strings.Contains(out, `xpu_scrape_collector_success{collector="`+c+`"} 1`) {
			t.Errorf("collector %s did not succeed", c)
		}
	}
}

// TestGRESIgnoresHLSMIHealth: on a node with NVIDIA GPUs and Gaudi
// devices Slurm's GRES indices name no device (gresIndices), whether hl-smi
// answers, has not answered yet or fails again. Job 300's GRES index 0 made
// it the owner of NVIDIA GPU 0 while hl-smi failed at start, and not once
// hl-smi answered: the job's GPU changed with another vendor's tool (found
// by probing). The job runs no process; it holds some device of the node,
// which one unknown, so every device's owners are unknown throughout (not
// 0, which read as free: found by probing).
func TestGRESIgnoresHLSMIHealth(t *testing.T) {
	s, err := demo.Parse([]byte(`node: mixed-slurm
defaults: {memory_total: 80GiB, metrics: {utilization: 0.5, memory_used: 10GiB, temperature: 50, power: 300}}
devices:
  - {model: NVIDIA H100 80GB HBM3}
  - {vendor: gaudi, model: HL-225, memory_total: 96GiB}
slurm:
  jobs:
    - {id: "300", name: train, user: alice, account: acct, partition: gpu, qos: normal, gpus: [0]}
`))
	if err != nil {
		t.Fatal(err)
	}
	gaudiTable(t, s)
	e := newAttributedExporterFor(t, s, func(c *Config) { c.HLSMIPath = selfPath(t) })
	for _, mode := range []string{"exit", "", "exit"} {
		t.Setenv("HLSMI_FAKE_MODE", mode)
		out := scrapeText(t, e, 10*time.Second)
		if got := grepLines(out, "xpu_device_owners{"); got != "" {
			t.Errorf("hl-smi mode %q: owners told, want unknown:\n%s", mode, got)
		}
		if strings.Contains(out, `slurm_job_id="300"`) {
			t.Errorf("hl-smi mode %q: job 300 owns a device by GRES index:\n%s", mode, grepLines(out, `slurm_job_id="300"`))
		}
	}
}

// TestFailingHLSMIWithoutGaudi: an hl-smi installed on a node without
// Gaudi devices (no habanalabs node in sysfs) fails at every run; that
// does not make the node one of several vendors, and a Slurm job keeps
// the GPU its GRES index names (it lost it for good, found by probing).
func TestFailingHLSMIWithoutGaudi(t *testing.T) {
	s, err := demo.Parse([]byte(`node: nvidia-slurm
defaults: {memory_total: 80GiB, metrics: {utilization: 0.5, memory_used: 10GiB, temperature: 50, power: 300}}
devices:
  - {model: NVIDIA H100 80GB HBM3}
slurm:
  jobs:
    - {id: "300", name: train, user: alice, account: acct, partition: gpu, qos: normal, gpus: [0]}
`))
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("HLSMI_FAKE_MODE", "exit")
	e := newAttributedExporterFor(t, s, func(c *Config) { c.HLSMIPath = selfPath(t) })
	for i := range 2 {
		out := scrapeText(t, e, 10*time.Second)
		// Job 300 holds GPU 0 through GRES index 0: one owner, the whole GPU.
		if v := sample(t, out, "xpu_workload_allocated_devices", `vendor="nvidia"`, `slurm_job_id="300"`); v != 1 {
			t.Errorf("scrape %d: job 300 holds %v of GPU 0, want 1", i, v)
		}
	}
}

// A device that a good run no longer lists (fallen off the bus) stays in
// the output, down, with one log line when it goes and one when it returns.
func TestGaudiDeviceNoLongerListed(t *testing.T) {
	s := loadScenario(t, "gaudi")
	full := s.HLSMITable(testStart, testNow)
	lines := strings.SplitAfter(strings.TrimSuffix(string(full), "\n"), "\n")
	short := strings.Join(lines[:len(lines)-1], "") // without device 7
	e, logs, fullPath := gaudiExporterThen(t, string(full), short)
	var out string
	for range 2 {
		out = scrapeText(t, e, 5*time.Second)
	}
	if got := seriesCount(out, "xpu_device_up"); got != 8 {
		t.Errorf("%d devices listed, want 8", got)
	}
	if got := sample(t, out, "xpu_device_up", `gpu="7"`); got != 0 {
		t.Errorf("device 7 up = %v, want 0", got)
	}
	if got := sample(t, out, "xpu_device_up", `gpu="6"`); got != 1 {
		t.Errorf("device 6 up = %v, want 1", got)
	}
	if n := strings.Count(logs.String(), "no longer listed"); n != 1 {
		t.Errorf("%d log lines over two scrapes without device 7, want 1", n)
	}
	if !strings.Contains(out, `xpu_scrape_collector_success{collector="gaudi"} 1`) {
		t.Error("a good run with a device missing failed the collector")
	}

	t.Setenv("HLSMI_FAKE_TABLE", fullPath)
	out = scrapeText(t, e, 5*time.Second)
	if got := sample(t, out, "xpu_device_up", `gpu="7"`); got != 1 {
		t.Errorf("device 7 up = %v after it is listed again, want 1", got)
	}
	if n := strings.Count(logs.String(), "listed by hl-smi again"); n != 1 {
		t.Errorf("%d log lines for the device's return, want 1", n)
	}
}

// Snapshots that ask while a read is under way (the warm-up at start and
// the first scrape) share it: one hl-smi run, devices for both.
func TestGaudiConcurrentReadsShareOneRun(t *testing.T) {
	starts := slowHLSMI(t, "300ms")
	c, err := newGaudiCollector(Config{Logger: slog.New(slog.DiscardHandler), HLSMIPath: selfPath(t), Procfs: t.TempDir(), Sysfs: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	src := c.(source)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	results := make([][]*Device, 2)
	errs := make([]error, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = src.readDevices(ctx, []move{moveScrape, moveNone}[i])
		}()
		time.Sleep(50 * time.Millisecond) // the second asks while the first runs
	}
	wg.Wait()
	for i := range 2 {
		if errs[i] != nil || len(results[i]) != 8 {
			t.Errorf("read %d: %d devices, %v; want 8 and no error", i, len(results[i]), errs[i])
		}
	}
	if results[0][0] == results[1][0] {
		t.Error("two snapshots share a *Device: attribution of one would change the other")
	}
	b, err := os.ReadFile(starts)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "start "); n != 1 {
		t.Errorf("hl-smi started %d times for two concurrent reads, want 1", n)
	}
}

// TestGaudiSharedRunOutlivesTheShorterWaiter: two snapshots share one
// hl-smi run, and the one that ends first (a shorter scrape timeout, a
// scraper gone) gives up alone: the run goes on, not killed, for the one
// still waiting, which gets its devices. Only when every snapshot has given
// up is hl-smi killed. Snapshots are ended by cancelling them, so that the
// order of events, not timing, makes the case.
func TestGaudiSharedRunOutlivesTheShorterWaiter(t *testing.T) {
	for _, tc := range []struct {
		name string
		// deadlines of the first snapshot (which starts the run) and the
		// second (which joins it); end says which are ended while hl-smi
		// has not answered.
		first, second time.Duration
		end           []int
		// want: the snapshots that get the devices, the busy (gave up
		// while the run went on) and timeout (run killed) counts.
		wantUp         []int
		busy, timeouts float64
	}{
		{name: "the run's own snapshot ends first", first: time.Minute, second: 2 * time.Minute, end: []int{0}, wantUp: []int{1}, busy: 1},
		{name: "the joined snapshot ends first", first: 2 * time.Minute, second: time.Minute, end: []int{1}, wantUp: []int{0}, busy: 1},
		{name: "both end", first: time.Minute, second: 2 * time.Minute, end: []int{0, 1}, busy: 1, timeouts: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Long enough that hl-smi has not answered when the
			// snapshots are ended, a few milliseconds after it started,
			// on a loaded machine too.
			starts := slowHLSMI(t, "3s")
			col, err := newGaudiCollector(Config{Logger: slog.New(slog.DiscardHandler), HLSMIPath: selfPath(t), Procfs: t.TempDir(), Sysfs: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			c := col.(*gaudiCollector)
			type result struct {
				devs []*Device
				err  error
			}
			results := make([]chan result, 2)
			cancels := make([]context.CancelFunc, 2)
			waiters := func() int { return inflightWaiters(c) }
			for i, d := range []time.Duration{tc.first, tc.second} {
				ctx, cancel := context.WithTimeout(context.Background(), d)
				defer cancel()
				cancels[i], results[i] = cancel, make(chan result, 1)
				go func() {
					devs, err := c.readDevices(ctx, moveScrape)
					results[i] <- result{devs, err}
				}()
				waitForCond(t, "the snapshot to wait for the run", func() bool { return waiters() == i+1 })
			}
			waitForCond(t, "hl-smi to start", func() bool { return len(gaudiStarts(t, starts)) == 1 })
			got := make([]result, 2)
			for _, i := range tc.end {
				cancels[i]()
				got[i] = <-results[i]
			}
			for i := range 2 {
				if !slices.Contains(tc.end, i) {
					got[i] = <-results[i]
				}
				up := 0
				for _, d := range got[i].devs {
					if d.Up {
						up++
					}
				}
				if slices.Contains(tc.wantUp, i) {
					if got[i].err != nil || up != 8 {
						t.Errorf("snapshot %d: %d devices up, %v; want the 8 of the run it waited for", i, up, got[i].err)
					}
				} else if got[i].err == nil {
					t.Errorf("snapshot %d, ended before hl-smi answered, has no error", i)
				}
			}
			if n := len(gaudiStarts(t, starts)); n != 1 {
				t.Errorf("hl-smi started %d times, want once", n)
			}
			c.mu.Lock()
			busy := c.waitedOut
			c.mu.Unlock()
			if timeouts := float64(c.runner.Failures()["timeout"]); busy != tc.busy || timeouts != tc.timeouts {
				t.Errorf("busy %v, timeout %v; want %v, %v", busy, timeouts, tc.busy, tc.timeouts)
			}
			if tc.timeouts > 0 {
				pid := gaudiStarts(t, starts)[0]
				waitForCond(t, "the killed hl-smi to exit", func() bool { return !c.runner.Busy() })
				if err := syscall.Kill(pid, 0); err == nil {
					t.Errorf("hl-smi (pid %d) still alive after every snapshot gave up", pid)
				}
			}
		})
	}
}

// TestGaudiLongerScrapeIsNotServedAShorterOnesSnapshot: a scrape with a
// longer timeout that arrives while a shorter one's snapshot is being taken
// does not take that snapshot, in which hl-smi's devices are down for the
// shorter deadline, but takes its own, which shares the hl-smi run under
// way and waits for it under its own deadline.
func TestGaudiLongerScrapeIsNotServedAShorterOnesSnapshot(t *testing.T) {
	starts := slowHLSMI(t, "3s") // not answered when the first scrape is ended
	e := newGaudiExporter(t, selfPath(t), &syncbuf.Buffer{})
	c := e.collectors["gaudi"].(*gaudiCollector)
	waiters := func() int { return inflightWaiters(c) }
	// The first scrape is ended by cancelling it, before its deadline, so
	// that the order of events, not timing, makes the case.
	short, endShort := context.WithTimeout(context.Background(), time.Minute)
	defer endShort()
	long, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	shortSnap := make(chan *Snapshot, 1)
	go func() { shortSnap <- e.snapshots.get(short, moveScrape) }()
	waitForCond(t, "hl-smi to start", func() bool { return len(gaudiStarts(t, starts)) == 1 })
	longSnap := make(chan *Snapshot, 1)
	go func() { longSnap <- e.snapshots.get(long, moveScrape) }()
	waitForCond(t, "the longer scrape to wait for the run", func() bool { return waiters() == 2 })
	endShort()
	<-shortSnap
	snap := <-longSnap
	up := 0
	for _, d := range snap.Devices {
		if d.Up {
			up++
		}
	}
	if up != 8 {
		t.Errorf("the longer scrape has %d Gaudi devices up, want the 8 of the run it had time to wait for", up)
	}
	if n := len(gaudiStarts(t, starts)); n != 1 {
		t.Errorf("hl-smi started %d times, want once", n)
	}
}

// slowHLSMI makes the stand-in answer the gaudi scenario's table after
// delay, logging its runs to the file it returns.
func slowHLSMI(t *testing.T, delay string) (starts string) {
	t.Helper()
	gaudiTable(t, loadScenario(t, "gaudi"))
	starts = filepath.Join(t.TempDir(), "starts")
	t.Setenv("HLSMI_FAKE_LOG", starts)
	t.Setenv("HLSMI_FAKE_DELAY", delay)
	return starts
}

// gaudiStarts are the PIDs of the hl-smi runs the stand-in logged.
func gaudiStarts(t *testing.T, log string) []int {
	t.Helper()
	pids, err := hlsmisim.Started(log, "start")
	if err != nil {
		t.Fatal(err)
	}
	return pids
}

// waitForCond waits for cond, failing the test after a bound generous
// enough for a loaded machine.
func waitForCond(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestGaudiDeviceWhoseBusIDGoesNA: a device whose PCI address hl-smi stops
// printing (N/A) is the same device, known by its uuid and serial: not a
// second one, nor the first reported lost while it is listed and up.
func TestGaudiDeviceWhoseBusIDGoesNA(t *testing.T) {
	s := loadScenario(t, "gaudi")
	full := string(s.HLSMITable(testStart, testNow))
	lines := strings.Split(full, "\n")
	header := strings.Split(lines[0], ", ")
	col := slices.Index(header, "bus_id")
	if col < 0 {
		t.Fatalf("no bus_id column in %q", lines[0])
	}
	row := strings.Split(lines[1], ", ")
	busID := row[col]
	row[col] = "N/A"
	lines[1] = strings.Join(row, ", ")
	e, logs, _ := gaudiExporterThen(t, full, strings.Join(lines, "\n"))
	for i := range 2 {
		out := scrapeText(t, e, 5*time.Second)
		if n := seriesCount(out, "xpu_device_up"); n != 8 {
			t.Errorf("scrape %d: %d devices, want 8", i, n)
		}
		if n := seriesCount(out, "xpu_device_info"); n != 8 {
			t.Errorf("scrape %d: %d xpu_device_info, want 8", i, n)
		}
		if v := sample(t, out, "xpu_device_up", `gpu="0"`); v != 1 {
			t.Errorf("scrape %d: device 0 up = %v, want 1", i, v)
		}
	}
	if strings.Contains(logs.String(), "no longer listed") || strings.Contains(logs.String(), "collected twice") {
		t.Errorf("device 0 (%s) logged as lost:\n%s", busID, logs.String())
	}
}

// TestGaudiIdentityCellGoesNA: a device known from an earlier run whose
// uuid hl-smi prints N/A keeps that uuid, and with it its series and its
// owners: the pod holding it through the device plugin (which names it by
// serial) and the processes tied to it by bus_id. Without it the device
// lost its uuid label and every owner (found by probing).
func TestGaudiIdentityCellGoesNA(t *testing.T) {
	s := loadScenario(t, "gaudi")
	path := gaudiTable(t, s)
	e := newAttributedExporterFor(t, s, func(c *Config) { c.HLSMIPath = selfPath(t) })
	full := string(s.HLSMITable(testStart, testNow))
	uuid := regexp.MustCompile(`(?m)^xpu_device_info\{[^}]*gpu="0"[^}]*uuid="([^"]+)"`).FindStringSubmatch(scrapeText(t, e, 10*time.Second))
	if uuid == nil {
		t.Fatal("device 0 has no uuid in the first scrape")
	}
	for _, cells := range []map[string]string{{"uuid": "N/A"}, {"uuid": "N/A", "bus_id": "N/A"}} {
		if err := os.WriteFile(path, []byte(setCells(t, full, 0, cells)), 0o644); err != nil {
			t.Fatal(err)
		}
		out := scrapeText(t, e, 10*time.Second)
		// Device 0 is held by the TGI pod alone (the scenario), its process
		// 3001 with it: one owner, the whole device allocated to it.
		for _, m := range []struct {
			family   string
			matchers []string
		}{
			{"xpu_device_up", []string{`gpu="0"`, `uuid="` + uuid[1] + `"`, `pod="tgi-gaudi-6b8d7f9c5-m2p7x"`}},
			{"xpu_device_owners", []string{`gpu="0"`, `uuid="` + uuid[1] + `"`}},
			{"xpu_workload_allocated_devices", []string{`gpu="0"`, `uuid="` + uuid[1] + `"`, `pod="tgi-gaudi-6b8d7f9c5-m2p7x"`}},
		} {
			if v := sample(t, out, m.family, m.matchers...); v != 1 {
				t.Errorf("%v N/A: %s%v = %v, want 1", cells, m.family, m.matchers, v)
			}
		}
	}
}

// TestGaudiInfoKeepsItsCellsThroughNA: a known device that prints N/A in
// every cell for a run (in reset, say) keeps the static facts it printed
// before: xpu_device_info is the same series, driver and module included,
// not a new one without them that a join on driver_version misses (found
// by probing: probe15-gaudi D2).
func TestGaudiInfoKeepsItsCellsThroughNA(t *testing.T) {
	s := loadScenario(t, "gaudi")
	path := gaudiTable(t, s)
	e := newAttributedExporterFor(t, s, func(c *Config) { c.HLSMIPath = selfPath(t) })
	info := regexp.MustCompile(`(?m)^xpu_device_info\{[^}]*gpu="0"[^}]*\} 1$`)
	before := info.FindString(scrapeText(t, e, 10*time.Second))
	if !strings.Contains(before, `driver_version="1.`) || !strings.Contains(before, `module_id="`) {
		t.Fatalf("device 0's first info has no driver or module: %q", before)
	}
	full := string(s.HLSMITable(testStart, testNow))
	cells := map[string]string{}
	for _, name := range strings.Split(strings.SplitN(full, "\n", 2)[0], ", ") {
		if name != "index" {
			cells[name] = "N/A"
		}
	}
	if err := os.WriteFile(path, []byte(setCells(t, full, 0, cells)), 0o644); err != nil {
		t.Fatal(err)
	}
	if after := info.FindString(scrapeText(t, e, 10*time.Second)); after != before {
		t.Errorf("with every cell N/A, device 0's info is\n%q\nwas\n%q", after, before)
	}
}

// TestGaudiPricedWithoutIdentity: a device whose uuid, bus_id and serial
// hl-smi all prints N/A is still a device of its model, priced by it, so
// that chargeback does not miss it (found by probing: no cost, and not
// counted as unpriced either).
func TestGaudiPricedWithoutIdentity(t *testing.T) {
	s := loadScenario(t, "gaudi")
	gaudiTableWith(t, s, 0, map[string]string{"uuid": "N/A", "bus_id": "N/A", "serial": "N/A"})
	usePrices(t, "currency: USD\nmodels: {HL-225: 1.5}\n")
	e := newAttributedExporterWith(t, s, map[string]bool{"gaudi": true, "cost": true}, func() time.Time { return testNow },
		func(c *Config) { c.HLSMIPath = selfPath(t) })
	check, _ := oracleChecks(scrapeText(t, e, 10*time.Second))
	// HL-225 at 1.5 an hour, the eight devices alike.
	check(t, "xpu_device_hourly_cost", 1.5, `gpu="0"`, `vendor="habana"`)
}

// TestGaudiUnlistedDeviceKeepsOthersOwners: a device hl-smi stops listing
// while a process still holds it is down, its processes unknown; the
// other devices' process lists are whole. Its process, tied to no listed
// device, made every device's list partial, and device 6, owned by its two
// host services alone, lost its owners (found by probing).
func TestGaudiUnlistedDeviceKeepsOthersOwners(t *testing.T) {
	s := loadScenario(t, "gaudi")
	path := gaudiTable(t, s)
	e := newAttributedExporterFor(t, s, func(c *Config) { c.HLSMIPath = selfPath(t) })
	scrapeText(t, e, 10*time.Second)
	lines := strings.Split(string(s.HLSMITable(testStart, testNow)), "\n")
	// Row 1 is device 0, which process 3001 still holds.
	if err := os.WriteFile(path, []byte(strings.Join(append(lines[:1:1], lines[2:]...), "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	out := scrapeText(t, e, 10*time.Second)
	check, _ := oracleChecks(out)
	check(t, "xpu_device_up", 0, `gpu="0"`, `vendor="habana"`)
	// Device 6: hl-qual.service and habana-perf.service, two owners.
	check(t, "xpu_device_owners", 2, `gpu="6"`, `vendor="habana"`)
}

// TestGaudiRowLeftOutKeepsOthersOwners: a row left out for an index no
// known device gives it (TestGaudiRowWithoutIndex) is a device hl-smi
// listed: a process holding it is that device's, and the other devices'
// process lists are whole, as for a device no longer listed. Device 6,
// owned by its two host services alone, keeps both.
func TestGaudiRowLeftOutKeepsOthersOwners(t *testing.T) {
	s := loadScenario(t, "gaudi")
	// Row 0 is device 0, which process 3001 holds.
	gaudiTableWith(t, s, 0, map[string]string{"index": "N/A"})
	logs := &syncbuf.Buffer{}
	e := newAttributedExporterFor(t, s, func(c *Config) {
		c.HLSMIPath = selfPath(t)
		c.Logger = slog.New(slog.NewTextHandler(logs, nil))
	})
	out := scrapeText(t, e, 10*time.Second)
	check, absent := oracleChecks(out)
	absent(t, "xpu_device_up", `gpu="0"`)
	// Device 6: hl-qual.service and habana-perf.service, two owners.
	check(t, "xpu_device_owners", 2, `gpu="6"`, `vendor="habana"`)
	if strings.Contains(logs.String(), "no hl-smi device could be tied to") {
		t.Errorf("the left-out device's process is taken for one sysfs cannot tie:\n%s", logs.String())
	}
}

// TestGaudiDeviceHLSMIDoesNotList: the habanalabs driver has a device
// (its compute node in sysfs, with its PCI address) that hl-smi leaves out
// of its table. It cannot be served, since hl-smi names none of its
// readings, but it is counted and named in one warning, not left unseen;
// a process holding it holds that device, so the other devices' lists stay
// whole and their owners known. It was neither seen nor logged, and its
// holder was blamed on --path.sysfs while every owner was withheld (probe27
// PA4). Device 0 (the TGI pod's process 3001) and device 7 (idle) in turn.
func TestGaudiDeviceHLSMIDoesNotList(t *testing.T) {
	for _, row := range []int{0, 7} {
		t.Run(fmt.Sprintf("device %d", row), func(t *testing.T) {
			s := loadScenario(t, "gaudi")
			table := string(s.HLSMITable(testStart, testNow))
			out, logs := scrapeGaudiWithout(t, s, table, row)
			if !strings.Contains(out, "\nxpu_gaudi_devices_unlisted 1\n") {
				t.Errorf("want xpu_gaudi_devices_unlisted 1:\n%s", grepLines(out, "xpu_gaudi_devices_unlisted"))
			}
			check, _ := oracleChecks(out)
			// Device 6: hl-qual.service and habana-perf.service, two owners.
			check(t, "xpu_device_owners", 2, `gpu="6"`, `vendor="habana"`)
			if n := strings.Count(out, "\nxpu_device_up{"); n != 7 {
				t.Errorf("%d devices served, want the 7 hl-smi lists", n)
			}
			log := logs.String()
			if !strings.Contains(log, "hl-smi does not list") || strings.Contains(log, "no hl-smi device could be tied to") {
				t.Errorf("want the unlisted device named, not its holder blamed on sysfs:\n%s", log)
			}
			addr := pciaddr.Canonical(cell(t, table, row, "bus_id"))
			if addr == "" || !strings.Contains(log, "pci="+addr) {
				t.Errorf("the warning does not name the device's address %s:\n%s", addr, log)
			}
		})
	}
}

// TestGaudiNamelessRowsAfterADeviceLeft: hl-smi named its 8 devices, then
// device 0 left and the 7 others were listed renumbered 0..6 with uuid,
// bus_id and serial all N/A. Matched by index, row 0 (device 1's readings)
// was served under device 0's uuid, and device 7, still there, was
// reported gone (probe27 PA7). Likewise when a device came, listed first,
// and the 8 others moved up one (probe28 PC3). With another number of rows
// than before, an index names no device for sure: the nameless rows are
// served without a uuid, and every named device, none of which a row
// names, is down.
func TestGaudiNamelessRowsAfterADeviceLeft(t *testing.T) {
	for _, tc := range []struct {
		name string
		// rows are the device rows of the second run, by their row in
		// the first; -1 is a new device, with 4096 MiB used.
		rows []int
	}{
		{"device 0 left", []int{1, 2, 3, 4, 5, 6, 7}},
		{"a device came first", []int{-1, 0, 1, 2, 3, 4, 5, 6, 7}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := loadScenario(t, "gaudi")
			path := gaudiTable(t, s)
			table := string(s.HLSMITable(testStart, testNow))
			e := newAttributedExporterFor(t, s, func(c *Config) { c.HLSMIPath = selfPath(t) })
			first := scrapeText(t, e, 10*time.Second)
			uuid := func(row int) string { return cell(t, table, row, "uuid") }
			check, _ := oracleChecks(first)
			check(t, "xpu_device_up", 1, `uuid="`+uuid(0)+`"`)

			lines := strings.Split(strings.TrimSuffix(table, "\n"), "\n")
			header := strings.Split(lines[0], ", ")
			second := []string{lines[0]}
			for i, row := range tc.rows {
				fields := strings.Split(lines[1+max(row, 0)], ", ")
				for col, name := range header {
					switch {
					case name == "index":
						fields[col] = strconv.Itoa(i)
					case name == "uuid", name == "bus_id", name == "serial":
						fields[col] = "N/A"
					case name == "memory.used [MiB]" && row < 0:
						fields[col] = "4096"
					}
				}
				second = append(second, strings.Join(fields, ", "))
			}
			if err := os.WriteFile(path, []byte(strings.Join(second, "\n")+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			out := scrapeText(t, e, 10*time.Second)
			check, absent := oracleChecks(out)
			for row := range 8 {
				check(t, "xpu_device_up", 0, `uuid="`+uuid(row)+`"`)
				absent(t, "xpu_memory_used_bytes", `uuid="`+uuid(row)+`"`)
			}
			if n := len(regexp.MustCompile(`(?m)^xpu_device_up\{[^}]*\} 1$`).FindAllString(out, -1)); n != len(tc.rows) {
				t.Errorf("%d devices up, want the %d nameless rows:\n%s", n, len(tc.rows), grepLines(out, "xpu_device_up"))
			}
			// gpu 0 is the second run's first row: device 1's memory.used,
			// or the new device's 4096 MiB.
			mib := 4096.0
			if tc.rows[0] >= 0 {
				v, err := strconv.ParseFloat(cell(t, table, tc.rows[0], "memory.used [MiB]"), 64)
				if err != nil {
					t.Fatal(err)
				}
				mib = v
			}
			check(t, "xpu_memory_used_bytes", mib*(1<<20), `gpu="0"`, `vendor="habana"`)
		})
	}
}

// scrapeGaudiWithout scrapes the scenario's node once, hl-smi printing
// table without device row row (0 is the first device), and returns the
// scrape and the exporter's log.
func scrapeGaudiWithout(t *testing.T, s *demo.Scenario, table string, row int) (string, *syncbuf.Buffer) {
	t.Helper()
	path := gaudiTable(t, s)
	lines := strings.SplitAfter(table, "\n")
	if err := os.WriteFile(path, []byte(strings.Join(slices.Delete(lines, 1+row, 2+row), "")), 0o644); err != nil {
		t.Fatal(err)
	}
	logs := &syncbuf.Buffer{}
	e := newAttributedExporterFor(t, s, func(c *Config) {
		c.HLSMIPath = selfPath(t)
		c.Logger = slog.New(slog.NewTextHandler(logs, nil))
	})
	return scrapeText(t, e, 10*time.Second), logs
}

// TestGaudiUnlistedUntold: device 7 unlisted as in
// TestGaudiDeviceHLSMIDoesNotList, and device 3's bus_id printed N/A: that
// row may be the unlisted device, so whether one is unlisted cannot be
// told. The gauge is left out rather than served 0, nothing says every
// device is listed again, and a holder that cannot be tied is put down to
// the missing bus_id, not to --path.sysfs (probe28 PC2).
func TestGaudiUnlistedUntold(t *testing.T) {
	s := loadScenario(t, "gaudi")
	table := setCells(t, string(s.HLSMITable(testStart, testNow)), 3, map[string]string{"bus_id": "N/A"})
	out, logs := scrapeGaudiWithout(t, s, table, 7)
	if strings.Contains(out, "\nxpu_gaudi_devices_unlisted ") {
		t.Errorf("served though it cannot be told:\n%s", grepLines(out, "xpu_gaudi_devices_unlisted"))
	}
	if log := logs.String(); strings.Contains(log, "again") || strings.Contains(log, "check --path.sysfs") {
		t.Errorf("want no line saying every device is listed, nor sysfs blamed:\n%s", log)
	}
}

// TestGaudiMemoryAboveAnEarlierTotal: device 1 printed its total, 96 GiB
// (98,304 MiB), then a run prints its total N/A and 200,000 MiB used: more
// than the device has, left out and counted as one bad_value, not served
// as 2.1e11 bytes (probe28 PC5). The parser alone could not tell: that
// run's row has no total to check against.
func TestGaudiMemoryAboveAnEarlierTotal(t *testing.T) {
	s := loadScenario(t, "gaudi")
	path := gaudiTable(t, s)
	e := newAttributedExporterFor(t, s, func(c *Config) { c.HLSMIPath = selfPath(t) })
	check, _ := oracleChecks(scrapeText(t, e, 10*time.Second))
	check(t, "xpu_memory_total_bytes", 98304*(1<<20), `gpu="1"`, `vendor="habana"`)
	table := setCells(t, string(s.HLSMITable(testStart, testNow)), 1, map[string]string{"memory.total [MiB]": "N/A", "memory.used [MiB]": "200000"})
	if err := os.WriteFile(path, []byte(table), 0o644); err != nil {
		t.Fatal(err)
	}
	// Twice: the second run's total is N/A too, and the first run's
	// total still says the size.
	for n := 1; n <= 2; n++ {
		out := scrapeText(t, e, 10*time.Second)
		_, absent := oracleChecks(out)
		absent(t, "xpu_memory_used_bytes", `gpu="1"`, `vendor="habana"`)
		if want := fmt.Sprintf(`xpu_hlsmi_errors_total{reason="bad_value"} %d`, n); !strings.Contains(out, want+"\n") {
			t.Errorf("run %d: want %s:\n%s", n, want, grepLines(out, "xpu_hlsmi_errors_total"))
		}
	}
}

// TestGaudiWithoutUUIDHasOwners: a device whose uuid hl-smi has never
// printed (N/A from the first run) has no uuid label, and still its owners:
// the device plugin names it by serial, its processes are tied to it by
// bus_id. It had none (found by probing).
func TestGaudiWithoutUUIDHasOwners(t *testing.T) {
	s := loadScenario(t, "gaudi")
	gaudiTableWith(t, s, 0, map[string]string{"uuid": "N/A"})
	usePrices(t, "currency: USD\nmodels: {HL-225: 1.5}\n")
	e := newAttributedExporterWith(t, s, map[string]bool{"gaudi": true, "attribution": true, "cost": true}, func() time.Time { return testNow },
		func(c *Config) { c.HLSMIPath = selfPath(t) })
	out := scrapeText(t, e, 10*time.Second)
	// Priced by its model, uuid or not: HL-225 at 1.5 an hour.
	check0, _ := oracleChecks(out)
	check0(t, "xpu_device_hourly_cost", 1.5, `gpu="0"`, `vendor="habana"`)
	// Device 0 is held by the TGI pod alone (the scenario): one owner, the
	// whole device allocated to it.
	check, _ := oracleChecks(out)
	check(t, "xpu_device_owners", 1, `gpu="0"`, `vendor="habana"`)
	check(t, "xpu_workload_allocated_devices", 1, `gpu="0"`, `vendor="habana"`, `pod="tgi-gaudi-6b8d7f9c5-m2p7x"`)
	check(t, "xpu_device_up", 1, `gpu="0"`, `vendor="habana"`, `pod="tgi-gaudi-6b8d7f9c5-m2p7x"`)
	if line := regexp.MustCompile(`(?m)^xpu_device_up\{[^}]*gpu="0"[^}]*vendor="habana"[^}]*\}`).FindString(out); strings.Contains(line, "uuid=") {
		t.Errorf("a device without a uuid is served with one: %s", line)
	}
	if !strings.Contains(out, "\nxpu_attribution_unknown_device_ids 0\n") {
		t.Errorf("device plugin IDs name no device:\n%s", grepLines(out, "xpu_attribution_unknown_device_ids"))
	}
}

// cell is the named cell of device row (0 is the first device) of table.
func cell(t *testing.T, table string, row int, name string) string {
	t.Helper()
	lines := strings.Split(table, "\n")
	col := slices.Index(strings.Split(lines[0], ", "), name)
	if col < 0 {
		t.Fatalf("no %s column in %q", name, lines[0])
	}
	return strings.Split(lines[1+row], ", ")[col]
}

// setCells returns table with the named cells of device row (0 is the
// first device) set to values.
func setCells(t *testing.T, table string, row int, cells map[string]string) string {
	t.Helper()
	lines := strings.Split(table, "\n")
	header := strings.Split(lines[0], ", ")
	fields := strings.Split(lines[1+row], ", ")
	for name, v := range cells {
		col := slices.Index(header, name)
		if col < 0 {
			t.Fatalf("no %s column in %q", name, lines[0])
		}
		fields[col] = v
	}
	lines[1+row] = strings.Join(fields, ", ")
	return strings.Join(lines, "\n")
}

// gaudiDown counts the Gaudi devices reported down.
func gaudiDown(out string) int {
	return strings.Count(grepLines(out, "xpu_device_up{")+"\n", `vendor="habana"} 0`+"\n")
}

// TestGaudiDeviceWithoutAnyIdentity: a device whose bus_id, uuid and serial
// all print N/A is known by its index only; when they become readable, or
// unreadable again, it is the same device, not a second one, and none is
// left reported down ("no longer listed") while it is listed and up.
func TestGaudiDeviceWithoutAnyIdentity(t *testing.T) {
	full := string(loadScenarioTable(t))
	anonymous := setCells(t, full, 1, map[string]string{"bus_id": "N/A", "uuid": "N/A", "serial": "N/A"})
	for _, tc := range []struct{ name, first, then string }{
		{"identity read after N/A", anonymous, full},
		{"identity N/A after read", full, anonymous},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, logs, _ := gaudiExporterThen(t, tc.first, tc.then)
			for i := range 2 {
				out := scrapeText(t, e, 5*time.Second)
				if n := seriesCount(out, "xpu_device_up"); n != 8 {
					t.Errorf("scrape %d: %d devices, want 8:\n%s", i, n, grepLines(out, "xpu_device_up{"))
				}
				if n := gaudiDown(out); n != 0 {
					t.Errorf("scrape %d: %d devices down, want none:\n%s", i, n, grepLines(out, "xpu_device_up{"))
				}
			}
			if strings.Contains(logs.String(), "no longer listed") {
				t.Errorf("a listed device logged as lost:\n%s", logs.String())
			}
		})
	}
}

// TestGaudiAnonymousRowAtAnotherIndex: runs in which devices print N/A for
// bus_id, uuid and serial and are listed at other devices' indices (hl-smi
// renumbered them), between runs that list all 8 named.
//   - One such row (device 0 at index 1, device 1 at index 0, named): the
//     one nameless row and the one device no row named are each other, by
//     elimination: 8 devices, none down, in that run already; it made a
//     device of its own, left reported down for good (probe22-amdseq 02).
//   - Two (devices 0 and 1 at indices 2 and 3, devices 2 and 3 at 0 and
//     1, named): nothing tells which is which; devices 0 and 1 are down
//     and two devices known by index alone up for that run. Once every row
//     is named again, as many as before, those indices are named devices':
//     the two are forgotten, 8 devices, none down.
func TestGaudiAnonymousRowAtAnotherIndex(t *testing.T) {
	full := string(loadScenarioTable(t))
	nameless := map[string]string{"bus_id": "N/A", "uuid": "N/A", "serial": "N/A"}
	with := func(cells map[string]string, index string) map[string]string {
		out := map[string]string{"index": index}
		for k, v := range cells {
			out[k] = v
		}
		return out
	}
	one := setCells(t, full, 0, with(nameless, "1"))
	one = setCells(t, one, 1, map[string]string{"index": "0"})
	two := setCells(t, full, 0, with(nameless, "2"))
	two = setCells(t, two, 1, with(nameless, "3"))
	two = setCells(t, two, 2, map[string]string{"index": "0"})
	two = setCells(t, two, 3, map[string]string{"index": "1"})
	for _, tc := range []struct {
		name            string
		middle          string
		middleDown      int
		middleSeries    int
		forgottenLogged int
	}{
		{"one nameless row", one, 0, 8, 0},
		{"two nameless rows", two, 2, 10, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, logs, fullPath := gaudiExporterThen(t, full, tc.middle)
			out := scrapeText(t, e, 5*time.Second)
			if n, down := seriesCount(out, "xpu_device_up"), gaudiDown(out); n != tc.middleSeries || down != tc.middleDown {
				t.Errorf("the renumbered run: %d devices, %d down; want %d, %d down:\n%s", n, down, tc.middleSeries, tc.middleDown, grepLines(out, "xpu_device_up{"))
			}
			t.Setenv("HLSMI_FAKE_TABLE", fullPath)
			for i := range 2 {
				out := scrapeText(t, e, 5*time.Second)
				if n, down := seriesCount(out, "xpu_device_up"), gaudiDown(out); n != 8 || down != 0 {
					t.Errorf("scrape %d after the rows are named again: %d devices, %d down; want 8 up:\n%s", i, n, down, grepLines(out, "xpu_device_up{"))
				}
			}
			if n := strings.Count(logs.String(), "known only by its index"); n != tc.forgottenLogged {
				t.Errorf("%d devices known by index alone logged forgotten, want %d:\n%s", n, tc.forgottenLogged, logs.String())
			}
		})
	}
}

// TestGaudiNamelessDeviceLeaves: a device whose cells all read N/A (the
// failing one) falls off the bus, and hl-smi lists the 7 others renumbered
// 0 to 6, so a named device holds its index: one row fewer says a device
// left, and it is reported down, not forgotten (review23 F1). And a
// nameless row whose key ("index/0") is that of a device named since does
// not take that device: device 0, first seen nameless, later listed named
// at index 1 while device 1 prints N/A at index 0, stays device 0, and
// device 1 is not reported down (review23 F2).
func TestGaudiNamelessDeviceLeaves(t *testing.T) {
	full := string(loadScenarioTable(t))
	anon0 := setCells(t, full, 0, map[string]string{"bus_id": "N/A", "uuid": "N/A", "serial": "N/A"})
	t.Run("leaves", func(t *testing.T) {
		out, logs := gaudiRuns(t, anon0, dropRenumbered(t, full, 0))
		if n, down := seriesCount(out, "xpu_device_up"), gaudiDown(out); n != 8 || down != 1 {
			t.Errorf("device 0 left the bus: %d devices, %d down; want 8, 1 down:\n%s\n%s", n, down, grepLines(out, "xpu_device_up{"), logs)
		}
	})
	t.Run("index key named since", func(t *testing.T) {
		swapped := setCells(t, full, 0, map[string]string{"index": "1"})
		swapped = setCells(t, swapped, 1, map[string]string{"index": "0", "bus_id": "N/A", "uuid": "N/A", "serial": "N/A"})
		out, _ := gaudiRuns(t, anon0, full, swapped)
		if n, down := seriesCount(out, "xpu_device_up"), gaudiDown(out); n != 8 || down != 0 {
			t.Errorf("%d devices, %d down; want 8 up:\n%s", n, down, grepLines(out, "xpu_device_up{"))
		}
		for i := range 8 {
			uuid := fmt.Sprintf(`uuid="01P0-HL2080A0-15-B3B6AE52-%02d-04-03"`, i)
			if n := strings.Count(grepLines(out, "xpu_device_up{"), uuid); n != 1 {
				t.Errorf("%s served by %d devices, want 1", uuid, n)
			}
		}
	})
}

// gaudiRuns serves each hl-smi table in turn, a scrape each, and returns a
// scrape of the last one after that, and the logs.
func gaudiRuns(t *testing.T, tables ...string) (string, string) {
	t.Helper()
	dir := t.TempDir()
	logs := &syncbuf.Buffer{}
	var e *Exporter
	for i, table := range tables {
		path := filepath.Join(dir, strconv.Itoa(i)+".csv")
		if err := os.WriteFile(path, []byte(table), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Setenv("HLSMI_FAKE_TABLE", path)
		if e == nil {
			e = newGaudiExporter(t, selfPath(t), logs)
		}
		scrapeText(t, e, 5*time.Second)
	}
	return scrapeText(t, e, 5*time.Second), logs.String()
}

// dropRenumbered is table without device row (0 is the first device), the
// later rows' indices one lower, as hl-smi lists the devices left when one
// leaves.
func dropRenumbered(t *testing.T, table string, row int) string {
	t.Helper()
	lines := strings.Split(strings.TrimRight(table, "\n"), "\n")
	lines = slices.Delete(lines, 1+row, 2+row)
	out := strings.Join(lines, "\n") + "\n"
	for i := row; i < len(lines)-1; i++ {
		out = setCells(t, out, i, map[string]string{"index": strconv.Itoa(i)})
	}
	return out
}

// TestGaudiDuplicateIdentity: two rows printing one bus_id, or one uuid
// where bus_id is N/A, stay two devices: both up while listed, both down
// when hl-smi then fails, rather than one vanishing.
func TestGaudiDuplicateIdentity(t *testing.T) {
	full := string(loadScenarioTable(t))
	row0 := strings.Split(strings.Split(full, "\n")[1], ", ")
	header := strings.Split(strings.Split(full, "\n")[0], ", ")
	cell := func(name string) string { return row0[slices.Index(header, name)] }
	for _, tc := range []struct {
		name string
		// cells device 1 prints; device 0 prints its own but bus_id N/A
		// with noBusID
		cells   map[string]string
		noBusID bool
	}{
		{name: "bus_id", cells: map[string]string{"bus_id": cell("bus_id")}},
		{name: "uuid", cells: map[string]string{"bus_id": "N/A", "uuid": cell("uuid")}, noBusID: true},
		{name: "every identity cell", cells: map[string]string{"bus_id": cell("bus_id"), "uuid": cell("uuid"), "serial": cell("serial")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dup := setCells(t, full, 1, tc.cells)
			if tc.noBusID {
				dup = setCells(t, dup, 0, map[string]string{"bus_id": "N/A"})
			}
			e, logs, _ := gaudiExporterThen(t, dup, dup)
			out := scrapeText(t, e, 5*time.Second)
			if n, down := seriesCount(out, "xpu_device_up"), gaudiDown(out); n != 8 || down != 0 {
				t.Errorf("listed: %d devices, %d down; want 8 up:\n%s", n, down, grepLines(out, "xpu_device_up{"))
			}
			t.Setenv("HLSMI_FAKE_MODE", "exit")
			out = scrapeText(t, e, 5*time.Second)
			if n, down := seriesCount(out, "xpu_device_up"), gaudiDown(out); n != 8 || down != 8 {
				t.Errorf("hl-smi failing: %d devices, %d down; want all 8 down:\n%s", n, down, grepLines(out, "xpu_device_up{"))
			}
			t.Setenv("HLSMI_FAKE_MODE", "")
			out = scrapeText(t, e, 5*time.Second)
			if n, down := seriesCount(out, "xpu_device_up"), gaudiDown(out); n != 8 || down != 0 {
				t.Errorf("listed again: %d devices, %d down; want 8 up:\n%s", n, down, grepLines(out, "xpu_device_up{"))
			}
			if strings.Contains(logs.String(), "no longer listed") {
				t.Errorf("a listed device logged as lost:\n%s", logs.String())
			}
		})
	}
}

// TestGaudiProcessesNoDeviceTiesTo: with sysfs not where --path.sysfs says,
// or hl-smi not asked for bus_id, no process's Gaudi can be tied to an
// hl-smi device: that is a process list with holes, per-owner memory left
// out and one warning naming the cause, not devices without processes.
func TestGaudiProcessesNoDeviceTiesTo(t *testing.T) {
	noBusID := slices.DeleteFunc(slices.Clone(gaudi.DefaultFields), func(f string) bool { return f == "bus_id" })
	for _, tc := range []struct {
		name      string
		opt       func(t *testing.T, c *Config)
		warn, not string
	}{
		{"sysfs elsewhere", func(t *testing.T, c *Config) { c.Sysfs = t.TempDir() }, "(check --path.sysfs)", "bus_id"},
		{"no bus_id asked for", func(t *testing.T, c *Config) { c.HLSMIFields = noBusID }, "--gaudi.query-fields leaves out bus_id", "--path.sysfs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := loadScenario(t, "gaudi")
			gaudiTable(t, s)
			logs := &syncbuf.Buffer{}
			e := newAttributedExporterFor(t, s, func(c *Config) {
				c.HLSMIPath = selfPath(t)
				c.Logger = slog.New(slog.NewTextHandler(logs, nil))
				tc.opt(t, c)
			})
			for range 2 {
				out := scrapeText(t, e, 10*time.Second)
				check, absent := oracleChecks(out)
				absent(t, "xpu_workload_memory_used_bytes", `vendor="habana"`)
				// The devices no pod is allocated (6, the scenario's
				// units, and 7) have owners the list may lack: not
				// counted, rather than 0; an allocated device's owner is
				// the kubelet's.
				absent(t, "xpu_device_owners", `gpu="6"`)
				absent(t, "xpu_device_owners", `gpu="7"`)
				check(t, "xpu_device_owners", 1, `gpu="0"`)
			}
			warnings := grepLines(logs.String(), "time=")
			if n := strings.Count(warnings, "level=WARN"); n != 1 || !strings.Contains(warnings, tc.warn) || strings.Contains(warnings, tc.not) {
				t.Errorf("%d warnings over two scrapes, want 1 saying %q, not %q:\n%s", n, tc.warn, tc.not, logs.String())
			}
		})
	}
}

// TestGaudiHungHLSMIMixedDeadlines: while hl-smi stays hung, scrapers with
// different deadlines (an HA pair) meet it as the run's timeout and as
// busy, waiting for that run: one state, one log line, not one a scrape.
func TestGaudiHungHLSMIMixedDeadlines(t *testing.T) {
	gaudiTable(t, loadScenario(t, "gaudi"))
	t.Setenv("HLSMI_FAKE_MODE", "hang")
	logs := &syncbuf.Buffer{}
	col, err := newGaudiCollector(Config{Logger: slog.New(slog.NewTextHandler(logs, nil)), HLSMIPath: selfPath(t), Procfs: t.TempDir(), Sysfs: t.TempDir(), Now: func() time.Time { return testNow }})
	if err != nil {
		t.Fatal(err)
	}
	c := col.(*gaudiCollector)
	read := func(d time.Duration, wg *sync.WaitGroup) {
		defer wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		c.readDevices(ctx, moveScrape)
	}
	for range 3 {
		var wg sync.WaitGroup
		wg.Add(2)
		go read(800*time.Millisecond, &wg) // the run's own scrape: timeout
		time.Sleep(100 * time.Millisecond)
		go read(200*time.Millisecond, &wg) // waits for that run: busy
		wg.Wait()
	}
	if n := strings.Count(logs.String(), "hl-smi failed"); n != 1 {
		t.Errorf("%d log lines over three cycles of one hung hl-smi, want 1:\n%s", n, logs.String())
	}
}

// TestGaudiUnreadableValueLoggedOnce: a cell hl-smi prints unreadably is
// counted (bad_value) at every run, named in one warning with its field,
// and its return in one line.
func TestGaudiUnreadableValueLoggedOnce(t *testing.T) {
	full := string(loadScenarioTable(t))
	lines := strings.Split(full, "\n")
	col := slices.Index(strings.Split(lines[0], ", "), "utilization.aip [%]")
	if col < 0 {
		t.Fatalf("no utilization column in %q", lines[0])
	}
	row := strings.Split(lines[3], ", ")
	row[col] = "[N/A]"
	lines[3] = strings.Join(row, ", ")
	e, logs, goodPath := gaudiExporterThen(t, strings.Join(lines, "\n"), strings.Join(lines, "\n"))
	out := scrapeText(t, e, 5*time.Second)
	// One bad cell a run, two runs.
	if v := sample(t, out, "xpu_hlsmi_errors_total", `reason="bad_value"`); v != 2 {
		t.Errorf("bad_value counted %v times, want 2", v)
	}
	if n := strings.Count(logs.String(), `field=utilization.aip gpu=2`); n != 1 {
		t.Errorf("%d warnings naming the field over two runs, want 1:\n%s", n, logs.String())
	}
	if err := os.WriteFile(goodPath, []byte(full), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HLSMI_FAKE_TABLE", goodPath)
	scrapeText(t, e, 5*time.Second)
	scrapeText(t, e, 5*time.Second)
	if n := strings.Count(logs.String(), `msg="hl-smi values of a field read again" field=utilization.aip`); n != 1 {
		t.Errorf("%d lines for the field's return, want 1:\n%s", n, logs.String())
	}
}

// loadScenarioTable is the gaudi scenario's hl-smi table at testNow.
func loadScenarioTable(t *testing.T) []byte {
	t.Helper()
	return loadScenario(t, "gaudi").HLSMITable(testStart, testNow)
}

// TestGaudiQueryFields: an hl-smi that does not know some field is asked
// only for those --gaudi.query-fields lists; the readings it leaves out are
// absent, the rest served. A list without index, or with a field the
// exporter does not read, fails at start.
func TestGaudiQueryFields(t *testing.T) {
	s := loadScenario(t, "gaudi")
	gaudiTable(t, s)
	fields := []string{"index", "uuid", "name", "bus_id", "serial", "utilization.aip"}
	e := newAttributedExporterFor(t, s, func(c *Config) { c.HLSMIPath, c.HLSMIFields = selfPath(t), fields })
	out := scrapeText(t, e, 10*time.Second)
	check, absent := oracleChecks(out)
	// As in TestGaudiOracles: utilization.aip "87" → 0.87.
	check(t, "xpu_utilization_ratio", 0.87, `gpu="1"`, `vendor="habana"`)
	check(t, "xpu_device_up", 1, `gpu="7"`, `vendor="habana"`)
	absent(t, "xpu_power_watts", `vendor="habana"`)
	absent(t, "xpu_memory_used_bytes", `vendor="habana"`)
	for _, l := range strings.Split(grepLines(out, "xpu_hlsmi_errors_total{"), "\n") {
		if l != "" && !strings.HasSuffix(l, " 0") {
			t.Errorf("hl-smi error with a narrower list: %s", l)
		}
	}
	for _, bad := range [][]string{{"uuid", "name"}, {"index", "fan.speed"}} {
		if _, err := newGaudiCollector(Config{HLSMIFields: bad}); err == nil {
			t.Errorf("fields %v accepted", bad)
		}
	}
}

// TestGaudiInfoWithoutUUID: a device whose uuid hl-smi prints N/A still
// has its static facts served (PCI address, serial), without a uuid label.
func TestGaudiInfoWithoutUUID(t *testing.T) {
	lines := strings.Split(string(loadScenarioTable(t)), "\n")
	col := slices.Index(strings.Split(lines[0], ", "), "uuid")
	row := strings.Split(lines[1], ", ")
	row[col] = "N/A"
	lines[1] = strings.Join(row, ", ")
	e, _, _ := gaudiExporterThen(t, strings.Join(lines, "\n"), strings.Join(lines, "\n"))
	out := scrapeText(t, e, 5*time.Second)
	if n := seriesCount(out, "xpu_device_info"); n != 8 {
		t.Errorf("%d xpu_device_info, want 8", n)
	}
	line := regexp.MustCompile(`(?m)^xpu_device_info\{[^}]*gpu="0"[^}]*\}`).FindString(out)
	if !strings.Contains(line, `pci_bus_id="0000:`) || !strings.Contains(line, `serial="`) || strings.Contains(line, "uuid=") {
		t.Errorf("device 0's info without a uuid: %q", line)
	}
}

// inflightWaiters is how many scrapes wait for c's hl-smi run under way.
func inflightWaiters(c *gaudiCollector) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inflight == nil {
		return 0
	}
	return c.inflight.waiters
}

// TestGaudiRowWithoutIndex: a row whose index hl-smi prints unreadably is
// counted (bad_value, one a run) and matched by its bus_id, uuid or serial
// to a known device, served at that device's index; the other rows are
// served as ever. One such row made the whole output malformed and every
// device down (probe A PA5). A row no known device matches, or whose
// device's index another row now holds, is left out: never served at an
// index guessed, nor two devices at one index. Device 1 is uuid
// …-01-04-03, utilization 87 % (fixtures/scenarios/gaudi.yaml).
func TestGaudiRowWithoutIndex(t *testing.T) {
	full := string(loadScenarioTable(t))
	const uuid1 = `uuid="01P0-HL2080A0-15-B3B6AE52-01-04-03"`
	noIndex := func(cell string) string { return setCells(t, full, 1, map[string]string{"index": cell}) }
	for _, tc := range []struct {
		name   string
		tables []string // served in turn, the last twice
		// devices and down are the xpu_device_up series and how many are
		// 0; served says device 1 is up at gpu="1", its readings served.
		devices, down int
		served        bool
		warning       string // in the one warning about the index
	}{
		{"N/A", []string{full, noIndex("N/A")}, 8, 0, true, "gpu=1"},
		{"[N/A]", []string{full, noIndex("[N/A]")}, 8, 0, true, "gpu=1"},
		{"empty", []string{full, noIndex("")}, 8, 0, true, "gpu=1"},
		// Known by its uuid alone, bus_id and serial N/A.
		{"matched by uuid", []string{full, setCells(t, full, 1, map[string]string{"index": "N/A", "bus_id": "N/A", "serial": "N/A"})}, 8, 0, true, "gpu=1"},
		// Never listed with an index: no device to take one from.
		{"never known", []string{noIndex("N/A")}, 7, 0, false, "bus_id=0000:"},
		// Device 2 is listed at index 1 now: device 1, at 1 before, is
		// left out and reported down.
		{"index held by another row", []string{full, setCells(t, noIndex("N/A"), 2, map[string]string{"index": "1"})}, 8, 1, false, "bus_id=0000:"},
		// Nothing names the row: device 1 is not listed, not taken by
		// elimination.
		{"no name either", []string{full, setCells(t, full, 1, map[string]string{"index": "N/A", "bus_id": "N/A", "uuid": "N/A", "serial": "N/A"})}, 8, 1, false, `bus_id=""`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, logs := gaudiRuns(t, tc.tables...)
			if n, down := seriesCount(out, "xpu_device_up"), gaudiDown(out); n != tc.devices || down != tc.down {
				t.Errorf("%d devices, %d down; want %d, %d down:\n%s", n, down, tc.devices, tc.down, grepLines(out, "xpu_device_up{"))
			}
			if !strings.Contains(out, `xpu_scrape_collector_success{collector="gaudi"} 1`) {
				t.Error("the collector fails")
			}
			check, absent := oracleChecks(out)
			if tc.served {
				check(t, "xpu_device_up", 1, `gpu="1"`, uuid1)
				check(t, "xpu_utilization_ratio", 0.87, `gpu="1"`, uuid1)
			} else {
				absent(t, "xpu_utilization_ratio", uuid1)
			}
			// Every other device is served: device 0's utilization is 77 %.
			check(t, "xpu_utilization_ratio", 0.77, `gpu="0"`)
			// The bad index in each of the last table's two runs.
			check(t, "xpu_hlsmi_errors_total", 2, `reason="bad_value"`)
			check(t, "xpu_hlsmi_errors_total", 0, `reason="malformed"`)
			warning := regexp.MustCompile(`(?m)^.*an index that cannot be read.*$`).FindAllString(logs, -1)
			if len(warning) != 1 || !strings.Contains(warning[0], tc.warning) {
				t.Errorf("%d warnings about the index, want 1 with %s:\n%s", len(warning), tc.warning, logs)
			}
		})
	}
}

// TestGaudiNamelessRowTiedByElimination: hl-smi prints N/A for Gaudi 1's
// bus_id; the driver has three compute nodes and the other two rows name
// theirs, so Gaudi 1 is the node at 0000:29:00.0, and its processes are
// its own (probe I, PI3, PI4). By hand: Gaudi 2's list is whole, so
// a.service, its sole process's unit, is its owner with its 0.8; Gaudi 1
// is held by pod p1 and by hl-qual.service, a host daemon: the pod has
// the device (allocated 1) but none of its utilization, as where bus_id
// is printed (a pod beside a host daemon gets none).
func TestGaudiNamelessRowTiedByElimination(t *testing.T) {
	s, err := demo.Parse([]byte(`node: gna
defaults: {vendor: gaudi, model: HL-225, memory_total: 96GiB, power_limit_watts: 600, metrics: {utilization: 0.5, memory_used: 20GiB, temperature: 40, power: 300}}
devices:
  - {serial: AN1, pci_bus_id: "0000:19:00.0", metrics: {utilization: 0.6}}
  - serial: AN2
    pci_bus_id: "0000:29:00.0"
    metrics: {utilization: 0.7}
    processes: [{pid: 4101, pod: g/p1, command: python3}, {pid: 4102, unit: hl-qual.service, command: hl_qual}]
  - {serial: AN3, pci_bus_id: "0000:39:00.0", metrics: {utilization: 0.8}, processes: [{pid: 4201, unit: a.service, command: a}]}
kubernetes:
  pods:
    - {namespace: g, name: p1, uid: 9f000000-0000-4000-8000-0000000000a1, containers: [{name: main, devices: [{resource: habana.ai/gaudi, ids: [AN2]}]}]}
  allocatable:
    - {resource: habana.ai/gaudi, ids: [AN1, AN2, AN3]}
`))
	if err != nil {
		t.Fatal(err)
	}
	gaudiTableWith(t, s, 1, map[string]string{"bus_id": "N/A"})
	e := newAttributedExporterFor(t, s, func(c *Config) { c.HLSMIPath = selfPath(t) })
	out := scrapeText(t, e, 10*time.Second)
	check, absent := oracleChecks(out)
	check(t, "xpu_device_owners", 1, `gpu="2"`)
	check(t, "xpu_workload_utilization_ratio", 0.8, `gpu="2"`, `unit="a.service"`)
	check(t, "xpu_device_owners", 1, `gpu="1"`)
	check(t, "xpu_workload_allocated_devices", 1, `gpu="1"`, `pod="p1"`)
	absent(t, "xpu_workload_utilization_ratio", `gpu="1"`, `pod="p1"`)
}

// TestGaudiNamelessRowsLeaveNamedListsWhole: hl-smi prints N/A for the
// bus_id of Gaudis 0 and 1, whose processes (pods p0, p1) hold nodes sysfs
// places at 0000:19:00.0 and 0000:29:00.0, addresses no row names: they
// are those two rows' (which is which is not known), never Gaudi 2's,
// whose bus_id is printed. By hand: Gaudi 2's list is whole, so a.service
// is its owner with its 0.8; Gaudis 0 and 1 have unknown owners
// (xpu_device_owners left out) (probe J, PJ3: Gaudi 2 lost its owner).
func TestGaudiNamelessRowsLeaveNamedListsWhole(t *testing.T) {
	s, err := demo.Parse([]byte(`node: gna3
defaults: {vendor: gaudi, model: HL-225, memory_total: 96GiB, power_limit_watts: 600, metrics: {utilization: 0.5, memory_used: 20GiB, temperature: 40, power: 300}}
devices:
  - {serial: AN1, pci_bus_id: "0000:19:00.0", metrics: {utilization: 0.6}, processes: [{pid: 4001, unit: p0.service, command: a}]}
  - {serial: AN2, pci_bus_id: "0000:29:00.0", metrics: {utilization: 0.7}, processes: [{pid: 4101, unit: p1.service, command: a}]}
  - {serial: AN3, pci_bus_id: "0000:39:00.0", metrics: {utilization: 0.8}, processes: [{pid: 4201, unit: a.service, command: a}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	path := gaudiTable(t, s)
	table := setCells(t, setCells(t, string(s.HLSMITable(testStart, testNow)), 0, map[string]string{"bus_id": "N/A"}), 1, map[string]string{"bus_id": "N/A"})
	if err := os.WriteFile(path, []byte(table), 0o644); err != nil {
		t.Fatal(err)
	}
	e := newAttributedExporterFor(t, s, func(c *Config) { c.HLSMIPath = selfPath(t) })
	check, absent := oracleChecks(scrapeText(t, e, 10*time.Second))
	check(t, "xpu_device_owners", 1, `gpu="2"`)
	check(t, "xpu_workload_utilization_ratio", 0.8, `gpu="2"`, `unit="a.service"`)
	absent(t, "xpu_device_owners", `gpu="0"`)
	absent(t, "xpu_device_owners", `gpu="1"`)
}
