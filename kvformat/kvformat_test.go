package kvformat

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"unsafe"

	"ubatch/ops"
	"ubatch/quant"
)

// TestTable checks every row against its layout: the row size of a KV width, a store and load
// that round-trip within the format's precision, and attention kernels and a tile source that
// agree with the same attention computed here over the loaded rows.
func TestTable(t *testing.T) {
	tests := []struct {
		name  string
		typ   quant.Type
		align int
		row64 int     // bytes of 64 values
		tol   float64 // of a stored value, relative to the row's largest
	}{
		{name: "f16", typ: quant.F16, align: 1, row64: 128, tol: 1e-3},
		{name: "f32", typ: quant.F32, align: 1, row64: 256, tol: 0},
		{name: "q8_0", typ: quant.Q8_0, align: 32, row64: 68, tol: 1.0 / 127},
	}
	if len(tests) != len(formats) {
		t.Fatalf("%d formats in the table, %d tested", len(formats), len(tests))
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := Of(tc.typ)
			if f == nil || f.Type() != tc.typ || f.Align() != tc.align || f.RowBytes(64) != tc.row64 || RowBytes(tc.typ, 64) != int64(tc.row64) {
				t.Fatalf("row %+v: want %v, align %d, %d bytes of 64 values", f, tc.typ, tc.align, tc.row64)
			}
			if got, ok := Parse(strings.ToUpper(tc.name)); !ok || got != tc.typ {
				t.Fatalf("Parse(%q) = %v, %v", strings.ToUpper(tc.name), got, ok)
			}
			checkRows(t, f, tc.tol)
			checkAttention(t, f)
		})
	}
}

// checkRows stores a row of 64 values and loads it back.
func checkRows(t *testing.T, f *Format, tol float64) {
	rng := rand.New(rand.NewPCG(1, 2))
	src := make([]float32, 64)
	for i := range src {
		src[i] = float32(rng.NormFloat64())
	}
	row := Alloc(f.RowBytes(len(src)))
	f.Store(row, src)
	got := make([]float32, len(src))
	f.Load(got, row)
	var most float64
	for _, x := range src {
		most = max(most, math.Abs(float64(x)))
	}
	for i := range src {
		if d := math.Abs(float64(got[i] - src[i])); d > tol*most {
			t.Fatalf("value %d: stored %v, loaded %v", i, src[i], got[i])
		}
	}
}

