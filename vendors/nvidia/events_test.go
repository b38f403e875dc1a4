package nvidia_test

import (
	"context"
	"testing"
	"time"

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
