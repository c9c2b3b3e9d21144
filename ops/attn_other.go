//go:build !amd64 && !arm64

package ops

func attnScoresF16(q []float32, heads, hd int, k []uint16, cells []int32, stride int, scale float32, out []float32) {
	attnScoresF16Go(q, heads, hd, k, cells, stride, scale, out)
}

func attnValuesF16(p []float32, heads, hd int, v []uint16, cells []int32, stride int, out []float32) {
	attnValuesF16Go(p, heads, hd, v, cells, stride, out)
}
