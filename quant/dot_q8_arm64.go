package quant

// NEON kernels for the 32-element block formats Q4_0, Q8_0, Q5_0, IQ4_NL, MXFP4, Q4_1 and Q5_1
// (dotted with Q8_0 activations), one activation row per assembly call (dot_q8_arm64.s). Each
// block's levels are expanded to 32 int8 (nibbles, minus 8 for Q4_0; the fifth bits of
// Q5_0/Q5_1 spread with VTBL and VCMTST; IQ4_NL's and MXFP4's nibbles looked up with VTBL), and the 32 int8 products are
// summed exactly into four int32 lanes, either with widening multiplies and pairwise adds
// (SMULL/SMULL2, SADDLP/SADALP: every ARMv8 CPU) or with SDOT where the CPU has the dot-product
// extension (ARMv8.2 DotProd: Apple M1 and later, Graviton 2 and later, Ampere Altra, Raspberry
// Pi 5; not the Pi 4's Cortex-A72). The lanes are converted to float32 and multiplied by the
// block's scale product d_w·d_x (for Q4_1/Q5_1, d_x·(d_w·dot + m_w·Σx)) with fused
// multiply-adds into four float partial sums, added up at the end of the row. The float sums
// thus run in a different order than the Go twins' (per block, then across blocks), so results
// agree with them to float32 rounding (see kernels_test.go). For nx > 1 the weight row is
// read again per column, from cache.

func init() {
	for _, k := range []struct {
		t          Type
		neon, sdot func(nb int, w, x, c *byte) float32
		c          *byte // the kernels' constants
		blockBytes int   // a constant: types may not be filled yet (init order)
	}{
		{Q4_0, dotQ4_0NEONAsm, dotQ4_0SDOTAsm, nil, q4_0Bytes},
		{Q8_0, dotQ8_0NEONAsm, dotQ8_0SDOTAsm, nil, q8_0Bytes},
		{Q5_0, dotQ5_0NEONAsm, dotQ5_0SDOTAsm, &q5Consts[0], q5_0Bytes},
		{IQ4_NL, dotIQ4NLNEONAsm, dotIQ4NLSDOTAsm, &iq4Table[0], iq4NLBytes},
		{MXFP4, dotMXFP4NEONAsm, dotMXFP4SDOTAsm, &mxfp4Table[0], mxfp4Bytes},
		{Q4_1, dotQ4_1NEONAsm, dotQ4_1SDOTAsm, nil, q4_1Bytes},
		{Q5_1, dotQ5_1NEONAsm, dotQ5_1SDOTAsm, &q5Consts[0], q5_1Bytes},
	} {
		setNEON(k.t, dotQRowsOf(k.neon, k.c, k.blockBytes), dotQRowsOf(k.sdot, k.c, k.blockBytes))
	}
}

//go:noescape
func dotQ8_0NEONAsm(nb int, w, x, c *byte) float32

//go:noescape
func dotQ8_0SDOTAsm(nb int, w, x, c *byte) float32

//go:noescape
func dotQ4_0NEONAsm(nb int, w, x, c *byte) float32

//go:noescape
func dotQ4_0SDOTAsm(nb int, w, x, c *byte) float32

//go:noescape
func dotIQ4NLNEONAsm(nb int, w, x, c *byte) float32

//go:noescape
func dotIQ4NLSDOTAsm(nb int, w, x, c *byte) float32

//go:noescape
func dotMXFP4NEONAsm(nb int, w, x, c *byte) float32

//go:noescape
func dotMXFP4SDOTAsm(nb int, w, x, c *byte) float32

//go:noescape
func dotQ5_0NEONAsm(nb int, w, x, c *byte) float32

//go:noescape
func dotQ5_0SDOTAsm(nb int, w, x, c *byte) float32

//go:noescape
func dotQ4_1NEONAsm(nb int, w, x, c *byte) float32

//go:noescape
func dotQ4_1SDOTAsm(nb int, w, x, c *byte) float32

//go:noescape
func dotQ5_1NEONAsm(nb int, w, x, c *byte) float32

//go:noescape
func dotQ5_1SDOTAsm(nb int, w, x, c *byte) float32

// q5Consts are LOADQ5's constants (dot_q8_arm64.s): the VTBL indexes of the qh byte of elements
// 0-15 and 16-31, then the bit of each element within its byte.
var q5Consts = [48]byte{
	0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
	2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3,
	1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128,
}

// iq4Table is iq4Values as bytes, the VTBL table of the IQ4_NL kernels.
var iq4Table = func() (t [16]byte) {
	for i, v := range iq4Values {
		t[i] = byte(v)
	}
	return t
}()

// mxfp4Table is mxfp4Values as bytes, the VTBL table of the MXFP4 kernels.
var mxfp4Table = func() (t [16]byte) {
	for i, v := range mxfp4Values {
		t[i] = byte(v)
	}
	return t
}()

// dotQRowsOf is the DotFunc whose columns the assembly row computes over blocks of blockBytes,
// with the constants c.
func dotQRowsOf(row func(nb int, w, x, c *byte) float32, c *byte, blockBytes int) DotFunc {
	return func(k int, w, x []byte, xStride, nx int, out []float32) {
		dotQRows(row, c, blockBytes, k, w, x, xStride, nx, out)
	}
}

// dotQRows is the DotFunc body shared by the 32-element block kernels: row computes one column
// over nb blocks of a weight row whose blocks are blockBytes long, with the constants c.
func dotQRows(row func(nb int, w, x, c *byte) float32, c *byte, blockBytes, k int, w, x []byte, xStride, nx int, out []float32) {
	nb := k / 32
	if !checkDotArgs(nb*blockBytes, nb*q8_0Bytes, w, x, xStride, nx, out) {
		return
	}
	if nb == 0 {
		clear(out[:nx])
		return
	}
	for j := 0; j < nx; j++ {
		out[j] = row(nb, &w[0], &x[j*xStride], c)
	}
}
