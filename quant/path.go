package quant

import (
	"fmt"
	"strings"
)

// Kernel paths: the instruction sets the panel kernels (packed weights times quantized
// activations, the bulk of prompt processing and batched decode) run on. The best path the CPU
// supports is chosen at start-up; SetKernelPath overrides it, for benchmarks and comparisons.
// Types without a kernel for the selected path use the best lower one (see PanelKernelPath).
type kernelPath uint8

const (
	pathGo         kernelPath = iota // the pure-Go twins: no AVX2, or not amd64
	pathAVX2                         // AVX2, FMA, F16C (packed_amd64.s, packed_k_amd64.s)
	pathAVXVNNI                      // AVX2 plus VEX-encoded VPDPBUSD (AVX-VNNI)
	pathAVX512VNNI                   // AVX2 plus AVX-512 F, VL and VNNI (EVEX VPDPBUSD)

	// pathAVXVNNIEvex runs the avxvnni kernels' code assembled with EVEX VPDPBUSD, so that tests
	// check it on AVX-512 VNNI CPUs; it is never chosen or offered (see packed_avxvnni_amd64.s).
	pathAVXVNNIEvex
)

var pathNames = [...]string{pathGo: "go", pathAVX2: "avx2", pathAVXVNNI: "avxvnni", pathAVX512VNNI: "avx512vnni", pathAVXVNNIEvex: "avxvnni-evex"}

func (p kernelPath) String() string { return pathNames[p] }

// panelPath is the selected-kernel table: which path panelKernel dispatches to (when hasPanelAsm).
// It is the only state the choice adds, set at start-up to the best of cpuPaths and changed only
// by SetKernelPath and by tests.
var panelPath = cpuPaths()[0]

// KernelPath is the name of the selected kernel path: "avx512vnni", "avxvnni", "avx2" or "go".
func KernelPath() string { return panelPath.String() }

// KernelPaths lists the names of the paths this CPU supports, best first. "go" appears only
// where there is no assembly at all.
func KernelPaths() []string {
	var names []string
	for _, p := range cpuPaths() {
		names = append(names, p.String())
	}
	return names
}

// SetKernelPath selects the kernel path by name ("auto" for the best this CPU supports). It is
// not synchronized with running kernels: call it at start-up, before any matmul.
func SetKernelPath(name string) error {
	paths := cpuPaths()
	if name == "auto" {
		panelPath = paths[0]
		return nil
	}
	for _, p := range paths {
		if p.String() == name {
			panelPath = p
			return nil
		}
	}
	return fmt.Errorf("quant: kernel path %q is not available on this CPU; choose auto or one of %s", name, strings.Join(KernelPaths(), ", "))
}

// PanelKernelPath is the name of the path MatMulPacked uses for packed weights of type t: the
// selected path where t has a kernel for it, else the best lower one ("" if t cannot be packed).
func PanelKernelPath(t Type) string {
	if !packable(t, t.BlockSize()) {
		return ""
	}
	if !hasPanelAsm {
		return pathGo.String()
	}
	return panelPathFor(t).String()
}

// panelPathFor is the path panelAsm runs for weights of type wt.
func panelPathFor(wt Type) kernelPath {
	if panelPath >= pathAVXVNNI && !hasVNNIPanel(panelPath, wt) {
		return pathAVX2
	}
	return panelPath
}

// hasVNNIPanel reports whether VNNI path p has panel kernels for wt: Q8_0 and Q4_0 on all
// (packed_vnni_amd64.s, packed_avxvnni_amd64.s), Q4_K and Q6_K with AVX-512
// (packed_k_vnni_amd64.s).
func hasVNNIPanel(p kernelPath, wt Type) bool {
	return wt == Q8_0 || wt == Q4_0 || (wt == Q4_K || wt == Q6_K) && p == pathAVX512VNNI
}

// needsSums reports whether panelKernel takes activation sums for weights of type wt: Q4_0 and
// Q8_0, whose kernels read the activation scales from them (and corrections, see sumsMul).
func needsSums(wt Type) bool { return wt == Q4_0 || wt == Q8_0 }

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

// sumsMul is the multiplier m of panelSums: the correction each kernel needs for its offset
// weights. On AVX2, 8 for Q4_0 (subtracted: the weights are nibbles q-8) and 0 for Q8_0 (signed
// weights, no correction); on the VNNI paths -128, the starting value of the integer sums (Q8_0:
// the weights are w+128; Q4_0: 16·8·Σx, as the Q4_0 kernels sum 16 times the products, see
// packed_vnni_amd64.h).
func sumsMul(wt Type) int32 {
	switch {
	case hasPanelAsm && panelPathFor(wt) >= pathAVXVNNI:
		return -128
	case wt == Q4_0:
		return 8
	}
	return 0
}
