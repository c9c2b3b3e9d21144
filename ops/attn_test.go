package ops

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"ubatch/quant"
)

// The attention kernels (assembly on amd64 with AVX2, for hd a multiple of 8; on arm64 the NEON
// vector kernels over widened rows) are compared with the pure-Go twins, to float32 rounding as in
// vec_test.go:
//
//	scores: |fast - go| <= 1e-5 · |scale| · Σ_i |q_i·k_i| + 1e-35
//	values: |fast - go| <= 1e-5 · Σ_j |p_j·v_j| + 1e-35, per output element
const attnRelTol = 1e-5

// attnCase is one shape of the comparison tests; the data is random, drawn from the name.
type attnCase struct {
	name              string
	heads, hd, n, pad int // pad: stride - hd
}

func attnCases() []attnCase {
	var cs []attnCase
	for _, heads := range []int{1, 2, 3, 4, 5, 6, 7, 8, 11} {
		for _, hd := range []int{8, 12, 24, 40, 64, 72, 128, 136, 256} {
			for _, n := range []int{0, 1, 2, 15, 16, 17, 300} {
				pad := (heads*7 + hd + n) % 13 // odd strides too: rows not 16-byte aligned
				cs = append(cs, attnCase{fmt.Sprintf("heads=%d/hd=%d/n=%d/pad=%d", heads, hd, n, pad), heads, hd, n, pad})
			}
		}
	}
	return cs
}

// attnData is one test problem: a cache of rows cells, and cells drawn from it with repeats and
// in no order.
type attnData struct {
	heads, hd, stride int
	q, p              []float32
	kv                []uint16
	cells             []int32
}

func newAttnData(r *rand.Rand, heads, hd, n, pad int) *attnData {
	rows := 1 + n/2 + r.IntN(n+1)
	d := &attnData{heads: heads, hd: hd, stride: hd + pad}
	d.q = randF32s(r, heads*hd)
	d.p = randF32s(r, heads*n)
	d.kv = randF16s(r, (rows-1)*d.stride+hd) // the last row ends the cache
	d.cells = randCells(r, n, rows)
	return d
}

// randCells returns n cells below rows, with repeats and in no order, the last row among them
// (when n > 0).
func randCells(r *rand.Rand, n, rows int) []int32 {
	cells := make([]int32, n)
	for j := range cells {
		cells[j] = int32(r.IntN(rows))
	}
	if n > 0 {
		cells[r.IntN(n)] = int32(rows - 1)
	}
	return cells
}

// checkScores compares AttnScoresF16 with its Go twin on d.
func checkScores(t testing.TB, d *attnData, scale float32) {
	t.Helper()
	n := len(d.cells)
	got, want := runWithTwin(t, "AttnScoresF16", "heads×cells", d.heads*n,
		func(out []float32) { AttnScoresF16(d.q, d.heads, d.hd, d.kv, d.cells, d.stride, scale, out) },
		func(out []float32) { attnScoresF16Go(d.q, d.heads, d.hd, d.kv, d.cells, d.stride, scale, out) })
	for h := range d.heads {
		for j, c := range d.cells {
			raw := absDotF16(d.q[h*d.hd:(h+1)*d.hd], d.kv[int(c)*d.stride:][:d.hd])
			if raw > 1e36 || math.IsInf(raw, 0) || math.IsNaN(raw) {
				continue // the float32 sums may overflow before the scale (even 0) applies
			}
			mag := math.Abs(float64(scale)) * raw
			checkDot(t, fmt.Sprintf("AttnScoresF16 head %d cell %d (#%d)", h, c, j), got[h*n+j], want[h*n+j], mag)
		}
	}
}

// dirtyOut returns n+1 floats for a kernel's out: n of garbage that it must overwrite, not add
// to, and after them the sentinel 42 that it must leave.
func dirtyOut(n int) []float32 {
	out := make([]float32, n+1)
	for i := range out {
		out[i] = float32(i) + 0.5
	}
	out[n] = 42
	return out
}

// runWithTwin runs kernel (named name) on dirtyOut(n) and its Go twin on n zeros, fails if the
// kernel wrote past the n elements (what they are), and returns the two outputs of n elements.
func runWithTwin(t testing.TB, name, what string, n int, kernel, twin func(out []float32)) (got, want []float32) {
	t.Helper()
	got, want = dirtyOut(n), make([]float32, n)
	kernel(got)
	twin(want)
	if got[n] != 42 {
		t.Fatalf("%s wrote past %s", name, what)
	}
	return got[:n], want
}

