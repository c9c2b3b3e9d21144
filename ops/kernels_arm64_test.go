package ops

import "ubatch/internal/cpu"

// neonOps are the ops with NEON kernels, which neon-dp runs too (cpu.Path.Lower).
var neonOps = []op{opDotF32, opDotF16, opAxpyF32, opAxpyF16,
	opAttnScoresF16, opAttnValuesF16, opAttnScoresQ8, opAttnValuesQ8}

// wantKernels: the arm64 paths' tables for TestKernelTable; the amd64 paths run no arm64
// assembly.
var wantKernels = []kernelCase{
	{name: "neon", path: cpu.NEON, asm: onPath(cpu.NEON, neonOps)},
	{name: "neon-dp", path: cpu.NEONDP, asm: onPath(cpu.NEON, neonOps)},
	{name: "avx2", path: cpu.AVX2},
	{name: "avx512vnni", path: cpu.AVX512VNNI},
}
