package ops

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"ubatch/quant"
)

// The Q8_0 attention kernels are checked against float64 sums over the dequantized cache (the Go
// twins) and, where runsAsm says the attention kernels run (amd64 with AVX2, arm64), the exported kernels against the twins, to
// float32 rounding:
//
//	|got - want| <= (attnRelTol + terms·2^-24) · Σ|terms| + absTol

// q8Data is one test problem over a Q8_0 cache: rows of strideB bytes, the head's hd values in
// each row's first hd/32 blocks.
type q8Data struct {
	heads, hd, strideB int
	q, p               []float32
	kv                 []byte
	cells              []int32
}

// newQ8Data quantizes random rows (quant.Quantize, as the runner does) into a cache whose rows
// have pad bytes of garbage after the head's blocks; cells repeat and come in no order.
func newQ8Data(r *rand.Rand, heads, hd, n, pad int) *q8Data {
	span := hd / 32 * q8Block
	rows := 1 + n/2 + r.IntN(n+1)
	d := &q8Data{heads: heads, hd: hd, strideB: span + pad}
	d.q = randF32s(r, heads*hd)
	d.p = randF32s(r, heads*n)
	d.kv = make([]byte, (rows-1)*d.strideB+span) // the last row ends the cache
	for i := range d.kv {
		d.kv[i] = byte(r.Uint32())
	}
	for c := range rows {
		if err := quant.Quantize(quant.Q8_0, randF32s(r, span/q8Block*32), d.kv[c*d.strideB:][:span]); err != nil {
			panic(err)
		}
	}
	d.cells = randCells(r, n, rows)
	return d
}

// at dequantizes element i of the head in cell c.
func (d *q8Data) at(c int32, i int) float64 {
	blk := d.kv[int(c)*d.strideB+i/32*q8Block:]
	return float64(q8Scale(blk)) * float64(int8(blk[2+i%32]))
}

// scale is the scale of the block that holds element i of the head in cell c.
func (d *q8Data) scale(c int32, i int) float64 {
	return float64(q8Scale(d.kv[int(c)*d.strideB+i/32*q8Block:]))
}

// checkQ8Scores compares AttnScoresQ8's Go twin with float64 sums over d, and AttnScoresQ8 with
// the twin.
func checkQ8Scores(t testing.TB, d *q8Data, scale float32) {
	t.Helper()
	n := len(d.cells)
	got, twin := runWithTwin(t, "AttnScoresQ8", "heads×cells", d.heads*n,
		func(out []float32) { AttnScoresQ8(d.q, d.heads, d.hd, d.kv, d.cells, d.strideB, scale, out) },
		func(out []float32) { attnScoresQ8Go(d.q, d.heads, d.hd, d.kv, d.cells, d.strideB, scale, out) })
	for h := range d.heads {
		for j, c := range d.cells {
			var want, mag, raw float64
			for i := range d.hd {
				x := float64(d.q[h*d.hd+i]) * d.at(c, i)
				want += x
				mag += math.Abs(x)
				// The twin sums q·int8 before it applies d: that sum may overflow float32 alone.
				raw += math.Abs(float64(d.q[h*d.hd+i]) * float64(int8(d.kv[int(c)*d.strideB+i/32*q8Block+2+i%32])))
			}
			s := math.Abs(float64(scale))
			if !(raw <= 1e36) || max(1, s)*mag > 1e36 || math.IsInf(mag, 0) || math.IsNaN(mag) {
				continue // the float32 sums, or the scaled score, may overflow
			}
			what := fmt.Sprintf("AttnScoresQ8 head %d cell %d (#%d)", h, c, j)
			checkQ8(t, what+" twin vs float64", twin[h*n+j], float64(scale)*want, s*mag, d.hd)
			if runsAsm(opAttnScoresQ8) { // otherwise the exported kernel is the twin
				checkQ8(t, what+" vs twin", got[h*n+j], float64(twin[h*n+j]), s*mag, d.hd)
			}
		}
	}
}

// checkQ8Values is checkQ8Scores for AttnValuesQ8.
func checkQ8Values(t testing.TB, d *q8Data) {
	t.Helper()
	n := len(d.cells)
	got, twin := runWithTwin(t, "AttnValuesQ8", "heads×hd", d.heads*d.hd,
		func(out []float32) { AttnValuesQ8(d.p, d.heads, d.hd, d.kv, d.cells, d.strideB, out) },
		func(out []float32) { attnValuesQ8Go(d.p, d.heads, d.hd, d.kv, d.cells, d.strideB, out) })
	for h := range d.heads {
		for i := range d.hd {
			var want, mag, w float64
			for j, c := range d.cells {
				x := float64(d.p[h*n+j]) * d.at(c, i)
				want += x
				mag += math.Abs(x)
				// The twin's weight p·d may overflow float32 even where p·d·q does not.
				w = max(w, math.Abs(float64(d.p[h*n+j])*d.scale(c, i)))
			}
			if w > 1e36 || mag > 1e36 || math.IsInf(mag, 0) || math.IsNaN(mag) {
				continue
			}
			what := fmt.Sprintf("AttnValuesQ8 out[head %d, %d]", h, i)
			checkQ8(t, what+" twin vs float64", twin[h*d.hd+i], want, mag, n)
			if runsAsm(opAttnValuesQ8) {
				checkQ8(t, what+" vs twin", got[h*d.hd+i], float64(twin[h*d.hd+i]), mag, n)
			}
		}
	}
}

