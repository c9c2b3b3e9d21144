//go:build !amd64

package ops

// The tiled attention has no assembly here (see kernels.go; the runner keeps the exact kernels
// where AttnTiledFast is false).

func attnTileStep(r *TileRows, hd int, kt, vt []float32, cpos []int32, softcap float32) {
	if !(softcap > 0) {
		softcap = 0
	}
	attnTileStepGo(r, hd, kt, vt, cpos, softcap)
}

func attnTileLoadF16(dst []float32, k []uint16, cells []int32, stride, hd int) {
	attnTileLoadF16Go(dst, k, cells, stride, hd)
}

func attnTileLoadQ8(dst []float32, k []byte, cells []int32, strideB, hd int) {
	attnTileLoadQ8Go(dst, k, cells, strideB, hd)
}
