// Package synth writes GGUF files with seeded random weights for every model family ubatch runs
// (llama, llama3, qwen2, qwen3, gemma2, gemma3, phi3, qwen3moe): benchmark models, and fixtures for tests
// that need a model of a family without ../shared. Random weights cost exactly what trained ones
// cost to run; only the text they produce is meaningless. Each family's tensors and metadata are
// laid out as llama.cpp's converter writes them (see Archs).
package synth

import (
	"fmt"
	"runtime"
	"sync"

	"ubatch/gguf"
	"ubatch/quant"
)

// Shape is a model's sizes.
type Shape struct {
	Name                             string
	Dim, Layers, Heads, KVHeads, FFN int
	HeadDim                          int // attention.key_length; 0: dim/heads (twice that for Arch.WideHeads)
	Ctx                              int
	RopeBase, Eps                    float32 // unless the Arch sets its own
	TiedOutput                       bool    // no output.weight (unless the Arch decides)
	// A mixture of experts (Arch.MoE): experts per layer, used per token, each one's FFN width.
	// 0: the Arch's defaults (8, 2 and FFN/4).
	Experts, ExpertsUsed, ExpertFFN int
	// Gemma 4's per-layer sizes (0 and false: none, every layer as the sliding ones): the full
	// layers' head size and KV head count, full layers without attn_v (attention_k_eq_v), the
	// last SharedKV layers reading earlier layers' KV, per-layer embeddings of PerLayerInput
	// values a layer, and the shared layers' FFN twice as wide (use_double_wide_mlp).
	FullHeadDim, FullKVHeads int
	FullKEqV                 bool
	SharedKV, PerLayerInput  int
	DoubleWideFFN            bool
}

// Shapes are the benchmark shapes of shared/perf/README.md, "tiny" (the shape of the shared
// synth-tiny models) and "mini", small enough for a test to build a model of every family in
// milliseconds. Each Arch also has a default shape, that of its shared file.
var Shapes = []Shape{
	{Name: "tinyllama", Dim: 2048, Layers: 22, Heads: 32, KVHeads: 4, FFN: 5632, Ctx: 2048, RopeBase: 10000, Eps: 1e-5},
	{Name: "small", Dim: 768, Layers: 12, Heads: 12, KVHeads: 4, FFN: 2048, Ctx: 2048, RopeBase: 10000, Eps: 1e-5},
	{Name: "tiny", Dim: 256, Layers: 4, Heads: 8, KVHeads: 4, FFN: 768, Ctx: 2048, RopeBase: 10000, Eps: 1e-5, TiedOutput: true},
	{Name: "mini", Dim: 64, Layers: 2, Heads: 4, KVHeads: 2, FFN: 128, Ctx: 512, RopeBase: 10000, Eps: 1e-5},
	// The MoE benchmark of issue 33 (about Qwen3-30B-A3B's layers, fewer of them): 24 layers,
	// dim 2048, 64 experts of FFN 768 with 8 used, 32/4 heads of 128, a 32k vocabulary.
	{Name: "moe-bench", Dim: 2048, Layers: 24, Heads: 32, KVHeads: 4, HeadDim: 128, FFN: 6144, Ctx: 4096, RopeBase: 1e6, Eps: 1e-6,
		Experts: 64, ExpertsUsed: 8, ExpertFFN: 768},
}

// ShapeByName finds a shape.
func ShapeByName(name string) (Shape, error) {
	for _, s := range Shapes {
		if s.Name == name {
			return s, nil
		}
	}
	return Shape{}, fmt.Errorf("unknown shape %q (known: tinyllama, small, tiny, mini, moe-bench, or an architecture's own)", name)
}

// FileTypes are the weight types Build accepts, with llama.cpp's general.file_type numbers.
// mxfp4 is llama.cpp's MXFP4_MOE: MXFP4 experts, Q8_0 for the other matrices.
var FileTypes = map[string]uint32{"f32": 0, "f16": 1, "q4_0": 2, "q8_0": 7, "q4_k_m": 15, "q6_k": 18, "mxfp4": 38}

