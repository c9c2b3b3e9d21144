// Package kvformat is the table of the KV cache's element types: one row per format, saying how
// a row of K or V values is laid out, how the store writes and reads it, and which attention
// kernels read the cache in it (as quant's types table does for weights). A format is named by
// its quant.Type everywhere (kvcache.Config.DType, runner.Options.KVType, a kvfile image's
// dtype); no other package switches on it. Adding a format is adding its row to formats (and
// its kernels to ops).
package kvformat

import (
	"strings"
	"unsafe"

	"ubatch/ops"
	"ubatch/quant"
)

// Format is one row of the table. Rows of every format are byte slices; a layer's cells sit at
// a stride of RowBytes(KVDim) bytes, and head g's values start at RowBytes(g*hd) in its row.
// The byte slices given to a Format start at an address aligned for its elements (Alloc's, plus
// offsets that are multiples of RowBytes of a multiple of Align).
type Format struct {
	typ  quant.Type
	flag string // its spelling in --kv-type (llama.cpp's type_k names)
	// align: the KV width and the head dimension must be multiples of it. Q8_0's blocks of 32
	// must not mix heads (as in llama.cpp: one head's large keys would coarsen another's).
	align int

	// store packs len(src) values into dst (RowBytes(len(src)) bytes); load is its inverse.
	store func(dst []byte, src []float32)
	load  func(dst []float32, src []byte)

	// The exact attention kernels (ops.AttnScores*, ops.AttnValues*) and the tiled kernel's
	// source (ops.CacheTiles) over rows of this format, strides in bytes.
	scores func(q []float32, heads, hd int, k []byte, cells []int32, stride int, scale float32, out []float32)
	values func(p []float32, heads, hd int, v []byte, cells []int32, stride int, out []float32)
	tiles  func(t *Tiles, k, v []byte, stride, hd int) ops.TileSource
}

// formats lists every format the cache stores, F16 (llama.cpp's default) first.
var formats = [...]Format{
	plain(quant.F16, "f16", quant.F32ToF16s, quant.F16ToF32s, ops.AttnScoresF16, ops.AttnValuesF16,
		func(t *Tiles) *ops.CacheTiles[uint16] { return &t.f16 }),
	plain(quant.F32, "f32", copyF32, copyF32, ops.AttnScoresF32, ops.AttnValuesF32,
		func(t *Tiles) *ops.CacheTiles[float32] { return &t.f32 }),
	{typ: quant.Q8_0, flag: "q8_0", align: 32,
		store:  func(dst []byte, src []float32) { mustNil(quant.Quantize(quant.Q8_0, src, dst)) },
		load:   func(dst []float32, src []byte) { mustNil(quant.Dequantize(quant.Q8_0, src, dst)) },
		scores: ops.AttnScoresQ8,
		values: ops.AttnValuesQ8,
		tiles: func(t *Tiles, k, v []byte, stride, hd int) ops.TileSource {
			t.q8 = ops.CacheTiles[byte]{K: k, V: v, Stride: stride, HD: hd}
			return &t.q8
		}},
}

// plain is the row of a format of plain elements E (F16's half bits, float32): a row's bytes
// are its elements, which store, load and ops's kernels for E read with strides in elements;
// room is E's source in a worker's Tiles.
func plain[E uint16 | float32](typ quant.Type, flag string,
	store func(dst []E, src []float32), load func(dst []float32, src []E),
	scores func(q []float32, heads, hd int, k []E, cells []int32, stride int, scale float32, out []float32),
	values func(p []float32, heads, hd int, v []E, cells []int32, stride int, out []float32),
	room func(*Tiles) *ops.CacheTiles[E]) Format {
	size := typ.RowSize(1) // bytes of one element
	return Format{typ: typ, flag: flag, align: 1,
		store: func(dst []byte, src []float32) { store(elems[E](dst), src) },
		load:  func(dst []float32, src []byte) { load(dst, elems[E](src)) },
		scores: func(q []float32, heads, hd int, k []byte, cells []int32, stride int, scale float32, out []float32) {
			scores(q, heads, hd, elems[E](k), cells, stride/size, scale, out)
		},
		values: func(p []float32, heads, hd int, v []byte, cells []int32, stride int, out []float32) {
			values(p, heads, hd, elems[E](v), cells, stride/size, out)
		},
		tiles: func(t *Tiles, k, v []byte, stride, hd int) ops.TileSource {
			r := room(t)
			*r = ops.CacheTiles[E]{K: elems[E](k), V: elems[E](v), Stride: stride / size, HD: hd}
			return r
		}}
}

