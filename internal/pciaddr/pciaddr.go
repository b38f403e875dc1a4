// Package pciaddr puts PCI addresses in one form: NVML, sysfs, hl-smi,
// the device plugins and the NVIDIA driver's procfs each print them their
// own way.
package pciaddr

import "strings"

// Canonical returns a PCI address in the sysfs form, lower case with a
// four-digit domain ("0000:19:00.0"), whether given in that form, in
// NVML's (nvmlPciInfo_t busId: an eight-digit domain, upper case), or as
// hl-smi and the NVIDIA driver's procfs print it. It returns "" for
// anything else.
func Canonical(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	domain, rest, ok := strings.Cut(s, ":")
	if !ok || len(domain) < 4 || len(domain) > 8 || !isHex(domain) {
		return ""
	}
	if len(domain) > 4 {
		if strings.TrimLeft(domain[:len(domain)-4], "0") != "" {
			return ""
		}
		domain = domain[len(domain)-4:]
	}
	// bus:device.function, "19:00.0"
	if len(rest) != 7 || rest[2] != ':' || rest[5] != '.' ||
		!isHex(rest[0:2]) || !isHex(rest[3:5]) || rest[6] < '0' || rest[6] > '7' {
		return ""
	}
	if len(s) == len(domain)+1+len(rest) {
		return s // in the sysfs form already, as sysfs and hl-smi print it
	}
	return domain + ":" + rest
}

func isHex(s string) bool {
	for _, c := range []byte(s) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return s != ""
}
