package ops

import "ubatch/internal/cpu"

// opKernels lists, by op, the paths with an amd64 assembly kernel (see kernels.go). Every amd64
// path builds on AVX2 (cpu.Path.Lower), so the AVX2 kernels run on all of them; the tiled
// attention's kernels are AVX-512 and run on avx512vnni only (not on avxvnni-evex, whose CPUs
// have AVX-512 but which stands for the avxvnni panel kernels: its ops are avx2's).
var opKernels = [numOps][]cpu.Path{
	opDotF32: {cpu.AVX2}, opDotF16: {cpu.AVX2}, opAxpyF32: {cpu.AVX2}, opAxpyF16: {cpu.AVX2},
	opSwiGLU: {cpu.AVX2}, opSoftmax: {cpu.AVX2},
	opAttnScoresF16: {cpu.AVX2}, opAttnValuesF16: {cpu.AVX2},
	opAttnScoresQ8: {cpu.AVX2}, opAttnValuesQ8: {cpu.AVX2},
	opTileStep: {cpu.AVX512VNNI}, opTileLoadF16: {cpu.AVX512VNNI}, opTileLoadQ8: {cpu.AVX512VNNI},
	opRowStep: {cpu.AVX512VNNI}, opTileLoadKTF16: {cpu.AVX512VNNI},
	opTileLoadKTF32: {cpu.AVX512VNNI}, opTileLoadKTQ8: {cpu.AVX512VNNI},
	opTilePrefetch: {cpu.AVX512VNNI},
	opSumWords:     {cpu.AVX2},
	opDeltaRule:    {cpu.AVX2},
}
