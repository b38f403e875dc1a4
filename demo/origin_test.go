package demo

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/xpu-exporter/xpu_exporter/vendors/amd"
)

// TestCountersCountFromTheDriverLoad: a driver counts its counters since
// it was loaded, which an exporter restart does not do. NVML: "total
// energy consumption for this GPU in millijoules (mJ) since the driver was
// last reloaded" (nvml.h, nvmlDeviceGetTotalEnergyConsumption); hl-smi's
// volatile ECC totals; amdgpu's energy accumulator. The demo restarting
// (the same scenario, started later) gave them again from the start
// value, a fall Prometheus read as a reset worth it (found by probing: 111
// kWh/h for a 300 W GPU). Counted from Scenario.DriverLoaded, each reads
// alike at one instant whenever the simulation started; each case's value
// is worked out from its scenario line.
func TestCountersCountFromTheDriverLoad(t *testing.T) {
	loaded := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name, device string
		now          time.Duration   // after the load
		started      []time.Duration // after the load
		// read is the counter as the exporter would read it from a
		// simulation started at started.
		read func(t *testing.T, s *Scenario, started, now time.Time) string
		want string
	}{{
		// 1e6 J + 300 W × 100 s = 1,030,000 J = 1,030,000,000 mJ.
		name:    "NVIDIA energy",
		device:  "{model: NVIDIA H100 80GB HBM3, memory_total: 80GiB, metrics: {energy: {start: 1e6, rate: 300}}}",
		now:     100 * time.Second,
		started: []time.Duration{10 * time.Second, 90 * time.Second},
		read: func(t *testing.T, s *Scenario, started, now time.Time) string {
			dev, _ := s.NVML(started, func() time.Time { return now }).DeviceGetHandleByIndex(0)
			mj, ret := dev.GetTotalEnergyConsumption()
			if ret != nvml.SUCCESS {
				return ret.Error()
			}
			return fmt.Sprint(mj)
		},
		want: "1030000000",
	}, {
		// 1e6 J + 300 W × 100 s = 1,030,000 J, from gpu_metrics.
		name:    "AMD energy",
		device:  "{vendor: amd, model: AMD Instinct MI300X OAM, memory_total: 192GiB, power_limit_watts: 750, metrics: {energy: {start: 1e6, rate: 300}}}",
		now:     100 * time.Second,
		started: []time.Duration{0, 90 * time.Second},
		read: func(t *testing.T, s *Scenario, started, now time.Time) string {
			dir := t.TempDir()
			if err := s.newAMDSim(filepath.Join(dir, "sys"), filepath.Join(dir, "proc"), started).WriteAt(now); err != nil {
				t.Fatal(err)
			}
			r := amd.Reader{SysfsRoot: filepath.Join(dir, "sys")}
			cards, err := r.Cards()
			if err != nil || len(cards) != 1 {
				t.Fatalf("cards %v %v", cards, err)
			}
			d := r.ReadDevice(cards[0])
			if d.Metrics == nil || !d.Metrics.Energy.OK {
				return fmt.Sprintf("no energy: %+v", d.Metrics)
			}
			return fmt.Sprintf("%.3f", d.Metrics.Energy.Value)
		},
		want: "1030000.000",
	}, {
		// 1 + 0.5/s × 9 s = 5.5 errors, printed whole: 5.
		name:    "Gaudi ECC",
		device:  "{vendor: gaudi, model: HL-225, memory_total: 96GiB, metrics: {ecc_corrected: {start: 1, rate: 0.5}}}",
		now:     9 * time.Second,
		started: []time.Duration{0, 7 * time.Second},
		read: func(t *testing.T, s *Scenario, started, now time.Time) string {
			rows, err := csv.NewReader(bytes.NewReader(s.HLSMITable(started, now))).ReadAll()
			if err != nil {
				t.Fatal(err)
			}
			for i, h := range rows[0] {
				if strings.TrimSpace(h) == "ecc.errors.corrected.volatile.total" {
					return strings.TrimSpace(rows[1][i])
				}
			}
			return "no column"
		},
		want: "5",
	}} {
		s, err := Parse([]byte("node: n\ndevices:\n  - " + c.device + "\n"))
		if err != nil {
			t.Fatal(err)
		}
		s.DriverLoaded = loaded
		for _, started := range c.started {
			if got := c.read(t, s, loaded.Add(started), loaded.Add(c.now)); got != c.want {
				t.Errorf("%s, simulation started %v after the load: %s, want %s", c.name, started, got, c.want)
			}
		}
	}
}
