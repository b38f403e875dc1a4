// Package reading holds the one type every vendor reader returns its
// readings in: a value the hardware or driver may not have given.
package reading

// Opt is a reading that the hardware or driver may not have given. The zero
// value is unset; the exporter omits the series of an unset reading rather
// than writing zero.
type Opt[T any] struct {
	Value T
	OK    bool
}

// Some is a reading that was given.
func Some[T any](v T) Opt[T] { return Opt[T]{Value: v, OK: true} }
