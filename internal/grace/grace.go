// Package grace holds back the log of a failure that may be one scrape's
// alone. A scrape's deadline is its scraper's: one asking for a millisecond
// (any client may), or the shorter of an HA pair's, made GPUs, attribution
// sources and engine targets that answer at every other scrape log lost
// and back each time (probe H, PH4).
package grace

import "time"

// Period is how long a failure lasts before it is told.
const Period = time.Second

// Holds are, by key, when the failures not told yet were first seen. The
// caller serializes access, and deletes a key once its failure ends or is
// told.
type Holds map[string]time.Time

// Hold says whether the failure of key, seen at now, is still held back:
// from its first sight until Period has passed.
func (h *Holds) Hold(key string, now time.Time) bool {
	if *h == nil {
		*h = Holds{}
	}
	since, seen := (*h)[key]
	if !seen {
		(*h)[key] = now
		return true
	}
	return now.Sub(since) < Period
}
