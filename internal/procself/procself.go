// Package procself serves the exporter's own process_* metrics, the ones
// client_golang's process collector serves, at a fraction of its cost.
//
// client_golang's collector parses /proc/stat (every CPU's line) at each
// scrape for a start time that never changes, parses /proc/self/limits, and
// lists every open descriptor; measured in the running demo it was 8% of a
// scrape. It also serves process_network_{receive,transmit}_bytes_total from
// /proc/self/net/netstat, which counts the traffic of the whole network
// namespace: in a DaemonSet with hostNetwork, the node's. Those two are not
// served here, rather than served wrong.
package procself

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Collector serves process_cpu_seconds_total, process_resident_memory_bytes,
// process_virtual_memory_bytes, process_virtual_memory_max_bytes,
// process_max_fds, process_open_fds and process_start_time_seconds, with
// client_golang's names and help.
type Collector struct {
	procRoot string // /proc, or a fixture tree in tests
	pageSize uint64
	// start is the process start time, read once: it cannot change.
	start    float64
	startErr error

	cpu, rss, vsize, maxVsize, maxFDs, openFDs, startTime *prometheus.Desc
}

// New reads the start time of the process and returns its collector.
func New() *Collector {
	return newCollector("/proc", uint64(os.Getpagesize()))
}

func newCollector(procRoot string, pageSize uint64) *Collector {
	c := &Collector{
		procRoot:  procRoot,
		pageSize:  pageSize,
		cpu:       prometheus.NewDesc("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.", nil, nil),
		rss:       prometheus.NewDesc("process_resident_memory_bytes", "Resident memory size in bytes.", nil, nil),
		vsize:     prometheus.NewDesc("process_virtual_memory_bytes", "Virtual memory size in bytes.", nil, nil),
		maxVsize:  prometheus.NewDesc("process_virtual_memory_max_bytes", "Maximum amount of virtual memory available in bytes.", nil, nil),
		maxFDs:    prometheus.NewDesc("process_max_fds", "Maximum number of open file descriptors.", nil, nil),
		openFDs:   prometheus.NewDesc("process_open_fds", "Number of open file descriptors.", nil, nil),
		startTime: prometheus.NewDesc("process_start_time_seconds", "Start time of the process since unix epoch in seconds.", nil, nil),
	}
	c.start, c.startErr = startTime(procRoot)
	return c
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.cpu, c.rss, c.vsize, c.maxVsize, c.maxFDs, c.openFDs, c.startTime} {
		ch <- d
	}
}

// Collect implements prometheus.Collector. A reading that fails is left out
// and reported as an invalid metric, which the handler logs.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err == nil {
		ch <- prometheus.MustNewConstMetric(c.cpu, prometheus.CounterValue, seconds(ru.Utime)+seconds(ru.Stime))
	} else {
		ch <- prometheus.NewInvalidMetric(c.cpu, fmt.Errorf("getrusage: %w", err))
	}

	if statm, err := os.ReadFile(filepath.Join(c.procRoot, "self", "statm")); err != nil {
		ch <- prometheus.NewInvalidMetric(c.rss, err)
	} else if size, resident, err := parseStatm(statm); err != nil {
		ch <- prometheus.NewInvalidMetric(c.rss, err)
	} else {
		ch <- prometheus.MustNewConstMetric(c.vsize, prometheus.GaugeValue, float64(size*c.pageSize))
		ch <- prometheus.MustNewConstMetric(c.rss, prometheus.GaugeValue, float64(resident*c.pageSize))
	}

	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_AS, &lim); err == nil {
		ch <- prometheus.MustNewConstMetric(c.maxVsize, prometheus.GaugeValue, float64(lim.Cur))
	}
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil {
		ch <- prometheus.MustNewConstMetric(c.maxFDs, prometheus.GaugeValue, float64(lim.Cur))
	}

	if n, err := openFDs(filepath.Join(c.procRoot, "self", "fd")); err == nil {
		ch <- prometheus.MustNewConstMetric(c.openFDs, prometheus.GaugeValue, float64(n))
	} else {
		ch <- prometheus.NewInvalidMetric(c.openFDs, err)
	}

	if c.startErr == nil {
		ch <- prometheus.MustNewConstMetric(c.startTime, prometheus.GaugeValue, c.start)
	} else {
		ch <- prometheus.NewInvalidMetric(c.startTime, c.startErr)
	}
}

func seconds(tv syscall.Timeval) float64 { return float64(tv.Sec) + float64(tv.Usec)/1e6 }

