//go:build unix

package mem

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestReleaseKeepsContents releases pages of a read-only file mapping and reads them back.
func TestReleaseKeepsContents(t *testing.T) {
	data := make([]byte, 5*os.Getpagesize()+123)
	for i := range data {
		data[i] = byte(i*7 + 1)
	}
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := unix.Mmap(int(f.Fd()), 0, len(data), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	Release(m[100:])
	Release(m[:0])
	for i := range data {
		if m[i] != data[i] {
			t.Fatalf("byte %d = %d after Release, want %d", i, m[i], data[i])
		}
	}
}
