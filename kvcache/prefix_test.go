package kvcache

import (
	"hash/maphash"
	"slices"
	"strings"
	"testing"
)

func TestMatchPrefix(t *testing.T) {
	prompt := []int32{10, 11, 12, 13, 14, 15, 16, 17, 18, 19} // blocks of 4: two full, one partial
	tests := []struct {
		name  string
		query []int32
		want  int
	}{
		// The last, partly filled block is copied from while its sequence is live, and once it
		// is freed, as a kept partial block.
		{name: "same prompt", query: prompt, want: 10},
		{name: "longer prompt", query: append(slices.Clone(prompt), 1, 2, 3, 4, 5), want: 10},
		{name: "prompt up to the full blocks", query: prompt[:8], want: 8},
		{name: "one token into the partial block", query: prompt[:9], want: 9},
		// A partial match takes the first cells of a full block.
		{name: "one token short of the second block", query: prompt[:7], want: 7},
		{name: "second block differs", query: []int32{10, 11, 12, 13, 14, 15, 16, 99}, want: 7},
		{name: "second block differs at once", query: []int32{10, 11, 12, 13, 99, 15, 16, 17}, want: 4},
		{name: "first token differs", query: []int32{9, 11, 12, 13, 14, 15, 16, 17}, want: 0},
		{name: "shorter than a block", query: prompt[:3], want: 3},
		{name: "empty", query: nil, want: 0},
	}
	for _, live := range []bool{true, false} {
		for _, tc := range tests {
			name := tc.name
			if !live {
				name = "cached/" + name
			}
			want := tc.want
			t.Run(name, func(t *testing.T) {
				c := newCache(t, Config{BlockSize: 4, NumBlocks: 8})
				tenTokens(t, c, 0)
				if !live {
					c.SeqFree(0)
				}
				if got := c.MatchPrefix(tc.query); got != want {
					t.Fatalf("MatchPrefix = %d, want %d", got, want)
				}
			})
		}
	}
}

func TestAttachPrefixReusesCachedBlocks(t *testing.T) {
	c := newCache(t, Config{BlockSize: 4, NumBlocks: 8, MaxSeqs: 2})
	tenTokens(t, c, 0)
	orig := visible(t, c, 0)
	c.SeqFree(0)
	// Two full blocks and the kept partial third.
	if st := c.Stats(); st.Used != 0 || st.Cached != 3 || st.Free != 5 {
		t.Fatalf("after free: %+v", st)
	}
	prompt := []int32{10, 11, 12, 13, 14, 15, 16, 17, 18, 19}
	// Leaving the last token out, as a caller needing its logits does: the full blocks are
	// attached, the kept third's first cell copied into a block of seq 1's own.
	n, err := c.AttachPrefix(1, prompt[:len(prompt)-1])
	if err != nil || n != 9 {
		t.Fatalf("AttachPrefix = %d, %v; want 9", n, err)
	}
	if st := c.Stats(); st.Used != 3 || st.Cached != 1 || st.UsedCells != 9 {
		t.Fatalf("after attach: %+v", st)
	}
	if got := visible(t, c, 1); !slices.Equal(got, orig[:9]) {
		t.Fatalf("attached seq sees %v, want %v", got, orig[:9])
	}
	if c.SeqPosMin(1) != 0 || c.SeqPosMax(1) != 8 || c.SeqCells(1) != 9 {
		t.Fatalf("range [%d, %d], %d cells", c.SeqPosMin(1), c.SeqPosMax(1), c.SeqCells(1))
	}
	// Decoding continues at position n in its own block.
	reserve(t, c, []int32{1}, 9, 500, 19)
	if st := c.Stats(); st.Used != 3 {
		t.Fatalf("after decoding the rest: %+v", st)
	}
	checkInvariants(t, c)
}

