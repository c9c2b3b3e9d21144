package ops

import "ubatch/quant"

// Attention over F16 and Q8_0 caches on arm64: each KV row (its head span) is widened to float32
// once (F16 with cvtF16NEON, in vec_arm64.s; Q8_0 as d·q per element) into a stack buffer, then
// dotted with (scores) or added to (values) every head's vector with the NEON F32 kernels. Rows
// longer than attnRowMax (no model has such heads), and paths without these kernels (runsAsm,
// kernels.go: the "go" path), use the Go twins.

// attnRowMax is the longest head dimension the stack buffer holds.
const attnRowMax = 512

//go:noescape
func cvtF16NEON(n int, src *uint16, dst *float32)

// widen writes the first len(dst) elements of the cache row at src as float32: halves (F16
// cache, len(src) >= len(dst)) or the len(dst)/32 Q8_0 blocks (a Q8_0 cache).
func widen[E uint16 | byte](dst []float32, src []E) {
	switch src := any(src).(type) {
	case []uint16:
		src = src[:len(dst)]
		n := len(dst) &^ 7
		if n > 0 {
			cvtF16NEON(n, &src[0], &dst[0])
		}
		for i := n; i < len(dst); i++ {
			dst[i] = quant.F16ToF32(src[i])
		}
	case []byte:
		for b := range len(dst) / 32 {
			blk := src[b*q8Block:][:q8Block]
			d := q8Scale(blk)
			o := dst[b*32:][:32]
			for i, x := range blk[2:] {
				o[i] = d * float32(int8(x))
			}
		}
	}
}

// widenedScores is attnScoresF16 or attnScoresQ8 (op o; stride in elements of kv): the Go twin
// for hd > attnRowMax or where the selected path has no kernel for o.
func widenedScores[E uint16 | byte](o op, q []float32, heads, hd int, kv []E, cells []int32, stride int, scale float32, out []float32) {
	if hd > attnRowMax || !runsAsm(o) {
		switch kv := any(kv).(type) {
		case []uint16:
			attnScoresF16Go(q, heads, hd, kv, cells, stride, scale, out)
		case []byte:
			attnScoresQ8Go(q, heads, hd, kv, cells, stride, scale, out)
		}
		return
	}
	var buf [attnRowMax]float32
	row := buf[:hd]
	n := len(cells)
	for j, c := range cells {
		widen(row, kv[int(c)*stride:])
		for h := range heads {
			out[h*n+j] = scale * DotF32(q[h*hd:(h+1)*hd], row)
		}
	}
}

// widenedValues is attnValuesF16 or attnValuesQ8 (op o; stride in elements of kv): the Go twin
// for hd > attnRowMax or where the selected path has no kernel for o.
func widenedValues[E uint16 | byte](o op, p []float32, heads, hd int, kv []E, cells []int32, stride int, out []float32) {
	if hd > attnRowMax || !runsAsm(o) {
		switch kv := any(kv).(type) {
		case []uint16:
			attnValuesF16Go(p, heads, hd, kv, cells, stride, out)
		case []byte:
			attnValuesQ8Go(p, heads, hd, kv, cells, stride, out)
		}
		return
	}
	var buf [attnRowMax]float32
	row := buf[:hd]
	n := len(cells)
	out = out[:heads*hd]
	clear(out)
	for j, c := range cells {
		widen(row, kv[int(c)*stride:])
		for h := range heads {
			AxpyF32(p[h*n+j], row, out[h*hd:(h+1)*hd])
		}
	}
}

func attnScoresF16(q []float32, heads, hd int, k []uint16, cells []int32, stride int, scale float32, out []float32) {
	widenedScores(opAttnScoresF16, q, heads, hd, k, cells, stride, scale, out)
}

func attnValuesF16(p []float32, heads, hd int, v []uint16, cells []int32, stride int, out []float32) {
	widenedValues(opAttnValuesF16, p, heads, hd, v, cells, stride, out)
}

func attnScoresQ8(q []float32, heads, hd int, k []byte, cells []int32, strideB int, scale float32, out []float32) {
	widenedScores(opAttnScoresQ8, q, heads, hd, k, cells, strideB, scale, out)
}

func attnValuesQ8(p []float32, heads, hd int, v []byte, cells []int32, strideB int, out []float32) {
	widenedValues(opAttnValuesQ8, p, heads, hd, v, cells, strideB, out)
}
