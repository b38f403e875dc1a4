package nvidia

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/xpu-exporter/xpu_exporter/internal/flight"
	"github.com/xpu-exporter/xpu_exporter/internal/nvdriver"
	"github.com/xpu-exporter/xpu_exporter/internal/pciaddr"
	"github.com/xpu-exporter/xpu_exporter/vendors/reading"
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
	closed      bool
	symbols     symbols
	// count is the number of devices the driver last reported.
	count int
	// inflight holds each device's read while it runs. Every Read that needs
	// the device meanwhile waits for that read rather than start another:
	// NVML calls cannot be cancelled, so a device is never read twice at
	// once, and a device is down only when its own read fails or misses the
	// waiting scrape's deadline.
	inflight map[int]*deviceRead
	// took is how long each device's last read took, which tells a scrape
	// whether it can wait for a push's read and then read the device
	// itself within its deadline.
	took map[int]time.Duration
	// registering are the devices whose registration for events has not
	// returned: a later Listen does not pile another one up behind it.
	registering map[int]bool
	// identities are remembered so that a device that stops answering is
	// still reported under its own name.
	identities map[int]Identity
	// migs are the MIG instances the last read of a GPU in MIG mode
	// listed, identity and placement only: a GPU that stops answering
	// keeps them, with their owners and allocations.
	migs map[int][]Device
	// noMIG holds the GPUs the last read found outside MIG mode: one that
	// stops answering is still known to hold no MIG instances, which keeps
	// the node's Slurm GRES numbering (collector gresIndices).
	noMIG map[int]bool
	// lastSeen is where each device's next utilization window starts: the
	// newest device sample of the last committed read, and windows that
	// read's window.
	lastSeen map[int]uint64
	windows  map[int]*window
	// pushed is the window of the last push that moved on past the last
	// scrape (ReadPush): the pushes' next window starts after it, the
	// scrapes' still at lastSeen.
	pushed map[int]*window
	// gpm keeps each device's previous GPM sample. Only the goroutine that
	// reads a device touches its entry, and never two at once (inflight).
	gpm map[int]*gpmDevice

	// driverGPUs reads the driver's own table of its GPUs, for naming a
	// GPU lost since before the first read (see nameLost); nil: none.
	driverGPUs func() ([]nvdriver.GPU, error)
}

// deviceRead is one read of a device (the GPU and its MIG instances).
type deviceRead struct {
	done chan struct{}
	devs []Device
	// started is when the read began. A read that has already run longer
	// than a later Read's whole budget is stuck in the driver, as far as
	// that Read can tell: it reports the device down at once rather than
	// wait out its deadline in vain. One that has run less is a slow
	// device the Read waits for, whatever the budget of the Read that
	// started it: a scrape with a timeout of a millisecond must not make a
	// second Prometheus's 10 s scrape report the GPU down.
	started time.Time
	// push says that the read starts from the pushes' window, which no
	// scrape may take as its own, unless scrapes says that window is the
	// scrapes' too: no push has moved past the last scrape, so both start
	// where it ended. A scrape then takes the read rather than wait for it
	// and read the device again after it, which a slow device's read (one
	// a push gave up on at its own, shorter deadline) could not finish by
	// the scrape's deadline.
	push, scrapes bool
	// commit is what the read moves on (see pending): the most any of its
	// callers moves; set under Client.mu until the read seals it.
	commit move
	sealed bool
	// after is the read this one waits for before it starts: one device
	// is never read twice at once.
	after <-chan struct{}
}

// move is what a read moves on of the windows that readings averaged
// since an earlier read cover (utilization samples, GPM). Its order is
// that of a read shared by callers asking for more.
type move uint8

const (
	moveNone   move = iota // /devices, event owner look-ups
	movePush               // a push with no scraper: the pushes' window alone
	moveScrape             // a scrape: the scrapes' window, and the pushes' with it
)

