package nvidia

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// ErrNoDriver is returned while the NVML library cannot be loaded: the
// machine has no NVIDIA driver (yet).
var ErrNoDriver = errors.New("NVML library not found (no NVIDIA driver on this machine)")

// Client reads all NVIDIA devices of the node. It is safe for concurrent use,
// but the exporter coalesces scrapes so that NVML is queried once at a time.
type Client struct {
	lib nvml.Interface

	mu          sync.Mutex
	initialized bool
	symbols     symbols
	// stuck holds the indices of devices whose last query outlived its
	// deadline and has not returned yet: NVML calls cannot be cancelled, so
	// they are not queried again until the stuck call comes back.
	stuck map[int]bool
	// identities are remembered so that a device that stops answering is
	// still reported under its own name.
	identities map[int]Identity
	// lastSeen is the newest per-process utilization sample per device.
	lastSeen map[int]uint64
	// gpm keeps each device's previous GPM sample. Only the goroutine that
	// reads a device touches its entry, and never two at once (see stuck).
	gpm map[int]*gpmDevice
}

// New returns a client over an NVML implementation: nvml.New() in
// production, a go-nvml mock in tests and demo mode.
func New(lib nvml.Interface) *Client {
	return &Client{lib: lib, stuck: map[int]bool{}, identities: map[int]Identity{}, lastSeen: map[int]uint64{}, gpm: map[int]*gpmDevice{}}
}

// Init loads and initialises NVML. The exporter calls it at every scrape until
// it succeeds, so that a driver installed after the exporter started (as the
// GPU operator does) is picked up without a restart.
func (c *Client) Init() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.initialized {
		return nil
	}
	switch ret := c.lib.Init(); ret {
	case nvml.SUCCESS:
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return ErrNoDriver
	default:
		return fmt.Errorf("initialise NVML: %s", ret.Error())
	}
	c.initialized = true
	c.symbols = lookupSymbols(c.lib)
	return nil
}

// symbols says which of NVML's newer entry points the loaded driver has.
// go-nvml binds NVML lazily: calling a function an older driver lacks does
// not fail, it kills the process, so those are only called when present.
type symbols struct {
	memoryV2     bool // R510
	remappedRows bool // R460
	gpm          bool // R520
	// Clock "event reasons" replaced "throttle reasons" in R535, which
	// future drivers may drop.
	eventReasons bool
}

func lookupSymbols(lib nvml.Interface) symbols {
	has := func(names ...string) bool {
		for _, n := range names {
			if lib.Extensions().LookupSymbol(n) != nil {
				return false
			}
		}
		return true
	}
	return symbols{
		memoryV2:     has("nvmlDeviceGetMemoryInfo_v2"),
		remappedRows: has("nvmlDeviceGetRemappedRows"),
		gpm:          has("nvmlGpmQueryDeviceSupport", "nvmlGpmSampleAlloc", "nvmlGpmSampleGet", "nvmlGpmMigSampleGet", "nvmlGpmMetricsGet", "nvmlGpmSampleFree"),
		eventReasons: has("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetSupportedClocksEventReasons"),
	}
}

// Shutdown releases NVML.
func (c *Client) Shutdown() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.initialized {
		for _, g := range c.gpm {
			g.sweep() // nothing is marked seen: every sample is freed
		}
		c.lib.Shutdown()
		c.initialized = false
	}
}

// Read queries every device in parallel and returns when all have answered
// or ctx is done. A device that has not answered by then is returned down
// with Down "timeout"; its query goes on in the background and the device is
// reported down without being queried again until that query returns.
func (c *Client) Read(ctx context.Context) (Node, error) {
	if err := c.Init(); err != nil {
		return Node{}, err
	}
	count, ret := c.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return Node{}, fmt.Errorf("count NVIDIA devices: %s", ret.Error())
	}
	var node Node
	if v, ret := c.lib.SystemGetDriverVersion(); ret == nvml.SUCCESS {
		node.DriverVersion = v
	}
	if v, ret := c.lib.SystemGetCudaDriverVersion(); ret == nvml.SUCCESS {
		node.CUDAVersion = fmt.Sprintf("%d.%d", v/1000, v%1000/10)
	}

	results := make([]chan []Device, count)
	for i := range count {
		results[i] = make(chan []Device, 1) // buffered: a late answer must not block forever
		if !c.claim(i) {
			close(results[i])
			continue
		}
		go func() {
			defer c.release(i)
			results[i] <- c.readIndex(i)
		}()
	}
	for i := range count {
		node.Devices = append(node.Devices, c.await(ctx, i, results[i])...)
	}
	return node, nil
}

// await takes device index's answer, or reports it down once ctx is done.
// An answer already there when ctx ends still counts.
func (c *Client) await(ctx context.Context, index int, result <-chan []Device) []Device {
	select {
	case devs, ok := <-result:
		if !ok {
			return []Device{c.down(index, "previous query still running")}
		}
		return devs
	case <-ctx.Done():
	}
	select {
	case devs, ok := <-result:
		if ok {
			return devs
		}
		return []Device{c.down(index, "previous query still running")}
	default:
		return []Device{c.down(index, "timeout")}
	}
}

func (c *Client) claim(index int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stuck[index] {
		return false
	}
	c.stuck[index] = true
	return true
}

func (c *Client) release(index int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.stuck, index)
}

func (c *Client) down(index int, why string) Device {
	c.mu.Lock()
	id, ok := c.identities[index]
	c.mu.Unlock()
	if !ok {
		id = Identity{Index: index}
	}
	return Device{Identity: id, Down: why}
}

// readIndex reads the GPU at index and its MIG instances. A panic inside the
// driver binding or a mock marks this device down and nothing else.
func (c *Client) readIndex(index int) (devs []Device) {
	gpu := &Device{Identity: Identity{Index: index}}
	defer func() {
		if r := recover(); r != nil {
			// gpu holds what was read before the panic, its identity first.
			devs = []Device{{Identity: gpu.Identity, Down: fmt.Sprintf("panic: %v", r)}}
		}
	}()
	h, ret := c.lib.DeviceGetHandleByIndex(index)
	if ret != nvml.SUCCESS {
		return []Device{c.down(index, "get handle: "+ret.Error())}
	}
	c.mu.Lock()
	g := c.gpm[index]
	if g == nil {
		g = &gpmDevice{states: map[string]*gpmState{}, seen: map[string]bool{}}
		c.gpm[index] = g
	}
	r := &reader{lib: c.lib, gpm: g, symbols: c.symbols, lastSeen: c.lastSeen[index]}
	c.mu.Unlock()
	defer g.sweep()
	r.readGPU(h, gpu)
	if gpu.Up {
		c.mu.Lock()
		c.identities[index] = gpu.Identity
		c.lastSeen[index] = r.lastSeen
		c.mu.Unlock()
	}
	devs = append(devs, *gpu)
	if gpu.Up && gpu.MIGEnabled.OK && gpu.MIGEnabled.Value {
		devs = append(devs, r.readMIGInstances(*gpu, h)...)
	}
	return devs
}
