package quant

import (
	"encoding/binary"
	"fmt"
	"math"
	"testing"
)

// Tests of packed Q4_K and Q6_K weights on every platform: PackRows, the layout accessors, and
// MatMulPacked (the CPU's kernel and the Go twin) against the single-row Go kernels.

// kFileLevel is the level of element e (0..255) of a file-layout Q4_K or Q6_K super-block.
func kFileLevel(typ Type, blk []byte, e int) uint8 {
	if typ == Q6_K {
		var l [QK_K]uint8
		q6KLevels(blk, &l)
		return l[e]
	}
	q := blk[16+32*(e/64)+e%32]
	if e%64 >= 32 {
		return q >> 4
	}
	return q & 15
}

// kPackMag is Σ of the magnitudes of all terms of one Q4_K or Q6_K row times one Q8_K row:
// Σ_i |x_i|·(|d·sc·q_i| + |dmin·m|) for Q4_K (scaled levels and mins are separate terms), Σ_i |w_i·x_i|
// for Q6_K. The panels sum the same exact integer products per super-block as the row kernels and
// differ from them only in float32 rounding, far below 1e-5 of this.
func kPackMag(typ Type, k int, w, x []byte) float64 {
	var mag float64
	bs := typ.TypeSize()
	var l [QK_K]uint8
	for b := 0; b < k/QK_K; b++ {
		blk, xb := w[b*bs:(b+1)*bs], x[b*q8_KBytes:(b+1)*q8_KBytes]
		dx := math.Abs(float64(f32At(xb)))
		if typ == Q6_K {
			q6KLevels(blk, &l)
			d := math.Abs(float64(f16At(blk[208:])))
			for e := 0; e < QK_K; e++ {
				sc := float64(int8(blk[192+e/16]))
				mag += d * dx * math.Abs(sc*float64(int(l[e])-32)*float64(int8(xb[4+e])))
			}
			continue
		}
		d, dmin := math.Abs(float64(f16At(blk))), math.Abs(float64(f16At(blk[2:])))
		for e := 0; e < QK_K; e++ {
			sc, m := scaleMinK4(e/32, blk[4:16])
			xa := dx * math.Abs(float64(int8(xb[4+e])))
			mag += xa * (d*float64(sc)*float64(kFileLevel(typ, blk, e)) + dmin*float64(m))
		}
	}
	return mag
}

func TestPackRowsKErrors(t *testing.T) {
	q4, q6 := Q4_K.RowSize(QK_K), Q6_K.RowSize(QK_K)
	cases := []struct {
		name     string
		wt       Type
		k        int
		src, dst int
	}{
		{"Q5_K weights", Q5_K, QK_K, 8 * Q5_K.RowSize(QK_K), 8 * Q5_K.RowSize(QK_K)},
		{"q4k partial super-block", Q4_K, 384, 8 * q4, 8 * q4},
		{"q6k no elements", Q6_K, 0, 8 * q6, 8 * q6},
		{"q4k seven rows", Q4_K, QK_K, 7 * q4, 7 * q4},
		{"q6k nine rows", Q6_K, QK_K, 9 * q6, 9 * q6},
		{"q6k short dst", Q6_K, QK_K, 8 * q6, 8*q6 - 1},
		{"q4k long dst", Q4_K, QK_K, 8 * q4, 16 * q4},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := PackRows(c.wt, c.k, make([]byte, c.dst), make([]byte, c.src)); err == nil {
				t.Fatal("no error")
			}
		})
	}
}

func TestCanPackK(t *testing.T) {
	cases := []struct {
		name    string
		wt      Type
		k, rows int
		want    bool
	}{
		{"q4k", Q4_K, 2048, 2048, true},
		{"q6k", Q6_K, 5632, 16, true},
		{"q4k partial super-block", Q4_K, 2048 + 32, 16, false},
		{"q6k rows not panels", Q6_K, 2048, 12, false},
		{"q5k", Q5_K, 2048, 16, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := CanPack(c.wt, c.k, c.rows); got != (c.want && hasPanelAsm()) {
				t.Fatalf("CanPack = %v, want %v (panel kernels: %v)", got, c.want && hasPanelAsm(), hasPanelAsm())
			}
		})
	}
}

