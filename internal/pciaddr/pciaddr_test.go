package pciaddr

import "testing"

func TestCanonical(t *testing.T) {
	for in, want := range map[string]string{
		"0000:19:00.0":     "0000:19:00.0",
		"0000:1A:00.0":     "0000:1a:00.0",
		"00000000:1a:00.0": "0000:1a:00.0", // NVML's eight-digit domain
		"00000000:3B:00.0": "0000:3b:00.0", // and its upper case
		"00010000:1a:00.0": "",             // a domain beyond 16 bits
		" 0000:db:00.0\n":  "0000:db:00.0",
		"19:00.0":          "",
		"0000:19:00.8":     "", // functions are 0-7
		"0000:zz:00.0":     "",
		"":                 "",
	} {
		if got := Canonical(in); got != want {
			t.Errorf("Canonical(%q) = %q, want %q", in, got, want)
		}
	}
}
