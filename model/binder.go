package model

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"ubatch/gguf"
	"ubatch/ops"
	"ubatch/quant"
	"ubatch/runner"
)

// Binder reads a family's hyper-parameters and binds its tensors by name, checking each against
// the metadata's shapes. It keeps the first error, so a loader reads everything it needs and
// checks Err once; every error names the key or tensor at fault. After an error, reads return
// zero values.
type Binder struct {
	File *gguf.File
	Arch string
	err  error
}

// Err is the first error met, or nil.
func (b *Binder) Err() error { return b.err }

// Fail records an error unless one is recorded already.
func (b *Binder) Fail(format string, args ...any) {
	if b.err == nil {
		b.err = fmt.Errorf(format, args...)
	}
}

func (b *Binder) key(k string) string { return b.Arch + "." + k }

// Has reports whether the architecture's metadata key k (without the "ARCH." prefix) is present.
func (b *Binder) Has(k string) bool {
	_, ok := b.File.Value(b.key(k))
	return ok
}

// Int reads key k (without the "ARCH." prefix) as an integer in [lo, hi]. An absent key takes
// def, or is an error when def < 0 (required); a value of another type or out of range is an
// error, never replaced by the default.
func (b *Binder) Int(k string, def, lo, hi int) int {
	if b.err != nil {
		return 0
	}
	key := b.key(k)
	v, present := b.File.Value(key)
	if !present {
		if def < 0 {
			b.Fail("metadata %s is missing: not a complete %s GGUF", key, b.Arch)
		}
		return def
	}
	i, ok := b.File.Int(key)
	if !ok {
		b.Fail("metadata %s is %T %v, want an integer", key, v, v)
		return 0
	}
	if i < int64(lo) || i > int64(hi) {
		b.Fail("metadata %s = %d is out of range [%d, %d]", key, i, lo, hi)
		return 0
	}
	return int(i)
}

// Float reads key k as a finite number in [lo, hi], def when absent.
func (b *Binder) Float(k string, def, lo, hi float32) float32 {
	if b.err != nil {
		return 0
	}
	key := b.key(k)
	v, present := b.File.Value(key)
	if !present {
		return def
	}
	f, ok := b.File.Float(key)
	if !ok {
		b.Fail("metadata %s is %T %v, want a number", key, v, v)
		return 0
	}
	if math.IsNaN(f) || f < float64(lo) || f > float64(hi) {
		b.Fail("metadata %s = %g is out of range [%g, %g]", key, f, lo, hi)
		return 0
	}
	return float32(f)
}

// String reads key k as a string, "" when absent.
func (b *Binder) String(k string) string {
	if b.err != nil || !b.Has(k) {
		return ""
	}
	s, ok := b.File.String(b.key(k))
	if !ok {
		v, _ := b.File.Value(b.key(k))
		b.Fail("metadata %s is %T %v, want a string", b.key(k), v, v)
	}
	return s
}

// HasTensor reports whether the file has a tensor of that name.
func (b *Binder) HasTensor(name string) bool {
	_, ok := b.File.Tensor(name)
	return ok
}

// Weight binds the 2-D tensor name of rows rows of cols elements (rows < 0: any number).
func (b *Binder) Weight(name string, cols, rows int) runner.Weight {
	if b.err != nil {
		return runner.Weight{}
	}
	t, ok := b.File.Tensor(name)
	if !ok {
		b.Fail("tensor %q is missing: not a complete %s GGUF", name, b.Arch)
		return runner.Weight{}
	}
	if len(t.Dims) != 2 || int(t.Dims[0]) != cols || (rows >= 0 && int(t.Dims[1]) != rows) {
		want := strconv.Itoa(rows)
		if rows < 0 {
			want = "any"
		}
		b.Fail("tensor %q has shape %v, want [%d %s] (from the metadata)", name, t.Dims, cols, want)
		return runner.Weight{}
	}
	w, err := runner.NewWeight(name, t.Type, int(t.Dims[1]), cols, t.Data)
	if err != nil {
		b.Fail("%v (supported: %s)", err, supportedTypes())
	}
	return w
}

// Vector reads the 1-D tensor name of n elements as float32 (absent and optional: nil).
func (b *Binder) Vector(name string, n int, optional bool) []float32 {
	return b.Floats(name, []uint64{uint64(n)}, optional)
}

