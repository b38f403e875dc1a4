package gaudi

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/xpu-exporter/xpu_exporter/internal/pciaddr"
)

var sysfsBusID = regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)

// FuzzBusID checks that a bus ID from hl-smi or a sysfs link is
// either refused or turned into the one sysfs form, naming the same
// domain, bus, device and function, and that the form is a fixed point.
func FuzzBusID(f *testing.F) {
	for _, s := range []string{"0000:19:00.0", "00000000:1A:00.0", " 0000:b3:00.7\n", "1:19:00.0", "0001:19:00.8", "0000000100:19:00.0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id := pciaddr.Canonical(s)
		if id == "" {
			return
		}
		if !sysfsBusID.MatchString(id) || pciaddr.Canonical(id) != id {
			t.Fatalf("pciaddr.Canonical(%q) = %q: not a stable sysfs form", s, id)
		}
		// The same address: domain, bus, device and function, in hex.
		in := strings.FieldsFunc(strings.TrimSpace(s), func(r rune) bool { return r == ':' || r == '.' })
		out := strings.FieldsFunc(id, func(r rune) bool { return r == ':' || r == '.' })
		if len(in) != 4 {
			t.Fatalf("pciaddr.Canonical(%q) = %q from %d parts", s, id, len(in))
		}
		for i := range out {
			a, err1 := strconv.ParseUint(in[i], 16, 64)
			b, err2 := strconv.ParseUint(out[i], 16, 64)
			if err1 != nil || err2 != nil || a != b {
				t.Fatalf("pciaddr.Canonical(%q) = %q: part %d differs", s, id, i)
			}
		}
	})
}

// FuzzReadDev reads hostile sysfs "dev" attributes. The kernel writes
// "%u:%u\n", major and minor (Documentation/ABI/testing/sysfs-dev): what
// readDev accepts is that, around white space.
func FuzzReadDev(f *testing.F) {
	for _, s := range []string{"509:0\n", "235:1", " 10:200 \n", "4294967296:0\n", "1:-1\n", "1:2:3\n", ""} {
		f.Add([]byte(s))
	}
	path := filepath.Join(f.TempDir(), "dev")
	f.Fuzz(func(t *testing.T, content []byte) {
		if err := os.WriteFile(path, content, 0o644); err != nil {
			t.Fatal(err)
		}
		dev, ok := readDev(path)
		v := strings.TrimSpace(string(content[:min(len(content), maxSysfsValue)]))
		maj, minr, found := strings.Cut(v, ":")
		a, err1 := strconv.ParseUint(maj, 10, 32)
		b, err2 := strconv.ParseUint(minr, 10, 32)
		want := found && err1 == nil && err2 == nil
		if ok != want || ok && (uint64(dev.major) != a || uint64(dev.minor) != b) {
			t.Fatalf("readDev(%q) = %d:%d, %v", content, dev.major, dev.minor, ok)
		}
	})
}

// FuzzIsComputeNode checks the compute node name matcher, which sees every
// descriptor's link target and every sysfs class entry, against the
// pattern it stands for.
func FuzzIsComputeNode(f *testing.F) {
	for _, s := range []string{"accel0", "hl12", "accel", "hl", "accel_controlD0", "hl_controlD2", "accel1x", "xaccel1", "accel-1", "accel\u0661", "hl0\n", ""} {
		f.Add([]byte(s))
	}
	pattern := regexp.MustCompile(`^(accel|hl)([0-9]+)$`)
	f.Fuzz(func(t *testing.T, name []byte) {
		if got, want := isComputeNode(name), pattern.Match(name); got != want {
			t.Fatalf("isComputeNode(%q) = %v, want %v", name, got, want)
		}
	})
}