// checkQ8 allows float32 rounding of a sum of terms terms (each partial sum rounds): besides
// attnRelTol, terms·2^-24 of Σ|terms|.
func checkQ8(t testing.TB, what string, got float32, want, mag float64, terms int) {
	t.Helper()
	if diff := math.Abs(float64(got) - want); !(diff <= (attnRelTol+float64(terms)*0x1p-24)*mag+absTol) {
		t.Fatalf("%s: %v, want %v (|diff| %.3g, Σ|terms| %.3g)", what, got, want, diff, mag)
	}
}

func TestAttnQ8KernelsMatchReference(t *testing.T) {
	t.Logf("assembly: %v", runsAsm(opAttnScoresQ8))
	for _, heads := range []int{1, 2, 3, 4, 5, 7, 8, 11} {
		for _, hd := range []int{32, 64, 96, 128, 160, 256} {
			for _, n := range []int{0, 1, 2, 7, 8, 15, 17, 300} {
				pad := (heads*7 + hd + n) % 37 // rows not aligned
				name := fmt.Sprintf("heads=%d/hd=%d/n=%d/pad=%d", heads, hd, n, pad)
				t.Run(name, func(t *testing.T) {
					r := rand.New(rand.NewPCG(uint64(heads), uint64(hd*1000+n)))
					d := newQ8Data(r, heads, hd, n, pad)
					checkQ8Scores(t, d, float32(r.NormFloat64()))
					checkQ8Values(t, d)
				})
			}
		}
	}
}

// TestAttnQ8KernelsExact: with small-integer queries and weights and power-of-two scales every
// partial sum is exact in float32, so the kernels must equal the exact values.
func TestAttnQ8KernelsExact(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, tc := range []struct {
		name      string
		heads, hd int
	}{
		{"one head of 64", 1, 64},
		{"three heads of 32", 3, 32},
		{"four heads of 128", 4, 128},
		{"eleven heads of 96", 11, 96},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newQ8Data(r, tc.heads, tc.hd, 40, 3)
			for c := 0; c*d.strideB < len(d.kv); c++ {
				for b := range tc.hd / 32 {
					blk := d.kv[c*d.strideB+b*q8Block:]
					blk[0], blk[1] = 0, 0x3c+byte(r.IntN(3))*4 // 1, 2 or 4 as a half
					for i := range 32 {
						blk[2+i] = byte(int8(r.IntN(15) - 7))
					}
				}
			}
			for i := range d.q {
				d.q[i] = float32(r.IntN(9) - 4)
			}
			for i := range d.p {
				d.p[i] = float32(r.IntN(9) - 4)
			}
			n := len(d.cells)
			scores := make([]float32, tc.heads*n)
			out := make([]float32, tc.heads*tc.hd)
			AttnScoresQ8(d.q, tc.heads, tc.hd, d.kv, d.cells, d.strideB, 0.5, scores)
			AttnValuesQ8(d.p, tc.heads, tc.hd, d.kv, d.cells, d.strideB, out)
			checkAttnExact(t, "Q8_0", d.q, d.p, tc.hd, d.cells, 0.5, d.at, scores, out)
		})
	}
}