func copyF32(dst, src []float32) { copy(dst, src) }

// mustNil panics on err: the row sizes a Format is given are fixed when the store is made
// (kvcache.Config.Check), so a size error is a bug.
func mustNil(err error) {
	if err != nil {
		panic("kvformat: " + err.Error())
	}
}

// Of returns t's row, or nil if the cache cannot store t.
func Of(t quant.Type) *Format {
	for i := range formats {
		if formats[i].typ == t {
			return &formats[i]
		}
	}
	return nil
}

// Parse maps a --kv-type spelling ("f16", "F32", "q8_0") to its type; ok is false for any other.
func Parse(name string) (t quant.Type, ok bool) {
	for i := range formats {
		if strings.EqualFold(formats[i].flag, name) {
			return formats[i].typ, true
		}
	}
	return 0, false
}

// Names lists the formats' spellings for messages and flag help: "f16, f32 or q8_0".
func Names() string {
	var b strings.Builder
	for i := range formats {
		switch {
		case i == len(formats)-1 && i > 0:
			b.WriteString(" or ")
		case i > 0:
			b.WriteString(", ")
		}
		b.WriteString(formats[i].flag)
	}
	return b.String()
}

// RowBytes returns the bytes a row of n values of t takes, or 0 when t is not a format, n <= 0
// or n is not a multiple of t's Align. It does not check for overflow: n is at most a KV width.
func RowBytes(t quant.Type, n int) int64 {
	f := Of(t)
	if f == nil || n <= 0 || n%f.align != 0 {
		return 0
	}
	return int64(t.RowSize(n))
}

// Type returns the format's name.
func (f *Format) Type() quant.Type { return f.typ }

// Align returns what the KV width and the head dimension must be multiples of.
func (f *Format) Align() int { return f.align }

// RowBytes returns the bytes of n values; n is a multiple of Align.
func (f *Format) RowBytes(n int) int { return f.typ.RowSize(n) }

// Store packs the values of src into the row dst (RowBytes(len(src)) bytes).
func (f *Format) Store(dst []byte, src []float32) { f.store(dst, src) }

// Load unpacks the row src into dst (len(dst) values).
func (f *Format) Load(dst []float32, src []byte) { f.load(dst, src) }

// Scores writes to out ([heads][len(cells)]) scale × q·k of every head of q ([heads][hd]) with
// the K rows of cells: k is a layer's K memory from the kv head's first value, cell c's at
// c×stride bytes.
func (f *Format) Scores(q []float32, heads, hd int, k []byte, cells []int32, stride int, scale float32, out []float32) {
	f.scores(q, heads, hd, k, cells, stride, scale, out)
}

// Values writes to out ([heads][hd]) the sums of the V rows of cells weighted by p
// ([heads][len(cells)]); v is laid out as Scores's k.
func (f *Format) Values(p []float32, heads, hd int, v []byte, cells []int32, stride int, out []float32) {
	f.values(p, heads, hd, v, cells, stride, out)
}

// Tiles returns the tiled kernel's source (ops.AttnTiled) over the K and V memory k and v, laid
// out as Scores's k; it points into t, so that passing it on allocates nothing.
func (f *Format) Tiles(t *Tiles, k, v []byte, stride, hd int) ops.TileSource {
	return f.tiles(t, k, v, stride, hd)
}

// Tiles is one worker's room for the source Format.Tiles returns.
type Tiles struct {
	f16 ops.CacheTiles[uint16]
	f32 ops.CacheTiles[float32]
	q8  ops.CacheTiles[byte]
}

// Alloc returns n zero bytes at an address aligned for every format's elements.
func Alloc(n int) []byte {
	if n <= 0 {
		return nil
	}
	w := make([]uint64, (n+7)/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), n)
}

// elems views a row's bytes as its elements (little-endian on every architecture ubatch builds
// for: the layout of kvfile's images). b starts aligned (see Format).
func elems[E uint16 | float32](b []byte) []E {
	var e E
	size := int(unsafe.Sizeof(e))
	if len(b) < size {
		return nil
	}
	return unsafe.Slice((*E)(unsafe.Pointer(&b[0])), len(b)/size)
}
