//go:build !amd64 && !arm64

package quant

import "unsafe"

// hidePointer returns p. Without assembly here it hides nothing: on these architectures the
// buffers handed to the table's kernels escape (Dot and MatMulPacked allocate), and the
// allocation tests skip (noescapeHides).
func hidePointer(p unsafe.Pointer) unsafe.Pointer { return p }

// noescapeHides reports whether hidePointer hides its argument from escape analysis.
const noescapeHides = false
