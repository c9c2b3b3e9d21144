//go:build unix

package gguf

import (
	"fmt"
	"math"
	"os"

	"golang.org/x/sys/unix"
)

// Open memory-maps the GGUF file at path read-only and parses it. Tensor data is not copied: it
// is paged in from the mapping on first use. Call Close to unmap.
func Open(path string) (*File, error) {
	fd, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	// The mapping stays valid after the descriptor is closed.
	defer fd.Close()
	st, err := fd.Stat()
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("gguf: %s is not a regular file", path)
	}
	size := st.Size()
	if size == 0 {
		return nil, fmt.Errorf("gguf: %s is empty", path)
	}
	if size > math.MaxInt {
		return nil, fmt.Errorf("gguf: %s is too large to map (%d bytes)", path, size)
	}
	data, err := unix.Mmap(int(fd.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("gguf: mmap %s: %w", path, err)
	}
	f, err := Parse(data)
	if err != nil {
		unix.Munmap(data)
		return nil, fmt.Errorf("%w (in %s)", err, path)
	}
	f.unmap = func() error { return unix.Munmap(data) }
	return f, nil
}
