package ops

import "math"

// The gated delta net's per-token kernels (Qwen 3.5's and Qwen3-Next's linear attention), in
// pure Go. They allocate nothing.

// CausalConvStep is one token of a depthwise causal convolution over ch channels with a kernel
// of k taps, then SiLU: out[c] = silu(Σ_j w[c·k+j]·win_j[c]) where the window of channel c is
// the k-1 previous inputs (state, [(k-1)][ch] row-major, oldest row first) and x[c]. It then
// shifts x into state (the oldest row leaves). w is [ch][k] row-major (GGUF ssm_conv1d, dims
// [k, ch]), tap 0 the oldest. len(x) = len(out) = ch; out must not alias x or state.
func CausalConvStep(out, state, x, w []float32, ch, k int) {
	_ = out[ch-1]
	_ = x[ch-1]
	_ = w[ch*k-1]
	if k > 1 {
		_ = state[(k-1)*ch-1]
	}
	for c := range ch {
		// Summed tap by tap in float32, oldest first, as llama.cpp's ssm_conv does.
		var s float32
		for j := range k - 1 {
			s += state[j*ch+c] * w[c*k+j]
		}
		s += x[c] * w[c*k+k-1]
		out[c] = s / (1 + float32(math.Exp(float64(-s))))
	}
	if k > 1 {
		copy(state, state[ch:(k-1)*ch])
		copy(state[(k-2)*ch:(k-1)*ch], x[:ch])
	}
}

// DeltaRuleStep is one token of one head of the gated delta rule. s is the head's state, dv
// rows of dk ([dv][dk] row-major: row j holds the state's column j, the weights that read value
// element j from a key), k and q are the token's (L2-normed) key and query (len dk), v its value
// (len dv), decay = exp(g) with g <= 0 the head's gate, beta in (0, 1) its write strength. It
// computes, in place,
//
//	S ← decay·S;  δ_j = β·(v_j − S_j·k);  S_j ← S_j + δ_j·k;  out_j = scale·(S_j·q)
//
// for each row j, writing out (len dv). out must not alias s, k, q or v. It runs the selected
// path's kernel (AVX2 on amd64) when dk is a multiple of 8, else its Go twin, deltaRuleGo.
func DeltaRuleStep(out, s, k, q, v []float32, dk, dv int, decay, beta, scale float32) {
	_ = s[dk*dv-1]
	_ = k[dk-1]
	_ = q[dk-1]
	_ = v[dv-1]
	_ = out[dv-1]
	if !runsAsm(opDeltaRule) || dk%8 != 0 {
		deltaRuleGo(out, s, k, q, v, dk, dv, decay, beta, scale)
		return
	}
	for j := range dv {
		out[j] = scale * deltaRowAsm(dk, &s[j*dk], &k[0], &q[0], decay, v[j], beta)
	}
}

// deltaRuleGo is DeltaRuleStep's Go twin.
func deltaRuleGo(out, s, k, q, v []float32, dk, dv int, decay, beta, scale float32) {
	for j := range dv {
		row := s[j*dk : (j+1)*dk]
		var dot float32
		for i, x := range row {
			x *= decay
			row[i] = x
			dot += x * k[i]
		}
		d := beta * (v[j] - dot)
		var o float32
		for i := range row {
			x := row[i] + d*k[i]
			row[i] = x
			o += x * q[i]
		}
		out[j] = scale * o
	}
}

// L2Norm scales x in place to unit Euclidean norm, dividing by max(‖x‖, eps) (llama.cpp's
// ggml_l2_norm, its sum in float64).
func L2Norm(x []float32, eps float32) {
	var sum float64
	for _, v := range x {
		sum += float64(v * v)
	}
	scale := 1 / max(float32(math.Sqrt(sum)), eps)
	for i := range x {
		x[i] *= scale
	}
}

// Sigmoid returns 1/(1+e^-x).
func Sigmoid(x float32) float32 { return 1 / (1 + float32(math.Exp(float64(-x)))) }

// Softplus returns log(1+e^x), x itself above 20 (llama.cpp's ggml_softplus threshold).
func Softplus(x float32) float32 {
	if x > 20 {
		return x
	}
	return float32(math.Log1p(math.Exp(float64(x))))
}
