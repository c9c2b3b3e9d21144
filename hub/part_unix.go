//go:build unix

package hub

import (
	"errors"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// lockPart takes an exclusive flock on a part file for as long as it stays open. The kernel drops
// the lock when the process dies, however it dies, which is what marks a part file stale.
func lockPart(f *os.File) error {
	return unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
}

// partInUse reports whether a live download holds the part file at p: whether its lock is taken.
func partInUse(p string, _ time.Duration) bool {
	f, err := os.Open(p)
	if err != nil {
		return false
	}
	defer f.Close() // also releases the lock taken just below, if it was free
	return errors.Is(unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB), unix.EWOULDBLOCK)
}
