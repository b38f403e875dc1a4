package gaudi

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/xpu-exporter/xpu_exporter/internal/pciaddr"
)

// FuzzParse feeds hostile bytes to the CSV parser: it must never panic,
// every failure must carry a Reason, and what it accepts must be sane.
func FuzzParse(f *testing.F) {
	for _, pattern := range []string{"*.csv", "cases/*.csv", "real/*.csv"} {
		files, err := filepath.Glob(filepath.Join(fixtures, pattern))
		if err != nil {
			f.Fatal(err)
		}
		for _, file := range files {
			b, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b, true, false)
			f.Add(b, false, true)
		}
	}
	f.Add([]byte("0, HL-225, 1e308, 1e-320\n"), false, false)
	f.Add([]byte("index\n-1\n"), true, false)
	f.Add([]byte("\ufeffindex, name, memory.used [MiB], utilization.aip [%]\n \t\n0, HL-225, 512, 10\n   "), true, false)

	f.Fuzz(func(t *testing.T, out []byte, header, defaultFields bool) {
		fields := caseFields
		if defaultFields {
			fields = DefaultFields
		}
		devices, err := Parse(out, fields, header)
		if err != nil {
			if ReasonOf(err) == "" {
				t.Fatalf("error without a reason: %v", err)
			}
			if devices != nil {
				t.Fatalf("devices returned with error %v", err)
			}
			return
		}
		seen := map[int]bool{}
		for _, d := range devices {
			if d.Index == NoIndex {
				if !slices.ContainsFunc(d.Problems, func(p *Error) bool { return p.Field == "index" }) {
					t.Fatalf("no index without a bad index cell: %v", d.Problems)
				}
			} else if d.Index < 0 || seen[d.Index] {
				t.Fatalf("index %d negative or repeated", d.Index)
			}
			seen[d.Index] = true
			if u := d.Utilization; u.OK && !(u.Value >= 0 && u.Value <= 1) {
				t.Fatalf("utilization %v outside 0..1", u.Value)
			}
			for _, v := range []Opt[float64]{d.Temperature, d.Power, d.PowerLimit} {
				if v.OK && (math.IsNaN(v.Value) || math.IsInf(v.Value, 0)) {
					t.Fatalf("reading %v is not finite", v.Value)
				}
			}
			if d.MemoryUsed.OK && d.MemoryTotal.OK && d.MemoryUsed.Value > d.MemoryTotal.Value {
				t.Fatalf("memory used %d above total %d", d.MemoryUsed.Value, d.MemoryTotal.Value)
			}
			if d.BusID != "" && pciaddr.Canonical(d.BusID) != d.BusID {
				t.Fatalf("bus id %q not normalised", d.BusID)
			}
			for _, p := range d.Problems {
				if p.Reason != ReasonBadValue || len(p.Detail) > maxDetail+len("…") {
					t.Fatalf("problem %v", p)
				}
			}
		}
	})
}
