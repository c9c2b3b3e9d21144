package ops

// Q8_0 attention on arm64: each KV row's head span is widened to float32 (d·q per element) once
// into a stack buffer, then dotted with (scores) or added to (values) every head's vector with
// the NEON F32 kernels (vec_arm64.s). Head dimensions above attnRowMax use the Go twins.

// q8Asm reports whether the exported Q8_0 attention kernels differ from the Go twins (the tests
// then compare the two): here they run on the NEON vector kernels.
const q8Asm = true

// widenQ8Row writes the len(dst)/32 Q8_0 blocks at src as float32 d·q to dst.
func widenQ8Row(dst []float32, src []byte) {
	for b := range len(dst) / 32 {
		blk := src[b*q8Block:][:q8Block]
		d := q8Scale(blk)
		o := dst[b*32:][:32]
		for i, x := range blk[2:] {
			o[i] = d * float32(int8(x))
		}
	}
}

func attnScoresQ8(q []float32, heads, hd int, k []byte, cells []int32, strideB int, scale float32, out []float32) {
	if hd > attnRowMax {
		attnScoresQ8Go(q, heads, hd, k, cells, strideB, scale, out)
		return
	}
	var buf [attnRowMax]float32
	row := buf[:hd]
	n := len(cells)
	for j, c := range cells {
		widenQ8Row(row, k[int(c)*strideB:])
		for h := range heads {
			out[h*n+j] = scale * DotF32(q[h*hd:(h+1)*hd], row)
		}
	}
}

func attnValuesQ8(p []float32, heads, hd int, v []byte, cells []int32, strideB int, out []float32) {
	if hd > attnRowMax {
		attnValuesQ8Go(p, heads, hd, v, cells, strideB, out)
		return
	}
	var buf [attnRowMax]float32
	row := buf[:hd]
	n := len(cells)
	out = out[:heads*hd]
	clear(out)
	for j, c := range cells {
		widenQ8Row(row, v[int(c)*strideB:])
		for h := range heads {
			AxpyF32(p[h*n+j], row, out[h*hd:(h+1)*hd])
		}
	}
}
