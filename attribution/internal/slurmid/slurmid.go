// Package slurmid recognises the forms of Slurm's job and step identifiers,
// for the packages that read them (cgroup paths, scontrol output) and the
// one that passes them to scontrol, which must never get anything else.
package slurmid

import "strings"

// crockford is the alphabet of SLUIDs (Slurm's src/common/sluid.c).
const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// IsSLUID accepts the form Slurm 26.05 writes: "s" and 13 Crockford base32
// digits.
func IsSLUID(s string) bool {
	if len(s) != 14 || s[0] != 's' {
		return false
	}
	for i := 1; i < len(s); i++ {
		if strings.IndexByte(crockford, s[i]) < 0 {
			return false
		}
	}
	return true
}

// IsStep accepts numeric steps, the named ones (batch, extern, interactive)
// and heterogeneous components ("0+1").
func IsStep(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for i := range len(s) {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'z' || c == '+') {
			return false
		}
	}
	return true
}
