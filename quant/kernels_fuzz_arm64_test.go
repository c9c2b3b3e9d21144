package quant

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// Fuzz targets and benchmarks of the NEON kernels (kernels_arm64_test.go has the helpers).

// fuzzNEON interprets data as one weight row of typ followed by nx activation rows (stride: row
// size plus pad bytes), sanitized to finite scales and Q8_0 activation quants in [-127, 127],
// and compares every variant the CPU supports with the Go twin.
func fuzzNEON(t *testing.T, typ Type, data []byte, nxb, pad uint8) {
	nx := 1 + int(nxb)%MaxCols
	at := ActType(typ)
	wb, xb := typ.TypeSize(), at.TypeSize()
	nb := max(0, (len(data)-nx*int(pad))/(wb+nx*xb))
	k := nb * typ.BlockSize()
	w := append([]byte(nil), data[:nb*wb]...)
	stride := nb*xb + int(pad)
	x := append([]byte(nil), data[nb*wb:]...)
	need := (nx-1)*stride + nb*xb
	x = x[:min(len(x), need)]
	x = append(x, make([]byte, need-len(x))...)
	sanitizeBlocks(typ, w, false)
	for j := 0; j < nx; j++ {
		sanitizeBlocks(at, x[j*stride:j*stride+nb*xb], true)
	}
	for _, v := range []string{"neon", "neon-dp"} {
		if v == "neon-dp" && !hasDotProd {
			continue // the plain NEON variant ran; the test log of TestNEONDispatch says which
		}
		compareNEON(t, neonKernels[v][typ], typ, k, w, x, stride, nx)
	}
}

func addNEONSeeds(f *testing.F, typ Type) {
	r := rand.New(rand.NewPCG(uint64(typ), 3))
	for _, nb := range []int{1, 3, 8} {
		k := nb * typ.BlockSize()
		for _, nx := range []int{1, 4} {
			w := neonWeights(f, r, typ, k)
			x := neonActs(r, typ, k, nx, ActType(typ).RowSize(k))
			f.Add(append(w, x...), uint8(nx-1), uint8(0))
		}
	}
	f.Add([]byte{}, uint8(0), uint8(0))
}

func FuzzDotQ4_0(f *testing.F) {
	addNEONSeeds(f, Q4_0)
	f.Fuzz(func(t *testing.T, data []byte, nx, pad uint8) { fuzzNEON(t, Q4_0, data, nx, pad) })
}

func FuzzDotQ8_0(f *testing.F) {
	addNEONSeeds(f, Q8_0)
	f.Fuzz(func(t *testing.T, data []byte, nx, pad uint8) { fuzzNEON(t, Q8_0, data, nx, pad) })
}

func FuzzDotQ5_0(f *testing.F) {
	addNEONSeeds(f, Q5_0)
	f.Fuzz(func(t *testing.T, data []byte, nx, pad uint8) { fuzzNEON(t, Q5_0, data, nx, pad) })
}

func FuzzDotIQ4_NL(f *testing.F) {
	addNEONSeeds(f, IQ4_NL)
	f.Fuzz(func(t *testing.T, data []byte, nx, pad uint8) { fuzzNEON(t, IQ4_NL, data, nx, pad) })
}

func FuzzDotQ4_1(f *testing.F) {
	addNEONSeeds(f, Q4_1)
	f.Fuzz(func(t *testing.T, data []byte, nx, pad uint8) { fuzzNEON(t, Q4_1, data, nx, pad) })
}

func FuzzDotQ5_1(f *testing.F) {
	addNEONSeeds(f, Q5_1)
	f.Fuzz(func(t *testing.T, data []byte, nx, pad uint8) { fuzzNEON(t, Q5_1, data, nx, pad) })
}

func FuzzDotF32(f *testing.F) {
	addNEONSeeds(f, F32)
	f.Fuzz(func(t *testing.T, data []byte, nx, pad uint8) { fuzzNEON(t, F32, data, nx, pad) })
}

func FuzzDotF16(f *testing.F) {
	addNEONSeeds(f, F16)
	f.Fuzz(func(t *testing.T, data []byte, nx, pad uint8) { fuzzNEON(t, F16, data, nx, pad) })
}

func FuzzDotBF16(f *testing.F) {
	addNEONSeeds(f, BF16)
	f.Fuzz(func(t *testing.T, data []byte, nx, pad uint8) { fuzzNEON(t, BF16, data, nx, pad) })
}

func FuzzDotIQ4_XS(f *testing.F) {
	addNEONSeeds(f, IQ4_XS)
	f.Fuzz(func(t *testing.T, data []byte, nx, pad uint8) { fuzzNEON(t, IQ4_XS, data, nx, pad) })
}

func FuzzDotQ2_K(f *testing.F) {
	addNEONSeeds(f, Q2_K)
	f.Fuzz(func(t *testing.T, data []byte, nx, pad uint8) { fuzzNEON(t, Q2_K, data, nx, pad) })
}

func FuzzDotQ3_K(f *testing.F) {
	addNEONSeeds(f, Q3_K)
	f.Fuzz(func(t *testing.T, data []byte, nx, pad uint8) { fuzzNEON(t, Q3_K, data, nx, pad) })
}

func FuzzDotQ4_K(f *testing.F) {
	addNEONSeeds(f, Q4_K)
	f.Fuzz(func(t *testing.T, data []byte, nx, pad uint8) { fuzzNEON(t, Q4_K, data, nx, pad) })
}

func FuzzDotQ5_K(f *testing.F) {
	addNEONSeeds(f, Q5_K)
	f.Fuzz(func(t *testing.T, data []byte, nx, pad uint8) { fuzzNEON(t, Q5_K, data, nx, pad) })
}

func FuzzDotQ6_K(f *testing.F) {
	addNEONSeeds(f, Q6_K)
	f.Fuzz(func(t *testing.T, data []byte, nx, pad uint8) { fuzzNEON(t, Q6_K, data, nx, pad) })
}

// BenchmarkNEONDot measures each NEON variant on one 4096-element weight row, like BenchmarkDot
// does the Go twins; MB/s is weight bytes per second (per call, whatever the column count).
// Under qemu-user the figures only show relative sanity, not the speed of real hardware.
func BenchmarkNEONDot(b *testing.B) {
	const k = 4096
	for _, v := range []string{"neon", "neon-dp"} {
		for _, typ := range neonTypes {
			for _, nx := range []int{1, MaxCols} {
				b.Run(fmt.Sprintf("%s/%v/cols=%d", v, typ, nx), func(b *testing.B) {
					dot := requireNEON(b, v, typ)
					f := newMatmulFixture(b, typ, k, 1, nx)
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
}
