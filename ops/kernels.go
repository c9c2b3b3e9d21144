package ops

import "ubatch/internal/cpu"

// Kernel paths (internal/cpu): the selection quant reads too, so that --kernels means one thing
// for every kernel. Each ops entry point with assembly somewhere is an op. Each architecture's
// kernels file (kernels_amd64.go, kernels_arm64.go, kernels_other.go) lists, in opKernels, the
// paths that have an assembly kernel for each op. From that list opPaths resolves once, at
// start, for every path the path whose kernel the op runs. It takes the nearest path at or below
// it that has one (cpu.Resolve), as quant's type table does, else cpu.Go, the Go twin. An
// entry point then branches on opPaths[cpu.Selected()][op]: two loads and a predictable branch.

// op names an ops entry point that has an assembly kernel on some path.
type op uint8

const (
	opDotF32 op = iota
	opDotF16
	opAxpyF32
	opAxpyF16
	opSwiGLU
	opSoftmax
	opAttnScoresF16
	opAttnValuesF16
	opAttnScoresQ8
	opAttnValuesQ8
	opTileStep // the tiled attention's lane kernel and its tile loads
	opTileLoadF16
	opTileLoadQ8
	opRowStep // the tiled attention's row kernel, its transposed K loads and prefetch
	opTileLoadKTF16
	opTileLoadKTF32
	opTileLoadKTQ8
	opTilePrefetch
	opSumWords  // ReadBandwidth's loop
	opDeltaRule // the gated delta rule's row (DeltaRuleStep)

	numOps
)

var opNames = [numOps]string{opDotF32: "DotF32", opDotF16: "DotF16", opAxpyF32: "AxpyF32",
	opAxpyF16: "AxpyF16", opSwiGLU: "SwiGLU", opSoftmax: "SoftmaxInPlace",
	opAttnScoresF16: "attnScoresF16", opAttnValuesF16: "attnValuesF16",
	opAttnScoresQ8: "attnScoresQ8", opAttnValuesQ8: "attnValuesQ8", opTileStep: "attnTileStep",
	opTileLoadF16: "attnTileLoadF16", opTileLoadQ8: "attnTileLoadQ8", opRowStep: "attnRowStep",
	opTileLoadKTF16: "attnTileLoadKTF16", opTileLoadKTF32: "attnTileLoadKTF32",
	opTileLoadKTQ8: "attnTileLoadKTQ8", opTilePrefetch: "tilePrefetch", opSumWords: "SumWords",
	opDeltaRule: "DeltaRuleStep"}

func (o op) String() string { return opNames[o] }

// opPaths[p][o] is the path whose kernel op o runs when path p is selected: cpu.Go for its Go
// twin. Resolved once from opKernels; nothing writes it after.
var opPaths = resolveOps(&opKernels)

// resolveOps resolves have (by op, the paths with an assembly kernel) into opPaths' layout.
func resolveOps(have *[numOps][]cpu.Path) (at [cpu.NumPaths][numOps]cpu.Path) {
	for o := range numOps {
		for p, q := range cpu.Resolve(have[o]...) {
			at[p][o] = q
		}
	}
	return at
}

// kernelPath is the path whose kernel o runs on the selected path (cpu.Go: its Go twin).
func kernelPath(o op) cpu.Path { return opPaths[cpu.Selected()][o] }

// runsAsm reports whether o runs assembly on the selected path (else its Go twin).
func runsAsm(o op) bool { return opPaths[cpu.Selected()][o] != cpu.Go }
