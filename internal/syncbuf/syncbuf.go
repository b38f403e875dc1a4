// Package syncbuf is a byte buffer that goroutines write to while a test
// reads it: log sinks and the output of processes a test starts.
package syncbuf

import (
	"bytes"
	"strings"
	"sync"
)

// Buffer is a bytes.Buffer behind a mutex. The zero value is ready to use.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Tail returns the last n lines written.
func (b *Buffer) Tail(n int) string {
	all := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	return strings.Join(all[max(0, len(all)-n):], "\n")
}
