package demo

import (
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// FuzzParse feeds hostile scenario files to Parse. A scenario it accepts
// is one the simulator can serve: at most 64 devices with distinct UUIDs,
// and every reading, at any time, a finite number in the range a real GPU
// gives (metricRange), so nothing out of range reaches the exporter.
func FuzzParse(f *testing.F) {
	files, err := filepath.Glob("../fixtures/scenarios/*.yaml")
	if err != nil || len(files) == 0 {
		f.Fatalf("no scenario fixtures: %v", err)
	}
	for _, file := range append(files, "default.yaml") {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("devices: [{model: x, memory_total: 1GiB, metrics: {power: 1e308GiB}}]\n"))
	f.Add([]byte("devices: [{model: x, memory_total: 1GiB, metrics: {energy: {start: 0, rate: .inf}, utilization: {min: 0, max: 1, phase: .nan}}}]\n"))

	start := time.Unix(1_700_000_000, 0)
	times := []time.Time{start, start.Add(time.Second), start.Add(37 * time.Minute), start.Add(24 * time.Hour)}

	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := Parse(b)
		if err != nil {
			return
		}
		if len(s.Devices) > 64 || len(s.Devices) == 0 && !s.NoDriver {
			t.Fatalf("%d devices accepted", len(s.Devices))
		}
		uuids := map[string]bool{}
		claim := func(uuid string) {
			if uuid == "" || uuids[uuid] {
				t.Fatalf("UUID %q empty or repeated", uuid)
			}
			uuids[uuid] = true
		}
		inRange := func(what string, v Value, lo, hi float64) {
			for _, at := range times {
				x := v.At(start, at)
				if math.IsNaN(x) || math.IsInf(x, 0) || x < lo || x > hi {
					t.Fatalf("%s is %v at %v, outside %v..%v: %+v", what, x, at.Sub(start), lo, hi, v)
				}
			}
		}
		for _, d := range s.Devices {
			claim(d.UUID)
			for _, m := range d.MIG {
				claim(m.UUID)
			}
			if d.MemoryTotal == nil {
				t.Fatalf("device %s without memory_total", d.UUID)
			}
			inRange("memory_total", *d.MemoryTotal, 1, 1<<50)
			if d.PowerLimitWatts != nil {
				inRange("power_limit_watts", *d.PowerLimitWatts, 0, 10000)
			}
			for k, v := range d.Metrics {
				lo, hi := metricRange(k)
				inRange("metrics."+k, v, lo, hi)
			}
			for k, v := range d.MaxClocksMHz {
				inRange("max_clocks_mhz."+k, v, 0, 100000)
			}
		}
	})
}
