package amd

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"unicode"

	"github.com/xpu-exporter/xpu_exporter/vendors/reading"
)

// The parsers below take the raw bytes of one sysfs file. Each is pure and
// fuzzed: none panics, and none returns a reading on malformed input. They
// parse the bytes in place and make a string only of what they return or
// of an error's text: a scrape parses some 300 files.

// parseUint parses a decimal value file such as gpu_busy_percent or
// mem_info_vram_used, which the kernel prints with "%u\n" or "%llu\n".
func parseUint(b []byte) (uint64, error) {
	s := bytes.TrimSpace(b)
	v, err := strconv.ParseUint(string(s), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %q is not an unsigned decimal", ErrMalformed, truncate(string(s)))
	}
	return v, nil
}

// parseInt parses a signed decimal value: hwmon temperatures may be
// negative (Documentation/hwmon/sysfs-interface.rst, temp[1-*]_input).
func parseInt(b []byte) (int64, error) {
	s := bytes.TrimSpace(b)
	v, err := strconv.ParseInt(string(s), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %q is not a decimal", ErrMalformed, truncate(string(s)))
	}
	return v, nil
}

// parseTempLimit parses a hwmon temperature limit (millidegrees) into °C.
// amdgpu prints the limit as its thermal range holds it (amdgpu_pm.c,
// amdgpu_hwmon_show_temp_thresh and its hotspot and mem siblings:
// sysfs_emit "%d\n"), also when the firmware filled no range
// (smu_v13_0_6_get_thermal_temperature_range returns early on firmware
// older than 85.69). No GPU has a limit at or below 0 °C, so such a value
// is no limit, and an alert comparing with it would fire on every device.
func parseTempLimit(b []byte) (float64, bool, error) {
	v, err := parseInt(b)
	if err != nil || v <= 0 {
		return 0, false, err
	}
	return float64(v) / 1000, true, nil
}

// parsePercent parses gpu_busy_percent or mem_busy_percent into a ratio.
// amdgpu.rst (DOC: gpu_busy_percent): "The amdgpu driver provides a sysfs
// API for reading how busy the GPU is as a percentage."
func parsePercent(b []byte) (float64, error) {
	v, err := parseUint(b)
	if err != nil {
		return 0, err
	}
	if v > 100 {
		return 0, fmt.Errorf("%w: %d is not a percentage", ErrMalformed, v)
	}
	return float64(v) / 100, nil
}

// parseString returns a one-line text value such as product_name or
// unique_id, without its newline. Control bytes are refused: the value
// becomes a label.
func parseString(b []byte) (string, error) {
	s := string(bytes.TrimSpace(b))
	if s == "" {
		return "", fmt.Errorf("%w: empty", ErrMalformed)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] == 0x7f {
			return "", fmt.Errorf("%w: control byte in %q", ErrMalformed, truncate(s))
		}
	}
	return s, nil
}

// parsePCIID parses a PCI ID attribute ("0x740f\n") into "740f".
func parsePCIID(b []byte) (string, error) {
	s := strings.ToLower(string(bytes.TrimSpace(b)))
	id, ok := strings.CutPrefix(s, "0x")
	if !ok || len(id) != 4 || strings.Trim(id, "0123456789abcdef") != "" {
		return "", fmt.Errorf("%w: %q is not a PCI ID", ErrMalformed, truncate(s))
	}
	return id, nil
}

// parseLinkSpeed parses the PCI core's current_link_speed/max_link_speed
// (drivers/pci/pci-sysfs.c, current_link_speed_show prints
// pci_speed_string(), e.g. "16.0 GT/s PCIe"; older kernels print
// "16 GT/s"). It returns the rate in GT/s. "Unknown" is an absent reading.
func parseLinkSpeed(b []byte) (float64, bool, error) {
	s := bytes.TrimSpace(b)
	if string(s) == "Unknown" || string(s) == "Unknown speed" {
		return 0, false, nil
	}
	num, rest, found := bytes.Cut(s, []byte(" "))
	if !found || !bytes.HasPrefix(rest, []byte("GT/s")) {
		return 0, false, fmt.Errorf("%w: %q is not a link speed", ErrMalformed, truncate(string(s)))
	}
	v, err := strconv.ParseFloat(string(num), 64)
	if err != nil || v <= 0 || v > 1000 {
		return 0, false, fmt.Errorf("%w: %q is not a link speed", ErrMalformed, truncate(string(s)))
	}
	return v, true, nil
}

// LinkGeneration is the PCIe generation of a link rate in GT/s, false for
// a rate no generation introduced.
func LinkGeneration(gts float64) (int, bool) { return linkGeneration(gts) }

