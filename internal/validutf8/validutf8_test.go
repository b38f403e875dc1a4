package validutf8

import "testing"

func TestString(t *testing.T) {
	for in, want := range map[string]string{
		"python3":         "python3",
		"job\xff":         "job\uFFFD",
		"bad\xff\xfename": "bad\uFFFD\uFFFDname", // one for one, as encoding/json
		"caf\xc3\xa9":     "café",
		"caf\xc3":         "caf\uFFFD", // a character cut short
		"":                "",
	} {
		if got := String(in); got != want {
			t.Errorf("String(%q) = %q, want %q", in, got, want)
		}
	}
}
