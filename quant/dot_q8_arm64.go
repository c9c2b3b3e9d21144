package quant

import "golang.org/x/sys/cpu"

// NEON kernels for the 32-element block formats Q4_0 and Q8_0 (both dotted with Q8_0
// activations), one activation row per assembly call (dot_q8_arm64.s). Per block the 32 int8
// products are summed exactly into four int32 lanes, either with widening multiplies and
// pairwise adds (SMULL/SMULL2, SADDLP/SADALP: every ARMv8 CPU) or with SDOT where the CPU has
// the dot-product extension (ARMv8.2 DotProd: Apple M1 and later, Graviton 2 and later, Ampere
// Altra, Raspberry Pi 5; not the Pi 4's Cortex-A72). The lanes are converted to float32 and
// multiplied by the block's scale product d_w·d_x with one fused multiply-add into four float
// partial sums, added up at the end of the row. The float sums thus run in a different order
// than the Go twins' (per block, then across blocks), so results agree with them to float32
// rounding (see kernels_arm64_test.go). For nx > 1 the weight row is read again per column,
// from cache.

// hasDotProd reports whether the CPU has the ARMv8.2 dot-product instructions (SDOT).
var hasDotProd = cpu.ARM64.HasASIMDDP

// neonKernels lists the DotFuncs of each arm64 integer-dot variant by weight type; the tests
// run every variant the CPU supports.
var neonKernels = map[string]map[Type]DotFunc{
	"neon":    {Q4_0: dotQ4_0NEON, Q8_0: dotQ8_0NEON, Q4_K: dotQ4_KNEON, Q5_K: dotQ5_KNEON, Q6_K: dotQ6_KNEON},
	"neon-dp": {Q4_0: dotQ4_0SDOT, Q8_0: dotQ8_0SDOT, Q4_K: dotQ4_KSDOT, Q5_K: dotQ5_KSDOT, Q6_K: dotQ6_KSDOT},
}

func init() {
	// NEON (ASIMD) is part of every arm64 CPU Go runs on.
	v := "neon"
	if hasDotProd {
		v = "neon-dp"
	}
	for t, k := range neonKernels[v] {
		asmKernels[t] = k
	}
	asmName = v
}

//go:noescape
func dotQ8_0NEONAsm(nb int, w, x *byte) float32

//go:noescape
func dotQ8_0SDOTAsm(nb int, w, x *byte) float32

//go:noescape
func dotQ4_0NEONAsm(nb int, w, x *byte) float32

//go:noescape
func dotQ4_0SDOTAsm(nb int, w, x *byte) float32

func dotQ8_0NEON(k int, w, x []byte, xStride, nx int, out []float32) {
	dotQRows(dotQ8_0NEONAsm, q8_0Bytes, k, w, x, xStride, nx, out)
}

func dotQ8_0SDOT(k int, w, x []byte, xStride, nx int, out []float32) {
	dotQRows(dotQ8_0SDOTAsm, q8_0Bytes, k, w, x, xStride, nx, out)
}

func dotQ4_0NEON(k int, w, x []byte, xStride, nx int, out []float32) {
	dotQRows(dotQ4_0NEONAsm, q4_0Bytes, k, w, x, xStride, nx, out)
}

func dotQ4_0SDOT(k int, w, x []byte, xStride, nx int, out []float32) {
	dotQRows(dotQ4_0SDOTAsm, q4_0Bytes, k, w, x, xStride, nx, out)
}

// dotQRows is the DotFunc body shared by the 32-element block kernels: row computes one column
// over nb blocks of a weight row whose blocks are blockBytes long.
func dotQRows(row func(nb int, w, x *byte) float32, blockBytes, k int, w, x []byte, xStride, nx int, out []float32) {
	nb := k / 32
	if !checkDotArgs(nb*blockBytes, nb*q8_0Bytes, w, x, xStride, nx, out) {
		return
	}
	if nb == 0 {
		clear(out[:nx])
		return
	}
	for j := 0; j < nx; j++ {
		out[j] = row(nb, &w[0], &x[j*xStride])
	}
}

// checkDotArgs panics with an index error unless w holds rowBytes bytes, each of the nx columns
// x[j*xStride:] holds xRow bytes and out holds nx floats, or if nx > MaxCols; the assembly reads
// exactly these ranges, so this is what keeps it in bounds. It reports whether there is anything
// to compute (nx >= 1; like the Go twins, nx <= 0 computes nothing). (The amd64 twin of this
// function is in dot_q8_amd64.go.)
func checkDotArgs(rowBytes, xRow int, w, x []byte, xStride, nx int, out []float32) bool {
	if nx > MaxCols {
		var cols [MaxCols]float32
		_ = cols[nx-1] // index error, like the Go twins' accumulator arrays
	}
	// Indexes, not slice expressions: slicing may run up to the capacity.
	if rowBytes > 0 {
		_ = w[rowBytes-1]
	}
	if nx < 1 {
		return false
	}
	_ = out[nx-1]
	if xRow > 0 {
		for j := 0; j < nx; j++ {
			_ = x[j*xStride]
			_ = x[j*xStride+xRow-1]
		}
	}
	return true
}
