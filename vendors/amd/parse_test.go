package amd

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/xpu-exporter/xpu_exporter/vendors/reading"
)

func TestParsePercent(t *testing.T) {
	for _, c := range []struct {
		in   string
		want float64
		err  bool
	}{
		{"37\n", 0.37, false},
		{"0\n", 0, false},
		{"100", 1, false},
		{"101\n", 0, true},
		{"-1\n", 0, true},
		{"", 0, true},
		{"37 %\n", 0, true},
	} {
		got, err := parsePercent([]byte(c.in))
		if (err != nil) != c.err || got != c.want {
			t.Errorf("parsePercent(%q) = %v, %v", c.in, got, err)
		}
		if err != nil && !errors.Is(err, ErrMalformed) {
			t.Errorf("parsePercent(%q) error %v is not ErrMalformed", c.in, err)
		}
	}
}

func TestParseLinkSpeed(t *testing.T) {
	for _, c := range []struct {
		in   string
		want float64
		ok   bool
		err  bool
	}{
		{"32.0 GT/s PCIe\n", 32, true, false},
		{"16.0 GT/s PCIe\n", 16, true, false},
		{"2.5 GT/s PCIe\n", 2.5, true, false},
		{"8 GT/s\n", 8, true, false}, // kernels before 5.x
		{"Unknown\n", 0, false, false},
		{"fast\n", 0, false, true},
		{"-16.0 GT/s PCIe\n", 0, false, true},
	} {
		got, ok, err := parseLinkSpeed([]byte(c.in))
		if got != c.want || ok != c.ok || (err != nil) != c.err {
			t.Errorf("parseLinkSpeed(%q) = %v, %v, %v", c.in, got, ok, err)
		}
	}
	for gts, gen := range map[float64]int{2.5: 1, 5: 2, 8: 3, 16: 4, 32: 5, 64: 6} {
		if g, ok := linkGeneration(gts); !ok || g != gen {
			t.Errorf("linkGeneration(%v) = %d, %v; want %d", gts, g, ok, gen)
		}
	}
	if _, ok := linkGeneration(10); ok {
		t.Error("10 GT/s is no PCIe generation")
	}
}

func TestParseLinkWidth(t *testing.T) {
	if w, ok, err := parseLinkWidth([]byte("16\n")); w != 16 || !ok || err != nil {
		t.Errorf("16: %d %v %v", w, ok, err)
	}
	// The PCI core prints 0 for a link that is down: not a width.
	if _, ok, err := parseLinkWidth([]byte("0\n")); ok || err != nil {
		t.Errorf("0: %v %v", ok, err)
	}
	if _, _, err := parseLinkWidth([]byte("64\n")); err == nil {
		t.Error("64 lanes accepted")
	}
}

func TestParseTempLimit(t *testing.T) {
	for _, c := range []struct {
		in   string
		want float64
		ok   bool
		err  bool
	}{
		{"105000\n", 105, true, false}, // 105000 m°C = 105 °C
		{"94500\n", 94.5, true, false}, // 94500 m°C = 94.5 °C
		{"0\n", 0, false, false},       // a range the firmware never filled
		{"-273150\n", 0, false, false}, // below 0 °C: no limit either
		{"hot\n", 0, false, true},
	} {
		v, ok, err := parseTempLimit([]byte(c.in))
		if v != c.want || ok != c.ok || (err != nil) != c.err {
			t.Errorf("%q: %v %v %v, want %v %v error %v", c.in, v, ok, err, c.want, c.ok, c.err)
		}
	}
}

func TestParseDPMCurrent(t *testing.T) {
	for _, c := range []struct {
		name string
		in   string
		hz   float64
		ok   bool
		err  bool
	}{
		{"middle level", "0: 500Mhz\n1: 1300Mhz *\n2: 2100Mhz\n", 1300e6, true, false},
		{"MHz spelling", "0: 96MHz *\n1: 1000MHz\n", 96e6, true, false},
		{"deep sleep level", "S: 19Mhz *\n0: 500Mhz\n1: 2100Mhz\n", 19e6, true, false},
		{"no active level", "0: 500Mhz\n1: 1700Mhz\n", 0, false, false},
		// Levels 1,200 MHz apart cannot both be within the drivers' 1 MHz
		// of one clock.
		{"two active levels far apart", "0: 500Mhz *\n1: 1700Mhz *\n", 0, false, true},
		// A locked clock: both levels are the current one (probe L, PL1).
		{"locked clock, both marked", "0: 1700Mhz *\n1: 1700Mhz *\n", 1700e6, true, false},
		// 1699 and 1701 are each within 1 MHz of a clock of 1700:
		// (1699 + 1701) / 2 = 1700 MHz.
		{"marked levels 2 MHz apart", "0: 1699Mhz *\n1: 1701Mhz *\n", 1700e6, true, false},
		{"marked levels 3 MHz apart", "0: 1699Mhz *\n1: 1702Mhz *\n", 0, false, true},
		// Once a fatal RAS interrupt fired: no reading now (PL2).
		{"unavailable", "unavailable\n", 0, false, false},
		{"no unit", "0: 500 *\n", 0, false, true},
		{"garbage", "hello\n", 0, false, true},
		{"extra column", "0: 500Mhz 800mV *\n", 0, false, true},
	} {
		hz, ok, err := parseDPMCurrent([]byte(c.in))
		if hz != c.hz || ok != c.ok || (err != nil) != c.err {
			t.Errorf("%s: got %v, %v, %v", c.name, hz, ok, err)
		}
	}
}

