package quant

import (
	"sync"
	"testing"
)

// matmulFixture holds nRows weight rows and nTok activation rows of length k for type typ.
type matmulFixture struct {
	typ      Type
	k        int
	rowBytes int
	xRow     int
	w, xq    []byte
}

func newMatmulFixture(t testing.TB, typ Type, k, nRows, nTok int) *matmulFixture {
	f := &matmulFixture{typ: typ, k: k, rowBytes: typ.RowSize(k), xRow: ActType(typ).RowSize(k)}
	f.w = quantRows(t, typ, gaussian(31, nRows*k, 0.1), k, f.rowBytes)
	x := gaussian(32, nTok*k, 1)
	f.xq = make([]byte, nTok*f.xRow)
	for i := 0; i < nTok; i++ {
		QuantizeAct(typ, x[i*k:(i+1)*k], f.xq[i*f.xRow:])
	}
	return f
}

func (f *matmulFixture) want(r, tok int) float32 {
	return Dot(f.typ, f.k, f.w[r*f.rowBytes:(r+1)*f.rowBytes], f.xq[tok*f.xRow:])
}

func TestMatMul(t *testing.T) {
	const nRows, sentinel = 13, float32(-12345)
	shapes := []struct {
		name   string
		nTok   int
		r0, r1 int
		stride int
	}{
		{"one token all rows", 1, 0, nRows, nRows},
		{"four tokens", 4, 0, nRows, nRows},
		{"nine tokens partial group", 9, 0, nRows, nRows + 3},
		{"row range", 6, 3, 10, nRows},
		{"range narrower than a group", 7, 5, 7, nRows},
		{"single row", 5, 12, 13, 16},
		{"empty range", 3, 4, 4, nRows},
	}
	for _, dt := range dotTypes {
		f := newMatmulFixture(t, dt.typ, QK_K, nRows, 9)
		for _, sh := range shapes {
			t.Run(dt.name+"/"+sh.name, func(t *testing.T) {
				out := make([]float32, (sh.nTok-1)*sh.stride+nRows+2)
				for i := range out {
					out[i] = sentinel
				}
				MatMul(DotGo(dt.typ), dt.typ, f.k, f.w, f.xq, sh.nTok, out, sh.stride, sh.r0, sh.r1)
				for i, v := range out {
					tok, r := i/sh.stride, i%sh.stride
					inside := tok < sh.nTok && r >= sh.r0 && r < sh.r1
					switch {
					case inside && v != f.want(r, tok):
						t.Fatalf("out[tok %d, row %d] = %v, want %v", tok, r, v, f.want(r, tok))
					case !inside && v != sentinel:
						t.Fatalf("out[%d] (tok %d, row %d) outside the range was written", i, tok, r)
					}
				}
			})
		}
	}
}

// TestMatMulConcurrentRanges runs disjoint row ranges of one product on separate goroutines (run
// with -race to check that MatMul touches only its own rows).
func TestMatMulConcurrentRanges(t *testing.T) {
	const nRows, nTok = 10, 7
	f := newMatmulFixture(t, Q4_K, 2*QK_K, nRows, nTok)
	out := make([]float32, nTok*nRows)
	var wg sync.WaitGroup
	for _, rg := range [][2]int{{0, 3}, {3, 4}, {4, 9}, {9, 10}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			MatMul(dotQ4_KGo, Q4_K, f.k, f.w, f.xq, nTok, out, nRows, rg[0], rg[1])
		}()
	}
	wg.Wait()
	for tok := 0; tok < nTok; tok++ {
		for r := 0; r < nRows; r++ {
			if got, want := out[tok*nRows+r], f.want(r, tok); got != want {
				t.Fatalf("tok %d row %d: %v, want %v", tok, r, got, want)
			}
		}
	}
}

func TestMatMulNoAlloc(t *testing.T) {
	f := newMatmulFixture(t, Q8_0, QK_K, 8, 6)
	out := make([]float32, 6*8)
	dot := DotGo(Q8_0)
	if n := testing.AllocsPerRun(20, func() { MatMul(dot, Q8_0, f.k, f.w, f.xq, 6, out, 8, 0, 8) }); n != 0 {
		t.Errorf("MatMul allocates %v times per call", n)
	}
}

func TestMatMulBadShapesPanic(t *testing.T) {
	f := newMatmulFixture(t, Q4_0, 64, 4, 2)
	tests := []struct {
		name string
		call func()
	}{
		{"nil kernel", func() { MatMul(nil, Q4_0, 64, f.w, f.xq, 2, make([]float32, 8), 4, 0, 4) }},
		{"too many rows", func() { MatMul(dotQ4_0Go, Q4_0, 64, f.w, f.xq, 2, make([]float32, 10), 5, 0, 5) }},
		{"too many tokens", func() { MatMul(dotQ4_0Go, Q4_0, 64, f.w, f.xq, 3, make([]float32, 12), 4, 0, 4) }},
		{"short out", func() { MatMul(dotQ4_0Go, Q4_0, 64, f.w, f.xq, 2, make([]float32, 7), 4, 0, 4) }},
		{"stride below rows", func() { MatMul(dotQ4_0Go, Q4_0, 64, f.w, f.xq, 2, make([]float32, 8), 3, 0, 4) }},
		{"k not a block multiple", func() { MatMul(dotQ4_0Go, Q4_0, 48, f.w, f.xq, 2, make([]float32, 8), 4, 0, 4) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { mustPanic(t, tc.name, tc.call) })
	}
}

// mustPanic fails t, naming what, unless call panics.
func mustPanic(t testing.TB, what string, call func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Errorf("%s: no panic", what)
		}
	}()
	call()
}
