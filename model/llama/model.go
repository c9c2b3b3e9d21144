// Package llama implements the llama-family transformer (Llama 2/3, TinyLlama, Mistral and the
// like) over GGUF weights: token embedding, RMSNorm, rotary embeddings, grouped-query attention
// over a paged KV cache, SwiGLU feed-forward and the output projection.
package llama

import (
	"fmt"
	"math"

	"ubatch/gguf"
	"ubatch/quant"
)

// Config holds the hyper-parameters read from GGUF metadata.
type Config struct {
	Dim, NLayers, NHeads, NKVHeads, HeadDim, FFN, Vocab int
	CtxTrain                                            int     // context length the model was trained with
	RopeDims                                            int     // rotated dimensions per head
	RopeBase, RopeFreqScale                             float32 // theta base; 1/linear scaling factor
	Eps                                                 float32 // RMSNorm epsilon
}

// KVDim is the width of one KV-cache row: n_kv_heads * head_dim.
func (c Config) KVDim() int { return c.NKVHeads * c.HeadDim }

// Weight is a 2-D weight matrix of Rows rows, each Cols elements of Type, row-major as in the
// GGUF file (GGUF dims [Cols, Rows]). Data is a slice of the memory-mapped file, or, once packed
// (Q4_0, Q8_0, Q4_K and Q6_K where the CPU has panel kernels, see Model.pack), the same bytes rearranged
// into 8-row panels for quant.MatMulPacked.
type Weight struct {
	Name       string
	Type       quant.Type
	Rows, Cols int
	Data       []byte
	dot        quant.DotFunc
	packed     bool
}

// RowBytes is the size of one row in bytes.
func (w *Weight) RowBytes() int { return w.Type.RowSize(w.Cols) }

// Layer holds one transformer block's weights.
type Layer struct {
	AttnNorm       []float32
	Wq, Wk, Wv, Wo Weight
	FFNNorm        []float32
	Gate, Up, Down Weight
}

// Model is a loaded llama model; it is immutable and may be shared by several Contexts.
type Model struct {
	Config
	Embd    Weight // token_embd: Vocab rows of Dim
	OutNorm []float32
	Output  Weight // output.weight, or token_embd when tied
	Layers  []Layer

	packed []byte // the buffer of packed weights (see pack), freed by Close
}

// Architectures lists the general.architecture values this package runs.
var Architectures = []string{"llama"}

// Load builds a Model over an open GGUF file. The weights stay in the file's mapping, except
// those it packs (see pack): f must stay open while the Model is used, and Close frees the
// packed weights.
func Load(f *gguf.File) (*Model, error) { return LoadWithProgress(f, nil) }

