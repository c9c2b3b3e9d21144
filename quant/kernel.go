package quant

import "ubatch/internal/cpu"

// Kernel paths (internal/cpu): the instruction sets kernels are written for. The best path the
// CPU has is selected at start-up, for quant and ops alike; SetKernelPath (ubatch --kernels)
// changes it. Every kernel of a type sits in its row of types, in the slot of its path, set by
// the kernel files' init functions; a type without a kernel for the selected path runs the one of
// the nearest path below it (cpu.Path.Lower), down to its Go twin. Those choices are resolved
// whenever a slot is set, so that a call only indexes its row by the selected path.

// panelFunc is a panel kernel (see panelKernel in packed.go): np panels of nb blocks at w times
// nx activation rows, with the activation sums where the type's row says panelSums.
type panelFunc func(np, nb int, w, x []byte, xStride, nx int, out []float32, outStride int, sums []int32)

// panelTwin is the Go twin of a type's panel kernels, for one panel.
type panelTwin func(nb int, w, x []byte, xStride, nx int, out []float32, outStride int)

// panelSlot is one path's panel kernel of a type: run, and the multiplier its activation sums
// are made with (panelSums; 0 where the type takes none).
type panelSlot struct {
	run     panelFunc
	sumsMul int32
}

// typeKernels are a type's assembly kernels by path, and what each path runs.
type typeKernels struct {
	dot   [cpu.NumPaths]DotFunc   // the row dots; nil where a path has none
	panel [cpu.NumPaths]panelSlot // the panel kernels; run nil where a path has none

	// Resolved from the above and the row's twins (resolve): the kernel path p runs, and the
	// path that kernel belongs to (cpu.Go for the twins).
	dotAt     [cpu.NumPaths]DotFunc
	dotPath   [cpu.NumPaths]cpu.Path
	panelAt   [cpu.NumPaths]panelSlot
	panelPath [cpu.NumPaths]cpu.Path
}

// setDot makes k the row dot of weight type t on path p. Like every kernel put in the table, k
// must keep no reference to its arguments after it returns (see noescape.go).
func setDot(t Type, p cpu.Path, k DotFunc) {
	types[t].kernels.dot[p] = k
	types[t].resolve()
}

// setPanel makes run, with activation sums made with sumsMul, the panel kernel of packed weights
// of type t on path p; run keeps no reference to its arguments.
func setPanel(t Type, p cpu.Path, run panelFunc, sumsMul int32) {
	types[t].kernels.panel[p] = panelSlot{run, sumsMul}
	types[t].resolve()
}

// resolve fills r's dotAt, panelAt and their paths: for each path the kernel of the nearest path
// at or below it that has one, else the Go twin (panelAt's run nil where r has no panel layout).
func (r *typeTraits) resolve() {
	k := &r.kernels
	var twin panelFunc
	if r.panel != nil {
		twin = twinPanels(r.typeSize, r.panel)
	}
	for p := range cpu.NumPaths {
		q := p.Nearest(func(q cpu.Path) bool { return k.dot[q] != nil })
		k.dotPath[p], k.dotAt[p] = q, k.dot[q]
		if q == cpu.Go {
			k.dotAt[p] = r.dot
		}
		q = p.Nearest(func(q cpu.Path) bool { return k.panel[q].run != nil })
		k.panelPath[p], k.panelAt[p] = q, k.panel[q]
		if q == cpu.Go {
			k.panelAt[p] = panelSlot{run: twin} // the twins read no sums
		}
	}
}

// twinPanels runs the one-panel twin one on each of np panels of blocks of typeSize bytes.
func twinPanels(typeSize int, one panelTwin) panelFunc {
	return func(np, nb int, w, x []byte, xStride, nx int, out []float32, outStride int, _ []int32) {
		pb := PanelRows * nb * typeSize
		for p := range np {
			one(nb, w[p*pb:(p+1)*pb], x, xStride, nx, out[p*PanelRows:], outStride)
		}
	}
}

// Kernel returns the DotFunc for weight type t on the selected kernel path: its assembly where
// that path (or one below it) has some, else the pure-Go twin. nil if t has no dot product. The
// result is the choice of the moment: callers that keep it look it up again after
// SetKernelPath.
func Kernel(t Type) DotFunc { return t.row().kernels.dotAt[cpu.Selected()] }

// KernelName says which path's kernel Kernel(t) returns ("avx2", "neon", "neon-dp" or "go"),
// for logs and benchmarks.
func KernelName(t Type) string { return t.row().kernels.dotPath[cpu.Selected()].String() }

// DotGo returns the pure-Go DotFunc for weight type t, or nil if t has no dot product.
func DotGo(t Type) DotFunc { return t.row().dot }

// ActType is the type activations are converted to before a dot with weights of type w (ggml's
// vec_dot_type): Q8_0 for the 32-element block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, MXFP4);
// Q8_K for the 256-element ones (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS); F32 for F32, F16 and
// BF16. It is only meaningful for types with DotGo(w) != nil; for any other type it returns F32.
func ActType(w Type) Type { return w.row().act }

// dotKernelsAt lists, by weight type, the assembly row dots path p runs (its own or a lower
// path's, not the Go twins), for the tests of each path.
func dotKernelsAt(p cpu.Path) map[Type]DotFunc {
	m := map[Type]DotFunc{}
	for t := range types {
		if k := &types[t].kernels; k.dotPath[p] != cpu.Go {
			m[Type(t)] = k.dotAt[p]
		}
	}
	return m
}

// checkDotArgs panics with an index error unless w holds rowBytes bytes, each of the nx columns
// x[j*xStride:] holds xRow bytes and out holds nx floats, or if nx > MaxCols; the assembly reads
// exactly these ranges, so this is what keeps it in bounds. It reports whether there is anything
// to compute (nx >= 1; like the Go twins, nx <= 0 computes nothing).
func checkDotArgs(rowBytes, xRow int, w, x []byte, xStride, nx int, out []float32) bool {
	if nx > MaxCols {
		var cols [MaxCols]float32
		_ = cols[nx-1] // index error, like the Go twins' accumulator arrays
	}
	// Indexes, not slice expressions: slicing may run up to the capacity.
	if rowBytes > 0 {
		_ = w[rowBytes-1]
	}
	if nx < 1 {
		return false
	}
	_ = out[nx-1]
	if xRow > 0 {
		for j := 0; j < nx; j++ {
			_ = x[j*xStride]
			_ = x[j*xStride+xRow-1]
		}
	}
	return true
}
