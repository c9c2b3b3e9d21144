package quant

import "unsafe"

// The type table's kernels (types.go) are called through function values, and escape analysis
// assumes that an indirect call keeps whatever its arguments point to: a stack buffer handed to
// one (Dot's result, MatMulPacked's activation sums, a kernel's scratch) would be moved to the
// heap, one allocation per call. Every kernel in the table only reads and writes its arguments
// during the call and keeps nothing (a precondition of setDot and setPanel), so such buffers are
// handed over through noescape, which hides them from escape analysis, as the standard library
// does for the same reason (internal/abi.NoEscape). The buffers are address-taken locals, which
// the compiler neither moves nor shares with other variables while the function runs.

// noescape returns s, which escape analysis then does not see flow into what s is passed to.
func noescape[T any](s []T) []T {
	if len(s) == 0 {
		return nil // not s: escape analysis would see s flow into the result
	}
	return unsafe.Slice((*T)(hidePointer(unsafe.Pointer(&s[0]))), len(s))
}

// noescapePtr is noescape for a pointer.
func noescapePtr[T any](p *T) *T { return (*T)(hidePointer(unsafe.Pointer(p))) }
