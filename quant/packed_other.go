//go:build !amd64

package quant

import "ubatch/internal/cpu"

// q4SumsPaths resolves every path to the Go twin: there is no q4Sums assembly here.
var q4SumsPaths = cpu.Resolve()

func q4Sums(int, []byte, int, int, int32, []int32) { panic("quant: no assembly panel kernel") }
