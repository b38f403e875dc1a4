package collector

import (
	"testing"

	"github.com/xpu-exporter/xpu_exporter/demo"
)

// TestLastPeriodDriver: a driver that answers nvmlDeviceGetProcessUtilization
// as nvml.h words it, with entries for "the last sample period" only. Each
// process's value is its utilization in that period, not a window mean
// that takes the fourteen periods the driver said nothing of as idle (found
// by probing: 0.6 served as 0.04).
func TestLastPeriodDriver(t *testing.T) {
	const gpu = "GPU-e2000000-0000-4000-8000-000000000000"
	s, err := demo.Parse([]byte(`node: sparse-node
defaults: {model: NVIDIA H100 80GB HBM3, memory_total: 80GiB, metrics: {temperature: 50}}
devices:
  - uuid: ` + gpu + `
    process_samples: last_period
    processes:
      - {pid: 100, user: alice, command: a, memory_used: 1GiB, utilization: 0.6, duty: {period: 15s, busy: 5s, offset: 10s}}
      - {pid: 200, user: bob, command: b, memory_used: 1GiB, utilization: 0.2}
`))
	if err != nil {
		t.Fatal(err)
	}
	check, _ := oracleChecks(secondScrape(t, s))
	// The window: fifteen 1 s periods ending 5,401 … 5,415 s after boot.
	// alice is busy where (t − 10 s) mod 15 s < 5 s, at the middles
	// 5,410.5 … 5,414.5 s: five periods at 0.6; bob 0.2 in all. Device:
	// (5 × 0.8 + 10 × 0.2) / 15 = 0.4.
	check(t, "xpu_utilization_ratio", 0.4, `uuid="`+gpu+`"`)
	// The driver names the newest period alone (ending 5,415 s): alice
	// 0.6, bob 0.2. Their means over the window were 0.2 and 0.2, which
	// such a driver does not tell.
	check(t, "xpu_process_utilization_ratio", 0.6, `pid="100"`)
	check(t, "xpu_process_utilization_ratio", 0.2, `pid="200"`)
	// The split samples that period's mix: 0.4 × 0.6/0.8 = 0.3 and
	// 0.4 × 0.2/0.8 = 0.1, adding up to the device.
	check(t, "xpu_workload_utilization_ratio", 0.3, `user="alice"`)
	check(t, "xpu_workload_utilization_ratio", 0.1, `user="bob"`)
}
