package model

import (
	"slices"

	"ubatch/runner"
)

// maxExperts bounds expert_count: the largest models of 2026 have 512 per layer.
const maxExperts = 4096

// ExpertHparams reads a mixture-of-experts family's sizes into h: expert_count (experts per
// layer), expert_used_count (per token, at most expert_count) and expert_feed_forward_length
// (each expert's hidden width), all required.
func (b *Binder) ExpertHparams(h *runner.Hparams) {
	h.NExperts = b.Int("expert_count", -1, 1, maxExperts)
	if b.err == nil && b.Has("expert_used_count") {
		if n, ok := b.File.Int(b.key("expert_used_count")); ok && n > int64(h.NExperts) {
			b.Fail("metadata %s = %d is more than %s = %d: the file uses more experts per token than it has", b.key("expert_used_count"), n, b.key("expert_count"), h.NExperts)
			return
		}
	}
	h.NExpertsUsed = b.Int("expert_used_count", -1, 1, h.NExperts)
	h.ExpertFFN = b.Int("expert_feed_forward_length", -1, 1, 4<<20)
}

// Experts binds the stacked expert tensor name (GGUF dims [cols, rows, n]: n matrices of rows
// rows of cols elements, as llama.cpp stores ffn_{gate,up,down}_exps) as n per-expert Weights
// that share the file's bytes (runner.ExpertViews).
func (b *Binder) Experts(name string, n, cols, rows int) []runner.Weight {
	if b.err != nil {
		return nil
	}
	t, ok := b.File.Tensor(name)
	if !ok {
		b.Fail("tensor %q is missing: not a complete %s GGUF", name, b.Arch)
		return nil
	}
	if want := []uint64{uint64(cols), uint64(rows), uint64(n)}; !slices.Equal(t.Dims, want) {
		b.Fail("tensor %q has shape %v, want %v (from the metadata: %d experts of [%d %d])", name, t.Dims, want, n, cols, rows)
		return nil
	}
	all, err := runner.NewWeight(name, t.Type, n*rows, cols, t.Data)
	if err != nil {
		b.Fail("%v (supported: %s)", err, supportedTypes())
		return nil
	}
	ws, err := runner.ExpertViews(name, all, n)
	if err != nil {
		b.Fail("%v", err)
	}
	return ws
}

// BindExperts binds layer p's ("blk.N.") mixture-of-experts tensors into x: the router
// ffn_gate_inp [Dim -> E] and the stacked ffn_{gate,up}_exps [E x Dim -> ExpertFFN] and
// ffn_down_exps [E x ExpertFFN -> Dim]; with biases (gpt-oss) also ffn_gate_inp.bias [E],
// ffn_{gate,up}_exps.bias [E][ExpertFFN] and ffn_down_exps.bias [E][Dim] (GGUF dims [n, E]).
// ExpertHparams must have filled h.
func (b *Binder) BindExperts(x *runner.Experts, p string, h *runner.Hparams, biases bool) {
	e := uint64(h.NExperts)
	x.Router = b.Weight(p+"ffn_gate_inp.weight", h.Dim, h.NExperts)
	x.Gate = b.Experts(p+"ffn_gate_exps.weight", h.NExperts, h.Dim, h.ExpertFFN)
	x.Up = b.Experts(p+"ffn_up_exps.weight", h.NExperts, h.Dim, h.ExpertFFN)
	x.Down = b.Experts(p+"ffn_down_exps.weight", h.NExperts, h.ExpertFFN, h.Dim)
	if biases {
		x.RouterBias = b.Vector(p+"ffn_gate_inp.bias", h.NExperts, false)
		x.GateBias = b.Floats(p+"ffn_gate_exps.bias", []uint64{uint64(h.ExpertFFN), e}, false)
		x.UpBias = b.Floats(p+"ffn_up_exps.bias", []uint64{uint64(h.ExpertFFN), e}, false)
		x.DownBias = b.Floats(p+"ffn_down_exps.bias", []uint64{uint64(h.Dim), e}, false)
	}
}

// BindFusedExperts binds layer p's experts as BindExperts does (no biases), with gate and up
// either stacked together in ffn_gate_up_exps (GGUF dims [Dim, 2·ExpertFFN, E]: each expert's
// gate rows, then its up rows; Gemma 4's converter writes this) or, when that is absent, as
// ffn_gate_exps and ffn_up_exps.
func (b *Binder) BindFusedExperts(x *runner.Experts, p string, h *runner.Hparams) {
	name := p + "ffn_gate_up_exps.weight"
	if !b.HasTensor(name) {
		b.BindExperts(x, p, h, false)
		return
	}
	x.Router = b.Weight(p+"ffn_gate_inp.weight", h.Dim, h.NExperts)
	both := b.Experts(name, h.NExperts, h.Dim, 2*h.ExpertFFN)
	x.Gate, x.Up = make([]runner.Weight, len(both)), make([]runner.Weight, len(both))
	for e, w := range both {
		size := h.ExpertFFN * w.RowBytes()
		var err error
		if x.Gate[e], err = runner.NewWeight(w.Name+".gate", w.Type, h.ExpertFFN, w.Cols, w.Data[:size:size]); err != nil {
			b.Fail("%v", err)
			return
		}
		if x.Up[e], err = runner.NewWeight(w.Name+".up", w.Type, h.ExpertFFN, w.Cols, w.Data[size:]); err != nil {
			b.Fail("%v", err)
			return
		}
	}
	x.Down = b.Experts(p+"ffn_down_exps.weight", h.NExperts, h.ExpertFFN, h.Dim)
}
