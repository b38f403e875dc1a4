package collector

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xpu-exporter/xpu_exporter/attribution/process"
	"github.com/xpu-exporter/xpu_exporter/internal/flight"
	"github.com/xpu-exporter/xpu_exporter/vendors/amd"
	"github.com/xpu-exporter/xpu_exporter/vendors/reading"
)

func init() {
	registerCollector("amd", true, "AMD Instinct GPUs through the amdgpu driver's sysfs files (--path.sysfs) and the DRM fdinfo of their processes (--path.procfs); with no amdgpu device it logs one line and serves none", newAMDCollector)
}

var (
	amdReadErrors = counter("amd_read_errors_total", "amdgpu sysfs and procfs files that exist but could not be read or parsed, by file (not counting readings a model lacks).")
	amdXGMIData   = counter("amd_xgmi_data_bytes_total", "Data the GPU's XGMI links carried since the driver was loaded, summed over its links (one the firmware leaves out of a read counts at its last value, one that appears later from then on, one that starts again counts on from 0), by direction (read, write), from gpu_metrics.")
	amdPCIeNAKs   = counter("amd_pcie_naks_total", "PCIe NAKs the GPU's link generated and received, from amdgpu's pcie_replay_count: each asks the other end for a replay, so this counts replays on both ends of the link, where xpu_pcie_replays_total counts the GPU's own.")
	amdRASErrors  = counter("amd_ras_errors_total", "Errors the amdgpu RAS block counted since the driver was loaded, by block (umc, gfx, sdma, xgmi_wafl, …) and type (corrected, uncorrected, deferred).")
)

// amdTimeout is the down reason of a GPU whose sysfs read did not answer
// before the scrape deadline; amdGone of one that answered ENODEV.
const (
	amdTimeout = "timeout"
	amdGone    = "gone"
)

// amdCollector reads every amdgpu card at scrape time, each in its own
// goroutine. A card whose read outlives the scrape (a GPU in reset can
// block a sysfs read in the driver) is reported down "timeout" and not
// read again until that read returns, as vendors/nvidia's Client does for
// NVML calls: one wedged GPU never piles up goroutines nor hides the others.
//
// Indices: a GPU's `gpu` label is its position among the node's amdgpu
// cards in card-number order (probe order) when the collector first sees
// them, and stays with the GPU (its PCI address) while the exporter runs:
// DRM minors are handed out at registration, so a GPU re-registered after
// a reset or a PCI rescan may come back as another card, and the others
// must not be renumbered when one vanishes (its index stays with it,
// reported down). A GPU that appears later takes the lowest index free.
// ROCm's own tools number GPUs
// by their own enumeration, and the ROCm SMI documentation warns that "a
// device may end up with a different index after a reboot, so an index
// should not be relied upon to be constant over reboots"; so attribution
// never joins by index on AMD: the ROCm device plugin names GPUs by PCI
// address, matched by PCIBusID, and uuid (unique_id) is the stable name.
//
// Compute partitions (MI300 DPX/QPX/CPX) are reported like MIG instances:
// the GPU is a device with HasMIG set (no owner labels, no usage of its
// own) and each partition a device with MIG set, whose parent_uuid is the
// GPU's, mig_profile the partition mode in lower case ("dpx") and
// mig_instance the partition's number in its GPU (0 for the partition on
// the GPU's own PCI function, then the amdgpu_xcp_<n> devices in order).
// Reusing MIGInstance keeps one set of label names for "a slice of a GPU"
// on dashboards and in the attribution and sharing code.
type amdCollector struct {
	reader  amd.Reader
	scanner amd.FdinfoScanner
	procfs  process.Reader
	logger  *slog.Logger
	now     func() time.Time

	mu       sync.Mutex
	inflight map[string]*amdRead          // card → read in flight
	known    map[string]amdIdentity       // card → identity at its last answer
	indices  map[string]int               // PCI address (card/<card> before one is read) → gpu index
	readErrs map[string]map[string]string // card → failing file → kind, logged on change only
	window   amdWindow                    // fdinfo scan at the previous scrape
	errs     map[string]float64           // file → count
	state    string                       // logged on change only
	// pushed is the fdinfo scan of the last push that moved on past the
	// previous scrape (movePush), nil when none has: the start of the
	// pushes' window, while window stays the scrapes'.
	pushed *amdWindow
	// scanState is the process scan's first error, "" when it read every
	// process; logged on change only.
	scanState string
	// opaque is "held" while processes hold AMD GPUs through files whose
	// fdinfo shows no usage stats, "" otherwise; logged on change only.
	opaque string
	// unlisted are the amdgpu devices DRM clients named at the last scan
	// that no device lists; logged on change only.
	unlisted string
	// scanning is the process scan under way, shared by the reads that
	// meet it; nil when none is. A scan stuck in a read (a process's
	// fdinfo, which may block on a GPU wedged in the driver) is not
	// started again until it returns.
	scanning *procRead
	// scanStuck says a scan outlived a read's deadline; logged on change.
	scanStuck bool
	// kfdState is why the KFD processes are unknown, "" when they are
	// known; logged on change only.
	kfdState string
	down     map[string]string // card → why it is down, logged on change
	driver   amd.Opt[string]
	ras      amdRAS
	// energySource is, by PCI address, where a GPU's energy counter was
	// first read from: hwmon's energy1_input or the gpu_metrics
	// accumulator. The two count from different origins, so a scrape in
	// which the chosen one fails serves no energy rather than the other.
	energySource map[string]energySource
	// xgmi is, by PCI address, each GPU's XGMI data links across reads,
	// read and write.
	xgmi map[string]*[2]xgmiLinks
	// layouts are, by PCI address, the compute partitions each GPU had at
	// its last answer, which a GPU that stops answering keeps: the device
	// plugin's IDs and Slurm's GRES numbering name them still.
	layouts map[string]partLayout
	// partlyListed are, by PCI address, the GPUs whose partitions were
	// listed in part at the last answer; logged on change.
	partlyListed map[string]bool
}

// partLayout is a GPU's compute partitions: its mode ("dpx") and each
// partition's device plugin ID, in partition order; none in SPX mode.
type partLayout struct {
	profile string
	ids     []string
}

type energySource int

const (
	energyUnknown energySource = iota
	energyHwmon
	energyTable
)

type amdIdentity struct {
	index, uuid, model, pci string
	minor                   amd.Opt[int] // of its render node
}

type amdRead struct {
	done chan struct{}
	// started is when the read began: one that has run longer than a
	// later scrape's whole budget is stuck (a sysfs read blocked in the
	// driver) to that scrape, whatever the deadline of the scrape that
	// started it, as for NVIDIA (nvidia.Client).
	started time.Time
	// at is when the read began on the collector's clock: the RAS counts
	// it returns are of after then (amdRAS.observe).
	at  time.Time
	dev amd.Device
}

// amdWindow is the fdinfo scan that starts the window of per-process
// engine shares: only scrapes move it on (see Exporter.Snapshot), and
// pushes their own (amdCollector.pushed).
type amdWindow struct {
	at      time.Time
	clients []amd.Client
	// complete says the scan read every process, so that a client absent
	// from it did not exist yet (amd.EngineShares).
	complete bool
	// busy are the clients that used gfx or compute in the window ending
	// at this scan: one of them that closes before the next scan used the
	// device for a part of that window nobody can tell.
	busy map[amd.ClientKey]bool
	// starts are the start times of the busy clients' processes at this
	// scan, where stat could be read: a PID holding another start at the
	// next scan was given to a process that never held those clients.
	starts map[int]uint64
	// shares and unknown are each client's gfx and compute share of the
	// window ending at this scan, and the clients whose share it could not
	// tell: what a scrape too soon after it serves again (amdMinWindow).
	// Both nil until a window has been measured.
	shares  map[amd.ClientKey]float64
	unknown map[amd.ClientKey]bool
	// closed are the clients busy in the window before that closed in this
	// one, and anew those of their processes that started anew by this
	// scan: what a scrape too soon after it serves again, as its shares.
	closed []amd.Client
	anew   map[int]bool
}

// amdMinWindow is the shortest window the engine counters are divided by.
// They move by the jobs the kernel accounts, and need only "catch up with
// the previously reported larger value within a reasonable period" (kernel
// documentation, "DRM client usage stats"): over a few milliseconds a busy
// client may show none of its time, or a dip. A scrape sooner than this
// after the previous one (two Prometheus servers, a gzip and a plain
// scrape that missed each other), or a /devices read, serves the previous
// window again, split and all, as an NVIDIA GPU's does when the driver has
// ended no sample period since.
const amdMinWindow = time.Second

