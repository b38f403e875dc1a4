package slurm

import (
	"errors"
	"testing"
)

// TestParseNodeGPUs: the gpu entries of a node's Gres= field summed, each
// "gpu[:type]:count[(S:sockets)]"; shards and MPS shares are parts of those
// GPUs, not GPUs; a socket list may hold commas.
func TestParseNodeGPUs(t *testing.T) {
	record := func(gres string) []byte {
		return []byte("NodeName=node1 Arch=x86_64 CoresPerSocket=32\n   CPUAlloc=8 CPUEfctv=64 CPUTot=64 CPULoad=1.00\n   AvailableFeatures=(null)\n   Gres=" + gres + "\n   NodeAddr=node1 NodeHostName=node1 Version=24.05.4\n")
	}
	for _, tc := range []struct {
		gres string
		want int
	}{
		{"gpu:8(S:0-1)", 8},
		{"gpu:4", 4},
		{"gpu:a100:2(S:0),gpu:1g.10gb:7", 9},          // a whole A100 pair and 7 MIG devices
		{"gpu:h100:4(S:0,2),shard:h100:32(S:0,2)", 4}, // shards are parts of the 4
		{"gpu:2,mps:200", 2},
		{"(null)", 0},
	} {
		got, err := parseNodeGPUs(record(tc.gres), "node1")
		if err != nil || got != tc.want {
			t.Errorf("Gres=%s: %d, %v; want %d", tc.gres, got, err, tc.want)
		}
	}
	if _, err := parseNodeGPUs([]byte("NodeName=node2 Arch=x86_64\n   Gres=gpu:4\n"), "node1"); !errors.Is(err, ErrNoNodeRecord) {
		t.Errorf("another node's record: %v, want ErrNoNodeRecord", err)
	}
	if _, err := parseNodeGPUs(record("gpu:a100"), "node1"); err == nil {
		t.Error("an entry without a count: no error")
	}
}
