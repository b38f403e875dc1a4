// Package boundedbuf holds the output of a command the exporter runs
// (scontrol, hl-smi) without letting a runaway command fill memory.
package boundedbuf

import "errors"

// ErrOverflow is what Write returns past the limit of a Buffer that fails on
// overflow.
var ErrOverflow = errors.New("output limit reached")

// Buffer keeps at most Limit bytes. When FailOnOverflow is set, the write
// that passes the limit fails, which makes os/exec close the pipe, so that a
// runaway command stops on EPIPE instead of writing on; otherwise the rest
// is dropped silently (for stderr, of which an excerpt is enough).
type Buffer struct {
	Limit          int
	FailOnOverflow bool

	buf      []byte
	overflow bool
}

func (b *Buffer) Write(p []byte) (int, error) {
	room := b.Limit - len(b.buf)
	if len(p) <= room {
		b.buf = append(b.buf, p...)
		return len(p), nil
	}
	b.buf = append(b.buf, p[:room]...)
	b.overflow = true
	if b.FailOnOverflow {
		return room, ErrOverflow
	}
	return len(p), nil
}

// Bytes returns what was kept.
func (b *Buffer) Bytes() []byte { return b.buf }

// Overflowed reports whether more than Limit bytes were written.
func (b *Buffer) Overflowed() bool { return b.overflow }
