//go:build !amd64

package quant

// cpuPaths lists the kernel paths of this architecture: only the Go twins.
func cpuPaths() []kernelPath { return []kernelPath{pathGo} }

// panelAsm is never called here: hasPanelAsm stays false.
func panelAsm(Type, int, int, []byte, []byte, int, int, []float32, int, []int32) {
	panic("quant: no assembly panel kernel")
}