// Floats reads the tensor name of GGUF dims dims (innermost first) as float32, row-major
// (absent and optional: nil). A value that is not finite is an error.
func (b *Binder) Floats(name string, dims []uint64, optional bool) []float32 {
	if b.err != nil {
		return nil
	}
	t, ok := b.File.Tensor(name)
	if !ok {
		if !optional {
			b.Fail("tensor %q is missing: not a complete %s GGUF", name, b.Arch)
		}
		return nil
	}
	if !slices.Equal(t.Dims, dims) {
		b.Fail("tensor %q has shape %v, want %v (from the metadata)", name, t.Dims, dims)
		return nil
	}
	n := 1
	for _, d := range dims {
		n *= int(d)
	}
	out := make([]float32, n)
	if err := quant.Dequantize(t.Type, t.Data, out); err != nil {
		b.Fail("tensor %q: %v", name, err)
		return nil
	}
	for _, v := range out {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			b.Fail("tensor %q holds a non-finite value", name)
			return nil
		}
	}
	return out
}

// Hparams reads the hyper-parameters every family has and checks that they agree with each
// other and with token_embd: embedding_length, block_count, attention.head_count(_kv),
// attention.key_length/value_length (default dim/heads), feed_forward_length, context_length
// and the RMSNorm epsilon.
func (b *Binder) Hparams() runner.Hparams {
	h, _ := b.hparams(false)
	return h
}

// PerLayer are the values llama.cpp reads as a key or an array of one per layer
// (get_key_or_arr): attention.head_count, attention.head_count_kv and feed_forward_length.
type PerLayer struct{ Heads, KVHeads, FFN []int }

// HparamsPerLayer is Hparams for a family whose head_count, head_count_kv and
// feed_forward_length may each be an array of one per layer (Gemma 4): h holds layer 0's head
// counts and the largest FFN, pl every layer's values (each layer's query heads a multiple of
// its KV heads).
func (b *Binder) HparamsPerLayer() (h runner.Hparams, pl PerLayer) { return b.hparams(true) }

func (b *Binder) hparams(perLayer bool) (runner.Hparams, PerLayer) {
	const big = 1 << 20
	var h runner.Hparams
	var pl PerLayer
	h.Dim = b.Int("embedding_length", -1, 1, big)
	h.NLayers = b.Int("block_count", -1, 1, 4096)
	ints := func(k string, def, lo, hi int) []int {
		if perLayer {
			return b.LayerInts(k, h.NLayers, def, lo, hi)
		}
		return []int{b.Int(k, def, lo, hi)}
	}
	pl.Heads = ints("attention.head_count", -1, 1, 4096)
	pl.FFN = ints("feed_forward_length", -1, 1, 4*big)
	h.CtxTrain = b.Int("context_length", 2048, 1, 1<<24)
	if b.err != nil {
		return h, pl
	}
	h.NHeads = pl.Heads[0]
	pl.KVHeads = ints("attention.head_count_kv", h.NHeads, 1, 4096)
	h.Eps = b.Float("attention.layer_norm_rms_epsilon", 1e-5, 1e-12, 1)
	if b.err != nil {
		return h, pl
	}
	h.NKVHeads, h.FFN = pl.KVHeads[0], slices.Max(pl.FFN)
	if !perLayer {
		pl = PerLayer{}
	}
	if h.NHeads%h.NKVHeads != 0 {
		b.Fail("metadata %s = %d does not divide %s = %d", b.key("attention.head_count_kv"), h.NKVHeads, b.key("attention.head_count"), h.NHeads)
		return h, pl
	}
	for l := range pl.Heads {
		if pl.Heads[l]%pl.KVHeads[l] != 0 {
			b.Fail("metadata %s = %d (layer %d) does not divide %s = %d", b.key("attention.head_count_kv"), pl.KVHeads[l], l, b.key("attention.head_count"), pl.Heads[l])
			return h, pl
		}
	}
	def := -1
	if h.Dim%h.NHeads == 0 {
		def = h.Dim / h.NHeads
	}
	h.HeadDim = b.Int("attention.key_length", def, 1, 1<<16)
	if v := b.Int("attention.value_length", h.HeadDim, 1, 1<<16); b.err == nil && v != h.HeadDim {
		b.Fail("metadata %s = %d differs from key_length %d: not supported", b.key("attention.value_length"), v, h.HeadDim)
	}
	b.checkLayerCount(h.NLayers)
	if t, ok := b.File.Tensor("token_embd.weight"); ok && len(t.Dims) == 2 {
		h.Vocab = int(t.Dims[1])
	}
	return h, pl
}

