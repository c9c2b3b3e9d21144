package synth

import (
	"fmt"
	"slices"
	"strings"

	"ubatch/gguf"
)

// Arch is a model family's file layout as llama.cpp's converter writes it: the tensors and
// metadata keys synth writes for it. The zero values of the optional parts mean "absent".
type Arch struct {
	Name  string // the --arch name: llama, llama3, qwen2, qwen3, gemma2, gemma3, phi3, qwen3moe, gpt-oss
	GGUF  string // general.architecture
	Shape Shape  // the default shape: that of the family's shared file (../shared/models/arch)
	// Shapes are the family's own other shapes (--shape), found before the common Shapes.
	Shapes []Shape
	Vocab  string // default vocabulary, a file of shared/models/vocab

	// Output is "tied" (no output.weight), "untied", or "" (the shape's TiedOutput decides).
	Output         string
	RopeBase, Eps  float32 // 0: the shape's
	RopeFreqs      bool    // rope_freqs.weight, Llama 3.1's per-pair frequency factors
	QKVBias        bool    // attn_q/k/v.bias (Qwen 2)
	QKNorm         bool    // attn_q_norm and attn_k_norm, per-head RMSNorm weights
	PostNorms      bool    // post_attention_norm and post_ffw_norm (Gemma)
	Fused          bool    // attn_qkv for Q, K and V; ffn_up holding gate and up (Phi-3)
	KeyLength      bool    // attention.key_length and value_length are written
	WideHeads      bool    // head size 2·dim/heads unless the shape sets one (Qwen 3, Gemma)
	Window         int     // attention.sliding_window (0: none)
	WindowPattern  int     // attention.sliding_window_pattern (0: not written)
	FreqBaseSWA    float32 // rope.freq_base_swa (0: not written)
	AttnSoftcap    float32 // attn_logit_softcapping (0: not written)
	FinalSoftcap   float32 // final_logit_softcapping (0: not written)
	VocabSizeKey   bool    // ARCH.vocab_size is written (synth's original llama files)
	QuantVersion   bool    // general.quantization_version is written, as llama.cpp's quantizer does
	PositionalAttn bool    // Q and K weights of std 1.2/sqrt(dim), norms 1±0.1, biases 0.1 (below)
	// MoE replaces the dense feed-forward by experts: the router ffn_gate_inp (kept F32, std
	// 3/sqrt(dim) so that routing is decisive) and the stacked ffn_{gate,up,down}_exps.
	MoE bool
	// OAI is gpt-oss's layout on top of MoE and QKVBias: attn_output.bias, attn_sinks (std 1),
	// post_attention_norm in place of ffn_norm, the router's and experts' biases, gate and up
	// weights of std 3/sqrt(dim) (so that the clamped SwiGLU clamps) and YaRN rope (factor 4
	// from an original context of 64, so that it matters in a short prompt).
	OAI bool
	// Gemma4 is Gemma 4's layout on top of PostNorms and QKNorm (gemma4.go): per-layer
	// layer_output_scale, a boolean sliding_window_pattern array, the _swa key and rope
	// lengths, shared_kv_layers, rope_freqs of the full layers' proportional rope; with MoE a
	// dense FFN beside the experts, fused ffn_gate_up_exps, the router's and experts' scales.
	Gemma4 bool
	// SharedType is the file type of the family's shared file ("": q8_0).
	SharedType string
	// VocabSkip are tokenizer keys of the vocabulary file not copied (the shared file lacks them).
	VocabSkip []string
}

