package quant_test

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"ubatch/internal/testdata"
	"ubatch/quant"
)

// TestMXFP4File checks the MXFP4 experts llama.cpp's quantizer wrote into
// shared/models/arch/synth-gpt-oss-mxfp4.gguf (12 tensors: ffn_{gate,up,down}_exps of 4 layers,
// 8 experts each):
//   - every non-zero block has a code of magnitude 8 or 12 (4 or 6 in E2M1): ggml's scale choice
//     puts the block's largest value in [8, 16) scale steps, so a misread scale byte or nibble
//     order would show;
//   - Quantize on the dequantized values gives llama.cpp's bytes back, all of them (the reference
//     quantizer is idempotent on its own output), which a wrong factor of two in the scale, a
//     wrong table or nibble order breaks;
//   - the gate and up experts have the standard deviation the file was made with (3/sqrt(256),
//     shared/README.md) within 10%: a scale off by the E8M0 half factor is off by 2x;
//   - the rows dotted through Kernel(MXFP4) (the assembly where the CPU has it) and MatMul with
//     Q8_0 activations equal the float64 dot of the dequantized rows and activations within
//     1e-5 of Σ|terms|, and the dot with the unquantized F32 activations within 2% relative RMS
//     over a tensor (the Q8_0 rounding of the activations).
func TestMXFP4File(t *testing.T) {
	f := openModel(t, "arch/synth-gpt-oss-mxfp4.gguf")
	n := 0
	for i := range f.Tensors {
		ti := &f.Tensors[i]
		if ti.Type != quant.MXFP4 {
			continue
		}
		n++
		t.Run(ti.Name, func(t *testing.T) {
			k := int(ti.Dims[0])
			elems := int(ti.NumElements())
			rows := elems / k
			data := ti.Data[:quant.MXFP4.RowSize(elems)]
			y := make([]float32, elems)
			if err := quant.Dequantize(quant.MXFP4, data, y); err != nil {
				t.Fatal(err)
			}
			checkMXFP4Blocks(t, data)

			mine := make([]byte, len(data))
			if err := quant.Quantize(quant.MXFP4, y, mine); err != nil {
				t.Fatal(err)
			}
			for i := range mine {
				if mine[i] != data[i] {
					t.Fatalf("requantized byte %d (block %d) is %#x, llama.cpp's %#x", i, i/17, mine[i], data[i])
				}
			}

			if strings.Contains(ti.Name, "gate_exps") || strings.Contains(ti.Name, "up_exps") {
				var ss float64
				for _, v := range y {
					ss += float64(v) * float64(v)
				}
				std, want := math.Sqrt(ss/float64(len(y))), 3/math.Sqrt(256)
				t.Logf("std %.4f (made with %.4f)", std, want)
				if math.Abs(std/want-1) > 0.1 {
					t.Errorf("std %.4f, the file was made with %.4f", std, want)
				}
			}
			checkMXFP4MatMul(t, k, rows, data, y)
		})
	}
	if n != 12 {
		t.Errorf("%d MXFP4 tensors, want 12 (ffn_{gate,up,down}_exps of 4 layers)", n)
	}
}

// checkMXFP4Blocks checks that every block of data with a non-zero code has one of magnitude
// 8 or 12 (codes 6, 7, 14, 15).
func checkMXFP4Blocks(t *testing.T, data []byte) {
	t.Helper()
	for b := 0; b+17 <= len(data); b += 17 {
		nonzero, top := false, false
		for _, q := range data[b+1 : b+17] {
			for _, c := range []byte{q & 0xf, q >> 4} {
				nonzero = nonzero || c&7 != 0
				top = top || c&7 >= 6
			}
		}
		if nonzero && !top {
			t.Fatalf("block %d (scale byte %d) has no code of magnitude 8 or 12: % x", b/17, data[b], data[b+1:b+17])
		}
	}
}

// checkMXFP4MatMul multiplies the rows of data (rows x k MXFP4, dequantized y) with four random
// activation rows through MatMul and Kernel(MXFP4) and checks the results as TestMXFP4File says.
func checkMXFP4MatMul(t *testing.T, k, rows int, data []byte, y []float32) {
	t.Helper()
	const nTok = 4
	r := rand.New(rand.NewPCG(uint64(rows), uint64(k)))
	x := make([]float32, nTok*k)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	xRow := quant.Q8_0.RowSize(k)
	xq := make([]byte, nTok*xRow)
	xd := make([]float32, nTok*k)
	for j := range nTok {
		quant.QuantizeAct(quant.MXFP4, x[j*k:(j+1)*k], xq[j*xRow:])
		if err := quant.Dequantize(quant.Q8_0, xq[j*xRow:(j+1)*xRow], xd[j*k:(j+1)*k]); err != nil {
			t.Fatal(err)
		}
	}
	out := make([]float32, nTok*rows)
	quant.MatMul(quant.Kernel(quant.MXFP4), quant.MXFP4, k, data, xq, nTok, out, rows, 0, rows)
	exactF32 := make([]float32, nTok*rows)
	for j := range nTok {
		for i := range rows {
			w := y[i*k : (i+1)*k]
			var exact, mag, f32 float64
			for e, v := range w {
				exact += float64(v) * float64(xd[j*k+e])
				mag += math.Abs(float64(v) * float64(xd[j*k+e]))
				f32 += float64(v) * float64(x[j*k+e])
			}
			exactF32[j*rows+i] = float32(f32)
			if got := float64(out[j*rows+i]); math.Abs(got-exact) > 1e-5*mag {
				t.Fatalf("row %d token %d (%s kernel): %g, dequantized dot %g (Σ|terms| %g)",
					i, j, quant.KernelName(quant.MXFP4), got, exact, mag)
			}
		}
	}
	e := testdata.RelRMS(out, exactF32)
	t.Logf("%s kernel vs F32 activations: relative RMS %.3g", quant.KernelName(quant.MXFP4), e)
	if e > 0.02 {
		t.Errorf("%s kernel with Q8_0 activations is %.3g (relative RMS) from the F32 dot, want <= 0.02",
			quant.KernelName(quant.MXFP4), e)
	}
}
