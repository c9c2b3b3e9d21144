package main

import (
	"fmt"
	"io/fs"
)

// routeMemLimit is the Go runtime's soft memory limit (debug.SetMemoryLimit) for a process that
// holds no model weights or KV cache (ubatch route), so that the garbage collector gives memory
// back to the system after large requests before the kernel runs out: spec, a size as
// --mem-limit takes it (e.g. 1G), or when spec is empty serve's goMemLimit with nothing outside
// the heap (the cgroup's cap less a sixteenth). 0 means none: no spec and no cgroup limit, or
// GOMEMLIMIT set in the environment (env), which the runtime has applied already.
func routeMemLimit(spec string, root fs.FS, env string) (limit int64, source string, err error) {
	if spec != "" {
		n, err := parseSize(spec)
		if err != nil || n <= 0 {
			return 0, "", fmt.Errorf("--mem-limit %q: want a positive size such as 1G or 512M", spec)
		}
		return n, "--mem-limit", nil
	}
	if limit, ok := goMemLimit(root, 0, env); ok {
		return limit, "the cgroup's memory limit", nil
	}
	return 0, "", nil
}
