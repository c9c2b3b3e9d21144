package ops

import "ubatch/internal/cpu"

// sumWordsAsm reports whether SumWords runs its AVX2 loop: wherever the CPU has it, whatever the
// selected kernel path, since ReadBandwidth measures the machine (a slower Go loop could make
// the core, not memory, the limit), and the sum is the same.
var sumWordsAsm = cpu.HasAVX2

// sumWordsAVX2 sums n words at x, n > 0 a multiple of 32.
//
//go:noescape
func sumWordsAVX2(n int, x *uint64) uint64