func TestAttachPrefixSharesLiveBlocks(t *testing.T) {
	c := newCache(t, Config{BlockSize: 4, NumBlocks: 8, MaxSeqs: 2})
	tenTokens(t, c, 0)
	n, err := c.AttachPrefix(1, []int32{10, 11, 12, 13, 14, 15, 16, 17, 99})
	if err != nil || n != 8 {
		t.Fatalf("AttachPrefix = %d, %v", n, err)
	}
	if st := c.Stats(); st.Used != 3 || st.Shared != 2 {
		t.Fatalf("stats %+v", st)
	}
	// Seq 0 keeps writing in its own partial block; seq 1 writes after the shared blocks.
	seq0 := visible(t, c, 0)
	reserve(t, c, []int32{1}, 8, 700, 99)
	reserve(t, c, []int32{0}, 10, 800, 20)
	if got := visible(t, c, 0); !slices.Equal(got[:10], seq0) || got[10] != (entry{10, 20, 800, -800}) {
		t.Fatalf("seq 0: %v", got)
	}
	if got := visible(t, c, 1); !slices.Equal(got[:8], seq0[:8]) || got[8] != (entry{8, 99, 700, -700}) {
		t.Fatalf("seq 1: %v", got)
	}
	checkInvariants(t, c)
}

// TestAttachPrefixPartialBlock attaches a prompt that diverges inside a full block: the matching
// cells are copied into a block of the new sequence's own, the source keeps its references.
func TestAttachPrefixPartialBlock(t *testing.T) {
	tests := []struct {
		name      string
		numBlocks int
		free      bool // free seq 0 first, so that its blocks are cached
		want      int
		wantUsed  int
	}{
		{name: "live source", numBlocks: 8, want: 6, wantUsed: 4},
		{name: "cached source", numBlocks: 8, free: true, want: 6, wantUsed: 2},
		// Three blocks: after attaching block 0, the free third block takes the copy while the
		// cached source is kept from eviction.
		{name: "cached source, one free block", numBlocks: 3, free: true, want: 6, wantUsed: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newCache(t, Config{BlockSize: 4, NumBlocks: tc.numBlocks, MaxSeqs: 2})
			tenTokens(t, c, 0)
			orig := visible(t, c, 0)
			src := c.Blocks(0)[1]
			if tc.free {
				c.SeqFree(0)
			}
			query := []int32{10, 11, 12, 13, 14, 15, 99}
			if got := c.MatchPrefix(query); got != tc.want {
				t.Fatalf("MatchPrefix = %d, want %d", got, tc.want)
			}
			n, err := c.AttachPrefix(1, query)
			if err != nil || n != tc.want {
				t.Fatalf("AttachPrefix = %d, %v; want %d", n, err, tc.want)
			}
			if got := visible(t, c, 1); !slices.Equal(got, orig[:6]) {
				t.Fatalf("attached seq sees %v, want %v", got, orig[:6])
			}
			own := c.Blocks(1)[1]
			if own == src || c.ref[own] != 1 {
				t.Fatalf("partial block %d (source %d) has %d references, want a copy of its own", own, src, c.ref[own])
			}
			if st := c.Stats(); st.Used != tc.wantUsed {
				t.Fatalf("stats %+v, want %d used blocks", st, tc.wantUsed)
			}
			if tc.free && c.hashed[src] != true {
				t.Fatal("the cached source block was evicted")
			}
			// Decoding continues in the copied block, without copy-on-write.
			reserve(t, c, []int32{1}, 6, 900, 99)
			if got := visible(t, c, 1); !slices.Equal(got[:6], orig[:6]) || got[6] != (entry{6, 99, 900, -900}) || c.Blocks(1)[1] != own {
				t.Fatalf("after decoding: %v", got)
			}
			checkInvariants(t, c)
		})
	}
}

// TestPartialMatchNeedsABlock checks that a partial match is not offered when the only block a
// copy could take is the cached source itself.
func TestPartialMatchNeedsABlock(t *testing.T) {
	c := newCache(t, Config{BlockSize: 4, NumBlocks: 2, MaxSeqs: 2})
	reserve(t, c, []int32{0}, 0, 0, 10, 11, 12, 13, 14, 15, 16, 17)
	c.SeqFree(0)
	query := []int32{10, 11, 12, 13, 14, 15, 99}
	if got := c.MatchPrefix(query); got != 4 {
		t.Fatalf("MatchPrefix = %d, want 4", got)
	}
	if n, err := c.AttachPrefix(1, query); err != nil || n != 4 {
		t.Fatalf("AttachPrefix = %d, %v; want 4", n, err)
	}
	checkInvariants(t, c)
}

