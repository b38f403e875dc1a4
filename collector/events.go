package collector

import (
	"context"
	"errors"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/xpu-exporter/xpu_exporter/vendors/nvidia"
)

var (
	xidErrors     = counter("xid_errors_total", "NVIDIA Xid errors by code, with the owner the device had when the error happened.")
	lastEvent     = gauge("device_last_event_timestamp_seconds", "Time of the device's last driver event of this type (xid, double_bit_ecc, single_bit_ecc).")
	eventsEnabled = gauge("nvml_events_listening", "1 while the exporter receives NVML events (Xid, ECC); 0 when the driver offers none or cannot be loaded.")
)

// Limits on what the event recorder keeps: an Xid flood, or pods churning
// on a flaky GPU, must not grow memory without bound.
const (
	// eventRetention is how long a counter is kept after its last event.
	// Prometheus has seen every increase by then; the series ending is
	// what the alert's window expects.
	eventRetention = 24 * time.Hour
	// maxEventSeries caps the counters kept; the oldest go first.
	maxEventSeries = 10000
	// ownerFreshness is how old a snapshot may be to name the owner of a
	// device at an event: a flood costs at most one snapshot per period
	// (four a second), and a pod replaced longer ago than that is not
	// taken for the owner of a later event.
	ownerFreshness = 250 * time.Millisecond
	// ownerTimeout bounds taking that snapshot.
	ownerTimeout = 5 * time.Second
)

// eventRecorder counts driver events with the owner of the device at the
// moment they arrived, resolved then and kept: the pod may be gone by the
// next scrape, and the operator's question is what ran on the GPU when it
// failed.
type eventRecorder struct {
	logger *slog.Logger
	now    func() time.Time

	mu        sync.Mutex
	xids      map[string]*xidSeries
	last      map[string]eventStamp // device identity + type → time
	lastTrim  time.Time
	listening bool
	lastErr   string
	snap      *Snapshot
}

type xidSeries struct {
	labels labels
	count  float64
	last   time.Time
	// created is when the series was made, at 0: the start of its count.
	created time.Time
}

type eventStamp struct {
	labels labels
	at     time.Time
}

func newEventRecorder(logger *slog.Logger, now func() time.Time) *eventRecorder {
	return &eventRecorder{logger: logger, now: now, xids: map[string]*xidSeries{}, last: map[string]eventStamp{}}
}

// waitRetry is how soon an event set whose waits kept failing is made
// anew.
var waitRetry = 5 * time.Second

// listen receives events until ctx ends. A driver that is missing or lacks
// event support is retried every minute: a driver installed later is
// picked up, as the scrape path does.
func (r *eventRecorder) listen(ctx context.Context, client *nvidia.Client, snapshot func(context.Context) *Snapshot) {
	for {
		err := client.Listen(ctx, func(st nvidia.ListenStatus) {
			r.setListening(st.Devices > 0, nil)
			if st.Unsupported > 0 {
				r.logger.Info("some NVIDIA devices do not report driver events", "listening", st.Devices, "unsupported", st.Unsupported)
			}
			if st.Stuck > 0 {
				r.logger.Warn("some NVIDIA devices hung when registered for driver events and are not listened to; the others are", "listening", st.Devices, "hung", st.Stuck)
			}
			if st.Lost > 0 {
				r.logger.Warn("some NVIDIA devices are lost and are not listened to for driver events; the others are", "listening", st.Devices, "lost", st.Lost)
			}
		}, func(ev nvidia.Event) { r.record(ctx, ev, snapshot) })
		if ctx.Err() != nil {
			return
		}
		r.setListening(false, err)
		// An event set whose waits failed is made anew soon: a GPU lost
		// since it was made no longer registers, and the others' events
		// flow again.
		retry := time.Minute
		if errors.Is(err, nvidia.ErrWait) {
			retry = waitRetry
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(retry):
		}
	}
}

func (r *eventRecorder) setListening(on bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.listening = on
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if msg == r.lastErr {
		return
	}
	was := r.lastErr
	r.lastErr = msg
	switch {
	case err == nil && on && was != "":
		r.logger.Info("receiving NVIDIA driver events again")
	case errors.Is(err, nvidia.ErrNoDriver):
		// The scrape path already says the driver is missing.
	case err != nil:
		r.logger.Warn("not receiving NVIDIA driver events (Xid errors are not counted)", "err", err)
	}
}