// amdData is what Update needs of an AMD device beyond Device.
type amdData struct {
	dev       *amd.Device // the GPU, or for a partition its parent
	partition int         // -1 for a whole GPU
	// energy is the GPU's energy counter from its source (energySource).
	energy amd.Opt[float64]
	// xgmiRead and xgmiWrite are its XGMI data counters (xgmiLinks).
	xgmiRead, xgmiWrite amd.Opt[float64]
	// newAddress says the GPU answered at a PCI address first seen at this
	// read (movedTo).
	newAddress bool
}

func newAMDCollector(cfg Config) (Collector, error) {
	return &amdCollector{
		reader:       amd.Reader{SysfsRoot: cfg.Sysfs, Files: amd.NewFiles()},
		scanner:      amd.FdinfoScanner{ProcRoot: cfg.Procfs, Driver: "amdgpu"},
		procfs:       process.Reader{Root: cfg.Procfs},
		logger:       cfg.Logger,
		now:          cfg.Now,
		inflight:     map[string]*amdRead{},
		known:        map[string]amdIdentity{},
		indices:      map[string]int{},
		readErrs:     map[string]map[string]string{},
		errs:         map[string]float64{},
		down:         map[string]string{},
		ras:          newAMDRAS(),
		energySource: map[string]energySource{},
		xgmi:         map[string]*[2]xgmiLinks{},
		layouts:      map[string]partLayout{},
		partlyListed: map[string]bool{},
	}, nil
}

// Close closes the sysfs files held open between scrapes.
func (c *amdCollector) Close() { c.reader.Files.Close() }

func (c *amdCollector) readDevices(ctx context.Context, m move) ([]*Device, error) {
	cards, err := c.reader.Cards()
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		c.logState(err.Error(), "AMD collector cannot list DRM cards", "err", err)
		return nil, err
	}
	c.mu.Lock()
	known := len(c.known)
	c.mu.Unlock()
	switch {
	case len(cards) > 0:
		c.logState("ok", "AMD collector reading amdgpu devices through sysfs", "cards", len(cards))
	case known == 0:
		c.logState("none", "AMD collector found no amdgpu device under --path.sysfs; serving no AMD devices until one appears (disable with --no-collector.amd)")
		return nil, nil
	}
	driver := c.reader.DriverVersion()
	c.mu.Lock()
	c.driver = driver
	c.mu.Unlock()

	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(time.Hour)
	}
	reads := make([]*amdRead, len(cards))
	for i, card := range cards {
		reads[i] = c.start(card, deadline)
	}
	// The processes are read while the cards are: a card whose read hangs
	// uses up the deadline, and a walk after it would fail, leaving the
	// GPUs that did answer without their owners.
	scan := c.startScan(ctx)
	var devs []*Device
	var gpus []amd.Device
	byPCI := map[string]*Device{}
	for i, card := range cards {
		ad, answered := c.await(ctx, reads[i])
		if !answered {
			devs = append(devs, c.timedOut(card))
			continue
		}
		c.countReadErrors(ad.Errors)
		if !ad.Down {
			c.logReadErrors(card, ad.Errors)
		}
		d := c.device(card, ad)
		devs = append(devs, d)
		if d.UUID != "" {
			c.mu.Lock()
			c.ras.observe(d.PCIBusID, ad.RAS, reads[i].at)
			c.mu.Unlock()
		}
		if !ad.Down {
			gpus = append(gpus, *ad)
			byPCI[ad.PCIBusID] = d
		}
	}
	devs = append(devs, c.vanished(cards, byPCI)...)
	parts, perrs := c.reader.Partitions(gpus)
	c.countReadErrors(perrs)
	c.logReadErrors("partitions", perrs)
	devs = append(devs, c.partitions(parts, byPCI)...)
	devs = append(devs, c.downPartitions(devs)...)
	c.attachProcesses(c.awaitScan(ctx, scan), devs, m)
	return devs, nil
}

// windowOf is the window a read that moves m starts from and moves on
// (c.mu held): a push's own once one has moved on past the last scrape,
// else the scrapes'.
func (c *amdCollector) windowOf(m move) *amdWindow {
	if m == movePush && c.pushed != nil {
		return c.pushed
	}
	return &c.window
}

// procRead is a process scan under way.
type procRead struct {
	done chan struct{}
	scan procScan
}

// startScan returns the process scan under way, or starts one.
func (c *amdCollector) startScan(ctx context.Context) *procRead {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.scanning != nil {
		return c.scanning
	}
	r := &procRead{done: make(chan struct{})}
	c.scanning = r
	go func() {
		r.scan = c.scanProcesses(ctx)
		c.mu.Lock()
		c.scanning = nil
		stuck := c.scanStuck
		c.scanStuck = false
		c.mu.Unlock()
		if stuck {
			c.logger.Info("AMD process scan returned")
		}
		close(r.done)
	}()
	return r
}

// awaitScan waits for the scan r until ctx ends. One still under way then
// leaves every GPU's process list partial: the GPUs are served with their
// readings, their owners' split unknown, rather than all reported down for
// a process's stuck read.
func (c *amdCollector) awaitScan(ctx context.Context, r *procRead) procScan {
	// Done first: select picks among ready cases at random, and a scan that
	// finished just as the deadline passed is whole.
	select {
	case <-r.done:
		return r.scan
	default:
	}
	select {
	case <-r.done:
		return r.scan
	case <-ctx.Done():
	}
	c.mu.Lock()
	c.errs["procfs"]++
	first := !c.scanStuck
	c.scanStuck = true
	c.mu.Unlock()
	if first {
		c.logger.Warn("AMD process scan did not finish by the deadline (a process's fd or fdinfo read blocks); per-owner memory and utilization are left out until it returns (xpu_amd_read_errors_total{file=\"procfs\"})")
	}
	return procScan{}
}

// start returns the card's read in flight, or starts one; nil when the read
// in flight has already run longer than the caller's whole budget.
func (c *amdCollector) start(card string, deadline time.Time) *amdRead {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if r := c.inflight[card]; r != nil {
		if now.Sub(r.started) > deadline.Sub(now) {
			return nil
		}
		return r
	}
	r := &amdRead{done: make(chan struct{}), started: now, at: c.now()}
	c.inflight[card] = r
	go func() {
		r.dev = c.reader.ReadDevice(card)
		c.mu.Lock()
		delete(c.inflight, card)
		c.mu.Unlock()
		close(r.done)
	}()
	return r
}

func (c *amdCollector) await(ctx context.Context, r *amdRead) (*amd.Device, bool) {
	if r == nil {
		return nil, false
	}
	// The cards are awaited in turn: after a hung one has used up the
	// deadline, a later card has usually answered too.
	if !flight.Done(ctx, r.done) {
		return nil, false
	}
	return &r.dev, true
}

// timedOut is a card that did not answer: down, with the identity it had
// at its last answer, or, when it has never answered (its reads hung from
// the start), the PCI address its sysfs link names, which allocations by
// address (the ROCm device plugin's) and its processes' drm-pdev tie to
// it (found by probing: probe26 D2, such a GPU carried no pod, and its
// holders were logged as of a device no card lists).
func (c *amdCollector) timedOut(card string) *Device {
	c.mu.Lock()
	id := c.known[card]
	c.mu.Unlock()
	if id.pci == "" {
		if addr, ok := c.reader.CardPCIAddress(card); ok {
			id.pci = addr
		}
	}
	c.mu.Lock()
	index, _ := c.indexOf(card, id.pci)
	c.mu.Unlock()
	d := &Device{Vendor: "amd", Index: index, UUID: id.uuid, Model: id.model, PCIBusID: id.pci, Minor: id.minor, vendorData: noAMDReadings()}
	c.logDown(card, d, amdTimeout)
	return d
}

// unanswered is every card known so far, down: a scrape whose deadline
// passed before the collector answered at all still names the GPUs it
// could not read.
func (c *amdCollector) unanswered() []*Device {
	c.mu.Lock()
	devs := make([]*Device, 0, len(c.known))
	for _, id := range c.known {
		devs = append(devs, &Device{Vendor: "amd", Index: id.index, UUID: id.uuid, Model: id.model, PCIBusID: id.pci, Minor: id.minor, vendorData: noAMDReadings()})
	}
	c.mu.Unlock()
	return append(devs, c.downPartitions(devs)...)
}

// noAMDReadings is the vendor data of a GPU that did not answer.
func noAMDReadings() *amdData { return &amdData{dev: &amd.Device{}, partition: -1} }