func TestAttachPrefixErrors(t *testing.T) {
	c := newCache(t, Config{BlockSize: 4, NumBlocks: 8, MaxSeqs: 2})
	tenTokens(t, c, 0)
	tests := []struct {
		name    string
		seq     int
		wantErr string
	}{
		{name: "not empty", seq: 0, wantErr: "sequence 0 is not empty"},
		{name: "out of range", seq: 2, wantErr: "sequence id 2 outside"},
		{name: "negative", seq: -1, wantErr: "sequence id -1 outside"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := takeSnapshot(c)
			if _, err := c.AttachPrefix(tc.seq, []int32{10, 11, 12, 13}); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want %q", err, tc.wantErr)
			}
			if !before.equal(takeSnapshot(c)) {
				t.Fatalf("failed AttachPrefix changed the cache")
			}
		})
	}
	// A miss attaches nothing and leaves the sequence empty.
	if n, err := c.AttachPrefix(1, []int32{1, 2, 3, 4}); n != 0 || err != nil || c.SeqCells(1) != 0 || c.SeqPosMax(1) != -1 {
		t.Fatalf("miss: %d, %v, %d cells", n, err, c.SeqCells(1))
	}
}

// TestPrefixEviction checks the order in which cached one-block prompts are evicted from a
// four-block cache (three cached prompts, or two while a third runs): fewer uses first, then the earlier cached; a prompt used often long ago
// ages out once the cache has turned over enough times.
func TestPrefixEviction(t *testing.T) {
	blk := func(v int32) []int32 { return []int32{v, v, v, v} }
	tests := []struct {
		name    string
		uses    []int32 // one-block prompts run in order, each computed or attached, then freed
		evicted []int32 // prompts (by token) no longer cached at the end
		kept    []int32
	}{
		// Equal uses: the earliest cached goes first, as with LRU.
		{name: "recency breaks ties", uses: []int32{1, 2, 3, 4}, evicted: []int32{1}, kept: []int32{2, 3, 4}},
		{name: "reuse refreshes", uses: []int32{1, 2, 3, 1, 4}, evicted: []int32{2}, kept: []int32{1, 3, 4}},
		// 1 used three times outlives 2 and 3, although they are more recent.
		{name: "frequency beats recency", uses: []int32{1, 1, 1, 2, 3, 4, 5}, evicted: []int32{2, 3}, kept: []int32{1, 4, 5}},
		// ... but not for ever: one-off prompts raise the clock until 1's three uses are spent.
		{name: "old frequency ages out", uses: []int32{1, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9}, evicted: []int32{1}, kept: []int32{8, 9}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newCache(t, Config{BlockSize: 4, NumBlocks: 4, MaxSeqs: 1})
			for _, u := range tc.uses {
				p := append(blk(u), 0) // the extra token is computed for its logits
				n, err := c.Admit(0, Salt{}, p, 0)
				if err != nil {
					t.Fatal(err)
				}
				reserve(t, c, []int32{0}, int32(n), 0, p[n:]...)
				// Removed, so that its block is not kept as a partial one and only full
				// blocks compete (kept partial blocks: keep_test.go).
				if err := c.SeqRemove(0, 4, -1); err != nil {
					t.Fatal(err)
				}
				c.SeqFree(0)
				checkInvariants(t, c)
			}
			for _, v := range tc.evicted {
				if c.MatchPrefix(blk(v)) != 0 {
					t.Errorf("%v still cached", blk(v))
				}
			}
			for _, v := range tc.kept {
				if c.MatchPrefix(blk(v)) != 4 {
					t.Errorf("%v evicted", blk(v))
				}
			}
		})
	}
}