// New returns a client over an NVML implementation: nvml.New() in
// production, a simulated driver in tests and demo mode.
func New(lib nvml.Interface, opts ...Option) *Client {
	c := &Client{lib: lib, inflight: map[int]*deviceRead{}, took: map[int]time.Duration{}, registering: map[int]bool{}, identities: map[int]Identity{}, migs: map[int][]Device{}, noMIG: map[int]bool{}, lastSeen: map[int]uint64{}, windows: map[int]*window{}, pushed: map[int]*window{}, gpm: map[int]*gpmDevice{}}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Option configures a Client.
type Option func(*Client)

// DriverTable names a GPU lost since before the exporter's first read of it
// from the NVIDIA driver's table of its GPUs under the procfs mount point
// root (see nameLost).
func DriverTable(root string) Option {
	return func(c *Client) {
		c.driverGPUs = func() ([]nvdriver.GPU, error) { return nvdriver.GPUs(root) }
	}
}

// Library is NVML loaded from path, a file the operator named. That it
// cannot be loaded is not a node without NVIDIA's driver (ErrNoDriver, a
// collector that succeeds): Init returns an error naming the path, so that a
// typo does not hide every GPU of the node. Init still tries again at each
// call, for a library that appears later (a driver container installing it).
func Library(path string) nvml.Interface {
	return namedLibrary{Interface: nvml.New(nvml.WithLibraryPath(path)), path: path}
}

type namedLibrary struct {
	nvml.Interface
	path string
}

// loadError says why the library did not load, as far as can be told:
// go-nvml keeps only that it did not.
func (l namedLibrary) loadError() error {
	if _, err := os.Stat(l.path); err != nil {
		return fmt.Errorf("load NVML library: %w", err)
	}
	return fmt.Errorf("load NVML library %s: not a shared library this process can load (another architecture, or a library it needs is missing)", l.path)
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
		if l, ok := c.lib.(namedLibrary); ok {
			return l.loadError()
		}
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

// Shutdown releases NVML. A device read still running (stuck in the driver)
// keeps its own state and releases it when it returns.
func (c *Client) Shutdown() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.initialized {
		return
	}
	c.closed = true
	for index, g := range c.gpm {
		if c.inflight[index] == nil {
			g.freeAll()
			delete(c.gpm, index)
		}
	}
	c.lib.Shutdown()
	c.initialized = false
}

// Read queries every device in parallel and returns when all have answered
// or ctx is done. A device that has not answered by then is returned down
// with Down "timeout"; its query goes on in the background, and later Reads
// wait for it rather than query the device again.
//
// advance says that the caller is a scrape: the windows that readings
// averaged since the previous scrape cover (utilization samples, GPM) then
// move on to this read. Other callers (/devices, event owner look-ups) see
// the same averages without shortening the next scrape's window.
func (c *Client) Read(ctx context.Context, advance bool) (Node, error) {
	if advance {
		return c.read(ctx, moveScrape)
	}
	return c.read(ctx, moveNone)
}

// ReadPush is Read for a push that moves a window on although no scrape
// uses it (an OTLP push with no Prometheus scraping): its averages cover
// the time since the previous such push, or the last scrape if later, and
// the scrapes' window is left where it was, so that the next scrape
// covers the time since the last scrape (or the warm-up) whatever the
// pushes did.
func (c *Client) ReadPush(ctx context.Context) (Node, error) {
	return c.read(ctx, movePush)
}

func (c *Client) read(ctx context.Context, m move) (Node, error) {
	if err := c.Init(); err != nil {
		return Node{}, err
	}
	count, ret := c.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return Node{}, fmt.Errorf("count NVIDIA devices: %s", ret.Error())
	}
	c.mu.Lock()
	c.count = count
	c.mu.Unlock()
	var node Node
	if v, ret := c.lib.SystemGetDriverVersion(); ret == nvml.SUCCESS {
		node.DriverVersion = v
	}
	if v, ret := c.lib.SystemGetCudaDriverVersion(); ret == nvml.SUCCESS {
		node.CUDAVersion = fmt.Sprintf("%d.%d", v/1000, v%1000/10)
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(time.Hour)
	}
	reads := make([]*deviceRead, count)
	for i := range count {
		reads[i] = c.start(i, deadline, m)
	}
	// A GPU and its MIG instances come together; most GPUs have none.
	node.Devices = make([]Device, 0, count)
	for i, r := range reads {
		node.Devices = append(node.Devices, c.await(ctx, i, r)...)
	}
	c.nameLost(node.Devices)
	return node, nil
}

