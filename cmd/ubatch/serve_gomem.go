package main

import (
	"io/fs"
	"runtime/debug"
)

// minGoLimit is the smallest Go memory limit serve sets: below the heap a server needs to parse
// requests, a limit would only make the collector run without end.
const minGoLimit = 256 << 20

// goMemLimit is the soft memory limit serve gives the Go runtime (debug.SetMemoryLimit), so that
// the heap a burst of large requests grew goes back to the system before the process reaches its
// cgroup's cap, and the collector works harder as it nears it: the cgroup's memory limit (read
// under root) less outside, what lives outside the Go heap (the models' weights, mapped or
// packed, and their KV pools), less a sixteenth of the limit for stacks and the runtime's own.
// --mem-limit alone sets nothing: it bounds the KV cache and models, not the process. ok is false,
// leaving the runtime's default, when GOMEMLIMIT is set (goMemLimitEnv: the operator's), when
// there is no cgroup limit, or when less than minGoLimit would be left.
func goMemLimit(root fs.FS, outside int64, goMemLimitEnv string) (limit int64, ok bool) {
	if goMemLimitEnv != "" {
		return 0, false
	}
	cap, _, found := cgroupMemory(root)
	if !found {
		return 0, false
	}
	limit = cap - max(outside, 0) - cap/16
	return limit, limit >= minGoLimit
}

// setGoMemLimit applies goMemLimit and says what it set (0: nothing).
func setGoMemLimit(root fs.FS, outside int64, goMemLimitEnv string) int64 {
	limit, ok := goMemLimit(root, outside, goMemLimitEnv)
	if !ok {
		return 0
	}
	debug.SetMemoryLimit(limit)
	return limit
}
