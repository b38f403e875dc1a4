package gaudi

import (
	"errors"
	"strings"
	"unicode/utf8"
)

// Reason classifies a failure. Its values are meant as label values.
type Reason string

const (
	ReasonMissingBinary  Reason = "missing_binary"   // hl-smi not found at the configured path
	ReasonStart          Reason = "start_failed"     // found but could not be started (permissions, not executable)
	ReasonExit           Reason = "exit_status"      // hl-smi exited non-zero
	ReasonTimeout        Reason = "timeout"          // killed at the deadline
	ReasonBusy           Reason = "busy"             // the previous run has not exited yet; no new run started
	ReasonOutputTooLarge Reason = "output_too_large" // stdout beyond Runner.MaxOutput
	ReasonNonUTF8        Reason = "non_utf8"         // stdout is not valid UTF-8
	ReasonMalformed      Reason = "malformed"        // not CSV, rows of the wrong width, an index listed twice
	ReasonExtraColumn    Reason = "extra_column"     // a column that was not asked for
	ReasonMissingColumn  Reason = "missing_column"   // a column that was asked for is absent
	ReasonUnit           Reason = "unexpected_unit"  // a header unit other than the documented one
	ReasonBadValue       Reason = "bad_value"        // one unreadable cell; only that reading is unset
	ReasonProcfs         Reason = "procfs"           // the process scan could not read procfs
)

// Reasons lists every Reason, for initialising counters at zero.
var Reasons = [numReasons]Reason{
	ReasonMissingBinary, ReasonStart, ReasonExit, ReasonTimeout, ReasonBusy,
	ReasonOutputTooLarge, ReasonNonUTF8, ReasonMalformed, ReasonExtraColumn,
	ReasonMissingColumn, ReasonUnit, ReasonBadValue, ReasonProcfs,
}

const numReasons = 13

// Error is a failure with its Reason.
type Error struct {
	Reason Reason
	// Field is the hl-smi field concerned, if any.
	Field string
	// Detail says what was found, already bounded and made printable.
	Detail string
	Err    error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("hl-smi: ")
	b.WriteString(string(e.Reason))
	if e.Field != "" {
		b.WriteString(" ")
		b.WriteString(e.Field)
	}
	if e.Detail != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail)
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// ReasonOf returns the Reason of err, or "" when err carries none.
func ReasonOf(err error) Reason {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ""
}

// maxDetail bounds text taken from the outside into an error message.
const maxDetail = 256

// excerpt makes untrusted bytes safe to log: valid UTF-8, one line, at most
// maxDetail bytes.
func excerpt(b []byte) string {
	s := strings.ToValidUTF8(string(b[:min(len(b), 4*maxDetail)]), "\uFFFD")
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > maxDetail {
		cut := maxDetail
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}
