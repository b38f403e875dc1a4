package collector

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xpu-exporter/xpu_exporter/attribution/kubernetes"
	"github.com/xpu-exporter/xpu_exporter/internal/flight"
	"github.com/xpu-exporter/xpu_exporter/vendors/gaudi"
)

func init() {
	registerCollector("gaudi", true, "Intel Gaudi accelerators: one hl-smi run per scrape and a scan of procfs for the processes holding a device open", newGaudiCollector)
}

// maxKnownGaudi bounds the devices remembered across runs: an hl-smi that
// prints new addresses at every run must not grow memory without end.
const maxKnownGaudi = 1024

var (
	hlsmiErrors = counter("hlsmi_errors_total",
		"hl-smi runs that failed, and single unreadable hl-smi values (reason bad_value), by reason; see README, Intel Gaudi.")
	gaudiScanErrors = counter("gaudi_process_scan_errors_total",
		"Scans of procfs for the processes holding a Gaudi device open that failed, by reason; devices are then served without processes.")
	gaudiUnreadable = gauge("gaudi_processes_unreadable",
		"Processes whose open files the last scan could not read for lack of permission: their use of a Gaudi device is not seen.")
	gaudiUnlisted = gauge("gaudi_devices_unlisted",
		"Gaudi devices the habanalabs driver has (compute nodes in sysfs) at a PCI address no hl-smi row and no device served has: not served, since hl-smi names none of their readings; see README, Intel Gaudi.")
	gaudiDRAMECC = counter("gaudi_dram_ecc_errors_total",
		"ECC errors of the device's HBM (hl-smi ecc.errors.dram*), by type and scope; xpu_ecc_errors_total has hl-smi's device-wide totals.")
)

type gaudiCollector struct {
	runner *gaudi.Runner
	procs  *gaudi.ProcessScanner
	logger *slog.Logger

	mu         sync.Mutex
	inflight   *gaudiRead   // the read under way, nil when none
	lastReason gaudi.Reason // "" when the last run succeeded; logged on change only
	started    bool
	// known is every device a run has listed, by its identity, so that a
	// device is reported down when a run fails or no longer lists it,
	// rather than left out.
	known map[string]gaudi.Device
	// listedWith is, by the key of a known device, how many rows the last
	// run that listed it had.
	listedWith map[string]int
	// gone are the known devices the last good run did not list, logged
	// once when they go and once when they come back.
	gone       map[string]bool
	scanErrors map[gaudi.Reason]float64
	unreadable float64
	scanned    bool            // a scan has succeeded: unreadable is known
	unmatched  bool            // processes hold devices no listed one could be tied to; logged on change only
	scanFails  gaudi.Reason    // why the last process scan failed, "" if it did not; logged on change only
	badFields  map[string]bool // fields with cells hl-smi printed unreadably; logged on change only
	// unlistedNodes are the PCI addresses of the driver's devices hl-smi
	// does not list (unlistedBy) as last told; logged on change only.
	// unlistedTold says the last run could tell.
	unlistedNodes []string
	unlistedTold  bool
	// waitedOut counts snapshots that gave up waiting for a run under way.
	waitedOut float64
	// badValues counts the values the collector found unreadable, beside
	// the parser's (checkMemory), and totals is each device's memory.total
	// as the last run that printed it gave it.
	badValues float64
	totals    map[string]uint64
	// noBusID says hl-smi is not asked for bus_id: no process can be tied
	// to its device.
	noBusID bool
	// present says sysfs has shown the habanalabs driver's devices.
	present bool
	// lifetime is the exporter's run, from background.
	lifetime
}

func newGaudiCollector(cfg Config) (Collector, error) {
	r := &gaudi.Runner{Path: cfg.HLSMIPath}
	if len(cfg.HLSMIFields) > 0 {
		r.Fields = cfg.HLSMIFields
	}
	if err := r.Validate(); err != nil {
		return nil, fmt.Errorf("--gaudi.query-fields: %w", err)
	}
	return &gaudiCollector{
		runner:  r,
		noBusID: len(cfg.HLSMIFields) > 0 && !slices.Contains(cfg.HLSMIFields, "bus_id"),
		procs:   &gaudi.ProcessScanner{ProcRoot: cfg.Procfs, SysRoot: cfg.Sysfs},
		logger:  cfg.Logger,
		known:   map[string]gaudi.Device{}, listedWith: map[string]int{}, totals: map[string]uint64{}, gone: map[string]bool{}, badFields: map[string]bool{}, scanErrors: map[gaudi.Reason]float64{},
	}, nil
}

// gaudiKey identifies a device across runs: its PCI address, which hl-smi's
// index and the accel node numbers are not guaranteed to keep. A device
// already known keeps its key when a later run cannot read the cell it
// came from (keyOf).
func gaudiKey(d *gaudi.Device) string {
	switch {
	case d.BusID != "":
		return d.BusID
	case d.UUID != "":
		return d.UUID
	}
	return "index/" + strconv.Itoa(d.Index)
}

