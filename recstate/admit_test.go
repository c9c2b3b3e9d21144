package recstate

import (
	"testing"

	"ubatch/kvcache"
	"ubatch/quant"
)

// TestAdmitWithKVCache admits a prompt sharing 14 tokens with an earlier one into a real
// kvcache.Manager and the states: the hit is the longest boundary with both its attention blocks
// and a snapshot, the attention prefix is cut back to it, and the state is that prefix's.
func TestAdmitWithKVCache(t *testing.T) {
	const bs = 4
	salt := kvcache.NewSalt("a")
	first := tokens(5, 18)
	second := append(append([]int32(nil), first[:14]...), tokens(6, 5)...)
	for _, tc := range []struct {
		name   string
		policy Policy
		want   int
	}{
		{name: "every block", policy: Policy{Every: 1}, want: 12},
		{name: "every other", policy: Policy{Every: 2}, want: 8},
		{name: "prompt end only", policy: Policy{PromptEnd: true}, want: 0}, // 16 is past the shared 14
		{name: "none", policy: Policy{}, want: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kv, err := kvcache.NewManager(kvcache.Config{NLayers: 1, KVDim: 4, BlockSize: bs, NumBlocks: 32, DType: quant.F16, MaxSeqs: 2})
			if err != nil {
				t.Fatal(err)
			}
			h := newHarness(t, Config{MaxSeqs: 2, BlockSize: bs, StateBytes: 1, Budget: 16, Policy: tc.policy})
			n, err := h.m.Admit(kv, 0, salt, first, 4)
			if err != nil || n != 0 {
				t.Fatalf("cold Admit: %d, %v", n, err)
			}
			h.root[0] = salt.Key
			h.flush()
			for p := 0; p < len(first); p = h.m.Pos(0) {
				e := h.m.ChunkEnd(0, len(first))
				cells := make([]int32, e-p)
				pos, seqs := make([]int32, e-p), make([][]int32, e-p)
				for i := range pos {
					pos[i], seqs[i] = int32(p+i), []int32{0}
				}
				if err := kv.Reserve(first[p:e], pos, seqs, cells); err != nil {
					t.Fatal(err)
				}
				h.advance(0, first[p:e])
			}
			kv.SeqFree(0)
			h.m.Free(0)

			a := h.m.CanAdmit(kv, salt, second, 4)
			full := kv.CanAdmit(salt, second, 4)
			if a.Cached != tc.want || a.Need != full.Need+full.Cached/bs-tc.want/bs {
				t.Fatalf("CanAdmit: %+v (kvcache's %+v), want Cached %d", a, full, tc.want)
			}
			n, err = h.m.Admit(kv, 1, salt, second, 4)
			if err != nil {
				t.Fatal(err)
			}
			h.root[1] = salt.Key
			h.flush()
			if n != tc.want || kv.SeqLen(1) != n || h.m.Pos(1) != n {
				t.Fatalf("Admit: %d, attention %d, state at %d; want %d", n, kv.SeqLen(1), h.m.Pos(1), tc.want)
			}
			h.checkState(1, second)
		})
	}
}
