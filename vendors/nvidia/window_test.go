package nvidia

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

func utilSample(ts uint64, percent uint32) nvml.Sample {
	s := nvml.Sample{TimeStamp: ts}
	binary.LittleEndian.PutUint64(s.SampleValue[:], uint64(percent))
	return s
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// Periods are rebuilt from device samples in any order, start after the
// previous read, and drop the first sample when its start is unknown.
func TestDevicePeriods(t *testing.T) {
	// Samples of a 1 s driver period (µs), out of order as NVML may return them.
	samples := []nvml.Sample{utilSample(3_000_000, 30), utilSample(1_000_000, 10), utilSample(2_000_000, 20), utilSample(2_000_000, 20)}
	for _, tc := range []struct {
		name string
		prev uint64
		want []period
	}{
		// First read: the 1 s sample's period is taken to be as long as the
		// next one, 1 s, so it starts at 0 s: three periods.
		{"first read", 0, []period{{1_000_000, 1_000_000, 10}, {2_000_000, 1_000_000, 20}, {3_000_000, 1_000_000, 30}}},
		// After a read at 0.5 s: the first period runs 0.5 s → 1 s.
		{"after a read", 500_000, []period{{1_000_000, 500_000, 10}, {2_000_000, 1_000_000, 20}, {3_000_000, 1_000_000, 30}}},
		// The previous read at 1 s: that sample was counted then.
		{"sample already read", 1_000_000, []period{{2_000_000, 1_000_000, 20}, {3_000_000, 1_000_000, 30}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := devicePeriods(tc.prev, nvml.VALUE_TYPE_UNSIGNED_INT, samples)
			if len(got) != len(tc.want) {
				t.Fatalf("periods %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("period %d = %+v, want %+v", i, got[i], tc.want[i])
				}
			}
		})
	}

	// The driver's buffer no longer reaches back to a read 60 s ago: the
	// longest gap between samples is 1 s, so a 58 s gap before the oldest is
	// a stretch the buffer dropped, not one period. The window is every
	// period the buffer holds, the oldest 1 s long like the next (found by
	// probing: it was left out, the mean of 5 buffered periods taken over
	// the newest 4).
	got := devicePeriods(1, nvml.VALUE_TYPE_UNSIGNED_INT, []nvml.Sample{utilSample(59_000_001, 50), utilSample(60_000_001, 70), utilSample(61_000_001, 90)})
	if want := []period{{59_000_001, 1_000_000, 50}, {60_000_001, 1_000_000, 70}, {61_000_001, 1_000_000, 90}}; !slices.Equal(got, want) {
		t.Errorf("after a gap: %+v, want %+v", got, want)
	}
	// A single sample on the first read: its period's length is unknown.
	if got := devicePeriods(0, nvml.VALUE_TYPE_UNSIGNED_INT, []nvml.Sample{utilSample(61_000_001, 90)}); len(got) != 0 {
		t.Errorf("one sample on the first read: %+v, want no period", got)
	}
	if devicePeriods(0, nvml.ValueType(99), samples) != nil {
		t.Error("a value type NVML did not define must give no periods, not a guess")
	}
}

func entry(pid uint32, ts uint64, sm uint32) nvml.ProcessUtilizationSample {
	return nvml.ProcessUtilizationSample{Pid: pid, TimeStamp: ts, SmUtil: sm, MemUtil: sm / 2}
}

// The split of one window: device and process values over the same periods,
// each entry weighted by the length of the period it ends.
func TestWindowSplitByTime(t *testing.T) {
	// Four periods after a read at 1 s: (1,2], (2,3] and (3,4] seconds,
	// and a half one, (4, 4.5], to check that entries are weighted by their
	// own period's length.
	periods := []period{
		{end: 2_000_000, length: 1_000_000, percent: 90},
		{end: 3_000_000, length: 1_000_000, percent: 90},
		{end: 4_000_000, length: 1_000_000, percent: 30},
		{end: 4_500_000, length: 500_000, percent: 0},
	}
	entries := []nvml.ProcessUtilizationSample{
		entry(10, 3_000_000, 60), entry(10, 2_000_000, 60), // busy in two periods, idle in the last two
		entry(11, 2_000_000, 30), entry(11, 3_000_000, 30), entry(11, 4_000_000, 30),
		entry(11, 4_000_000, 10), // a second entry for the same PID and period: the same time, not more
		entry(12, 1_000_000, 99), // belongs to the previous window
		entry(13, 5_000_000, 99), // taken after the newest device sample: next window
	}
	w := newWindow(periods, entries, false)
	// Window: 1 + 1 + 1 + 0.5 = 3.5 s.
	if w.length != 3_500_000 || w.end != 4_500_000 {
		t.Fatalf("window %d µs ending %d, want 3.5 s ending at 4.5 s", w.length, w.end)
	}
	// Device: (0.9·1 + 0.9·1 + 0.3·1 + 0·0.5) / 3.5 = 2.1 / 3.5 = 0.6.
	if !near(w.device, 0.6) {
		t.Errorf("device %v, want 2.1/3.5 = 0.6", w.device)
	}
	// PID 10: 0.6·1 + 0.6·1 = 1.2 busy seconds of 3.5 → 0.342857…; the old
	// average of its entries (0.6) ignored the 1.5 s it was idle.
	if got := w.proc(10).sm; !near(got, 1.2/3.5) {
		t.Errorf("pid 10 sm %v, want 1.2/3.5", got)
	}
	// PID 11: 0.3 in each of three 1 s periods (the duplicate adds nothing)
	// → 0.9 / 3.5.
	if got := w.proc(11); !near(got.sm, 0.9/3.5) {
		t.Errorf("pid 11 %+v, want sm 0.9/3.5", got)
	}
	for _, pid := range []uint32{12, 13} {
		if slices.ContainsFunc(w.procs, func(p procWindow) bool { return p.pid == pid }) {
			t.Errorf("pid %d's entry is outside the window but was counted", pid)
		}
	}
}

// NVML documents no order for the entries: every order gives the same
// window. The entries of TestWindowSplitByTime and a third process, in each
// order here, must give the hand-worked values.
func TestWindowAnyEntryOrder(t *testing.T) {
	periods := []period{
		{end: 2_000_000, length: 1_000_000, percent: 90},
		{end: 3_000_000, length: 1_000_000, percent: 90},
		{end: 4_000_000, length: 1_000_000, percent: 30},
		{end: 4_500_000, length: 500_000, percent: 0},
	}
	byProcess := []nvml.ProcessUtilizationSample{
		entry(10, 2_000_000, 60), entry(10, 3_000_000, 60),
		entry(11, 2_000_000, 30), entry(11, 3_000_000, 30), entry(11, 4_000_000, 30), entry(11, 4_000_000, 10),
		entry(12, 1_000_000, 99), entry(13, 5_000_000, 99),
		entry(14, 3_000_000, 20), entry(14, 4_500_000, 40),
	}
	byPeriod := []nvml.ProcessUtilizationSample{
		entry(12, 1_000_000, 99),
		entry(10, 2_000_000, 60), entry(11, 2_000_000, 30),
		entry(10, 3_000_000, 60), entry(11, 3_000_000, 30), entry(14, 3_000_000, 20),
		entry(11, 4_000_000, 10), entry(11, 4_000_000, 30),
		entry(14, 4_500_000, 40),
		entry(13, 5_000_000, 99),
	}
	reversed := slices.Clone(byPeriod)
	slices.Reverse(reversed)
	orders := map[string][]nvml.ProcessUtilizationSample{
		"by process": byProcess,
		"by period":  byPeriod,
		"reversed":   reversed,
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 20 {
		shuffled := slices.Clone(byProcess)
		rng.Shuffle(len(shuffled), func(a, b int) { shuffled[a], shuffled[b] = shuffled[b], shuffled[a] })
		orders[fmt.Sprintf("shuffle %d", i)] = shuffled
	}
	for name, entries := range orders {
		w := newWindow(periods, entries, false)
		// As in TestWindowSplitByTime: PID 10 1.2/3.5, PID 11 0.9/3.5,
		// PIDs 12 and 13 outside the window. PID 14:
		// 0.2·1 s + 0.4·0.5 s = 0.4 busy seconds of 3.5.
		if len(w.procs) != 3 || !near(w.proc(10).sm, 1.2/3.5) || !near(w.proc(11).sm, 0.9/3.5) ||
			!near(w.proc(14).sm, 0.4/3.5) {
			t.Errorf("%s: %+v", name, w.procs)
		}
	}
}

// A process busy 14 s of a 15 s scrape interval and idle at the scrape keeps
// its 14 s: NVML's entries for its busy periods are still in the window.
func TestWindowBusyEarlierIdleNow(t *testing.T) {
	var periods []period
	var entries []nvml.ProcessUtilizationSample
	for k := uint64(1); k <= 15; k++ {
		end := k * 1_000_000
		percent := uint64(80 + 10) // pid 1 at 80% plus pid 2 at 10%
		if k == 15 {
			percent = 10 // pid 1 idle in the last period: no entry for it
		} else {
			entries = append(entries, entry(1, end, 80))
		}
		entries = append(entries, entry(2, end, 10))
		periods = append(periods, period{end: end, length: 1_000_000, percent: percent})
	}
	w := newWindow(periods, entries, false)
	// pid 1: 14 periods × 0.8 / 15 = 11.2/15 = 0.74666…
	if got := w.proc(1).sm; !near(got, 11.2/15) {
		t.Errorf("pid 1 sm %v, want 11.2/15", got)
	}
	// device: (14 × 0.9 + 0.1) / 15 = 12.7/15
	if !near(w.device, 12.7/15) {
		t.Errorf("device %v, want 12.7/15", w.device)
	}
}

// BenchmarkWindow places one busy H100's 15 s of entries: 125 processes,
// one entry each per 1/6 s period (90 periods), as BenchmarkScrapeShared's
// simulated NVML returns them, period by period.
func BenchmarkWindow(b *testing.B) {
	const procs, periods, step = 125, 90, 166_667
	var ps []period
	for k := range periods {
		ps = append(ps, period{end: uint64(k+1) * step, length: step, percent: 90})
	}
	var entries []nvml.ProcessUtilizationSample
	for k := range periods {
		for p := range procs {
			entries = append(entries, entry(uint32(10000+p), uint64(k+1)*step, 1))
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		if w := newWindow(ps, entries, false); len(w.procs) != procs {
			b.Fatalf("%d processes, want %d", len(w.procs), procs)
		}
	}
}

// Entries whose values are no percents (as drivers have returned beside
// zombie processes: nvtop issue #110, "%SM=37100") and zero-filled padding
// are left out: capped at 100 % the first would bill a whole period.
func TestWindowImpossibleEntries(t *testing.T) {
	periods := []period{{2_000_000, 1_000_000, 50}, {3_000_000, 1_000_000, 50}}
	garbage := entry(99, 3_000_000, 0)
	garbage.SmUtil, garbage.EncUtil = 37100, 50583
	alsoGarbage := entry(5, 2_000_000, 40)
	alsoGarbage.DecUtil = 101 // one impossible value spoils the entry
	w := newWindow(periods, []nvml.ProcessUtilizationSample{
		entry(5, 3_000_000, 50), alsoGarbage, garbage, {}, {}, // PID 0 at 0 µs: padding
	}, true)
	// A driver known to keep entries per period. PID 5: 50 % in the
	// second period, its first entry dropped: 0.5 of 2 s → 0.25. PID 99 and
	// the padding: no window at all.
	if len(w.procs) != 1 || w.procs[0].pid != 5 || !near(w.procs[0].sm, 0.25) {
		t.Errorf("procs %+v, want PID 5 alone at 0.25", w.procs)
	}
}

// A driver that gives one entry per process (nvml.h's "the last sample
// period"; or each process's latest, go-nvml issue #51) is told apart from
// one that keeps entries per period by a PID with entries in two periods.
// Until then a process's value is its newest entry's, not a mean that
// takes the periods the driver said nothing of as idle (found by probing:
// 0.1 in the newest of four periods was served as 0.025).
func TestWindowOneEntryPerProcess(t *testing.T) {
	// Four 1 s periods ending at 1 … 4 s.
	periods := []period{{1_000_000, 1_000_000, 80}, {2_000_000, 1_000_000, 80}, {3_000_000, 1_000_000, 30}, {4_000_000, 1_000_000, 30}}
	for _, tc := range []struct {
		name     string
		entries  []nvml.ProcessUtilizationSample
		known    bool // the driver was seen to keep entries per period
		buffered bool
		want     map[uint32]float64
	}{
		// The newest period's entries only: each process's value is that
		// period's, 0.1 and 0.2.
		{"last period", []nvml.ProcessUtilizationSample{entry(100, 4_000_000, 10), entry(200, 4_000_000, 20)}, false, false,
			map[uint32]float64{100: 0.1, 200: 0.2}},
		// Each process's latest, in different periods: 0.6 and 0.2.
		{"latest per process", []nvml.ProcessUtilizationSample{entry(100, 2_000_000, 60), entry(200, 4_000_000, 20)}, false, false,
			map[uint32]float64{100: 0.6, 200: 0.2}},
		// The same from a driver known to keep entries per period: PID 100
		// was busy in one period of four, 0.6 / 4 = 0.15; PID 200 0.2 / 4 =
		// 0.05.
		{"latest per process, driver buffered", []nvml.ProcessUtilizationSample{entry(100, 2_000_000, 60), entry(200, 4_000_000, 20)}, true, true,
			map[uint32]float64{100: 0.15, 200: 0.05}},
		// PID 100 in two periods shows the buffer: means over the window,
		// (0.6 + 0.1) / 4 = 0.175 and 0.2 / 4 = 0.05.
		{"two periods of one PID", []nvml.ProcessUtilizationSample{entry(100, 2_000_000, 60), entry(100, 4_000_000, 10), entry(200, 4_000_000, 20)}, false, true,
			map[uint32]float64{100: 0.175, 200: 0.05}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWindow(periods, tc.entries, tc.known)
			if w.buffered != tc.buffered {
				t.Errorf("buffered %v, want %v", w.buffered, tc.buffered)
			}
			if len(w.procs) != len(tc.want) {
				t.Fatalf("procs %+v, want %v", w.procs, tc.want)
			}
			for pid, want := range tc.want {
				if got := w.proc(pid).sm; !near(got, want) {
					t.Errorf("PID %d: %v, want %v", pid, got, want)
				}
			}
		})
	}
}

// TestWindowDeviceWeightedByPeriodLength: the device's utilization is its
// busy time over the window, each sample weighted by the length of the
// period it ends, not the mean of the samples. The other window tests give
// the device periods of one length, or an idle short one, where the two
// agree.
func TestWindowDeviceWeightedByPeriodLength(t *testing.T) {
	for _, tc := range []struct {
		name    string
		periods []period
		want    float64
	}{{
		// (0.9 × 1 s + 0.3 × 0.5 s + 1.0 × 0.25 s) / 1.75 s = 1.3 / 1.75
		// = 0.742857…; the mean of the samples, (90 + 30 + 100) / 300 =
		// 0.7333…, is not it.
		name: "periods of three lengths",
		periods: []period{
			{end: 2_000_000, length: 1_000_000, percent: 90},
			{end: 2_500_000, length: 500_000, percent: 30},
			{end: 2_750_000, length: 250_000, percent: 100},
		},
		want: 1.3 / 1.75,
	}, {
		// From NVML's samples after a read at 0.5 s (TestDevicePeriods'
		// "after a read"): 40 % at 1 s, 80 % at 2 s, 0 % at 2.25 s give
		// periods of 0.5, 1 and 0.25 s: (0.4 × 0.5 + 0.8 × 1 + 0 × 0.25) /
		// 1.75 = 1.0 / 1.75 = 0.571428…; the samples' mean is 0.4.
		name:    "periods rebuilt from samples",
		periods: devicePeriods(500_000, nvml.VALUE_TYPE_UNSIGNED_INT, []nvml.Sample{utilSample(1_000_000, 40), utilSample(2_000_000, 80), utilSample(2_250_000, 0)}),
		want:    1.0 / 1.75,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWindow(tc.periods, nil, false)
			if w.length != 1_750_000 {
				t.Fatalf("window %d µs, want 1.75 s", w.length)
			}
			if !near(w.device, tc.want) {
				t.Errorf("device %v, want %v", w.device, tc.want)
			}
		})
	}
}
