//go:build !amd64

package ops

import "unsafe"

func tilePrefetch(k, v unsafe.Pointer, cells []int32, strideB, rowBytes int) {}

func attnRowStep(r *TileRowSet, hd int, ktT []float32, v *TileV, cpos []int32, softcap float32) {
	attnRowStepGo(r, hd, ktT, v, cpos, softcap)
}

func attnTileLoadKTF16(dst []float32, k []uint16, cells []int32, stride, hd int) {
	attnTileLoadKTF16Go(dst, k, cells, stride, hd)
}

func attnTileLoadKTF32(dst []float32, k []float32, cells []int32, stride, hd int) {
	attnTileLoadKTF32Go(dst, k, cells, stride, hd)
}

func attnTileLoadKTQ8(dst []float32, k []byte, cells []int32, strideB, hd int) {
	attnTileLoadKTQ8Go(dst, k, cells, strideB, hd)
}
