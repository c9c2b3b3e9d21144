package quant

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// checkPanelK compares the assembly Q4_K/Q6_K panel kernel with its Go twin on one panel (8 rows
// of file-layout weights w, nb super-blocks, packed here) and nx Q8_K activation rows xStride
// bytes apart, with tolerance 1e-5 of Σ|terms| (kPackMag): both sum the same exact integers per
// super-block and differ in float32 rounding only. It also checks that nothing outside the
// 8 x nx outputs is written.
func checkPanelK(t testing.TB, typ Type, nb int, w, x []byte, xStride, nx, outStride int) {
	t.Helper()
	k := QK_K * nb
	p := make([]byte, len(w))
	if err := PackRows(typ, k, p, w); err != nil {
		t.Fatal(err)
	}
	const sentinel = float32(-3.5)
	n := (nx-1)*outStride + PanelRows + 1
	got, want := make([]float32, n), make([]float32, n)
	for i := range got {
		got[i], want[i] = sentinel, sentinel
	}
	panelAVX2(typ, 1, nb, p, x, xStride, nx, got, outStride, nil)
	if typ == Q4_K {
		panelQ4KGo(nb, p, x, xStride, nx, want, outStride)
	} else {
		panelQ6KGo(nb, p, x, xStride, nx, want, outStride)
	}
	rowBytes := typ.RowSize(k)
	for i := range got {
		j, r := i/outStride, i%outStride
		if j >= nx || r >= PanelRows {
			if got[i] != sentinel {
				t.Fatalf("out[%d] outside the panel was written", i)
			}
			continue
		}
		wv := float64(want[i])
		mag := kPackMag(typ, k, w[r*rowBytes:(r+1)*rowBytes], x[j*xStride:])
		if math.IsNaN(wv) || math.IsInf(wv, 0) || math.IsNaN(mag) || mag > 1e30 {
			continue // NaN or overflowing scales: only the absence of a crash is checked
		}
		if d := math.Abs(float64(got[i]) - wv); !(d <= 1e-5*mag+1e-35) {
			t.Fatalf("%v nb=%d nx=%d row %d column %d: asm %v, Go twin %v (|diff| %.3g, Σ|terms| %.3g)",
				typ, nb, nx, r, j, got[i], want[i], d, mag)
		}
	}
}

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
							checkPanelK(t, tt.typ, nb, w, x, xStride, nx, outStride)
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
	const nb = 2
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			bs := c.typ.TypeSize()
			w := make([]byte, PanelRows*nb*bs)
			for i := range w {
				w[i] = 0xff // levels 15 / 63, 6-bit scales and mins 63, Q6_K scales -1
			}
			for o := 0; o < len(w); o += bs {
				for _, h := range kqF16Offsets(c.typ) {
					binary.LittleEndian.PutUint16(w[o+h:], 0x3c00) // 1.0
				}
				if c.typ == Q6_K {
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
					blk[4+i] = byte(c.xq)
				}
			}
			kqFixBsums(x)
			// Per super-block: Q4_K Σ 63·15·x − 63·x·256 per row; Q6_K −128·31·x·256.
			xs := float64(c.xq) * QK_K
			want := float32(nb * (63*15*xs - 63*xs))
			if c.typ == Q6_K {
				want = float32(nb * -128 * 31 * xs)
			}
			p := make([]byte, len(w))
			if err := PackRows(c.typ, QK_K*nb, p, w); err != nil {
				t.Fatal(err)
			}
			out := make([]float32, MaxCols*PanelRows)
			for nx := 1; nx <= MaxCols; nx++ {
				panelAVX2(c.typ, 1, nb, p, x, nb*q8_KBytes, nx, out, PanelRows, nil)
				for i, v := range out[:nx*PanelRows] {
					if v != want {
						t.Fatalf("nx=%d out[%d] = %v, want %v", nx, i, v, want)
					}
				}
			}
		})
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

// fuzzPanelK packs 8 rows of typ made of arbitrary bytes (f16 scales made finite) and compares
// the assembly panel kernel with its Go twin on activation rows of arbitrary bytes, their scales
// kept finite and not tiny (see kqFuzz) and their bsums made consistent.
func fuzzPanelK(f *testing.F, typ Type) {
	r := rand.New(rand.NewPCG(19, uint64(typ)))
	for _, nb := range []int{1, 2, 3} {
		nx := []int{1, 4, 3}[nb-1]
		w := kqWeights(f, typ, QK_K*nb, PanelRows, nb != 2, r.Uint64())
		x := kqActs(typ, QK_K*nb, nx, Q8_K.RowSize(QK_K*nb), nb == 3, r.Uint64())
		f.Add(append(w, x...), uint8(nx-1))
	}
	f.Fuzz(func(t *testing.T, data []byte, nxb uint8) {
		if !hasPanelAsm() {
			t.Skip("no AVX2")
		}
		nx := 1 + int(nxb)%MaxCols
		nb := min(len(data)/(PanelRows*typ.TypeSize()+nx*q8_KBytes), 6) // the loops do not depend on nb
		if nb == 0 {
			return
		}
		rowBytes, xRow := typ.RowSize(QK_K*nb), Q8_K.RowSize(QK_K*nb)
		w := append([]byte(nil), data[:PanelRows*rowBytes]...)
		x := append([]byte(nil), data[PanelRows*rowBytes:PanelRows*rowBytes+nx*xRow]...)
		for o := 0; o < len(w); o += typ.TypeSize() {
			for _, h := range kqF16Offsets(typ) {
				sanitizeHalf(w[o+h:])
			}
		}
		for o := 0; o < len(x); o += q8_KBytes {
			d := math.Float32frombits(binary.LittleEndian.Uint32(x[o:]))
			if a := math.Abs(float64(d)); !(a == 0 || a >= 1e-20 && a <= 1e4) {
				binary.LittleEndian.PutUint32(x[o:], math.Float32bits(1))
			}
		}
		kqFixBsums(x)
		checkPanelK(t, typ, nb, w, x, xRow, nx, PanelRows+1)
	})
}

func FuzzPanelQ4_K(f *testing.F) { fuzzPanelK(f, Q4_K) }

func FuzzPanelQ6_K(f *testing.F) { fuzzPanelK(f, Q6_K) }
