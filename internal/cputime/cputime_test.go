package cputime

import (
	"runtime"
	"testing"
	"time"
)

// spin burns about d of CPU on the calling thread.
func spin(d time.Duration) (sink int) {
	for start := time.Now(); time.Since(start) < d; {
		for i := range 1000 {
			sink += i
		}
	}
	return sink
}

// TestClocksAdvance: a spin of 50 ms of wall time adds CPU time to the process and, where the
// clocks are known (Process not 0), to the thread, no more than to the process; Linux knows both.
func TestClocksAdvance(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	p0 := Process()
	th0, ok := Thread()
	spin(50 * time.Millisecond)
	p1 := Process()
	th1, ok1 := Thread()
	if ok != ok1 {
		t.Fatalf("Thread known %v, then %v", ok, ok1)
	}
	tests := []struct {
		name   string
		known  bool
		d, max time.Duration
	}{
		{name: "process", known: p1 != 0, d: p1 - p0, max: time.Hour},
		// The clocks tick apart: slack for the process's reading being the coarser.
		{name: "thread", known: ok, d: th1 - th0, max: p1 - p0 + 10*time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.known {
				t.Skip("no such clock here")
			}
			// The spin ran 50 ms of wall time; under load it may have had a few ms of CPU only.
			if tc.d <= 0 || tc.d > tc.max {
				t.Errorf("CPU time over the spin %v, want in (0, %v]", tc.d, tc.max)
			}
		})
	}
	if runtime.GOOS == "linux" && !ok {
		t.Error("no thread clock on Linux")
	}
}
