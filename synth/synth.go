// Package synth writes Llama GGUF files with seeded random weights: the benchmark models. Random
// weights cost exactly what trained ones cost to run; only the text they produce is meaningless.
package synth

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"runtime"
	"sync"

	"ubatch/gguf"
	"ubatch/quant"
)

// Shape is a Llama model's hyper-parameters.
type Shape struct {
	Name                             string
	Dim, Layers, Heads, KVHeads, FFN int
	Ctx                              int
	RopeBase, Eps                    float32
	TiedOutput                       bool // no output.weight: the output projection reuses token_embd
}

// Shapes are the benchmark shapes of shared/perf/README.md, plus "tiny" (the shape of the
// shared synth-tiny models, for tests).
var Shapes = []Shape{
	{Name: "tinyllama", Dim: 2048, Layers: 22, Heads: 32, KVHeads: 4, FFN: 5632, Ctx: 2048, RopeBase: 10000, Eps: 1e-5},
	{Name: "small", Dim: 768, Layers: 12, Heads: 12, KVHeads: 4, FFN: 2048, Ctx: 2048, RopeBase: 10000, Eps: 1e-5},
	{Name: "tiny", Dim: 256, Layers: 4, Heads: 8, KVHeads: 4, FFN: 768, Ctx: 2048, RopeBase: 10000, Eps: 1e-5, TiedOutput: true},
}

// ShapeByName finds a shape.
func ShapeByName(name string) (Shape, error) {
	for _, s := range Shapes {
		if s.Name == name {
			return s, nil
		}
	}
	return Shape{}, fmt.Errorf("unknown shape %q (known: tinyllama, small, tiny)", name)
}

// FileTypes are the weight types Write accepts, with llama.cpp's general.file_type numbers.
var FileTypes = map[string]uint32{"f32": 0, "f16": 1, "q4_0": 2, "q8_0": 7, "q4_k_m": 15}

// tensorType picks a tensor's type the way llama.cpp's quantizer does for each file type.
// Q4_K_M: Q6_K for the output and, in the layers use_more_bits selects, attn_v and ffn_down.
func tensorType(ftype, role string, layer, nLayers int) quant.Type {
	switch ftype {
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
	}
	switch role { // q4_k_m
	case "output":
		return quant.Q6_K
	case "attn_v", "ffn_down":
		if moreBits(layer, nLayers) {
			return quant.Q6_K
		}
	}
	return quant.Q4_K
}

// moreBits is llama.cpp's use_more_bits: the first and last eighth of the layers, and every
// third layer in between.
func moreBits(i, n int) bool {
	return i < n/8 || i >= 7*n/8 || (i-n/8)%3 == 2
}

type tensorSpec struct {
	name       string
	role       string
	layer      int
	cols, rows int // rows == 0: a 1-D norm vector of cols ones
}

func (s Shape) tensors() []tensorSpec {
	kv := s.Dim / s.Heads * s.KVHeads
	ts := []tensorSpec{{name: "token_embd.weight", role: "token_embd", cols: s.Dim, rows: -1}}
	for l := range s.Layers {
		p := fmt.Sprintf("blk.%d.", l)
		ts = append(ts,
			tensorSpec{p + "attn_norm.weight", "norm", l, s.Dim, 0},
			tensorSpec{p + "attn_q.weight", "attn_q", l, s.Dim, s.Dim},
			tensorSpec{p + "attn_k.weight", "attn_k", l, s.Dim, kv},
			tensorSpec{p + "attn_v.weight", "attn_v", l, s.Dim, kv},
			tensorSpec{p + "attn_output.weight", "attn_output", l, s.Dim, s.Dim},
			tensorSpec{p + "ffn_norm.weight", "norm", l, s.Dim, 0},
			tensorSpec{p + "ffn_gate.weight", "ffn_gate", l, s.Dim, s.FFN},
			tensorSpec{p + "ffn_up.weight", "ffn_up", l, s.Dim, s.FFN},
			tensorSpec{p + "ffn_down.weight", "ffn_down", l, s.FFN, s.Dim},
		)
	}
	ts = append(ts, tensorSpec{name: "output_norm.weight", role: "norm", cols: s.Dim})
	if !s.TiedOutput {
		ts = append(ts, tensorSpec{name: "output.weight", role: "output", cols: s.Dim, rows: -1})
	}
	return ts
}

