package demo

import (
	"fmt"
	"hash/fnv"
	"math"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Value is a reading that may move over time. In YAML it is a number or a
// byte size ("80GiB") for a fixed value, or a mapping for a generator:
//
//	{shape: sine, min: 0.2, max: 0.9, period: 10m, phase: 0.25}
//	{start: 1e6, rate: 350}   # a counter rising by rate per second
type Value struct {
	Fixed  *float64
	Shape  string // sine, sawtooth, square, noise
	Min    float64
	Max    float64
	Period time.Duration
	Phase  float64 // fraction of a period
	Start  float64
	Rate   float64 // per second; set for counters
	seed   uint64
}

type valueYAML struct {
	Shape  string   `yaml:"shape"`
	Min    *string  `yaml:"min"`
	Max    *string  `yaml:"max"`
	Period string   `yaml:"period"`
	Phase  float64  `yaml:"phase"`
	Start  string   `yaml:"start"`
	Rate   *float64 `yaml:"rate"`
}

const maxRate = 1e15

var shapes = map[string]bool{"sine": true, "sawtooth": true, "square": true, "noise": true}

// UnmarshalYAML accepts the scalar and mapping forms. A mistake is a
// yaml.TypeError, with which the decoder goes on, so that every mistake of a
// scenario is named at once rather than the first only.
func (v *Value) UnmarshalYAML(n *yaml.Node) error {
	if err := v.unmarshal(n); err != nil {
		return &yaml.TypeError{Errors: []string{err.Error()}}
	}
	return nil
}

func (v *Value) unmarshal(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		f, err := parseQuantity(n.Value)
		if err != nil {
			return fmt.Errorf("line %d: %w", n.Line, err)
		}
		v.Fixed = &f
		return nil
	}
	var y valueYAML
	if err := n.Decode(&y); err != nil {
		return err
	}
	if y.Rate != nil {
		start, err := parseQuantity(orZero(y.Start))
		if err != nil {
			return fmt.Errorf("line %d: start: %w", n.Line, err)
		}
		// A counter's rate is bounded so that it stays finite over any run:
		// 1e15 per second is far beyond any counter a GPU keeps (PCIe 5.0
		// x16 moves 6.4e10 bytes/s), and over a thousand years adds 3.2e25.
		if !(*y.Rate >= 0 && *y.Rate <= maxRate) {
			return fmt.Errorf("line %d: a counter's rate must be from 0 to %g per second", n.Line, maxRate)
		}
		v.Start, v.Rate = start, *y.Rate
		return nil
	}
	if y.Min == nil || y.Max == nil {
		return fmt.Errorf("line %d: a generator needs min and max (or start and rate for a counter)", n.Line)
	}
	v.Shape = y.Shape
	if v.Shape == "" {
		v.Shape = "sine"
	}
	if !shapes[v.Shape] {
		return fmt.Errorf("line %d: unknown shape %q (want sine, sawtooth, square or noise)", n.Line, y.Shape)
	}
	var err error
	if v.Min, err = parseQuantity(*y.Min); err != nil {
		return fmt.Errorf("line %d: min: %w", n.Line, err)
	}
	if v.Max, err = parseQuantity(*y.Max); err != nil {
		return fmt.Errorf("line %d: max: %w", n.Line, err)
	}
	if math.IsNaN(y.Phase) || math.IsInf(y.Phase, 0) {
		return fmt.Errorf("line %d: phase %g is not a fraction of a period", n.Line, y.Phase)
	}
	v.Phase = y.Phase
	if v.Min > v.Max {
		return fmt.Errorf("line %d: min %g is above max %g", n.Line, v.Min, v.Max)
	}
	v.Period = 5 * time.Minute
	if y.Period != "" {
		d, err := time.ParseDuration(y.Period)
		if err != nil || d <= 0 {
			return fmt.Errorf("line %d: period %q is not a positive duration", n.Line, y.Period)
		}
		v.Period = d
	}
	return nil
}

// checkedYears is how long a counter (start + rate × seconds) is checked to
// stay in its range: it grows for as long as the demo runs, and no demo
// runs for a century.
const checkedYears = 100

var checkedRun = time.Duration(checkedYears * 365.25 * 24 * float64(time.Hour))

// bounds are the lowest and highest values the value takes, a counter's in
// its first checkedYears.
func (v Value) bounds() (lo, hi float64) {
	switch {
	case v.Fixed != nil:
		return *v.Fixed, *v.Fixed
	case v.Rate != 0 || v.Shape == "":
		return v.Start, v.Start + v.Rate*checkedRun.Seconds()
	}
	return v.Min, v.Max
}

// within says what is wrong when the value leaves [lo, hi], "" when nothing.
func (v Value) within(lo, hi float64) string {
	min, max := v.bounds()
	switch {
	case min >= lo && max <= hi:
		return ""
	case v.Rate != 0:
		return fmt.Sprintf("%g rising by %g a second reaches %g in %d years, outside %g..%g", v.Start, v.Rate, max, checkedYears, lo, hi)
	}
	return fmt.Sprintf("%g..%g is outside %g..%g", min, max, lo, hi)
}

func orZero(s string) string {
	if s == "" {
		return "0"
	}
	return s
}

// Mean is the value's average over time: a rate turned into a counter with
// it only grows.
func (v Value) Mean() float64 {
	switch {
	case v.Fixed != nil:
		return *v.Fixed
	case v.Rate != 0 || v.Shape == "":
		return v.Start
	}
	return (v.Min + v.Max) / 2
}

// At is the value at time t of a simulation that began at start.
func (v Value) At(start, t time.Time) float64 {
	switch {
	case v.Fixed != nil:
		return *v.Fixed
	case v.Rate != 0 || v.Shape == "":
		return v.Start + v.Rate*t.Sub(start).Seconds()
	}
	// The position in the period in integer nanoseconds first: a float
	// quotient of nanoseconds since 1970 keeps few bits of the fraction, and
	// math.Mod of it was most of the simulated NVML's cost.
	pos := float64(t.UnixNano()%int64(v.Period))/float64(v.Period) + v.Phase
	pos -= math.Floor(pos)
	var unit float64 // 0..1
	switch v.Shape {
	case "sine":
		unit = 0.5 + 0.5*math.Sin(2*math.Pi*pos)
	case "sawtooth":
		unit = pos
	case "square":
		if pos >= 0.5 {
			unit = 1
		}
	case "noise":
		// Deterministic in time, so two exporters replaying one scenario agree.
		step := t.UnixNano() / int64(v.Period/16+1)
		unit = hashUnit(v.seed, uint64(step))
	}
	return v.Min + (v.Max-v.Min)*unit
}

func hashUnit(seed, step uint64) float64 {
	h := fnv.New64a()
	var b [16]byte
	for i := range 8 {
		b[i] = byte(seed >> (8 * i))
		b[8+i] = byte(step >> (8 * i))
	}
	h.Write(b[:])
	return float64(h.Sum64()>>11) / (1 << 53)
}

var byteUnits = []struct {
	suffix string
	mult   float64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
}

// parseQuantity reads a plain number or a byte size such as "80GiB".
func parseQuantity(s string) (float64, error) {
	s = strings.TrimSpace(s)
	orig, mult := s, 1.0
	for _, u := range byteUnits {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	// The unit can overflow a finite number: 1e308GiB is +Inf.
	if f *= mult; err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%q is not a number or byte size", orig)
	}
	return f, nil
}
