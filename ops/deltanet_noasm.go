//go:build !amd64

package ops

// deltaRowAsm has no kernel here: opDeltaRule resolves to the Go twin (kernels_*.go), so it is
// never called.
func deltaRowAsm(n int, s, k, q *float32, decay, v, beta float32) float32 {
	panic("ops: deltaRowAsm has no kernel on this architecture")
}
