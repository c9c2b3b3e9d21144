package synth

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"

	"ubatch/quant"
)

// What a tensor holds, which decides how it is generated.
const (
	kindWeight     = iota // a 2-D matrix, N(0, 0.02²) (Q and K rows: see qkRows)
	kindNorm              // a norm weight vector
	kindBias              // a bias vector
	kindRopeFreqs         // rope_freqs.weight
	kindRouter            // ffn_gate_inp: F32 in every file type, std 3/sqrt(dim)
	kindSink              // attn_sinks.weight (gpt-oss): N(0, 1)
	kindLayerScale        // layer_output_scale.weight (Gemma 4): uniform in [0.5, 1)
	kindQKNorm            // Gemma 4's attn_q_norm and attn_k_norm: 0.5·(1 + N(0, 0.1²)), see gemma4Block
)

type tensorSpec struct {
	name       string
	role       string // the quantizer's tensor class (tensorType)
	layer      int
	kind       int
	cols, rows int // rows < 0: one per vocabulary token; 1-D tensors have rows 0
	qkRows     int // the first qkRows rows are Q or K rows (std 1.2/sqrt(dim) when PositionalAttn)
	experts    int // a stacked expert tensor of this many [cols, rows] matrices; 0: 2-D
}

// tensors lists the layout's tensors in the order they are written: token_embd, rope_freqs, the
// blocks, output_norm, output, a reranker's cls.output.
func (l *layout) tensors() []tensorSpec {
	s := l.s
	w := func(name, role string, layer, cols, rows, qk int) tensorSpec {
		return tensorSpec{name: name, role: role, layer: layer, kind: kindWeight, cols: cols, rows: rows, qkRows: qk}
	}
	vec := func(name string, kind, n int) tensorSpec {
		return tensorSpec{name: name, role: "norm", kind: kind, cols: n}
	}
	ts := []tensorSpec{w("token_embd.weight", "token_embd", 0, s.Dim, -1, 0)}
	if l.RopeFreqs {
		ts = append(ts, vec("rope_freqs.weight", kindRopeFreqs, l.ropeDims/2))
	}
	if l.Gemma4 {
		ts = append(ts, l.gemma4Globals()...)
	}
	for i := range s.Layers {
		if l.Gemma4 {
			ts = append(ts, l.gemma4Block(i)...)
			continue
		}
		p := fmt.Sprintf("blk.%d.", i)
		ts = append(ts, vec(p+"attn_norm.weight", kindNorm, s.Dim))
		if l.Fused {
			ts = append(ts, w(p+"attn_qkv.weight", "attn_qkv", i, s.Dim, l.qDim+2*l.kvDim, l.qDim+l.kvDim))
		} else {
			ts = append(ts,
				w(p+"attn_q.weight", "attn_q", i, s.Dim, l.qDim, l.qDim),
				w(p+"attn_k.weight", "attn_k", i, s.Dim, l.kvDim, l.kvDim),
				w(p+"attn_v.weight", "attn_v", i, s.Dim, l.kvDim, 0))
		}
		if l.QKVBias {
			ts = append(ts, vec(p+"attn_q.bias", kindBias, l.qDim), vec(p+"attn_k.bias", kindBias, l.kvDim),
				vec(p+"attn_v.bias", kindBias, l.kvDim))
		}
		if l.QKNorm {
			ts = append(ts, vec(p+"attn_q_norm.weight", kindNorm, l.headDim), vec(p+"attn_k_norm.weight", kindNorm, l.headDim))
		}
		ts = append(ts, w(p+"attn_output.weight", "attn_output", i, l.qDim, s.Dim, 0))
		if l.OAI {
			ts = append(ts, vec(p+"attn_output.bias", kindBias, s.Dim), vec(p+"attn_sinks.weight", kindSink, s.Heads))
		}
		if l.PostNorms || l.OAI {
			ts = append(ts, vec(p+"post_attention_norm.weight", kindNorm, s.Dim))
		}
		if !l.OAI {
			ts = append(ts, vec(p+"ffn_norm.weight", kindNorm, s.Dim))
		}
		if l.MoE {
			exps := func(name, role string, cols, rows int) tensorSpec {
				t := w(name, role, i, cols, rows, 0)
				t.experts = l.experts
				return t
			}
			router := w(p+"ffn_gate_inp.weight", "router", i, s.Dim, l.experts, 0)
			router.kind = kindRouter
			ts = append(ts, router, exps(p+"ffn_gate_exps.weight", "ffn_gate", s.Dim, l.expFFN),
				exps(p+"ffn_up_exps.weight", "ffn_up", s.Dim, l.expFFN), exps(p+"ffn_down_exps.weight", "ffn_down", l.expFFN, s.Dim))
			if l.OAI { // [n, E] biases: one row per expert
				bias := func(name string, n, rows int) tensorSpec {
					t := vec(name, kindBias, n)
					t.rows = rows
					return t
				}
				ts = append(ts, bias(p+"ffn_gate_inp.bias", l.experts, 0), bias(p+"ffn_gate_exps.bias", l.expFFN, l.experts),
					bias(p+"ffn_up_exps.bias", l.expFFN, l.experts), bias(p+"ffn_down_exps.bias", s.Dim, l.experts))
			}
			continue
		}
		if l.Fused {
			ts = append(ts, w(p+"ffn_up.weight", "ffn_up", i, s.Dim, 2*s.FFN, 0))
		} else {
			ts = append(ts, w(p+"ffn_gate.weight", "ffn_gate", i, s.Dim, s.FFN, 0), w(p+"ffn_up.weight", "ffn_up", i, s.Dim, s.FFN, 0))
		}
		ts = append(ts, w(p+"ffn_down.weight", "ffn_down", i, s.FFN, s.Dim, 0))
		if l.PostNorms {
			ts = append(ts, vec(p+"post_ffw_norm.weight", kindNorm, s.Dim))
		}
	}
	ts = append(ts, vec("output_norm.weight", kindNorm, s.Dim))
	if !l.tied {
		ts = append(ts, w("output.weight", "output", 0, s.Dim, -1, 0))
	}
	if l.rerank {
		ts = append(ts, w("cls.output.weight", "cls_output", 0, s.Dim, len(RerankLabels), 0))
	}
	return ts
}

