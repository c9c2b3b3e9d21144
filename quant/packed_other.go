//go:build !amd64

package quant

// No assembly panel kernels here: hasPanelAsm stays false, so these are never called.

func panelAVX2(Type, int, int, []byte, []byte, int, int, []float32, int, []int32) {
	panic("quant: no assembly panel kernel")
}

func q4Sums(int, []byte, int, int, int32, []int32) { panic("quant: no assembly panel kernel") }
