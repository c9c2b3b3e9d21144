package gemma4_test

import (
	"slices"
	"testing"

	"ubatch/model/gemma4"
)

// TestFeaturesMatter switches each Gemma 4 feature off in the loaded F16 graph and checks that
// the logits then part from llama.cpp's past minRel on the median row (a feature the reference
// did not see would leave them within TestMatchesLlamaCpp's 2%; the median, not the worst row,
// so that moe-f16's one router tie cannot pass for a feature). Logged: what each becomes. Not
// here: the experts' renormalisation (Gating.Norm), which decisive routing leaves at 0.5%.
func TestFeaturesMatter(t *testing.T) {
	cases := []struct {
		name, shape string
		off         func(m *gemma4.Model)
	}{
		{"attention scaled by 1/sqrt(head)", "dense", func(m *gemma4.Model) {
			for i := range m.Layers {
				m.Layers[i].Attn.Scale = 0
			}
		}},
		{"no sliding window", "dense", func(m *gemma4.Model) {
			for i := range m.Layers {
				m.Layers[i].Attn.Window = 0
			}
		}},
		{"no layer_output_scale", "dense", func(m *gemma4.Model) {
			for i := range m.Layers {
				m.Layers[i].OutScale = 1
			}
		}},
		{"no final soft-cap", "dense", func(m *gemma4.Model) { m.FinalSoftcap = 0 }},
		{"sliding rope on the full layers", "dense", func(m *gemma4.Model) {
			for i := range m.Layers {
				m.Layers[i].Rope = m.Layers[0].Rope
			}
		}},
		{"no ffn_down_exps.scale", "moe", func(m *gemma4.Model) {
			for i := range m.Layers {
				m.Layers[i].Experts.DownScale = nil
			}
		}},
		{"router on the experts' input", "moe", func(m *gemma4.Model) {
			for i := range m.Layers {
				m.Layers[i].RouterNorm = m.Layers[i].PreNorm2
			}
		}},
		{"no per-layer embeddings", "e", func(m *gemma4.Model) { m.PLE = nil }},
		{"shared KV read from the first layer of its kind", "e", gemma4.SharedFrom},
		{"per-layer inputs without their projection", "e", func(m *gemma4.Model) {
			m.PLE.ProjNorm = slices.Repeat([]float32{0}, len(m.PLE.ProjNorm))
		}},
		{"no dense FFN beside the experts", "moe", func(m *gemma4.Model) {
			for i := range m.Layers {
				l := &m.Layers[i]
				l.PostNorm1 = slices.Repeat([]float32{0}, len(l.PostNorm1))
			}
		}},
	}
	const minRel = 0.05
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ref := reference(t, "gemma4-"+tc.shape+"-f16")
			m := synthModel(t, tc.shape, "f16")
			tc.off(m.Graph.(*gemma4.Model))
			errs := rowErrors(t, m, ref)
			slices.Sort(errs)
			median := errs[len(errs)/2]
			t.Logf("median relative RMS %.4f, worst %.4f with %s", median, errs[len(errs)-1], tc.name)
			if median < minRel {
				t.Errorf("median relative RMS %.4f < %.2f: switching it off changes too little to show it is tested", median, minRel)
			}
		})
	}
}
