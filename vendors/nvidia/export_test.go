package nvidia

import "time"

// SetRegisterTimeout sets registerTimeout for a test and returns the old one.
func SetRegisterTimeout(d time.Duration) time.Duration {
	old := registerTimeout
	registerTimeout = d
	return old
}