// checkValues compares AttnValuesF16 with its Go twin on d.
func checkValues(t testing.TB, d *attnData) {
	t.Helper()
	n := len(d.cells)
	got, want := runWithTwin(t, "AttnValuesF16", "heads×hd", d.heads*d.hd,
		func(out []float32) { AttnValuesF16(d.p, d.heads, d.hd, d.kv, d.cells, d.stride, out) },
		func(out []float32) { attnValuesF16Go(d.p, d.heads, d.hd, d.kv, d.cells, d.stride, out) })
	for h := range d.heads {
		for i := range d.hd {
			var mag float64
			for j, c := range d.cells {
				mag += math.Abs(float64(d.p[h*n+j]) * float64(quant.F16ToF32(d.kv[int(c)*d.stride+i])))
			}
			if math.IsInf(mag, 0) || math.IsNaN(mag) || mag > 1e36 {
				continue
			}
			g, w := got[h*d.hd+i], want[h*d.hd+i]
			if diff := math.Abs(float64(g) - float64(w)); !(diff <= attnRelTol*mag+absTol) {
				t.Fatalf("AttnValuesF16 out[head %d, %d] = %v, Go twin %v (|diff| %.3g, Σ|terms| %.3g)", h, i, g, w, diff, mag)
			}
		}
	}
}

// requireAttnAsm skips tests that compare the F16 attention kernels with their Go twins when
// they are the Go twins (no assembly for this architecture or CPU): such a comparison cannot fail.
func requireAttnAsm(t testing.TB) {
	t.Helper()
	requireAsm(t, runsAsm(opAttnScoresF16), "the exported attention kernels")
}

func TestAttnKernelsMatchGo(t *testing.T) {
	requireAttnAsm(t)
	for _, tc := range attnCases() {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(tc.heads), uint64(tc.hd*1000+tc.n)))
			for range 2 {
				d := newAttnData(r, tc.heads, tc.hd, tc.n, tc.pad)
				checkScores(t, d, float32(r.NormFloat64()))
				checkValues(t, d)
			}
		})
	}
}

// TestAttnKernelsExact checks all four kernels on small integers, where every partial sum is exact
// in float32 whatever the order, so the results must equal the float64 values exactly.
func TestAttnKernelsExact(t *testing.T) {
	tests := []struct {
		name          string
		heads, hd, n  int
		stride, scale int
	}{
		{"heads=1/hd=64", 1, 64, 9, 64, 1},
		{"heads=3/hd=64/gaps", 3, 64, 40, 80, 2},
		{"heads=8/hd=128", 8, 128, 17, 136, 1},
		{"heads=5/hd=72", 5, 72, 23, 75, 4},
		{"heads=2/hd=10/go", 2, 10, 5, 12, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rows := tc.n + 3
			q := make([]float32, tc.heads*tc.hd)
			p := make([]float32, tc.heads*tc.n)
			kv32 := make([]float32, (rows-1)*tc.stride+tc.hd)
			kv16 := make([]uint16, len(kv32))
			cells := make([]int32, tc.n)
			for i := range q {
				q[i] = float32(i%11 - 5)
			}
			for i := range p {
				p[i] = float32(i%5 - 2)
			}
			for i := range kv32 {
				kv32[i] = float32(i%7 - 3)
				kv16[i] = quant.F32ToF16(kv32[i])
			}
			for j := range cells {
				cells[j] = int32((j * 5) % rows)
			}
			n, hd := tc.n, tc.hd
			s16, s32 := make([]float32, tc.heads*n), make([]float32, tc.heads*n)
			v16, v32 := make([]float32, tc.heads*hd), make([]float32, tc.heads*hd)
			AttnScoresF16(q, tc.heads, hd, kv16, cells, tc.stride, float32(tc.scale), s16)
			AttnScoresF32(q, tc.heads, hd, kv32, cells, tc.stride, float32(tc.scale), s32)
			AttnValuesF16(p, tc.heads, hd, kv16, cells, tc.stride, v16)
			AttnValuesF32(p, tc.heads, hd, kv32, cells, tc.stride, v32)
			at := func(c int32, i int) float64 { return float64(kv32[int(c)*tc.stride+i]) }
			checkAttnExact(t, "F16", q, p, hd, cells, float64(tc.scale), at, s16, v16)
			checkAttnExact(t, "F32", q, p, hd, cells, float64(tc.scale), at, s32, v32)
		})
	}
}

