package collector

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xpu-exporter/xpu_exporter/attribution"
	"github.com/xpu-exporter/xpu_exporter/demo"
	"github.com/xpu-exporter/xpu_exporter/internal/syncbuf"
	"github.com/xpu-exporter/xpu_exporter/vendors/reading"
)

// Every expected value below is worked out by hand from the raw inputs of
// fixtures/scenarios/sharing.yaml, the arithmetic in a comment: none is read
// from a golden file or produced by the code under test.

type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *testClock) set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

// scrapeSharing scrapes the sharing node twice, at testNow (5400 s after
// boot: the previous scrape) and 15 s later, and returns the second scrape:
// its window is the fifteen 1 s driver periods ending 5401 … 5415 s after
// boot.
// Options alter the scenario first.
func scrapeSharing(t *testing.T, opts ...func(*demo.Scenario)) string {
	t.Helper()
	s, err := demo.Load(filepath.Join("..", "fixtures", "scenarios", "sharing.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range opts {
		o(s)
	}
	return secondScrape(t, s)
}

// secondScrape is the second scrape of s with attribution, 15 s of the
// simulated clock after the first: the window of per-process samples and
// GPM's readings is those 15 s.
func secondScrape(t *testing.T, s *demo.Scenario) string {
	t.Helper()
	clk := &testClock{t: testNow}
	e := newAttributedExporterFor(t, s, func(c *Config) {
		c.NVML, c.Now = s.NVML(testStart, clk.now), clk.now
	})
	scrapeText(t, e, 10*time.Second)
	clk.set(testNow.Add(15 * time.Second))
	return scrapeText(t, e, 10*time.Second)
}

// pushText gathers e as an OTLP push does (BindPush), in the text format.
func pushText(t *testing.T, e *Exporter) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return gatherText(t, e.BindPush(ctx))
}

// TestPushLeavesTheWindowToScrapes: an OTLP push between two scrapes reads
// the time since the first and leaves the second scrape's window whole. A
// push moved it as a scrape does, so /metrics changed with the push
// interval (found by probing: a GPU busy half the time read 1.0 with
// pushes every second). With no scrape for five minutes, pushes move it.
func TestPushLeavesTheWindowToScrapes(t *testing.T) {
	gpu := `uuid="GPU-5a000000-0000-4000-8000-000000000000"`
	s := loadScenario(t, "sharing")
	for _, tc := range []struct {
		name string
		// read is each read's kind, "scrape" or "push", and its time after
		// testNow; the last one's value is checked.
		reads []struct {
			kind  string
			after time.Duration
		}
		want float64
	}{{
		// Prometheus scraping (at 5385 and 5400 s): the next scrape's window
		// is 5400 … 5415 s whatever the push at 5405 s did: as in TestSharingOracles, 14 × (0.6 + 0.3) + 1 × 0.3
		// = 12.9 over 15 s → 0.86. Moved by the push, it was 5405 … 5415:
		// 9 × 0.9 + 1 × 0.3 = 8.4 over 10 s → 0.84.
		name: "scrape, push, scrape",
		reads: []struct {
			kind  string
			after time.Duration
		}{{"scrape", -15 * time.Second}, {"scrape", 0}, {"push", 5 * time.Second}, {"scrape", 15 * time.Second}},
		want: 0.86,
	}, {
		// The push at 5405 s covers the time since the scrape at 5400 s:
		// 5 periods, all busy for ts-a, 5 × 0.9 / 5 → 0.9.
		name: "scrape, push",
		reads: []struct {
			kind  string
			after time.Duration
		}{{"scrape", -15 * time.Second}, {"scrape", 0}, {"push", 5 * time.Second}},
		want: 0.9,
	}, {
		// One request alone (someone's curl at 5400 s) is no Prometheus
		// scraping: the pushes at 5405 and 5415 s move the window, and the
		// second covers 5405 … 5415 s: 9 × 0.9 + 1 × 0.3 = 8.4 over 10 s →
		// 0.84.
		name: "one request, pushes",
		reads: []struct {
			kind  string
			after time.Duration
		}{{"scrape", 0}, {"push", 5 * time.Second}, {"push", 15 * time.Second}},
		want: 0.84,
	}, {
		// Pushes alone move the window: 5400 … 5415 s, 0.86 again.
		name: "pushes alone",
		reads: []struct {
			kind  string
			after time.Duration
		}{{"push", 0}, {"push", 15 * time.Second}},
		want: 0.86,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			clk := &testClock{t: testNow}
			e := newAttributedExporterFor(t, s, func(c *Config) {
				c.NVML, c.Now = s.NVML(testStart, clk.now), clk.now
			})
			var out string
			for _, r := range tc.reads {
				clk.set(testNow.Add(r.after))
				if r.kind == "push" {
					out = pushText(t, e)
				} else {
					out = scrapeText(t, e, 10*time.Second)
				}
			}
			check, _ := oracleChecks(out)
			check(t, "xpu_utilization_ratio", tc.want, gpu)
		})
	}
}

// TestFirstScrapeAfterPushes: pushes with no scraper move their own
// window, never the scrapes': a scrape's window starts where the previous
// scrape's ended, or at the warm-up for the first, as with the bridge off.
// Found by probing (probe2-regr D3): with pushes every second, the first
// scrape after start read the last second alone, 1.00 against 0.62 with
// the bridge off.
func TestFirstScrapeAfterPushes(t *testing.T) {
	gpu := `uuid="GPU-5a000000-0000-4000-8000-000000000000"`
	s := loadScenario(t, "sharing")
	for _, first := range []string{"warm-up", "one request"} {
		t.Run(first, func(t *testing.T) {
			clk := &testClock{t: testNow}
			e := newAttributedExporterFor(t, s, func(c *Config) {
				c.NVML, c.Now = s.NVML(testStart, clk.now), clk.now
			})
			// At 5400 s after boot: Start's warm-up read, or someone's
			// curl of /metrics, which is no Prometheus scraping either.
			if first == "warm-up" {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				e.snapshots.get(ctx, moveScrape)
			} else {
				scrapeText(t, e, 10*time.Second)
			}
			clk.set(testNow.Add(5 * time.Second))
			pushText(t, e)
			// The pushes still move their own window: this one covers
			// 5405 … 5415 s, 9 × (0.6 + 0.3) + 1 × 0.3 = 8.4 over 10 s →
			// 0.84 (ts-a busy 14 s of every 15 from boot, 5400 = 360 × 15;
			// ts-b 0.3 throughout).
			clk.set(testNow.Add(15 * time.Second))
			check, _ := oracleChecks(pushText(t, e))
			check(t, "xpu_utilization_ratio", 0.84, gpu)
			// The scrape at 5420 s covers 5400 … 5420 s, whatever the
			// pushes did: ts-a busy in 5400 … 5414 and 5415 … 5420, 19
			// periods; (19 × 0.9 + 1 × 0.3) / 20 = 17.4 / 20 → 0.87, split
			// 19 × 0.6 / 20 = 0.57 (ts-a) and 0.3 (ts-b). From the last
			// push it would be 5 × 0.9 / 5 → 0.9.
			clk.set(testNow.Add(20 * time.Second))
			check, _ = oracleChecks(scrapeText(t, e, 10*time.Second))
			check(t, "xpu_utilization_ratio", 0.87, gpu)
			check(t, "xpu_workload_utilization_ratio", 0.57, gpu, `pod="ts-a"`)
			check(t, "xpu_workload_utilization_ratio", 0.3, gpu, `pod="ts-b"`)
		})
	}
}

