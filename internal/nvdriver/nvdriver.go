// Package nvdriver reads the NVIDIA kernel driver's own table of its GPUs:
// /proc/driver/nvidia/gpus/<pci bus id>/information, one file per GPU the
// driver has bound (NVIDIA driver README, "Using the /proc File System
// Interface"). The file holds one "Key: value" line per fact. The driver
// writes it from the PCI device and its resource manager
// (kernel-open/nvidia/nv-procfs.c, nv_procfs_read_gpu_info): "Model" (the
// board's name from its PCI IDs), "Bus Location" (seq_printf "%04x:%02x:
// %02x.%x"), "Device Minor" (the N of /dev/nvidiaN) and "GPU Excluded"
// are always printed; "GPU UUID" only when rm_get_gpu_uuid succeeds, so a
// GPU the resource manager cannot answer for may have none.
//
// NVML answers GPU_IS_LOST for every call about a GPU that has fallen off
// the bus, its UUID and PCI address included, while the driver still lists
// the GPU here: this table is what names such a GPU to an exporter that
// started after it was lost.
package nvdriver

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// GPU is one GPU of the driver's table.
type GPU struct {
	// BusID is the "Bus Location", lower case: "0000:3b:00.0".
	BusID string
	// Model is the board's name, "" when the driver could not tell
	// ("Unknown").
	Model string
	// UUID is "GPU-…", "" when the driver printed none.
	UUID string
	// Minor is the N of /dev/nvidiaN, -1 when not printed.
	Minor int
	// Excluded says the GPU is excluded from use (NVreg_ExcludedGpus): NVML
	// does not count it.
	Excluded bool
}

const (
	// maxFileBytes bounds one information file: the driver's is under a
	// kilobyte.
	maxFileBytes = 64 << 10
	// maxGPUs bounds the files read: no node has more GPUs.
	maxGPUs = 256
)

// GPUs reads the driver's table under the procfs mount point root. A table
// that is not there is an error wrapping fs.ErrNotExist; a GPU whose file
// cannot be read or names no bus location is an error too, since a table
// with a GPU left out cannot tell which GPU is which.
func GPUs(root string) ([]GPU, error) {
	dir := filepath.Join(root, "driver", "nvidia", "gpus")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	if len(entries) > maxGPUs {
		return nil, fmt.Errorf("%s: more than %d GPUs", dir, maxGPUs)
	}
	gpus := make([]GPU, 0, len(entries))
	for _, e := range entries {
		path := filepath.Join(dir, e.Name(), "information")
		b, err := readBounded(path)
		if err != nil {
			return nil, err
		}
		g := Parse(b)
		if g.BusID == "" {
			return nil, fmt.Errorf("%s: no Bus Location", path)
		}
		gpus = append(gpus, g)
	}
	return gpus, nil
}

// Parse reads one information file. Lines it does not know are skipped.
func Parse(b []byte) GPU {
	g := GPU{Minor: -1}
	for line := range strings.SplitSeq(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		switch strings.TrimSpace(k) {
		case "Model":
			if v != "Unknown" {
				g.Model = v
			}
		case "GPU UUID":
			if strings.HasPrefix(v, "GPU-") {
				g.UUID = v
			}
		case "Bus Location":
			g.BusID = strings.ToLower(v)
		case "Device Minor":
			if n, err := strconv.Atoi(v); err == nil && n >= 0 {
				g.Minor = n
			}
		case "GPU Excluded":
			g.Excluded = v == "Yes"
		}
	}
	return g
}

var errTooLarge = errors.New("larger than the driver writes")

func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(b) > maxFileBytes {
		return nil, fmt.Errorf("%s: %w (%d bytes)", path, errTooLarge, maxFileBytes)
	}
	return b, nil
}