// checkAttnExact fails unless the scores and values that the kernels (named by what) wrote for
// the heads×hd queries q, the heads×len(cells) weights p and the scale are exactly the float64
// sums over the cache, whose element i of the head in cell c is at(c, i).
func checkAttnExact(t *testing.T, what string, q, p []float32, hd int, cells []int32, scale float64, at func(c int32, i int) float64, scores, values []float32) {
	t.Helper()
	n := len(cells)
	for h := range len(q) / hd {
		for j, c := range cells {
			var want float64
			for i := range hd {
				want += float64(q[h*hd+i]) * at(c, i)
			}
			if want *= scale; float64(scores[h*n+j]) != want {
				t.Fatalf("%s scores head %d cell #%d = %v, want %v", what, h, j, scores[h*n+j], want)
			}
		}
		for i := range hd {
			var want float64
			for j, c := range cells {
				want += float64(p[h*n+j]) * at(c, i)
			}
			if float64(values[h*hd+i]) != want {
				t.Fatalf("%s values head %d [%d] = %v, want %v", what, h, i, values[h*hd+i], want)
			}
		}
	}
}

func TestAttnKernelsPanic(t *testing.T) {
	const heads, hd, stride, rows = 3, 64, 72, 10
	cacheLen := (rows-1)*stride + hd
	okCells := []int32{0, 9, 3, 3}
	tests := []attnPanicCase{
		{"fits", heads, hd, stride, okCells, heads * hd, heads * 4, cacheLen, false},
		{"no cells", heads, hd, stride, nil, heads * hd, 0, cacheLen, false},
		{"stride=hd", heads, hd, hd, []int32{0, 9}, heads * hd, heads * 2, 9*hd + hd, false},
		{"cell past the end", heads, hd, stride, []int32{0, 10, 3}, heads * hd, heads * 3, cacheLen, true},
		{"row ends past the end", heads, hd, stride, okCells, heads * hd, heads * 4, cacheLen - 1, true},
		{"negative cell", heads, hd, stride, []int32{2, -1}, heads * hd, heads * 2, cacheLen, true},
		{"huge cell", heads, hd, stride, []int32{math.MaxInt32}, heads * hd, heads, cacheLen, true},
		{"cache shorter than hd", heads, hd, stride, []int32{0}, heads * hd, heads, hd - 1, true},
		{"stride < hd", heads, hd, hd - 8, okCells, heads * hd, heads * 4, cacheLen, true},
		{"short heads×hd vector", heads, hd, stride, okCells, heads*hd - 1, heads * 4, cacheLen, true},
		{"short heads×cells vector", heads, hd, stride, okCells, heads * hd, heads*4 - 1, cacheLen, true},
		{"negative heads", -1, hd, stride, okCells, heads * hd, heads * 4, cacheLen, true},
		{"huge heads", math.MaxInt / 2, hd, stride, okCells, heads * hd, heads * 4, cacheLen, true},
	}
	runAttnPanics(t, tests, []attnPanicKernel{
		{"AttnScoresF16", func(heads, hd, stride int, cells []int32, lenHD, lenN, cacheLen int) {
			AttnScoresF16(make([]float32, lenHD), heads, hd, make([]uint16, cacheLen), cells, stride, 1, make([]float32, lenN))
		}},
		{"AttnScoresF32", func(heads, hd, stride int, cells []int32, lenHD, lenN, cacheLen int) {
			AttnScoresF32(make([]float32, lenHD), heads, hd, make([]float32, cacheLen), cells, stride, 1, make([]float32, lenN))
		}},
		{"AttnValuesF16", func(heads, hd, stride int, cells []int32, lenHD, lenN, cacheLen int) {
			AttnValuesF16(make([]float32, lenN), heads, hd, make([]uint16, cacheLen), cells, stride, make([]float32, lenHD))
		}},
		{"AttnValuesF32", func(heads, hd, stride int, cells []int32, lenHD, lenN, cacheLen int) {
			AttnValuesF32(make([]float32, lenN), heads, hd, make([]float32, cacheLen), cells, stride, make([]float32, lenHD))
		}},
	})
}

// attnPanicCase is one call of the panic tests: the kernels' shape arguments, and the lengths of
// the vectors and the cache they are given.
type attnPanicCase struct {
	name                  string
	heads, hd, stride     int
	cells                 []int32
	lenHD, lenN, cacheLen int // lengths of q (scores) or out (values); out or p; the cache (elements, or Q8_0 bytes)
	panics                bool
}

// attnPanicKernel calls one kernel with fresh zero vectors of the given lengths.
type attnPanicKernel struct {
	name string
	call func(heads, hd, stride int, cells []int32, lenHD, lenN, cacheLen int)
}