// Options for Build.
type Options struct {
	Arch         string     // a family of Archs; "" is llama
	Shape        Shape      // sizes; the zero Shape is the family's default (Arch.Shape)
	FileType     string     // f32, f16, q8_0, q4_0, q4_k_m, q6_k, mxfp4
	Vocab        *gguf.File // tokenizer.* metadata is copied from it; its token count is the vocab size
	ChatTemplate string     // stored as tokenizer.chat_template when not empty
	FIM          bool       // write the vocabulary's fill-in-the-middle token keys (see BuiltinVocabFIM)
	Rerank       bool       // a reranker: pooling type rank, a cls.output.weight head (see setRerank)
	Seed         uint64
	Threads      int                   // 0 = all cores
	Progress     func(done, total int) // tensors written so far; may be nil
}

// Build generates the model into a gguf.Writer: the family's tensors and metadata at the shape's
// sizes, weights N(0, 0.02²) (and as Arch says for the families with positional attention). Every
// tensor draws from its own generator seeded from (Seed, tensor name), so the result does not
// depend on how the work is spread over threads.
func Build(o Options) (*gguf.Writer, error) {
	if _, ok := FileTypes[o.FileType]; !ok {
		return nil, fmt.Errorf("unknown type %q (use f32, f16, q8_0, q4_0, q4_k_m or q6_k)", o.FileType)
	}
	a, err := ArchByName(o.Arch)
	if err != nil {
		return nil, err
	}
	if o.Vocab == nil {
		return nil, fmt.Errorf("no vocabulary: pass a GGUF with tokenizer metadata, or BuiltinVocab's")
	}
	toks, ok := o.Vocab.Strings("tokenizer.ggml.tokens")
	if !ok || len(toks) == 0 {
		return nil, fmt.Errorf("the vocabulary file has no tokenizer.ggml.tokens")
	}
	s := o.Shape
	if s.Name == "" && s.Dim == 0 {
		s = a.Shape
	}
	l, err := newLayout(a, s, len(toks), o.FileType)
	if err != nil {
		return nil, err
	}
	l.chatTmpl, l.rerank = o.ChatTemplate, o.Rerank
	l.modelName = fmt.Sprintf("ubatch-synth-%s-%s", s.Name, o.FileType)
	if a.Name != "llama" {
		l.modelName = fmt.Sprintf("ubatch-synth-%s-%s-%s", a.Name, s.Name, o.FileType)
	}
	w := gguf.NewWriter()
	set := func(k string, v any) {
		if err := w.Set(k, v); err != nil {
			panic(err) // unreachable: only supported value types are used
		}
	}
	l.setMetadata(set)
	if err := l.setTokenizer(w, o.Vocab, set); err != nil {
		return nil, err
	}
	if o.FIM {
		if err := setFIM(o.Vocab, set); err != nil {
			return nil, err
		}
	}
	if o.Rerank {
		l.setRerank(set)
	}
	specs := l.tensors()
	datas, types, err := generateAll(l, specs, o)
	if err != nil {
		return nil, err
	}
	for i, sp := range specs {
		if err := w.AddTensor(sp.name, types[i], l.dims(sp), datas[i]); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// generateAll generates the tensors on o.Threads goroutines.
func generateAll(l *layout, specs []tensorSpec, o Options) ([][]byte, []quant.Type, error) {
	datas := make([][]byte, len(specs))
	types := make([]quant.Type, len(specs))
	errs := make([]error, len(specs))
	threads := o.Threads
	if threads <= 0 {
		threads = runtime.NumCPU()
	}
	var mu sync.Mutex
	done := 0
	next := make(chan int)
	var wg sync.WaitGroup
	for range threads {
		wg.Go(func() {
			for i := range next {
				datas[i], types[i], errs[i] = l.generate(specs[i], o.Seed)
				mu.Lock()
				done++
				if o.Progress != nil {
					o.Progress(done, len(specs))
				}
				mu.Unlock()
			}
		})
	}
	for i := range specs {
		next <- i
	}
	close(next)
	wg.Wait()
	for i, sp := range specs {
		if errs[i] != nil {
			return nil, nil, fmt.Errorf("tensor %s: %w", sp.name, errs[i])
		}
	}
	return datas, types, nil
}
