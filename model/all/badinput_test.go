package all_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"ubatch/gguf"
	"ubatch/internal/testdata"
	"ubatch/model"
)

// TestBadModelsFail takes every family's mini synth model and makes parseable files whose
// metadata and tensors disagree: each must fail at model.Open with an error naming the key or
// tensor at fault (ARCH in want stands for general.architecture), never panic or load. Cases
// that need a key or tensor the family does not have are skipped for it.
func TestBadModelsFail(t *testing.T) {
	cases := badModels()
	for _, fx := range fixtures(t) {
		h := hparamsOf(t, fx)
		for _, tc := range cases {
			t.Run(fx.arch.Name+"/"+tc.name, func(t *testing.T) {
				if tc.needs != "" && !h.has(tc.needs) {
					t.Skipf("%s has no %s", fx.arch.Name, tc.needs)
				}
				v := newVariant(fx.file)
				tc.edit(v, h)
				expectLoadError(t, v, strings.ReplaceAll(tc.want, "ARCH", fx.arch.GGUF))
			})
		}
	}
}

// expectLoadError writes v and checks that model.Open refuses it with an error containing want.
func expectLoadError(t *testing.T, v *variant, want string) {
	t.Helper()
	img, err := v.encode()
	if err != nil {
		t.Fatalf("the variant does not encode: %v", err)
	}
	path := filepath.Join(t.TempDir(), "bad.gguf")
	if err := os.WriteFile(path, img, 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := model.Open(path)
	if err == nil {
		m.Close()
		t.Fatal("loaded without an error")
	}
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not contain %q", err, want)
	}
	t.Log(err)
}

// TestBadGptOssFails makes inconsistent variants of the shared gpt-oss file (synth has no
// gpt-oss fixture yet): its own tensors (sinks, the output's bias, post_attention_norm, the
// router's and experts' biases) and the window must be as the metadata says.
func TestBadGptOssFails(t *testing.T) {
	expectSharedFails(t, "models/arch/synth-gpt-oss-mxfp4.gguf", []sharedCase{
		{"sinks of the wrong length", func(v *variant) { v.tensor("blk.1.attn_sinks.weight").Dims[0] /= 2 },
			`tensor "blk.1.attn_sinks.weight" has shape [4], want [8]`},
		{"sinks missing", func(v *variant) { v.dropTensor("blk.2.attn_sinks.weight") },
			`tensor "blk.2.attn_sinks.weight" is missing`},
		{"output bias of the wrong length", func(v *variant) { v.tensor("blk.0.attn_output.bias").Dims[0] += 8 },
			`tensor "blk.0.attn_output.bias" has shape`},
		{"post_attention_norm missing", func(v *variant) { v.dropTensor("blk.3.post_attention_norm.weight") },
			`tensor "blk.3.post_attention_norm.weight" is missing`},
		{"router bias missing", func(v *variant) { v.dropTensor("blk.0.ffn_gate_inp.bias") },
			`tensor "blk.0.ffn_gate_inp.bias" is missing`},
		{"expert bias one expert short", func(v *variant) { v.tensor("blk.1.ffn_up_exps.bias").Dims[1]-- },
			`tensor "blk.1.ffn_up_exps.bias" has shape [256 7], want [256 8]`},
		{"expert bias flattened", func(v *variant) {
			t := v.tensor("blk.2.ffn_down_exps.bias")
			t.Dims = []uint64{t.Dims[0] * t.Dims[1]}
		}, `tensor "blk.2.ffn_down_exps.bias" has shape`},
		{"sliding window missing", func(v *variant) { v.set("gpt-oss.attention.sliding_window", nil) },
			"gpt-oss.attention.sliding_window is missing"},
		{"sliding window zero", func(v *variant) { v.set("gpt-oss.attention.sliding_window", uint32(0)) },
			"gpt-oss.attention.sliding_window = 0 is out of range"},
	})
}

// sharedCase is one inconsistent variant of a shared file: edit makes it from the file, and
// loading it must fail with an error containing want.
type sharedCase struct {
	name string
	edit func(v *variant)
	want string
}

// expectSharedFails parses the shared file rel (skipping without ../shared) and checks each
// case's variant of it.
func expectSharedFails(t *testing.T, rel string, cases []sharedCase) {
	t.Helper()
	f, err := gguf.Parse(testdata.ReadFile(t, rel))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := newVariant(f)
			tc.edit(v)
			expectLoadError(t, v, tc.want)
		})
	}
}

// badModel is one inconsistent variant: edit makes it from a valid fixture, and the error must
// contain want (ARCH standing for general.architecture).
type badModel struct {
	name  string
	needs string // a key (without "ARCH.") or tensor the family must have; "" for all
	edit  func(v *variant, h hp)
	want  string
}

