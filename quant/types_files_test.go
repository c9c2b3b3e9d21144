package quant_test

import (
	"testing"

	"ubatch/internal/testdata"
	"ubatch/quant"
)

// TestTypesFiles checks the new types on llama.cpp's own bytes (shared/models/types): a tensor
// dequantized and requantized with Quantize must come back close to the original blocks. ggml's
// quantizers are not all idempotent (the scale searches start again from the dequantized
// values), so only a share of identical bytes and a small error are required; a layout slip in
// Dequantize or Quantize would leave few bytes equal and errors of order 1. Measured: Q4_1, Q5_0,
// Q5_1 100% identical; IQ4_NL 99.42% (relative RMS 4.9e-3), IQ4_XS 99.34% (5.1e-3), Q2_K
// 99.45% (1.2e-2), Q3_K 89.69% (3.1e-2).
func TestTypesFiles(t *testing.T) {
	tests := []struct {
		name    string
		file    string
		tensor  string
		typ     quant.Type
		minSame float64 // fraction of bytes our requantization must share with llama.cpp's
		maxRel  float64 // relative RMS of the requantized values vs llama.cpp's
	}{
		{"Q4_1", "q4_1", "blk.0.attn_q.weight", quant.Q4_1, 0.999, 1e-6},
		{"Q5_0", "q5_0", "blk.0.attn_q.weight", quant.Q5_0, 0.999, 1e-6},
		{"Q5_1", "q5_1", "blk.0.attn_q.weight", quant.Q5_1, 0.999, 1e-6},
		{"IQ4_NL", "iq4_nl", "blk.0.attn_q.weight", quant.IQ4_NL, 0.98, 1e-2},
		{"IQ4_XS", "iq4_xs", "blk.0.attn_q.weight", quant.IQ4_XS, 0.98, 1e-2},
		{"Q2_K", "q2_k", "blk.0.attn_q.weight", quant.Q2_K, 0.98, 2e-2},
		{"Q3_K", "q3_k_s", "blk.0.attn_q.weight", quant.Q3_K, 0.85, 5e-2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := openModel(t, "types/synth-types-"+tc.file+".gguf")
			typ, data, got := dequantTensor(t, f, tc.tensor)
			if typ != tc.typ {
				t.Fatalf("%s is %v, expected %v", tc.tensor, typ, tc.typ)
			}
			frac, back := requantize(t, typ, got, data)
			e := testdata.RelRMS(back, got)
			t.Logf("requantized: %.2f%% identical bytes, relative RMS vs llama.cpp %.4g", 100*frac, e)
			if frac < tc.minSame || e > tc.maxRel {
				t.Errorf("requantized tensor shares %.2f%% of llama.cpp's bytes (want >= %.0f%%), relative RMS %.4g (want <= %.3g)",
					100*frac, 100*tc.minSame, e, tc.maxRel)
			}
		})
	}
}