func TestParseRASCount(t *testing.T) {
	u := func(v uint64) Opt[uint64] { return reading.Some(v) }
	for _, c := range []struct {
		name string
		in   string
		want RASCount
		ok   bool
		err  bool
	}{
		{"ue and ce", "ue: 1\nce: 5\n", RASCount{Uncorrectable: u(1), Correctable: u(5)}, true, false},
		{"deferred", "ue: 0\nce: 2\nde: 0\n", RASCount{Uncorrectable: u(0), Correctable: u(2), Deferred: u(0)}, true, false},
		{"unknown key kept out", "ue: 0\nce: 0\nxx: 9\n", RASCount{Uncorrectable: u(0), Correctable: u(0)}, true, false},
		{"query not ready", "Query currently inaccessible\n", RASCount{}, false, false},
		{"repeated", "ue: 1\nue: 2\n", RASCount{}, false, true},
		{"negative", "ue: -1\nce: 0\n", RASCount{}, false, true},
		{"empty", "", RASCount{}, false, true},
		{"no colon", "ue 1\n", RASCount{}, false, true},
	} {
		got, ok, err := parseRASCount([]byte(c.in))
		if !reflect.DeepEqual(got, c.want) || ok != c.ok || (err != nil) != c.err {
			t.Errorf("%s: got %+v, %v, %v", c.name, got, ok, err)
		}
	}
}

func TestParseModes(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
		ok   bool
		err  bool
	}{
		{"SPX, DPX, QPX, CPX\n", []string{"SPX", "DPX", "QPX", "CPX"}, true, false},
		{"NPS1, NPS4\n", []string{"NPS1", "NPS4"}, true, false},
		{"Not supported\n", nil, false, false},
		{"SPX,,CPX\n", nil, false, true},
		{"\n", nil, false, true},
	} {
		got, ok, err := parseList([]byte(c.in))
		if !reflect.DeepEqual(got, c.want) || ok != c.ok || (err != nil) != c.err {
			t.Errorf("parseList(%q) = %v, %v, %v", c.in, got, ok, err)
		}
	}
	for _, c := range []struct {
		in   string
		want string
		ok   bool
		err  bool
	}{
		{"NPS1\n", "NPS1", true, false},
		{"CPX\n", "CPX", true, false},
		{"UNKNOWN\n", "", false, false},
		{"C PX\n", "", false, true},
	} {
		got, ok, err := parseMode([]byte(c.in))
		if got != c.want || ok != c.ok || (err != nil) != c.err {
			t.Errorf("parseMode(%q) = %q, %v, %v", c.in, got, ok, err)
		}
	}
}

func TestParseString(t *testing.T) {
	if s, err := parseString([]byte("AMD Instinct MI210\n")); s != "AMD Instinct MI210" || err != nil {
		t.Errorf("got %q, %v", s, err)
	}
	for _, in := range []string{"", "\n", "a\x00b", "a\x1bb"} {
		if _, err := parseString([]byte(in)); err == nil {
			t.Errorf("%q accepted", in)
		}
	}
}

// FuzzSysfsValues feeds one input to every sysfs value parser. None may
// panic, and a value that is returned must be within its documented range.
func FuzzSysfsValues(f *testing.F) {
	for _, s := range []string{"37\n", "32.0 GT/s PCIe\n", "0: 500Mhz\n1: 1300Mhz *\n", "ue: 0\nce: 2\nde: 0\n",
		"SPX, DPX, QPX, CPX\n", "AMD Instinct MI300X OAM\n", "S: 19Mhz *\n", "-40000\n", "Unknown\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if v, err := parsePercent(b); err == nil && (v < 0 || v > 1) {
			t.Fatalf("percent %v", v)
		}
		_, _ = parseUint(b)
		_, _ = parseInt(b)
		if v, ok, err := parseLinkSpeed(b); err == nil && ok && (v <= 0 || v > 1000) {
			t.Fatalf("link speed %v", v)
		}
		if v, ok, err := parseLinkWidth(b); err == nil && ok && (v <= 0 || v > 32) {
			t.Fatalf("link width %v", v)
		}
		if v, ok, err := parseTempLimit(b); err == nil && ok && v <= 0 {
			t.Fatalf("temperature limit %v", v)
		}
		if v, ok, err := parseDPMCurrent(b); err == nil && ok && v < 0 {
			t.Fatalf("clock %v", v)
		}
		if c, ok, err := parseRASCount(b); err == nil && ok && !c.Uncorrectable.OK && !c.Correctable.OK {
			t.Fatal("RAS count without ue or ce")
		}
		if s, err := parseString(b); err == nil && s == "" {
			t.Fatal("empty string accepted")
		}
		if l, ok, err := parseList(b); err == nil && ok && len(l) == 0 {
			t.Fatal("empty list accepted")
		}
		if m, ok, err := parseMode(b); err == nil && ok && m == "" {
			t.Fatal("empty mode accepted")
		}
		if id, err := parsePCIID(b); err == nil && (len(id) != 4 || strings.ToLower(id) != id) {
			t.Fatalf("PCI ID %q", id)
		}
		_, _, _ = parseKFDProperties(b)
	})
}

func TestParsePCIID(t *testing.T) {
	for in, want := range map[string]string{"0x740f\n": "740f", "0x738C": "738c", "740f\n": "", "0x74\n": "", "0x74g0\n": "", "\n": ""} {
		got, err := parsePCIID([]byte(in))
		if got != want || (err == nil) != (want != "") {
			t.Errorf("parsePCIID(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}
