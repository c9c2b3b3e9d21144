package ops

import "ubatch/internal/cpu"

// avx2Ops are the ops with AVX2 kernels, which every amd64 path runs (cpu.Path.Lower).
var avx2Ops = []op{opDotF32, opDotF16, opAxpyF32, opAxpyF16, opSwiGLU, opSoftmax,
	opAttnScoresF16, opAttnValuesF16, opAttnScoresQ8, opAttnValuesQ8, opSumWords, opDeltaRule}

// tileOps are the tiled attention's AVX-512 ops, on avx512vnni only.
var tileOps = []op{opTileStep, opTileLoadF16, opTileLoadQ8, opRowStep, opTileLoadKTF16,
	opTileLoadKTF32, opTileLoadKTQ8, opTilePrefetch}

// wantKernels: the amd64 paths' tables for TestKernelTable; the arm64 paths run no amd64
// assembly.
var wantKernels = []kernelCase{
	{name: "avx2", path: cpu.AVX2, asm: onPath(cpu.AVX2, avx2Ops)},
	{name: "avxvnni", path: cpu.AVXVNNI, asm: onPath(cpu.AVX2, avx2Ops)},
	{name: "avxvnni-evex", path: cpu.AVXVNNIEvex, asm: onPath(cpu.AVX2, avx2Ops)},
	{name: "avx512vnni", path: cpu.AVX512VNNI, asm: merge(onPath(cpu.AVX2, avx2Ops), onPath(cpu.AVX512VNNI, tileOps))},
	{name: "neon", path: cpu.NEON},
	{name: "neon-dp", path: cpu.NEONDP},
}
