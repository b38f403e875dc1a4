package amd

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
)

// maxKFDProcesses bounds the listing of KFD processes, as maxProcEntries
// bounds the procfs walk.
const maxKFDProcesses = maxProcEntries

// KFDProcesses are the processes that opened /dev/kfd: ROCm's (HIP, HSA)
// way to the GPU. Their work runs on user-mode queues that the kernel
// does not schedule, so none of it is in a DRM client's drm-engine-*
// counters (amdgpu_top issue #49: "ROCm uses /dev/kfd, so no usage is
// recorded in fdinfo"), though the VRAM they allocate is in the client's
// memory. A KFD process is a directory named by its PID under
// /sys/class/kfd/kfd/proc, made when it first opens /dev/kfd
// (kfd_process.c, kfd_create_process: "A prior open of /dev/kfd could have
// already created the process", then kobject_init_and_add(process->kobj,
// …, procfs.kobj, "%d", lead_thread->pid)); rocm-smi lists the GPU's
// processes from the same directory (rocm_smi_kfd.cc, GetProcessInfo).
type KFDProcesses struct {
	// Known says which processes are KFD processes is known: false when
	// the KFD driver is loaded but its proc directory cannot be listed
	// (a kernel before it had one, or an error in Err). Then any process
	// may be one.
	Known bool
	PIDs  map[int]bool
	Err   error
}

// Holds says whether pid may have KFD work that no fdinfo counter shows.
func (k KFDProcesses) Holds(pid int) bool { return !k.Known || k.PIDs[pid] }

// KFDProcesses lists the KFD processes. Without /sys/class/kfd/kfd (amdkfd
// not loaded) there are none.
func (r Reader) KFDProcesses() KFDProcesses {
	kfd := filepath.Join(r.root(), "class", "kfd", "kfd")
	if _, err := os.Stat(kfd); errors.Is(err, os.ErrNotExist) {
		return KFDProcesses{Known: true}
	}
	names, err := readDirNames(filepath.Join(kfd, "proc"), maxKFDProcesses)
	switch {
	case absent(err):
		// A kernel before amdkfd had it: not an error to count.
		return KFDProcesses{}
	case err != nil:
		return KFDProcesses{Err: err}
	}
	pids := make(map[int]bool, len(names))
	for _, n := range names {
		if pid, err := strconv.Atoi(n); err == nil && pid > 0 {
			pids[pid] = true
		}
	}
	return KFDProcesses{Known: true, PIDs: pids}
}
