package kvcache

import "testing"

// decodeRig is a cache with nSeq sequences decoding one token each per step, the steady state
// of continuous batching; every window steps the sequences are cut back to their prompt.
type decodeRig struct {
	c      *Cache
	nSeq   int
	prompt int32
	window int32
	step   int32
	toks   []int32
	pos    []int32
	seqs   [][]int32
	cells  []int32
}

func newDecodeRig(tb testing.TB, nSeq int) *decodeRig {
	r := &decodeRig{nSeq: nSeq, prompt: 40, window: 300}
	r.c = newCache(tb, Config{NLayers: 1, KVDim: 8, NumBlocks: nSeq * 30, MaxSeqs: nSeq})
	r.toks, r.pos, r.cells = make([]int32, nSeq), make([]int32, nSeq), make([]int32, nSeq)
	r.seqs = make([][]int32, nSeq)
	for s := range nSeq {
		r.seqs[s] = []int32{int32(s)}
		prompt := make([]int32, r.prompt)
		for i := range prompt {
			prompt[i] = int32(s*1000 + i)
		}
		reserve(tb, r.c, r.seqs[s], 0, 0, prompt...)
	}
	// Run one full window so block tables, scratch and the index reach their steady size.
	for range r.window + 1 {
		r.decode(tb)
	}
	return r
}

func (r *decodeRig) decode(tb testing.TB) {
	if r.step == r.window {
		for s := range r.nSeq {
			if err := r.c.SeqRemove(s, r.prompt, -1); err != nil {
				tb.Fatal(err)
			}
		}
		r.step = 0
	}
	for s := range r.nSeq {
		r.toks[s], r.pos[s] = int32(r.step%7), r.prompt+r.step
	}
	if err := r.c.Reserve(r.toks, r.pos, r.seqs, r.cells); err != nil {
		tb.Fatal(err)
	}
	r.step++
}

// attend walks what the forward pass reads for each sequence: its block table and the positions
// of its cells.
func (r *decodeRig) attend() int32 {
	var sum int32
	bs := int32(r.c.Config().BlockSize)
	for s := range r.nSeq {
		blocks := r.c.Blocks(s)
		n := int32(r.c.SeqCells(s))
		for i := range n {
			sum += r.c.Pos(blocks[i/bs]*bs + i%bs)
		}
	}
	return sum
}

func TestHotPathsDoNotAllocate(t *testing.T) {
	r := newDecodeRig(t, 16)
	if n := testing.AllocsPerRun(2*int(r.window), func() {
		r.decode(t)
		r.attend()
	}); n != 0 {
		t.Fatalf("steady-state Reserve+Blocks+Pos allocates %v times per step", n)
	}
	checkInvariants(t, r.c)
}

func BenchmarkReserveDecode64(b *testing.B) {
	r := newDecodeRig(b, 64)
	b.ReportAllocs()
	for b.Loop() {
		r.decode(b)
	}
}

func BenchmarkAttendReads64(b *testing.B) {
	r := newDecodeRig(b, 64)
	b.ReportAllocs()
	for b.Loop() {
		r.attend()
	}
}

func BenchmarkReservePrompt512(b *testing.B) {
	c := newCache(b, Config{NLayers: 1, KVDim: 8, NumBlocks: 64, MaxSeqs: 1})
	toks := make([]int32, 512)
	pos := make([]int32, 512)
	seqs := make([][]int32, 512)
	for i := range toks {
		toks[i], pos[i], seqs[i] = int32(i), int32(i), []int32{0}
	}
	cells := make([]int32, 512)
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Reserve(toks, pos, seqs, cells); err != nil {
			b.Fatal(err)
		}
		c.SeqFree(0)
	}
}
