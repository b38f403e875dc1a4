// Package validutf8 makes text from outside (process names, user names,
// cgroup paths, job records) valid UTF-8 the one way the exporter serves
// it everywhere: each byte that is not part of a UTF-8 character becomes
// U+FFFD, one for one, as encoding/json writes it (strings.ToValidUTF8
// would fold a run of them into one). The text format, OTLP and HTML cannot
// carry such bytes; replaced the same way wherever they are read, two names
// that differ only in them are one name everywhere, never two owners that
// become one label set at the exposition.
package validutf8

import (
	"strings"
	"unicode/utf8"
)

// String returns s with each invalid byte replaced by U+FFFD.
func String(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			b.WriteRune(utf8.RuneError)
		} else {
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}