// LoadWithProgress is Load, calling progress (when not nil) with bytes done and total while it
// packs weights, the part of loading that takes a while for a large model.
func LoadWithProgress(f *gguf.File, progress func(done, total int64)) (*Model, error) {
	arch := f.Architecture()
	if arch != "llama" {
		return nil, fmt.Errorf("unsupported architecture %q: ubatch runs %v models", arch, Architectures)
	}
	m := &Model{}
	c := &m.Config
	var err error
	geti := func(key string, dst *int, def int) {
		if err != nil {
			return
		}
		v, ok := f.Uint(arch + "." + key)
		switch {
		case ok && v > 0 && v < 1<<24:
			*dst = int(v)
		case ok:
			err = fmt.Errorf("metadata %s.%s = %d is out of range", arch, key, v)
		case def >= 0:
			*dst = def
		default:
			err = fmt.Errorf("metadata %s.%s is missing: not a complete llama GGUF", arch, key)
		}
	}
	getf := func(key string, def float32) float32 {
		if v, ok := f.Float(arch + "." + key); ok {
			return float32(v)
		}
		return def
	}
	geti("embedding_length", &c.Dim, -1)
	geti("block_count", &c.NLayers, -1)
	geti("attention.head_count", &c.NHeads, -1)
	geti("feed_forward_length", &c.FFN, -1)
	geti("context_length", &c.CtxTrain, 2048)
	if err != nil {
		return nil, err
	}
	geti("attention.head_count_kv", &c.NKVHeads, c.NHeads)
	if c.Dim%c.NHeads != 0 || c.NHeads%c.NKVHeads != 0 {
		return nil, fmt.Errorf("inconsistent shape: dim %d, heads %d, kv heads %d", c.Dim, c.NHeads, c.NKVHeads)
	}
	c.HeadDim = c.Dim / c.NHeads
	geti("rope.dimension_count", &c.RopeDims, c.HeadDim)
	if err != nil {
		return nil, err
	}
	if c.RopeDims > c.HeadDim || c.RopeDims%2 != 0 {
		return nil, fmt.Errorf("rope.dimension_count %d does not fit head dim %d", c.RopeDims, c.HeadDim)
	}
	c.RopeBase = getf("rope.freq_base", 10000)
	c.Eps = getf("attention.layer_norm_rms_epsilon", 1e-5)
	c.RopeFreqScale = 1
	if typ, _ := f.String(arch + ".rope.scaling.type"); typ == "linear" {
		if factor := getf("rope.scaling.factor", 1); factor > 0 {
			c.RopeFreqScale = 1 / factor
		}
	} else if typ != "" && typ != "none" {
		return nil, fmt.Errorf("rope scaling %q is not supported (only linear)", typ)
	}

	if m.Embd, err = weight(f, "token_embd.weight", c.Dim, -1); err != nil {
		return nil, err
	}
	c.Vocab = m.Embd.Rows
	if m.OutNorm, err = vector(f, "output_norm.weight", c.Dim); err != nil {
		return nil, err
	}
	if _, ok := f.Tensor("output.weight"); ok {
		if m.Output, err = weight(f, "output.weight", c.Dim, c.Vocab); err != nil {
			return nil, err
		}
	} else {
		m.Output = m.Embd
	}
	kv := c.KVDim()
	m.Layers = make([]Layer, c.NLayers)
	for i := range m.Layers {
		l := &m.Layers[i]
		p := fmt.Sprintf("blk.%d.", i)
		if l.AttnNorm, err = vector(f, p+"attn_norm.weight", c.Dim); err != nil {
			return nil, err
		}
		if l.FFNNorm, err = vector(f, p+"ffn_norm.weight", c.Dim); err != nil {
			return nil, err
		}
		for _, w := range []struct {
			dst        *Weight
			name       string
			cols, rows int
		}{
			{&l.Wq, "attn_q.weight", c.Dim, c.Dim},
			{&l.Wk, "attn_k.weight", c.Dim, kv},
			{&l.Wv, "attn_v.weight", c.Dim, kv},
			{&l.Wo, "attn_output.weight", c.Dim, c.Dim},
			{&l.Gate, "ffn_gate.weight", c.Dim, c.FFN},
			{&l.Up, "ffn_up.weight", c.Dim, c.FFN},
			{&l.Down, "ffn_down.weight", c.FFN, c.Dim},
		} {
			if *w.dst, err = weight(f, p+w.name, w.cols, w.rows); err != nil {
				return nil, err
			}
		}
	}
	if err := m.pack(progress); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

// weight looks up a 2-D tensor of the given shape (rows < 0: any).
func weight(f *gguf.File, name string, cols, rows int) (Weight, error) {
	t, ok := f.Tensor(name)
	if !ok {
		return Weight{}, fmt.Errorf("tensor %q is missing: not a complete llama GGUF", name)
	}
	if len(t.Dims) != 2 || int(t.Dims[0]) != cols || (rows >= 0 && int(t.Dims[1]) != rows) {
		return Weight{}, fmt.Errorf("tensor %q has shape %v, want [%d %d]", name, t.Dims, cols, rows)
	}
	dot := quant.Kernel(t.Type)
	if !t.Type.Supported() || dot == nil {
		return Weight{}, fmt.Errorf("tensor %q has type %v, which ubatch does not support yet (use F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K or IQ4_XS)", name, t.Type)
	}
	return Weight{Name: name, Type: t.Type, Rows: int(t.Dims[1]), Cols: cols, Data: t.Data, dot: dot}, nil
}

// vector reads a 1-D tensor of n elements as float32.
func vector(f *gguf.File, name string, n int) ([]float32, error) {
	t, ok := f.Tensor(name)
	if !ok {
		return nil, fmt.Errorf("tensor %q is missing: not a complete llama GGUF", name)
	}
	if len(t.Dims) != 1 || int(t.Dims[0]) != n {
		return nil, fmt.Errorf("tensor %q has shape %v, want [%d]", name, t.Dims, n)
	}
	out := make([]float32, n)
	if err := quant.Dequantize(t.Type, t.Data, out); err != nil {
		return nil, fmt.Errorf("tensor %q: %w", name, err)
	}
	for _, v := range out {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return nil, fmt.Errorf("tensor %q holds a non-finite value", name)
		}
	}
	return out, nil
}
