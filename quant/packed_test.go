package quant

import (
	"fmt"
	"math"
	"testing"

	"ubatch/internal/cpu"
)

// hasPanelAsm reports whether the selected kernel path runs assembly panel kernels (the amd64
// paths), which the tests then compare with the Go twins.
func hasPanelAsm() bool { return types[Q8_0].kernels.panelPath[cpu.Selected()] != cpu.Go }

// Tests of packed weights on every platform: PackRows and the Go panel kernel against the
// single-row Go kernel on the unpacked rows.

// packFixture packs f's weights (nRows a multiple of 8).
func packFixture(t testing.TB, f *matmulFixture) []byte {
	t.Helper()
	p := make([]byte, len(f.w))
	if err := PackRows(f.typ, f.k, p, f.w); err != nil {
		t.Fatal(err)
	}
	return p
}

// packTol bounds |packed - Go kernel|: the panels sum the same exact integer block products in
// another order (per block, then over blocks), so only float32 rounding differs.
func packTol(f *matmulFixture, r, tok int) float64 {
	var mag float64
	w, x := f.w[r*f.rowBytes:(r+1)*f.rowBytes], f.xq[tok*f.xRow:(tok+1)*f.xRow]
	for b := 0; b < f.k/32; b++ {
		bw, bx := w[b*f.typ.TypeSize():], x[b*q8_0Bytes:]
		for i := 0; i < 32; i++ {
			q := panelQuantRow(f.typ, bw, i)
			mag += math.Abs(float64(rowScale(f.typ, bw)) * float64(f16At(bx)) * float64(q) * float64(int8(bx[2+i])))
		}
	}
	return 1e-5*mag + 1e-30
}

// panelQuantRow is element i of a file-layout Q4_0, Q8_0 or MXFP4 block as an integer weight.
func panelQuantRow(wt Type, blk []byte, i int) int32 {
	if wt == Q8_0 {
		return int32(int8(blk[2+i]))
	}
	sb := q32ScaleBytes(wt)
	v := blk[sb+i%16]
	if i >= 16 {
		v >>= 4
	}
	if wt == MXFP4 {
		return int32(mxfp4Values[v&0xf])
	}
	return int32(v&0xf) - 8
}

// rowScale is the scale of a file-layout Q4_0, Q8_0 or MXFP4 block.
func rowScale(wt Type, blk []byte) float32 {
	if wt == MXFP4 {
		return e8m0Half(blk[0])
	}
	return f16At(blk)
}

func TestPackRowsErrors(t *testing.T) {
	cases := []struct {
		name     string
		wt       Type
		k        int
		src, dst int
	}{
		{"F16 weights", F16, 32, 8 * 64, 8 * 64},
		{"partial block", Q8_0, 48, 8 * Q8_0.RowSize(32), 8 * Q8_0.RowSize(32)},
		{"seven rows", Q4_0, 64, 7 * Q4_0.RowSize(64), 7 * Q4_0.RowSize(64)},
		{"short dst", Q8_0, 64, 8 * Q8_0.RowSize(64), 8*Q8_0.RowSize(64) - 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := PackRows(c.wt, c.k, make([]byte, c.dst), make([]byte, c.src)); err == nil {
				t.Fatal("no error")
			}
		})
	}
}

// TestPackedLayout checks single elements and scales of a packed panel against the file layout.
func TestPackedLayout(t *testing.T) {
	for _, typ := range []Type{Q4_0, Q8_0, MXFP4} {
		f := newMatmulFixture(t, typ, 96, 16, 1)
		p := packFixture(t, f)
		nb, bb, q0 := 3, 8*typ.TypeSize(), 8*q32ScaleBytes(typ)
		for r := 0; r < 16; r++ {
			panel := p[r/8*8*f.rowBytes:]
			for b := 0; b < nb; b++ {
				blk := f.w[r*f.rowBytes+b*typ.TypeSize():]
				if got, want := panelScale(typ, panel[bb*b:], r%8), rowScale(typ, blk); got != want {
					t.Fatalf("%v row %d block %d: scale %v, want %v", typ, r, b, got, want)
				}
				for i := 0; i < 32; i++ {
					if got, want := panelQuant(typ, panel[bb*b+q0:], r%8, i), panelQuantRow(typ, blk, i); got != want {
						t.Fatalf("%v row %d block %d element %d: %d, want %d", typ, r, b, i, got, want)
					}
				}
			}
		}
	}
}

