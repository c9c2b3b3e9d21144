package quant

import (
	"math/rand/v2"
	"testing"
)

// TestDequantizePackedRow checks every row of a packed matrix against Dequantize of the same row
// in the file layout, for every packable type (bit-exact: both compute the same products).
func TestDequantizePackedRow(t *testing.T) {
	for _, tc := range []struct {
		name string
		typ  Type
		k    int
	}{
		{"q4_0", Q4_0, 64}, {"q8_0", Q8_0, 96}, {"q4_k", Q4_K, 512}, {"q6_k", Q6_K, 256},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, 2))
			const rows = 16
			src := make([]float32, rows*tc.k)
			for i := range src {
				src[i] = float32(r.NormFloat64())
			}
			file := make([]byte, rows*tc.typ.RowSize(tc.k))
			if err := Quantize(tc.typ, src, file); err != nil {
				t.Fatal(err)
			}
			packed := make([]byte, len(file))
			if err := PackRows(tc.typ, tc.k, packed, file); err != nil {
				t.Fatal(err)
			}
			want, got := make([]float32, tc.k), make([]float32, tc.k)
			rb := tc.typ.RowSize(tc.k)
			for row := range rows {
				if err := Dequantize(tc.typ, file[row*rb:(row+1)*rb], want); err != nil {
					t.Fatal(err)
				}
				DequantizePackedRow(tc.typ, tc.k, packed, row, got)
				for i := range want {
					if got[i] != want[i] {
						t.Fatalf("row %d element %d: packed %g, file %g", row, i, got[i], want[i])
					}
				}
			}
		})
	}
}
