//go:build !amd64

package quant

// hasSumsAsm says that there is no q4Sums assembly here, so that it is never called.
const hasSumsAsm = false

func q4Sums(int, []byte, int, int, int32, []int32) { panic("quant: no assembly panel kernel") }
