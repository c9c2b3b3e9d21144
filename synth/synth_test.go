package synth

import (
	"testing"

	"ubatch/quant"
)

// TestQ4KMMix checks the per-tensor mix of shared/perf/README.md for the 22-layer tinyllama:
// attn_v and ffn_down are Q6_K in layers 0,1,4,7,10,13,16,19,20,21 and Q4_K elsewhere; the output
// is Q6_K and everything else Q4_K.
func TestQ4KMMix(t *testing.T) {
	six := map[int]bool{0: true, 1: true, 4: true, 7: true, 10: true, 13: true, 16: true, 19: true, 20: true, 21: true}
	for l := range 22 {
		for _, role := range []string{"attn_v", "ffn_down"} {
			want := quant.Q4_K
			if six[l] {
				want = quant.Q6_K
			}
			if got := tensorType("q4_k_m", role, l, 22); got != want {
				t.Errorf("layer %d %s: %v, want %v", l, role, got, want)
			}
		}
		for _, role := range []string{"attn_q", "attn_k", "attn_output", "ffn_gate", "ffn_up"} {
			if got := tensorType("q4_k_m", role, l, 22); got != quant.Q4_K {
				t.Errorf("layer %d %s: %v, want Q4_K", l, role, got)
			}
		}
	}
	tests := []struct {
		name, ftype, role string
		want              quant.Type
	}{
		{"q4_k_m output", "q4_k_m", "output", quant.Q6_K},
		{"q4_k_m embedding", "q4_k_m", "token_embd", quant.Q4_K},
		{"q4_0 output", "q4_0", "output", quant.Q6_K},
		{"q4_0 weights", "q4_0", "ffn_up", quant.Q4_0},
		{"q8_0", "q8_0", "output", quant.Q8_0},
		{"f16", "f16", "attn_q", quant.F16},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tensorType(tc.ftype, tc.role, 0, 22); got != tc.want {
				t.Fatalf("%v, want %v", got, tc.want)
			}
		})
	}
}

func TestShapes(t *testing.T) {
	tests := []struct {
		name                      string
		dim, layers, heads, kv, f int
		tied                      bool
	}{
		{"tinyllama", 2048, 22, 32, 4, 5632, false},
		{"small", 768, 12, 12, 4, 2048, false},
		{"tiny", 256, 4, 8, 4, 768, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := ShapeByName(tc.name)
			if err != nil {
				t.Fatal(err)
			}
			if s.Dim != tc.dim || s.Layers != tc.layers || s.Heads != tc.heads || s.KVHeads != tc.kv || s.FFN != tc.f || s.TiedOutput != tc.tied || s.RopeBase != 10000 || s.Eps != 1e-5 {
				t.Fatalf("shape %+v", s)
			}
		})
	}
	if _, err := ShapeByName("huge"); err == nil {
		t.Fatal("unknown shape accepted")
	}
}
