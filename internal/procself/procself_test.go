package procself

import (
	"math"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// gather collects c in a pedantic registry: the families by name, and the
// error Gather reports.
func gather(t *testing.T, c prometheus.Collector) (map[string]*dto.MetricFamily, error) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	out := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out, err
}

// fixtureProc writes a procfs tree with the files the collector reads.
func fixtureProc(t *testing.T, stat, selfStat, statm string) string {
	t.Helper()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "self"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"stat": stat, "self/stat": selfStat, "self/statm": statm} {
		if err := os.WriteFile(filepath.Join(root, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// A command name with blanks and parentheses; starttime (field 22) is
// 12345 ticks.
const selfStat = "4242 (xpu (exp) orter) S 1 4242 4242 0 -1 4194560 3000 0 0 0 150 40 0 0 20 0 12 0 12345 1300000000 6000 18446744073709551615\n"

const procStat = "cpu  1 2 3 4 5 6 7 8 9 10\ncpu0 1 2 3 4 5 6 7 8 9 10\nintr 1\nctxt 2\nbtime 1700000000\nprocesses 3\n"

func TestStartTimeAndMemory(t *testing.T) {
	root := fixtureProc(t, procStat, selfStat, "329000 11264 2000 3000 0 40000 0\n")
	c := newCollector(root, 4096)
	if c.startErr != nil {
		t.Fatal(c.startErr)
	}
	// btime + starttime / USER_HZ = 1,700,000,000 + 12,345 / 100
	// = 1,700,000,123.45 s.
	if c.start != 1700000123.45 {
		t.Errorf("start = %f, want 1700000123.45", c.start)
	}
	// statm: 329,000 pages × 4,096 B = 1,347,584,000 B virtual;
	// 11,264 pages × 4,096 B = 46,137,344 B resident.
	// The fixture has no fd directory: that reading fails alone.
	mfs, _ := gather(t, c)
	for name, want := range map[string]float64{
		"process_resident_memory_bytes": 46137344,
		"process_virtual_memory_bytes":  1347584000,
		"process_start_time_seconds":    1700000123.45,
	} {
		if got := mfs[name].GetMetric()[0].GetGauge().GetValue(); got != want {
			t.Errorf("%s = %f, want %f", name, got, want)
		}
	}
}

func TestMalformedFiles(t *testing.T) {
	tests := []struct {
		name, stat, selfStat, statm string
		wantStartErr                bool
	}{
		{"no btime", "cpu 1\n", selfStat, "1 2\n", true},
		{"no command name", procStat, "4242 S 1\n", "1 2\n", true},
		{"short stat", procStat, "4242 (x) S 1 2 3\n", "1 2\n", true},
		{"statm of one field", procStat, selfStat, "1\n", false},
		{"statm not numbers", procStat, selfStat, "a b\n", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCollector(fixtureProc(t, tt.stat, tt.selfStat, tt.statm), 4096)
			if (c.startErr != nil) != tt.wantStartErr {
				t.Errorf("start error %v, want one: %v", c.startErr, tt.wantStartErr)
			}
			// Whatever is malformed, the rest is still collected and
			// the failure is an invalid metric, not a panic.
			mfs, err := gather(t, c)
			if err == nil {
				t.Error("Gather reported no error")
			}
			if mfs["process_cpu_seconds_total"] == nil || mfs["process_max_fds"] == nil {
				t.Errorf("families %v lack the readings that did not fail", mfs)
			}
		})
	}
}

// TestOpenFDs: the count moves by exactly the descriptors opened, through
// the stat of /proc/self/fd where the kernel gives it, and by listing.
func TestOpenFDs(t *testing.T) {
	before, err := openFDs("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var files []*os.File
	for range 3 {
		f, err := os.Open(os.DevNull)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	after, err := openFDs("/proc/self/fd")
	for _, f := range files {
		f.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	if after-before != 3 {
		t.Errorf("open fds %d then %d after opening 3", before, after)
	}
	listed, err := countEntries("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	// The listing counts its own descriptor.
	if listed-1 != before {
		t.Errorf("listing /proc/self/fd gives %d (one its own), stat gave %d", listed, before)
	}
}

func TestCountEntries(t *testing.T) {
	dir := t.TempDir()
	for i := range 1500 { // more than one Readdirnames batch
		if err := os.WriteFile(filepath.Join(dir, strconv.Itoa(i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := countEntries(dir); err != nil || n != 1500 {
		t.Errorf("countEntries = %d, %v; want 1500", n, err)
	}
}

// TestCollectsEveryFamilyHere: on this machine every family is served.
func TestCollectsEveryFamilyHere(t *testing.T) {
	mfs, err := gather(t, New())
	if err != nil {
		t.Fatal(err)
	}
	if len(mfs) != 7 {
		t.Errorf("%d families, want 7: %v", len(mfs), mfs)
	}
	if v := mfs["process_cpu_seconds_total"].GetMetric()[0].GetCounter().GetValue(); v <= 0 {
		t.Errorf("process_cpu_seconds_total = %f", v)
	}
}

// TestSeconds: process_cpu_seconds_total adds getrusage's user and system
// times, each seconds plus microseconds: 3 s 250,000 µs + 1 s 750,001 µs
// = 3.25 + 1.750001 = 5.000001 s.
func TestSeconds(t *testing.T) {
	got := seconds(syscall.Timeval{Sec: 3, Usec: 250000}) + seconds(syscall.Timeval{Sec: 1, Usec: 750001})
	if math.Abs(got-5.000001) > 1e-12 {
		t.Errorf("seconds = %.9f, want 5.000001", got)
	}
}

// TestStatStartTicks: field 22 is counted from the command name's last
// ')', whatever blanks and parentheses the name holds.
func TestStatStartTicks(t *testing.T) {
	// Fields 14 to 21: utime, stime, cutime, cstime, priority, nice,
	// num_threads, itrealvalue.
	const tail = " 0 0 0 0 20 0 1 0 "
	for _, tc := range []struct {
		name, stat string
		want       uint64
		err        bool
	}{
		{"plain", "4242 (python3) S 1 2 3 0 -1 4194560 0 0 0 0" + tail + "987654 1 2 3\n", 987654, false},
		{"name with blanks and parentheses", "4242 (a) (b c) S 1 2 3 0 -1 4194560 0 0 0 0" + tail + "12345\n", 12345, false},
		{"field 22 last, no newline", "4242 (x) S 1 2 3 0 -1 4194560 0 0 0 0" + tail + "7", 7, false},
		{"short", "4242 (x) S 1 2 3\n", 0, true},
		{"no name", "4242 x S 1\n", 0, true},
		{"not a number", "4242 (x) S 1 2 3 0 -1 4194560 0 0 0 0" + tail + "soon\n", 0, true},
	} {
		got, err := StatStartTicks([]byte(tc.stat))
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("%s: %d, %v; want %d, error %v", tc.name, got, err, tc.want, tc.err)
		}
	}
}

// TestBootTime: btime, "boot time, in seconds since the Epoch" (proc(5)):
// 1,700,000,000 s is 2023-11-14T22:13:20Z.
func TestBootTime(t *testing.T) {
	root := fixtureProc(t, procStat, "1 (x) S 0\n", "1 2\n")
	got, err := BootTime(root)
	if err != nil || !got.Equal(time.Date(2023, 11, 14, 22, 13, 20, 0, time.UTC)) {
		t.Errorf("BootTime = %v, %v; want 2023-11-14T22:13:20Z", got, err)
	}
	if _, err := BootTime(t.TempDir()); err == nil {
		t.Error("no /proc/stat: no error")
	}
}
