//go:build !amd64

package quant

import "ubatch/internal/cpu"

// quantizeQ8Paths resolves every path to the Go twin: there is no quantizeQ8_0AVX2 here.
var quantizeQ8Paths = cpu.Resolve()

func quantizeQ8_0AVX2([]float32, []byte) { panic("quant: no assembly Q8_0 quantizer") }