// LayerInts reads key k (without the "ARCH." prefix) as llama.cpp's get_key_or_arr does: one
// integer for all n layers, or an array of n integers, each in [lo, hi]. An absent key takes
// def for every layer, or is an error when def < 0; an array of another length or type is an
// error naming the key.
func (b *Binder) LayerInts(k string, n, def, lo, hi int) []int {
	if b.err != nil {
		return nil
	}
	key := b.key(k)
	v, present := b.File.Value(key)
	out := make([]int, n)
	if _, scalar := b.File.Int(key); !present || scalar {
		x := b.Int(k, def, lo, hi)
		for i := range out {
			out[i] = x
		}
		return out
	}
	arr, ok := b.File.Int32s(key)
	if !ok {
		b.Fail("metadata %s is %T %v, want an integer or an array of %d integers (one per layer)", key, v, v, n)
		return nil
	}
	if len(arr) != n {
		b.Fail("metadata %s has %d values, want %d (one per layer, %s)", key, len(arr), n, b.key("block_count"))
		return nil
	}
	for i, x := range arr {
		if int(x) < lo || int(x) > hi {
			b.Fail("metadata %s[%d] = %d is out of range [%d, %d]", key, i, x, lo, hi)
			return nil
		}
		out[i] = int(x)
	}
	return out
}

// checkLayerCount fails when a tensor names a block at or past n: block_count and the tensors
// disagree.
func (b *Binder) checkLayerCount(n int) {
	for _, t := range b.File.Tensors {
		rest, ok := strings.CutPrefix(t.Name, "blk.")
		if !ok {
			continue
		}
		num, _, _ := strings.Cut(rest, ".")
		if i, err := strconv.Atoi(num); err == nil && i >= n {
			b.Fail("tensor %q is past %s = %d: the metadata and the tensors disagree", t.Name, b.key("block_count"), n)
			return
		}
	}
}

// RopeBase reads the two rope keys every family has: rope.dimension_count (default and at most
// headDim) and rope.freq_base (default 10000).
func (b *Binder) RopeBase(headDim int) (dims int, base float32) {
	dims = b.Int("rope.dimension_count", headDim, 2, headDim)
	return dims, b.Float("rope.freq_base", 10000, 0, 1e12)
}

// BindLayers makes n layers and binds each with bind(l, i, p), p being layer i's tensor-name
// prefix "blk.<i>.".
func BindLayers[L any](n int, bind func(l *L, i int, p string)) []L {
	ls := make([]L, n)
	for i := range ls {
		bind(&ls[i], i, fmt.Sprintf("blk.%d.", i))
	}
	return ls
}

// RopeOptions are the parts of a rope a family decides; the rest comes from the metadata.
type RopeOptions struct {
	Dims    int  // rotated dimensions (usually rope.dimension_count)
	NEOX    bool // the family's rope type
	Base    float32
	Factors []float32 // per-pair frequency factors, when the family has them
	// Scaled applies rope.scaling.* (linear or YaRN); false for layers that are never scaled
	// (Gemma 3's sliding-window layers).
	Scaled     bool
	AttnFactor float32 // scales cos and sin (Phi-3's LongRoPE factor); 0: 1, or YaRN's from the metadata
}

// Rope builds a rope from o and the metadata's rope.scaling.type, .factor, .original_context_length
// and .attn_factor. Unknown scaling types are an error.
func (b *Binder) Rope(o RopeOptions) *ops.Rope {
	if b.err != nil {
		return nil
	}
	c := ops.RopeConfig{Dims: o.Dims, Base: o.Base, NEOX: o.NEOX, Factors: o.Factors, AttnFactor: o.AttnFactor}
	if o.Scaled {
		typ := b.String("rope.scaling.type")
		factor := b.Float("rope.scaling.factor", 1, 0, 1e6)
		if factor == 0 {
			factor = 1
		}
		switch typ {
		case "", "none":
		case "linear":
			c.FreqScale = 1 / factor
		case "yarn":
			c.FreqScale = 1 / factor
			c.YaRN = true
			c.OrigCtx = b.Int("rope.scaling.original_context_length", 0, 0, 1<<24)
			c.AttnFactor = b.Float("rope.scaling.attn_factor", 1, 0, 100)
			c.BetaFast = b.Float("rope.scaling.yarn_beta_fast", 32, 0, 1e4)
			c.BetaSlow = b.Float("rope.scaling.yarn_beta_slow", 1, 0, 1e4)
		default:
			b.Fail("metadata %s = %q is not supported (use none, linear or yarn)", b.key("rope.scaling.type"), typ)
			return nil
		}
	}
	r, err := ops.NewRope(c)
	if err != nil {
		b.Fail("metadata %s (rope.dimension_count, rope.freq_base, rope.scaling.*): %v", b.key("rope"), err)
	}
	return r
}

func supportedTypes() string {
	var names []string
	for t := range quant.Type(64) {
		if t.Supported() && quant.Kernel(t) != nil {
			names = append(names, t.String())
		}
	}
	return strings.Join(names, ", ")
}
