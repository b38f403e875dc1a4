package nvidia

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Event is an NVML event of one device.
type Event struct {
	Index int
	UUID  string
	// Type is "xid", "double_bit_ecc" or "single_bit_ecc".
	Type string
	// XID is the Xid error code of an "xid" event.
	XID uint64
	// GPUInstance is the MIG GPU instance the event concerns, or -1.
	GPUInstance int
	// ComputeInstance is the compute instance of GPUInstance the event
	// concerns, or -1 when it is about the GPU instance as a whole.
	ComputeInstance int
	Time            time.Time
}

// eventTypes are the events the exporter listens for, by NVML bit.
var eventTypes = []struct {
	bit  uint64
	name string
}{
	{nvml.EventTypeXidCriticalError, "xid"},
	{nvml.EventTypeDoubleBitEccError, "double_bit_ecc"},
	{nvml.EventTypeSingleBitEccError, "single_bit_ecc"},
}

// ErrNoEvents is returned by Listen when no device supports the events.
var ErrNoEvents = errors.New("no NVIDIA device supports XID or ECC events")

// ErrWait is returned, wrapped, by Listen when nvmlEventSetWait keeps
// failing: the set is to be made anew, without the GPUs that can no longer
// be registered.
var ErrWait = errors.New("wait for NVML events")

// waitFailures is how many waits in a row, a second apart, must fail
// before Listen gives up on its event set. nvml.h, nvmlEventSetWait_v2:
// NVML_ERROR_GPU_IS_LOST "if a GPU has fallen off the bus or is otherwise
// inaccessible", which says nothing of the set's other GPUs: while the
// lost one stays in the set, their events may never be delivered.
const waitFailures = 3

// ListenStatus says what Listen could register, for logs and self-metrics.
type ListenStatus struct {
	Devices     int // devices registered for at least one event type
	Unsupported int // devices without event support
	// Lost are the devices NVML answered GPU_IS_LOST for when they were
	// registered.
	Lost int
	// Stuck are the devices whose registration did not return within
	// registerTimeout: a GPU hung in the driver, left out so that the
	// others are listened to.
	Stuck int
}

// registerTimeout bounds the registration of one device for events.
var registerTimeout = 5 * time.Second

// registration is what registering one device for events gave.
type registration struct {
	handle     nvml.Device
	uuid       string
	registered bool
	lost       bool
}

// registered names a registered device by the handle NVML gives its
// events: an event of a GPU falling off the bus (Xid 79) arrives when the
// GPU can no longer tell its UUID (GetUUID answers GPU_IS_LOST), so the
// UUID read at registration names it.
type registered struct {
	index int
	uuid  string
}

// Listen registers every device for XID and ECC events and calls handle for
// each event until ctx ends. ready is called once registration is done. It
// is the exporter's one piece of background work: events happen between
// scrapes and would be lost otherwise.
func (c *Client) Listen(ctx context.Context, ready func(ListenStatus), handle func(Event)) error {
	if err := c.Init(); err != nil {
		return err
	}
	set, ret := c.lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("create NVML event set: %s", ret.Error())
	}
	// A registration still stuck in the driver holds the set: it is freed
	// once the last one returns, never under it.
	var pending sync.WaitGroup
	defer func() { go func() { pending.Wait(); set.Free() }() }()

	count, ret := c.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("count NVIDIA devices: %s", ret.Error())
	}
	var status ListenStatus
	uuids := map[string]int{}               // UUID → index, to name the device of an event
	handles := map[nvml.Device]registered{} // handle → what it was at registration
	for i := range count {
		c.mu.Lock()
		busy := c.registering[i]
		c.registering[i] = true
		c.mu.Unlock()
		if busy {
			status.Stuck++
			continue
		}
		done := make(chan registration, 1)
		pending.Add(1)
		go func() {
			defer pending.Done()
			reg := c.register(i, set)
			c.mu.Lock()
			delete(c.registering, i)
			c.mu.Unlock()
			done <- reg
		}()
		select {
		case reg := <-done:
			if reg.uuid != "" {
				uuids[reg.uuid] = i
				if reg.handle != nil && reflect.TypeOf(reg.handle).Comparable() {
					handles[reg.handle] = registered{index: i, uuid: reg.uuid}
				}
			}
			switch {
			case reg.registered:
				status.Devices++
			case reg.lost:
				status.Lost++
			default:
				status.Unsupported++
			}
		case <-time.After(registerTimeout):
			status.Stuck++
		case <-ctx.Done():
			return nil
		}
	}
	if ready != nil {
		ready(status)
	}
	if status.Devices == 0 {
		return ErrNoEvents
	}
	failed := 0
	for {
		// A short wait keeps shutdown prompt; NVML has no way to interrupt
		// a wait in progress.
		data, ret := set.Wait(500)
		if ctx.Err() != nil {
			return nil
		}
		switch ret {
		case nvml.SUCCESS:
			failed = 0
			if ev, ok := convertEvent(data, uuids, handles); ok {
				handle(ev)
			}
		case nvml.ERROR_TIMEOUT:
			failed = 0
		default:
			failed++
			if failed >= waitFailures {
				return fmt.Errorf("%w: %s", ErrWait, ret.Error())
			}
			// A driver hiccup may pass: wait again, without spinning.
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(time.Second):
			}
		}
	}
}