// Archs are the families synth writes. Except llama (synth's benchmark models, unchanged), each
// is laid out as its shared file, and like those files has Q and K weights larger than the rest
// (std 1.2/sqrt(dim)) so that attention is not uniform and positions matter, norm weights
// 1 + N(0, 0.1²) as stored after conversion, and biases N(0, 0.1²).
var Archs = []Arch{
	{Name: "llama", GGUF: "llama", Shape: mustShape("small"), Vocab: "ggml-vocab-llama-spm.gguf", VocabSizeKey: true},
	{Name: "llama3", GGUF: "llama", Vocab: "ggml-vocab-llama-spm.gguf", Output: "tied", RopeFreqs: true,
		Shape:        Shape{Name: "llama3", Dim: 128, Layers: 4, Heads: 4, KVHeads: 2, FFN: 384, Ctx: 4096, RopeBase: 10000, Eps: 1e-5},
		QuantVersion: true, PositionalAttn: true},
	{Name: "qwen2", GGUF: "qwen2", Vocab: "ggml-vocab-deepseek-coder.gguf", Output: "tied", QKVBias: true,
		RopeBase: 1e6, Eps: 1e-6,
		Shape:        Shape{Name: "qwen2", Dim: 128, Layers: 4, Heads: 4, KVHeads: 2, FFN: 384, Ctx: 4096, RopeBase: 1e6, Eps: 1e-6},
		QuantVersion: true, PositionalAttn: true},
	{Name: "qwen3", GGUF: "qwen3", Vocab: "ggml-vocab-deepseek-coder.gguf", Output: "tied", QKNorm: true,
		KeyLength: true, WideHeads: true, RopeBase: 1e6, Eps: 1e-6,
		Shape:        Shape{Name: "qwen3", Dim: 128, Layers: 4, Heads: 4, KVHeads: 2, HeadDim: 64, FFN: 384, Ctx: 4096, RopeBase: 1e6, Eps: 1e-6},
		QuantVersion: true, PositionalAttn: true},
	{Name: "gemma2", GGUF: "gemma2", Vocab: "ggml-vocab-llama-spm.gguf", Output: "tied", PostNorms: true,
		KeyLength: true, WideHeads: true, RopeBase: 10000, Eps: 1e-6, Window: 16, AttnSoftcap: 2, FinalSoftcap: 2,
		Shape:        Shape{Name: "gemma2", Dim: 256, Layers: 4, Heads: 8, KVHeads: 4, HeadDim: 64, FFN: 768, Ctx: 4096, RopeBase: 10000, Eps: 1e-6},
		QuantVersion: true, PositionalAttn: true},
	{Name: "gemma3", GGUF: "gemma3", Vocab: "ggml-vocab-llama-spm.gguf", Output: "tied", PostNorms: true, QKNorm: true,
		KeyLength: true, WideHeads: true, RopeBase: 1e6, Eps: 1e-6, Window: 16, WindowPattern: 2, FreqBaseSWA: 10000,
		Shape:        Shape{Name: "gemma3", Dim: 256, Layers: 4, Heads: 8, KVHeads: 2, HeadDim: 64, FFN: 768, Ctx: 4096, RopeBase: 1e6, Eps: 1e-6},
		QuantVersion: true, PositionalAttn: true},
	{Name: "phi3", GGUF: "phi3", Vocab: "ggml-vocab-phi-3.gguf", Output: "untied", Fused: true, RopeBase: 10000, Eps: 1e-6,
		Shape:        Shape{Name: "phi3", Dim: 128, Layers: 4, Heads: 4, KVHeads: 4, FFN: 384, Ctx: 4096, RopeBase: 10000, Eps: 1e-6},
		QuantVersion: true, PositionalAttn: true},
	// The shared file has stories260K's vocabulary, which is beside vocab/, not in it.
	{Name: "qwen3moe", GGUF: "qwen3moe", Vocab: "../stories260K.gguf", VocabSkip: []string{"tokenizer.ggml.seperator_token_id"}, Output: "untied", QKNorm: true,
		KeyLength: true, WideHeads: true, RopeBase: 1e6, Eps: 1e-6, MoE: true,
		Shape: Shape{Name: "qwen3moe", Dim: 256, Layers: 4, Heads: 8, KVHeads: 4, HeadDim: 64, FFN: 768, Ctx: 4096, RopeBase: 1e6, Eps: 1e-6,
			Experts: 8, ExpertsUsed: 2, ExpertFFN: 192},
		QuantVersion: true, PositionalAttn: true},
	{Name: "gemma4", GGUF: "gemma4", Vocab: "../stories260K.gguf", VocabSkip: []string{"tokenizer.ggml.seperator_token_id"}, Output: "tied", PostNorms: true, QKNorm: true,
		KeyLength: true, RopeBase: 1e6, Eps: 1e-6, Window: 8, FreqBaseSWA: 10000, FinalSoftcap: 1, RopeFreqs: true, Gemma4: true,
		Shape: gemma4Shapes[0], Shapes: gemma4Shapes, QuantVersion: true, PositionalAttn: true},
	{Name: "gpt-oss", GGUF: "gpt-oss", Vocab: "../stories260K.gguf", VocabSkip: []string{"tokenizer.ggml.seperator_token_id"}, Output: "untied", QKVBias: true,
		KeyLength: true, RopeBase: 150000, Eps: 1e-6, Window: 8, MoE: true, OAI: true, SharedType: "mxfp4",
		Shape: Shape{Name: "gpt-oss", Dim: 256, Layers: 4, Heads: 8, KVHeads: 2, HeadDim: 64, FFN: 768, Ctx: 4096, RopeBase: 150000, Eps: 1e-6,
			Experts: 8, ExpertsUsed: 2, ExpertFFN: 256},
		QuantVersion: true, PositionalAttn: true},
}

