//go:build !linux

package ops

import "time"

// threadTime is wall time where there is no per-thread CPU clock here.
func threadTime() time.Duration { return wallClock() }

// ProcessCPU is unknown here: 0.
func ProcessCPU() time.Duration { return 0 }
