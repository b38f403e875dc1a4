package gaudi

import (
	"bytes"
	"errors"
	"testing"
	"testing/iotest"

	"github.com/xpu-exporter/xpu_exporter/internal/boundedbuf"
)

// TestOutputReadFrom checks that hl-smi's stdout, read through the pooled
// buffer (ReadFrom, which os/exec's io.Copy calls), keeps what io.Copy
// would: every byte up to the limit, and the write error past it (which
// makes os/exec close the pipe), signalled as an overflow.
func TestOutputReadFrom(t *testing.T) {
	long := bytes.Repeat([]byte("0, HL-225, 0000:19:00.0\n"), 2000) // 48 KB: more than one buffer
	t.Run("whole", func(t *testing.T) {
		o := &limitedOutput{buf: boundedbuf.Buffer{Limit: 1 << 20, FailOnOverflow: true}, overflow: make(chan struct{})}
		n, err := o.ReadFrom(iotest.HalfReader(bytes.NewReader(long)))
		if err != nil || n != int64(len(long)) || !bytes.Equal(o.buf.Bytes(), long) {
			t.Errorf("copied %d, %v; kept %d bytes, want all %d", n, err, len(o.buf.Bytes()), len(long))
		}
	})
	t.Run("past the limit", func(t *testing.T) {
		o := &limitedOutput{buf: boundedbuf.Buffer{Limit: 1000, FailOnOverflow: true}, overflow: make(chan struct{})}
		n, err := o.ReadFrom(bytes.NewReader(long))
		if !errors.Is(err, boundedbuf.ErrOverflow) || n != 1000 || !bytes.Equal(o.buf.Bytes(), long[:1000]) {
			t.Errorf("copied %d, %v; want 1000, %v", n, err, boundedbuf.ErrOverflow)
		}
		select {
		case <-o.overflow:
		default:
			t.Error("overflow not signalled")
		}
	})
}
