//go:build !linux

package cputime

import "time"

// Thread is unknown off Linux: 0, false.
func Thread() (time.Duration, bool) { return 0, false }