// ArchByName finds a family; "" is llama.
func ArchByName(name string) (Arch, error) {
	if name == "" {
		name = "llama"
	}
	var names []string
	for _, a := range Archs {
		if a.Name == name {
			return a, nil
		}
		names = append(names, a.Name)
	}
	return Arch{}, fmt.Errorf("unknown architecture %q (known: %s)", name, strings.Join(names, ", "))
}

// ShapeByName finds one of the family's own shapes, or else a common one.
func (a Arch) ShapeByName(name string) (Shape, error) {
	for _, s := range a.Shapes {
		if s.Name == name {
			return s, nil
		}
	}
	return ShapeByName(name)
}

func mustShape(name string) Shape {
	s, err := ShapeByName(name)
	if err != nil {
		panic(err)
	}
	return s
}

// layout is an Arch at a Shape: every size the tensors and metadata are written from.
type layout struct {
	Arch
	s                     Shape
	headDim, qDim, kvDim  int
	tied                  bool
	ropeBase, eps         float32
	vocab                 int
	fileType, chatTmpl    string
	rerank                bool // a cls.output.weight head of len(RerankLabels) rows
	modelName             string
	ropeFreqs             []float32
	ropeOrigCtx, ropeDims int
	experts, used, expFFN int // Arch.MoE's sizes
}

func newLayout(a Arch, s Shape, vocab int, fileType string) (*layout, error) {
	l := &layout{Arch: a, s: s, vocab: vocab, fileType: fileType, tied: s.TiedOutput, ropeBase: s.RopeBase, eps: s.Eps}
	if s.Dim <= 0 || s.Layers <= 0 || s.Heads <= 0 || s.KVHeads <= 0 || s.FFN <= 0 || s.Ctx <= 0 {
		return nil, fmt.Errorf("shape %s: every size must be positive: %+v", s.Name, s)
	}
	if s.Heads%s.KVHeads != 0 {
		return nil, fmt.Errorf("shape %s: %d kv heads do not divide %d heads", s.Name, s.KVHeads, s.Heads)
	}
	l.headDim = s.HeadDim
	if l.headDim == 0 {
		if s.Dim%s.Heads != 0 {
			return nil, fmt.Errorf("shape %s: %d heads do not divide dim %d (set a head size)", s.Name, s.Heads, s.Dim)
		}
		l.headDim = s.Dim / s.Heads
		if a.WideHeads {
			l.headDim *= 2
		}
	}
	if l.headDim%2 != 0 {
		return nil, fmt.Errorf("shape %s: head size %d is odd (rope rotates pairs)", s.Name, l.headDim)
	}
	if !a.KeyLength && l.headDim != s.Dim/s.Heads {
		return nil, fmt.Errorf("shape %s: architecture %s has no key_length: its head size is dim/heads", s.Name, a.Name)
	}
	l.qDim, l.kvDim = s.Heads*l.headDim, s.KVHeads*l.headDim
	switch a.Output {
	case "tied":
		l.tied = true
	case "untied":
		l.tied = false
	}
	if a.RopeBase != 0 {
		l.ropeBase = a.RopeBase
	}
	if a.Eps != 0 {
		l.eps = a.Eps
	}
	if a.Gemma4 && s.Experts > 0 {
		l.MoE = true // Gemma 4's MoE kind differs from its dense kind only in its sizes
	}
	if l.MoE {
		l.experts, l.used, l.expFFN = s.Experts, s.ExpertsUsed, s.ExpertFFN
		if l.experts == 0 {
			l.experts, l.used, l.expFFN = 8, 2, max(32, s.FFN/4)
		}
		if l.used < 1 || l.used > l.experts || l.expFFN <= 0 {
			return nil, fmt.Errorf("shape %s: %d of %d experts of FFN %d: want 1 <= used <= experts and a positive FFN", s.Name, l.used, l.experts, l.expFFN)
		}
	}
	l.ropeDims = l.headDim
	switch {
	case a.Gemma4:
		if err := l.checkGemma4(); err != nil {
			return nil, err
		}
		l.ropeDims = l.gemma4FullHD() // the full layers' rope and rope_freqs; the sliding ones' is rope.dimension_count_swa
		l.ropeFreqs = proportionalRopeFactors(l.ropeDims, gemma4FullRotary)
	case a.RopeFreqs:
		l.ropeOrigCtx = 64
		l.ropeFreqs = llama3RopeFactors(l.ropeDims, l.ropeBase, 8, 1, 4, l.ropeOrigCtx)
	}
	return l, nil
}