// packedCase is one MatMulPacked shape: nTok tokens times rows [r0, r1) of an nRows x k matrix,
// the output rows pad floats longer than nRows.
type packedCase struct {
	name        string
	typ         Type
	k, nRows    int
	nTok        int
	r0, r1, pad int
}

// runMatMulPacked runs MatMulPacked for c with the Go twins and with the CPU's kernels, checking
// every output against the single-row Go kernel within tol and that nothing outside the range is
// written.
func runMatMulPacked(t *testing.T, c packedCase, tol func(f *matmulFixture, r, tok int) float64) {
	const sentinel = float32(-777)
	f := newMatmulFixture(t, c.typ, c.k, c.nRows, c.nTok)
	p := packFixture(t, f)
	stride := c.nRows + c.pad
	for _, asm := range []bool{false, true} {
		t.Run(fmt.Sprintf("%s/asm=%v", c.name, asm), func(t *testing.T) {
			if asm && !hasPanelAsm() {
				t.Skip("no assembly panel kernel on this CPU")
			}
			if !asm {
				defer cpu.Use(cpu.Use(cpu.Go))
			}
			out := make([]float32, (c.nTok-1)*stride+c.nRows)
			for i := range out {
				out[i] = sentinel
			}
			MatMulPacked(c.typ, c.k, p, f.xq, c.nTok, out, stride, c.r0, c.r1)
			// The same with the activation sums computed beforehand, as the runner does.
			sums := make([]int32, SumsLen(c.typ, c.k, c.nTok))
			PanelSums(c.typ, c.k, f.xq, c.nTok, sums)
			out2 := make([]float32, len(out))
			for i := range out2 {
				out2[i] = sentinel
			}
			MatMulPackedSums(c.typ, c.k, p, f.xq, sums, c.nTok, out2, stride, c.r0, c.r1)
			for i := range out {
				if math.Float32bits(out[i]) != math.Float32bits(out2[i]) {
					t.Fatalf("out[%d]: MatMulPackedSums %v, MatMulPacked %v", i, out2[i], out[i])
				}
			}
			for i, v := range out {
				tok, r := i/stride, i%stride
				if tok >= c.nTok || r < c.r0 || r >= c.r1 {
					if v != sentinel {
						t.Fatalf("out[%d] (token %d, row %d) outside the range was written", i, tok, r)
					}
					continue
				}
				want := f.want(r, tok)
				if d, tl := math.Abs(float64(v)-float64(want)), tol(f, r, tok); !(d <= tl) {
					t.Fatalf("token %d row %d: %v, want %v (|diff| %.3g > %.3g)", tok, r, v, want, d, tl)
				}
			}
		})
	}
}

// TestMatMulPacked runs MatMulPacked with the CPU's kernel and with the Go twin over token counts
// that leave partial groups, several panel blocks and row ranges, against the Go row kernel.
func TestMatMulPacked(t *testing.T) {
	for _, c := range packedCases() {
		runMatMulPacked(t, c, packTol)
	}
}