func TestSharingOracles(t *testing.T) {
	out := scrapeSharing(t)
	const gib = 1 << 30
	check, absent := oracleChecks(out)

	t.Run("time-slicing, one pod busy earlier and idle now", func(t *testing.T) {
		gpu := `uuid="GPU-5a000000-0000-4000-8000-000000000000"`
		// ts-a: 0.6 while busy, duty 14 s of every 15 s from boot. The
		// periods' middles are 5400.5 … 5414.5 s; 5400 = 360 × 15, so it is
		// busy in the first 14 and idle in the last: 14 × 0.6 / 15 = 0.56.
		// ts-b: 0.3 throughout.
		// Device: each period is as busy as both together: 14 × (0.6 + 0.3)
		// + 1 × 0.3 = 12.9 over 15 s → 0.86.
		check(t, "xpu_utilization_ratio", 0.86, gpu)
		// Split in proportion to 0.56 : 0.3 of 0.86: 0.56 and 0.3. Only
		// the last period would give ts-a 0.
		check(t, "xpu_workload_utilization_ratio", 0.56, gpu, `pod="ts-a"`)
		check(t, "xpu_workload_utilization_ratio", 0.3, gpu, `pod="ts-b"`)
		check(t, "xpu_process_utilization_ratio", 0.56, gpu, `pid="2001"`)
		// Two replicas advertised, one each: 1/2.
		check(t, "xpu_workload_allocated_devices", 0.5, gpu, `pod="ts-a"`)
		check(t, "xpu_workload_memory_used_bytes", 20*gib, gpu, `pod="ts-a"`)
		check(t, "xpu_workload_memory_used_bytes", 10*gib, gpu, `pod="ts-b"`)
	})

	t.Run("MPS clients and the host's MPS server", func(t *testing.T) {
		gpu := `uuid="GPU-5a000000-0000-4000-8000-000000000001"`
		// The clients are only in NVML's MPS list. Device: 0.5 + 0.25 = 0.75.
		check(t, "xpu_utilization_ratio", 0.75, gpu)
		check(t, "xpu_workload_utilization_ratio", 0.5, gpu, `pod="mps-a"`)
		check(t, "xpu_workload_utilization_ratio", 0.25, gpu, `pod="mps-b"`)
		// Two MPS replicas advertised, one each.
		check(t, "xpu_workload_allocated_devices", 0.5, gpu, `pod="mps-a"`)
		check(t, "xpu_workload_memory_used_bytes", 6*gib, gpu, `pod="mps-a"`)
		check(t, "xpu_workload_memory_used_bytes", 2*gib, gpu, `pod="mps-b"`)
		// The server runs for no pod: its 512 MiB and no load are apart.
		check(t, "xpu_workload_memory_used_bytes", 512<<20, gpu, `workload_kind="unattributed"`)
		check(t, "xpu_workload_utilization_ratio", 0, gpu, `workload_kind="unattributed"`)
	})

	t.Run("MIG with compute instances, handles out of instance order", func(t *testing.T) {
		// Handle 0 is GPU instance 2: the index strategy's "2:0" is it.
		whole := `uuid="MIG-5a000000-0002-4000-8000-000000000002"`
		check(t, "xpu_workload_allocated_devices", 2.0/7, whole, `pod="mig-whole"`) // 2g: 2 of 7 slices
		// GPM samples GPU instance 2 (graphics activity 0.6) at both scrapes.
		check(t, "xpu_utilization_ratio", 0.6, whole)
		// GPU instance 1 (3 slices) holds two compute instances of 1 and 2
		// slices: 1/7 and 2/7 of the GPU, not 3/7 each.
		check(t, "xpu_workload_allocated_devices", 1.0/7, `uuid="MIG-5a000000-0002-4000-8000-000000000010"`, `pod="ci-a"`)
		check(t, "xpu_workload_allocated_devices", 2.0/7, `uuid="MIG-5a000000-0002-4000-8000-000000000011"`, `pod="ci-b"`)
		// The same shares of the GPU, as facts of the instances, whoever
		// holds them: 2/7, 1/7 and 2/7.
		check(t, "xpu_partition_share_ratio", 2.0/7, whole)
		check(t, "xpu_partition_share_ratio", 1.0/7, `uuid="MIG-5a000000-0002-4000-8000-000000000010"`)
		check(t, "xpu_partition_share_ratio", 2.0/7, `uuid="MIG-5a000000-0002-4000-8000-000000000011"`)
		absent(t, "xpu_partition_share_ratio", `pod=`)
		absent(t, "xpu_partition_share_ratio", `,uuid="GPU-`)
		// GPM measures the GPU instance they share: neither has a reading of
		// its own.
		absent(t, "xpu_utilization_ratio", `mig_profile="1c.3g.40gb"`)
		absent(t, "xpu_utilization_ratio", `mig_profile="2c.3g.40gb"`)
		check(t, "xpu_workload_memory_used_bytes", 7*gib, `pod="ci-b"`)
	})

	t.Run("one pod, two containers on one GPU", func(t *testing.T) {
		gpu := `uuid="GPU-5a000000-0000-4000-8000-000000000003"`
		// Each process runs in its own container (cgroup container ID
		// against the Pods API's container statuses). Device: 0.3 + 0.1.
		check(t, "xpu_utilization_ratio", 0.4, gpu)
		check(t, "xpu_workload_utilization_ratio", 0.3, gpu, `container="a"`)
		check(t, "xpu_workload_utilization_ratio", 0.1, gpu, `container="b"`)
		check(t, "xpu_workload_memory_used_bytes", 3*gib, gpu, `container="a"`)
		check(t, "xpu_workload_memory_used_bytes", 1*gib, gpu, `container="b"`)
	})

	t.Run("host daemon on a pod's GPU", func(t *testing.T) {
		gpu := `uuid="GPU-5a000000-0000-4000-8000-000000000004"`
		// Device: 0.5 (pod) + 0.1 (daemon) = 0.6; the daemon's part is apart.
		check(t, "xpu_utilization_ratio", 0.6, gpu)
		check(t, "xpu_workload_utilization_ratio", 0.5, gpu, `pod="excl"`)
		check(t, "xpu_workload_utilization_ratio", 0.1, gpu, `workload_kind="unattributed"`)
		check(t, "xpu_workload_allocated_devices", 1, gpu, `pod="excl"`)
		check(t, "xpu_workload_memory_used_bytes", 10*gib, gpu, `pod="excl"`)
		check(t, "xpu_workload_memory_used_bytes", 1*gib, gpu, `workload_kind="unattributed"`)
	})

	t.Run("a GPU in MIG mode carries no instance owner's labels", func(t *testing.T) {
		// GPU 5 has one instance in use, by solo: the GPU's own series must
		// not say solo owns the GPU.
		absent(t, "xpu_device_up", `,uuid="GPU-5a000000-0000-4000-8000-000000000005"`, `pod=`)
		check(t, "xpu_device_up", 1, `,uuid="GPU-5a000000-0000-4000-8000-000000000005"`)
		// solo holds "5:1", the index strategy's name for handle 1 of GPU
		// 5; handle 0 is empty, so it is the first instance listed, not the
		// second (which a count of the instances found would make it).
		check(t, "xpu_workload_allocated_devices", 3.0/7, `pod="solo"`, `uuid="MIG-5a000000-0005-4000-8000-000000000001"`) // 3g: 3 of 7
		absent(t, "xpu_workload_allocated_devices", `pod="solo"`, `uuid="MIG-5a000000-0005-4000-8000-000000000002"`)
		// solo is the instance's sole owner; its memory is its process's
		// 8 GiB, as for every owner, not the instance's reading (0 here).
		check(t, "xpu_workload_memory_used_bytes", 8*gib, `pod="solo"`)
	})
}

