//go:build !unix

package mem

// Alloc returns n zeroed bytes (from the Go heap on this platform).
func Alloc(n int) ([]byte, error) { return make([]byte, n), nil }

// Free drops memory from Alloc (the garbage collector reclaims it here).
func Free([]byte) error { return nil }

// Release does nothing on this platform.
func Release([]byte) {}
