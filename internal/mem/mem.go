// Package mem allocates large buffers outside the Go heap and releases pages of file mappings, for
// weights that are rearranged at load time: the garbage collector never scans or counts them, and
// the file's copy stops occupying memory once it has been rearranged.
package mem

import (
	"os"
	"unsafe"
)

// pageRange returns the offsets [lo, hi) of the pages that lie wholly inside b.
func pageRange(b []byte) (lo, hi int) {
	if len(b) == 0 {
		return 0, 0
	}
	page := uintptr(os.Getpagesize())
	start := uintptr(unsafe.Pointer(&b[0]))
	first := (start + page - 1) &^ (page - 1)
	last := (start + uintptr(len(b))) &^ (page - 1)
	if last <= first {
		return 0, 0
	}
	return int(first - start), int(last - start)
}
