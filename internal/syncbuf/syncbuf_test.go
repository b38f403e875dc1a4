package syncbuf

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

func TestBufferConcurrentWritesAndTail(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for j := range 25 {
				fmt.Fprintf(&b, "w%d line %d\n", i, j)
			}
		})
	}
	wg.Wait()
	// 4 writers × 25 lines, each "wI line J\n": 100 lines.
	if lines := strings.Count(b.String(), "\n"); lines != 100 {
		t.Errorf("%d lines, want 100", lines)
	}
	var c Buffer
	c.Write([]byte("a\nb\nc\n"))
	if got := c.Tail(2); got != "b\nc" {
		t.Errorf("Tail(2) = %q, want %q", got, "b\nc")
	}
	if got := c.Tail(10); got != "a\nb\nc" {
		t.Errorf("Tail(10) = %q, want all three lines", got)
	}
}