// dims is the tensor's GGUF shape.
func (l *layout) dims(sp tensorSpec) []uint64 {
	switch {
	case sp.rows == 0:
		return []uint64{uint64(sp.cols)}
	case sp.experts > 0:
		return []uint64{uint64(sp.cols), uint64(sp.rows), uint64(sp.experts)}
	}
	return []uint64{uint64(sp.cols), uint64(l.rows(sp))}
}

// rows is the number of rows of the tensor's data: every expert's, for a stacked one.
func (l *layout) rows(sp tensorSpec) int {
	if sp.rows < 0 {
		return l.vocab
	}
	return sp.rows * max(1, sp.experts)
}

// generate makes one tensor's data from its own generator, seeded from (seed, name), so that the
// result does not depend on the order tensors are generated in.
func (l *layout) generate(sp tensorSpec, seed uint64) ([]byte, quant.Type, error) {
	h := fnv.New64a()
	h.Write([]byte(sp.name))
	rng := rand.New(rand.NewPCG(seed, h.Sum64()))
	if sp.rows == 0 || sp.kind == kindBias { // vectors and the experts' bias rows: F32
		v := make([]float32, sp.cols*max(1, sp.rows))
		for i := range v {
			switch {
			case sp.kind == kindRopeFreqs:
				v[i] = l.ropeFreqs[i]
			case sp.kind == kindBias:
				v[i] = float32(rng.NormFloat64() * 0.1)
			case sp.kind == kindSink:
				v[i] = float32(rng.NormFloat64())
			case sp.kind == kindQKNorm:
				v[i] = float32(0.5 * (1 + rng.NormFloat64()*0.1))
			case sp.kind == kindLayerScale:
				v[i] = float32(0.5 + rng.Float64()/2)
			case l.PositionalAttn:
				v[i] = float32(1 + rng.NormFloat64()*0.1)
			default:
				v[i] = 1
			}
		}
		buf := make([]byte, 4*len(v))
		err := quant.Quantize(quant.F32, v, buf)
		return buf, quant.F32, err
	}
	role := sp.role
	if (role == "token_embd" || role == "per_layer_token_embd") && l.tied {
		// A tied embedding is quantized as the output projection; llama.cpp's quantizer counts
		// Gemma 4's per-layer token table as a token embedding too.
		role = "output"
	}
	t := fitType(eightExperts(tensorType(l.fileType, role, sp.layer, l.s.Layers), l.fileType, role, l.experts), sp.cols)
	switch {
	case sp.kind == kindRouter:
		t = quant.F32 // llama.cpp's quantizer leaves ffn_gate_inp alone
	case role == "per_layer_model_proj" && l.fileType != "f32":
		t = quant.F16 // and per_layer_model_proj, as converted (F16)
	case l.fileType == "mxfp4" && sp.experts > 0:
		t = quant.MXFP4
	}
	n, rb := l.rows(sp), t.RowSize(sp.cols)
	out := make([]byte, n*rb)
	row := make([]float32, sp.cols)
	qkStd := 1.2 / math.Sqrt(float64(l.s.Dim))
	for r := range n {
		std := 0.02
		switch {
		case sp.kind == kindRouter && l.Gemma4:
			std = 3 // Gemma 4's router sees rmsnorm(x)/sqrt(dim): logits of std 3 route decisively
		case sp.kind == kindRouter, l.OAI && sp.experts > 0 && (sp.role == "ffn_gate" || sp.role == "ffn_up"):
			std = 3 / math.Sqrt(float64(l.s.Dim))
		case l.PositionalAttn && r < sp.qkRows:
			std = qkStd
		}
		for i := range row {
			row[i] = float32(rng.NormFloat64() * std)
		}
		if err := quant.Quantize(t, row, out[r*rb:(r+1)*rb]); err != nil {
			return nil, 0, err
		}
	}
	return out, t, nil
}