// TestPackedKLayout checks every level, scale, min and super-scale of packed Q4_K and Q6_K panels
// against the file layout, through the accessors the Go twins use.
func TestPackedKLayout(t *testing.T) {
	cases := []struct {
		name string
		typ  Type
	}{{"Q4_K", Q4_K}, {"Q6_K", Q6_K}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			const k, nRows = 3 * QK_K, 16
			f := newMatmulFixture(t, c.typ, k, nRows, 1)
			w := append([]byte(nil), f.w...)
			for i := range w[:len(w)/2] { // rows 0-7 random bytes: every bit pattern of the scales
				w[i] = byte(i*167 + i>>3)
			}
			p := make([]byte, len(w))
			if err := PackRows(c.typ, k, p, w); err != nil {
				t.Fatal(err)
			}
			bs := c.typ.TypeSize()
			for r := 0; r < nRows; r++ {
				for b := 0; b < k/QK_K; b++ {
					blk := w[r*f.rowBytes+b*bs : r*f.rowBytes+(b+1)*bs]
					sb := p[r/8*8*f.rowBytes+b*8*bs : r/8*8*f.rowBytes+(b+1)*8*bs]
					rr := r % 8
					where := fmt.Sprintf("row %d super-block %d", r, b)
					if c.typ == Q4_K {
						if got, want := [2]uint16{u16At(sb[2*rr:]), u16At(sb[16+2*rr:])}, [2]uint16{u16At(blk), u16At(blk[2:])}; got != want {
							t.Fatalf("%s: d, dmin %#x, want %#x", where, got, want)
						}
						for s := 0; s < 8; s++ {
							sc, m := q4KPanelScaleMin(sb, rr, s)
							wsc, wm := scaleMinK4(s, blk[4:16])
							if sc != wsc || m != wm {
								t.Fatalf("%s sub-block %d: scale, min %d, %d, want %d, %d", where, s, sc, m, wsc, wm)
							}
						}
					} else {
						if got, want := u16At(sb[2*rr:]), u16At(blk[208:]); got != want {
							t.Fatalf("%s: d %#x, want %#x", where, got, want)
						}
						for g := 0; g < 16; g++ {
							if got, want := q6KPanelScale(sb, rr, g), int8(blk[192+g]); got != want {
								t.Fatalf("%s group %d: scale %d, want %d", where, g, got, want)
							}
						}
					}
					for e := 0; e < QK_K; e++ {
						got := q4KPanelLevel(sb, rr, e)
						if c.typ == Q6_K {
							got = q6KPanelLevel(sb, rr, e)
						}
						if want := kFileLevel(c.typ, blk, e); got != want {
							t.Fatalf("%s element %d: level %d, want %d", where, e, got, want)
						}
					}
				}
			}
		})
	}
}

func u16At(b []byte) uint16 { return binary.LittleEndian.Uint16(b) }

// packedKCases are the Q4_K and Q6_K shapes: every token count up to 9 and 70, row ranges, several
// panel blocks, ffn_down rows.
func packedKCases() []packedCase {
	var cases []packedCase
	for _, typ := range []Type{Q4_K, Q6_K} {
		for _, n := range []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 70} {
			cases = append(cases, packedCase{fmt.Sprintf("%v %d tokens", typ, n), typ, 512, 24, n, 0, 24, n % 3})
		}
		cases = append(cases,
			packedCase{fmt.Sprintf("%v row range", typ), typ, 768, 40, 7, 8, 32, 3},
			packedCase{fmt.Sprintf("%v several panel blocks", typ), typ, 2048, 136, 6, 8, 128, 1},
			packedCase{fmt.Sprintf("%v ffn_down rows", typ), typ, 5632, 24, 5, 8, 24, 0},
		)
	}
	return cases
}

// TestMatMulPackedK runs MatMulPacked on Q4_K and Q6_K panels with the CPU's kernel and with the
// Go twin, against the single-row Go kernels on the unpacked rows.
func TestMatMulPackedK(t *testing.T) {
	for _, c := range packedKCases() {
		runMatMulPacked(t, c, func(f *matmulFixture, r, tok int) float64 {
			return 1e-5*kPackMag(c.typ, c.k, f.w[r*f.rowBytes:], f.xq[tok*f.xRow:]) + 1e-30
		})
	}
}
