package gemma4

import (
	"math"

	"ubatch/model"
	"ubatch/ops"
	"ubatch/runner"
)

// PerLayerEmbeddings are the E-models' per-layer inputs (llama.cpp's per_layer_tok_embd and
// project_per_layer_inputs): every token gets, for each of the NLayers layers, Width values made
// of its row of per_layer_token_embd (scaled by sqrt(Width)) plus the RMS-normed projection of
// its scaled embedding (per_layer_model_proj over sqrt(Dim), per_layer_proj_norm), the sum over
// sqrt(2). Each layer then adds proj(gelu(inp_gate(x)) · its input), normed by post_norm, to x.
type PerLayerEmbeddings struct {
	Width     int           // embedding_length_per_layer_input
	Embd      runner.Weight // per_layer_token_embd: Vocab rows of NLayers·Width, read by row
	ModelProj runner.Weight // per_layer_model_proj: [Dim] -> [NLayers·Width]
	ProjNorm  []float32     // per_layer_proj_norm [Width]
	layers    int
	dim       int
	eps       float32
}

// bindPLE binds the per-layer embeddings of width n per layer and sizes the runner's scratch
// for them: Aux holds every token's inputs, [n][NLayers·width], and Gate a layer's gate.
func bindPLE(b *model.Binder, h *runner.Hparams, n int) *PerLayerEmbeddings {
	w := h.NLayers * n
	p := &PerLayerEmbeddings{Width: n, layers: h.NLayers, dim: h.Dim, eps: h.Eps}
	p.Embd = b.Weight("per_layer_token_embd.weight", w, h.Vocab)
	p.ModelProj = b.Weight("per_layer_model_proj.weight", h.Dim, w)
	p.ProjNorm = b.Vector("per_layer_proj_norm.weight", n, false)
	h.AuxWidth, h.FFN = w, max(h.FFN, n)
	return p
}

// inputs computes the micro-batch's per-layer inputs into S.Aux, [n][NLayers][Width], from the
// scaled embeddings in S.X of tokens (the micro-batch's).
func (p *PerLayerEmbeddings) inputs(c *runner.Runtime, tokens []int32) {
	s, w := &c.S, p.layers*p.Width
	c.MatMul(s.X, &p.ModelProj, s.Aux)
	projScale := float32(1 / math.Sqrt(float64(p.dim)))
	embdScale := float32(math.Sqrt(float64(p.Width)))
	const inputScale = 0.70710678118654752 // 1/sqrt(2)
	for t, tok := range tokens {
		row := s.Aux[t*w : (t+1)*w]
		for j := range row {
			row[j] *= projScale
		}
		for l := range p.layers {
			chunk := row[l*p.Width : (l+1)*p.Width]
			ops.RMSNorm(chunk, chunk, p.ProjNorm, p.eps)
		}
		p.Embd.Row(int(tok), s.AuxRow)
		for j, e := range s.AuxRow {
			row[j] = (row[j] + e*embdScale) * inputScale
		}
	}
}

// layer adds layer li's per-layer embedding to S.X: X += postNorm(proj(gelu(gate(X)) · input)),
// input the layer's Width values of each token in S.Aux.
func (p *PerLayerEmbeddings) layer(c *runner.Runtime, li int, gate, proj *runner.Weight, postNorm []float32) {
	s, n, wd, w := &c.S, c.N(), p.Width, p.layers*p.Width
	c.MatMul(s.X, gate, s.Gate)
	for t := range n {
		g := s.Gate[t*wd : (t+1)*wd]
		ops.GeGLU(g, g, s.Aux[t*w+li*wd:t*w+(li+1)*wd])
	}
	c.MatMul(s.Gate, proj, s.Tmp)
	c.Norm(s.Tmp, s.Tmp, postNorm)
	c.Add(s.X, s.Tmp, p.dim)
}
