//go:build !amd64

package quant

// hasQuantizeAsm says that there is no quantizeQ8_0AVX2 here, so that it is never called.
const hasQuantizeAsm = false

func quantizeQ8_0AVX2([]float32, []byte) { panic("quant: no assembly Q8_0 quantizer") }
