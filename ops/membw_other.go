//go:build !amd64

package ops

const sumWordsAsm = false

func sumWordsAVX2(n int, x *uint64) uint64 { panic("ops: no sumWords assembly on this architecture") }
