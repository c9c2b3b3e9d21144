package quant

import (
	"fmt"
	"testing"
)

// BenchmarkDot measures each pure-Go DotFunc on one 4096-element weight row; the reported MB/s is
// weight bytes per second (per call, whatever the column count).
func BenchmarkDot(b *testing.B) {
	const k = 4096
	for _, dt := range dotTypes {
		for _, nx := range []int{1, MaxCols} {
			b.Run(fmt.Sprintf("%s/cols=%d", dt.name, nx), func(b *testing.B) {
				f := newMatmulFixture(b, dt.typ, k, 1, nx)
				dot := DotGo(dt.typ)
				var out [MaxCols]float32
				b.SetBytes(int64(f.rowBytes))
				b.ReportAllocs()
				for b.Loop() {
					dot(k, f.w, f.xq, f.xRow, nx, out[:])
				}
			})
		}
	}
}

// BenchmarkMatMul multiplies a 256x1024 weight matrix with 8 tokens; MB/s is weight bytes.
func BenchmarkMatMul(b *testing.B) {
	const k, nRows, nTok = 1024, 256, 8
	for _, typ := range []Type{Q4_0, Q8_0, Q4_K, Q6_K, F16} {
		b.Run(typ.String(), func(b *testing.B) {
			f := newMatmulFixture(b, typ, k, nRows, nTok)
			out := make([]float32, nTok*nRows)
			dot := DotGo(typ)
			b.SetBytes(int64(len(f.w)))
			b.ReportAllocs()
			for b.Loop() {
				MatMul(dot, typ, k, f.w, f.xq, nTok, out, nRows, 0, nRows)
			}
		})
	}
}

func BenchmarkQuantizeAct(b *testing.B) {
	const k = 4096
	x := gaussian(9, k, 1)
	for _, typ := range []Type{Q8_0, Q4_K, F16} {
		b.Run(ActType(typ).String(), func(b *testing.B) {
			dst := make([]byte, ActType(typ).RowSize(k))
			b.SetBytes(4 * k)
			b.ReportAllocs()
			for b.Loop() {
				QuantizeAct(typ, x, dst)
			}
		})
	}
}

func BenchmarkDequantize(b *testing.B) {
	const k = 4096
	x := gaussian(10, k, 1)
	for _, dt := range dotTypes {
		b.Run(dt.name, func(b *testing.B) {
			q := make([]byte, dt.typ.RowSize(k))
			if err := Quantize(dt.typ, x, q); err != nil {
				b.Fatal(err)
			}
			y := make([]float32, k)
			b.SetBytes(int64(len(q)))
			for b.Loop() {
				if err := Dequantize(dt.typ, q, y); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkQuantize(b *testing.B) {
	const k = 4096
	x := gaussian(10, k, 1)
	for _, typ := range []Type{Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, MXFP4} {
		b.Run(typ.String(), func(b *testing.B) {
			q := make([]byte, typ.RowSize(k))
			b.SetBytes(4 * k)
			for b.Loop() {
				if err := Quantize(typ, x, q); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