func badModels() []badModel {
	return []badModel{
		{"head_count_kv zero", "", func(v *variant, h hp) { v.set(h.key("attention.head_count_kv"), uint32(0)) },
			"ARCH.attention.head_count_kv = 0 is out of range"},
		{"head_count_kv does not divide head_count", "", func(v *variant, h hp) { v.set(h.key("attention.head_count_kv"), uint32(3)) },
			"ARCH.attention.head_count_kv = 3 does not divide ARCH.attention.head_count = 4"},
		{"head_count zero", "", func(v *variant, h hp) { v.set(h.key("attention.head_count"), uint32(0)) },
			"ARCH.attention.head_count = 0 is out of range"},
		{"key_length contradicts the Q weight", "", func(v *variant, h hp) {
			v.set(h.key("attention.key_length"), uint32(2*h.headDim))
			v.set(h.key("attention.value_length"), uint32(2*h.headDim))
			if h.has("attention.key_length_swa") { // Gemma 4: the sliding layers' too
				v.set(h.key("attention.key_length_swa"), uint32(2*h.headDim))
				v.set(h.key("attention.value_length_swa"), uint32(2*h.headDim))
			}
		}, `"blk.0.attn_q`}, // attn_q.weight, or phi3's attn_qkv.weight
		{"value_length differs from key_length", "", func(v *variant, h hp) { v.set(h.key("attention.value_length"), uint32(h.headDim/2)) },
			"ARCH.attention.value_length = "},
		{"missing required tensor", "blk.1.ffn_down.weight", func(v *variant, h hp) { v.dropTensor("blk.1.ffn_down.weight") },
			`tensor "blk.1.ffn_down.weight" is missing`},
		{"missing token_embd", "", func(v *variant, h hp) { v.dropTensor("token_embd.weight") },
			`tensor "token_embd.weight" is missing`},
		{"matrix of the wrong shape", "", func(v *variant, h hp) { v.tensor("blk.0.attn_output.weight").Dims[1] += 32 },
			`tensor "blk.0.attn_output.weight" has shape`},
		{"norm of the wrong length", "blk.1.ffn_norm.weight", func(v *variant, h hp) { v.tensor("blk.1.ffn_norm.weight").Dims[0] += 8 },
			`tensor "blk.1.ffn_norm.weight" has shape`},
		{"feed_forward_length contradicts the tensors", "blk.0.ffn_down.weight", func(v *variant, h hp) { v.set(h.key("feed_forward_length"), uint32(4*h.ffn)) },
			`"blk.0.ffn_`},
		{"embedding_length contradicts the tensors", "", func(v *variant, h hp) { v.set(h.key("embedding_length"), uint32(2*h.dim)) },
			`tensor "token_embd.weight" has shape`},
		{"block_count smaller than the tensors' layers", "", func(v *variant, h hp) { v.set(h.key("block_count"), uint32(1)) },
			`is past ARCH.block_count = 1`},
		{"block_count larger than the tensors' layers", "", func(v *variant, h hp) { v.set(h.key("block_count"), uint32(3)) },
			`tensor "blk.2.`}, // attn_norm.weight, or gpt-oss's attn_q.bias (bound first), is missing
		{"block_count missing", "", func(v *variant, h hp) { v.set(h.key("block_count"), nil) },
			"ARCH.block_count is missing"},
		{"context_length a string", "", func(v *variant, h hp) { v.set(h.key("context_length"), "4096") },
			"ARCH.context_length is string"},
		{"context_length negative", "", func(v *variant, h hp) { v.set(h.key("context_length"), int32(-5)) },
			"ARCH.context_length = -5 is out of range"},
		{"embedding_length a float", "", func(v *variant, h hp) { v.set(h.key("embedding_length"), float32(64)) },
			"ARCH.embedding_length is float32"},
		{"epsilon zero", "", func(v *variant, h hp) { v.set(h.key("attention.layer_norm_rms_epsilon"), float32(0)) },
			"ARCH.attention.layer_norm_rms_epsilon = 0 is out of range"},
		{"rope base a string", "", func(v *variant, h hp) { v.set(h.key("rope.freq_base"), "1e4") },
			"ARCH.rope.freq_base is string"},
		{"rope dimension_count past the head", "", func(v *variant, h hp) { v.set(h.key("rope.dimension_count"), uint32(2*h.headDim)) },
			"ARCH.rope.dimension_count = "},
		{"unknown rope scaling", "", func(v *variant, h hp) { v.set(h.key("rope.scaling.type"), "wavy") },
			`ARCH.rope.scaling.type = "wavy" is not supported`},
		{"sliding window zero", "attention.sliding_window", func(v *variant, h hp) { v.set(h.key("attention.sliding_window"), uint32(0)) },
			"ARCH.attention.sliding_window = 0 is out of range"},
		{"sliding window pattern zero", "attention.sliding_window_pattern", func(v *variant, h hp) {
			v.set(h.key("attention.sliding_window_pattern"), uint32(0))
		}, "ARCH.attention.sliding_window_pattern = 0 is out of range"},
		{"soft-cap negative", "attn_logit_softcapping", func(v *variant, h hp) { v.set(h.key("attn_logit_softcapping"), float32(-1)) },
			"ARCH.attn_logit_softcapping = -1 is out of range"},
		{"rope_freqs of the wrong length", "rope_freqs.weight", func(v *variant, h hp) { v.tensor("rope_freqs.weight").Dims[0] *= 2 },
			`tensor "rope_freqs.weight" has shape`},
		{"bias of the wrong length", "blk.0.attn_k.bias", func(v *variant, h hp) { v.tensor("blk.0.attn_k.bias").Dims[0] /= 2 },
			`tensor "blk.0.attn_k.bias" has shape`},
		{"q norm missing", "blk.1.attn_q_norm.weight", func(v *variant, h hp) { v.dropTensor("blk.1.attn_q_norm.weight") },
			`tensor "blk.1.attn_q_norm.weight" is missing`},
		// Experts (qwen3moe): the counts, widths and stacked tensors must agree.
		{"expert_count zero", "expert_count", func(v *variant, h hp) { v.set(h.key("expert_count"), uint32(0)) },
			"ARCH.expert_count = 0 is out of range"},
		{"expert_count missing", "expert_count", func(v *variant, h hp) { v.set(h.key("expert_count"), nil) },
			"ARCH.expert_count is missing"},
		{"expert_count contradicts the tensors", "expert_count", func(v *variant, h hp) { v.set(h.key("expert_count"), uint32(2*h.experts)) },
			`tensor "blk.0.ffn_gate_inp.weight" has shape`},
		{"more experts used than exist", "expert_used_count", func(v *variant, h hp) { v.set(h.key("expert_used_count"), uint32(h.experts+1)) },
			"the file uses more experts per token than it has"},
		{"expert_used_count zero", "expert_used_count", func(v *variant, h hp) { v.set(h.key("expert_used_count"), uint32(0)) },
			"ARCH.expert_used_count = 0 is out of range"},
		{"expert_feed_forward_length contradicts the tensors", "expert_feed_forward_length", func(v *variant, h hp) {
			v.set(h.key("expert_feed_forward_length"), uint32(2*h.expertFFN))
		}, `tensor "blk.0.ffn_gate_exps.weight" has shape`},
		{"stacked experts one short", "blk.1.ffn_down_exps.weight", func(v *variant, h hp) { v.tensor("blk.1.ffn_down_exps.weight").Dims[2]-- },
			`tensor "blk.1.ffn_down_exps.weight" has shape`},
		{"stacked experts as one 2-D matrix", "blk.0.ffn_up_exps.weight", func(v *variant, h hp) {
			t := v.tensor("blk.0.ffn_up_exps.weight")
			t.Dims = []uint64{t.Dims[0], t.Dims[1] * t.Dims[2]}
		}, `tensor "blk.0.ffn_up_exps.weight" has shape`},
		{"router missing", "blk.1.ffn_gate_inp.weight", func(v *variant, h hp) { v.dropTensor("blk.1.ffn_gate_inp.weight") },
			`tensor "blk.1.ffn_gate_inp.weight" is missing`},
		{"expert tensor missing", "blk.1.ffn_gate_exps.weight", func(v *variant, h hp) { v.dropTensor("blk.1.ffn_gate_exps.weight") },
			`tensor "blk.1.ffn_gate_exps.weight" is missing`},
		{"unknown architecture", "", func(v *variant, h hp) { v.set("general.architecture", "mamba9") },
			`unsupported architecture "mamba9"`},
		{"architecture missing", "", func(v *variant, h hp) { v.set("general.architecture", nil) },
			`unsupported architecture ""`},
		{"eos outside the vocabulary", "", func(v *variant, h hp) { v.set("tokenizer.ggml.eos_token_id", uint32(999999)) },
			"tokenizer.ggml.eos_token_id = 999999 is outside the vocabulary"},
		{"bos just past the vocabulary", "", func(v *variant, h hp) { v.set("tokenizer.ggml.bos_token_id", uint32(h.vocab)) },
			"tokenizer.ggml.bos_token_id = "},
		{"vocabulary smaller than token_embd", "", func(v *variant, h hp) {
			v.set("tokenizer.ggml.tokens", h.tokens[:h.vocab-8])
		}, "token_embd"},
	}
}

// hp are a fixture's sizes and names, read from its metadata.
type hp struct {
	fx                       fixture
	dim, ffn, headDim, vocab int
	experts, expertFFN       int
	tokens                   []string
}

func hparamsOf(t *testing.T, fx fixture) hp {
	t.Helper()
	m, err := model.Load(fx.file, model.LoadOptions{NoPack: true})
	if err != nil {
		t.Fatalf("%s: the valid fixture does not load: %v", fx.arch.Name, err)
	}
	defer m.Close()
	g := m.Hparams()
	toks, _ := fx.file.Strings("tokenizer.ggml.tokens")
	return hp{fx: fx, dim: g.Dim, ffn: g.FFN, headDim: g.HeadDim, vocab: g.Vocab, experts: g.NExperts, expertFFN: g.ExpertFFN, tokens: toks}
}

func (h hp) key(k string) string { return h.fx.arch.GGUF + "." + k }

// has reports whether the fixture has the tensor name or the metadata key ARCH.name.
func (h hp) has(name string) bool {
	_, ok := h.fx.file.Value(h.key(name))
	_, isTensor := h.fx.file.Tensor(name)
	return ok || isTensor
}
