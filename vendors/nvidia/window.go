package nvidia

import (
	"cmp"
	"encoding/binary"
	"math"
	"slices"
	"sort"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// The utilization window: what one read's device and per-process
// utilization cover.
//
// nvml.h, nvmlDeviceGetSamples: "Gets recent samples for the GPU. [...]
// lastSeenTimeStamp represents CPU timestamp in microseconds. [...] Set
// lastSeenTimeStamp to one of the timeStamps retrieved from the date of the
// previous query to get more recent samples." With NVML_GPU_UTILIZATION_SAMPLES
// each sample is the percent of one driver sample period during which a kernel
// ran (nvmlUtilization_t: "Percent of time over the past sample period during
// which one or more kernels was executing on the GPU"), so a sample at t_k
// covers (t_{k-1}, t_k].
//
// nvml.h, nvmlDeviceGetProcessUtilization: "One utilization sample structure
// is returned per process running, that had some non-zero utilization during
// the last sample period. It includes the CPU timestamp at which the samples
// were recorded. [...] If no valid sample entries are found since the
// lastSeenTimeStamp, NVML_ERROR_NOT_FOUND is returned." So an entry speaks
// for the one sample period its timestamp ends, and a process without an
// entry for a period used the GPU 0% of it. Drivers keep several periods in
// their buffer and then return several entries for one PID, one per period;
// entries are therefore placed in the device's periods and weighted by their
// length, never averaged as if each covered the whole window.
//
// Drivers differ in what they keep, though. The header's own wording
// gives one entry per process, for "the last sample period"; tools have
// seen one entry per PID at timestamps seconds apart (go-nvml issue #51),
// each process's latest. Read over a window of many periods, such a driver
// makes every process look idle in all but one of them. A driver that
// keeps entries per period shows it as soon as one PID has entries in two
// periods of a read; until one does, each process's value is that of its
// newest entry, the latest period it is known for, rather than a mean that
// counts the periods the driver says nothing about as idle.
//
// The window is every device sample period after the previous committed read
// (the previous scrape) up to the newest device sample, as far back as the
// driver's buffer reaches. Device and process values are taken over exactly
// that window, so an owner's part of the device is the split of one stated
// period.

// window is the result of one read's samples.
type window struct {
	// end is the newest device sample's timestamp: the next read asks for
	// samples after it.
	end uint64
	// length is the time the periods cover, in µs.
	length uint64
	// device is the time-weighted mean utilization over the window (0..1).
	device float64
	// procs holds the time-weighted mean of each process's samples over the
	// window, 0 for every period it had no entry in, sorted by PID. PIDs
	// without any entry are absent: the caller knows which processes ran
	// and gives them 0. It is nil when the processes' samples were not read.
	// A sorted slice rather than a map: it is built at every read of every
	// GPU, for up to hundreds of processes, and kept until the next.
	procs []procWindow
	// buffered says procs are means over the window: the driver keeps
	// entries per period (a PID had entries in two periods of this read,
	// or of an earlier one). Otherwise each is its process's newest entry.
	buffered bool
}

// procWindow is a process's SM utilization over the window: what splits a
// shared GPU between its owners. The entries' memory, encoder and decoder
// values have no per-owner series, so they are not kept.
type procWindow struct {
	pid uint32
	sm  float64
}

// proc is the window of one process, zero when it had no entry.
func (w *window) proc(pid uint32) procWindow {
	if i := w.row(pid); i >= 0 {
		return w.procs[i]
	}
	return procWindow{}
}

// row is the index of a process's window in procs, -1 when it had no entry.
func (w *window) row(pid uint32) int {
	i, ok := slices.BinarySearchFunc(w.procs, pid, func(p procWindow, pid uint32) int { return cmp.Compare(p.pid, pid) })
	if !ok {
		return -1
	}
	return i
}

// peak is a process's largest SM entry in one period, in percent.
type peak uint8

// period is one driver sample period: its end and length in µs, and the
// device's utilization in percent. Busy time is summed as percent × µs in
// integers, so that a mean is one exact division whatever the number of
// periods.
type period struct {
	end, length uint64
	percent     uint64
}

// point is one device utilization sample.
type point struct {
	ts      uint64
	percent uint64
}

// devicePeriods turns NVML's device utilization samples (in no promised
// order) into consecutive periods after prev. The first sample's period
// starts at prev. When prev is 0 (the first read) or the driver's buffer no
// longer reaches back to prev, it starts one period before the first
// sample, the period being the gap to the next sample (the driver's period
// is fixed per product: nvmlUtilization_t, "Each sample period may be
// between 1 second and 1/6 second, depending on the product being
// queried"), so the
// window is every period the buffer holds; a single such sample only
// marks where the window begins.
func devicePeriods(prev uint64, typ nvml.ValueType, samples []nvml.Sample) []period {
	points := make([]point, 0, len(samples))
	for _, s := range samples {
		if s.TimeStamp <= prev {
			continue
		}
		v, ok := sampleValue(typ, s.SampleValue)
		if !ok {
			return nil
		}
		points = append(points, point{s.TimeStamp, uint64(math.Round(math.Min(math.Max(v, 0), 100)))})
	}
	slices.SortFunc(points, func(a, b point) int { return cmp.Compare(a.ts, b.ts) })
	points = slices.CompactFunc(points, func(a, b point) bool { return a.ts == b.ts })
	if len(points) == 0 {
		return nil
	}
	start := prev
	if prev == 0 || !reachesBack(prev, points) {
		if len(points) < 2 {
			return nil
		}
		start = points[0].ts - min(points[1].ts-points[0].ts, points[0].ts)
	}
	out := make([]period, 0, len(points))
	for _, p := range points {
		out = append(out, period{end: p.ts, length: p.ts - start, percent: p.percent})
		start = p.ts
	}
	return out
}

// reachesBack says whether the gap between the previous read and the oldest
// sample is one sample period, not a stretch the driver's buffer has dropped.
// The driver's period is taken as the longest gap between the samples
// returned; with a single sample there is nothing to compare and the gap is
// taken as its period.
func reachesBack(prev uint64, points []point) bool {
	if len(points) < 2 {
		return true
	}
	var longest uint64
	for i := 1; i < len(points); i++ {
		longest = max(longest, points[i].ts-points[i-1].ts)
	}
	return points[0].ts-prev <= 2*longest
}

// newWindow places the per-process entries in the device's periods. Entries
// outside the periods are left to the read they belong to: older ones were
// counted before, newer ones (taken between the two calls) come next time.
// Several entries for one PID in one period describe the same time: the
// largest is kept rather than adding them up.
func newWindow(periods []period, entries []nvml.ProcessUtilizationSample, buffered bool) window {
	w := window{buffered: buffered}
	if entries != nil {
		w.procs = []procWindow{}
	}
	if len(periods) == 0 {
		return w
	}
	w.end = periods[len(periods)-1].end
	var busy uint64
	for _, p := range periods {
		w.length += p.length
		busy += p.percent * p.length
	}
	if w.length == 0 {
		return w
	}
	whole := 100 * float64(w.length)
	w.device = float64(busy) / whole
	if entries == nil {
		return w
	}
	// Each PID with entries gets a row of peaks, one per period, in one
	// flat slice: a map keyed by PID and period was most of a scrape's CPU
	// and allocations on a busy node. Peaks are percents, so a byte holds
	// each.
	n := len(periods)
	sc := scratches.Get().(*windowScratch)
	defer scratches.Put(sc)
	clear(sc.rows)
	pids, peaks, newest := sc.pids[:0], sc.peaks[:0], sc.newest[:0]
	first := periods[0].end - periods[0].length
	k, row := 0, 0
	for _, e := range entries {
		if e.TimeStamp <= first || e.TimeStamp > w.end || !plausible(e) {
			continue
		}
		// Entries come period by period, or process by process in time
		// order: the previous entry's period, or the next, is most often
		// this one's, which saves the search.
		switch {
		case inPeriod(periods, k, e.TimeStamp):
		case k+1 < n && inPeriod(periods, k+1, e.TimeStamp):
			k++
		default:
			k = sort.Search(n, func(i int) bool { return periods[i].end >= e.TimeStamp })
		}
		// Likewise the PID is most often the previous entry's (entries
		// process by process) or the one placed after it (period by
		// period, processes in the same order each time).
		switch {
		case row < len(pids) && pids[row] == e.Pid:
		case row+1 < len(pids) && pids[row+1] == e.Pid:
			row++
		default:
			var ok bool
			if row, ok = sc.rows[e.Pid]; !ok {
				row = len(pids)
				sc.rows[e.Pid] = row
				pids = append(pids, e.Pid)
				peaks = append(peaks, make([]peak, n)...)
				newest = append(newest, k)
			}
		}
		if newest[row] != k {
			w.buffered = true
			newest[row] = max(newest[row], k)
		}
		p := &peaks[row*n+k]
		*p = max(*p, peak(e.SmUtil))
	}
	sc.pids, sc.peaks, sc.newest = pids, peaks, newest
	w.procs = make([]procWindow, 0, len(pids))
	for row, pid := range pids {
		if !w.buffered {
			w.procs = append(w.procs, procWindow{pid: pid, sm: float64(peaks[row*n+newest[row]]) / 100})
			continue
		}
		var sm uint64
		for k, p := range peaks[row*n : (row+1)*n] {
			sm += uint64(p) * periods[k].length
		}
		w.procs = append(w.procs, procWindow{pid: pid, sm: float64(sm) / whole})
	}
	slices.SortFunc(w.procs, func(a, b procWindow) int { return cmp.Compare(a.pid, b.pid) })
	return w
}

// plausible says an entry's values are percents, as nvml.h's
// nvmlProcessUtilizationSample_t gives them ("SM (3D/Compute) Util Value",
// nvmlUtilization_t's percent). Drivers have returned entries beside
// zombie processes with values such as 37100 (nvtop issue #110): such an
// entry says nothing of how busy anything was, and capped at 100 % it would
// bill a process, exited ones included, for the whole period.
func plausible(e nvml.ProcessUtilizationSample) bool {
	return e.SmUtil <= 100 && e.MemUtil <= 100 && e.EncUtil <= 100 && e.DecUtil <= 100
}

// inPeriod says whether the entry taken at ts (µs) falls in periods[k]:
// after the previous period's end, up to and including its own.
func inPeriod(periods []period, k int, ts uint64) bool {
	return ts <= periods[k].end && (k == 0 || ts > periods[k-1].end)
}

// windowScratch is newWindow's working space, kept between reads: rows of
// peaks for every PID with entries (a busy GPU has ~11,000 entries in a
// 15 s window) and the PIDs' rows.
type windowScratch struct {
	rows   map[uint32]int
	pids   []uint32
	peaks  []peak
	newest []int // the newest period each row has an entry in
}

var scratches = sync.Pool{New: func() any { return &windowScratch{rows: map[uint32]int{}} }}

// sampleValue decodes an nvmlValue_t union of the type NVML said it holds.
func sampleValue(typ nvml.ValueType, b [8]byte) (float64, bool) {
	u64 := binary.LittleEndian.Uint64(b[:])
	switch typ {
	case nvml.VALUE_TYPE_DOUBLE:
		return math.Float64frombits(u64), true
	case nvml.VALUE_TYPE_UNSIGNED_INT:
		return float64(uint32(u64)), true
	case nvml.VALUE_TYPE_UNSIGNED_LONG, nvml.VALUE_TYPE_UNSIGNED_LONG_LONG:
		return float64(u64), true
	case nvml.VALUE_TYPE_SIGNED_LONG_LONG:
		return float64(int64(u64)), true
	case nvml.VALUE_TYPE_SIGNED_INT:
		return float64(int32(uint32(u64))), true
	case nvml.VALUE_TYPE_UNSIGNED_SHORT:
		return float64(uint16(u64)), true
	}
	return 0, false
}
