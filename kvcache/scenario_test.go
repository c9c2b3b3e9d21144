package kvcache

import (
	"slices"
	"testing"
)

// A 256-token prompt shared by 8 sequences occupies its 16 blocks once; each generated token of
// each sequence then adds cells to that sequence only.
func TestSharedPromptEightSequences(t *testing.T) {
	const nSeq, nPrompt = 8, 256
	prompt := make([]int32, nPrompt)
	for i := range prompt {
		prompt[i] = int32(i*7%101 + 1)
	}
	all := seqRange(nSeq)
	tests := []struct {
		name   string
		decode func(t *testing.T, c *Cache)
	}{
		{name: "one reserve for all sequences", decode: func(t *testing.T, c *Cache) {
			reserve(t, c, all, 0, 1000, prompt...)
		}},
		{name: "seq 0 then SeqCopy", decode: func(t *testing.T, c *Cache) {
			reserve(t, c, []int32{0}, 0, 1000, prompt...)
			for s := 1; s < nSeq; s++ {
				if err := c.SeqCopy(0, s, -1, -1); err != nil {
					t.Fatal(err)
				}
			}
		}},
		{name: "prompt in micro-batches of 64", decode: func(t *testing.T, c *Cache) {
			for p := 0; p < nPrompt; p += 64 {
				reserve(t, c, all, int32(p), 1000+float32(p), prompt[p:p+64]...)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newCache(t, Config{NLayers: 2, KVDim: 4, NumBlocks: 64, MaxSeqs: nSeq})
			tc.decode(t, c)
			want := Stats{BlockSize: 16, Total: 64, Used: 16, Shared: 16, Cached: 0, Free: 48, UsedCells: 256}
			if st := c.Stats(); st != want {
				t.Fatalf("after the prompt: %+v, want %+v", st, want)
			}
			shared := visible(t, c, 0)
			for s := range nSeq {
				if !slices.Equal(c.Blocks(s), c.Blocks(0)) {
					t.Fatalf("seq %d does not share seq 0's blocks", s)
				}
			}
			// Two rounds of generation, one token per sequence per step in one micro-batch.
			for step := range int32(2) {
				toks := make([]int32, nSeq)
				pos := make([]int32, nSeq)
				seqs := make([][]int32, nSeq)
				for s := range nSeq {
					toks[s], pos[s], seqs[s] = int32(500+s), nPrompt+step, []int32{int32(s)}
				}
				cells := make([]int32, nSeq)
				if err := c.Reserve(toks, pos, seqs, cells); err != nil {
					t.Fatal(err)
				}
				for s, cell := range cells {
					writeKV(c, cell, float32(10000*(s+1))+float32(step))
				}
				want := Stats{BlockSize: 16, Total: 64, Used: 16 + nSeq, Shared: 16, Free: 48 - nSeq,
					UsedCells: nPrompt + nSeq*int(step+1)}
				if st := c.Stats(); st != want {
					t.Fatalf("after generation step %d: %+v, want %+v", step, st, want)
				}
			}
			for s := range nSeq {
				got := visible(t, c, s)
				want := append(slices.Clone(shared),
					entry{nPrompt, int32(500 + s), float32(10000 * (s + 1)), -float32(10000 * (s + 1))},
					entry{nPrompt + 1, int32(500 + s), float32(10000*(s+1)) + 1, -float32(10000*(s+1)) - 1})
				if !slices.Equal(got, want) {
					t.Fatalf("seq %d: last entries %v, want %v", s, got[len(got)-3:], want[len(want)-3:])
				}
				if c.Blocks(s)[16] == c.Blocks((s + 1) % nSeq)[16] {
					t.Fatalf("seq %d shares its generation block", s)
				}
			}
			checkInvariants(t, c)
			// Finishing all sequences keeps the prompt's blocks as cached prefix, and each
			// sequence's own last block (distinct generated tokens) as a kept partial block.
			c.SeqFree(-1)
			if st := c.Stats(); st.Used != 0 || st.Cached != 16+nSeq {
				t.Fatalf("after freeing: %+v", st)
			}
			if got := c.MatchPrefix(prompt); got != nPrompt {
				t.Fatalf("MatchPrefix = %d, want %d", got, nPrompt)
			}
		})
	}
}
