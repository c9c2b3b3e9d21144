//go:build !amd64 && !arm64

package ops

func attnScoresQ8(q []float32, heads, hd int, k []byte, cells []int32, strideB int, scale float32, out []float32) {
	attnScoresQ8Go(q, heads, hd, k, cells, strideB, scale, out)
}

func attnValuesQ8(p []float32, heads, hd int, v []byte, cells []int32, strideB int, out []float32) {
	attnValuesQ8Go(p, heads, hd, v, cells, strideB, out)
}