// amdUUID is the stable name of a GPU: unique_id as the driver prints it
// ("%016llx", lower-case hexadecimal), which persists across machines, or
// the PCI address on a GPU older than GFX9, which has no unique_id.
func amdUUID(ad *amd.Device) string {
	if ad.UniqueID.OK {
		return strings.ToLower(ad.UniqueID.Value)
	}
	return ad.PCIBusID
}

// indexOf is the gpu label of the GPU on card at PCI address pci ("" when
// not known): the index it had, else the lowest one no other GPU holds, and
// then fresh is true. c.mu must be held.
func (c *amdCollector) indexOf(card, pci string) (index string, fresh bool) {
	byCard := "card/" + card
	key := pci
	if key == "" {
		key = byCard
	}
	i, ok := c.indices[key]
	if !ok {
		if j, seen := c.indices[byCard]; seen {
			// Its card was indexed before the GPU named its address.
			i, ok = j, true
			c.indices[key] = i
		}
	}
	if key != byCard {
		delete(c.indices, byCard)
	}
	if ok {
		return strconv.Itoa(i), false
	}
	held := make(map[int]bool, len(c.indices))
	for _, j := range c.indices {
		held[j] = true
	}
	for held[i] {
		i++
	}
	c.indices[key] = i
	return strconv.Itoa(i), true
}

// amdModel is the board's product_name, which amdgpu has only for "certain
// server cards" (amdgpu.rst, DOC: product_name), else its PCI IDs as lspci
// -nn prints them, so that every device series has a model to group and
// price by.
func amdModel(ad *amd.Device) string {
	switch {
	case ad.ProductName.OK:
		return ad.ProductName.Value
	case ad.PCIDevice.OK:
		return "AMD GPU [1002:" + ad.PCIDevice.Value + "]"
	}
	return ""
}

func (c *amdCollector) device(card string, ad *amd.Device) *Device {
	c.mu.Lock()
	pci := ad.PCIBusID
	if pci == "" {
		pci = c.known[card].pci
	}
	index, fresh := c.indexOf(card, pci)
	c.mu.Unlock()
	data := c.gpuData(ad)
	data.newAddress = fresh && ad.PCIBusID != ""
	d := &Device{
		Vendor:   "amd",
		Index:    index,
		UUID:     amdUUID(ad),
		Model:    amdModel(ad),
		PCIBusID: ad.PCIBusID,
		Minor:    ad.RenderMinor,
		Up:       !ad.Down,
		// gpu_busy_percent, and gpu_metrics' activity, are the firmware's
		// latest sample, not a mean since the previous scrape as the
		// processes' fdinfo engine time is.
		UtilizationOfTheMoment: true,
		vendorData:             data,
	}
	if ad.PCIBusID == "" {
		d.UUID = ""
	}
	m := ad.Metrics
	if v, ok := firstOpt(ad.GPUBusy, metricsOpt(m, func(m *amd.GPUMetrics) amd.Opt[float64] { return m.GFXActivity })); ok {
		d.Utilization = &v
	}
	d.MemoryUsed, d.MemoryTotal = asFloat(ad.VRAMUsed), asFloat(ad.VRAMTotal)
	why := ""
	c.mu.Lock()
	switch id, ok := c.known[card]; {
	case ad.Down:
		why = amdGone
		// A GPU that stopped answering before its identity was read is
		// named as it was at its last answer.
		if ok && (d.UUID == "" || d.UUID == id.uuid) {
			d.UUID, d.Model, d.PCIBusID, d.Minor = id.uuid, id.model, id.pci, id.minor
		}
	case d.UUID != "":
		if ok && id.pci != "" && id.pci != d.PCIBusID {
			c.retire(card, id)
		}
		c.known[card] = amdIdentity{index: index, uuid: d.UUID, model: d.Model, pci: d.PCIBusID, minor: d.Minor}
	}
	c.mu.Unlock()
	c.logDown(card, d, why)
	return d
}

// retire keeps the GPU known as card, whose number another GPU now has,
// under a name no card has (c.mu held), with its down state: DRM gives a
// GPU that registers the lowest minor free (drm_minor_alloc), which is
// often that of a GPU that fell off the bus. Keyed by the card alone, the
// lost GPU vanished from every family, and its down state was taken for
// the other GPU's (probe13-reconf D1). vanished reports it down until it
// answers again under any card.
func (c *amdCollector) retire(card string, id amdIdentity) {
	key := card + "@" + id.pci
	c.known[key] = id
	if why, ok := c.down[card]; ok {
		c.down[key] = why
		delete(c.down, card)
	}
}

// gpuData is a whole GPU's readings with its counters kept across reads.
func (c *amdCollector) gpuData(ad *amd.Device) *amdData {
	data := &amdData{dev: ad, partition: -1, energy: c.energy(ad)}
	if m := ad.Metrics; m != nil && ad.PCIBusID != "" {
		c.mu.Lock()
		links := c.xgmi[ad.PCIBusID]
		if links == nil {
			links = &[2]xgmiLinks{}
			c.xgmi[ad.PCIBusID] = links
		}
		data.xgmiRead.Value, data.xgmiRead.OK = links[0].sum(m.XGMIReadBytes)
		data.xgmiWrite.Value, data.xgmiWrite.OK = links[1].sum(m.XGMIWriteBytes)
		c.mu.Unlock()
	}
	return data
}

