package quant

import "golang.org/x/sys/cpu"

// cpuPaths lists the kernel paths this CPU supports, best first. AVX-512 VNNI on 256-bit
// registers needs AVX512F, AVX512VL and AVX512_VNNI (x/sys/cpu reports them only where the OS
// saves the AVX-512 state); every path builds on the AVX2 kernels.
func cpuPaths() []kernelPath {
	if !hasAVX2 {
		return []kernelPath{pathGo}
	}
	var paths []kernelPath
	if cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512VNNI {
		paths = append(paths, pathAVX512VNNI)
	}
	if cpu.X86.HasAVXVNNI {
		paths = append(paths, pathAVXVNNI)
	}
	return append(paths, pathAVX2)
}

// panelAsm is the assembly panelKernel of the selected path (panelPathFor).
func panelAsm(wt Type, np, nb int, w, x []byte, xStride, nx int, out []float32, outStride int, sums []int32) {
	switch p := panelPathFor(wt); p {
	case pathAVX512VNNI, pathAVXVNNI, pathAVXVNNIEvex:
		panelVNNI(p, wt, np, nb, w, x, xStride, nx, out, outStride, sums)
	default:
		panelAVX2(wt, np, nb, w, x, xStride, nx, out, outStride, sums)
	}
}