// nameLost names the GPU of devs that no read has identified, lost since
// before the exporter first read it: NVML answers GPU_IS_LOST for its UUID
// and PCI address as for everything else (nvml.h, nvmlDeviceGetUUID,
// nvmlDeviceGetPciInfo: "NVML_ERROR_GPU_IS_LOST if the target GPU has
// fallen off the bus or is otherwise inaccessible"), and its index alone
// would leave it without its UUID and owners, so that a restart changes
// the identity of an alert about it. The driver still lists the GPU in its
// own table, but nothing there says which NVML index it is (nvml.h,
// nvmlDeviceGetHandleByIndex: "The order in which NVML enumerates devices
// has no guarantees of consistency between reboots"): it is named only by
// elimination, when it is the one unidentified device, every other GPU's
// PCI address is known, and the table lists exactly the GPUs NVML counts
// with just one at no known address. The name is then kept as a read's
// would be.
func (c *Client) nameLost(devs []Device) {
	if c.driverGPUs == nil {
		return
	}
	lost, whole := -1, 0
	known := map[string]bool{}
	for i := range devs {
		d := &devs[i]
		if d.MIG != nil {
			continue
		}
		whole++
		switch addr := pciaddr.Canonical(d.PCIBusID); {
		case addr != "":
			known[addr] = true
		case d.PCIBusID == "" && d.UUID == "" && !d.Up && lost < 0:
			lost = i
		default:
			// Another device without an address: which GPU of the
			// table is whose cannot be told.
			return
		}
	}
	if lost < 0 {
		return
	}
	table, err := c.driverGPUs()
	if err != nil {
		return
	}
	var left []nvdriver.GPU
	listed := 0
	for _, g := range table {
		if g.Excluded {
			continue
		}
		listed++
		if !known[pciaddr.Canonical(g.BusID)] {
			left = append(left, g)
		}
	}
	if listed != whole || len(left) != 1 {
		return
	}
	g, d := left[0], &devs[lost]
	d.UUID, d.Name, d.PCIBusID = g.UUID, g.Model, nvmlBusID(g.BusID)
	if g.Minor >= 0 {
		d.Minor = reading.Some(g.Minor)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.identities[d.Index]; !ok {
		c.identities[d.Index] = d.Identity
	}
}

// nvmlBusID writes a PCI address of the driver's table as NVML writes it
// (busID: lower-cased nvmlPciInfo_t busId, 8-digit domain), so that a GPU
// named from the table has the address a read would give it.
func nvmlBusID(id string) string {
	domain, rest, ok := strings.Cut(id, ":")
	if !ok || len(domain) >= 8 {
		return id
	}
	return strings.Repeat("0", 8-len(domain)) + domain + ":" + rest
}

// start returns the device's read in flight, or starts one. A read stuck
// (see deviceRead.started) is returned as nil. A scrape does not share a
// push's read, whose window starts at the last push: it reads the device
// after it, unless the two reads would not end by its deadline.
func (c *Client) start(index int, deadline time.Time, m move) *deviceRead {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	var after <-chan struct{}
	if r := c.inflight[index]; r != nil {
		if now.Sub(r.started) > deadline.Sub(now) {
			return nil
		}
		shared := !r.push || r.scrapes && !r.sealed
		if !shared && m == moveScrape && !r.sealed {
			// A scrape waits for a push's read and then reads the device
			// over its own window; where the two reads, each as long as
			// the last one, would not end by its deadline, it shares the
			// push's read, and serves the push's window, rather than
			// report a slow GPU down (found by probing:
			// probe13-otlpscrape D4).
			took := c.took[index]
			shared = took > 0 && now.Add(took-now.Sub(r.started)+took).After(deadline)
		}
		if shared || m != moveScrape {
			if !r.sealed && shared {
				r.commit = max(r.commit, m)
			}
			return r
		}
		after = r.done
	}
	r := &deviceRead{done: make(chan struct{}), started: now, push: m == movePush, commit: m, after: after}
	// No read of the device runs (after is only a push's, which a scrape
	// waits for): its window state is still.
	r.scrapes = r.push && c.pushed[index] == nil && !c.gpm[index].pushedAny()
	c.inflight[index] = r
	go c.run(index, r)
	return r
}

// run reads the device, then commits or undoes what the read took from the
// device's windows, before anyone can start the next read of it.
func (c *Client) run(index int, r *deviceRead) {
	if r.after != nil {
		<-r.after
	}
	began := time.Now()
	devs, p := c.readIndex(index, r.push)
	c.mu.Lock()
	c.took[index] = time.Since(began)
	r.sealed = true
	commit, closed := r.commit, c.closed
	c.mu.Unlock()
	if closed {
		commit = moveNone
	}
	p.apply(commit)
	c.mu.Lock()
	switch {
	case commit == moveScrape:
		if p.win != nil && p.win.end > c.lastSeen[index] {
			c.lastSeen[index], c.windows[index] = p.win.end, p.win
		}
		delete(c.pushed, index)
	case commit == movePush && p.win != nil && p.win.end > c.pushStart(index):
		c.pushed[index] = p.win
	}
	if closed {
		if g := c.gpm[index]; g != nil {
			g.freeAll()
			delete(c.gpm, index)
		}
	}
	if c.inflight[index] == r {
		delete(c.inflight, index)
	}
	c.mu.Unlock()
	r.devs = devs
	close(r.done)
}

// await takes the device's answer, or reports it down once ctx is done. An
// answer already there when ctx ends still counts.
func (c *Client) await(ctx context.Context, index int, r *deviceRead) []Device {
	if r == nil {
		return c.down(index, "previous query still running")
	}
	if !flight.Done(ctx, r.done) {
		return c.down(index, "timeout")
	}
	return r.devs
}

// Known returns every device the driver has counted so far, down with why,
// named as far as it was identified: what a scrape reports when it cannot
// wait for the devices at all.
func (c *Client) Known(why string) []Device {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Device, 0, c.count)
	for i := range c.count {
		out = append(out, c.downLocked(i, why)...)
	}
	return out
}

