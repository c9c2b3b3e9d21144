package ops

import "ubatch/internal/cpu"

// asmOn reports whether the selected kernel path runs this package's assembly: AVX2 on amd64
// (every amd64 path builds on it), NEON on arm64; the "go" path (ubatch --kernels go), and every
// other architecture, run the pure-Go twins. The path is internal/cpu's, the one quant reads
// too, so that a path forced for a benchmark or a comparison holds for every kernel. Each family
// (vecAsm, actAsm, attnAsm) says which of its kernels this architecture has.
func asmOn() bool { return cpu.Selected() != cpu.Go }
