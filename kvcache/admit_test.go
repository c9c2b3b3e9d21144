package kvcache

import (
	"slices"
	"strings"
	"testing"
)

// TestCanAdmitCounts checks CanAdmit's block arithmetic against Admit: the cached prefix it
// reports is what Admit attaches, and Need/Avail count blocks as the cache will allocate them.
func TestCanAdmitCounts(t *testing.T) {
	ten := []int32{10, 11, 12, 13, 14, 15, 16, 17, 18, 19}
	tests := []struct {
		name      string
		numBlocks int
		setup     func(t *testing.T, c *Cache) // runs on seq 0 before the admission of seq 1
		prompt    []int32
		reserve   int
		want      Admission
	}{
		{name: "cold", numBlocks: 8, setup: func(*testing.T, *Cache) {}, prompt: ten, reserve: 3,
			// 13 cells: 4 blocks, none cached.
			want: Admission{Cached: 0, Need: 4, Avail: 8}},
		{name: "cached prefix", numBlocks: 8, setup: func(t *testing.T, c *Cache) { tenTokens(t, c, 0); c.SeqFree(0) },
			// Two cached blocks attached (taken out of the evictable pool) and one cell copied
			// from the kept partial third: 4 blocks for 13 cells, 2 shared, so 2 to allocate out
			// of 8-2.
			prompt: ten, reserve: 3, want: Admission{Cached: 9, Need: 2, Avail: 6}},
		{name: "live prefix", numBlocks: 8, setup: func(t *testing.T, c *Cache) { tenTokens(t, c, 0) },
			// Live blocks are shared, not taken from the pool: 3 used, 5 available; the first
			// cell of the live third block is copied.
			prompt: ten, reserve: 3, want: Admission{Cached: 9, Need: 2, Avail: 5}},
		{name: "does not fit", numBlocks: 3, setup: func(*testing.T, *Cache) {}, prompt: ten, reserve: 6,
			want: Admission{Cached: 0, Need: 4, Avail: 3}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newCache(t, Config{BlockSize: 4, NumBlocks: tc.numBlocks, MaxSeqs: 2})
			tc.setup(t, c)
			got := c.CanAdmit(Salt{}, tc.prompt, tc.reserve)
			if got != tc.want {
				t.Fatalf("CanAdmit = %+v, want %+v", got, tc.want)
			}
			if got.Fits() != (tc.want.Need <= tc.want.Avail) {
				t.Fatalf("Fits = %v for %+v", got.Fits(), got)
			}
			if !got.Fits() {
				return
			}
			before := c.Stats()
			n, err := c.Admit(1, Salt{}, tc.prompt, tc.reserve)
			if err != nil || n != got.Cached {
				t.Fatalf("Admit = %d, %v; CanAdmit said %d", n, err, got.Cached)
			}
			// Decoding the rest of the prompt and the reserve takes exactly Need more blocks.
			rest := make([]int32, len(tc.prompt)-n+tc.reserve)
			copy(rest, tc.prompt[n:])
			reserve(t, c, []int32{1}, int32(n), 0, rest...)
			// The pool (free and evictable blocks) loses the attached cached blocks and Need more.
			after := c.Stats()
			attached := before.Free + before.Cached - got.Avail
			if taken := before.Free + before.Cached - (after.Free + after.Cached); taken != got.Need+attached {
				t.Fatalf("admission and decode took %d blocks from the pool, CanAdmit said %d + %d attached", taken, got.Need, attached)
			}
			checkInvariants(t, c)
		})
	}
}

