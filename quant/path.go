package quant

import (
	"fmt"

	"ubatch/internal/cpu"
)

// KernelPath is the name of the selected kernel path: "avx512vnni", "avxvnni", "avx2", "neon-dp",
// "neon" or "go". It is internal/cpu's selection, which ops follows too.
func KernelPath() string { return cpu.Selected().String() }

// KernelPaths lists the names of the paths this CPU supports, best first. "go" appears only
// where there is no assembly at all (SetKernelPath takes it everywhere).
func KernelPaths() []string {
	var names []string
	for _, p := range cpu.Paths() {
		names = append(names, p.String())
	}
	return names
}

// SetKernelPath selects the kernel path of quant and ops by name: "auto" for the best this CPU
// supports, "go" for the pure-Go twins, or one of KernelPaths. It is not synchronized with
// running kernels: call it at start-up, before any matmul, and look up Kernel again after it.
func SetKernelPath(name string) error {
	if err := cpu.Select(name); err != nil {
		return fmt.Errorf("quant: %w", err)
	}
	return nil
}

// PanelKernelPath is the name of the path MatMulPacked uses for packed weights of type t: the
// selected path where t has a kernel for it, else the best lower one ("" if t cannot be packed).
func PanelKernelPath(t Type) string {
	if !packable(t, t.BlockSize()) {
		return ""
	}
	return t.row().kernels.panelPath[cpu.Selected()].String()
}

// selectedPanel is the panel kernel of weights of type wt on the selected path.
func selectedPanel(wt Type) panelSlot { return types[wt].kernels.panelAt[cpu.Selected()] }

// needsSums reports whether panelKernel takes activation sums for weights of type wt: Q4_0, Q8_0
// and MXFP4, whose kernels read the activation scales from them (and corrections, see sumsMul).
func needsSums(wt Type) bool { return wt.row().panelSums }

// sumWords is how many int32 words of activation sums the panel kernels take per block (see
// panelSums).
const sumWords = 8

// panelSums writes the activation sums panelKernel takes for wt (see needsSums) for nb blocks of
// nx <= 4 activation rows xStride bytes apart: for block b of row j, dst[8b+j] = m·Σ of its
// quants and dst[8b+4+j] its scale as float32 bits (so that the kernels need not convert it). m
// is sumsMul(wt).
func panelSums(wt Type, nb int, x []byte, xStride, nx int, dst []int32) {
	q4SumsKernel(nb, x, xStride, nx, sumsMul(wt), dst)
}

// sumsMul is the multiplier m of panelSums, the correction each kernel needs for its offset
// weights (its panelKernel's sumsMul): on AVX2, 8 for Q4_0 (subtracted: the weights are nibbles
// q-8), 12 for MXFP4 (its table values plus 12) and 0 for Q8_0 (signed weights, no correction);
// on the VNNI paths -128, the starting value of the integer sums (Q8_0: the weights are w+128;
// Q4_0: 16·8·Σx, as the Q4_0 kernels sum 16 times the products, see packed_vnni_amd64.h); 0 for
// the Go twins, which read no sums. (MXFP4 runs its AVX2 kernel on the VNNI paths too.)
func sumsMul(wt Type) int32 { return selectedPanel(wt).sumsMul }