// down is the GPU at index and its MIG instances, down with why, as far as
// earlier reads named them.
func (c *Client) down(index int, why string) []Device {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.downLocked(index, why)
}

// downLocked is down with c.mu held.
func (c *Client) downLocked(index int, why string) []Device {
	id, ok := c.identities[index]
	if !ok {
		id = Identity{Index: index}
	}
	gpu := Device{Identity: id, Down: why}
	migs, inMIG := c.migs[index]
	switch {
	case inMIG:
		gpu.MIGEnabled, gpu.MIGListed = reading.Some(true), true
	case c.noMIG[index]:
		gpu.MIGEnabled = reading.Some(false)
	}
	out := append(make([]Device, 0, 1+len(migs)), gpu)
	for _, d := range migs {
		out = append(out, Device{Identity: d.Identity, MIG: d.MIG, Down: why})
	}
	return out
}

// pushStart is where a push's window of the device starts (c.mu held): at
// the last push that moved on past the last scrape, or at that scrape.
func (c *Client) pushStart(index int) uint64 {
	if w := c.pushed[index]; w != nil {
		return w.end
	}
	return c.lastSeen[index]
}

// readIndex reads the GPU at index and its MIG instances, over the pushes'
// window (push) or the scrapes'. A panic inside the
// driver binding or a simulated driver marks this device down and nothing
// else. The pending changes to the device's windows are returned with the
// readings, for run to apply.
func (c *Client) readIndex(index int, push bool) (devs []Device, p *windowChange) {
	p = &windowChange{}
	gpu := &Device{Identity: Identity{Index: index}}
	defer func() {
		if r := recover(); r != nil {
			// gpu holds what was read before the panic, its identity first.
			devs = []Device{{Identity: gpu.Identity, Down: fmt.Sprintf("panic: %v", r)}}
		}
	}()
	h, ret := c.lib.DeviceGetHandleByIndex(index)
	if ret != nvml.SUCCESS {
		return c.down(index, "get handle: "+ret.Error()), p
	}
	c.mu.Lock()
	g := c.gpm[index]
	if g == nil {
		g = &gpmDevice{states: map[string]*gpmState{}, seen: map[string]bool{}}
		c.gpm[index] = g
	}
	r := &reader{lib: c.lib, gpm: g, symbols: c.symbols, lastSeen: c.lastSeen[index], prev: c.windows[index], push: push, pending: &p.pending}
	if w := c.pushed[index]; push && w != nil {
		r.lastSeen, r.prev = w.end, w
	}
	r.identified = func(id Identity) {
		c.mu.Lock()
		c.identities[index] = id
		c.mu.Unlock()
	}
	c.mu.Unlock()
	p.commit = append(p.commit, g.sweep)
	p.pushed = append(p.pushed, g.sweep)
	p.discard = append(p.discard, func() { clear(g.seen) })
	r.readGPU(h, gpu)
	var known []Device
	if !gpu.Up {
		// Lost before it could be read whole this time: it is the GPU an
		// earlier read named (NVML's indexes hold for the session), with
		// the MIG instances it listed, and their owners, alerts and
		// capacity must still name them.
		known = c.down(index, gpu.Down)
		if gpu.UUID == "" {
			gpu.Identity = known[0].Identity
		}
	}
	p.win = r.win
	var migs []Device
	switch {
	case gpu.Up && gpu.MIGEnabled.OK && gpu.MIGEnabled.Value:
		migs, gpu.MIGListed = r.readMIGInstances(*gpu, h)
		if gpu.MIGListed {
			c.rememberMIG(index, true, migs)
		}
	case gpu.Up && gpu.MIGEnabled.OK:
		c.rememberMIG(index, false, nil)
	case !gpu.Up && known[0].MIGEnabled.OK:
		gpu.MIGEnabled, gpu.MIGListed, migs = known[0].MIGEnabled, true, known[1:]
	}
	devs = append(devs, *gpu)
	devs = append(devs, migs...)
	return devs, p
}

// rememberMIG keeps whether a GPU is in MIG mode and the identity and
// placement of its MIG instances, for when it stops answering.
func (c *Client) rememberMIG(index int, inMIG bool, migs []Device) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.noMIG[index] = !inMIG
	if !inMIG {
		delete(c.migs, index)
		return
	}
	kept := make([]Device, len(migs))
	for i, d := range migs {
		kept[i] = Device{Identity: d.Identity, MIG: d.MIG}
	}
	c.migs[index] = kept
}

// windowChange is what one read of a device would move on: the GPM samples
// (pending) and its utilization window, where the next one starts.
type windowChange struct {
	pending
	win *window
}