// TestCanAdmitWaitsForInFlightPrefix: a prompt sharing whole blocks with a sequence that is still
// computing them is told to wait, until those blocks are computed; sharing less than a block,
// or only what is cached already, is no reason to wait.
func TestCanAdmitWaitsForInFlightPrefix(t *testing.T) {
	leader := []int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}
	tests := []struct {
		name     string
		computed int // cells of the leader computed before the check
		prompt   []int32
		wait     bool
	}{
		{name: "same prompt, nothing computed", computed: 0, prompt: leader, wait: true},
		{name: "two blocks shared, one computed", computed: 5, prompt: []int32{1, 2, 3, 4, 5, 6, 7, 8, 50, 51}, wait: true},
		{name: "two blocks shared and computed", computed: 8, prompt: []int32{1, 2, 3, 4, 5, 6, 7, 8, 50, 51}, wait: false},
		{name: "shares the start of a block only", computed: 0, prompt: []int32{1, 2, 50, 51, 52}, wait: false},
		{name: "shares nothing", computed: 0, prompt: []int32{9, 9, 9, 9, 9, 9}, wait: false},
		// Parting inside the leader's third block, which the leader fills: wait for it.
		{name: "parts inside a block the leader fills", computed: 8, prompt: []int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 60, 61}, wait: true},
		{name: "leader is decoding", computed: len(leader) - 1, prompt: leader, wait: false},
		// The leader's prompt ends inside a block: once computed, its cells are copied from the
		// live block, so the follower waits for them too.
		{name: "parts after the leader's prompt ends mid-block", computed: 10, prompt: append(slices.Clone(leader), 70), wait: true},
		{name: "the same prompt, leader half way", computed: 6, prompt: leader, wait: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newCache(t, Config{BlockSize: 4, NumBlocks: 16, MaxSeqs: 2})
			if n, err := c.Admit(0, Salt{}, leader, 4); err != nil || n != 0 {
				t.Fatalf("Admit leader = %d, %v", n, err)
			}
			if tc.computed > 0 {
				reserve(t, c, []int32{0}, 0, 0, leader[:tc.computed]...)
			}
			if got := c.CanAdmit(Salt{}, tc.prompt, 1); got.Wait != tc.wait {
				t.Fatalf("CanAdmit = %+v, want Wait %v", got, tc.wait)
			}
		})
	}
}

func TestAdmitErrors(t *testing.T) {
	c := newCache(t, Config{BlockSize: 4, NumBlocks: 8, MaxSeqs: 2})
	tenTokens(t, c, 0)
	tests := []struct {
		name    string
		seq     int
		prompt  []int32
		wantErr string
	}{
		{name: "not empty", seq: 0, prompt: []int32{1, 2}, wantErr: "sequence 0 is not empty"},
		{name: "out of range", seq: 2, prompt: []int32{1, 2}, wantErr: "sequence id 2 outside"},
		{name: "empty prompt", seq: 1, prompt: nil, wantErr: "empty prompt"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := takeSnapshot(c)
			if _, err := c.Admit(tc.seq, Salt{}, tc.prompt, 1); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want %q", err, tc.wantErr)
			}
			if !before.equal(takeSnapshot(c)) {
				t.Fatal("a failed Admit changed the cache")
			}
		})
	}
}

// TestCanAdmitSetsAsideGrowth: a running sequence admitted for 16 cells (a 5-token prompt and
// 11 to generate) holds 2 blocks of 4 after its prompt and is expected to take 2 more, which a
// new admission may not count as available; as it grows, its claim shrinks.
func TestCanAdmitSetsAsideGrowth(t *testing.T) {
	c := newCache(t, Config{BlockSize: 4, NumBlocks: 8, MaxSeqs: 2})
	if _, err := c.Admit(0, Salt{}, []int32{1, 2, 3, 4, 5}, 11); err != nil {
		t.Fatal(err)
	}
	reserve(t, c, []int32{0}, 0, 0, 1, 2, 3, 4, 5)
	tests := []struct {
		name      string
		grow      int // more cells decoded into seq 0 first
		committed int
	}{
		{name: "after the prompt", grow: 0, committed: 2},
		{name: "one block later", grow: 4, committed: 1},
		{name: "reached its length", grow: 7, committed: 0},
		{name: "past its length", grow: 2, committed: 0},
	}
	pos := int32(5)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for range tc.grow {
				reserve(t, c, []int32{0}, pos, 0, 9)
				pos++
			}
			a := c.CanAdmit(Salt{}, []int32{7, 7, 7}, 1)
			free := 8 - len(c.Blocks(0))
			if a.Committed != tc.committed || a.Avail != free-tc.committed {
				t.Fatalf("CanAdmit = %+v, want %d committed of %d free", a, tc.committed, free)
			}
		})
	}
	c.SeqFree(0)
	if a := c.CanAdmit(Salt{}, []int32{7, 7, 7}, 1); a.Committed != 0 {
		t.Fatalf("a freed sequence still claims %d blocks", a.Committed)
	}
}