// gaudiRead is one hl-smi run and process scan, shared by the snapshots
// that ask for devices while it is under way.
type gaudiRead struct {
	done chan struct{}
	// waiters are the snapshots waiting for the read; the last to give up
	// waiting (its deadline passed, its scrape went away) ends it with
	// cancel, killing hl-smi. Both under gaudiCollector.mu; cancelled says
	// the read is being ended, and joins no one any more.
	waiters   int
	cancel    context.CancelCauseFunc
	cancelled bool

	up   []gaudi.Device // listed by this run, with their processes
	down []gaudi.Device // known from earlier runs, not listed by this one
	// partial says the process scan failed or could not read every
	// process: any device may lack processes (Device.ProcessesPartial).
	// namelessPartial says the processes no listed device could be tied to
	// hold nodes sysfs places at an address no row names: only the rows
	// without a bus_id may lack them.
	partial, namelessPartial bool
	err                      error
}

// readDevices reads every Gaudi device: one hl-smi run, then the processes
// on each device. A snapshot that asks while a read is under way (the
// warm-up at start and the first scrape, an HA pair of Prometheus servers,
// /devices) joins it rather than start hl-smi a second time, which the
// Runner would refuse as busy: at most one hl-smi runs at a time.
//
// The read belongs to none of them: it goes on as long as one of them waits
// for it, each under its own deadline, and is ended (hl-smi killed with its
// group) only when the last gives up. So every snapshot gets hl-smi for its
// whole deadline, and one with a longer deadline that joined a read started
// for a shorter one (a second Prometheus with a longer scrape timeout, a
// scrape after the warm-up) is not cut short by the other's. A snapshot
// that finds the read already ended (killed, hl-smi perhaps not yet exited)
// starts its own, which fails as busy until the killed run has exited.
// When the run fails, every device known from earlier runs is reported
// down with the error.
func (c *gaudiCollector) readDevices(ctx context.Context, _ move) ([]*Device, error) {
	if _, ok := ctx.Deadline(); !ok {
		// The read has no deadline but its waiters': one without is
		// bounded as the Runner bounds a run without one.
		timeout := c.runner.Timeout
		if timeout <= 0 {
			timeout = gaudi.DefaultTimeout
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	c.mu.Lock()
	r := c.inflight
	if r == nil || r.cancelled {
		// No deadline of its own (the far one keeps the Runner from
		// setting its default): it is cancelled when its last waiter
		// leaves. Values, such as a trace, are the first waiter's.
		runCtx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
		runCtx, cancelDeadline := context.WithDeadline(runCtx, flight.NoDeadline)
		r = &gaudiRead{done: make(chan struct{}), cancel: func(cause error) { cancel(cause); cancelDeadline() }}
		c.inflight = r
		go c.lead(runCtx, r)
	}
	r.waiters++
	c.mu.Unlock()

	select {
	case <-r.done:
	case <-ctx.Done():
		c.mu.Lock()
		select {
		case <-r.done: // answered at that very moment: it counts
			c.mu.Unlock()
		default:
			r.waiters--
			if r.waiters > 0 {
				// Others still wait for the read: it goes on for them.
				c.mu.Unlock()
				return c.waitedOutFor(ctx)
			}
			// The last to wait: the read, hl-smi's run, ends here, and
			// is this snapshot's timeout (the Runner returns at once
			// after the kill).
			r.cancelled = true
			r.cancel(context.Cause(ctx))
			c.mu.Unlock()
			<-r.done
		}
	}
	if r.err != nil {
		known := c.unanswered()
		if gaudi.ReasonOf(r.err) == gaudi.ReasonMissingBinary && len(known) == 0 {
			// No hl-smi and no Gaudi device ever seen: a node without
			// Gaudi (an NVIDIA node on default flags), not a failing
			// collector. The miss is still counted and logged once.
			return nil, nil
		}
		return known, r.err
	}
	devs := make([]*Device, 0, len(r.up)+len(r.down))
	for i := range r.up {
		d := gaudiDevice(&r.up[i], true)
		d.ProcessesPartial = r.partial || r.namelessPartial && r.up[i].BusID == ""
		devs = append(devs, d)
	}
	for i := range r.down {
		devs = append(devs, gaudiDevice(&r.down[i], false))
	}
	return devs, nil
}

// lead does read r under ctx, which ends when r's last waiter leaves, and
// wakes its waiters.
func (c *gaudiCollector) lead(ctx context.Context, r *gaudiRead) {
	up, down, partial, namelessPartial, err := c.read(ctx)
	c.mu.Lock()
	r.up, r.down, r.partial, r.namelessPartial, r.err = up, down, partial, namelessPartial, err
	if c.inflight == r {
		c.inflight = nil
	}
	c.mu.Unlock()
	r.cancel(context.Canceled) // releases the context
	close(r.done)
}

// background keeps the exporter's life, so that a run its stop cut short
// is not logged as hl-smi failing.
func (c *gaudiCollector) background(ctx context.Context, _ func(context.Context) *Snapshot) {
	c.begin(ctx)
}

// Close kills the hl-smi run under way, with everything it started, and
// starts none after: for the exporter's exit.
func (c *gaudiCollector) Close() { c.runner.Close() }

// waitedOutFor reports a snapshot that gave up waiting for a read that
// goes on for other snapshots with later deadlines: what the Runner calls
// busy, and counted as such. It is not logged: the read it left is, when it
// ends (one line per change of how runs end), so that an HA pair whose
// shorter scrape timeout is too short for hl-smi does not log a failure and
// a recovery at every scrape.
func (c *gaudiCollector) waitedOutFor(ctx context.Context) ([]*Device, error) {
	err := &gaudi.Error{Reason: gaudi.ReasonBusy, Detail: "the hl-smi run under way has not answered before the deadline", Err: ctx.Err()}
	c.mu.Lock()
	c.waitedOut++
	c.mu.Unlock()
	return c.unanswered(), err
}

// read runs hl-smi and the process scan once, and keeps track of the
// devices known across runs. partial says the scan failed or could not read
// every process.
func (c *gaudiCollector) read(ctx context.Context) (up, down []gaudi.Device, partial, namelessPartial bool, err error) {
	nds, err := c.runner.Query(ctx)
	if r := gaudi.ReasonOf(err); !c.stopping() || r != gaudi.ReasonTimeout && r != gaudi.ReasonBusy {
		// A run the stop ended says nothing of hl-smi: the devices are
		// served down, but a log alert on "hl-smi failed" must not fire
		// at every restart.
		c.logChange(err)
	}
	if err != nil {
		return nil, nil, false, false, err
	}
	c.mu.Lock()
	rows := nds
	nds, keys, leftOut := placed(rows, c.identify(rows))
	c.checkMemory(nds, keys)
	// bus_id of known devices this run lacks, and of rows left out: a
	// process holding one is that device's, not a hole in the others'
	// lists.
	unlisted := map[string]bool{}
	for _, kd := range c.known {
		if kd.BusID != "" {
			unlisted[kd.BusID] = true
		}
	}
	c.mu.Unlock()
	for i := range nds {
		delete(unlisted, nds[i].BusID)
	}
	for _, nd := range leftOut {
		if nd.BusID != "" {
			unlisted[nd.BusID] = true
		}
	}
	uses, unreadable, scanErr := c.procs.Scan(ctx)
	partial = scanErr != nil || unreadable > 0
	nodes := c.procs.NodeAddresses()
	c.mu.Lock()
	missing, told := c.unlistedBy(rows, nodes)
	c.mu.Unlock()
	for _, addr := range missing {
		// A process holding it holds that device, not one of the others.
		unlisted[addr] = true
	}
	unmatched := 0
	if scanErr == nil {
		// A process holds a Gaudi that no listed device could be tied to
		// (sysfs not where --path.sysfs says, a layout not understood):
		// it is some device's, so every device's list may lack it. One
		// holding a known device hl-smi no longer lists is that device's,
		// which is down, its processes unknown: the others' lists are
		// whole.
		untied := gaudi.AttachProcesses(nds, uses)
		if len(untied) > 0 && len(leftOut) == 0 {
			untied = gaudi.AttachByElimination(nds, nodes, untied)
		}
		// A node sysfs places at an address no row names is a row's
		// without a bus_id (or a device hl-smi does not list), never a
		// named row's: those rows' lists are whole (probe J, PJ3). One
		// sysfs could not place may be any device's.
		placed := true
		for _, u := range untied {
			if !unlisted[u.BusID] {
				unmatched++
				placed = placed && u.BusID != ""
			}
		}
		namelessPartial = unmatched > 0 && placed
		partial = partial || unmatched > 0 && !placed
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case unmatched > 0 && !c.unmatched && c.noBusID:
		c.logger.Warn("processes hold Gaudi devices, but --gaudi.query-fields leaves out bus_id, through which a process's device node is tied to an hl-smi device; per-owner figures are left out until bus_id is asked for", "uses", unmatched)
	case unmatched > 0 && !c.unmatched && !told:
		c.logger.Warn("processes hold Gaudi devices that no hl-smi device could be tied to: hl-smi printed no bus_id for a device, which may be theirs; the per-owner figures of the devices without a bus_id are left out until they can be tied", "uses", unmatched)
	case unmatched > 0 && !c.unmatched:
		c.logger.Warn("processes hold Gaudi devices that no hl-smi device could be tied to through sysfs (check --path.sysfs); per-owner figures are left out until they can", "uses", unmatched)
	case unmatched == 0 && c.unmatched:
		c.logger.Info("every process holding a Gaudi device is tied to its device again")
	}
	c.unmatched = unmatched > 0
	switch {
	case !told:
		// Not known this run: no line, and no gauge (probe28 PC2: "lists
		// every device again" while one was unlisted still).
	case slices.Equal(missing, c.unlistedNodes):
	case len(missing) > 0:
		c.logger.Warn("the habanalabs driver has Gaudi devices that hl-smi does not list; they are not served (xpu_gaudi_devices_unlisted), and a process holding one is counted as theirs", "pci", strings.Join(missing, ","))
	default:
		c.logger.Info("hl-smi lists every Gaudi device the habanalabs driver has again")
	}
	if told {
		c.unlistedNodes = missing
	}
	c.unlistedTold = told
	c.logBadFields(rows)
	var scanFails gaudi.Reason
	if scanErr != nil {
		scanFails = gaudi.ReasonOf(scanErr)
		c.scanErrors[scanFails]++
	} else {
		c.unreadable, c.scanned = float64(unreadable), true
	}
	switch {
	case scanFails != "" && scanFails != c.scanFails:
		c.logger.Warn("cannot scan processes for the Gaudi device nodes they hold (check --path.procfs); per-owner figures are left out until it can", "reason", scanFails, "err", scanErr)
	case scanFails == "" && c.scanFails != "":
		c.logger.Info("the Gaudi process scan works again")
	}
	c.scanFails = scanFails
	seen := make(map[string]bool, len(keys))
	for _, key := range keys {
		seen[key] = true
	}
	for i := range nds {
		nd, key := &nds[i], keys[i]
		if _, ok := c.known[key]; ok || len(c.known) < maxKnownGaudi {
			c.known[key] = *nd
			c.listedWith[key] = len(nds)
		}
		if c.gone[key] {
			delete(c.gone, key)
			c.logger.Info("Gaudi device listed by hl-smi again", "gpu", nd.Index, "uuid", nd.UUID, "bus_id", nd.BusID)
		}
	}
	listed := make(map[int]bool, len(nds))
	for i := range nds {
		listed[nds[i].Index] = true
	}
	for key, nd := range c.known {
		if seen[key] {
			continue
		}
		if anonymousGaudi(&nd) && listed[nd.Index] && len(nds) >= c.listedWith[key] {
			// Its index was all that named it, a named row holds it now,
			// and no fewer rows are listed than when it was: the nameless
			// row was a device hl-smi lists under its name (one renumbered
			// while its cells read N/A), not one that left, and reported
			// down it would stay so for good (probe22-amdseq 02). With
			// fewer rows, a device left, likeliest the one whose cells
			// failed, and hl-smi renumbered the others onto its index: it
			// is reported down (review23 F1).
			delete(c.known, key)
			delete(c.listedWith, key)
			delete(c.gone, key)
			c.logger.Info("Gaudi device known only by its index is not listed at it any more; forgotten, its index being another device's", "gpu", nd.Index)
			continue
		}
		if !c.gone[key] {
			c.gone[key] = true
			c.logger.Warn("Gaudi device no longer listed by hl-smi; reported down", "gpu", nd.Index, "uuid", nd.UUID, "bus_id", nd.BusID)
		}
		down = append(down, nd)
	}
	return nds, down, partial, namelessPartial, nil
}

// checkMemory leaves out a row's memory used above the device's total as
// the last run that printed it gave it, where this run's total is N/A: a
// used value above the device's size is no reading, whichever run said
// the size (probe28 PC5; the parser checks a row against its own total).
// Counted as bad_value. c.mu must be held.
func (c *gaudiCollector) checkMemory(nds []gaudi.Device, keys []string) {
	for i := range nds {
		nd := &nds[i]
		if nd.MemoryTotal.OK {
			c.totals[keys[i]] = nd.MemoryTotal.Value
			continue
		}
		total, ok := c.totals[keys[i]]
		if !ok || !nd.MemoryUsed.OK || nd.MemoryUsed.Value <= total {
			continue
		}
		nd.Problems = append(nd.Problems, &gaudi.Error{Reason: gaudi.ReasonBadValue, Field: "memory.used",
			Detail: fmt.Sprintf("%d bytes, above memory.total's %d at an earlier run", nd.MemoryUsed.Value, total)})
		nd.MemoryUsed = gaudi.Opt[uint64]{}
		c.badValues++
	}
	// Only the known devices' totals, which maxKnownGaudi bounds.
	maps.DeleteFunc(c.totals, func(k string, _ uint64) bool {
		_, known := c.known[k]
		return !known && !slices.Contains(keys, k)
	})
}

// unlistedBy are the PCI addresses of the driver's compute nodes (nodes,
// from sysfs) that no row of the run and no known device has: devices
// hl-smi does not list, which would otherwise be neither served nor seen
// (probe27 PA4). Not told (told false) where a row's address is unknown
// (bus_id N/A, or not asked for): that row may be one of them. c.mu must
// be held.
func (c *gaudiCollector) unlistedBy(rows []gaudi.Device, nodes []string) (missing []string, told bool) {
	if c.noBusID {
		return nil, false
	}
	for i := range rows {
		if rows[i].BusID == "" {
			return nil, false
		}
	}
	// A node's few devices: scanned, not indexed, at every scrape.
	for _, addr := range nodes {
		if !c.hasBusID(rows, addr) {
			missing = append(missing, addr)
		}
	}
	return missing, true
}

// hasBusID says whether a row or a known device has the PCI address addr.
// c.mu must be held.
func (c *gaudiCollector) hasBusID(rows []gaudi.Device, addr string) bool {
	for i := range rows {
		if rows[i].BusID == addr {
			return true
		}
	}
	for _, kd := range c.known {
		if kd.BusID == addr {
			return true
		}
	}
	return false
}

// placed splits a run's rows into those identify gave a key, with their
// keys, and those it left out (key "").
func placed(rows []gaudi.Device, keys []string) (nds []gaudi.Device, ndKeys []string, leftOut []gaudi.Device) {
	if !slices.Contains(keys, "") {
		return rows, keys, nil
	}
	for i := range rows {
		if keys[i] == "" {
			leftOut = append(leftOut, rows[i])
			continue
		}
		nds, ndKeys = append(nds, rows[i]), append(ndKeys, keys[i])
	}
	return nds, ndKeys, leftOut
}

// logBadFields names a field whose cells stop reading (counted as
// bad_value, their reading left out) with the first device and cell, once,
// and its return once. c.mu must be held.
func (c *gaudiCollector) logBadFields(nds []gaudi.Device) {
	now := map[string]bool{}
	for i := range nds {
		for _, p := range nds[i].Problems {
			switch {
			case now[p.Field] || c.badFields[p.Field]:
			case p.Field == "index":
				attrs := []any{"bus_id", nds[i].BusID, "uuid", nds[i].UUID, "err", p}
				if nds[i].Index != gaudi.NoIndex {
					attrs = append(attrs, "gpu", nds[i].Index)
				}
				c.logger.Warn("hl-smi printed an index that cannot be read; the row is served at the index of the known device its bus_id, uuid or serial names, where no other row holds it, and left out otherwise (xpu_hlsmi_errors_total{reason=\"bad_value\"})", attrs...)
			default:
				c.logger.Warn("hl-smi printed a value that cannot be read; that reading is left out while it does (xpu_hlsmi_errors_total{reason=\"bad_value\"})", "field", p.Field, "gpu", nds[i].Index, "err", p)
			}
			now[p.Field] = true
		}
	}
	for f := range c.badFields {
		if !now[f] {
			c.logger.Info("hl-smi values of a field read again", "field", f)
		}
	}
	c.badFields = now
}

// identify finds the known device each row of a run is, and gives a row
// the identity cells it printed N/A from that device: a device stays one
// device, with the uuid that names its series, the bus_id that ties its
// processes to it and the serial the device plugin advertises it by,
// whichever cell a run could not read; and the driver and module its
// xpu_device_info names, so that the series stays one. c.mu must be held.
//
// Rows are matched in passes, each only among the known devices no row
// took before: rows that name a device (namedKey) first, so that a row
// matched by its index alone cannot take a device a later row names; then
// rows by index (indexKey); then, where one nameless row is left and one
// known device, that device (by elimination: hl-smi renumbered it while
// its cells read N/A); the rest are devices of their own (newKey). A row
// whose index could not be read is matched by name only, and placed at
// its device's index (placeUnindexed); its key is "" where it cannot be:
// the row is left out.
func (c *gaudiCollector) identify(nds []gaudi.Device) []string {
	keys := make([]string, len(nds))
	seen := make(map[string]bool, len(nds))
	for i := range nds {
		if k, ok := c.namedKey(&nds[i], seen); ok {
			keys[i], seen[k] = k, true
		}
	}
	for i := range nds {
		if keys[i] != "" || nds[i].Index == gaudi.NoIndex {
			continue
		}
		if k, ok := c.indexKey(&nds[i], seen, len(nds)); ok {
			keys[i], seen[k] = k, true
		}
	}
	if row, key, ok := c.eliminated(nds, keys, seen); ok {
		keys[row], seen[key] = key, true
	}
	for i := range nds {
		if keys[i] == "" && nds[i].Index != gaudi.NoIndex {
			keys[i] = c.newKey(&nds[i], seen)
			seen[keys[i]] = true
		}
	}
	c.placeUnindexed(nds, keys)
	for i := range nds {
		nd := &nds[i]
		kd, ok := c.known[keys[i]]
		if !ok {
			continue
		}
		for _, cell := range []struct{ now, known *string }{
			{&nd.UUID, &kd.UUID}, {&nd.BusID, &kd.BusID}, {&nd.Serial, &kd.Serial}, {&nd.Name, &kd.Name},
			{&nd.DriverVersion, &kd.DriverVersion},
		} {
			if *cell.now == "" {
				*cell.now = *cell.known
			}
		}
		if !nd.ModuleID.OK {
			nd.ModuleID = kd.ModuleID
		}
	}
	return keys
}

// placeUnindexed gives each row whose index hl-smi did not print readably
// the index of the known device its name matched (identify), and takes
// the key of one it cannot place: a row no known device matches (its
// index would be a guess), and one whose device's index another row of
// this run holds (renumbered since): two devices at one index would mix
// the owners the device plugin's hl<n> and Slurm's GRES indices give
// them. Such a row is left out, its device (if known) not listed this
// run. c.mu must be held.
func (c *gaudiCollector) placeUnindexed(nds []gaudi.Device, keys []string) {
	taken := make(map[int]bool, len(nds))
	for i := range nds {
		taken[nds[i].Index] = true
	}
	for i := range nds {
		if nds[i].Index != gaudi.NoIndex {
			continue
		}
		kd, ok := c.known[keys[i]]
		if !ok || taken[kd.Index] {
			keys[i] = ""
			continue
		}
		nds[i].Index, taken[kd.Index] = kd.Index, true
	}
}

// namedKey is the key of the known device that nd names, unless another
// row of this run took it (seen): nd's own key (gaudiKey), else the one
// known device that any identity cell this run could read (PCI address,
// uuid, serial) matches, so that one going N/A does not make a second
// device of it. A row that names nothing names no device, whatever key it
// would have ("index/N" may be that of a device named since). c.mu must
// be held.
func (c *gaudiCollector) namedKey(nd *gaudi.Device, seen map[string]bool) (string, bool) {
	if anonymousGaudi(nd) {
		return "", false
	}
	key := gaudiKey(nd)
	if _, ok := c.known[key]; ok && !seen[key] {
		return key, true
	}
	same := func(a, b string) bool { return a != "" && a == b }
	match := ""
	for k, kd := range c.known {
		if seen[k] || !(same(kd.BusID, nd.BusID) || same(kd.UUID, nd.UUID) || same(kd.Serial, nd.Serial)) {
			continue
		}
		if match != "" {
			return "", false
		}
		match = k
	}
	return match, match != ""
}

// indexKey is the key of the one known device at nd's index where it or
// that device has no identity cell at all (every one printed N/A): there
// is nothing else to go by, and a device whose identity becomes readable,
// or unreadable, stays one device, rather than leave a phantom reported
// down for good. c.mu must be held.
func (c *gaudiCollector) indexKey(nd *gaudi.Device, seen map[string]bool, rows int) (string, bool) {
	match := ""
	for k, kd := range c.known {
		if seen[k] || kd.Index != nd.Index || !(anonymousGaudi(&kd) || anonymousGaudi(nd)) {
			continue
		}
		if anonymousGaudi(nd) && !anonymousGaudi(&kd) && rows != c.listedWith[k] {
			// A nameless row at a named device's index, in a run of
			// another number of rows than the last that listed it: a
			// device left or came, and hl-smi may have renumbered the
			// rest, so the index names none of them for sure. Matched,
			// the row served another device's readings under this
			// one's uuid (probe27 PA7, and probe28 PC3 for a device
			// added).
			continue
		}
		if match != "" {
			return "", false
		}
		match = k
	}
	return match, match != ""
}

// eliminated is the one nameless row no pass matched and the one known
// device no row took, when there is one of each: the device, renumbered
// while its cells read N/A (probe22-amdseq 02 and review23 F2: a nameless
// row at another device's index made a device of its own, and the device
// it was stayed reported down). c.mu must be held.
func (c *gaudiCollector) eliminated(nds []gaudi.Device, keys []string, seen map[string]bool) (int, string, bool) {
	row := -1
	for i := range nds {
		if keys[i] != "" {
			continue
		}
		// A row left without an index, like a named one, is a device no
		// known one matched: then the nameless row may be a new device
		// as well.
		if row >= 0 || !anonymousGaudi(&nds[i]) || nds[i].Index == gaudi.NoIndex {
			return 0, "", false
		}
		row = i
	}
	if row < 0 {
		return 0, "", false
	}
	key := ""
	for k := range c.known {
		if seen[k] {
			continue
		}
		if key != "" {
			return 0, "", false
		}
		key = k
	}
	return row, key, key != ""
}

// newKey is a key of nd's own, never one another row of this run took
// (seen) nor a known device's: two rows that print one bus_id or uuid
// (which no real hl-smi does) stay two devices, each reported down when a
// run fails, rather than one overwriting the other. c.mu must be held.
func (c *gaudiCollector) newKey(nd *gaudi.Device, seen map[string]bool) string {
	free := func(k string) bool {
		_, known := c.known[k]
		return k != "" && !seen[k] && !known
	}
	for _, k := range []string{gaudiKey(nd), nd.UUID, nd.Serial} {
		if free(k) {
			return k
		}
	}
	// The index, unique in a run (Parse), where that of a known device is
	// taken too.
	k := "index/" + strconv.Itoa(nd.Index)
	for n := 2; !free(k); n++ {
		k = "index/" + strconv.Itoa(nd.Index) + "#" + strconv.Itoa(n)
	}
	return k
}

// anonymousGaudi says hl-smi printed none of d's identity cells: it is
// known by its index alone.
func anonymousGaudi(d *gaudi.Device) bool { return d.BusID == "" && d.UUID == "" && d.Serial == "" }

// unanswered is every device known from earlier runs, down: a run that
// failed, was killed at the deadline or is still hung says nothing about
// them, and leaving them out would hide them from alerts on xpu_device_up.
func (c *gaudiCollector) unanswered() []*Device {
	c.mu.Lock()
	defer c.mu.Unlock()
	devs := make([]*Device, 0, len(c.known))
	for _, nd := range c.known {
		devs = append(devs, gaudiDevice(&nd, false))
	}
	return devs
}

// gaudiDevice converts one hl-smi row. A device that is down keeps only its
// identity: its readings are from an earlier run.
func gaudiDevice(nd *gaudi.Device, up bool) *Device {
	d := &Device{
		Vendor:   kubernetes.VendorHabana,
		Index:    strconv.Itoa(nd.Index),
		UUID:     nd.UUID,
		Model:    nd.Name,
		PCIBusID: nd.BusID,
		Serial:   nd.Serial,
		Up:       up,
	}
	if !up {
		identity := gaudi.Device{Index: nd.Index, ModuleID: nd.ModuleID, UUID: nd.UUID, Name: nd.Name, BusID: nd.BusID, Serial: nd.Serial, DriverVersion: nd.DriverVersion}
		d.vendorData = &identity
		return d
	}
	d.vendorData = nd
	d.MemoryUsed, d.MemoryTotal = asFloat(nd.MemoryUsed), asFloat(nd.MemoryTotal)
	d.Utilization = asFloat(nd.Utilization)
	// hl-smi gives no memory or utilization per process: Process.MemoryUsed
	// and Utilization stay nil, so a shared device has no per-owner split
	// (Device.Usage leaves it out rather than guess).
	for _, pid := range nd.Processes {
		if pid > 0 {
			d.Processes = append(d.Processes, Process{PID: uint32(pid)})
		}
	}
	return d
}

// logChange logs one line when the reason hl-smi fails for changes, and one
// when it answers again; never one per scrape. It is called with how each
// read ended. Busy and timeout are one state, a hung hl-smi: a read whose
// run was killed counts a timeout, one that found a killed run not yet
// exited counts busy, and scrapers with different deadlines meet both.
func (c *gaudiCollector) logChange(err error) {
	reason := gaudi.ReasonOf(err)
	if err != nil && reason == "" {
		reason = "unknown"
	}
	state := reason
	if state == gaudi.ReasonBusy {
		state = gaudi.ReasonTimeout
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started && state == c.lastReason {
		return
	}
	c.started, c.lastReason = true, state
	switch {
	case reason == "":
		c.logger.Info("Gaudi collector reading devices through hl-smi", "path", c.path())
	case reason == gaudi.ReasonMissingBinary && len(c.known) == 0:
		// A node without Gaudi; one whose hl-smi went away after listing
		// devices is failing, below.
		c.logger.Info("Gaudi collector found no hl-smi; serving no Gaudi devices until it appears (set --gaudi.hl-smi-path, or disable with --no-collector.gaudi)", "err", err)
	default:
		c.logger.Warn("hl-smi failed; Gaudi devices known so far are reported down", "reason", reason, "err", err)
	}
}

// vendorPresent says the node has Gaudi devices, listed now or not: a run
// listed some, or sysfs shows the habanalabs driver's compute nodes while
// hl-smi fails or is missing. An hl-smi that fails on a node without such
// nodes (installed where no Gaudi is) says nothing of the node.
func (c *gaudiCollector) vendorPresent() (string, bool) {
	c.mu.Lock()
	present := c.present || len(c.known) > 0
	c.mu.Unlock()
	if !present && gaudi.HasDevices(c.procs.SysRoot) {
		present = true
		c.mu.Lock()
		c.present = true
		c.mu.Unlock()
	}
	return kubernetes.VendorHabana, present
}

func (c *gaudiCollector) path() string {
	if c.runner.Path == "" {
		return gaudi.DefaultPath
	}
	return c.runner.Path
}

func (c *gaudiCollector) Update(_ context.Context, snap *Snapshot, ch chan<- prometheus.Metric) error {
	e := newEmitter(ch)
	defer e.flush()
	failures := c.runner.Failures()
	c.mu.Lock()
	for reason, n := range failures {
		v := float64(n)
		switch reason {
		case gaudi.ReasonProcfs:
			continue // the process scan's, in gaudiScanErrors
		case gaudi.ReasonBusy:
			v += c.waitedOut
		case gaudi.ReasonBadValue:
			v += c.badValues
		}
		e.emit(hlsmiErrors, labels{}.with("reason", string(reason)), v)
	}
	for reason, n := range c.scanErrors {
		e.emit(gaudiScanErrors, labels{}.with("reason", string(reason)), n)
	}
	if c.scanned {
		e.emit(gaudiUnreadable, labels{}, c.unreadable)
		if c.unlistedTold {
			e.emit(gaudiUnlisted, labels{}, float64(len(c.unlistedNodes)))
		}
	}
	c.mu.Unlock()
	for _, d := range snap.Devices {
		nd, ok := d.vendorData.(*gaudi.Device)
		if !ok {
			continue
		}
		// Static facts, wherever hl-smi named the device at all: a uuid
		// printed N/A leaves its PCI address and serial worth serving.
		if d.UUID != "" || nd.BusID != "" || nd.Serial != "" {
			info := identityLabels(d).with("driver_version", nd.DriverVersion).with("pci_bus_id", nd.BusID).with("serial", nd.Serial)
			if nd.ModuleID.OK {
				info = info.with("module_id", strconv.Itoa(nd.ModuleID.Value))
			}
			e.emit(deviceInfo, info, 1)
		}
		l := deviceLabels(d)
		e.emit(deviceUp, l, boolValue(d.Up))
		if d.Up {
			emitGaudiReadings(e, l, nd)
		}
	}
	return nil
}

// emitGaudiReadings emits what hl-smi gave, each reading in the families and
// units NVIDIA's use; a reading hl-smi printed as N/A is left out.
func emitGaudiReadings(e emitter, l labels, d *gaudi.Device) {
	optional(e, utilization, l, d.Utilization)
	optional(e, memUsed, l, d.MemoryUsed)
	optional(e, memTotal, l, d.MemoryTotal)
	// sensor="gpu" as for NVIDIA: temperature.aip is the accelerator die's
	// temperature, as NVML_TEMPERATURE_GPU is the GPU die's ("Temperature
	// sensor for the GPU die", nvml.h), so one query covers both vendors.
	optional(e, temperature, l.with("sensor", "gpu"), d.Temperature)
	optional(e, power, l, d.Power)
	optional(e, powerLimit, l, d.PowerLimit)
	// clocks.limit.* are not emitted: the manual lists them without saying
	// how a limit differs from clocks.max, so no family can be named for
	// them truthfully.
	for _, c := range []gaudi.Clock{gaudi.ClockSoC, gaudi.ClockTPC} {
		if v, ok := d.Clocks[c]; ok {
			e.emit(clock, l.with("clock", string(c)), v)
		}
		if v, ok := d.MaxClocks[c]; ok {
			e.emit(clockMax, l.with("clock", string(c)), v)
		}
	}
	optional(e, pcieGen, l, d.PCIeLinkGeneration)
	optional(e, pcieWidth, l, d.PCIeLinkWidth)
	optional(e, pcieMaxGen, l, d.PCIeLinkMaxGeneration)
	optional(e, pcieMaxWidth, l, d.PCIeLinkMaxWidth)
	for _, t := range []string{"corrected", "uncorrected"} {
		for _, s := range []string{"volatile", "aggregate"} {
			if v, ok := d.ECC[gaudi.ECCCounter{Type: t, Scope: s}]; ok {
				e.emit(eccErrors, l.with("type", t).with("scope", s), float64(v))
			}
			// A family of its own: whether hl-smi's device-wide totals
			// include the DRAM errors is not documented, and a sum over
			// one family must not count an error twice.
			if v, ok := d.ECC[gaudi.ECCCounter{Type: t, Scope: s, Memory: "dram"}]; ok {
				e.emit(gaudiDRAMECC, l.with("type", t).with("scope", s), float64(v))
			}
		}
	}
}

// optionalGaudi emits a reading hl-smi gave, and nothing for one it did not.
