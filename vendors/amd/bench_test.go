package amd

import "testing"

// The per-scrape cost of one device: every sysfs file plus the gpu_metrics
// table, on the MI300X fixture.
func BenchmarkReadDevice(b *testing.B) {
	r := Reader{SysfsRoot: fixtureSys}
	for b.Loop() {
		if d := r.ReadDevice("card1"); len(d.Errors) != 0 || d.Metrics == nil {
			b.Fatalf("errors %v", d.Errors)
		}
	}
}

func BenchmarkDecodeGPUMetricsV1_8(b *testing.B) {
	buf := blank(3872, 1, 8)
	for b.Loop() {
		if _, err := DecodeGPUMetrics(buf); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkScanFdinfo(b *testing.B) {
	s := FdinfoScanner{ProcRoot: fixtureProc, Driver: "amdgpu"}
	for b.Loop() {
		if c, errs := s.Scan([]int{100, 101, 102}); len(c) != 2 || len(errs) != 0 {
			b.Fatalf("clients %v errors %v", c, errs)
		}
	}
}