// TestSharingWithARefusedProcessList: a process list NVML refuses
// (NO_PERMISSION, "if the user doesn't have permission to perform this
// operation"; or ERROR_UNKNOWN) may hold the processes of any owner, so the
// device's split is left out rather than made from the other lists; one
// the GPU does not support (NOT_SUPPORTED) holds none, and the split
// stands.
func TestSharingWithARefusedProcessList(t *testing.T) {
	for _, refusal := range []string{"no_permission", "errors"} {
		t.Run(refusal, func(t *testing.T) {
			out := scrapeSharing(t, func(s *demo.Scenario) {
				s.Devices[0].Faults.Unsupported = append(s.Devices[0].Faults.Unsupported, "processes_graphics")
				f := &s.Devices[1].Faults
				if refusal == "errors" {
					f.Errors = append(f.Errors, "processes_graphics")
				} else {
					f.NoPermission = append(f.NoPermission, "processes_graphics")
				}
			})
			const gib = 1 << 30
			check, absent := oracleChecks(out)
			// GPU 0 as in TestSharingOracles: 0.86 split 0.56 : 0.3, 20 and 10 GiB.
			ts := `uuid="GPU-5a000000-0000-4000-8000-000000000000"`
			check(t, "xpu_workload_utilization_ratio", 0.56, ts, `pod="ts-a"`)
			check(t, "xpu_workload_utilization_ratio", 0.3, ts, `pod="ts-b"`)
			check(t, "xpu_workload_memory_used_bytes", 20*gib, ts, `pod="ts-a"`)
			check(t, "xpu_workload_memory_used_bytes", 10*gib, ts, `pod="ts-b"`)
			// GPU 1: the MPS clients are still read from the MPS list, but the
			// graphics list could hold anyone's processes.
			mps := `uuid="GPU-5a000000-0000-4000-8000-000000000001"`
			check(t, "xpu_utilization_ratio", 0.75, mps)
			check(t, "xpu_workload_allocated_devices", 0.5, mps, `pod="mps-a"`)
			absent(t, "xpu_workload_utilization_ratio", mps)
			absent(t, "xpu_workload_memory_used_bytes", mps)
		})
	}
}

