package slurm

import (
	"errors"
	"fmt"
	"iter"
	"slices"
	"strconv"
	"strings"
)

// Output from scontrol is trusted no more than any other input:
// "IDX:0-999999999", "n[0-99999999]" or a megabyte of repeated ranges must
// fail or be cut short, not allocate gigabytes.
const (
	// maxGPUIndex is far above any real node (the largest have 16 GPUs, or
	// 7 MIG instances on each of 8).
	maxGPUIndex = 1023
	// maxHosts bounds the host names expanded from one scontrol output:
	// above the node count of the largest Slurm clusters.
	maxHosts = 1 << 16
	// maxGPUEntries bounds the GPU indices kept from one scontrol output,
	// over all its nodes: 8 GPUs on each of 8192 nodes.
	maxGPUEntries = 1 << 16
	// maxSharedCount bounds a GPU's count of a shared GRES: far above the
	// 100 of MPS and any sensible number of shards.
	maxSharedCount = 999_999_999
)

var errTooMany = errors.New("expands to too many entries")

// budget is what remains of the bounds for one scontrol output. The parsers
// read the records of one job (several for array and heterogeneous jobs),
// far below the bounds; past them, node and GPU lists are dropped rather
// than guessed at.
type budget struct {
	hosts      int
	gpuEntries int
}

func newBudget() *budget { return &budget{hosts: maxHosts, gpuEntries: maxGPUEntries} }

// expand expands a host list within the budget. A list that does not parse
// uses the budget up: it may have expanded a great deal before failing, and
// the output that holds it is garbage.
func (b *budget) expand(hostlist string) ([]string, error) {
	hosts, err := expandHostlist(hostlist, b.hosts)
	if err != nil {
		b.hosts = 0
		return nil, err
	}
	b.hosts -= len(hosts)
	return hosts, nil
}

// addGPUs records the GPUs of one GRES allocation on each of nodes in
// job.GPUs and job.Shared, merging what is reported for the same node
// twice. An allocation that does not parse or does not fit the budget is
// left out.
func (b *budget) addGPUs(job *Job, nodes []string, gres string) {
	whole, shared, counted, err := parseGRES(gres)
	if err == nil && counted {
		if job.Unplaced == nil {
			job.Unplaced = map[string]bool{}
		}
		for _, node := range nodes {
			job.Unplaced[node] = true
		}
	}
	n := len(whole) + len(shared)
	if err != nil || n == 0 || len(nodes)*n > b.gpuEntries {
		return
	}
	b.gpuEntries -= len(nodes) * n
	for _, node := range nodes {
		if len(whole) > 0 {
			if job.GPUs == nil {
				job.GPUs = make(map[string][]int)
			}
			merged := append(job.GPUs[node], whole...)
			slices.Sort(merged)
			job.GPUs[node] = slices.Compact(merged)
		}
		if len(shared) > 0 || len(job.Shared[node]) > 0 {
			merged := mergeShared(job.GPUs[node], job.Shared[node], shared)
			if len(merged) == 0 {
				delete(job.Shared, node)
				continue
			}
			if job.Shared == nil {
				job.Shared = make(map[string][]SharedGPU)
			}
			job.Shared[node] = merged
		}
	}
}

// mergeShared merges two lists of GPUs held in part, each sorted by index:
// a GPU in both (named by two shared GRES, mps and shard or two types) is
// held in a part not known, and a GPU held whole is not held in part.
func mergeShared(whole []int, a, b []SharedGPU) []SharedGPU {
	merged := append(slices.Clone(a), b...)
	slices.SortStableFunc(merged, func(x, y SharedGPU) int { return x.Index - y.Index })
	out := merged[:0]
	for _, g := range merged {
		switch {
		case slices.Contains(whole, g.Index):
		case len(out) > 0 && out[len(out)-1].Index == g.Index:
			out[len(out)-1] = SharedGPU{Index: g.Index}
		default:
			out = append(out, g)
		}
	}
	return out
}

// indexSet collects GPU indices without duplicates, so that repeated ranges
// cost no memory.
type indexSet [maxGPUIndex + 1]bool

func (s *indexSet) sorted() []int {
	var idx []int
	for i, ok := range s {
		if ok {
			idx = append(idx, i)
		}
	}
	return idx
}

