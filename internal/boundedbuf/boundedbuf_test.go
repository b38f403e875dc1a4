package boundedbuf

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"
)

func TestBuffer(t *testing.T) {
	for _, tc := range []struct {
		name     string
		fail     bool
		writes   []string
		want     string
		overflow bool
		// n and err of the last write
		n   int
		err error
	}{
		{name: "within the limit", writes: []string{"ab", "cd"}, want: "abcd", n: 2},
		{name: "exactly the limit", writes: []string{"abcde"}, want: "abcde", n: 5},
		// 3 bytes fit after "ab": "cde" is kept, "fg" dropped; the
		// writer is told all 5 were taken.
		{name: "past the limit, dropped", writes: []string{"ab", "cdefg"}, want: "abcde", overflow: true, n: 5},
		// The same, failing: 3 written and ErrOverflow.
		{name: "past the limit, failing", fail: true, writes: []string{"ab", "cdefg"}, want: "abcde", overflow: true, n: 3, err: ErrOverflow},
		{name: "full, failing", fail: true, writes: []string{"abcde", "f"}, want: "abcde", overflow: true, n: 0, err: ErrOverflow},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &Buffer{Limit: 5, FailOnOverflow: tc.fail}
			var n int
			var err error
			for _, w := range tc.writes {
				n, err = b.Write([]byte(w))
			}
			if got := string(b.Bytes()); got != tc.want {
				t.Errorf("kept %q, want %q", got, tc.want)
			}
			if b.Overflowed() != tc.overflow {
				t.Errorf("Overflowed() = %v, want %v", b.Overflowed(), tc.overflow)
			}
			if n != tc.n || !errors.Is(err, tc.err) {
				t.Errorf("last Write = %d, %v; want %d, %v", n, err, tc.n, tc.err)
			}
		})
	}
}

// TestReadFrom: a Buffer read into by os/exec's copy (ReadFrom, through
// the pooled buffer) keeps what io.Copy would: every byte up to the limit
// across several reads, the rest dropped silently without FailOnOverflow,
// and a read error with what came before it.
func TestReadFrom(t *testing.T) {
	long := bytes.Repeat([]byte("0, HL-225, 0000:19:00.0\n"), 2000) // 48 KB: more than one pooled buffer
	t.Run("whole", func(t *testing.T) {
		b := &Buffer{Limit: 1 << 20}
		n, err := b.ReadFrom(iotest.HalfReader(bytes.NewReader(long)))
		if err != nil || n != int64(len(long)) || !bytes.Equal(b.Bytes(), long) {
			t.Errorf("copied %d, %v; kept %d bytes, want all %d", n, err, len(b.Bytes()), len(long))
		}
	})
	t.Run("past its limit", func(t *testing.T) {
		b := &Buffer{Limit: 100}
		n, err := b.ReadFrom(bytes.NewReader(long))
		if err != nil || n != int64(len(long)) || !bytes.Equal(b.Bytes(), long[:100]) {
			t.Errorf("copied %d, %v; kept %q", n, err, b.Bytes())
		}
	})
	t.Run("read error", func(t *testing.T) {
		b := &Buffer{Limit: 100}
		broken := errors.New("broken pipe")
		_, err := b.ReadFrom(io.MultiReader(bytes.NewReader([]byte("abc")), iotest.ErrReader(broken)))
		if !errors.Is(err, broken) || string(b.Bytes()) != "abc" {
			t.Errorf("got %v, kept %q; want %v, \"abc\"", err, b.Bytes(), broken)
		}
	})
}
