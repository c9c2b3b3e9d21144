//go:build !unix

package hub

import (
	"os"
	"time"
)

// lockPart does nothing on this platform; partInUse judges by age instead.
func lockPart(*os.File) error { return nil }

// partInUse reports whether the part file at p may belong to a live download: a live download
// writes at least once per idle timeout, or its watchdog aborts it, so a file unchanged for two
// idle timeouts is stale.
func partInUse(p string, idle time.Duration) bool {
	st, err := os.Stat(p)
	return err == nil && time.Since(st.ModTime()) < 2*idle
}