// TestSystemPromptSurvivesOneOffPrompts runs a stream of requests through a 32-block cache:
// every third shares a 16-token system prompt (4 blocks) and adds 4 tokens of its own, the
// others are distinct 64-token prompts (16 blocks each). The cache holds one of those with the
// system prompt, never two: under LRU each second one-off prompt evicted the system prompt.
// After a warm-up of three requests, every request with the system prompt must find it cached.
func TestSystemPromptSurvivesOneOffPrompts(t *testing.T) {
	c := newCache(t, Config{BlockSize: 4, NumBlocks: 32, MaxSeqs: 1})
	system := make([]int32, 16)
	for i := range system {
		system[i] = int32(1 + i)
	}
	run := func(p []int32) int {
		t.Helper()
		if a := c.CanAdmit(Salt{}, p, 0); !a.Fits() {
			t.Fatalf("a %d-token prompt does not fit an idle cache: %+v", len(p), a)
		}
		n, err := c.Admit(0, Salt{}, p, 0)
		if err != nil {
			t.Fatal(err)
		}
		reserve(t, c, []int32{0}, int32(n), 0, p[n:]...)
		c.SeqFree(0)
		checkInvariants(t, c)
		return n
	}
	var firstOneOff []int32
	tok := int32(1000)
	for i := range 3 {
		run(append(slices.Clone(system), 100+int32(i), 1, 2, 3))
	}
	for i := range 30 {
		if i%3 == 2 {
			if n := run(append(slices.Clone(system), 200+int32(i), 1, 2, 3)); n < len(system) {
				t.Fatalf("request %d took %d tokens from the cache, want the %d of the system prompt", i, n, len(system))
			}
			continue
		}
		p := make([]int32, 64)
		for j := range p {
			p[j], tok = tok, tok+1
		}
		if firstOneOff == nil {
			firstOneOff = p
		}
		run(p)
	}
	// The one-off prompts did pass through: the first is long gone.
	if n := c.MatchPrefix(firstOneOff); n != 0 {
		t.Fatalf("the first one-off prompt still has %d cached tokens: the cache held them all", n)
	}
}

func TestFreeBlocksBeforeEviction(t *testing.T) {
	c := newCache(t, Config{BlockSize: 4, NumBlocks: 4, MaxSeqs: 2})
	reserve(t, c, []int32{0}, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9) // 2 full blocks + 1 partial
	c.SeqFree(0)                                               // 2 cached, 2 free
	reserve(t, c, []int32{1}, 0, 0, 9, 9, 9, 9, 9, 9, 9, 9)    // 2 blocks: must take the free ones
	if got := c.MatchPrefix([]int32{1, 2, 3, 4, 5, 6, 7, 8}); got != 8 {
		t.Fatalf("cached prefix evicted while free blocks existed: MatchPrefix = %d", got)
	}
	// The next block must evict; the deepest block of the freed sequence goes first.
	reserve(t, c, []int32{1}, 8, 0, 9)
	if got := c.MatchPrefix([]int32{1, 2, 3, 4, 5, 6, 7, 8}); got != 4 {
		t.Fatalf("MatchPrefix = %d, want 4 (second block evicted before the first)", got)
	}
	checkInvariants(t, c)
}