// parseStatm reads the first two fields of /proc/<pid>/statm, proc(5):
// "size (1) total program size (same as VmSize in /proc/pid/status)",
// "resident (2) resident set size (inaccurate; same as VmRSS in
// /proc/pid/status)", both "measured in pages".
func parseStatm(b []byte) (size, resident uint64, err error) {
	fields := bytes.Fields(b)
	if len(fields) < 2 {
		return 0, 0, fmt.Errorf("statm: %d fields, want at least 2", len(fields))
	}
	if size, err = strconv.ParseUint(string(fields[0]), 10, 64); err != nil {
		return 0, 0, fmt.Errorf("statm size: %w", err)
	}
	if resident, err = strconv.ParseUint(string(fields[1]), 10, 64); err != nil {
		return 0, 0, fmt.Errorf("statm resident: %w", err)
	}
	return size, resident, nil
}

// openFDs counts the process's open descriptors. Since Linux 6.2 a stat of
// /proc/<pid>/fd gives their number as its size (fs/proc/fd.c,
// proc_fd_getattr: "stat->size = proc_readfd_count(inode)"); before, the size
// is 0 and the directory is listed. A process has at least the descriptor
// the listing itself opens, so 0 always means an older kernel.
func openFDs(dir string) (int, error) {
	if st, err := os.Stat(dir); err == nil && st.Size() > 0 {
		return int(st.Size()), nil
	}
	n, err := countEntries(dir)
	// The listing's own descriptor is among those listed.
	return n - 1, err
}

func countEntries(dir string) (int, error) {
	f, err := os.Open(dir)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n := 0
	for {
		names, err := f.Readdirnames(1024)
		n += len(names)
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return 0, err
		}
	}
}

// userHZ is the unit of the clock-tick fields of /proc files: proc(5),
// "(divide by sysconf(_SC_CLK_TCK))", which is USER_HZ, 100 on every
// architecture Linux supports that this exporter builds for.
const userHZ = 100

// startTime is when the process started, in seconds since the epoch: boot
// time (/proc/stat "btime", proc(5): "boot time, in seconds since the Epoch")
// plus field 22 of /proc/self/stat, "starttime: The time the process started
// after system boot ... expressed in clock ticks".
func startTime(procRoot string) (float64, error) {
	stat, err := os.ReadFile(filepath.Join(procRoot, "self", "stat"))
	if err != nil {
		return 0, err
	}
	ticks, err := StatStartTicks(stat)
	if err != nil {
		return 0, err
	}
	system, err := os.ReadFile(filepath.Join(procRoot, "stat"))
	if err != nil {
		return 0, err
	}
	btime, err := bootTime(system)
	if err != nil {
		return 0, err
	}
	return float64(btime) + float64(ticks)/userHZ, nil
}

// StatStartTicks reads field 22 of a /proc/<pid>/stat line, the ticks after
// boot at which the process started: with the PID, what tells one process
// from a later one given the same PID. The command name (field 2) is in
// parentheses and may hold blanks and parentheses itself, so the fields are
// counted from its last ')'.
func StatStartTicks(stat []byte) (uint64, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("stat: no command name")
	}
	// Fields 3, 4, … follow, one blank apart; walked rather than split, as
	// the attribution reads many processes' stat at every scrape.
	const starttime = 22
	rest, field := stat[i+1:], 2
	for {
		rest = bytes.TrimLeft(rest, " \t\n")
		if len(rest) == 0 {
			return 0, fmt.Errorf("stat: %d fields after the command name, want at least %d", field-2, starttime-2)
		}
		end := bytes.IndexAny(rest, " \t\n")
		if end < 0 {
			end = len(rest)
		}
		if field++; field == starttime {
			ticks, err := strconv.ParseUint(string(rest[:end]), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("stat starttime: %w", err)
			}
			return ticks, nil
		}
		rest = rest[end:]
	}
}

// BootTime is when the host booted, from the btime line of procRoot/stat.
func BootTime(procRoot string) (time.Time, error) {
	stat, err := os.ReadFile(filepath.Join(procRoot, "stat"))
	if err != nil {
		return time.Time{}, err
	}
	btime, err := bootTime(stat)
	if err != nil {
		return time.Time{}, err
	}
	return time.Unix(int64(btime), 0), nil
}

// bootTime reads the btime line of /proc/stat.
func bootTime(stat []byte) (uint64, error) {
	for line := range bytes.SplitSeq(stat, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("btime ")); ok {
			t, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("stat btime: %w", err)
			}
			return t, nil
		}
	}
	return 0, errors.New("stat: no btime line")
}