// fitType replaces a K-quant whose 256-element blocks do not fit a row of cols elements by Q8_0
// (llama.cpp's quantizer falls back too, to Q5_0/Q5_1/Q8_0, of which synth writes only Q8_0).
func fitType(t quant.Type, cols int) quant.Type {
	if cols%t.BlockSize() != 0 {
		return quant.Q8_0
	}
	return t
}

// tensorType picks a tensor's type the way llama.cpp's quantizer does for each file type.
// Q4_K_M: Q6_K for the output and, in the layers use_more_bits selects, attn_v and ffn_down;
// Q5_K for a fused attn_qkv.
func tensorType(ftype, role string, layer, nLayers int) quant.Type {
	switch ftype {
	case "mxfp4": // the experts are MXFP4 (generate), everything else Q8_0
		return quant.Q8_0
	case "f32":
		return quant.F32
	case "f16":
		return quant.F16
	case "q8_0":
		return quant.Q8_0
	case "q4_0":
		if role == "output" {
			return quant.Q6_K
		}
		return quant.Q4_0
	case "q6_k":
		return quant.Q6_K
	}
	switch role { // q4_k_m
	case "output":
		return quant.Q6_K
	case "attn_qkv":
		return quant.Q5_K
	case "attn_v", "ffn_down":
		if moreBits(layer, nLayers) {
			return quant.Q6_K
		}
	}
	return quant.Q4_K
}

// eightExperts is llama.cpp's quantizer's rule for models of exactly 8 experts (Mixtral's
// count): attn_k and attn_v in Q8_0 whatever the quantized file type, attn_output in Q5_K for
// Q4_K_M; t is the type chosen otherwise.
func eightExperts(t quant.Type, ftype, role string, experts int) quant.Type {
	if experts != 8 || ftype == "f32" || ftype == "f16" {
		return t
	}
	switch {
	case role == "attn_k" || role == "attn_v":
		return quant.Q8_0
	case role == "attn_output" && ftype == "q4_k_m":
		return quant.Q5_K
	}
	return t
}

// moreBits is llama.cpp's use_more_bits: the first and last eighth of the layers, and every
// third layer in between.
func moreBits(i, n int) bool {
	return i < n/8 || i >= 7*n/8 || (i-n/8)%3 == 2
}

// llama3RopeFactors are Llama 3.1's per-pair rope frequency factors (rope_freqs.weight, as
// llama.cpp's converter computes them from rope_scaling): pairs whose wavelength is below
// origCtx/high keep their frequency, those above origCtx/low are slowed by factor, and the ones
// between are interpolated smoothly. synth uses a small origCtx so that they matter in a short
// prompt.
func llama3RopeFactors(dims int, base float32, factor, low, high float64, origCtx int) []float32 {
	out := make([]float32, dims/2)
	lowWave, highWave := float64(origCtx)/low, float64(origCtx)/high
	for i := range out {
		freq := math.Pow(float64(base), -float64(2*i)/float64(dims))
		wave := 2 * math.Pi / freq
		switch {
		case wave < highWave:
			out[i] = 1
		case wave > lowWave:
			out[i] = float32(factor)
		default:
			smooth := (float64(origCtx)/wave - low) / (high - low)
			out[i] = float32(1 / ((1-smooth)/factor + smooth))
		}
	}
	return out
}
