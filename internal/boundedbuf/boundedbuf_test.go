package boundedbuf

import (
	"errors"
	"testing"
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