func TestPrefixHashVerification(t *testing.T) {
	constant := func(maphash.Seed, uint64, []int32) uint64 { return 42 }
	zero := func(maphash.Seed, uint64, []int32) uint64 { return 0 }
	tokensOnly := func(seed maphash.Seed, _ uint64, toks []int32) uint64 { return chainHash(seed, 0, toks) }
	tests := []struct {
		name   string
		hash   func(maphash.Seed, uint64, []int32) uint64
		stored [][]int32 // prompts decoded, one sequence each
		query  []int32
		want   int
	}{
		{name: "real hash matches", hash: chainHash, stored: [][]int32{{1, 2, 3, 4, 5, 6, 7, 8}}, query: []int32{1, 2, 3, 4, 5, 6, 7, 8}, want: 8},
		{name: "colliding hash, tokens differ", hash: constant, stored: [][]int32{{1, 2, 3, 4}}, query: []int32{5, 6, 7, 8}, want: 0},
		// The index entry for hash 42 is block 0, whose parent does not match at level 2; the
		// partial match then finds block 1 through its verified parent, tokens and positions.
		{name: "colliding hash, second level", hash: constant, stored: [][]int32{{1, 2, 3, 4, 5, 6, 7, 8}}, query: []int32{1, 2, 3, 4, 5, 6, 7, 8}, want: 7},
		// Block [5 6 7 8] was computed after [1 2 3 4], not after [9 9 9 9]: same tokens, other K/V.
		{name: "same block tokens, other parent", hash: tokensOnly,
			stored: [][]int32{{1, 2, 3, 4, 5, 6, 7, 8}, {9, 9, 9, 9}}, query: []int32{9, 9, 9, 9, 5, 6, 7, 8}, want: 4},
		// With a hash of 0 for everything, block 0 also matches as block 1 on hash, parent and
		// tokens: only its positions tell it apart.
		{name: "positions verified", hash: zero, stored: [][]int32{{1, 2, 3, 4}}, query: []int32{1, 2, 3, 4, 1, 2, 3, 4}, want: 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newCache(t, Config{BlockSize: 4, NumBlocks: 8, MaxSeqs: 3})
			c.hashFn = tc.hash
			for s, p := range tc.stored {
				reserve(t, c, []int32{int32(s)}, 0, 0, p...)
			}
			if got := c.MatchPrefix(tc.query); got != tc.want {
				t.Fatalf("MatchPrefix = %d, want %d", got, tc.want)
			}
			n, err := c.AttachPrefix(len(tc.stored), tc.query)
			if err != nil || n != tc.want {
				t.Fatalf("AttachPrefix = %d, %v; want %d", n, err, tc.want)
			}
			checkInvariants(t, c)
		})
	}
}

func TestNonCanonicalBlocksAreNotHashed(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, c *Cache)
		query []int32
		want  int
	}{
		{name: "sequence starting at position 4", setup: func(t *testing.T, c *Cache) {
			reserve(t, c, []int32{0}, 4, 0, 1, 2, 3, 4)
		}, query: []int32{1, 2, 3, 4}, want: 0},
		{name: "block after a hole", setup: func(t *testing.T, c *Cache) {
			reserve(t, c, []int32{0}, 0, 0, 1, 2, 3)
			if err := c.SeqRemove(0, 1, 2); err != nil {
				t.Fatal(err)
			}
			reserve(t, c, []int32{0}, 3, 0, 4, 5, 6, 7, 8)
			// Only the cell before the hole can be copied from the live, unhashed block.
		}, query: []int32{1, 2, 3, 4, 5, 6, 7, 8}, want: 1},
		// Block 2 is filled after a cell of block 0 was removed, so it saw a history without
		// it; block 1 keeps its hash (its content was computed before) and seq 1 brings block 0
		// back. Block 2 must not hang off that chain: 8 tokens match, not 12.
		{name: "block filled after an earlier hole", setup: func(t *testing.T, c *Cache) {
			reserve(t, c, []int32{0}, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8)
			if err := c.SeqRemove(0, 1, 2); err != nil {
				t.Fatal(err)
			}
			reserve(t, c, []int32{0}, 8, 0, 9, 10, 11, 12)
			reserve(t, c, []int32{1}, 0, 0, 1, 2, 3, 4)
		}, query: []int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, want: 8},
		{name: "rewritten after suffix removal", setup: func(t *testing.T, c *Cache) {
			reserve(t, c, []int32{0}, 0, 0, 1, 2, 3, 4, 5)
			if err := c.SeqRemove(0, 2, -1); err != nil {
				t.Fatal(err)
			}
			reserve(t, c, []int32{0}, 2, 0, 7, 7)
		}, query: []int32{1, 2, 7, 7}, want: 4},
		{name: "old content gone after rewrite", setup: func(t *testing.T, c *Cache) {
			reserve(t, c, []int32{0}, 0, 0, 1, 2, 3, 4, 5)
			if err := c.SeqRemove(0, 2, -1); err != nil {
				t.Fatal(err)
			}
			reserve(t, c, []int32{0}, 2, 0, 7)
			// The kept cells of the live block still match; the removed 3, 4 do not.
		}, query: []int32{1, 2, 3, 4}, want: 2},
		{name: "shifted into canonical positions", setup: func(t *testing.T, c *Cache) {
			reserve(t, c, []int32{0}, 2, 0, 1, 2)
			if err := c.SeqShift(0, -1, -1, -2); err != nil {
				t.Fatal(err)
			}
			reserve(t, c, []int32{0}, 2, 0, 3, 4)
		}, query: []int32{1, 2, 3, 4}, want: 0},
		{name: "copy of a shifted block", setup: func(t *testing.T, c *Cache) {
			reserve(t, c, []int32{0}, 2, 0, 1, 2)
			if err := c.SeqShift(0, -1, -1, -2); err != nil {
				t.Fatal(err)
			}
			if err := c.SeqCopy(0, 1, -1, -1); err != nil {
				t.Fatal(err)
			}
			reserve(t, c, []int32{1}, 2, 0, 3, 4) // copy-on-write of the shifted block
		}, query: []int32{1, 2, 3, 4}, want: 0},
		{name: "cleared", setup: func(t *testing.T, c *Cache) {
			reserve(t, c, []int32{0}, 0, 0, 1, 2, 3, 4)
			c.Clear()
		}, query: []int32{1, 2, 3, 4}, want: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newCache(t, Config{BlockSize: 4, NumBlocks: 8, MaxSeqs: 2})
			tc.setup(t, c)
			if got := c.MatchPrefix(tc.query); got != tc.want {
				t.Fatalf("MatchPrefix = %d, want %d", got, tc.want)
			}
			checkInvariants(t, c)
		})
	}
}