// energy is the GPU's energy counter from the source it was first read
// from (energySource).
func (c *amdCollector) energy(ad *amd.Device) amd.Opt[float64] {
	hwmon := ad.Energy
	table := metricsOpt(ad.Metrics, func(m *amd.GPUMetrics) amd.Opt[float64] { return m.Energy })
	if ad.PCIBusID == "" {
		return amd.Opt[float64]{} // no key to remember its source by
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	src := c.energySource[ad.PCIBusID]
	if src == energyUnknown {
		switch {
		case hwmon.OK:
			src = energyHwmon
		case table.OK:
			src = energyTable
		}
		c.energySource[ad.PCIBusID] = src
	}
	switch src {
	case energyHwmon:
		return hwmon
	case energyTable:
		return table
	}
	return amd.Opt[float64]{}
}

// vanished are the GPUs known from earlier scrapes whose card is no longer
// listed: a GPU that fell off the bus leaves class/drm once the PCI core
// removes it. They stay reported down, under their last index, so that a
// lost GPU shows as xpu_device_up 0 rather than disappearing. A GPU that
// answers under another card (at, by PCI address: re-registered with a
// new minor), or at another address (movedTo), has not vanished: its old
// card is forgotten.
func (c *amdCollector) vanished(cards []string, at map[string]*Device) []*Device {
	c.mu.Lock()
	var gone []string
	for card, id := range c.known {
		if slices.Contains(cards, card) {
			continue
		}
		d := at[id.pci]
		if d == nil {
			d = c.movedTo(id, at)
		}
		if d != nil && id.pci != "" {
			delete(c.known, card)
			if c.down[card] != "" {
				delete(c.down, card)
				c.logger.Info("AMD device is back", "gpu", d.Index, "uuid", d.UUID, "card", d.vendorData.(*amdData).dev.Card, "was", card)
			}
			continue
		}
		gone = append(gone, card)
	}
	c.mu.Unlock()
	slices.Sort(gone)
	devs := make([]*Device, 0, len(gone))
	for _, card := range gone {
		c.mu.Lock()
		id := c.known[card]
		c.mu.Unlock()
		d := &Device{Vendor: "amd", Index: id.index, UUID: id.uuid, Model: id.model, PCIBusID: id.pci, Minor: id.minor, vendorData: noAMDReadings()}
		c.logDown(card, d, amdGone)
		devs = append(devs, d)
	}
	return devs
}

// movedTo is the GPU that id names, answering at another PCI address (at,
// by address), or nil: a PCI remove and rescan can give a GPU another bus
// number, and its unique_id, which amdgpu says "will persist from machine
// to machine" (amdgpu_pm.c, DOC: unique_id), still names it. Only a GPU at
// an address first seen at this read, the one GPU there with id's
// unique_id, is taken for it, and only when no other GPU known carries
// it: the firmware of two boards can report one unique_id, and one of them
// leaving is not the other coming back. The
// GPU takes id's index, and its old address is forgotten. c.mu must be
// held.
func (c *amdCollector) movedTo(id amdIdentity, at map[string]*Device) *Device {
	if id.uuid == "" || id.uuid == id.pci {
		return nil // no unique_id: named by its address alone (amdUUID)
	}
	var moved *Device
	for _, d := range at {
		if d.UUID != id.uuid || d.PCIBusID == id.pci || !d.vendorData.(*amdData).newAddress {
			continue
		}
		if moved != nil {
			return nil
		}
		moved = d
	}
	if moved == nil {
		return nil
	}
	// Nor when another GPU known at another address, listed or lost,
	// carries the unique_id: which of the two came back is not known
	// (review23 F3: it was Go's map order).
	for _, other := range c.known {
		if other.uuid == id.uuid && other.pci != id.pci && other.pci != moved.PCIBusID {
			return nil
		}
	}
	index, err := strconv.Atoi(id.index)
	if err != nil {
		return nil
	}
	data := moved.vendorData.(*amdData)
	data.newAddress = false
	moved.Index = id.index
	c.indices[moved.PCIBusID] = index
	if k, ok := c.known[data.dev.Card]; ok {
		k.index = id.index
		c.known[data.dev.Card] = k
	}
	delete(c.indices, id.pci)
	delete(c.energySource, id.pci)
	delete(c.xgmi, id.pci)
	delete(c.layouts, id.pci)
	delete(c.partlyListed, id.pci)
	c.ras.moved(id.pci, moved.PCIBusID)
	return moved
}

// partitions makes a device of every compute partition whose GPU answered.
// A partition's utilization is the mean instantaneous busy ratio of its
// XCCs from the gpu_metrics XCP block of the same number (v1.6+): the
// table lists partitions by XCP ID, which is partition 0 for the GPU's own
// function, then its amdgpu_xcp_<n> devices in registration order.
func (c *amdCollector) partitions(parts []amd.Partition, byPCI map[string]*Device) []*Device {
	counts := map[string]int{}
	for _, p := range parts {
		counts[p.ParentPCIBusID]++
	}
	layouts := map[string]partLayout{}
	for pci, d := range byPCI {
		if d.UUID != "" {
			layouts[pci] = partLayout{}
		}
	}
	var out []*Device
	number := map[string]int{}
	for _, p := range parts {
		parent := byPCI[p.ParentPCIBusID]
		if parent == nil || parent.UUID == "" {
			continue
		}
		pd := parent.vendorData.(*amdData).dev
		found, want := counts[p.ParentPCIBusID], partitionCount(pd)
		// A count other than the GPU's own says the partitions are not
		// all listed: amdkfd adds a GPU's topology nodes one at a time as
		// it sets each up (kfd_device.c, kfd_init_node ends with
		// kfd_topology_add_device), so a scrape during a mode switch or a
		// driver load sees some. Each partition's share, which partition
		// number each one has, and Slurm's GRES places are then unknown.
		// A GPU that says it is one partition (SPX) has none on platform
		// devices: one listed is a KFD node a switch has not removed yet.
		spx := pd.ComputePartition.OK && pd.ComputePartition.Value == "SPX"
		whole := !spx && (want == 0 || found == want)
		parent.HasMIG, parent.MIGListed = true, whole
		// Its number from its KFD node, else its place among those found,
		// which is its number only when they are all listed (amdkfd adds
		// them in order, and a listing in part during a switch need not
		// be the first ones).
		n := number[p.ParentPCIBusID]
		number[p.ParentPCIBusID]++
		if p.Number.OK {
			n = p.Number.Value
		}
		data := &amdData{dev: pd, partition: n}
		d := &Device{
			Vendor:                 "amd",
			Index:                  parent.Index,
			UUID:                   parent.UUID + "-xcp" + strconv.Itoa(n),
			Model:                  parent.Model,
			PCIBusID:               parent.PCIBusID,
			Up:                     parent.Up,
			UtilizationOfTheMoment: true,
			MIG: &MIGInstance{
				ParentUUID: parent.UUID,
				Profile:    partitionProfile(pd, spx),
				Instance:   strconv.Itoa(n),
				Index:      n,
				// The ROCm device plugin's name for it: the GPU's PCI
				// address for partition 0, else amdgpu_xcp_<n>.
				DevicePluginID: p.DevicePluginID,
			},
			// Its DRM nodes join the partition's fdinfo clients to it.
			vendorData: &amdPartition{amdData: data, renderMinor: p.RenderMinor, card: p.Card},
		}
		if p.RenderMinor >= 0 {
			d.Minor = reading.Some(p.RenderMinor)
		}
		if !whole {
			delete(layouts, p.ParentPCIBusID) // the last whole one stays
			// The GPU's processes are its partitions', and an unlisted
			// partition's are missing: its owners are unknown, not those
			// of the partitions listed.
			parent.ProcessesPartial = true
			out = append(out, d)
			continue
		}
		d.MIG.Fraction = 1 / float64(found)
		if pd.Metrics != nil && n < len(pd.Metrics.Partitions) {
			if v, ok := meanSet(pd.Metrics.Partitions[n].GFXBusy); ok {
				d.Utilization = &v
			}
		}
		l := layouts[p.ParentPCIBusID]
		layouts[p.ParentPCIBusID] = partLayout{profile: d.MIG.Profile, ids: append(l.ids, p.DevicePluginID)}
		out = append(out, d)
	}
	c.mu.Lock()
	if c.layouts == nil {
		c.layouts = map[string]partLayout{}
	}
	c.logPartitions(byPCI, layouts)
	maps.Copy(c.layouts, layouts)
	c.mu.Unlock()
	return out
}

// logPartitions logs (c.mu held) a GPU's change of compute partition mode,
// and when its partitions are listed in part and whole again: a mode
// switch changes which devices there are and what share each pod holds,
// and while the listing is partial their shares and GRES places are left
// out.
func (c *amdCollector) logPartitions(byPCI map[string]*Device, whole map[string]partLayout) {
	for pci, d := range byPCI {
		l, listed := whole[pci]
		if !listed {
			if d.UUID != "" && !c.partlyListed[pci] {
				c.partlyListed[pci] = true
				c.logger.Warn("AMD GPU's compute partitions are not all listed (a partition mode switch or a driver load under way): their shares, utilization and Slurm GRES places are left out until they are", "gpu", d.Index, "uuid", d.UUID)
			}
			continue
		}
		if c.partlyListed[pci] {
			delete(c.partlyListed, pci)
			c.logger.Info("AMD GPU's compute partitions all listed again", "gpu", d.Index, "uuid", d.UUID, "partitions", len(l.ids))
		}
		if was, ok := c.layouts[pci]; ok && (was.profile != l.profile || len(was.ids) != len(l.ids)) {
			c.logger.Info("AMD GPU's compute partition mode changed", "gpu", d.Index, "uuid", d.UUID, "mode", l.mode(), "was", was.mode(), "partitions", len(l.ids))
		}
	}
}

// mode is the partition mode's name: none in SPX mode, where the GPU is
// one device.
func (l partLayout) mode() string {
	if l.profile == "" {
		return "spx"
	}
	return l.profile
}

// partitionProfile is a partition's mig_profile: its GPU's mode ("dpx"),
// or "unknown" while the GPU cannot tell it (amdgpu prints UNKNOWN during
// a switch, amdgpu_gfx.c, amdgpu_gfx_compute_mode_desc), never empty,
// which would serve a partition as no partition and log its layout as SPX
// (probe G, PG4); "unknown" too for a partition of a GPU that says it is
// one partition (spx: a switch under way), not "spx" (probe J, PJ7).
func partitionProfile(d *amd.Device, spx bool) string {
	if spx || !d.ComputePartition.OK || d.ComputePartition.Value == "" {
		return "unknown"
	}
	return strings.ToLower(d.ComputePartition.Value)
}

// partitionCount is how many compute partitions the GPU says it is in:
// gpu_metrics' num_partition (v1.6+, kgd_pp_interface.h), else what the
// mode alone tells (DPX two, TPX three, QPX four; CPX is one per XCC, which
// differs by model); 0 when unknown.
func partitionCount(d *amd.Device) int {
	if d.Metrics != nil && len(d.Metrics.Partitions) > 1 {
		return len(d.Metrics.Partitions)
	}
	switch d.ComputePartition.Value {
	case "DPX":
		return 2
	case "TPX":
		return 3
	case "QPX":
		return 4
	}
	return 0
}

// downPartitions are the partitions of the GPUs in devs that did not
// answer, as their last answer listed them, down: the pods and jobs
// holding them keep them, as a MIG instance's do (each keeps its 1/N, not
// partition 0's pod the whole GPU, and Slurm's GRES indices keep their
// places). A GPU found in SPX mode at its last answer keeps its place as
// one GPU; one never read has no layout known.
func (c *amdCollector) downPartitions(devs []*Device) []*Device {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*Device
	for _, d := range devs {
		if d.Up || d.MIG != nil || d.HasMIG || d.UUID == "" {
			continue
		}
		l, known := c.layouts[d.PCIBusID]
		if !known {
			continue
		}
		d.MIGModeKnown = true
		if len(l.ids) == 0 {
			continue
		}
		d.HasMIG, d.MIGListed = true, true
		for n, id := range l.ids {
			out = append(out, &Device{
				Vendor:   "amd",
				Index:    d.Index,
				UUID:     d.UUID + "-xcp" + strconv.Itoa(n),
				Model:    d.Model,
				PCIBusID: d.PCIBusID,
				MIG: &MIGInstance{
					ParentUUID:     d.UUID,
					Profile:        l.profile,
					Instance:       strconv.Itoa(n),
					Index:          n,
					Fraction:       1 / float64(len(l.ids)),
					DevicePluginID: id,
				},
				vendorData: &amdPartition{amdData: &amdData{dev: &amd.Device{}, partition: n}, renderMinor: -1, card: -1},
			})
		}
	}
	return out
}

// amdPartition is a partition's vendor data: its parent's readings and the
// DRM nodes its processes open (-1 when it has none of that kind).
type amdPartition struct {
	*amdData
	renderMinor, card int
}

// attachProcesses gives each device the processes holding a DRM client of
// it, with their memory and engine share since the previous scrape.
//
// A client (one open DRM file) may be held by several processes (dup, fork);
// its usage is credited to the lowest PID holding it, so that it is counted
// once, and the other holders are listed with zero usage so that they are
// attributed all the same.
//
// Utilization is the client's share of the gfx and compute engines' time
// over the window (amdgpu_fdinfo.c names the hardware IP types in
// amdgpu_ip_name[]: AMDGPU_HW_IP_GFX "gfx", AMDGPU_HW_IP_COMPUTE "compute",
// "dma", "dec", "enc", …, and prints one drm-engine- line per type the
// client submitted to), summed and capped at 1. The counters add up the
// run time of jobs the kernel scheduled for the client; work that ROCm
// puts on KFD user-mode queues is not scheduled by the kernel and is not
// in them. Memory is
// drm-resident-vram, else drm-memory-vram, which the kernel documentation
// ("DRM client usage stats") deprecates as its alias and amdgpu printed
// alone before it adopted drm_print_memory_stats (and still prints, "Legacy
// amdgpu keys, alias to drm-resident-memory-", amdgpu_fdinfo.c). Never
// drm-total-vram: "the backing store for the buffers does not have to be
// currently instantiated to be counted", and amdgpu files a buffer there
// under its preferred placement even when evicted, so the owners' parts
// could add up to more than the device's used memory.
//
// A walk of procfs cut short by the deadline leaves every device without
// processes and the window where it was: the scrape that asked has given
// up on this read, and the next measures from the last complete walk.
//
// A process whose fds could be read neither through their links nor their
// fdinfo (no CAP_SYS_PTRACE: see the README's least privilege) may hold
// any of the GPUs, so every device's process list is then partial and the
// per-owner split left out: its owner would show 0 bytes and the others
// its share of the time.
func (c *amdCollector) attachProcesses(scan procScan, devs []*Device, m move) {
	if !scan.ok {
		markPartial(devs)
		return
	}
	if !scan.complete {
		markPartial(devs)
	}
	clients, now, complete := scan.clients, scan.at, scan.complete
	advance := m != moveNone
	c.mu.Lock()
	prev := *c.windowOf(m)
	// A read that moves no window (/devices) that soon after the last
	// scrape serves that scrape's window too, rather than divide by a few
	// milliseconds.
	again := prev.shares != nil && now.Sub(prev.at) < amdMinWindow
	if advance && !again {
		w := amdWindow{at: now, clients: amd.Baseline(prev.clients, clients), complete: complete}
		if m == movePush {
			c.pushed = &w
		} else {
			c.window, c.pushed = w, nil
		}
	}
	c.mu.Unlock()

	shares := map[amd.ClientKey]float64{}
	unknown := map[amd.ClientKey]bool{}
	switch {
	case again:
		// Read only: the next scrape shares this window's maps.
		shares, unknown = prev.shares, prev.unknown
		if !prev.complete {
			// A client that scan did not see may have run in its window.
			seen := make(map[amd.ClientKey]bool, len(prev.clients))
			for _, cl := range prev.clients {
				seen[cl.Key] = true
			}
			unknown = maps.Clone(prev.unknown)
			for _, cl := range clients {
				if !seen[cl.Key] {
					unknown[cl.Key] = true
				}
			}
		}
	case !prev.at.IsZero():
		all, none := amd.EngineShares(prev.at, prev.clients, prev.complete, now, clients)
		for _, s := range all {
			if s.Engine == "gfx" || s.Engine == "compute" {
				shares[s.Key] += s.Ratio
			}
		}
		for _, k := range none {
			unknown[k] = true
		}
		if advance {
			c.mu.Lock()
			if w := c.windowOf(m); w.at.Equal(now) {
				w.shares, w.unknown = shares, unknown
			}
			c.mu.Unlock()
		}
	}
	byMinor, byCard := map[int]*Device{}, map[int]*Device{}
	byPCI := map[string]*Device{}
	partitioned := map[string]bool{}
	for _, d := range devs {
		switch v := d.vendorData.(type) {
		case *amdPartition:
			if v.renderMinor >= 0 {
				byMinor[v.renderMinor] = d
			}
			if v.card >= 0 {
				byCard[v.card] = d
			}
		case *amdData:
			switch {
			case d.Up && !d.HasMIG:
				byPCI[d.PCIBusID] = d
				// A client's DRM node names its GPU too, where its fdinfo
				// lacks drm-pdev (an optional key in the kernel
				// documentation's list).
				if v.dev.RenderMinor.OK {
					byMinor[v.dev.RenderMinor.Value] = d
				}
				if n, err := strconv.Atoi(strings.TrimPrefix(v.dev.Card, "card")); err == nil {
					byCard[n] = d
				}
			case d.HasMIG:
				partitioned[d.PCIBusID] = true
			}
		}
	}
	type usage struct {
		mem    uint64
		memOK  bool
		util   float64
		utilOK bool
	}
	if advance && !again {
		busy := map[amd.ClientKey]bool{}
		for k, v := range shares {
			if v > 0 {
				busy[k] = true
			}
		}
		// A client whose window is unknown (a count that fell, or the
		// window after) may have been busy: closed in the next one, its
		// time there is unknown, not none (review22 F7).
		for k := range unknown {
			busy[k] = true
		}
		starts := c.startsOf(clients, busy)
		c.mu.Lock()
		if w := c.windowOf(m); w.at.Equal(now) {
			w.busy, w.starts = busy, starts
		}
		c.mu.Unlock()
	}
	// A process holding an AMD GPU's node whose fdinfo shows no usage
	// stats (amdgpu's own format before Linux 5.19) is one of that GPU's
	// owners, whose usage cannot be read: its owners are unknown, not
	// none.
	opaque := 0
	for _, o := range scan.opaque {
		if d := nodeDevice(byMinor, byCard, o.NodeMinor, o.RenderMinor, o.CardMinor); d != nil {
			d.ProcessesPartial = true
			opaque++
			c.countFile("fdinfo")
		}
	}
	c.logOpaque(opaque)
	// deviceOf is the device a client's file is open on.
	deviceOf := func(cl amd.Client) *Device {
		d := byPCI[cl.Key.PDev]
		// The node names a partition of the GPU drm-pdev names, or the GPU
		// where drm-pdev is missing. It does not overrule drm-pdev: where
		// its minor could not be read, its name is the link's, the name
		// in the process's own mount namespace, which a container may
		// have given another GPU's node (docker run
		// --device=/dev/dri/renderD129:/dev/dri/renderD128), while amdgpu
		// prints the PCI address of the device the file was opened on.
		node := nodeDevice(byMinor, byCard, cl.NodeMinor, cl.RenderMinor, cl.CardMinor)
		if node != nil && (cl.Key.PDev == "" || node.PCIBusID == cl.Key.PDev) {
			d = node
		}
		return d
	}
	per := map[*Device]map[int]*usage{}
	var unlisted []string // GPUs named by clients, listed by no device
	for _, cl := range clients {
		d := deviceOf(cl)
		switch {
		case d != nil || len(cl.PIDs) == 0:
		case cl.Key.PDev != "" && !slices.ContainsFunc(devs, func(o *Device) bool { return o.PCIBusID == cl.Key.PDev }):
			// An amdgpu device no card in class/drm names (a render node
			// alone): its processes have no device to be listed on.
			if !slices.Contains(unlisted, cl.Key.PDev) {
				unlisted = append(unlisted, cl.Key.PDev)
			}
		case cl.Key.PDev == "":
			// A client of a GPU its fdinfo does not name: its usage
			// belongs to someone, on any GPU.
			markPartial(devs)
		case partitioned[cl.Key.PDev]:
			// A client of one of this GPU's partitions, which one unknown
			// (found through fdinfo alone, amd.DRMHolders; or the GPU is
			// down and keeps its partitions without their nodes): one of
			// them may lack a process. The other GPUs' lists are whole, and
			// so is the GPU's, which has no processes of its own: its
			// owners are its partitions'.
			for _, o := range devs {
				if _, part := o.vendorData.(*amdPartition); part && o.PCIBusID == cl.Key.PDev {
					o.ProcessesPartial = true
				}
			}
		}
		if d == nil || len(cl.PIDs) == 0 {
			continue
		}
		if per[d] == nil {
			per[d] = map[int]*usage{}
		}
		mem, memOK := vram(cl)
		utilOK := !prev.at.IsZero() && !unknown[cl.Key]
		for i, pid := range cl.PIDs {
			u := per[d][pid]
			if u == nil {
				u = &usage{memOK: true, utilOK: true}
				per[d][pid] = u
			}
			// A holder other than the first adds nothing, and knows as
			// little as the first. A KFD process's engine time leaves out
			// its ROCm work: its utilization is unknown, not the little
			// its fdinfo shows, or a shared GPU's time would go to the
			// owners whose work the kernel schedules.
			u.memOK = u.memOK && memOK
			u.utilOK = u.utilOK && utilOK && !scan.kfd.Holds(pid)
			if i == 0 {
				u.mem += mem
				u.util += shares[cl.Key]
			}
		}
	}
	c.logUnlisted(unlisted)
	// A client busy in the previous window that has closed since: fdinfo
	// ends with the file, so its time in this window is unknown. Its
	// processes' utilization is unknown, whether they still hold other
	// clients or exited (Device.Exited), so that it is not divided among
	// the clients still open. One idle before (a monitoring tool's) is
	// taken to have stayed idle. A PID that started anew since belongs to
	// another process, which never held the closed client: its own
	// clients' counters are all of its usage, "time which the respective
	// GPU engine spent busy executing workloads belonging to this client"
	// (kernel documentation, "DRM client usage stats", drm-engine-<keystr>),
	// one per open DRM file ("drm-client-id: Unique value relating to the
	// open DRM file descriptor"). The exited process cannot be named by
	// that PID any more (Device.ExitedUnnamed).
	//
	// A scrape too soon after the last one serves that one's window again,
	// and so its closed clients too, beside any closed since: found only
	// against that scrape's clients, the former would be none, and a split
	// that scrape left out would be served, the closed client's time its
	// sole remaining owner's (probe27 PA2).
	var gone []amd.Client
	var anew map[int]bool
	if !prev.at.IsZero() {
		gone, anew = c.closedSince(prev, clients)
	}
	switch {
	case again:
		gone = append(gone, prev.closed...)
		for pid := range prev.anew {
			if anew == nil {
				anew = map[int]bool{}
			}
			anew[pid] = true
		}
	case advance && !prev.at.IsZero():
		c.mu.Lock()
		if w := c.windowOf(m); w.at.Equal(now) {
			w.closed, w.anew = gone, anew
		}
		c.mu.Unlock()
	}
	closed := map[*Device]map[int]bool{}
	for _, cl := range gone {
		d := deviceOf(cl)
		if d == nil {
			if partitioned[cl.Key.PDev] || cl.Key.PDev == "" {
				markPartial(devs)
			}
			continue
		}
		if closed[d] == nil {
			closed[d] = map[int]bool{}
		}
		for _, pid := range cl.PIDs {
			closed[d][pid] = true
		}
	}
	for d, pids := range closed {
		for pid := range pids {
			u := per[d][pid]
			switch {
			case u != nil && anew[pid]:
				d.ExitedUnnamed = true
			case u != nil:
				u.utilOK = false
			default:
				d.Exited = append(d.Exited, Process{PID: uint32(pid)})
			}
		}
		slices.SortFunc(d.Exited, func(a, b Process) int { return cmp.Compare(a.PID, b.PID) })
	}
	for d, procs := range per {
		pidList := make([]int, 0, len(procs))
		for pid := range procs {
			pidList = append(pidList, pid)
		}
		slices.Sort(pidList)
		for _, pid := range pidList {
			u := procs[pid]
			p := Process{PID: uint32(pid)}
			if u.memOK {
				m := u.mem
				p.MemoryUsed = &m
			}
			if u.utilOK {
				v := min(u.util, 1)
				p.Utilization = &v
			}
			d.Processes = append(d.Processes, p)
		}
	}
}

// closedSince lists the clients of the window prev that were busy in it
// and are closed at this scan (clients), and which of their processes
// started anew since: those PIDs are other processes now.
func (c *amdCollector) closedSince(prev amdWindow, clients []amd.Client) (gone []amd.Client, anew map[int]bool) {
	open := make(map[amd.ClientKey]int, len(clients))
	for i, cl := range clients {
		open[cl.Key] = i
	}
	for _, cl := range prev.clients {
		// A client ID given to another file since (amd.Reused) is the old
		// file closed, not the same one open (review13 R13-2).
		if i, ok := open[cl.Key]; ok && !amd.Reused(cl, clients[i]) || !prev.busy[cl.Key] {
			continue
		}
		gone = append(gone, cl)
		for _, pid := range cl.PIDs {
			if c.startedAnew(pid, prev.starts) {
				if anew == nil {
					anew = map[int]bool{}
				}
				anew[pid] = true
			}
		}
	}
	return gone, anew
}

// startsOf reads the start times of the processes holding busy clients
// (proc(5), /proc/<pid>/stat field 22, "starttime: The time the process
// started after system boot"); idle clients' processes are not read, as a
// closed idle client changes nothing. A process whose stat cannot be read
// is left out: it is then taken to be the same process at the next scan.
func (c *amdCollector) startsOf(clients []amd.Client, busy map[amd.ClientKey]bool) map[int]uint64 {
	starts := map[int]uint64{}
	for _, cl := range clients {
		if !busy[cl.Key] {
			continue
		}
		for _, pid := range cl.PIDs {
			if _, ok := starts[pid]; ok {
				continue
			}
			if ticks, err := c.procfs.StartTicks(pid); err == nil {
				starts[pid] = ticks
			}
		}
	}
	return starts
}

// startedAnew says whether pid now belongs to another process than at the
// scan that read starts: the kernel gives a PID out again once its PID
// space wraps around. Where either start is unknown it is taken to be the
// same process, whose utilization is then unknown rather than another's.
func (c *amdCollector) startedAnew(pid int, starts map[int]uint64) bool {
	was, ok := starts[pid]
	if !ok {
		return false
	}
	now, err := c.procfs.StartTicks(pid)
	return err == nil && now != was
}

// procScan is one walk of procfs for the DRM clients of the node's GPUs.
type procScan struct {
	clients []amd.Client
	// opaque are the DRM files whose fdinfo shows no usage stats.
	opaque []amd.Opaque
	// kfd are the processes whose ROCm work the clients do not show.
	kfd amd.KFDProcesses
	at  time.Time
	// ok says the walk got far enough to list clients; complete that it
	// read every process's fds.
	ok, complete bool
}

// scanProcesses walks procfs for the processes holding DRM files, and
// reads the holders' fdinfo.
func (c *amdCollector) scanProcesses(ctx context.Context) procScan {
	// A client's node tells the partitions of a GPU apart: its minor is
	// read for the GPUs partitioned at their last answer, and those not
	// answered yet.
	c.mu.Lock()
	partitioned := make(map[string]bool, len(c.layouts))
	for pci, l := range c.layouts {
		partitioned[pci] = len(l.ids) > 0
	}
	c.mu.Unlock()
	scanner := c.scanner
	scanner.NodeMatters = func(pdev string) bool {
		p, known := partitioned[pdev]
		return p || !known
	}
	holders, herrs, err := amd.DRMHolders(ctx, c.scanner.ProcRoot)
	if err != nil {
		return procScan{}
	}
	for _, e := range herrs {
		c.countFile(e.File)
	}
	if len(holders) == 0 && len(herrs) > 0 {
		c.logScan(herrs)
		return procScan{}
	}
	clients, opaque, serrs := scanner.ScanHolders(holders)
	for _, e := range serrs {
		c.countFile(scanFile(e.File))
	}
	c.logScan(append(herrs, serrs...))
	// After the fdinfo: a process that opened /dev/kfd since is then
	// listed rather than missed.
	kfd := c.reader.KFDProcesses()
	c.noteKFD(kfd)
	return procScan{clients: clients, opaque: opaque, kfd: kfd, at: c.now(), ok: true, complete: len(herrs)+len(serrs) == 0}
}

// noteKFD counts a KFD process listing that failed, and logs when it
// starts and stops failing.
func (c *amdCollector) noteKFD(k amd.KFDProcesses) {
	state := ""
	switch {
	case k.Err != nil:
		state = k.Err.Error()
		c.countFile("class/kfd/kfd/proc")
	case !k.Known:
		state = "no class/kfd/kfd/proc"
	}
	switch {
	case !c.swapState(&c.kfdState, state):
	case state != "":
		c.logger.Warn("cannot tell which processes run ROCm (KFD) work, which DRM fdinfo does not count; per-owner utilization of shared AMD GPUs is left out until it can",
			"reason", state)
	default:
		c.logger.Info("KFD processes are listed again")
	}
}

// logUnlisted logs when DRM clients name amdgpu devices that no card in
// class/drm lists (so no device of the exporter's), and when none does.
func (c *amdCollector) logUnlisted(pdevs []string) {
	slices.Sort(pdevs)
	state := strings.Join(pdevs, ",")
	switch {
	case !c.swapState(&c.unlisted, state):
	case state != "":
		c.logger.Warn("processes hold amdgpu devices that no card in class/drm lists (a render node alone?): those devices and their processes are not served", "devices", state)
	default:
		c.logger.Info("every amdgpu device processes hold is listed again")
	}
}

// logOpaque logs when processes start holding AMD GPUs through files whose
// fdinfo shows no usage stats, and when none does any more.
func (c *amdCollector) logOpaque(n int) {
	state := ""
	if n > 0 {
		state = "held"
	}
	switch {
	case !c.swapState(&c.opaque, state):
	case n > 0:
		c.logger.Warn("processes hold AMD GPUs through DRM files whose fdinfo shows no DRM usage stats (amdgpu's own fdinfo format before Linux 5.19, or no drm-client-id); those GPUs' usage is not split between owners, and their owners are unknown where no allocation names them, until they do",
			"files", n)
	default:
		c.logger.Info("every DRM file on AMD GPUs shows its usage stats again")
	}
}

// swapState sets one of the collector's logged states (kfdState,
// scanState, opaque, unlisted) and says whether it changed: each is logged
// once per change, never once per scrape.
func (c *amdCollector) swapState(field *string, state string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	changed := state != *field
	*field = state
	return changed
}

func markPartial(devs []*Device) {
	for _, d := range devs {
		d.ProcessesPartial = true
	}
}

// logScan logs when the process scan starts missing processes, and when
// the reason changes (which file, which errno: not which PID, which changes
// as processes come and go), and when it sees them all again.
func (c *amdCollector) logScan(errs []amd.ScanError) {
	state := ""
	if len(errs) > 0 {
		cause := errs[0].Err
		var pe *fs.PathError
		if errors.As(cause, &pe) {
			cause = pe.Err
		}
		state = fmt.Sprintf("%s: %v", errs[0].File, cause)
	}
	switch {
	case !c.swapState(&c.scanState, state):
	case state != "":
		c.logger.Warn("AMD process scan cannot read every process; per-owner memory and utilization are left out until it can",
			"unreadable", len(errs), "reason", state, "first", errs[0].Error(), "hint", scanHint(errs[0]))
	default:
		c.logger.Info("AMD process scan reads every process again")
	}
}

// scanHint says what commonly causes a scan error: procfs that cannot be
// listed at all is not the host's, or not mounted where --path.procfs
// says; a process's files that cannot be read need a capability; a DRM
// file's usage stats the exporter does not understand are the driver's
// format, not a permission (probe27 PA10).
func scanHint(e amd.ScanError) string {
	switch {
	case strings.HasPrefix(e.File, "/"):
		return "procfs itself cannot be listed: --path.procfs must be the host's /proc (hostPID in Kubernetes)"
	case errors.Is(e.Err, fs.ErrPermission):
		return "other processes' fd and fdinfo need CAP_SYS_PTRACE (chart: amd.ptrace)"
	case errors.Is(e.Err, amd.ErrMalformed):
		return "the driver printed a DRM usage stats line in a form the kernel documentation (\"DRM client usage stats\") does not give; please report it with the fdinfo file"
	}
	return "see README, AMD Instinct: least privilege"
}

func vram(cl amd.Client) (uint64, bool) {
	m, ok := cl.Memory["vram"]
	switch {
	case !ok:
		return 0, false
	case m.Resident.OK:
		return m.Resident.Value, true
	case m.Legacy.OK:
		return m.Legacy.Value, true
	}
	return 0, false
}

// hwmonDir is the probe-order number of a hwmon directory, kept out of the
// file label so that the label names the same file on every node.
var hwmonDir = regexp.MustCompile(`hwmon/hwmon[0-9]+/`)

// logReadErrors logs a file of card that starts failing, or fails for
// another kind of reason (readErrorKind), and one that reads again: the
// counter says how often, this says which file and why, once.
func (c *amdCollector) logReadErrors(card string, errs []amd.ReadError) {
	now := map[string]string{}
	first := map[string]error{}
	for _, e := range errs {
		f := hwmonDir.ReplaceAllString(e.File, "hwmon/")
		if _, seen := now[f]; !seen {
			now[f], first[f] = readErrorKind(e.Err), e
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	before := c.readErrs[card]
	for f, kind := range now {
		if before[f] != kind {
			c.logger.Warn("amdgpu file cannot be read; its readings are left out (xpu_amd_read_errors_total)", "card", card, "file", f, "err", first[f])
		}
	}
	for f := range before {
		if _, still := now[f]; !still {
			c.logger.Info("amdgpu file reads again", "card", card, "file", f)
		}
	}
	if len(now) == 0 {
		delete(c.readErrs, card)
	} else {
		c.readErrs[card] = now
	}
}

// readErrorKind is what makes two failures of a file the same for logging:
// its sentinel or errno, not the value or size that changes at every read.
func readErrorKind(err error) string {
	var me *amd.MetricsError
	var errno syscall.Errno
	switch {
	case errors.As(err, &me):
		return me.Unwrap().Error()
	case errors.Is(err, amd.ErrTooLarge):
		return amd.ErrTooLarge.Error()
	case errors.Is(err, amd.ErrMalformed):
		return amd.ErrMalformed.Error()
	case errors.As(err, &errno):
		return errno.Error()
	}
	return "other"
}

func (c *amdCollector) countReadErrors(errs []amd.ReadError) {
	for _, e := range errs {
		c.countFile(hwmonDir.ReplaceAllString(e.File, "hwmon/"))
	}
}

// scanFile names an fdinfo error's file without its fd number.
func scanFile(f string) string {
	if strings.HasPrefix(f, "fdinfo/") {
		return "fdinfo"
	}
	return f
}

func (c *amdCollector) countFile(file string) {
	if strings.HasPrefix(file, "devices/platform/amdgpu_xcp_") {
		file = "devices/platform/amdgpu_xcp"
	}
	if strings.HasPrefix(file, "class/kfd/kfd/topology/nodes/") {
		file = "class/kfd/kfd/topology/nodes"
	}
	if strings.HasPrefix(file, "/") {
		file = "procfs"
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.errs[file]++
}

func (c *amdCollector) logState(state, msg string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state == state {
		return
	}
	c.state = state
	if state == "none" || state == "ok" {
		c.logger.Info(msg, args...)
		return
	}
	c.logger.Error(msg, args...)
}

func (c *amdCollector) logDown(card string, d *Device, why string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.down[card] == why {
		return
	}
	if why == "" {
		c.logger.Info("AMD device is back", "gpu", d.Index, "uuid", d.UUID, "pci", d.PCIBusID, "card", card)
		delete(c.down, card)
		return
	}
	c.logger.Warn("AMD device down", "gpu", d.Index, "uuid", d.UUID, "pci", d.PCIBusID, "card", card, "reason", why)
	c.down[card] = why
}

func (c *amdCollector) Update(_ context.Context, snap *Snapshot, ch chan<- prometheus.Metric) error {
	e := newEmitter(ch)
	defer e.flush()
	c.mu.Lock()
	for file, v := range c.errs {
		e.emit(amdReadErrors, labels{names: []string{"file"}, values: []string{file}}, v)
	}
	driver := c.driver
	now := c.now()
	for _, d := range snap.Devices {
		if data, ok := d.vendorData.(*amdData); ok && data.partition < 0 && d.UUID != "" {
			c.ras.serve(d, now)
		}
	}
	c.ras.emit(e)
	c.mu.Unlock()
	for _, d := range snap.Devices {
		var data *amdData
		switch v := d.vendorData.(type) {
		case *amdData:
			data = v
		case *amdPartition:
			data = v.amdData
		default:
			continue
		}
		l := deviceLabels(d)
		// A GPU hung since start has no identity but the PCI address its
		// card's link names: the one name to chase it by (probe27 PA6).
		if d.UUID != "" || d.PCIBusID != "" {
			info := identityLabels(d)
			if driver.OK {
				info = info.with("driver_version", driver.Value)
			}
			info = info.with("pci_bus_id", d.PCIBusID)
			if data.dev.Serial.OK {
				info = info.with("serial", data.dev.Serial.Value)
			}
			if data.dev.VBIOSVersion.OK {
				info = info.with("vbios_version", data.dev.VBIOSVersion.Value)
			}
			e.emit(deviceInfo, info, 1)
		}
		emitPartitionShare(e, d)
		e.emit(deviceUp, l, boolValue(d.Up))
		if !d.Up {
			continue
		}
		if data.partition >= 0 {
			// A partition has its XCCs' activity; every other reading is
			// the GPU's, on the GPU's series.
			if d.Utilization != nil {
				e.emit(utilization, l, *d.Utilization)
			}
			continue
		}
		emitAMDReadings(e, l, d, data)
	}
	return nil
}

// emitAMDReadings emits a whole GPU's readings: sysfs first, where the
// driver documents the file, and the gpu_metrics table for what sysfs
// lacks on the model (MI300 has no edge sensor nor power1_average).
func emitAMDReadings(e emitter, l labels, d *Device, data *amdData) {
	ad := data.dev
	m := ad.Metrics
	get := func(f func(*amd.GPUMetrics) amd.Opt[float64]) amd.Opt[float64] { return metricsOpt(m, f) }
	if d.Utilization != nil {
		e.emit(utilization, l, *d.Utilization)
	}
	amdOpt(e, memUtil, l, ad.MemBusy, get(func(m *amd.GPUMetrics) amd.Opt[float64] { return m.UMCActivity }))
	if d.MemoryUsed != nil {
		e.emit(memUsed, l, *d.MemoryUsed)
	}
	if d.MemoryTotal != nil {
		e.emit(memTotal, l, *d.MemoryTotal)
	}
	// hwmon labels the channels edge, junction and mem (amdgpu.rst, hwmon
	// interfaces); gpu_metrics names the same sensors edge, hotspot and mem.
	for _, s := range []struct {
		sensor, hwmon string
		table         func(*amd.GPUMetrics) amd.Opt[float64]
	}{
		{"edge", "edge", func(m *amd.GPUMetrics) amd.Opt[float64] { return m.TemperatureEdge }},
		{"junction", "junction", func(m *amd.GPUMetrics) amd.Opt[float64] { return m.TemperatureHotspot }},
		{"memory", "mem", func(m *amd.GPUMetrics) amd.Opt[float64] { return m.TemperatureMem }},
	} {
		v, ok := ad.Temperatures[s.hwmon]
		sl := l.with("sensor", s.sensor)
		amdOpt(e, temperature, sl, amd.Opt[float64]{Value: v, OK: ok}, get(s.table))
		// Each channel's own limits, labelled with its sensor so that a
		// rule compares the junction with the junction's limit; NVIDIA's
		// device-wide limits have no sensor label. threshold keeps the
		// hwmon names: crit is where the firmware throttles (NVIDIA's
		// slowdown, or memory_max for the memory), emergency where the ASIC
		// shuts down (NVIDIA's shutdown).
		lim := ad.TempLimits[s.hwmon]
		amdOpt(e, tempLimit, sl.with("threshold", "crit"), lim.Crit)
		amdOpt(e, tempLimit, sl.with("threshold", "emergency"), lim.Emergency)
	}
	amdOpt(e, power, l, ad.Power, get(func(m *amd.GPUMetrics) amd.Opt[float64] { return m.SocketPower }))
	amdOpt(e, powerLimit, l, ad.PowerCap)
	amdOpt(e, energy, l, data.energy)
	amdOpt(e, clock, l.with("clock", "graphics"), ad.SClock)
	amdOpt(e, clock, l.with("clock", "memory"), ad.MClock)
	// gpu_metrics v1.4+: xgmi_read_data_acc[] and xgmi_write_data_acc[],
	// summed over the links with what each carried kept (xgmiLinks).
	amdOpt(e, amdXGMIData, l.with("direction", "read"), data.xgmiRead)
	amdOpt(e, amdXGMIData, l.with("direction", "write"), data.xgmiWrite)
	if m != nil && m.PCIeReplayCount.OK {
		e.emit(pcieReplays, l, float64(m.PCIeReplayCount.Value))
	}
	if ad.PCIeNAKs.OK {
		e.emit(amdPCIeNAKs, l, float64(ad.PCIeNAKs.Value))
	}
	if ad.LinkSpeed.OK {
		if g, ok := amd.LinkGeneration(ad.LinkSpeed.Value); ok {
			e.emit(pcieGen, l, float64(g))
		}
	}
	if ad.MaxLinkSpeed.OK {
		if g, ok := amd.LinkGeneration(ad.MaxLinkSpeed.Value); ok {
			e.emit(pcieMaxGen, l, float64(g))
		}
	}
	optional(e, pcieWidth, l, ad.LinkWidth)
	optional(e, pcieMaxWidth, l, ad.MaxLinkWidth)
	// The UMC (unified memory controller) block counts the device memory's
	// ECC errors: that is ecc_errors_total. amdgpu_ras.c,
	// amdgpu_ras_sysfs_read prints the ue/ce counts that
	// amdgpu_ras_query_error_status adds up in the block's RAS object
	// (obj->err_data) from each hardware reading, the hardware counter being
	// reset once read; so the count runs since the driver was loaded, which
	// the family calls scope "volatile". Every block, umc included, is in
	// xpu_amd_ras_errors_total.
	if umc, ok := ad.RAS["umc"]; ok {
		optional(e, eccErrors, l.with("type", "corrected").with("scope", "volatile"), umc.Correctable)
		optional(e, eccErrors, l.with("type", "uncorrected").with("scope", "volatile"), umc.Uncorrectable)
	}
	blocks := make([]string, 0, len(ad.RAS))
	for b := range ad.RAS {
		blocks = append(blocks, b)
	}
	slices.Sort(blocks)
	for _, block := range blocks {
		r := ad.RAS[block]
		bl := l.with("block", block)
		optional(e, amdRASErrors, bl.with("type", "corrected"), r.Correctable)
		optional(e, amdRASErrors, bl.with("type", "uncorrected"), r.Uncorrectable)
		optional(e, amdRASErrors, bl.with("type", "deferred"), r.Deferred)
	}
}

// amdOpt emits the first reading that is set, and nothing when none is.
func amdOpt(e emitter, m metric, l labels, vs ...amd.Opt[float64]) {
	if v, ok := firstOpt(vs...); ok {
		e.emit(m, l, v)
	}
}

func firstOpt(vs ...amd.Opt[float64]) (float64, bool) {
	for _, v := range vs {
		if v.OK {
			return v.Value, true
		}
	}
	return 0, false
}

func metricsOpt(m *amd.GPUMetrics, f func(*amd.GPUMetrics) amd.Opt[float64]) amd.Opt[float64] {
	if m == nil {
		return amd.Opt[float64]{}
	}
	return f(m)
}

// meanSet is the mean of the readings that are set.
func meanSet(vs []amd.Opt[float64]) (float64, bool) {
	sum, n := 0.0, 0
	for _, v := range vs {
		if v.OK {
			sum += v.Value
			n++
		}
	}
	if n == 0 {
		return 0, false
	}
	return sum / float64(n), true
}

// nodeDevice is the device or partition of a DRM node, from the devices by
// render minor and by card number: by the node's minor where stat gave it
// (amd.Client.NodeMinor; drm_drv.c gives render and primary nodes their
// minors from one table, so at most one map has it), else by the name of
// the fd's link.
func nodeDevice(byMinor, byCard map[int]*Device, minor, render, card amd.Opt[int]) *Device {
	if minor.OK {
		if d := byMinor[minor.Value]; d != nil {
			return d
		}
		return byCard[minor.Value]
	}
	var d *Device
	if render.OK {
		d = byMinor[render.Value]
	}
	if d == nil && card.OK {
		d = byCard[card.Value]
	}
	return d
}
