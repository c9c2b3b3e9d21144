package quant

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

var panelKTypes = []struct {
	name string
	typ  Type
}{{"Q4_K", Q4_K}, {"Q6_K", Q6_K}}

func TestPanelKAsmMatchesGo(t *testing.T) {
	if !hasPanelAsm() {
		t.Skip("no AVX2")
	}
	for _, tt := range panelKTypes {
		r := rand.New(rand.NewPCG(17, uint64(tt.typ)))
		for _, nb := range []int{1, 2, 3, 8, 22} {
			for _, raw := range []bool{false, true} {
				w := kqWeights(t, tt.typ, QK_K*nb, PanelRows, raw, r.Uint64())
				for nx := 1; nx <= MaxCols; nx++ {
					xStride := Q8_K.RowSize(QK_K*nb) + r.IntN(40)
					x := kqActs(tt.typ, QK_K*nb, nx, xStride, raw, r.Uint64())
					for _, outStride := range []int{PanelRows, PanelRows + 5, 64} {
						name := fmt.Sprintf("%s/nb=%d/raw=%v/nx=%d/stride=%d", tt.name, nb, raw, nx, outStride)
						t.Run(name, func(t *testing.T) {
							checkPanel(t, tt.typ, nb, w, x, xStride, nx, outStride)
						})
					}
				}
			}
		}
	}
}

// TestPanelKExtremes runs the largest levels, scales and mins against activation quants of -128
// and 127 (the 16-bit sums at their bounds) and checks the exact results.
func TestPanelKExtremes(t *testing.T) {
	if !hasPanelAsm() {
		t.Skip("no AVX2")
	}
	cases := []struct {
		name string
		typ  Type
		xq   int8
	}{
		{"Q4_K -128", Q4_K, -128},
		{"Q4_K 127", Q4_K, 127},
		{"Q6_K -128", Q6_K, -128},
		{"Q6_K 127", Q6_K, 127},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { checkPanelKExtremes(t, c.typ, c.xq, panelAVX2) })
	}
}

// checkPanelKExtremes packs 8 rows of typ with 2 super-blocks of the largest levels, scales and
// mins (Q4_K levels 15, scales and mins 63; Q6_K levels 63, scales -128), runs panel (a panel
// kernel taking typ) on activation quants all xq, for every nx, and checks the exact results.
func checkPanelKExtremes(t *testing.T, typ Type, xq int8, panel func(wt Type, np, nb int, w, x []byte, xStride, nx int, out []float32, outStride int, sums []int32)) {
	t.Helper()
	const nb = 2
	bs := typ.TypeSize()
	w := make([]byte, PanelRows*nb*bs)
	for i := range w {
		w[i] = 0xff // levels 15 / 63, 6-bit scales and mins 63, Q6_K scales -1
	}
	for o := 0; o < len(w); o += bs {
		for _, h := range kqF16Offsets(typ) {
			binary.LittleEndian.PutUint16(w[o+h:], 0x3c00) // 1.0
		}
		if typ == Q6_K {
			for g := 0; g < 16; g++ {
				w[o+192+g] = 0x80 // -128
			}
		}
	}
	x := make([]byte, MaxCols*nb*q8_KBytes)
	for b := 0; b < MaxCols*nb; b++ {
		blk := x[b*q8_KBytes:]
		binary.LittleEndian.PutUint32(blk, math.Float32bits(1))
		for i := 0; i < QK_K; i++ {
			blk[4+i] = byte(xq)
		}
	}
	kqFixBsums(x)
	// Per super-block: Q4_K Σ 63·15·x − 63·x·256 per row; Q6_K −128·31·x·256.
	xs := float64(xq) * QK_K
	want := float32(nb * (63*15*xs - 63*xs))
	if typ == Q6_K {
		want = float32(nb * -128 * 31 * xs)
	}
	p := make([]byte, len(w))
	if err := PackRows(typ, QK_K*nb, p, w); err != nil {
		t.Fatal(err)
	}
	out := make([]float32, MaxCols*PanelRows)
	for nx := 1; nx <= MaxCols; nx++ {
		panel(typ, 1, nb, p, x, nb*q8_KBytes, nx, out, PanelRows, nil)
		for i, v := range out[:nx*PanelRows] {
			if v != want {
				t.Fatalf("nx=%d out[%d] = %v, want %v", nx, i, v, want)
			}
		}
	}
}

func TestPanelKNoAlloc(t *testing.T) {
	if !hasPanelAsm() {
		t.Skip("no AVX2")
	}
	for _, tt := range panelKTypes {
		const nb = 4
		w := kqWeights(t, tt.typ, QK_K*nb, PanelRows, false, 3)
		p := make([]byte, len(w))
		if err := PackRows(tt.typ, QK_K*nb, p, w); err != nil {
			t.Fatal(err)
		}
		x := kqActs(tt.typ, QK_K*nb, MaxCols, Q8_K.RowSize(QK_K*nb), false, 4)
		out := make([]float32, MaxCols*PanelRows)
		for nx := 1; nx <= MaxCols; nx++ {
			if n := testing.AllocsPerRun(10, func() { panelKernel(tt.typ, 1, nb, p, x, Q8_K.RowSize(QK_K*nb), nx, out, PanelRows, nil) }); n != 0 {
				t.Errorf("%s nx=%d: %v allocations per call", tt.name, nx, n)
			}
		}
	}
}

func FuzzPanelQ4_K(f *testing.F) { fuzzPanel(f, Q4_K, 19) }

func FuzzPanelQ6_K(f *testing.F) { fuzzPanel(f, Q6_K, 19) }
