//go:build !amd64 && !arm64

package ops

// DotF32 returns Σ x[i]·y[i] over len(x) elements; len(y) >= len(x).
func DotF32(x, y []float32) float32 { return dotF32Go(x, y) }

// DotF16 returns Σ x[i]·half(y[i]) over len(x) elements; len(y) >= len(x).
func DotF16(x []float32, y []uint16) float32 { return dotF16Go(x, y) }

// AxpyF32 computes y[i] += a·x[i] over len(y) elements.
func AxpyF32(a float32, x, y []float32) { axpyF32Go(a, x, y) }

// AxpyF16 computes y[i] += a·half(x[i]) over len(y) elements.
func AxpyF16(a float32, x []uint16, y []float32) { axpyF16Go(a, x, y) }
