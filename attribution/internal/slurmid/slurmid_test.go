package slurmid

import "testing"

func TestForms(t *testing.T) {
	for _, tc := range []struct {
		s           string
		sluid, step bool
	}{
		{"s0123456789ABCD", false, false}, // 15 characters
		{"s0123456789ABC", true, false},
		{"s0123456789ABI", false, false}, // I is not Crockford
		{"S0123456789ABC", false, false},
		{"0", false, true},
		{"batch", false, true},
		{"0+1", false, true},
		{"", false, false},
		{"step;rm", false, false},
	} {
		if IsSLUID(tc.s) != tc.sluid || IsStep(tc.s) != tc.step {
			t.Errorf("%q: IsSLUID %v, IsStep %v; want %v, %v", tc.s, IsSLUID(tc.s), IsStep(tc.s), tc.sluid, tc.step)
		}
	}
}