// Options for Write.
type Options struct {
	Shape    Shape
	FileType string     // f32, f16, q8_0, q4_0, q4_k_m
	Vocab    *gguf.File // tokenizer.* metadata is copied from it; its token count is the vocab size
	Seed     uint64
	Threads  int                   // 0 = all cores
	Progress func(done, total int) // tensors written so far; may be nil
}

// Build generates the model into a gguf.Writer: weights N(0, 0.02²), norm weights 1. Every
// tensor draws from its own generator seeded from (Seed, tensor name), so the result does not
// depend on how the work is spread over threads.
func Build(o Options) (*gguf.Writer, error) {
	if _, ok := FileTypes[o.FileType]; !ok {
		return nil, fmt.Errorf("unknown type %q (use f32, f16, q8_0, q4_0 or q4_k_m)", o.FileType)
	}
	toks, ok := o.Vocab.Strings("tokenizer.ggml.tokens")
	if !ok || len(toks) == 0 {
		return nil, fmt.Errorf("the vocabulary file has no tokenizer.ggml.tokens")
	}
	s := o.Shape
	if s.Dim%s.Heads != 0 || s.Heads%s.KVHeads != 0 {
		return nil, fmt.Errorf("shape %s: dim %d, heads %d, kv heads %d do not divide", s.Name, s.Dim, s.Heads, s.KVHeads)
	}
	w := gguf.NewWriter()
	set := func(k string, v any) {
		if err := w.Set(k, v); err != nil {
			panic(err) // unreachable: only supported value types are used
		}
	}
	set("general.architecture", "llama")
	set("general.name", fmt.Sprintf("ubatch-synth-%s-%s", s.Name, o.FileType))
	set("general.file_type", FileTypes[o.FileType])
	set("llama.context_length", uint32(s.Ctx))
	set("llama.embedding_length", uint32(s.Dim))
	set("llama.block_count", uint32(s.Layers))
	set("llama.feed_forward_length", uint32(s.FFN))
	set("llama.attention.head_count", uint32(s.Heads))
	set("llama.attention.head_count_kv", uint32(s.KVHeads))
	set("llama.rope.dimension_count", uint32(s.Dim/s.Heads))
	set("llama.rope.freq_base", s.RopeBase)
	set("llama.attention.layer_norm_rms_epsilon", s.Eps)
	set("llama.vocab_size", uint32(len(toks)))
	w.SetFrom(o.Vocab, func(k string) bool { return len(k) > 10 && k[:10] == "tokenizer." })

	specs := s.tensors()
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
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				datas[i], types[i], errs[i] = generate(specs[i], len(toks), s.Layers, o)
				mu.Lock()
				done++
				if o.Progress != nil {
					o.Progress(done, len(specs))
				}
				mu.Unlock()
			}
		}()
	}
	for i := range specs {
		next <- i
	}
	close(next)
	wg.Wait()
	for i, sp := range specs {
		if errs[i] != nil {
			return nil, fmt.Errorf("tensor %s: %w", sp.name, errs[i])
		}
		dims := []uint64{uint64(sp.cols)}
		if sp.rows != 0 {
			dims = append(dims, uint64(rows(sp, len(toks))))
		}
		if err := w.AddTensor(sp.name, types[i], dims, datas[i]); err != nil {
			return nil, err
		}
	}
	return w, nil
}

func rows(sp tensorSpec, vocab int) int {
	if sp.rows < 0 {
		return vocab
	}
	return sp.rows
}

func generate(sp tensorSpec, vocab, nLayers int, o Options) ([]byte, quant.Type, error) {
	if sp.rows == 0 {
		ones := make([]float32, sp.cols)
		for i := range ones {
			ones[i] = 1
		}
		buf := make([]byte, 4*sp.cols)
		err := quant.Quantize(quant.F32, ones, buf)
		return buf, quant.F32, err
	}
	role := sp.role
	if role == "token_embd" && o.Shape.TiedOutput {
		role = "output" // a tied embedding is quantized as the output projection
	}
	t := tensorType(o.FileType, role, sp.layer, nLayers)
	h := fnv.New64a()
	h.Write([]byte(sp.name))
	rng := rand.New(rand.NewPCG(o.Seed, h.Sum64()))
	n := rows(sp, vocab)
	out := make([]byte, n*t.RowSize(sp.cols))
	row := make([]float32, sp.cols)
	rb := t.RowSize(sp.cols)
	for r := range n {
		for i := range row {
			row[i] = float32(rng.NormFloat64() * 0.02)
		}
		if err := quant.Quantize(t, row, out[r*rb:(r+1)*rb]); err != nil {
			return nil, 0, err
		}
	}
	return out, t, nil
}
