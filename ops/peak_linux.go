package ops

import (
	"time"

	"golang.org/x/sys/unix"
)

// threadTime is the calling thread's CPU time.
func threadTime() time.Duration {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
		return wallClock()
	}
	return time.Duration(ts.Nano())
}