// linkGeneration maps a per-lane rate in GT/s to the PCIe generation that
// introduced it (PCI Express Base Specification: 2.5, 5, 8, 16, 32, 64 GT/s
// for generations 1 to 6).
func linkGeneration(gts float64) (int, bool) {
	for gen, rate := range []float64{2.5, 5, 8, 16, 32, 64} {
		if gts == rate {
			return gen + 1, true
		}
	}
	return 0, false
}

// parseLinkWidth parses current_link_width/max_link_width ("16"). The PCI
// core prints 0 when the link is down or the width is unknown; that is an
// absent reading, not a width.
func parseLinkWidth(b []byte) (int, bool, error) {
	v, err := parseUint(b)
	if err != nil {
		return 0, false, err
	}
	if v > 32 {
		return 0, false, fmt.Errorf("%w: link width %d", ErrMalformed, v)
	}
	return int(v), v > 0, nil
}

// parseDPMCurrent finds the active level of a pp_dpm_sclk or pp_dpm_mclk
// table and returns its clock in Hz. amdgpu.rst (DOC: pp_dpm_sclk
// pp_dpm_mclk ...): "Reading back the files will show you the available
// power levels within the power state and the clock information for those
// levels." The active level is marked with "*". Lines look like
// "1: 1700Mhz *"; the driver writes "Mhz", a few ASICs "MHz", and a
// deep-sleep level is indexed "S:" rather than by a number. A table with no
// marked level is absent (the clock is gated).
//
// The Instinct drivers mark every level within 1 MHz of the current clock
// (arcturus_ppt.c, aldebaran_ppt.c, smu_v13_0_6_ppt.c: "*" where
// *_freqs_in_same_level(level, now), "abs(frequency1 - frequency2) <=
// EPSILON", EPSILON 1), so a locked clock (soft minimum = maximum) marks
// both lines of "0: 1700Mhz *\n1: 1700Mhz *": the clock is theirs, the
// middle of them where they differ, within 1 MHz of the truth. Marked
// levels more than 2 MHz apart cannot both be within 1 MHz of one clock,
// and are malformed (probe L, PL1: the clock was left out as malformed).
//
// Once a fatal RAS interrupt fired, the same functions print
// "unavailable" alone ("if (amdgpu_ras_intr_triggered()) ...
// "unavailable\n""): no reading now, as the RAS files' "Query currently
// inaccessible", not a malformed file (PL2).
func parseDPMCurrent(b []byte) (float64, bool, error) {
	if string(bytes.TrimSpace(b)) == dpmUnavailable {
		return 0, false, nil
	}
	var lo, hi float64
	found := false
	for rest := b; len(rest) > 0; {
		var line []byte
		line, rest, _ = bytes.Cut(rest, []byte("\n"))
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		_, level, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return 0, false, fmt.Errorf("%w: line %q has no level", ErrMalformed, truncate(string(line)))
		}
		clock, mark, n := twoFields(level)
		if n == 0 || n > 2 || n == 2 && string(mark) != "*" {
			return 0, false, fmt.Errorf("%w: line %q", ErrMalformed, truncate(string(line)))
		}
		mhz, err := parseMHz(clock)
		if err != nil {
			return 0, false, fmt.Errorf("%w: line %q", ErrMalformed, truncate(string(line)))
		}
		if n == 2 {
			if !found {
				lo, hi = mhz, mhz
			}
			lo, hi, found = min(lo, mhz), max(hi, mhz), true
		}
	}
	if hi-lo > 2 {
		return 0, false, fmt.Errorf("%w: levels %g and %g MHz both marked active", ErrMalformed, lo, hi)
	}
	return (lo + hi) / 2 * 1e6, found, nil
}

// dpmUnavailable is what the Instinct drivers' print_clk_levels print
// once amdgpu_ras_intr_triggered.
const dpmUnavailable = "unavailable"

// twoFields splits b around white space as strings.Fields does, giving the
// first two fields and how many there are (3 for three or more).
func twoFields(b []byte) (first, second []byte, n int) {
	for n < 3 {
		b = bytes.TrimLeftFunc(b, unicode.IsSpace)
		if len(b) == 0 {
			break
		}
		end := bytes.IndexFunc(b, unicode.IsSpace)
		if end < 0 {
			end = len(b)
		}
		switch n {
		case 0:
			first = b[:end]
		case 1:
			second = b[:end]
		}
		n++
		b = b[end:]
	}
	return first, second, n
}

