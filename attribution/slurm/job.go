// Package slurm reads job metadata from Slurm's scontrol: who owns a job
// (user, account, partition, QoS), where it runs and which GPUs it holds on
// each node, and which processes of this node belong to which job.
//
// scontrol is used rather than slurmrestd because it is on every compute node
// and needs no token; its text output exists in every Slurm version, its
// JSON output (data_parser) from 23.02 on, and the parsers here read both.
package slurm

import (
	"errors"
	"slices"
)

// ErrJobNotFound is returned when Slurm does not know the job, typically
// because it ended longer ago than MinJobAge.
var ErrJobNotFound = errors.New("slurm job not found")

// Job is what the exporter labels a job's devices with.
type Job struct {
	// ID is the numeric job ID; for an array task, the task's own ID.
	ID string
	// ArrayJobID is the ID of the array an array task belongs to, and
	// HetJobID that of the heterogeneous job a component belongs to (the
	// leader's, offset 0); empty for other jobs. squeue and sacct name a
	// task and a component by them ("800_5", "700+1"), and a whole array or
	// heterogeneous job is summed by them.
	ArrayJobID, HetJobID string
	Name                 string
	User                 string
	Account              string
	Partition            string
	QOS                  string
	// State is the base job state, such as RUNNING or COMPLETING. In a
	// cached Job it is the state when it was fetched.
	State string
	// NodeList is the job's nodes as Slurm writes them, in host list form
	// ("gpu-node[07-08]"); empty for a job without nodes.
	NodeList string
	// GPUs maps a node name to the indices of the GPUs the job holds there,
	// sorted. These are Slurm GRES indices, positions in the node's list of
	// GPU devices, not NVML indices: the two agree when the devices are
	// listed in /dev/nvidia<N> order (File=/dev/nvidia[0-7]). A node whose
	// allocation has no indices (no GPUs, or a format not understood) is
	// absent.
	GPUs map[string][]int
	// Shared maps a node name to the GPUs the job holds a part of there
	// through a shared GRES (gres/shard, gres/mps), sorted by index: GRES
	// indices like GPUs', none of them in GPUs.
	Shared map[string][]SharedGPU
	// Unplaced holds the nodes where the job holds GPUs Slurm gives by a
	// count alone ("gpu(CNT:1)": gres.conf without File=), which ones not
	// known.
	Unplaced map[string]bool
}

// NamesNode says whether the job's node list names node; true where the
// list cannot be read, so that only a list naming other nodes says no.
func (j Job) NamesNode(node string) bool {
	hosts, err := expandHostlist(j.NodeList, maxHosts)
	if err != nil || len(hosts) == 0 {
		return true
	}
	return slices.Contains(hosts, node)
}

// OneNode is the node of a job whose node list names one node alone.
func (j Job) OneNode() (string, bool) {
	hosts, err := expandHostlist(j.NodeList, 2)
	if err != nil || len(hosts) != 1 {
		return "", false
	}
	return hosts[0], true
}

// SharedGPU is a GPU a job holds a part of through a shared GRES.
type SharedGPU struct {
	Index int
	// Alloc is the job's count of the shared GRES on the GPU and Avail the
	// GPU's (2 and 4 for 2 of its 4 shards); both 0 where Slurm printed
	// only the GPU's index, as before 23.11.2.
	Alloc, Avail int
}

// Share is the part of the GPU the job holds, Alloc/Avail; 0 when unknown.
func (g SharedGPU) Share() float64 {
	if g.Avail == 0 {
		return 0
	}
	return float64(g.Alloc) / float64(g.Avail)
}

// clone returns a copy that shares nothing with j, so that the cache cannot
// be modified through a returned Job.
func (j Job) clone() Job {
	if j.GPUs != nil {
		gpus := make(map[string][]int, len(j.GPUs))
		for node, idx := range j.GPUs {
			gpus[node] = slices.Clone(idx)
		}
		j.GPUs = gpus
	}
	if j.Shared != nil {
		shared := make(map[string][]SharedGPU, len(j.Shared))
		for node, gpus := range j.Shared {
			shared[node] = slices.Clone(gpus)
		}
		j.Shared = shared
	}
	return j
}
