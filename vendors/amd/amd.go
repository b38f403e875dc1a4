// Package amd reads AMD Instinct GPUs from the amdgpu driver's sysfs files,
// its binary gpu_metrics table and the DRM fdinfo of processes, and returns
// plain Go values. No ROCm library is needed.
//
// Every file may be absent on some model or kernel: ENOENT, EOPNOTSUPP and
// ENODATA leave one reading unset (the exporter then omits one series, never
// writes zero). EACCES leaves it unset too but is recorded in Errors, since a
// mount or permission is wrong. ENODEV marks the whole device down; EIO,
// one firmware message that failed on a GPU still present, is recorded for
// its file alone. An empty value is the driver's "no value" and leaves the
// reading unset.
// A file that cannot be parsed, or is larger than its documented format
// allows, is recorded in Errors with the file's name so that it can be
// counted, never silently dropped.
package amd

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync"
	"syscall"

	"github.com/xpu-exporter/xpu_exporter/vendors/reading"
)

// Opt is a reading the device may not have given (reading.Opt).
type Opt[T any] = reading.Opt[T]

// ReadError is a file that existed but could not be read or parsed.
type ReadError struct {
	// File is the path relative to the device directory (for example
	// "hwmon/hwmon3/power1_average") or to the sysfs root.
	File string
	Err  error
}

func (e ReadError) Error() string { return e.File + ": " + e.Err.Error() }

func (e ReadError) Unwrap() error { return e.Err }

// ErrTooLarge is matched by the error of a file longer than its format allows.
var ErrTooLarge = errors.New("file larger than its format allows")

// ErrMalformed is matched by the error of a file whose content does not
// have its documented format.
var ErrMalformed = errors.New("malformed value")

// Size limits. A sysfs attribute is at most one page (Documentation/
// filesystems/sysfs.rst: "sysfs allocates a buffer of size (PAGE_SIZE)");
// value files are a few bytes, pp_dpm_* tables and gpu_metrics stay well
// within 4 KiB on every model (gpu_metrics v1.8, the largest, is 3872
// bytes).
const (
	maxValueSize = 4 << 10
	maxTableSize = 16 << 10
)

// readFile reads path with a single read(2) into a buffer of limit+1 bytes,
// as node_exporter's hwmon collector does (sysReadFile): some drivers
// return EAGAIN on a second read, where os.ReadFile would poll forever.
// sysfs attributes produce their whole content on the first read.
//
// The buffer is reused and only what was read is copied out, for the
// callers that keep the content; a device's reading is parsed straight from
// its read's buffer (readInto).
func readFile(path string, limit int) ([]byte, error) {
	var buf []byte
	switch {
	case limit <= maxValueSize:
		bp := valueBufs.Get().(*[]byte)
		defer valueBufs.Put(bp)
		buf = *bp
	case limit <= maxTableSize:
		bp := tableBufs.Get().(*[]byte)
		defer tableBufs.Put(bp)
		buf = *bp
	default:
		buf = make([]byte, limit+1)
	}
	b, err := readInto(path, limit, buf)
	if err != nil {
		return nil, err
	}
	return bytes.Clone(b), nil
}

// readInto is readFile into buf (len(buf) > limit), whose content it
// returns.
func readInto(path string, limit int, buf []byte) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readLimited(f.Read, limit, buf)
}

// readLimited makes the single read of readFile with read into buf
// (len(buf) > limit) and returns what it read.
func readLimited(read func([]byte) (int, error), limit int, buf []byte) ([]byte, error) {
	n, err := read(buf[:limit+1])
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	if n > limit {
		return nil, fmt.Errorf("%w: more than %d bytes", ErrTooLarge, limit)
	}
	return buf[:n], nil
}

// Buffers for readFile and ReadDevice, one size per limit class: value
// files up to maxValueSize, tables up to maxTableSize.
var (
	valueBufs = sync.Pool{New: func() any { b := make([]byte, maxValueSize+1); return &b }}
	tableBufs = sync.Pool{New: func() any { b := make([]byte, maxTableSize+1); return &b }}
)

// absent reports whether err means the reading does not exist on this
// device, kernel or firmware: the file is missing, or the driver says the
// attribute is not supported (amdgpu returns -EOPNOTSUPP or -ENODATA from a
// visible attribute whose sensor the firmware lacks).
func absent(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.EOPNOTSUPP) ||
		errors.Is(err, syscall.ENODATA)
}

// gone reports whether err means the device itself stopped answering: the
// attributes of a GPU that was unplugged or fell off the bus answer ENODEV
// (drm_dev_enter fails; kernfs answers it for a removed node). EIO is not
// gone: amdgpu returns it for one SMU message whose "command completed
// successfully, but the command status was failure" (smu_cmn.c,
// __smu_cmn_reg2errno, SMU_RESP_CMD_FAIL), on a GPU whose other readings
// still answer. A firmware that hangs is bounded by the scrape deadline.
func gone(err error) bool {
	return errors.Is(err, syscall.ENODEV)
}
