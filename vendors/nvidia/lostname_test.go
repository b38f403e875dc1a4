package nvidia

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xpu-exporter/xpu_exporter/vendors/reading"
)

// driverTable writes the NVIDIA driver's table of GPUs, one information
// file per entry: "bus|uuid|minor|excluded" (uuid "" leaves its line out,
// as the driver does when it cannot tell).
func driverTable(t *testing.T, gpus ...string) string {
	t.Helper()
	root := t.TempDir()
	for _, g := range gpus {
		f := strings.Split(g, "|")
		dir := filepath.Join(root, "driver", "nvidia", "gpus", f[0])
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		info := "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 284\n"
		if f[1] != "" {
			info += "GPU UUID: \t " + f[1] + "\n"
		}
		info += fmt.Sprintf("Bus Location: \t %s\nDevice Minor: \t %s\nGPU Excluded:\t %s\n", f[0], f[2], f[3])
		if err := os.WriteFile(filepath.Join(dir, "information"), []byte(info), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// A GPU lost before the exporter's first read answers GPU_IS_LOST for its
// UUID and address too; the driver's table names it, but only by
// elimination, since nothing there says which NVML index it is.
func TestLostSinceStartNamedByTheDriver(t *testing.T) {
	const (
		uuid0 = "GPU-10000000-0000-4000-8000-000000000000"
		uuid1 = "GPU-10000000-0000-4000-8000-000000000001"
		uuid2 = "GPU-10000000-0000-4000-8000-000000000002"
	)
	two := fmt.Sprintf(`
devices:
  - {uuid: %s, pci_bus_id: "00000000:18:00.0", model: NVIDIA H100 80GB HBM3, memory_total: 80GiB}
  - {uuid: %s, pci_bus_id: "00000000:2A:00.0", model: NVIDIA H100 80GB HBM3, memory_total: 80GiB, faults: {lost: true}}
`, uuid0, uuid1)
	bothLost := strings.Replace(two, "memory_total: 80GiB}", "memory_total: 80GiB, faults: {lost: true}}", 1)
	named := Identity{Index: 1, UUID: uuid1, Name: "NVIDIA H100 80GB HBM3", PCIBusID: "00000000:2a:00.0", Minor: reading.Some(7)}
	for _, tc := range []struct {
		name     string
		scenario string
		table    []string
		want     Identity
	}{
		{"the one address no read named", two,
			[]string{"0000:18:00.0|" + uuid0 + "|0|No", "0000:2a:00.0|" + uuid1 + "|7|No"}, named},
		{"an excluded GPU, which NVML does not count, aside", two,
			[]string{"0000:18:00.0|" + uuid0 + "|0|No", "0000:2a:00.0|" + uuid1 + "|7|No", "0000:3b:00.0|" + uuid2 + "|8|Yes"}, named},
		{"no UUID in the table: the address, model and minor still", two,
			[]string{"0000:18:00.0|" + uuid0 + "|0|No", "0000:2a:00.0||7|No"},
			Identity{Index: 1, Name: "NVIDIA H100 80GB HBM3", PCIBusID: "00000000:2a:00.0", Minor: reading.Some(7)}},
		{"a GPU more than NVML counts: which is which is unknown", two,
			[]string{"0000:18:00.0|" + uuid0 + "|0|No", "0000:2a:00.0|" + uuid1 + "|7|No", "0000:3b:00.0|" + uuid2 + "|8|No"}, Identity{Index: 1}},
		{"a GPU fewer than NVML counts", two,
			[]string{"0000:2a:00.0|" + uuid1 + "|7|No"}, Identity{Index: 1}},
		{"no table (procfs not the host's)", two, nil, Identity{Index: 1}},
		{"two lost: neither can be told from the other", bothLost,
			[]string{"0000:18:00.0|" + uuid0 + "|0|No", "0000:2a:00.0|" + uuid1 + "|7|No"}, Identity{Index: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			if tc.table != nil {
				root = driverTable(t, tc.table...)
			}
			s := mustScenario(t, tc.scenario)
			clk := &clock{t: boot.Add(time.Minute)}
			c := New(s.NVML(boot, clk.now), DriverTable(root))
			devs := scrapeRead(t, c)
			if len(devs) != 2 {
				t.Fatalf("%d devices, want 2", len(devs))
			}
			if d := devs[1]; d.Up || d.Identity != tc.want {
				t.Errorf("lost GPU: up %v, %+v; want down, %+v", d.Up, d.Identity, tc.want)
			}
			// Named once, it stays named as a read would keep it, the
			// table gone or not.
			if err := os.RemoveAll(filepath.Join(root, "driver")); err != nil {
				t.Fatal(err)
			}
			if d := scrapeRead(t, c)[1]; d.Identity != tc.want {
				t.Errorf("next read: %+v, want %+v", d.Identity, tc.want)
			}
		})
	}
}
