// Package runner runs the forward pass of any model family over a batch: it owns the scratch
// buffers, the worker pool, the K/V memory of the paged KV cache (package kvstore; the
// bookkeeping, package kvcache, is the engine's and comes with each batch) and the logits, and offers the operations a
// family's layer loop is written in (matmuls with activation quantization, norms, rotary
// embeddings, attention over KV cells, the output projection). A family (package model/llama,
// model/qwen2, ...) is its weights plus a Graph that calls these operations layer by layer.
package runner

import (
	"fmt"

	"ubatch/batch"
	"ubatch/ops"
	"ubatch/quant"
)

// Hparams are the sizes the runner allocates by. Families fill them from GGUF metadata after
// validating them (model.Binder).
type Hparams struct {
	Dim      int // embedding width (residual stream)
	NLayers  int
	NHeads   int // query heads
	NKVHeads int // key/value heads (grouped-query attention: NHeads is a multiple)
	HeadDim  int // width of one head, for queries, keys and values alike
	FFN      int // feed-forward hidden width
	Vocab    int
	CtxTrain int     // context length the model was trained with
	Eps      float32 // RMSNorm epsilon
	// A mixture-of-experts family's sizes (0 for dense ones): experts per layer, experts used per
	// token, and each expert's feed-forward width.
	NExperts, NExpertsUsed, ExpertFFN int
	// The layers with a KV cache of their own (0: all NLayers; the family attends with KV layer
	// indices in [0, KVLayers)): a hybrid family's attention layers, or Gemma 4's layers before
	// those that share an earlier layer's KV (SharedAttention). Recurrent holds a hybrid's
	// recurrent layers' sizes (nil: none).
	KVLayers  int
	Recurrent *Recurrent
	// KVShapes, when not nil, are the attention shapes of the KV layers (len: KVLayers, or
	// NLayers when that is 0), for a family whose layers differ (Gemma 4: its full layers' head
	// size and KV head count are not its sliding layers'); NHeads, NKVHeads and HeadDim are then
	// KV layer 0's. nil: every layer is (NHeads, NKVHeads, HeadDim).
	KVShapes []AttnShape
	// AuxWidth, when > 0, sizes a family's own per-token values kept across layers
	// (Scratch.Aux, [n][AuxWidth], and one more row, Scratch.AuxRow): Gemma 4's per-layer inputs.
	AuxWidth int
}

// AttnShape is one layer's attention: query heads, key/value heads (NHeads a multiple) and the
// width of one head, for queries, keys and values alike.
type AttnShape struct{ NHeads, NKVHeads, HeadDim int }

// QDim is the width of all query heads together: NHeads * HeadDim.
func (a AttnShape) QDim() int { return a.NHeads * a.HeadDim }

// KVDim is the width of one KV-cache row: NKVHeads * HeadDim.
func (a AttnShape) KVDim() int { return a.NKVHeads * a.HeadDim }

// QDim is the width of all query heads together: NHeads * HeadDim (not always Dim, e.g. Qwen 3).
func (h *Hparams) QDim() int { return h.NHeads * h.HeadDim }

// KVDim is the width of one KV-cache row: NKVHeads * HeadDim.
func (h *Hparams) KVDim() int { return h.NKVHeads * h.HeadDim }

// Shape is KV layer l's attention shape: KVShapes[l], or (NHeads, NKVHeads, HeadDim).
func (h *Hparams) Shape(l int) AttnShape {
	if h.KVShapes != nil {
		return h.KVShapes[l]
	}
	return AttnShape{h.NHeads, h.NKVHeads, h.HeadDim}
}

// NKVLayers is the number of layers with a KV cache: KVLayers, or NLayers when that is 0.
func (h *Hparams) NKVLayers() int {
	if h.KVLayers > 0 {
		return h.KVLayers
	}
	return h.NLayers
}

// MaxShape is the largest of every KV layer's sizes, each on its own (scratch sizes): the most
// query heads, KV heads, the widest head, the widest query and KV rows, the most query heads
// per KV head.
func (h *Hparams) MaxShape() (s AttnShape, qDim, kvDim, rep int) {
	for l := range h.NKVLayers() {
		a := h.Shape(l)
		s = AttnShape{max(s.NHeads, a.NHeads), max(s.NKVHeads, a.NKVHeads), max(s.HeadDim, a.HeadDim)}
		qDim, kvDim, rep = max(qDim, a.QDim()), max(kvDim, a.KVDim()), max(rep, a.NHeads/a.NKVHeads)
		if h.KVShapes == nil {
			break
		}
	}
	return s, qDim, kvDim, rep
}

// Graph is one model family's forward pass over loaded weights. It is immutable and may be
// shared by several Contexts.
type Graph interface {
	Hparams() *Hparams
	// Matrices lists every weight matrix Forward multiplies by (packing, scratch sizing).
	Matrices() []*Weight
	// LayerRope is the rotary embedding of layer l's keys, used to shift cached keys.
	LayerRope(l int) *ops.Rope
	// Forward computes one micro-batch whose KV cells are scheduled (ub.Slots; see
	// Runtime.Decode); it must end with Runtime.Output.
	Forward(c *Runtime, ub *batch.UBatch)
}

// Weight is a 2-D weight matrix of Rows rows, each Cols elements of Type, row-major as in the
// GGUF file (GGUF dims [Cols, Rows]). Data is a slice of the memory-mapped file or, once packed
// (see Pack), the same bytes rearranged into 8-row panels for quant.MatMulPacked.
type Weight struct {
	Name       string
	Type       quant.Type
	Rows, Cols int
	Data       []byte
	dot        quant.DotFunc
	packed     bool
}

// NewWeight checks that ubatch computes with t and that data holds rows x cols elements of it.
func NewWeight(name string, t quant.Type, rows, cols int, data []byte) (Weight, error) {
	dot := quant.Kernel(t)
	if !t.Supported() || dot == nil {
		return Weight{}, fmt.Errorf("tensor %q has type %v, which ubatch does not support yet", name, t)
	}
	if cols%t.BlockSize() != 0 || len(data) != rows*t.RowSize(cols) {
		return Weight{}, fmt.Errorf("tensor %q: %d bytes do not hold %d rows of %d %v elements", name, len(data), rows, cols, t)
	}
	return Weight{Name: name, Type: t, Rows: rows, Cols: cols, Data: data, dot: dot}, nil
}

// RowBytes is the size of one row in the file layout.
func (w *Weight) RowBytes() int { return w.Type.RowSize(w.Cols) }

// Packed reports whether Data holds panels (see Pack) rather than the file layout.
func (w *Weight) Packed() bool { return w.packed }

// Row dequantizes row r into dst (len Cols), from either layout.
func (w *Weight) Row(r int, dst []float32) {
	if w.packed {
		quant.DequantizePackedRow(w.Type, w.Cols, w.Data, r, dst)
		return
	}
	rb := w.RowBytes()
	if err := quant.Dequantize(w.Type, w.Data[r*rb:(r+1)*rb], dst); err != nil {
		panic(err) // unreachable: NewWeight checked the type and size
	}
}

// SetPacked replaces w's data by its panels (quant.PackRows of the same bytes).
func (w *Weight) SetPacked(panels []byte) { w.Data, w.packed = panels, true }
