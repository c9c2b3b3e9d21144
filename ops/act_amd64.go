package ops

// The activation kernels use the AVX2/FMA assembly in act_amd64.s where the selected path runs
// it (runsAsm, kernels.go), for the first multiple of 8 elements; the rest is done here in Go
// with the pure-Go twins.

//go:noescape
func swigluAVX2(n int, dst, gate, up *float32)

// expSubSumAVX2 sets x[i] = e^(x[i]-m), 0 where x[i]-m < expCutoff as in ExpNeg, and returns the
// sum of the new values.
//
//go:noescape
func expSubSumAVX2(n int, m float32, x *float32) float32

//go:noescape
func maxAVX2(n int, x *float32) float32

//go:noescape
func scaleAVX2(n int, a float32, x *float32)

// SwiGLU writes dst[i] = silu(gate[i]) * up[i]; dst may alias gate.
func SwiGLU(dst, gate, up []float32) {
	up = up[:len(gate)]
	dst = dst[:len(gate)]
	n := len(gate) &^ 7
	if !runsAsm(opSwiGLU) || n == 0 {
		swigluGo(dst, gate, up)
		return
	}
	swigluAVX2(n, &dst[0], &gate[0], &up[0])
	swigluGo(dst[n:], gate[n:], up[n:])
}

// SoftmaxInPlace replaces x with softmax(x) and returns nothing; x must be non-empty.
func SoftmaxInPlace(x []float32) { SoftmaxSinkInPlace(x, negInf) }

// SoftmaxSinkInPlace replaces x with the softmax of x and one more logit, sink, that joins only
// the denominator: x[i] = e^x[i] / (e^sink + Σ_j e^x[j]) (gpt-oss's attention sinks: a head may
// attend to nothing). x must be non-empty; sink -Inf is SoftmaxInPlace.
func SoftmaxSinkInPlace(x []float32, sink float32) {
	n := len(x) &^ 7
	if !runsAsm(opSoftmax) || n == 0 {
		softmaxSinkGo(x, sink)
		return
	}
	tail := x[n:]
	mx := max(maxAVX2(n, &x[0]), sink)
	for _, v := range tail {
		mx = max(mx, v)
	}
	sum := expSubSumAVX2(n, mx, &x[0])
	if sink != negInf {
		sum += ExpNeg(sink - mx)
	}
	for i, v := range tail {
		e := ExpNeg(v - mx)
		tail[i] = e
		sum += e
	}
	inv := 1 / sum
	scaleAVX2(n, inv, &x[0])
	for i := range tail {
		tail[i] *= inv
	}
}
