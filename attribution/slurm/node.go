package slurm

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// NodeGPUs is how many gpu GRES Slurm numbers on node: the sum of the
// counts of its gres/gpu entries in `scontrol show node`'s Gres= field
// (each GPU, or MIG device or partition, one GRES index), 0 where it has
// none. A GPU Slurm numbered that the node no longer shows (one that left
// the bus before the exporter started) shifts every later GRES index onto
// its neighbour, which only this count tells when no job holds the last
// index. The node's configuration changes when slurmd restarts with
// another gres.conf: the answer is cached for configTTL, a failure for
// notFoundTTL.
func (c *Client) NodeGPUs(ctx context.Context, node string) (int, error) {
	parse := func(out []byte) (int, error) { return parseNodeGPUs(out, node) }
	return askCached(ctx, c, &c.nodeGPUs, node, parse, "show", "node", node)
}

// ErrNoNodeRecord is returned when `scontrol show node` printed no record
// of the node asked for.
var ErrNoNodeRecord = errors.New("scontrol printed no record of the node")

// parseNodeGPUs reads the Gres= field of node's record in `scontrol show
// node` text: "Gres=gpu:4(S:0-1)", "Gres=gpu:a100:2(S:0),gpu:1g.10gb:7,
// shard:16" (name, optional type, count, optional socket list, entries
// comma-separated; gres_node_state_list in slurm's node_info.c), or
// "Gres=(null)" for none. Only gpu entries count; shards and MPS shares
// are parts of GPUs already counted.
func parseNodeGPUs(out []byte, node string) (int, error) {
	text := string(out)
	if !strings.Contains(text, "NodeName="+node+" ") && !strings.HasSuffix(strings.TrimSpace(text), "NodeName="+node) {
		return 0, fmt.Errorf("%w %s", ErrNoNodeRecord, node)
	}
	var field string
	for _, f := range strings.Fields(text) {
		if v, ok := strings.CutPrefix(f, "Gres="); ok {
			field = v
			break
		}
	}
	if field == "" || field == "(null)" {
		return 0, nil
	}
	total := 0
	for entry := range splitTopLevel(field) {
		entry, _, _ = strings.Cut(entry, "(")
		parts := strings.Split(entry, ":")
		if parts[0] != "gpu" {
			continue
		}
		n, err := strconv.Atoi(parts[len(parts)-1])
		if err != nil || n < 0 || len(parts) < 2 {
			return 0, fmt.Errorf("node %s: Gres entry %q has no count", node, entry)
		}
		total += n
	}
	return total, nil
}
