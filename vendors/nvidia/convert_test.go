package nvidia

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// TestConvertEventInstances: nvml.h, nvmlEventData_t, gpuInstanceId and
// computeInstanceId: valid when the Xid "is attributable to a GPU
// instance" (a compute instance), all ones otherwise.
func TestConvertEventInstances(t *testing.T) {
	const none = ^uint32(0)
	for _, tc := range []struct {
		name         string
		gi, ci       uint32
		wantGI, want int
	}{
		{"not about a MIG instance", none, none, -1, -1},
		{"about GPU instance 1 as a whole", 1, none, 1, -1},
		{"about compute instance 1 of GPU instance 1", 1, 1, 1, 1},
		{"about compute instance 0 of GPU instance 2", 2, 0, 2, 0},
		{"a compute instance without its GPU instance", none, 1, -1, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev, ok := convertEvent(nvml.EventData{EventType: nvml.EventTypeXidCriticalError, EventData: 43, GpuInstanceId: tc.gi, ComputeInstanceId: tc.ci}, nil)
			if !ok || ev.XID != 43 {
				t.Fatalf("%+v, %v", ev, ok)
			}
			if ev.GPUInstance != tc.wantGI || ev.ComputeInstance != tc.want {
				t.Errorf("GPU instance %d, compute instance %d; want %d, %d", ev.GPUInstance, ev.ComputeInstance, tc.wantGI, tc.want)
			}
		})
	}
}
