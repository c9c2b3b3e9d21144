package quant

import (
	"fmt"
	"testing"
)

// TestMatMulRowBlocks runs MatMul on matrices spanning several row blocks of matmulBlockBytes
// (with a partial last block) with the Go and the assembly kernels, checking every output against
// the kernel called directly with the same token grouping (so the results must be identical) and
// that nothing outside the row range is written.
func TestMatMulRowBlocks(t *testing.T) {
	const sentinel = float32(-54321)
	cases := []struct {
		typ   Type
		k     int
		nRows int
	}{
		{F32, 6000, 23},   // 4 rows per block
		{Q8_0, 2048, 97},  // 45 rows per block
		{Q4_0, 4096, 90},  // 42 rows per block
		{F16, 4104, 37},   // 11 rows per block, k not a multiple of 16
		{Q5_1, 2048, 140}, // 64 rows per block
		{Q3_K, 4096, 120}, // 55 rows per block
	}
	shapes := []struct {
		nTok, r0, r1, stride int
	}{
		{1, 0, -1, 0},
		{4, 0, -1, 0},
		{9, 0, -1, 3},
		{17, 5, -3, 1},
		{6, 7, 9, 0}, // range narrower than a group
		{5, 2, 3, 0}, // single row
	}
	for _, c := range cases {
		f := newMatmulFixture(t, c.typ, c.k, c.nRows, 17)
		if blocks := c.nRows * f.rowBytes / matmulBlockBytes; blocks < 2 {
			t.Fatalf("%v: only %d row blocks", c.typ, blocks)
		}
		for _, impl := range benchImpls {
			dot := impl.get(c.typ)
			if dot == nil {
				continue
			}
			for _, sh := range shapes {
				r1 := sh.r1
				if r1 < 0 {
					r1 += c.nRows + 1
				}
				stride := c.nRows + sh.stride
				t.Run(fmt.Sprintf("%v/%s/tok=%d/rows=%d-%d", c.typ, impl.name, sh.nTok, sh.r0, r1), func(t *testing.T) {
					out := make([]float32, (sh.nTok-1)*stride+c.nRows)
					for i := range out {
						out[i] = sentinel
					}
					MatMul(dot, c.typ, c.k, f.w, f.xq, sh.nTok, out, stride, sh.r0, r1)
					group := min(MaxCols, r1-sh.r0)
					var want [MaxCols]float32
					for i, v := range out {
						tok, r := i/stride, i%stride
						if tok >= sh.nTok || r < sh.r0 || r >= r1 {
							if v != sentinel {
								t.Fatalf("out[%d] (tok %d, row %d) outside the range was written", i, tok, r)
							}
							continue
						}
						t0 := tok / group * group
						nx := min(group, sh.nTok-t0)
						dot(c.k, f.w[r*f.rowBytes:(r+1)*f.rowBytes], f.xq[t0*f.xRow:], f.xRow, nx, want[:])
						if w := want[tok-t0]; v != w {
							t.Fatalf("tok %d row %d: %v, want %v", tok, r, v, w)
						}
					}
				})
			}
		}
	}
}

// TestMatMulAsmNoAlloc checks that MatMul with the assembly kernels and many token groups does not
// allocate.
func TestMatMulAsmNoAlloc(t *testing.T) {
	for _, typ := range []Type{Q4_0, F16} {
		dot := requireAsm(t, typ)
		f := newMatmulFixture(t, typ, 1024, 70, 11)
		out := make([]float32, 11*70)
		if n := testing.AllocsPerRun(10, func() { MatMul(dot, typ, 1024, f.w, f.xq, 11, out, 70, 3, 70) }); n != 0 {
			t.Errorf("%v: MatMul allocates %v times per call", typ, n)
		}
	}
}
