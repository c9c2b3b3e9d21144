//go:build !unix

package gguf

import (
	"fmt"
	"os"
)

// Open reads the GGUF file at path into memory and parses it (platforms without mmap support
// here). Close releases the File's reference to the image.
func Open(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	f, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, path)
	}
	f.unmap = func() error { return nil }
	return f, nil
}
