package cputime

import (
	"time"

	"golang.org/x/sys/unix"
)

// Thread is the calling thread's CPU time, and whether it is known (the caller locks its
// goroutine to its thread around the two readings it subtracts).
func Thread() (time.Duration, bool) {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
		return 0, false
	}
	return time.Duration(ts.Nano()), true
}