// packedCases are the Q8_0, Q4_0 and MXFP4 shapes of the MatMulPacked tests: one token, token counts
// that leave partial groups, several panel blocks, row ranges, and activation sums in chunks.
func packedCases() []packedCase {
	return []packedCase{
		{"q8 one token", Q8_0, 256, 24, 1, 0, 24, 0},
		{"q4 one token", Q4_0, 256, 24, 1, 0, 24, 0},
		{"q8 partial groups", Q8_0, 2048, 40, 7, 8, 40, 3},
		{"q4 partial groups", Q4_0, 2048, 40, 7, 8, 40, 3},
		{"q8 several panel blocks", Q8_0, 1024, 272, 5, 0, 272, 0},
		{"q4 several panel blocks", Q4_0, 2048, 272, 6, 16, 264, 1},
		{"q8 sums in chunks", Q8_0, 5632, 16, 97, 0, 16, 0},
		{"q4 sums in chunks", Q4_0, 5632, 16, 97, 0, 16, 0},
		{"q8 small sums", Q8_0, 32, 8, 100, 0, 8, 0},
		{"q4 small sums", Q4_0, 32, 8, 100, 0, 8, 0},
		{"mxfp4 one token", MXFP4, 256, 24, 1, 0, 24, 0},
		{"mxfp4 partial groups", MXFP4, 2048, 40, 7, 8, 40, 3},
		{"mxfp4 several panel blocks", MXFP4, 2048, 272, 6, 16, 264, 1},
		{"mxfp4 sums in chunks", MXFP4, 5632, 16, 97, 0, 16, 0},
		{"mxfp4 small sums", MXFP4, 32, 8, 100, 0, 8, 0},
	}
}

func TestMatMulPackedNoAlloc(t *testing.T) {
	if !noescapeHides {
		t.Skip("no noescape assembly here: MatMulPacked's activation sums escape (noescape.go)")
	}
	for _, typ := range []Type{Q4_0, Q8_0, Q4_K, Q6_K, MXFP4} {
		for _, nTok := range []int{1, 9, 200} {
			f := newMatmulFixture(t, typ, 2048, 16, nTok)
			p := packFixture(t, f)
			out := make([]float32, nTok*16)
			if n := testing.AllocsPerRun(5, func() { MatMulPacked(typ, 2048, p, f.xq, nTok, out, 16, 0, 16) }); n != 0 {
				t.Errorf("%v %d tokens: MatMulPacked allocates %v times per call", typ, nTok, n)
			}
			sums := make([]int32, SumsLen(typ, 2048, nTok))
			if n := testing.AllocsPerRun(5, func() {
				PanelSums(typ, 2048, f.xq, nTok, sums)
				MatMulPackedSums(typ, 2048, p, f.xq, sums, nTok, out, 16, 0, 16)
			}); n != 0 {
				t.Errorf("%v %d tokens: PanelSums and MatMulPackedSums allocate %v times per call", typ, nTok, n)
			}
		}
	}
}

func TestMatMulPackedPanics(t *testing.T) {
	f := newMatmulFixture(t, Q8_0, 64, 16, 2)
	p := packFixture(t, f)
	fk := newMatmulFixture(t, Q4_K, 512, 16, 2)
	pk := packFixture(t, fk)
	cases := []struct {
		name   string
		typ    Type
		k      int
		r0, r1 int
		w, xq  []byte
	}{
		{"F32 weights", F32, 64, 0, 16, p, f.xq},
		{"range not whole panels", Q8_0, 64, 4, 16, p, f.xq},
		{"short weights", Q8_0, 64, 0, 16, p[:len(p)-1], f.xq},
		{"Q5_K weights", Q5_K, 512, 0, 16, pk, fk.xq},
		{"partial super-block", Q4_K, 480, 0, 16, pk, fk.xq},
		{"K-quant range not whole panels", Q4_K, 512, 0, 12, pk, fk.xq},
		{"short K-quant weights", Q4_K, 512, 0, 16, pk[:len(pk)-1], fk.xq},
		{"short K-quant activations", Q4_K, 512, 0, 16, pk, fk.xq[:len(fk.xq)-1]},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			mustPanic(t, c.name, func() { MatMulPacked(c.typ, c.k, c.w, c.xq, 2, make([]float32, 32), 16, c.r0, c.r1) })
		})
	}
	t.Run("short sums", func(t *testing.T) {
		f := newMatmulFixture(t, Q4_0, 64, 16, 5)
		p := packFixture(t, f)
		sums := make([]int32, SumsLen(Q4_0, 64, 5)-1)
		mustPanic(t, "short sums", func() { MatMulPackedSums(Q4_0, 64, p, f.xq, sums, 5, make([]float32, 80), 16, 0, 16) })
	})
}
