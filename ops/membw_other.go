//go:build !amd64

package ops

func sumWordsAVX2(n int, x *uint64) uint64 { panic("ops: no sumWords assembly on this architecture") }
