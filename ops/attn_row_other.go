//go:build !amd64

package ops

func attnRowStep(r *TileRowSet, hd int, ktT, vt []float32, cpos []int32, softcap float32) {
	attnRowStepGo(r, hd, ktT, vt, cpos, softcap)
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
