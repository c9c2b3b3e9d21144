package ops

import "ubatch/internal/cpu"

// opKernels lists, by op, the paths with an arm64 assembly kernel (see kernels.go): the NEON
// vector kernels, and attention over F16 and Q8_0 caches built on them (attn_arm64.go). neon-dp
// falls back to them (cpu.Path.Lower); the other ops are the Go twins here.
var opKernels = [numOps][]cpu.Path{
	opDotF32: {cpu.NEON}, opDotF16: {cpu.NEON}, opAxpyF32: {cpu.NEON}, opAxpyF16: {cpu.NEON},
	opAttnScoresF16: {cpu.NEON}, opAttnValuesF16: {cpu.NEON},
	opAttnScoresQ8: {cpu.NEON}, opAttnValuesQ8: {cpu.NEON},
}
