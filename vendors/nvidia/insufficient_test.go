package nvidia

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// TestProcessUtilizationAskedAgainWhenTheCountGrew: go-nvml returns
// ERROR_INSUFFICIENT_SIZE from GetProcessUtilization when the driver's
// sample count grew between its sizing call and its filling call (a
// process started). The read asks once more; a second refusal leaves the
// processes' utilization unknown and is counted. PID 42 ran 80 % of both
// 1 s periods: 0.8.
func TestProcessUtilizationAskedAgainWhenTheCountGrew(t *testing.T) {
	lists := func() ([]nvml.ProcessInfo, nvml.Return) {
		return []nvml.ProcessInfo{{Pid: 42, UsedGpuMemory: 1 << 30}}, nvml.SUCCESS
	}
	none := func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS }
	samples := []nvml.ProcessUtilizationSample{{Pid: 42, TimeStamp: 2e6, SmUtil: 80}, {Pid: 42, TimeStamp: 3e6, SmUtil: 80}}
	for _, tc := range []struct {
		name    string
		refusal int // calls answered ERROR_INSUFFICIENT_SIZE first
		want    bool
	}{
		{"answered at once", 0, true},
		{"count grew once", 1, true},
		{"count grew twice", 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			periods := []period{{2e6, 1e6, 80}, {3e6, 1e6, 80}}
			w := newWindow(periods, nil, true)
			r := &reader{periods: periods, win: &w}
			calls := 0
			dev := &mock.Device{
				GetComputeRunningProcessesFunc:    lists,
				GetMPSComputeRunningProcessesFunc: none,
				GetGraphicsRunningProcessesFunc:   none,
				GetProcessUtilizationFunc: func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
					calls++
					if calls <= tc.refusal {
						return []nvml.ProcessUtilizationSample{}, nvml.ERROR_INSUFFICIENT_SIZE
					}
					return samples, nvml.SUCCESS
				},
			}
			d := &Device{}
			r.processes(d, dev)
			if len(d.Processes) != 1 {
				t.Fatalf("processes %+v", d.Processes)
			}
			p := d.Processes[0]
			switch {
			case tc.want && (!p.SMUtilization.OK || p.SMUtilization.Value != 0.8):
				t.Errorf("SM utilization %+v, want 0.8", p.SMUtilization)
			case !tc.want && p.SMUtilization.OK:
				t.Errorf("SM utilization %v after two refusals, want unknown", p.SMUtilization.Value)
			case !tc.want && (len(r.errs) != 1 || r.errs[0].Return != nvml.ERROR_INSUFFICIENT_SIZE):
				t.Errorf("errors %+v, want one ERROR_INSUFFICIENT_SIZE", r.errs)
			}
		})
	}
}
