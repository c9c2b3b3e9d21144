package quant

import "ubatch/internal/cpu"

// The registration of the NEON kernels (dot_*_arm64.go).

// setNEON registers the NEON row dot of t and, unless nil, its SDOT variant (the float kernels
// have no integer products: the neon-dp path runs their NEON kernels, see cpu.Path.Lower).
func setNEON(t Type, neon, sdot DotFunc) {
	setDot(t, cpu.NEON, neon)
	if sdot != nil {
		setDot(t, cpu.NEONDP, sdot)
	}
}

// setNEONRows registers rows with sdot false as the NEON kernel of t and with sdot true as its
// SDOT one. rows is a DotFunc body that picks its assembly with sdot; it calls the assembly
// directly, not through a func value, so that the buffers it hands it stay on the stack.
func setNEONRows(t Type, rows func(sdot bool, k int, w, x []byte, xStride, nx int, out []float32)) {
	setNEON(t,
		func(k int, w, x []byte, xStride, nx int, out []float32) { rows(false, k, w, x, xStride, nx, out) },
		func(k int, w, x []byte, xStride, nx int, out []float32) { rows(true, k, w, x, xStride, nx, out) })
}