// checkAttention attends two query heads of kv head 1 (of 2, head size 32) over a few cells of
// a layer with the format's kernels and compares them with float64 attention over the rows as
// Load reads them.
func checkAttention(t *testing.T, f *Format) {
	const hd, kvHeads, heads, nCells = 32, 2, 2, 2 * ops.TileCells
	kvDim := hd * kvHeads
	rb := f.RowBytes(kvDim)
	rng := rand.New(rand.NewPCG(3, 4))
	k, v := Alloc(nCells*rb), Alloc(nCells*rb)
	vals := make([]float32, kvDim)
	for c := range nCells {
		for i := range vals {
			vals[i] = float32(rng.NormFloat64())
		}
		f.Store(k[c*rb:(c+1)*rb], vals)
		for i := range vals {
			vals[i] = float32(rng.NormFloat64())
		}
		f.Store(v[c*rb:(c+1)*rb], vals)
	}
	// The rows as the kernels should read them: kv head 1's values of each cell.
	kf, vf := make([][]float32, nCells), make([][]float32, nCells)
	for c := range nCells {
		kf[c], vf[c] = make([]float32, kvDim), make([]float32, kvDim)
		f.Load(kf[c], k[c*rb:(c+1)*rb])
		f.Load(vf[c], v[c*rb:(c+1)*rb])
		kf[c], vf[c] = kf[c][hd:], vf[c][hd:]
	}
	q := make([]float32, heads*hd)
	for i := range q {
		q[i] = float32(rng.NormFloat64())
	}
	cells := []int32{5, 0, 17, 9, 31}
	off := f.RowBytes(hd) // kv head 1
	scores := make([]float32, heads*len(cells))
	f.Scores(q, heads, hd, k[off:], cells, rb, 0.5, scores)
	for h := range heads {
		for j, c := range cells {
			var want float64
			for d := range hd {
				want += float64(q[h*hd+d]) * float64(kf[c][d])
			}
			want *= 0.5
			if math.Abs(float64(scores[h*len(cells)+j])-want) > 1e-3*(1+math.Abs(want)) {
				t.Fatalf("head %d cell %d: score %v, want %v", h, c, scores[h*len(cells)+j], want)
			}
		}
	}
	p := make([]float32, heads*len(cells))
	for i := range p {
		p[i] = float32(rng.Float64())
	}
	out := make([]float32, heads*hd)
	f.Values(p, heads, hd, v[off:], cells, rb, out)
	for h := range heads {
		for d := range hd {
			var want float64
			for j, c := range cells {
				want += float64(p[h*len(cells)+j]) * float64(vf[c][d])
			}
			if math.Abs(float64(out[h*hd+d])-want) > 1e-3*(1+math.Abs(want)) {
				t.Fatalf("head %d value %d: %v, want %v", h, d, out[h*hd+d], want)
			}
		}
	}
	var room Tiles
	src := f.Tiles(&room, k[off:], v[off:], rb, hd)
	tile := make([]int32, ops.TileCells)
	for i := range tile {
		tile[i] = int32(nCells - 1 - 2*i%nCells)
	}
	kt, vt := make([]float32, ops.TileCells*hd), make([]float32, ops.TileCells*hd)
	src.LoadK(kt, tile)
	src.LoadV(vt, tile)
	for j, c := range tile {
		for d := range hd {
			if kt[j*hd+d] != kf[c][d] || vt[j*hd+d] != vf[c][d] {
				t.Fatalf("tile row %d (cell %d) value %d: K %v V %v, want %v %v", j, c, d, kt[j*hd+d], vt[j*hd+d], kf[c][d], vf[c][d])
			}
		}
	}
}

// TestLookups: types that are no KV format, spellings that are none, rows that do not fit.
func TestLookups(t *testing.T) {
	tests := []struct {
		name string
		typ  quant.Type
		n    int
		want int64
	}{
		{name: "q4_0 is no KV format", typ: quant.Q4_0, n: 64},
		{name: "unknown type", typ: quant.Type(1000), n: 64},
		{name: "q8_0 of 40 values", typ: quant.Q8_0, n: 40},
		{name: "no values", typ: quant.F16, n: 0},
		{name: "negative", typ: quant.F32, n: -4},
		{name: "f16 of 3", typ: quant.F16, n: 3, want: 6},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := RowBytes(tc.typ, tc.n); got != tc.want {
				t.Fatalf("RowBytes(%v, %d) = %d, want %d", tc.typ, tc.n, got, tc.want)
			}
		})
	}
	if Of(quant.Q4_0) != nil || Of(quant.BF16) != nil {
		t.Fatal("Of returned a row for a type the cache does not store")
	}
	for _, s := range []string{"q4_0", "bf16", "", "f16 "} {
		if _, ok := Parse(s); ok {
			t.Fatalf("Parse(%q) accepted", s)
		}
	}
	if got := Names(); got != "f16, f32 or q8_0" {
		t.Fatalf("Names() = %q", got)
	}
}

// TestAlloc: every length is aligned for float32 rows.
func TestAlloc(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5, 7, 9, 34, 4096} {
		b := Alloc(n)
		if len(b) != n || len(elems[float32](b[:n/4*4])) != n/4 {
			t.Fatalf("Alloc(%d): %d bytes", n, len(b))
		}
		if a := uintptrOf(b) % 8; a != 0 {
			t.Fatalf("Alloc(%d) at an address %d bytes past 8-byte alignment", n, a)
		}
	}
	if Alloc(0) != nil {
		t.Fatal("Alloc(0) is not nil")
	}
}

func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(&b[0])) }
