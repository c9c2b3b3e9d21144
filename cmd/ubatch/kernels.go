package main

import (
	"fmt"
	"github.com/spf13/pflag"
	"slices"
	"strings"

	"ubatch/gguf"
	"ubatch/model"
	"ubatch/quant"
)

// kernelsFlag registers --kernels, which selects the kernel path of every kernel (quant's and
// ops').
func kernelsFlag(fs *pflag.FlagSet) *string {
	return fs.String("kernels", "auto", "kernel path of every kernel: auto (the best this CPU has), go (the pure-Go twins) or one of "+strings.Join(quant.KernelPaths(), ", "))
}

// useKernels selects the kernel path name (--kernels) and returns a function restoring the
// previous one, so that in-process callers (tests) keep the start-up choice.
func useKernels(name string) (restore func(), err error) {
	old := quant.KernelPath()
	if err := quant.SetKernelPath(name); err != nil {
		return nil, fmt.Errorf("--kernels: %w", err)
	}
	return func() { _ = quant.SetKernelPath(old) }, nil
}

// kernelSummary says which kernel path is selected, which paths this CPU has and, for each
// weight type among types, the path its matmuls run: packed where it can be (a type without a
// kernel for the selected path uses a lower one), else its row dots.
func kernelSummary(types []quant.Type) string {
	var packed, rows []string
	seen := map[quant.Type]bool{}
	for _, t := range types {
		switch {
		case seen[t]:
		case quant.CanPack(t, t.BlockSize(), quant.PanelRows):
			packed = append(packed, fmt.Sprintf("%v %s", t, quant.PanelKernelPath(t)))
		case quant.Kernel(t) != nil:
			rows = append(rows, fmt.Sprintf("%v %s", t, quant.KernelName(t)))
		}
		seen[t] = true
	}
	slices.Sort(packed)
	slices.Sort(rows)
	s := fmt.Sprintf("kernels: %s (CPU has %s)", quant.KernelPath(), strings.Join(quant.KernelPaths(), ", "))
	if len(packed) > 0 {
		s += "; packed weights: " + strings.Join(packed, ", ")
	}
	if len(rows) > 0 {
		s += "; row weights: " + strings.Join(rows, ", ")
	}
	return s
}

// fileKernels is kernelSummary for the weight types of a GGUF file.
func fileKernels(f *gguf.File) string {
	var types []quant.Type
	for _, t := range f.Tensors {
		types = append(types, t.Type)
	}
	return kernelSummary(types)
}

// modelKernels is kernelSummary for the weights of a loaded model.
func modelKernels(m *model.Model) string { return fileKernels(m.File) }