// owners returns a snapshot no older than ownerFreshness.
func (r *eventRecorder) owners(ctx context.Context, snapshot func(context.Context) *Snapshot) *Snapshot {
	r.mu.Lock()
	snap := r.snap
	r.mu.Unlock()
	if snap != nil && r.now().Sub(snap.Time) < ownerFreshness {
		return snap
	}
	ctx, cancel := context.WithTimeout(ctx, ownerTimeout)
	defer cancel()
	snap = snapshot(ctx)
	if snap != nil {
		r.mu.Lock()
		r.snap = snap
		r.mu.Unlock()
	}
	return snap
}

func (r *eventRecorder) record(ctx context.Context, ev nvidia.Event, snapshot func(context.Context) *Snapshot) {
	l := labels{names: []string{"gpu", "uuid", "vendor"}, values: []string{strconv.Itoa(ev.Index), ev.UUID, "nvidia"}}
	id := l
	if snap := r.owners(ctx, snapshot); snap != nil {
		if d := findEventDevice(snap, ev); d != nil {
			l, id = deviceLabels(d), identityLabels(d)
		}
	}
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.last[id.key()+ev.Type] = eventStamp{labels: id.with("type", ev.Type), at: now}
	if ev.Type != "xid" {
		return
	}
	xl := l.with("xid", strconv.FormatUint(ev.XID, 10))
	s := r.xids[xl.key()]
	if s == nil {
		s = &xidSeries{labels: xl, created: now}
		r.xids[xl.key()] = s
	}
	s.count++
	s.last = now
	if len(r.xids) > maxEventSeries || now.Sub(r.lastTrim) > time.Minute {
		r.trim(now)
	}
}

// findEventDevice is the device an event is about: the MIG device of the
// compute instance the event names, or of the GPU instance it names when
// that instance is one MIG device; else the GPU. An event about a GPU
// instance split into several compute instances, each its own MIG device
// and maybe another owner's, is the GPU's: charged to no one of them.
func findEventDevice(snap *Snapshot, ev nvidia.Event) *Device {
	var gpu, inGI *Device
	sharedGI := false
	for _, d := range snap.Devices {
		if d.Vendor != "nvidia" {
			continue
		}
		switch {
		case ev.UUID == "":
			// Not identified: a device never identified has no UUID
			// either, and must not take another's event.
		case d.MIG == nil && d.UUID == ev.UUID:
			gpu = d
		case d.MIG != nil && d.MIG.ParentUUID == ev.UUID && ev.GPUInstance >= 0 && d.MIG.Instance == strconv.Itoa(ev.GPUInstance):
			if ev.ComputeInstance >= 0 && d.MIG.ComputeInstance == ev.ComputeInstance {
				return d
			}
			sharedGI = inGI != nil
			inGI = d
		}
	}
	if inGI != nil && !sharedGI && ev.ComputeInstance < 0 {
		return inGI
	}
	return gpu
}

// trim drops counters past their retention, and the oldest beyond the cap.
func (r *eventRecorder) trim(now time.Time) {
	r.lastTrim = now
	for k, s := range r.xids {
		if now.Sub(s.last) > eventRetention {
			delete(r.xids, k)
		}
	}
	for k, s := range r.last {
		if now.Sub(s.at) > eventRetention {
			delete(r.last, k)
		}
	}
	if len(r.xids) <= maxEventSeries {
		return
	}
	// Down to 90% of the cap, so that a flood sorts once per thousand
	// events rather than at every one.
	keys := make([]string, 0, len(r.xids))
	for k := range r.xids {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return r.xids[keys[i]].last.Before(r.xids[keys[j]].last) })
	for _, k := range keys[:len(keys)-maxEventSeries*9/10] {
		delete(r.xids, k)
	}
}

func (r *eventRecorder) collect(e emitter) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e.emit(eventsEnabled, labels{}, boolValue(r.listening))
	for _, s := range r.xids {
		e.emitCreated(xidErrors, s.labels, s.count, s.created)
	}
	for _, s := range r.last {
		e.emit(lastEvent, s.labels, float64(s.at.UnixNano())/1e9)
	}
}

// key identifies a label set.
func (l labels) key() string {
	l = l.flat()
	k := ""
	for i := range l.names {
		k += l.names[i] + "\xfe" + l.values[i] + "\xff"
	}
	return k
}
