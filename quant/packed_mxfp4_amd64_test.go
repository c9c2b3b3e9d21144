package quant

import (
	"math"
	"math/rand/v2"
	"testing"

	"ubatch/internal/cpu"
)

// TestMXFP4PanelScales runs the AVX2 MXFP4 panel kernel on panels whose blocks all share one
// scale byte, the subnormal scales (e < 2) included, against the exact float64 dot of the
// dequantized rows, with no absolute slack (see TestMXFP4KernelsScales for the row kernels).
func TestMXFP4PanelScales(t *testing.T) {
	if !hasPanelAsm() {
		t.Skip("no AVX2")
	}
	const nb = 5
	const k = 32 * nb
	for _, e := range []byte{0, 1, 2, 3, 100, 127, 200, 252} {
		r := rand.New(rand.NewPCG(uint64(e), 5))
		w := make([]byte, PanelRows*MXFP4.RowSize(k))
		for i := range w {
			w[i] = byte(r.Uint32())
		}
		for o := 0; o < len(w); o += mxfp4Bytes {
			w[o] = e
		}
		x, xr := mxfp4ScaleActs(r, e, k)
		p := make([]byte, len(w))
		if err := PackRows(MXFP4, k, p, w); err != nil {
			t.Fatal(err)
		}
		sums := make([]int32, sumWords*nb)
		q4SumsGo(nb, x, xr, MaxCols, types[MXFP4].kernels.panel[cpu.AVX2].sumsMul, sums)
		out := make([]float32, MaxCols*PanelRows)
		panelAVX2(MXFP4, 1, nb, p, x, xr, MaxCols, out, PanelRows, sums)
		for row := range PanelRows {
			wd := decodeRow(t, MXFP4, w[row*MXFP4.RowSize(k):], k)
			for j := range MaxCols {
				exact, mag := exactDot(wd, decodeRow(t, Q8_0, x[j*xr:], k))
				if mag == 0 || math.IsInf(mag, 0) {
					t.Fatalf("e=%d row %d column %d: test inputs give Σ|terms| %g", e, row, j, mag)
				}
				got := float64(out[j*PanelRows+row])
				if d := math.Abs(got - exact); d > asmRelTol*mag {
					t.Errorf("e=%d row %d column %d: panel %g, exact %g (|diff| %.3g, Σ|terms| %.3g)",
						e, row, j, got, exact, d, mag)
				}
			}
		}
	}
}