// TestRefusedProcessListIsToldOnce: the left-out split of
// TestSharingWithARefusedProcessList says why. A refusal (NO_PERMISSION, as
// benign as NOT_SUPPORTED for other readings) is counted under its call,
// and logged when it starts and when it ends, not at every scrape.
func TestRefusedProcessListIsToldOnce(t *testing.T) {
	s, err := demo.Load(filepath.Join("..", "fixtures", "scenarios", "sharing.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	f := &s.Devices[1].Faults
	f.NoPermission = append(f.NoPermission, "processes_graphics")
	clk := &testClock{t: testNow}
	var logs syncbuf.Buffer
	e := newAttributedExporterFor(t, s, func(c *Config) {
		c.NVML, c.Now = s.NVML(testStart, clk.now), clk.now
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	mps := `uuid="GPU-5a000000-0000-4000-8000-000000000001"`
	refused := []string{`call="GetGraphicsRunningProcesses"`, `error="ERROR_NO_PERMISSION"`}
	for i := 1; i <= 3; i++ {
		clk.set(testNow.Add(time.Duration(i) * 15 * time.Second))
		out := scrapeText(t, e, 10*time.Second)
		// One read of the device per scrape, one refusal per read.
		if v := sample(t, out, "xpu_nvml_errors_total", refused...); v != float64(i) {
			t.Errorf("scrape %d: xpu_nvml_errors_total%v = %v, want %d", i, refused, v, i)
		}
		if strings.Contains(out, "xpu_workload_memory_used_bytes{"+mps) {
			t.Errorf("scrape %d: owner memory of the refused GPU is served", i)
		}
	}
	if n := strings.Count(logs.String(), "NVML did not list all processes"); n != 1 {
		t.Errorf("%d warnings over three refusals, want 1:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), `gpu=1 uuid=GPU-5a000000-0000-4000-8000-000000000001`) {
		t.Errorf("the warning does not name GPU 1:\n%s", logs.String())
	}

	f.NoPermission = nil
	for i := 4; i <= 5; i++ {
		clk.set(testNow.Add(time.Duration(i) * 15 * time.Second))
		out := scrapeText(t, e, 10*time.Second)
		if v := sample(t, out, "xpu_nvml_errors_total", refused...); v != 3 {
			t.Errorf("scrape %d: xpu_nvml_errors_total%v = %v, want still 3", i, refused, v)
		}
		if !strings.Contains(out, "xpu_workload_memory_used_bytes{") || !strings.Contains(out, mps) {
			t.Errorf("scrape %d: owner memory of GPU 1 not back", i)
		}
	}
	if n := strings.Count(logs.String(), "NVML lists all processes of an NVIDIA device again"); n != 1 {
		t.Errorf("%d recoveries logged, want 1:\n%s", n, logs.String())
	}
}

// TestGKEName: GKE names a GPU by its minor and a GPU instance by its
// GPU's minor and its ID; the pod holding it gets compute instance 0
// (mig.go mounts "ci0"), so compute instance 1 of the same GPU instance
// has no name, nor has an instance whose GPU instance ID was not read.
func TestGKEName(t *testing.T) {
	gpu := &Device{Vendor: "nvidia", UUID: "GPU-a", Minor: reading.Some(3)}
	minors := nvidiaMinors([]*Device{gpu})
	mig := func(instance string, ci int) *Device {
		return &Device{Vendor: "nvidia", UUID: "MIG-x", MIG: &MIGInstance{ParentUUID: "GPU-a", Instance: instance, ComputeInstance: ci}}
	}
	for _, tc := range []struct {
		d    *Device
		want string
	}{
		{gpu, "nvidia3"},
		{mig("1", 0), "nvidia3/gi1"},
		{mig("1", 1), ""},
		{mig("", 0), ""},
		{&Device{Vendor: "nvidia", UUID: "GPU-b"}, ""},
		{&Device{Vendor: "amd", UUID: "aa", Minor: reading.Some(3)}, ""},
	} {
		if got := gkeName(tc.d, minors); got != tc.want {
			t.Errorf("gkeName(%+v) = %q, want %q", tc.d.MIG, got, tc.want)
		}
	}
}

// TestSidecarOnASharedGPU: pod "two" of the sharing node with container a
// a sidecar (a restartable init container, whose status the Pods API gives
// in initContainerStatuses). Its process is matched to it as an app
// container's is, so GPU 3 splits as in TestSharingOracles: a 0.3 and
// 3 GiB, b 0.1 and 1 GiB. The split was left out for the whole GPU (found
// by probing): the sidecar's process was in no known container.
func TestSidecarOnASharedGPU(t *testing.T) {
	out := scrapeSharing(t, func(s *demo.Scenario) {
		for i, p := range s.Kubernetes.Pods {
			if p.Name == "two" {
				s.Kubernetes.Pods[i].Containers[0].Sidecar = true
			}
		}
	})
	check, _ := oracleChecks(out)
	gpu := `uuid="GPU-5a000000-0000-4000-8000-000000000003"`
	check(t, "xpu_workload_utilization_ratio", 0.3, gpu, `container="a"`)
	check(t, "xpu_workload_utilization_ratio", 0.1, gpu, `container="b"`)
	check(t, "xpu_workload_memory_used_bytes", 3<<30, gpu, `container="a"`)
	check(t, "xpu_workload_memory_used_bytes", 1<<30, gpu, `container="b"`)
	check(t, "xpu_process_memory_used_bytes", 3<<30, gpu, `pid="2301"`, `container="a"`, `pod="two"`)
}

// TestEphemeralContainerOnASharedGPU: a kubectl debug container of pod
// "two" (its status in ephemeralContainerStatuses alone) runs a process
// on GPU 3, busy 0.05 with 512 MiB. It holds no device, so its usage is
// apart: device 0.3 + 0.1 + 0.05 = 0.45, a 0.3, b 0.1, unattributed 0.05;
// memory 3 GiB, 1 GiB, 512 MiB. The split was left out for the whole GPU
// (found by probing): the process was in no known container.
func TestEphemeralContainerOnASharedGPU(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "fixtures", "scenarios", "sharing.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	for old, add := range map[string]string{
		"      - {pid: 2302, pod: ml/two, container: b, memory_used: 1GiB, utilization: 0.1}\n":                                   "      - {pid: 2303, pod: ml/two, container: debugger, memory_used: 512MiB, utilization: 0.05}\n",
		`        - {name: b, devices: [{resource: nvidia.com/gpu, ids: ["GPU-5a000000-0000-4000-8000-000000000003::1"]}]}` + "\n": "        - {name: debugger, ephemeral: true}\n",
	} {
		if !strings.Contains(text, old) {
			t.Fatalf("sharing.yaml has no line %q", old)
		}
		text = strings.Replace(text, old, old+add, 1)
	}
	s, err := demo.Parse([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	check, _ := oracleChecks(secondScrape(t, s))
	gpu := `uuid="GPU-5a000000-0000-4000-8000-000000000003"`
	check(t, "xpu_utilization_ratio", 0.45, gpu)
	check(t, "xpu_workload_utilization_ratio", 0.3, gpu, `container="a"`)
	check(t, "xpu_workload_utilization_ratio", 0.1, gpu, `container="b"`)
	check(t, "xpu_workload_utilization_ratio", 0.05, gpu, `workload_kind="unattributed"`)
	check(t, "xpu_workload_memory_used_bytes", 3<<30, gpu, `container="a"`)
	check(t, "xpu_workload_memory_used_bytes", 512<<20, gpu, `workload_kind="unattributed"`)
}

func TestSlurmSharingOracles(t *testing.T) {
	s, err := demo.Load(filepath.Join("..", "fixtures", "scenarios", "sharing-slurm.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	out := secondScrape(t, s)
	check, _ := oracleChecks(out)
	gpu0 := `uuid="GPU-`
	// GPU 0: job 10 holds it through GRES; job 11's process on it makes job
	// 11 an owner with none of the allocation. Device: 0.4 + 0.2 = 0.6,
	// split 0.4 : 0.2.
	check(t, "xpu_utilization_ratio", 0.6, gpu0, `gpu="0"`)
	check(t, "xpu_workload_utilization_ratio", 0.4, `gpu="0"`, `slurm_job_id="10"`, `slurm_account="physics"`)
	check(t, "xpu_workload_utilization_ratio", 0.2, `gpu="0"`, `slurm_job_id="11"`, `slurm_account="chem"`)
	check(t, "xpu_workload_allocated_devices", 1, `gpu="0"`, `slurm_job_id="10"`)
	check(t, "xpu_workload_memory_used_bytes", 12<<30, `gpu="0"`, `slurm_job_id="10"`)
	check(t, "xpu_workload_memory_used_bytes", 4<<30, `gpu="0"`, `slurm_job_id="11"`)
	// GRES index 2 is GPU 1's second MIG handle (GPU instance 1, 3g: 3/7),
	// not GPU 2. Index 3 is GPU 2, job 13's, idle: 0 of its 0.
	check(t, "xpu_workload_allocated_devices", 3.0/7, `mig_instance="1"`, `slurm_job_id="12"`)
	check(t, "xpu_workload_memory_used_bytes", 9<<30, `mig_instance="1"`, `slurm_job_id="12"`)
	check(t, "xpu_workload_allocated_devices", 1, `gpu="2"`, `slurm_job_id="13"`)
	check(t, "xpu_workload_utilization_ratio", 0, `gpu="2"`, `slurm_job_id="13"`)
}

// TestGKEOracles scrapes fixtures/scenarios/gke.yaml, whose pods hold
// devices under the names GKE's device plugin gives them ("nvidia<minor>",
// "nvidia<minor>/gi<id>", "/vgpu<n>" replicas), with two clients per GPU.
func TestGKEOracles(t *testing.T) {
	s, err := demo.Load(filepath.Join("..", "fixtures", "scenarios", "gke.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	out := secondScrape(t, s)
	check, absent := oracleChecks(out)
	const gib = 1 << 30
	// GPU 0 is /dev/nvidia1: "nvidia1/vgpu<n>" are its replicas. Device:
	// 0.5 + 0.2 = 0.7, split 0.5 : 0.2; one of two replicas each.
	gpu0 := `uuid="GPU-6b000000-0000-4000-8000-000000000000"`
	check(t, "xpu_utilization_ratio", 0.7, gpu0)
	check(t, "xpu_workload_utilization_ratio", 0.5, gpu0, `pod="ts-a"`)
	check(t, "xpu_workload_utilization_ratio", 0.2, gpu0, `pod="ts-b"`)
	check(t, "xpu_workload_allocated_devices", 0.5, gpu0, `pod="ts-a"`)
	check(t, "xpu_workload_allocated_devices", 0.5, gpu0, `pod="ts-b"`)
	check(t, "xpu_workload_memory_used_bytes", 8*gib, gpu0, `pod="ts-a"`)
	check(t, "xpu_workload_memory_used_bytes", 4*gib, gpu0, `pod="ts-b"`)
	// GPU 1 is /dev/nvidia0; train holds one of its two replicas: 1/2,
	// and as its sole owner carries its labels on the device's series.
	gpu1 := `uuid="GPU-6b000000-0000-4000-8000-000000000001"`
	check(t, "xpu_workload_allocated_devices", 0.5, gpu1, `pod="train"`)
	check(t, "xpu_utilization_ratio", 0.7, gpu1, `pod="train"`)
	absent(t, "xpu_workload_allocated_devices", gpu0, `pod="train"`)
	// GPU 2's GPU instances are 3g.40gb, 3 of 7 slices, each advertised as
	// two replicas: 3/7 × 1/2 = 3/14 for each holder.
	gi1 := `uuid="MIG-6b000000-0002-4000-8000-000000000001"`
	gi2 := `uuid="MIG-6b000000-0002-4000-8000-000000000002"`
	check(t, "xpu_workload_allocated_devices", 3.0/14, gi1, `pod="mig-a"`)
	check(t, "xpu_workload_allocated_devices", 3.0/14, gi2, `pod="mig-b"`)
	check(t, "xpu_workload_allocated_devices", 3.0/14, gi2, `pod="mig-c"`)
	check(t, "xpu_workload_memory_used_bytes", 6*gib, gi1, `pod="mig-a"`)
	check(t, "xpu_workload_memory_used_bytes", 3*gib, gi2, `pod="mig-b"`)
	check(t, "xpu_workload_memory_used_bytes", 2*gib, gi2, `pod="mig-c"`)
	// GPM's 0.4 of GPU instance 1 is its one holder's.
	check(t, "xpu_utilization_ratio", 0.4, gi1, `pod="mig-a"`)
	if !strings.Contains(out, "\nxpu_attribution_unknown_device_ids 0\n") {
		t.Error("some GKE device name was not understood: xpu_attribution_unknown_device_ids is not 0")
	}
}

// TestSlurmEdgesOracles scrapes fixtures/scenarios/slurm-edges.yaml, a
// Slurm 24.05 node with the cases a black-box probe found mis-attributed,
// through the production code from the scontrol and squeue stand-ins on.
func TestSlurmEdgesOracles(t *testing.T) {
	s, err := demo.Load(filepath.Join("..", "fixtures", "scenarios", "slurm-edges.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	out := secondScrape(t, s)
	check, absent := oracleChecks(out)
	// Slurm answered every question, "Invalid job id" for job 125
	// included: the source is up and every GPU has its count of owners.
	check(t, "xpu_attribution_source_up", 1, `source="slurm"`)
	// No record refused, each reason served at 0.
	for _, reason := range []string{"other_jobs_record", "too_large", "forged_lines", "incomplete"} {
		check(t, "xpu_attribution_slurm_jobs_refused", 0, `reason="`+reason+`"`)
	}
	for gpu, n := range []float64{1, 1, 2, 1, 1, 1, 1} {
		check(t, "xpu_device_owners", n, fmt.Sprintf(`gpu="%d"`, gpu))
	}
	// GPU 0: job 123's GRES. Bob's session process claims the job in its
	// environment, but is in no job cgroup: its 0.2 and 3 GiB are
	// unattributed, the job's task has 0.4 and 6 GiB.
	check(t, "xpu_workload_allocated_devices", 1, `gpu="0"`, `slurm_job_id="123"`, `slurm_user="alice"`)
	// Job 21845 is task 1 of array 21845 (the task with the array's own
	// ID): its info series names the array, by which a whole array's
	// GPU-hours are summed; job 123 is no array's task.
	check(t, "xpu_workload_info", 1, `slurm_job_id="21845"`, `slurm_array_job_id="21845"`)
	absent(t, "xpu_workload_info", `slurm_job_id="123"`, `slurm_array_job_id=`)
	check(t, "xpu_workload_utilization_ratio", 0.4, `gpu="0"`, `slurm_job_id="123"`)
	check(t, "xpu_workload_utilization_ratio", 0.2, `gpu="0"`, `workload_kind="unattributed"`)
	check(t, "xpu_workload_memory_used_bytes", 6<<30, `gpu="0"`, `slurm_job_id="123"`)
	check(t, "xpu_workload_memory_used_bytes", 3<<30, `gpu="0"`, `workload_kind="unattributed"`)
	// GPU 1: no GRES; bob's process, SLURM_JOB_ID=123 notwithstanding, is
	// bob's (his login sessions' slice; uid 1000, the scenario's first
	// user after root), the sole owner, whose labels the device carries.
	check(t, "xpu_utilization_ratio", 0.3, `gpu="1"`, `unit="user-1000.slice"`, `user="bob"`, `command="miner"`)
	absent(t, "xpu_utilization_ratio", `gpu="1"`, `slurm_job_id=`)
	// GPU 2: shards (24.05: shard:2(0/0,0/4,2/4,...)): job 205 2/4 = 0.5,
	// job 206 1/4 = 0.25; job 205's process has all 0.3 of the device.
	check(t, "xpu_workload_allocated_devices", 0.5, `gpu="2"`, `slurm_job_id="205"`)
	check(t, "xpu_workload_allocated_devices", 0.25, `gpu="2"`, `slurm_job_id="206"`)
	check(t, "xpu_workload_utilization_ratio", 0.3, `gpu="2"`, `slurm_job_id="205"`)
	check(t, "xpu_workload_utilization_ratio", 0, `gpu="2"`, `slurm_job_id="206"`)
	// GPU 3 in MIG mode without instances is GRES 3, whole; GPU 4 is
	// therefore GRES 4, job 21845's, whose labels come from the task
	// (21845_1) scontrol printed alone.
	check(t, "xpu_workload_allocated_devices", 1, `gpu="3"`, `slurm_job_id="207"`, `slurm_user="dave"`)
	check(t, "xpu_workload_allocated_devices", 1, `gpu="4"`, `slurm_job_id="21845"`, `slurm_user="erin"`)
	check(t, "xpu_utilization_ratio", 0.6, `gpu="4"`, `slurm_job_id="21845"`, `slurm_account="physics"`)
	// GPU 5: job 125, which Slurm forgot, labelled by its ID alone, with no
	// allocation.
	check(t, "xpu_utilization_ratio", 0.1, `gpu="5"`, `slurm_job_id="125"`)
	absent(t, "xpu_utilization_ratio", `gpu="5"`, `slurm_user=`)
	absent(t, "xpu_workload_allocated_devices", `gpu="5"`)
	// GPU 6: job 123's second task, on a GPU no GRES holds: the job's
	// usage (0.5), no allocated share; its GRES GPU is GPU 0.
	check(t, "xpu_workload_utilization_ratio", 0.5, `gpu="6"`, `slurm_job_id="123"`)
	absent(t, "xpu_workload_allocated_devices", `gpu="6"`)
}

// TestSlurmRefusedJobCounted: job 302's name breaks a line and writes a
// JOB_GRES= line of its own into its record, which is refused (see
// attribution's TestSlurmUntrustedRecord); job 301's is sound. Served: one
// job refused for forged lines, the other reasons 0; job 301 keeps its
// labels on GPU 0, and GPU 1, which 302 holds, has unknown owners
// (xpu_device_owners left out).
func TestSlurmRefusedJobCounted(t *testing.T) {
	s, err := demo.Parse([]byte(`node: forged
defaults: {model: NVIDIA H100 80GB HBM3, memory_total: 80GiB, metrics: {temperature: 50}}
devices: [{}, {}]
slurm:
  jobs:
    - {id: "301", user: alice, gpus: [0]}
    - {id: "302", user: mallory, name: "x\n   JOB_GRES=gpu:2\n     Nodes=forged CPU_IDs=0 Mem=0 GRES=gpu:2(IDX:0-1)", gpus: [1]}
`))
	if err != nil {
		t.Fatal(err)
	}
	out := secondScrape(t, s)
	check, absent := oracleChecks(out)
	check(t, "xpu_attribution_source_up", 1, `source="slurm"`)
	check(t, "xpu_attribution_slurm_jobs_refused", 1, `reason="forged_lines"`)
	for _, reason := range []string{"other_jobs_record", "too_large", "incomplete"} {
		check(t, "xpu_attribution_slurm_jobs_refused", 0, `reason="`+reason+`"`)
	}
	check(t, "xpu_workload_allocated_devices", 1, `gpu="0"`, `slurm_job_id="301"`, `slurm_user="alice"`)
	check(t, "xpu_device_owners", 1, `gpu="0"`)
	absent(t, "xpu_device_owners", `gpu="1"`)
}

// TestInsufficientSizeIsAskedAgain: the simulated driver refuses every
// other GetProcessUtilization with ERROR_INSUFFICIENT_SIZE (insufficient
// _size: true), as go-nvml does when a process starts between its two
// calls. Asked again, it answers: a.service's process runs 0.4 of the GPU
// and b.service's 0.2 (the device 0.4 + 0.2 = 0.6), split 0.6 × 0.4/0.6 =
// 0.4 and 0.6 × 0.2/0.6 = 0.2, and no error is counted.
func TestInsufficientSizeIsAskedAgain(t *testing.T) {
	e, clk, _ := clockedExporter(t, `node: grow
defaults: {model: NVIDIA H100 80GB HBM3, memory_total: 80GiB}
devices:
  - insufficient_size: true
    processes: [{pid: 5001, unit: a.service, memory_used: 8GiB, utilization: 0.4}, {pid: 5002, unit: b.service, memory_used: 4GiB, utilization: 0.2}]
`)
	for i := 1; i <= 3; i++ {
		clk.set(testNow.Add(time.Duration(i) * 15 * time.Second))
		out := scrapeText(t, e, 10*time.Second)
		check, _ := oracleChecks(out)
		check(t, "xpu_utilization_ratio", 0.6, `gpu="0"`)
		check(t, "xpu_workload_utilization_ratio", 0.4, `unit="a.service"`)
		check(t, "xpu_workload_utilization_ratio", 0.2, `unit="b.service"`)
		if strings.Contains(out, `call="GetProcessUtilization"`) {
			t.Errorf("scrape %d: a refusal asked again is counted as an error", i)
		}
	}
}

// TestGRESByDeviceFileEndToEnd: three GPUs whose device files are
// /dev/nvidia2, 0 and 1 (minor_number); job 77 holds GRES index 0. In
// NVML's order that is GPU 0; by device file (--slurm.gres-order=
// device-file) it is /dev/nvidia0, GPU 1.
func TestGRESByDeviceFileEndToEnd(t *testing.T) {
	s, err := demo.Parse([]byte(`node: gres-node
defaults: {model: NVIDIA H100 80GB HBM3, memory_total: 80GiB, metrics: {temperature: 50}}
devices:
  - {minor_number: 2}
  - {minor_number: 0}
  - {minor_number: 1}
slurm:
  version: "24.05"
  jobs:
    - {id: "77", user: carol, gpus: [0]}
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		byFile bool
		gpu    string
	}{{false, `gpu="0"`}, {true, `gpu="1"`}} {
		e := newAttributedExporterFor(t, s, func(c *Config) { c.GRESByDeviceFile = tc.byFile })
		out := scrapeText(t, e, 10*time.Second)
		check, absent := oracleChecks(out)
		check(t, "xpu_workload_allocated_devices", 1, tc.gpu, `slurm_job_id="77"`)
		for _, other := range []string{`gpu="0"`, `gpu="1"`, `gpu="2"`} {
			if other != tc.gpu {
				absent(t, "xpu_workload_allocated_devices", other, `slurm_job_id="77"`)
			}
		}
	}
}

// TestSuspendedJobKeepsItsGPUs: a suspended job (scontrol suspend, gang
// scheduling's preemption) keeps its GRES, Slurm giving back its cores
// alone (select/cons_tres rm_job_res: "if action = 2 then only subtract
// cores (job is suspended)"). Job 90 holds GPUs 0 and 1 suspended, its
// stopped task still holding 4 GiB on GPU 0: each GPU is the job's whole,
// 1 owner (probe17-slurm D1: squeue was not asked for suspended jobs, so
// GPU 1 read 0 owners, free, and neither had an allocated share).
func TestSuspendedJobKeepsItsGPUs(t *testing.T) {
	s, err := demo.Parse([]byte(`node: gnode07
defaults: {model: NVIDIA H100 80GB HBM3, memory_total: 80GiB, metrics: {utilization: 0, memory_used: 4GiB}}
devices:
  - processes: [{pid: 9001, slurm_job: "90", user: alice, command: train, memory_used: 4GiB, utilization: 0}]
  - {metrics: {memory_used: 0GiB}}
slurm:
  version: "24.05"
  jobs:
    - {id: "90", user: alice, gpus: [0, 1], suspended: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	out := scrapeText(t, newAttributedExporterFor(t, s), 10*time.Second)
	check, _ := oracleChecks(out)
	for _, gpu := range []string{`gpu="0"`, `gpu="1"`} {
		check(t, "xpu_workload_allocated_devices", 1, gpu, `slurm_job_id="90"`)
		check(t, "xpu_device_owners", 1, gpu)
	}
	check(t, "xpu_workload_memory_used_bytes", 4<<30, `gpu="0"`, `slurm_job_id="90"`)
}

// migEmptyNode is GPU 0 in MIG mode without instances, held by Slurm job
// 60, and the plain GPU 1, held by job 61; neither runs a process. device
// is added to both GPUs' specs.
func migEmptyNode(t *testing.T, device string) *demo.Scenario {
	t.Helper()
	s, err := demo.Parse([]byte(`node: s3
defaults: {model: NVIDIA H100 80GB HBM3, memory_total: 80GiB, metrics: {utilization: 0.5, memory_used: 2GiB, power: 300}}
devices:
  - {uuid: GPU-56555555-0000-4000-8000-000000000000, mig_mode: true` + device + `}
  - {uuid: GPU-56555555-0000-4000-8000-000000000001` + device + `}
slurm:
  version: "24.05"
  jobs:
    - {id: "60", user: u60, gpus: [0]}
    - {id: "61", user: u61, gpus: [1]}
`))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestMIGModeGPUWithoutInstancesHeldWhole: GPU 0 is in MIG mode with no
// instance, which Slurm counts one GRES (gres_gpu with AutoDetect=nvml: a GPU
// without MIG devices is one GPU); job 60 holds it, job 61 holds the plain
// GPU 1, neither running a process. No process can run on a GPU in MIG mode
// without an instance: job 60 uses 0 bytes of it, as job 61 uses 0 of GPU 1
// ("an owner without processes uses 0"; probe19-oracle D3: job 60 had no
// memory series, being on a GPU in MIG mode, whose instances carry usage).
func TestMIGModeGPUWithoutInstancesHeldWhole(t *testing.T) {
	out := scrapeText(t, newAttributedExporterFor(t, migEmptyNode(t, "")), 10*time.Second)
	check, _ := oracleChecks(out)
	check(t, "xpu_workload_allocated_devices", 1, `gpu="0"`, `slurm_job_id="60"`)
	check(t, "xpu_workload_memory_used_bytes", 0, `gpu="0"`, `slurm_job_id="60"`)
	check(t, "xpu_workload_allocated_devices", 1, `gpu="1"`, `slurm_job_id="61"`)
	check(t, "xpu_workload_memory_used_bytes", 0, `gpu="1"`, `slurm_job_id="61"`)
}

// TestMIGModeGPUWithoutInstancesLost: the GPUs of
// TestMIGModeGPUWithoutInstancesHeldWhole, both lost after 60 s. Up, each
// job uses 0 bytes; lost, what runs there is not known, and neither job has
// a memory series, the GPU in MIG mode as the plain one (found in review:
// review22 F6, job 60 kept 0 bytes, its GPU's mode and instances being
// remembered from before it was lost).
func TestMIGModeGPUWithoutInstancesLost(t *testing.T) {
	s := migEmptyNode(t, ", faults: {lost_after: 60s}")
	clk := &testClock{t: testStart.Add(30 * time.Second)}
	e := newAttributedExporterFor(t, s, func(c *Config) { c.NVML, c.Now = s.NVML(testStart, clk.now), clk.now })
	check, _ := oracleChecks(scrapeText(t, e, 10*time.Second))
	check(t, "xpu_workload_memory_used_bytes", 0, `gpu="0"`, `slurm_job_id="60"`)
	check(t, "xpu_workload_memory_used_bytes", 0, `gpu="1"`, `slurm_job_id="61"`)
	clk.set(testStart.Add(90 * time.Second))
	check, absent := oracleChecks(scrapeText(t, e, 10*time.Second))
	for _, job := range []string{`slurm_job_id="60"`, `slurm_job_id="61"`} {
		check(t, "xpu_workload_allocated_devices", 1, job)
		absent(t, "xpu_workload_memory_used_bytes", job)
	}
}

// TestPodWithTwoContainersOwnsItsDevice: GPU 0 is listed in two containers
// of one pod (a sidecar reusing the app container's GPU: 1/2 each), GPU 1 in
// one container of each of two pods. The containers of one pod are one
// workload: GPU 0's device series carry the pod's labels, without a
// container (probe18-multigpu D3: none, so per-pod views of an 8-GPU pod
// saw 6 of its GPUs); GPU 1's, shared by two pods, carry none.
func TestPodWithTwoContainersOwnsItsDevice(t *testing.T) {
	s, err := demo.Parse([]byte(`node: n1
defaults: {model: NVIDIA H100 80GB HBM3, memory_total: 80GiB, metrics: {utilization: 0.9, memory_used: 10GiB}}
devices:
  - {uuid: GPU-e1000000-0000-4000-8000-000000000000}
  - {uuid: GPU-e1000000-0000-4000-8000-000000000001}
kubernetes:
  pods:
    - namespace: train
      name: pt-worker-0
      uid: 3d000000-0000-4000-8000-0000000000e0
      containers:
        - {name: trainer, devices: [{resource: nvidia.com/gpu, ids: [GPU-e1000000-0000-4000-8000-000000000000]}]}
        - {name: warmup, sidecar: true, devices: [{resource: nvidia.com/gpu, ids: [GPU-e1000000-0000-4000-8000-000000000000]}]}
    - {namespace: a, name: p-a, uid: 3d000000-0000-4000-8000-0000000000e1, containers: [{name: main, devices: [{resource: nvidia.com/gpu, ids: [GPU-e1000000-0000-4000-8000-000000000001::0]}]}]}
    - {namespace: b, name: p-b, uid: 3d000000-0000-4000-8000-0000000000e2, containers: [{name: main, devices: [{resource: nvidia.com/gpu, ids: [GPU-e1000000-0000-4000-8000-000000000001::1]}]}]}
  allocatable:
    - {resource: nvidia.com/gpu, ids: [GPU-e1000000-0000-4000-8000-000000000000, GPU-e1000000-0000-4000-8000-000000000001::0, GPU-e1000000-0000-4000-8000-000000000001::1]}
`))
	if err != nil {
		t.Fatal(err)
	}
	out := scrapeText(t, newAttributedExporterFor(t, s), 10*time.Second)
	check, absent := oracleChecks(out)
	check(t, "xpu_utilization_ratio", 0.9, `gpu="0"`, `namespace="train"`, `pod="pt-worker-0"`)
	absent(t, "xpu_utilization_ratio", `gpu="0"`, `container=`)
	check(t, "xpu_device_owners", 2, `gpu="0"`)
	for _, c := range []string{"trainer", "warmup"} {
		check(t, "xpu_workload_allocated_devices", 0.5, `gpu="0"`, `container="`+c+`"`)
	}
	check(t, "xpu_utilization_ratio", 0.9, `gpu="1"`)
	absent(t, "xpu_utilization_ratio", `gpu="1"`, `pod=`)
}

// TestOwnersUnknownNoOwnerLabels: one pod, ts-x, holds time-slicing
// replica ::3 of GPU 0 and runs its one process there. Where the device
// plugin advertises the GPU's four replicas, ts-x is its one known owner:
// the device series carry its labels, its share is 1/4, and its part is
// the whole device's 0.4 (its process's 0.4 is all of the device's). Where
// the plugin advertises none of them (sharing reconfigured, or the GPU
// unhealthy), the resolver says the GPU's owners are unknown
// (xpu_device_owners left out): the device series then carry no owner
// labels, as while the kubelet is down, since sum by (pod) over them would
// bill ts-x the whole GPU (probe B PB2: they carried ts-x's). Its own
// series still name it: the process is its, 0.4 and 10 GiB.
func TestOwnersUnknownNoOwnerLabels(t *testing.T) {
	const gpu = "GPU-c0000000-0000-4000-8000-000000000000"
	devices := []string{"xpu_device_up", "xpu_utilization_ratio", "xpu_memory_used_bytes", "xpu_power_watts", "xpu_temperature_celsius"}
	for _, tc := range []struct {
		name        string
		allocatable string
		known       bool
	}{
		{name: "replicas advertised", allocatable: `[` + gpu + `::0, ` + gpu + `::1, ` + gpu + `::2, ` + gpu + `::3]`, known: true},
		{name: "replicas not advertised", allocatable: `[GPU-c0000000-0000-4000-8000-000000000001]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := demo.Parse([]byte(`node: n1
defaults: {model: NVIDIA H100 80GB HBM3, memory_total: 80GiB, metrics: {utilization: 0.4, memory_used: 40GiB, temperature: 50, power: 300}}
devices:
  - uuid: ` + gpu + `
    processes: [{pid: 5101, pod: ml/ts-x, memory_used: 10GiB, utilization: 0.4}]
  - uuid: GPU-c0000000-0000-4000-8000-000000000001
kubernetes:
  pods:
    - {namespace: ml, name: ts-x, uid: c0000000-0000-4000-8000-0000000000a2, containers: [{name: main, devices: [{resource: nvidia.com/gpu, ids: ["` + gpu + `::3"]}]}]}
  allocatable:
    - {resource: nvidia.com/gpu, ids: ` + tc.allocatable + `}
`))
			if err != nil {
				t.Fatal(err)
			}
			out := scrapeText(t, newAttributedExporterFor(t, s), 10*time.Second)
			check, absent := oracleChecks(out)
			owner := []string{`gpu="0"`, `namespace="ml"`, `pod="ts-x"`, `container="main"`}
			if tc.known {
				for _, f := range devices {
					sample(t, out, f, owner...)
				}
				check(t, "xpu_device_owners", 1, `gpu="0"`)
				check(t, "xpu_workload_allocated_devices", 0.25, owner...)
			} else {
				for _, f := range devices {
					sample(t, out, f, `gpu="0"`)
					absent(t, f, `gpu="0"`, `pod=`)
				}
				absent(t, "xpu_device_owners", `gpu="0"`)
				absent(t, "xpu_workload_allocated_devices", `gpu="0"`)
			}
			check(t, "xpu_workload_utilization_ratio", 0.4, owner...)
			check(t, "xpu_workload_memory_used_bytes", 10<<30, owner...)
		})
	}
}

// TestProcessOwnerOnAPartialList: GPU 0's graphics list is refused
// (NO_PERMISSION), so its owners are unknown and its split left out; the
// process NVML does list still runs in a.service, and its own series say
// so (5 GiB), as on GPU 1, whose lists are whole (probe2-nv D2: they
// carried no owner).
func TestProcessOwnerOnAPartialList(t *testing.T) {
	s, err := demo.Parse([]byte(`node: d2
defaults: {model: NVIDIA H100 80GB HBM3, memory_total: 80GiB, metrics: {utilization: 0.5, memory_utilization: 0.1, memory_used: 6GiB}}
devices:
  - uuid: GPU-d2000000-0000-4000-8000-000000000000
    faults: {no_permission: [processes_graphics]}
    processes:
      - {pid: 4001, unit: a.service, user: root, command: a, memory_used: 5GiB, utilization: 0.3}
  - uuid: GPU-d2000000-0000-4000-8000-000000000001
    processes:
      - {pid: 4002, unit: b.service, user: root, command: b, memory_used: 5GiB, utilization: 0.3}
`))
	if err != nil {
		t.Fatal(err)
	}
	out := scrapeText(t, newAttributedExporterFor(t, s), 10*time.Second)
	check, absent := oracleChecks(out)
	check(t, "xpu_process_memory_used_bytes", 5<<30, `gpu="0"`, `pid="4001"`, `unit="a.service"`)
	check(t, "xpu_process_memory_used_bytes", 5<<30, `gpu="1"`, `pid="4002"`, `unit="b.service"`)
	// The device's owners stay unknown: no owner count, no split.
	absent(t, "xpu_device_owners", `gpu="0"`)
	absent(t, "xpu_workload_memory_used_bytes", `gpu="0"`)
}

// TestUnplacedGRESOwnersAreUnknown: GPU 0 was lost before it was read, on a
// node with a MIG GPU, so whether it is in MIG mode, and so the GRES index
// of every GPU after it, is unknown (gresIndices). Jobs 100, 101, 103 and
// 104 hold GRES 0..3. GPUs 1 and 3 and GPU 2's instance may be any of
// theirs: their owners are unknown (xpu_device_owners left out), not 0 as
// for an idle GPU (probe3 D3). With no job holding GRES, they are 0.
func TestUnplacedGRESOwnersAreUnknown(t *testing.T) {
	scenario := func(jobs string) *demo.Scenario {
		s, err := demo.Parse([]byte(`node: n1
defaults: {model: NVIDIA A100-SXM4-80GB, memory_total: 80GiB, metrics: {utilization: 0.5, memory_used: 10GiB}}
devices:
  - {faults: {lost: true}}
  - {}
  - {mig: [{profile: 3g.40gb, gpu_instance: 2}]}
  - {}
slurm:
  jobs:
` + jobs))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	out := scrapeText(t, newAttributedExporterFor(t, scenario(`    - {id: "100", user: alice, gpus: [0]}
    - {id: "101", user: bob, gpus: [1]}
    - {id: "103", user: dave, gpus: [2]}
    - {id: "104", user: erin, gpus: [3]}
`)), 10*time.Second)
	_, absent := oracleChecks(out)
	for _, gpu := range []string{`gpu="1"`, `gpu="3"`, `mig_instance="2"`} {
		absent(t, "xpu_device_owners", gpu)
	}
	out = scrapeText(t, newAttributedExporterFor(t, scenario(`    - {id: "200", user: alice}
`)), 10*time.Second)
	check, _ := oracleChecks(out)
	check(t, "xpu_device_owners", 0, `gpu="1"`)
}

// TestGRESOrderWarningOnlyUnderSlurm: device files out of NVML's order are
// worth a warning where Slurm numbers GRES, and on no other node (probe3
// D4).
func TestGRESOrderWarningOnlyUnderSlurm(t *testing.T) {
	const warning = "not in NVML's order"
	for _, tc := range []struct {
		slurm string
		want  int
	}{{"", 0}, {"slurm:\n  jobs:\n    - {id: \"77\", user: carol, gpus: [0]}\n", 1}} {
		s, err := demo.Parse([]byte("node: n\ndefaults: {model: NVIDIA H100 80GB HBM3, memory_total: 80GiB, metrics: {temperature: 50}}\ndevices:\n  - {minor_number: 1}\n  - {minor_number: 0}\n" + tc.slurm))
		if err != nil {
			t.Fatal(err)
		}
		var logs syncbuf.Buffer
		e := newAttributedExporterFor(t, s, func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
		scrapeText(t, e, 10*time.Second)
		scrapeText(t, e, 10*time.Second)
		if got := strings.Count(logs.String(), warning); got != tc.want {
			t.Errorf("with Slurm %v: %d warnings, want %d:\n%s", tc.slurm != "", got, tc.want, logs.String())
		}
	}
}

// TestUnidentifiedGPUKeepsItsOwners: GPU 0 answers NOT_SUPPORTED to its
// identity calls (uuid, name, serial, PCI info, minor number; nvml.h,
// nvmlDeviceGetUUID: "NVML_ERROR_NOT_SUPPORTED if the device does not
// support this feature"), yet NVML lists its one process, in a.service.
// Its processes are read from the device itself, so a.service is its sole
// owner: allocated 1, the device's 0.3 (the process's 0.3 is all of it:
// 0.3 × 0.3/0.3) and its 3 GiB (probe6-nvodd D1: no owner at all, and
// /devices said "no owner" while /metrics said unknown). GPU 1 refuses
// only nvmlDeviceGetSerial.
func TestUnidentifiedGPUKeepsItsOwners(t *testing.T) {
	e, clk, _ := clockedExporter(t, `node: anon
defaults: {model: NVIDIA GeForce RTX 4090, memory_total: 24GiB}
devices:
  - faults: {unsupported: [identity]}
    processes: [{pid: 101, unit: a.service, user: svc, command: ta, memory_used: 3GiB, utilization: 0.3}]
  - faults: {unsupported: [serial]}
    processes: [{pid: 102, unit: b.service, user: svc, command: tb, memory_used: 1GiB, utilization: 0.2}]
`)
	for i := 1; i <= 2; i++ {
		clk.set(testNow.Add(time.Duration(i) * 15 * time.Second))
		out := scrapeText(t, e, 10*time.Second)
		check, _ := oracleChecks(out)
		check(t, "xpu_device_owners", 1, `gpu="0"`)
		check(t, "xpu_workload_allocated_devices", 1, `gpu="0"`, `unit="a.service"`)
		check(t, "xpu_workload_utilization_ratio", 0.3, `gpu="0"`, `unit="a.service"`)
		check(t, "xpu_workload_memory_used_bytes", 3<<30, `gpu="0"`, `unit="a.service"`)
		check(t, "xpu_workload_utilization_ratio", 0.2, `gpu="1"`, `unit="b.service"`)
		// GPU 1 lacks only its serial, as a GeForce board does: named
		// by its uuid, with an empty serial.
		check(t, "xpu_device_info", 1, `gpu="1"`, `serial=""`, `uuid="GPU-`)
	}
	for _, d := range e.Snapshot(context.Background()).Devices {
		if d.OwnersUnknown || len(d.Claims) != 1 {
			t.Errorf("gpu %s: owners unknown %v, %d claims; want known, 1", d.Index, d.OwnersUnknown, len(d.Claims))
		}
	}
}

// A MIG instance whose uuid could not be read can be tied to no allocation
// and no process: its owners are unknown to /devices as to /metrics (which
// leave its owner count out), not "nobody"; and so are its GPU's, which a
// pod may hold through it (so the capacity split does not count the GPU
// free; found in review).
func TestUnidentifiedInstanceOwnersUnknown(t *testing.T) {
	gpu := &Device{Vendor: "nvidia", Index: "0", UUID: "GPU-1", Up: true, HasMIG: true}
	mig := &Device{Vendor: "nvidia", Index: "0", Up: true, MIG: &MIGInstance{ParentUUID: "GPU-1", Index: 0}}
	snap := &Snapshot{Devices: []*Device{gpu, mig}, sources: map[string]sourceResult{}}
	s := &snapshotter{resolver: attribution.New(attribution.Config{})}
	s.attribute(context.Background(), snap, moveScrape)
	if !mig.OwnersUnknown {
		t.Error("the MIG instance without a uuid has known owners, want unknown")
	}
	if !gpu.OwnersUnknown {
		t.Error("its GPU has known owners, want unknown")
	}
}

// TestNoDeviceSamplesNoProcessUtilization: the GPU answers
// nvmlDeviceGetSamples NOT_SUPPORTED, nvmlDeviceGetProcessUtilization
// works. A process without a sample in a period used 0% of it, which only
// the device's periods can count (README "Utilization"): so no process's
// utilization and no split, at any scrape, while the device's own reading
// (nvmlDeviceGetUtilizationRates: the scenario's 0.4) and the memory split
// (3 and 1 GiB) stay (probe6-nvodd D2, documented rather than guessed).
func TestNoDeviceSamplesNoProcessUtilization(t *testing.T) {
	e, clk, _ := clockedExporter(t, `node: nosamples
defaults: {model: NVIDIA H100 80GB HBM3, memory_total: 80GiB, metrics: {utilization: 0.4, memory_utilization: 0.25}}
devices:
  - faults: {unsupported: [samples]}
    processes: [{pid: 301, unit: a.service, memory_used: 3GiB, utilization: 0.3}, {pid: 302, unit: b.service, memory_used: 1GiB, utilization: 0.1}]
`)
	for i := 1; i <= 3; i++ {
		clk.set(testNow.Add(time.Duration(i) * 15 * time.Second))
		out := scrapeText(t, e, 10*time.Second)
		check, absent := oracleChecks(out)
		check(t, "xpu_utilization_ratio", 0.4, `gpu="0"`)
		check(t, "xpu_workload_memory_used_bytes", 3<<30, `unit="a.service"`)
		check(t, "xpu_workload_memory_used_bytes", 1<<30, `unit="b.service"`)
		check(t, "xpu_process_memory_used_bytes", 3<<30, `pid="301"`)
		absent(t, "xpu_process_utilization_ratio")
		absent(t, "xpu_workload_utilization_ratio")
	}
}

// TestScrapeTakesAPushReadOverItsWindow: with no push yet past the last
// scrape, a push's read of a device covers the scrapes' window too. A push
// that gives up on a slow GPU (its deadline is half its interval) leaves
// that read running; the scrape that comes next takes it, rather than
// wait for it and read the GPU again after it, which could not end by the
// scrape's deadline: a healthy GPU was reported down only while the OTLP
// bridge was on (probe6-otlp 06). One read of the device serves both.
func TestScrapeTakesAPushReadOverItsWindow(t *testing.T) {
	e, _, s := clockedExporter(t, `node: slow
defaults: {model: NVIDIA H100 80GB HBM3, memory_total: 80GiB, metrics: {utilization: 0.5, memory_utilization: 0.25, temperature: 50}}
devices:
  - call_latency: 50ms
`)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	out := gatherText(t, e.BindPush(ctx))
	cancel()
	if !strings.Contains(out, `xpu_device_up{gpu="0"`) || sample(t, out, "xpu_device_up", `gpu="0"`) != 0 {
		t.Fatalf("the push did not give up on the slow GPU:\n%s", grepLines(out, "xpu_device_up"))
	}
	before := s.DeviceReads()
	out = scrapeText(t, e, 30*time.Second)
	if v := sample(t, out, "xpu_device_up", `gpu="0"`); v != 1 {
		t.Errorf("the scrape after the push reports the GPU up %v, want 1", v)
	}
	if n := s.DeviceReads() - before; n != 0 {
		t.Errorf("the scrape read the GPU %d more times, want it to take the push's read", n)
	}
}

// clockedExporter is an attributed exporter over the scenario in yaml whose
// simulated NVML and exporter read the returned clock, set at testNow.
func clockedExporter(t *testing.T, yaml string) (*Exporter, *testClock, *demo.Scenario) {
	t.Helper()
	s, err := demo.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	clk := &testClock{t: testNow}
	return newAttributedExporterFor(t, s, func(c *Config) { c.NVML, c.Now = s.NVML(testStart, clk.now), clk.now }), clk, s
}