// runAttnPanics runs every case on every kernel, with checkPanic.
func runAttnPanics(t *testing.T, tests []attnPanicCase, kernels []attnPanicKernel) {
	for _, tc := range tests {
		for _, k := range kernels {
			t.Run(tc.name+"/"+k.name, func(t *testing.T) {
				checkPanic(t, k.name, tc.panics, func() {
					k.call(tc.heads, tc.hd, tc.stride, tc.cells, tc.lenHD, tc.lenN, tc.cacheLen)
				})
			})
		}
	}
}

// checkPanic runs call and fails unless it panics exactly when panics is set, with a message
// naming ops.fn.
func checkPanic(t *testing.T, fn string, panics bool, call func()) {
	t.Helper()
	defer func() {
		e := recover()
		if (e != nil) != panics {
			t.Fatalf("panic %v, want a panic: %v", e, panics)
		}
		if msg, _ := e.(string); e != nil && !strings.HasPrefix(msg, "ops."+fn+": ") {
			t.Fatalf("panic %#v, want a message naming ops.%s", e, fn)
		}
	}()
	call()
}

// TestAttnKernelsNoAlloc checks that the F16, F32 and Q8_0 kernels allocate nothing.
func TestAttnKernelsNoAlloc(t *testing.T) {
	r, r8 := rand.New(rand.NewPCG(7, 8)), rand.New(rand.NewPCG(7, 8))
	for _, heads := range []int{3, 8, 11} {
		d := newAttnData(r, heads, 64, 17, 8)
		d8 := newQ8Data(r8, heads, 64, 17, 8)
		kv32 := make([]float32, len(d.kv))
		scores := make([]float32, heads*max(len(d.cells), len(d8.cells)))
		out := make([]float32, heads*d.hd)
		n := testing.AllocsPerRun(20, func() {
			AttnScoresF16(d.q, heads, d.hd, d.kv, d.cells, d.stride, 0.125, scores)
			AttnValuesF16(d.p, heads, d.hd, d.kv, d.cells, d.stride, out)
			AttnScoresF32(d.q, heads, d.hd, kv32, d.cells, d.stride, 0.125, scores)
			AttnValuesF32(d.p, heads, d.hd, kv32, d.cells, d.stride, out)
			AttnScoresQ8(d8.q, heads, d8.hd, d8.kv, d8.cells, d8.strideB, 0.125, scores)
			AttnValuesQ8(d8.p, heads, d8.hd, d8.kv, d8.cells, d8.strideB, out)
		})
		if n != 0 {
			t.Errorf("heads=%d: %v allocations", heads, n)
		}
	}
}

// FuzzAttnF16 compares both F16 kernels with their Go twins. heads, hd and the stride come from
// the small arguments, the cells and the numbers from data (cyclically, so any length will do).
func FuzzAttnF16(f *testing.F) {
	requireAttnAsm(f)
	addAttnSeeds(f, 7, 15)
	f.Fuzz(func(t *testing.T, data []byte, heads8, hd8, pad8 uint8, scale float32) {
		heads, scale := 1+int(heads8)%11, finiteOr1(scale)
		hd := 8 * (1 + int(hd8)%32) // multiples of 8 up to 256, the assembly's
		if hd8 >= 224 {
			hd = int(hd8) - 223 // 1..32: any size
		}
		d := &attnData{heads: heads, hd: hd, stride: hd + int(pad8%16)}
		rows := 1 + int(pad8/16)*3
		src := &fuzzBytes{data: data}
		d.cells, d.q, d.p = src.attnInputs(heads, hd, rows)
		d.kv = f16sFrom(src.next(2 * ((rows-1)*d.stride + hd)))
		checkScores(t, d, scale)
		checkValues(t, d)
	})
}

// addAttnSeeds adds the attention fuzz targets' seeds: random data of four lengths, each with
// 3, 8 and 1 heads and the head-size bytes hd8a, hd8b and 250.
func addAttnSeeds(f *testing.F, hd8a, hd8b uint8) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, n := range []int{0, 5, 64, 700} {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		f.Add(b, uint8(3), hd8a, uint8(5), float32(0.125))
		f.Add(b, uint8(8), hd8b, uint8(0), float32(-1))
		f.Add(b, uint8(1), uint8(250), uint8(3), float32(1))
	}
}

// finiteOr1 is x, or 1 if x is infinite or NaN.
func finiteOr1(x float32) float32 {
	if math.IsInf(float64(x), 0) || math.IsNaN(float64(x)) {
		return 1
	}
	return x
}

// fuzzBytes hands out a fuzz target's data cyclically, so that any length will do (zeros when
// there is none).
type fuzzBytes struct {
	data []byte
	off  int
}

// next returns the next n bytes.
func (f *fuzzBytes) next(n int) []byte {
	w := make([]byte, n)
	for i := range w {
		if len(f.data) > 0 {
			w[i] = f.data[f.off%len(f.data)]
			f.off++
		}
	}
	return w
}