func TestAttnQ8KernelsPanic(t *testing.T) {
	const heads, hd, stride, rows = 3, 64, 70, 10
	cacheLen := (rows-1)*stride + 68
	ok := []int32{0, 9, 3}
	tests := []attnPanicCase{
		{"fits", heads, hd, stride, ok, heads * hd, heads * 3, cacheLen, false},
		{"one block a head", heads, 32, stride, ok, heads * 32, heads * 3, (rows-1)*stride + 34, false},
		{"no cells", heads, hd, stride, nil, heads * hd, 0, cacheLen, false},
		{"cell past the end", heads, hd, stride, []int32{10}, heads * hd, heads, cacheLen, true},
		{"row ends past the end", heads, hd, stride, ok, heads * hd, heads * 3, cacheLen - 1, true},
		{"negative cell", heads, hd, stride, []int32{-1}, heads * hd, heads, cacheLen, true},
		{"stride shorter than the blocks", heads, hd, 67, ok, heads * hd, heads * 3, cacheLen, true},
		{"hd not a multiple of 32", heads, 48, stride, ok, heads * 48, heads * 3, cacheLen, true},
		{"hd of 8", heads, 8, stride, ok, heads * 8, heads * 3, cacheLen, true},
		{"short heads×hd vector", heads, hd, stride, ok, heads*hd - 1, heads * 3, cacheLen, true},
		{"short heads×cells vector", heads, hd, stride, ok, heads * hd, heads*3 - 1, cacheLen, true},
		{"huge heads", math.MaxInt / 2, hd, stride, ok, heads * hd, heads * 3, cacheLen, true},
	}
	runAttnPanics(t, tests, []attnPanicKernel{
		{"AttnScoresQ8", func(heads, hd, stride int, cells []int32, lenHD, lenN, kvBytes int) {
			AttnScoresQ8(make([]float32, lenHD), heads, hd, make([]byte, kvBytes), cells, stride, 1, make([]float32, lenN))
		}},
		{"AttnValuesQ8", func(heads, hd, stride int, cells []int32, lenHD, lenN, kvBytes int) {
			AttnValuesQ8(make([]float32, lenN), heads, hd, make([]byte, kvBytes), cells, stride, make([]float32, lenHD))
		}},
	})
}

// FuzzAttnQ8 compares both Q8_0 kernels with float64 sums and their twins. The cache bytes
// (scales included: any half, infinities and NaNs too), cells and numbers come from data.
func FuzzAttnQ8(f *testing.F) {
	addAttnSeeds(f, 1, 3)
	f.Fuzz(func(t *testing.T, data []byte, heads8, hd8, pad8 uint8, scale float32) {
		heads, scale := 1+int(heads8)%11, finiteOr1(scale)
		hd := 32 * (1 + int(hd8)%8)
		span := hd / 32 * q8Block
		d := &q8Data{heads: heads, hd: hd, strideB: span + int(pad8%40)}
		rows := 1 + int(pad8/40)*3
		src := &fuzzBytes{data: data}
		d.cells, d.q, d.p = src.attnInputs(heads, hd, rows)
		d.kv = src.next((rows-1)*d.strideB + span)
		checkQ8Scores(t, d, scale)
		checkQ8Values(t, d)
	})
}

// BenchmarkAttnQ8 measures the Q8_0 kernels against the F16 ones on the same shapes, laid out as
// BenchmarkAttn's: rows of 8 KV heads × hd, cells in runs of consecutive ones, in random order,
// successive calls taking the KV heads in turn. The Q8_0 rows are 53% of the F16 rows' bytes.
func BenchmarkAttnQ8(b *testing.B) {
	r := rand.New(rand.NewPCG(11, 12))
	const kvHeads = 8
	for _, bc := range []struct{ heads, hd, n int }{
		{1, 128, 1000}, {3, 64, 160}, {3, 64, 1000}, {3, 64, 8000}, {8, 64, 1000}, {4, 128, 1000},
	} {
		heads, hd, n := bc.heads, bc.hd, bc.n
		stride := kvHeads * hd
		strideB := kvHeads * hd / 32 * q8Block
		rows := n + n/4
		f32 := randF32s(r, rows*stride)
		for i := range f32 {
			f32[i] = float32(r.NormFloat64())
		}
		kv16 := make([]uint16, len(f32))
		quant.F32ToF16s(kv16, f32)
		kv8 := make([]byte, rows*strideB)
		if err := quant.Quantize(quant.Q8_0, f32, kv8); err != nil {
			b.Fatal(err)
		}
		q := randF32s(r, heads*hd)
		p := benchWeights(r, heads, n)
		cells := benchCells(r, rows, n)
		scores := make([]float32, heads*n)
		out := make([]float32, heads*hd)
		g := 0
		next := func() int { g = (g + 1) % kvHeads; return g }
		name := fmt.Sprintf("heads=%d/hd=%d/n=%d", heads, hd, n)
		benchPerCellHead(b, "Scores/q8_0/"+name, n*heads, func() {
			AttnScoresQ8(q, heads, hd, kv8[next()*hd/32*q8Block:], cells, strideB, 0.125, scores)
		})
		benchPerCellHead(b, "Scores/f16/"+name, n*heads, func() {
			AttnScoresF16(q, heads, hd, kv16[next()*hd:], cells, stride, 0.125, scores)
		})
		benchPerCellHead(b, "Values/q8_0/"+name, n*heads, func() {
			AttnValuesQ8(p, heads, hd, kv8[next()*hd/32*q8Block:], cells, strideB, out)
		})
		benchPerCellHead(b, "Values/f16/"+name, n*heads, func() {
			AttnValuesF16(p, heads, hd, kv16[next()*hd:], cells, stride, out)
		})
	}
}
