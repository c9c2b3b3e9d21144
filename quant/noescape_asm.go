//go:build amd64 || arm64

package quant

import "unsafe"

// hidePointer returns p (noescape_amd64.s, noescape_arm64.s). It is assembly, declared
// go:noescape, because that is the one way Go offers, without vet's complaints about
// uintptr conversions, of telling escape analysis that the result does not depend on p.
//
//go:noescape
func hidePointer(p unsafe.Pointer) unsafe.Pointer

// noescapeHides reports whether hidePointer hides its argument from escape analysis.
const noescapeHides = true