// cells returns n cells below rows, one byte each.
func (f *fuzzBytes) cells(n, rows int) []int32 {
	cells := make([]int32, n)
	for j, b := range f.next(n) {
		cells[j] = int32(int(b) % rows)
	}
	return cells
}

// attnInputs returns len(data)/3 cells below rows, then heads×hd queries and heads×cells
// weights.
func (f *fuzzBytes) attnInputs(heads, hd, rows int) (cells []int32, q, p []float32) {
	cells = f.cells(len(f.data)/3, rows)
	q = f32sFrom(f.next(4 * heads * hd))
	p = f32sFrom(f.next(4 * heads * len(cells)))
	return cells, q, p
}

// benchCells returns n cells of a cache of rows rows (> 16), in runs of 1 to 16 consecutive ones
// in random order, as the benchmarks' visible cells.
func benchCells(r *rand.Rand, rows, n int) []int32 {
	cells := make([]int32, 0, n)
	for len(cells) < n {
		start, run := r.IntN(rows-16), 1+r.IntN(16)
		for c := start; c < start+run && len(cells) < n; c++ {
			cells = append(cells, int32(c))
		}
	}
	return cells
}

// BenchmarkAttn measures the kernels against the per-cell loops they replace (DotF16 and AxpyF16
// for every cell and head, as in the forward pass before them) on an F16 cache laid out as in the
// model: rows of 8 KV heads × hd, cells in runs of consecutive ones, in random order. Successive
// calls take the KV heads in turn, as the forward pass's tasks do, so the rows come from L2 or
// further rather than L1 (the cache is 1.3 MB for n=1000, 10 MB for n=8000). ns/cell·head is the
// time per visible cell and query head.
func BenchmarkAttn(b *testing.B) {
	r := rand.New(rand.NewPCG(11, 12))
	const kvHeads = 8
	for _, bc := range []struct{ heads, hd, n int }{
		{3, 64, 160}, {3, 64, 1000}, {3, 64, 8000}, {8, 64, 160}, {8, 64, 1000}, {4, 128, 1000},
	} {
		heads, hd, n := bc.heads, bc.hd, bc.n
		stride := kvHeads * hd
		rows := n + n/4
		kv := randF16s(r, rows*stride)
		for i, h := range kv {
			if h&0x7c00 == 0 {
				kv[i] = 0x3c00 // no subnormals: they would not be there, and may be slow
			}
		}
		q := randF32s(r, heads*hd)
		p := benchWeights(r, heads, n)
		cells := benchCells(r, rows, n)
		scores := make([]float32, heads*n)
		out := make([]float32, heads*hd)
		g := 0
		kvHead := func() []uint16 { // the next KV head's slice of the cache
			g = (g + 1) % kvHeads
			return kv[g*hd:]
		}
		name := fmt.Sprintf("heads=%d/hd=%d/n=%d", heads, hd, n)
		benchPerCellHead(b, "Scores/kernel/"+name, n*heads, func() {
			AttnScoresF16(q, heads, hd, kvHead(), cells, stride, 0.125, scores)
		})
		benchPerCellHead(b, "Scores/percell/"+name, n*heads, func() {
			kv := kvHead()
			for j, c := range cells {
				off := int(c) * stride
				for h := range heads {
					scores[h*n+j] = 0.125 * DotF16(q[h*hd:(h+1)*hd], kv[off:off+hd])
				}
			}
		})
		benchPerCellHead(b, "Values/kernel/"+name, n*heads, func() {
			AttnValuesF16(p, heads, hd, kvHead(), cells, stride, out)
		})
		benchPerCellHead(b, "Values/percell/"+name, n*heads, func() {
			kv := kvHead()
			for h := range heads {
				o := out[h*hd : (h+1)*hd]
				clear(o)
				for j, c := range cells {
					off := int(c) * stride
					AxpyF16(p[h*n+j], kv[off:off+hd], o)
				}
			}
		})
	}
}

// benchWeights returns heads×n attention weights, each head's summing to about 1/2.
func benchWeights(r *rand.Rand, heads, n int) []float32 {
	p := make([]float32, heads*n)
	for i := range p {
		p[i] = r.Float32() / float32(n)
	}
	return p
}

// benchPerCellHead runs body as the sub-benchmark name and reports ns/cell·head, the time per
// visible cell and query head (cellHeads of them a call).
func benchPerCellHead(b *testing.B, name string, cellHeads int, body func()) {
	b.Run(name, func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			body()
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*cellHeads), "ns/cell·head")
	})
}
