package nvidia_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/xpu-exporter/xpu_exporter/demo"
	"github.com/xpu-exporter/xpu_exporter/vendors/nvidia"
)

const eventScenario = `
defaults: {model: NVIDIA H100 80GB HBM3, memory_total: 80GiB}
devices:
  - uuid: GPU-00000000-0000-4000-8000-000000000000
  - uuid: GPU-00000000-0000-4000-8000-000000000001
  - uuid: GPU-00000000-0000-4000-8000-000000000002
    faults: {unsupported: [events]}
events:
  - {device: 1, xid: 79, at: 100ms}
  - {device: 0, type: double_bit_ecc, at: 200ms}
`

func TestListenDeliversEventsUntilCancelled(t *testing.T) {
	s, err := demo.Parse([]byte(eventScenario))
	if err != nil {
		t.Fatal(err)
	}
	client := nvidia.New(s.NVML(time.Now(), time.Now))
	ctx, cancel := context.WithCancel(context.Background())
	events := make(chan nvidia.Event, 10)
	var status nvidia.ListenStatus
	done := make(chan error)
	go func() {
		done <- client.Listen(ctx, func(st nvidia.ListenStatus) { status = st }, func(e nvidia.Event) { events <- e })
	}()
	var got []nvidia.Event
	for len(got) < 2 {
		select {
		case e := <-events:
			got = append(got, e)
		case <-time.After(5 * time.Second):
			t.Fatalf("events received: %+v, want 2", got)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Listen returned %v after cancel", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Listen did not return after its context was cancelled")
	}
	if status.Devices != 2 || status.Unsupported != 1 {
		t.Errorf("status %+v, want 2 devices registered and 1 unsupported", status)
	}
	if e := got[0]; e.Type != "xid" || e.XID != 79 || e.Index != 1 || e.UUID != "GPU-00000000-0000-4000-8000-000000000001" || e.GPUInstance != -1 {
		t.Errorf("first event %+v", e)
	}
	if e := got[1]; e.Type != "double_bit_ecc" || e.Index != 0 {
		t.Errorf("second event %+v", e)
	}
}

func TestListenWithoutEventSupport(t *testing.T) {
	s, err := demo.Parse([]byte("devices:\n  - {model: T, memory_total: 1GiB, faults: {unsupported: [events]}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	err = nvidia.New(s.NVML(time.Now(), time.Now)).Listen(context.Background(), nil, func(nvidia.Event) {})
	if err != nvidia.ErrNoEvents {
		t.Errorf("Listen = %v, want ErrNoEvents", err)
	}
}

// TestListenPastAHungRegistration: a GPU that hangs in the driver when
// registered for events is left out, and the other GPUs' events are still
// delivered (found by probing: one hung GPU stopped Xid counting for the
// whole node, unseen). A later Listen, while that registration still
// hangs, does not start another.
func TestListenPastAHungRegistration(t *testing.T) {
	old := nvidia.SetRegisterTimeout(200 * time.Millisecond)
	defer nvidia.SetRegisterTimeout(old)
	s, err := demo.Parse([]byte(`
devices:
  - {model: X, memory_total: 1GiB, faults: {hang: [events], hang_for: 3s}}
  - {model: X, memory_total: 1GiB}
events:
  - {device: 1, xid: 13, at: 500ms}
`))
	if err != nil {
		t.Fatal(err)
	}
	var asked atomic.Int32
	client := nvidia.New(countingLib{Interface: s.NVML(time.Now(), time.Now), asked: &asked})
	listen := func() (nvidia.ListenStatus, chan nvidia.Event, context.CancelFunc, chan error) {
		ctx, cancel := context.WithCancel(context.Background())
		events := make(chan nvidia.Event, 10)
		statuses := make(chan nvidia.ListenStatus, 1)
		done := make(chan error, 1)
		go func() {
			done <- client.Listen(ctx, func(st nvidia.ListenStatus) { statuses <- st }, func(e nvidia.Event) { events <- e })
		}()
		select {
		case st := <-statuses:
			return st, events, cancel, done
		case <-time.After(5 * time.Second):
			t.Fatal("Listen never finished registering")
		}
		return nvidia.ListenStatus{}, nil, cancel, done
	}
	st, events, cancel, done := listen()
	if st.Devices != 1 || st.Stuck != 1 {
		t.Errorf("status %+v, want 1 device listened to and 1 stuck", st)
	}
	select {
	case e := <-events:
		if e.Index != 1 || e.XID != 13 {
			t.Errorf("event %+v, want GPU 1's Xid 13", e)
		}
	case <-time.After(5 * time.Second):
		t.Error("GPU 1's Xid never came")
	}
	cancel()
	<-done
	// GPU 0's registration still hangs (3 s): counted stuck, not asked
	// again.
	st, _, cancel, done = listen()
	if st.Devices != 1 || st.Stuck != 1 {
		t.Errorf("second Listen: status %+v, want 1 device and 1 stuck", st)
	}
	if n := asked.Load(); n != 1 {
		t.Errorf("GPU 0 asked for its event types %d times, want 1: a hung registration is not piled up", n)
	}
	cancel()
	<-done
	time.Sleep(3 * time.Second) // the hung registration returns before the test ends
}

// countingLib counts GPU 0's nvmlDeviceGetSupportedEventTypes calls.
type countingLib struct {
	nvml.Interface
	asked *atomic.Int32
}

func (l countingLib) DeviceGetHandleByIndex(i int) (nvml.Device, nvml.Return) {
	d, ret := l.Interface.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS || i != 0 {
		return d, ret
	}
	return countingDevice{Device: d, asked: l.asked}, ret
}

type countingDevice struct {
	nvml.Device
	asked *atomic.Int32
}

func (d countingDevice) GetSupportedEventTypes() (uint64, nvml.Return) {
	d.asked.Add(1)
	return d.Device.GetSupportedEventTypes()
}
