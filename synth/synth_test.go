package synth

import (
	"math"
	"strings"
	"testing"

	"ubatch/gguf"
	"ubatch/internal/testmodel"
	"ubatch/quant"
	"ubatch/tokenizer"
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
		{"q6_k", "q6_k", "ffn_down", quant.Q6_K},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tensorType(tc.ftype, tc.role, 0, 22); got != tc.want {
				t.Fatalf("%v, want %v", got, tc.want)
			}
		})
	}
}

// TestEightExpertsMix: with exactly 8 experts llama.cpp's quantizer keeps attn_k and attn_v in
// Q8_0 in every quantized type and gives attn_output Q5_K in Q4_K_M; other counts and float
// files are unchanged.
func TestEightExpertsMix(t *testing.T) {
	tests := []struct {
		name, ftype, role string
		experts           int
		want              quant.Type
	}{
		{"q4_k_m attn_v", "q4_k_m", "attn_v", 8, quant.Q8_0},
		{"q4_k_m attn_k", "q4_k_m", "attn_k", 8, quant.Q8_0},
		{"q4_k_m attn_output", "q4_k_m", "attn_output", 8, quant.Q5_K},
		{"q4_k_m attn_q unchanged", "q4_k_m", "attn_q", 8, quant.Q4_K},
		{"q4_0 attn_v", "q4_0", "attn_v", 8, quant.Q8_0},
		{"q4_0 attn_output unchanged", "q4_0", "attn_output", 8, quant.Q4_0},
		{"64 experts unchanged", "q4_k_m", "attn_k", 64, quant.Q4_K},
		{"dense unchanged", "q4_k_m", "attn_output", 0, quant.Q4_K},
		{"f16 unchanged", "f16", "attn_v", 8, quant.F16},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := eightExperts(tensorType(tc.ftype, tc.role, 1, 4), tc.ftype, tc.role, tc.experts); got != tc.want {
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
		{"mini", 64, 2, 4, 2, 128, false},
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

// TestLlama3RopeFactors: Llama 3.1's formula at 32 rotated dims, base 1e4, factor 8, low and high
// frequency factors 1 and 4 and an original context of 64 gives the factors of the shared llama3
// file: 1 for the two fastest pairs, 8 from the sixth on, interpolated between.
func TestLlama3RopeFactors(t *testing.T) {
	got := llama3RopeFactors(32, 10000, 8, 1, 4, 64)
	want := []float32{1, 1, 1.2939758, 2.7651734, 7.667385, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8}
	if len(got) != len(want) {
		t.Fatalf("%d factors, want %d", len(got), len(want))
	}
	for i := range want {
		if math.Abs(float64(got[i]-want[i])) > 1e-5 {
			t.Fatalf("factors %v, want %v", got, want)
		}
	}
}

func TestBuiltinVocab(t *testing.T) {
	f, err := BuiltinVocab(300)
	if err != nil {
		t.Fatal(err)
	}
	tk, err := tokenizer.FromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	if tk.VocabSize() != 300 || tk.BOS() != 1 || tk.EOS() != 2 {
		t.Fatalf("%d tokens, BOS %d, EOS %d", tk.VocabSize(), tk.BOS(), tk.EOS())
	}
	const text = "a b zz ünïcode"
	ids := tk.Encode(text, false, false)
	if got := tk.Decode(ids); got != text {
		t.Fatalf("Decode(Encode(%q)) = %q (ids %v)", text, got, ids)
	}
	if ids[0] != 260 { // "▁a", the first letter piece
		t.Errorf("ids %v: want the piece ▁a (260) first", ids)
	}
	for _, n := range []int{0, 260, 1<<20 + 1} {
		if _, err := BuiltinVocab(n); err == nil {
			t.Errorf("BuiltinVocab(%d) accepted", n)
		}
	}
}

func TestBuildErrors(t *testing.T) {
	v, err := BuiltinVocab(261)
	if err != nil {
		t.Fatal(err)
	}
	mini, _ := ShapeByName("mini")
	odd := mini
	odd.KVHeads = 3
	wide := mini
	wide.HeadDim = 32
	tests := []struct {
		name string
		o    Options
		want string
	}{
		{"unknown arch", Options{Arch: "mamba", FileType: "q8_0", Vocab: v}, `unknown architecture "mamba"`},
		{"unknown type", Options{FileType: "q3", Vocab: v}, `unknown type "q3"`},
		{"no vocab", Options{FileType: "q8_0"}, "no vocabulary"},
		{"kv heads", Options{Shape: odd, FileType: "q8_0", Vocab: v}, "3 kv heads do not divide 4 heads"},
		{"head size without key_length", Options{Arch: "llama3", Shape: wide, FileType: "q8_0", Vocab: v}, "has no key_length"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Build(tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

// TestChatTemplate: --chat-template's text is stored; without one the file has none, even when
// the vocabulary carries one (as the shared files).
func TestChatTemplate(t *testing.T) {
	v, err := BuiltinVocab(261)
	if err != nil {
		t.Fatal(err)
	}
	w := gguf.NewWriter()
	w.SetFrom(v, nil)
	w.Set("tokenizer.chat_template", "{{ vocab's }}")
	withTmpl := testmodel.Parse(t, w)
	mini, _ := ShapeByName("mini")
	for _, tc := range []struct{ name, tmpl string }{{"given", "{{ messages }}"}, {"none", ""}} {
		t.Run(tc.name, func(t *testing.T) {
			w, err := Build(Options{Arch: "qwen3", Shape: mini, FileType: "f32", Vocab: withTmpl, ChatTemplate: tc.tmpl})
			if err != nil {
				t.Fatal(err)
			}
			f := testmodel.Parse(t, w)
			got, ok := f.String("tokenizer.chat_template")
			if got != tc.tmpl || ok != (tc.tmpl != "") {
				t.Fatalf("chat template %q (present %v), want %q", got, ok, tc.tmpl)
			}
		})
	}
}
