//go:build !amd64

package quant

// No assembly here: hasAVX2 is always false, so this is never called.
func quantizeQ8_0AVX2([]float32, []byte) { panic("quant: no assembly Q8_0 quantizer") }