// parseGRES reads the GRES allocation of one node as scontrol and
// data_parser print it (gres_detail), and returns the GPUs it holds whole,
// sorted, and those it holds in part, sorted by index:
//
//	gpu:2(IDX:0-1)                       Slurm 20.11+
//	gpu:a100:2(IDX:0,3)                  typed
//	gpu:a100:1(IDX:0),gpu:v100:1(IDX:2)  several types
//	gpu(IDX:0-1,4)                       Slurm 19.05 and older
//	shard:2(0/4,2/4,0/4)                 shared GRES since Slurm 23.11.2
//	mps:50(IDX:1)                        shared GRES before
//	gpu:1(IDX:0),nic:1(IDX:0)            other GRES are ignored
//
// Slurm writes one item per GRES of the job (gres_stepmgr.c,
// _foreach_job_build_details): "<name>[:<type>]:<count>(IDX:<indices>)",
// or for a shared GRES (gres/shard, gres/mps) since 23.11.2 (commit
// 05ffde3e96, "Improve scontrol show job -d information of used shared
// gres (shard/mps) topology") "(<alloc>/<avail>,…)" from
// _build_shared_gres_details: per GPU index in order, the job's count of
// the shared GRES on that GPU and the GPU's own count. Before, a shared
// GRES had the IDX form, the GPUs' indices without counts. A GPU whose
// alloc is 0 is not the job's.
//
// An empty string or "(null)" has no GPUs. Counts without indices
// (JOB_GRES=gpu:2, TresPerNode=gres:gpu:2, "gpu(CNT:2)") say nothing about
// which GPUs and are not accepted here.
//
// counted says a GPU GRES was given by a count alone ("gpu(CNT:1)", what
// Slurm prints where gres.conf gives no File=): the job holds GPUs on the
// node, which ones unknown.
func parseGRES(gres string) (whole []int, shared []SharedGPU, counted bool, err error) {
	var set indexSet
	parts := map[int]SharedGPU{}
	addPart := func(g SharedGPU) {
		if _, dup := parts[g.Index]; dup {
			g = SharedGPU{Index: g.Index}
		}
		parts[g.Index] = g
	}
	for item := range splitTopLevel(gres) {
		name := item
		if i := strings.IndexAny(item, ":("); i >= 0 {
			name = item[:i]
		}
		if name != "gpu" && name != "shard" && name != "mps" {
			continue
		}
		open := strings.IndexByte(item, '(')
		if open < 0 {
			continue
		}
		detail := item[open+1:]
		end := strings.IndexByte(detail, ')')
		if end < 0 {
			return nil, nil, false, fmt.Errorf("GRES %q: unterminated detail", gres)
		}
		detail = detail[:end]
		list, isIDX := strings.CutPrefix(detail, "IDX:")
		switch {
		case strings.HasPrefix(detail, "CNT:"):
			if n, err := strconv.Atoi(detail[len("CNT:"):]); err == nil && n > 0 {
				counted = true
			}
		case strings.HasPrefix(detail, "(null"), isIDX && (list == "" || list == "N/A"):
			// No indices; "(null)" is what C prints for the shared
			// details Slurm could not build (no record of the node).
		case name == "gpu" && isIDX:
			if err := set.addList(list); err != nil {
				return nil, nil, false, fmt.Errorf("GRES %q: %w", gres, err)
			}
		case name == "gpu":
		case isIDX:
			idx, err := parseIndexList(list)
			if err != nil {
				return nil, nil, false, fmt.Errorf("GRES %q: %w", gres, err)
			}
			for _, i := range idx {
				addPart(SharedGPU{Index: i})
			}
		default:
			counts, err := parseSharedCounts(detail)
			if err != nil {
				return nil, nil, false, fmt.Errorf("GRES %q: %w", gres, err)
			}
			for _, g := range counts {
				addPart(g)
			}
		}
	}
	whole = set.sorted()
	for i, g := range parts {
		if !set[i] {
			shared = append(shared, g)
		}
	}
	slices.SortFunc(shared, func(a, b SharedGPU) int { return a.Index - b.Index })
	return whole, shared, counted, nil
}

// parseSharedCounts parses _build_shared_gres_details' "0/4,2/4,0/4": the
// job's and the GPU's count of a shared GRES per GPU index, and returns
// the GPUs where the job's is not 0.
func parseSharedCounts(list string) ([]SharedGPU, error) {
	var out []SharedGPU
	i := 0
	for part := range strings.SplitSeq(list, ",") {
		if i > maxGPUIndex {
			return nil, fmt.Errorf("shared counts %q: more than %d GPUs", list, maxGPUIndex+1)
		}
		a, v, ok := strings.Cut(part, "/")
		if !ok {
			return nil, fmt.Errorf("shared counts %q: %q is not <alloc>/<avail>", list, part)
		}
		alloc, err := parseBounded(a, maxSharedCount)
		if err != nil {
			return nil, fmt.Errorf("shared counts %q: %w", list, err)
		}
		avail, err := parseBounded(v, maxSharedCount)
		if err != nil {
			return nil, fmt.Errorf("shared counts %q: %w", list, err)
		}
		if alloc > avail {
			return nil, fmt.Errorf("shared counts %q: %d of GPU %d's %d", list, alloc, i, avail)
		}
		if alloc > 0 {
			out = append(out, SharedGPU{Index: i, Alloc: alloc, Avail: avail})
		}
		i++
	}
	return out, nil
}

