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
			ev, ok := convertEvent(nvml.EventData{EventType: nvml.EventTypeXidCriticalError, EventData: 43, GpuInstanceId: tc.gi, ComputeInstanceId: tc.ci}, nil, nil)
			if !ok || ev.XID != 43 {
				t.Fatalf("%+v, %v", ev, ok)
			}
			if ev.GPUInstance != tc.wantGI || ev.ComputeInstance != tc.want {
				t.Errorf("GPU instance %d, compute instance %d; want %d, %d", ev.GPUInstance, ev.ComputeInstance, tc.wantGI, tc.want)
			}
		})
	}
}

// lostGPU answers GetUUID as a GPU that has fallen off the bus does.
type lostGPU struct{ nvml.Device }

func (lostGPU) GetUUID() (string, nvml.Return) { return "", nvml.ERROR_GPU_IS_LOST }

// TestEventOfALostGPUKeepsItsName: Xid 79 arrives as its GPU falls off
// the bus, when GetUUID answers GPU_IS_LOST; the handle registered as GPU
// 2 (GPU-c) names it. A handle never registered stays unnamed (index -1,
// no UUID), not taken for another device.
func TestEventOfALostGPUKeepsItsName(t *testing.T) {
	gpu2, other := &lostGPU{}, &lostGPU{}
	handles := map[nvml.Device]registered{gpu2: {index: 2, uuid: "GPU-c"}}
	ev, ok := convertEvent(nvml.EventData{Device: gpu2, EventType: nvml.EventTypeXidCriticalError, EventData: 79, GpuInstanceId: ^uint32(0), ComputeInstanceId: ^uint32(0)}, nil, handles)
	if !ok || ev.Index != 2 || ev.UUID != "GPU-c" || ev.XID != 79 {
		t.Errorf("event of the lost GPU: %+v, %v; want Xid 79 of GPU 2, GPU-c", ev, ok)
	}
	ev, ok = convertEvent(nvml.EventData{Device: other, EventType: nvml.EventTypeXidCriticalError, EventData: 79, GpuInstanceId: ^uint32(0), ComputeInstanceId: ^uint32(0)}, nil, handles)
	if !ok || ev.Index != -1 || ev.UUID != "" {
		t.Errorf("event of an unregistered handle: %+v, %v; want it unnamed", ev, ok)
	}
}