func TestDuplicateBlockTakesOverIndexOnRelease(t *testing.T) {
	c := newCache(t, Config{BlockSize: 4, NumBlocks: 8, MaxSeqs: 2})
	p := []int32{1, 2, 3, 4, 5}
	reserve(t, c, []int32{0}, 0, 0, p...)
	reserve(t, c, []int32{1}, 0, 0, p...)        // same content, separate blocks
	if err := c.SeqRemove(0, 1, 2); err != nil { // seq 0's block loses its hash and index entry
		t.Fatal(err)
	}
	// Seq 1's first block, hashed but not indexed until now, becomes the cached copy; its second,
	// one cell after it, is kept as a partial block.
	c.SeqFree(1)
	if got := c.MatchPrefix(p); got != 5 {
		t.Fatalf("MatchPrefix = %d, want 5", got)
	}
	if st := c.Stats(); st.Cached != 2 {
		t.Fatalf("stats %+v", st)
	}
	checkInvariants(t, c)
}

// TestDuplicateOfPartialSourceKeepsItMatchable is the repeated-prompt bug: a sequence copies the
// first cells of a cached block, refills the block with the same tokens (a duplicate, hashed but
// not indexed) and is freed. The duplicate's release must not take the original's place as its
// parent's child with it: the next identical prompt still copies the cells.
func TestDuplicateOfPartialSourceKeepsItMatchable(t *testing.T) {
	c := newCache(t, Config{BlockSize: 4, NumBlocks: 8, MaxSeqs: 2})
	full := []int32{1, 2, 3, 4, 5, 6, 7, 8}
	prompt := full[:7]
	reserve(t, c, []int32{0}, 0, 0, full...)
	c.SeqFree(0)
	for round := range 3 {
		n, err := c.Admit(1, Salt{}, prompt, 1)
		if err != nil || n != 6 {
			t.Fatalf("round %d: Admit = %d, %v; want 6 (a block and 2 copied cells)", round, n, err)
		}
		reserve(t, c, []int32{1}, 6, 0, full[6:]...) // the same content: a duplicate block
		c.SeqFree(1)
		checkInvariants(t, c)
	}
}