// parseIndexList parses "0-1,4" into [0 1 4], sorted and without
// duplicates. Every index must be at most maxGPUIndex.
func parseIndexList(s string) ([]int, error) {
	var set indexSet
	if err := set.addList(s); err != nil {
		return nil, err
	}
	return set.sorted(), nil
}

func (s *indexSet) addList(list string) error {
	for part := range strings.SplitSeq(list, ",") {
		lo, hi, err := parseRange(part, maxGPUIndex)
		if err != nil {
			return fmt.Errorf("index list %q: %w", list, err)
		}
		for i := lo; i <= hi; i++ {
			s[i] = true
		}
	}
	return nil
}

// splitTopLevel splits s at the commas that are not inside parentheses or
// brackets, which separate GRES items and host list entries.
func splitTopLevel(s string) iter.Seq[string] {
	return func(yield func(string) bool) {
		depth, start := 0, 0
		for i := range len(s) {
			switch s[i] {
			case '(', '[':
				depth++
			case ')', ']':
				depth--
			case ',':
				if depth == 0 {
					if i > start && !yield(s[start:i]) {
						return
					}
					start = i + 1
				}
			}
		}
		if start < len(s) {
			yield(s[start:])
		}
	}
}

// parseRange parses "3" or "0-7" with both ends in [0, limit].
func parseRange(s string, limit int) (lo, hi int, err error) {
	loStr, hiStr, isRange := strings.Cut(s, "-")
	if lo, err = parseBounded(loStr, limit); err != nil {
		return 0, 0, err
	}
	hi = lo
	if isRange {
		if hi, err = parseBounded(hiStr, limit); err != nil {
			return 0, 0, err
		}
		if hi < lo {
			return 0, 0, fmt.Errorf("range %q is reversed", s)
		}
	}
	return lo, hi, nil
}

func parseBounded(s string, limit int) (int, error) {
	if s == "" || len(s) > 9 || strings.TrimLeft(s, "0123456789") != "" {
		return 0, fmt.Errorf("%q is not a number", s)
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, err
	}
	if n > limit {
		return 0, fmt.Errorf("%d is over the limit of %d", n, limit)
	}
	return n, nil
}

// expandHostlist expands Slurm's compressed host lists such as
// "gpu-[01-03,07],login1" or "rack[1-2]-n[01-02]" into at most limit
// names. Zero padding follows the width of the range's lower bound, as in
// Slurm. "(null)" and "" are empty.
func expandHostlist(s string, limit int) ([]string, error) {
	if s == "" || s == "(null)" {
		return nil, nil
	}
	var hosts []string
	for item := range splitTopLevel(s) {
		expanded, err := expandHost(item, limit-len(hosts))
		if err != nil {
			return nil, fmt.Errorf("host list %q: %w", s, err)
		}
		hosts = append(hosts, expanded...)
	}
	return hosts, nil
}

// expandHost expands one host pattern into at most limit names.
func expandHost(pattern string, limit int) ([]string, error) {
	open := strings.IndexByte(pattern, '[')
	if open < 0 {
		if strings.Contains(pattern, "]") {
			return nil, fmt.Errorf("unbalanced %q", pattern)
		}
		if limit < 1 {
			return nil, errTooMany
		}
		return []string{pattern}, nil
	}
	closing := strings.IndexByte(pattern[open:], ']')
	if closing < 0 {
		return nil, fmt.Errorf("unbalanced %q", pattern)
	}
	prefix, ranges, rest := pattern[:open], pattern[open+1:open+closing], pattern[open+closing+1:]
	if strings.Contains(prefix, "]") {
		return nil, fmt.Errorf("unbalanced %q", pattern)
	}
	suffixes, err := expandHost(rest, limit)
	if err != nil {
		return nil, err
	}

	var hosts []string
	for r := range strings.SplitSeq(ranges, ",") {
		lo, hi, err := parseRange(r, 999_999_999)
		if err != nil {
			return nil, err
		}
		if (hi-lo+1)*len(suffixes) > limit-len(hosts) {
			return nil, errTooMany
		}
		loStr, _, _ := strings.Cut(r, "-")
		for n := lo; n <= hi; n++ {
			for _, suffix := range suffixes {
				hosts = append(hosts, fmt.Sprintf("%s%0*d%s", prefix, len(loStr), n, suffix))
			}
		}
	}
	return hosts, nil
}