func convertEvent(data nvml.EventData, uuids map[string]int, handles map[nvml.Device]registered) (Event, bool) {
	ev := Event{Index: -1, GPUInstance: -1, ComputeInstance: -1, Time: time.Now()}
	for _, t := range eventTypes {
		if data.EventType&t.bit != 0 {
			ev.Type = t.name
		}
	}
	if ev.Type == "" {
		return ev, false
	}
	if data.Device != nil {
		if uuid, ret := data.Device.GetUUID(); ret == nvml.SUCCESS {
			ev.UUID = uuid
			if i, ok := uuids[uuid]; ok {
				ev.Index = i
			}
		} else if reflect.TypeOf(data.Device).Comparable() {
			if reg, ok := handles[data.Device]; ok {
				ev.UUID, ev.Index = reg.uuid, reg.index
			}
		}
	}
	if ev.Type == "xid" {
		ev.XID = data.EventData
	}
	// nvml.h, nvmlEventData_t: "If MIG is enabled and
	// nvmlEventTypeXidCriticalError event is attributable to a GPU
	// instance, stores a valid GPU instance ID. gpuInstanceId is invalid
	// otherwise", and likewise computeInstanceId for a compute instance;
	// NVML sets an invalid one to all ones.
	if data.GpuInstanceId != ^uint32(0) {
		ev.GPUInstance = int(data.GpuInstanceId)
		if data.ComputeInstanceId != ^uint32(0) {
			ev.ComputeInstance = int(data.ComputeInstanceId)
		}
	}
	return ev, true
}

// register registers device index for the event types it supports.
func (c *Client) register(index int, set nvml.EventSet) registration {
	h, ret := c.lib.DeviceGetHandleByIndex(index)
	if ret != nvml.SUCCESS {
		return registration{lost: ret == nvml.ERROR_GPU_IS_LOST}
	}
	uuid, ret := h.GetUUID()
	if ret == nvml.ERROR_GPU_IS_LOST {
		return registration{lost: true}
	}
	if ret != nvml.SUCCESS {
		uuid = ""
	}
	supported, ret := h.GetSupportedEventTypes()
	var mask uint64
	for _, t := range eventTypes {
		mask |= t.bit
	}
	if ret != nvml.SUCCESS || supported&mask == 0 {
		return registration{uuid: uuid, lost: ret == nvml.ERROR_GPU_IS_LOST}
	}
	if ret := h.RegisterEvents(supported&mask, set); ret != nvml.SUCCESS {
		return registration{uuid: uuid, lost: ret == nvml.ERROR_GPU_IS_LOST}
	}
	return registration{handle: h, uuid: uuid, registered: true}
}