// parseMHz parses a clock in MHz ("1700Mhz", "1700MHz"), the unit in any
// case.
func parseMHz(s []byte) (float64, error) {
	num, unit := s[:max(0, len(s)-3)], s[max(0, len(s)-3):]
	if !bytes.EqualFold(unit, []byte("mhz")) {
		return 0, fmt.Errorf("%q has no MHz unit", s)
	}
	v, err := strconv.ParseUint(string(num), 10, 32)
	if err != nil {
		return 0, err
	}
	return float64(v), nil
}

// RASCount holds the error counts of one RAS block.
type RASCount struct {
	Uncorrectable Opt[uint64]
	Correctable   Opt[uint64]
	// Deferred errors are reported by newer kernels only.
	Deferred Opt[uint64]
}

// parseRASCount parses ras/<block>_err_count. amdgpu.rst (DOC: AMDGPU RAS
// sysfs Error Count Interface): "It outputs the multiple lines which report
// the uncorrected (ue) and corrected (ce) error counts. The format of one
// line is below, [ce|ue]: count". Newer kernels add "de: count" for
// deferred errors. Unknown keys are ignored so that a kernel adding one
// does not lose the others; a repeated or unparsable line is malformed.
//
// While the driver cannot query the block (during a GPU reset, or once a
// fatal RAS interrupt fired), amdgpu_ras_sysfs_read answers
// "Query currently inaccessible" instead of counts: no reading now, not
// a malformed file.
func parseRASCount(b []byte) (RASCount, bool, error) {
	if string(bytes.TrimSpace(b)) == rasInaccessible {
		return RASCount{}, false, nil
	}
	c, err := parseRASLines(b)
	return c, err == nil, err
}

// rasInaccessible is amdgpu_ras_sysfs_read's answer while
// amdgpu_ras_get_error_query_ready is false (older kernels: while
// amdgpu_ras_intr_triggered).
const rasInaccessible = "Query currently inaccessible"

func parseRASLines(b []byte) (RASCount, error) {
	var c RASCount
	for rest := b; len(rest) > 0; {
		var line []byte
		line, rest, _ = bytes.Cut(rest, []byte("\n"))
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		key, val, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return RASCount{}, fmt.Errorf("%w: line %q", ErrMalformed, truncate(string(line)))
		}
		var dst *Opt[uint64]
		switch string(bytes.TrimSpace(key)) {
		case "ue":
			dst = &c.Uncorrectable
		case "ce":
			dst = &c.Correctable
		case "de":
			dst = &c.Deferred
		default:
			continue
		}
		if dst.OK {
			return RASCount{}, fmt.Errorf("%w: %q repeated", ErrMalformed, truncate(string(key)))
		}
		v, err := strconv.ParseUint(string(bytes.TrimSpace(val)), 10, 64)
		if err != nil {
			return RASCount{}, fmt.Errorf("%w: line %q", ErrMalformed, truncate(string(line)))
		}
		*dst = reading.Some(v)
	}
	if !c.Uncorrectable.OK && !c.Correctable.OK {
		return RASCount{}, fmt.Errorf("%w: neither ue nor ce", ErrMalformed)
	}
	return c, nil
}

// parseList parses available_compute_partition / available_memory_partition
// ("SPX, DPX, QPX, CPX"). amdgpu_gfx.c
// (amdgpu_gfx_get_available_compute_partition) prints "Not supported" for a
// GPU without partition modes: an absent reading.
func parseList(b []byte) ([]string, bool, error) {
	s := string(bytes.TrimSpace(b))
	if s == "Not supported" {
		return nil, false, nil
	}
	if s == "" {
		return nil, false, fmt.Errorf("%w: empty", ErrMalformed)
	}
	var out []string
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if !isModeName(f) {
			return nil, false, fmt.Errorf("%w: %q is not a mode name", ErrMalformed, truncate(f))
		}
		out = append(out, f)
	}
	return out, true, nil
}

// parseMode parses current_compute_partition ("CPX") or
// current_memory_partition ("NPS1"). The driver prints "UNKNOWN" for a mode
// it cannot query (amdgpu_gfx.c, amdgpu_gfx_compute_mode_desc): absent.
func parseMode(b []byte) (string, bool, error) {
	s := string(bytes.TrimSpace(b))
	if s == "UNKNOWN" {
		return "", false, nil
	}
	if !isModeName(s) {
		return "", false, fmt.Errorf("%w: %q is not a mode name", ErrMalformed, truncate(s))
	}
	return s, true, nil
}

func isModeName(s string) bool {
	if s == "" || len(s) > 16 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// truncate keeps error messages short when a file is garbage.
func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
