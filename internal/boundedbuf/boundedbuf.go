// Package boundedbuf holds the output of a command the exporter runs
// (scontrol, hl-smi) without letting a runaway command fill memory.
package boundedbuf

import (
	"errors"
	"io"
	"sync"
)

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

// ReadFrom is what os/exec's copy of a command's pipe into the Buffer
// calls: see Copy.
func (b *Buffer) ReadFrom(r io.Reader) (int64, error) { return Copy(b, r) }

// Copy copies r to w as io.Copy does, through a pooled buffer. os/exec
// copies a pipe into a Writer that is not an *os.File with io.Copy, which,
// unless the Writer is an io.ReaderFrom, allocates a 32 KiB buffer for
// each: 64 KiB a run for stdout and stderr, at every scrape that runs a
// command. A Writer that wraps a Buffer gives its ReadFrom with Copy.
func Copy(w io.Writer, r io.Reader) (n int64, err error) {
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	for {
		nr, rerr := r.Read(buf)
		if nr > 0 {
			nw, werr := w.Write(buf[:nr])
			n += int64(nw)
			if werr != nil {
				return n, werr
			}
			if nw != nr {
				return n, io.ErrShortWrite
			}
		}
		if errors.Is(rerr, io.EOF) {
			return n, nil
		}
		if rerr != nil {
			return n, rerr
		}
	}
}

// copyBufs are the buffers Copy reads through, each large enough for a
// whole answer of hl-smi for 8 devices (some 4 KiB) or of scontrol for a
// node's jobs in one read.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 16<<10); return &b }}
