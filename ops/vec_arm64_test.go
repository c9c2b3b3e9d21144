package ops

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"ubatch/quant"
)

// The NEON vector kernels (vec_arm64.s) against their Go twins on inputs the generic tests
// (vec_test.go, which also hold the fuzz targets FuzzDotF32, FuzzDotF16, FuzzAxpyF32 and
// FuzzAxpyF16 that run the NEON kernels here) do not stress: slices starting at every element
// offset (unaligned addresses), and extreme values: subnormal and largest halves, ±0, huge and
// tiny floats.

func requireNEONVec(t *testing.T) {
	t.Helper()
	if !vecNEON {
		t.Skip("the NEON vector kernels are not in use")
	}
}

// extremeF32s returns n floats mixing ±0, subnormals, and magnitudes from 1e-30 to 1e15 (so that
// products cannot overflow float32).
func extremeF32s(r *rand.Rand, n int) []float32 {
	vals := []float32{0, float32(math.Copysign(0, -1)), 1e-40, -1e-40, 1e-30, 1e15, -1e15, 1, -1}
	x := make([]float32, n)
	for i := range x {
		x[i] = vals[r.IntN(len(vals))] * float32(1+r.Float64())
	}
	return x
}

// extremeF16s returns n halves mixing ±0, subnormals (0x0001-0x03ff), the largest finite
// (±65504) and ordinary values.
func extremeF16s(r *rand.Rand, n int) []uint16 {
	h := make([]uint16, n)
	for i := range h {
		switch r.IntN(4) {
		case 0:
			h[i] = uint16(r.IntN(0x400)) | uint16(r.IntN(2))<<15
		case 1:
			h[i] = 0x7bff | uint16(r.IntN(2))<<15
		default:
			h[i] = quant.F32ToF16(float32(r.NormFloat64()))
		}
	}
	return h
}

func TestVecNEONMatchesGo(t *testing.T) {
	requireNEONVec(t)
	r := rand.New(rand.NewPCG(11, 12))
	for _, tc := range []struct {
		name string
		f32  func(*rand.Rand, int) []float32
		f16  func(*rand.Rand, int) []uint16
	}{
		{"random", randF32s, randF16s},
		{"extreme", extremeF32s, extremeF16s},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, n := range []int{8, 16, 24, 40, 64, 72, 128, 136, 1000} {
				for off := 0; off < 4; off++ { // element offsets: 4-byte (F32) and 2-byte (F16) misalignment
					name := fmt.Sprintf("n=%d off=%d", n, off)
					x, y := tc.f32(r, n+off)[off:], tc.f32(r, n+off)[off:]
					h := tc.f16(r, n+off)[off:]
					checkDot(t, "DotF32 "+name, DotF32(x, y), dotF32Go(x, y), absDotF32(x, y))
					checkDot(t, "DotF16 "+name, DotF16(x, h), dotF16Go(x, h), absDotF16(x, h))

					a := float32(r.NormFloat64())
					got, want := append([]float32(nil), y...), append([]float32(nil), y...)
					AxpyF32(a, x, got)
					axpyF32Go(a, x, want)
					checkAxpy(t, "AxpyF32 "+name, got, want, y, a, func(i int) float32 { return x[i] })
					copy(got, y)
					copy(want, y)
					AxpyF16(a, h, got)
					axpyF16Go(a, h, want)
					checkAxpy(t, "AxpyF16 "+name, got, want, y, a, func(i int) float32 { return quant.F16ToF32(h[i]) })
				}
			}
		})
	}
}

// TestVecNEONLeavesTail checks that the axpy kernels write only y[:len(y)]: the element after
// the slice (in the same backing array) is untouched.
func TestVecNEONLeavesTail(t *testing.T) {
	requireNEONVec(t)
	for _, n := range []int{8, 16, 24, 33} {
		y := make([]float32, n+1)
		y[n] = 42
		x := make([]float32, n+1)
		h := make([]uint16, n+1)
		for i := range x {
			x[i], h[i] = 1, quant.F32ToF16(1)
		}
		AxpyF32(1, x, y[:n])
		AxpyF16(1, h, y[:n])
		if y[n] != 42 || y[0] != 2 || y[n-1] != 2 {
			t.Errorf("n=%d: y[0]=%v y[n-1]=%v y[n]=%v, want 2, 2, 42", n, y[0], y[n-1], y[n])
		}
	}
}
