//go:build unix

package mem

import "golang.org/x/sys/unix"

// Alloc returns n zeroed bytes outside the Go heap (an anonymous private mapping), page-aligned.
// Free them with Free.
func Alloc(n int) ([]byte, error) {
	if n <= 0 {
		return nil, nil
	}
	return unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
}

// Free returns memory from Alloc to the system; b must not be used afterwards.
func Free(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	return unix.Munmap(b)
}

// Release tells the system that the pages wholly inside b, a part of a read-only file mapping,
// will not be read again soon, so they stop counting towards the process's resident memory. A
// later read faults them back in from the file; the contents do not change.
func Release(b []byte) {
	lo, hi := pageRange(b)
	if hi > lo {
		_ = unix.Madvise(b[lo:hi], unix.MADV_DONTNEED) // advice only: failing costs memory, not correctness
	}
}