// setMetadata writes the general.* and ARCH.* keys.
func (l *layout) setMetadata(set func(string, any)) {
	k := func(key string) string { return l.GGUF + "." + key }
	set("general.architecture", l.GGUF)
	set("general.name", l.modelName)
	set("general.file_type", FileTypes[l.fileType])
	set(k("context_length"), uint32(l.s.Ctx))
	set(k("embedding_length"), uint32(l.s.Dim))
	set(k("block_count"), uint32(l.s.Layers))
	set(k("feed_forward_length"), uint32(l.s.FFN))
	set(k("attention.head_count"), uint32(l.s.Heads))
	set(k("attention.head_count_kv"), uint32(l.s.KVHeads))
	if l.KeyLength {
		set(k("attention.key_length"), uint32(l.headDim))
		set(k("attention.value_length"), uint32(l.headDim))
	}
	set(k("rope.dimension_count"), uint32(l.ropeDims))
	set(k("rope.freq_base"), l.ropeBase)
	set(k("attention.layer_norm_rms_epsilon"), l.eps)
	if l.Window > 0 {
		set(k("attention.sliding_window"), uint32(l.Window))
	}
	if l.Gemma4 {
		l.setGemma4(set)
	}
	if l.WindowPattern > 0 {
		set(k("attention.sliding_window_pattern"), uint32(l.WindowPattern))
	}
	if l.FreqBaseSWA > 0 {
		set(k("rope.freq_base_swa"), l.FreqBaseSWA)
	}
	if l.AttnSoftcap > 0 {
		set(k("attn_logit_softcapping"), l.AttnSoftcap)
	}
	if l.FinalSoftcap > 0 {
		set(k("final_logit_softcapping"), l.FinalSoftcap)
	}
	if l.OAI {
		set(k("rope.scaling.type"), "yarn")
		set(k("rope.scaling.factor"), float32(4))
		set(k("rope.scaling.original_context_length"), uint32(64))
	}
	if l.MoE {
		set(k("expert_count"), uint32(l.experts))
		set(k("expert_used_count"), uint32(l.used))
		set(k("expert_feed_forward_length"), uint32(l.expFFN))
	}
	if l.VocabSizeKey {
		set(k("vocab_size"), uint32(l.vocab))
	}
}

// setTokenizer copies the vocabulary's tokenizer.* keys but its chat template (the shared files
// have none), then stores the chat template if one is given.
func (l *layout) setTokenizer(w *gguf.Writer, vocab *gguf.File, set func(string, any)) error {
	keep := func(k string) bool {
		return strings.HasPrefix(k, "tokenizer.") && k != "tokenizer.chat_template" && !slices.Contains(l.VocabSkip, k)
	}
	if err := w.SetFrom(vocab, keep); err != nil {
		return err
	}
	if l.chatTmpl != "" {
		set("tokenizer.chat_template", l.chatTmpl)
	}
	if l.QuantVersion {
		set("general.quantization_version", uint32(2))
	}
	return nil
}
