package kvdisk

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"ubatch/engine"
	"ubatch/kvcache"
	"ubatch/kvfile"
	"ubatch/quant"
)

func layout() kvfile.Layout {
	return kvfile.Layout{Model: kvfile.ModelID{7}, DType: quant.F16, BlockSize: 4,
		Layers: []kvfile.Layer{{KVHeads: 1, HeadDim: 8}, {KVHeads: 1, HeadDim: 8}}}
}

// chain makes the blocks of tokens (full blocks, then a partial one) with random data.
func chain(l kvfile.Layout, tokens []int32, rng *rand.Rand) []kvfile.Block {
	return saltedChain(l, kvcache.Salt{}, tokens, rng)
}

// saltedChain is chain for a sequence salted salt.
func saltedChain(l kvfile.Layout, salt kvcache.Salt, tokens []int32, rng *rand.Rand) []kvfile.Block {
	var out []kvfile.Block
	parent := salt.Key
	for d := 0; d*l.BlockSize < len(tokens); d++ {
		toks := tokens[d*l.BlockSize : min((d+1)*l.BlockSize, len(tokens))]
		b := kvfile.Block{Parent: parent, Depth: int32(d), Tokens: slices.Clone(toks), Pos: make([]int32, len(toks)),
			Data: make([]byte, int64(len(toks))*l.CellBytes())}
		for i := range b.Pos {
			b.Pos[i] = int32(d*l.BlockSize + i)
		}
		for i := range b.Data {
			b.Data[i] = byte(rng.Uint32())
		}
		b.Key = kvcache.ChainKey(parent, b.Tokens)
		parent = b.Key
		out = append(out, b)
	}
	return out
}

func lookup(l kvfile.Layout, prompt []int32, from int) *engine.Lookup {
	return &engine.Lookup{Tokens: prompt, Keys: kvcache.ChainKeys(nil, prompt, l.BlockSize), From: from, BlockSize: l.BlockSize}
}

func open(t *testing.T, dir string, l kvfile.Layout, max int64) *Tier {
	t.Helper()
	tier, err := Open(dir, l, max, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tier.Close)
	return tier
}

func put(tier *Tier, blocks []kvfile.Block) {
	for _, b := range blocks {
		if tier.Want(b.Key) {
			tier.Put(b, false)
		}
	}
	tier.Flush()
}

// written is a tier of 1 MiB in dir that blocks were put in and that was closed: its files
// are on disk for the next open.
func written(t *testing.T, dir string, l kvfile.Layout, blocks []kvfile.Block) *Tier {
	t.Helper()
	tier := open(t, dir, l, 1<<20)
	put(tier, blocks)
	tier.Close()
	return tier
}

// randTokens is n random tokens in [lo, hi).
func randTokens(rng *rand.Rand, n, lo, hi int) []int32 {
	p := make([]int32, n)
	for i := range p {
		p[i] = int32(lo + rng.IntN(hi-lo))
	}
	return p
}

// TestRestart writes a prefix's blocks, reopens the directory and reads them back: the same
// blocks, found by Probe from any block on, the partial tail by its tokens.
func TestRestart(t *testing.T) {
	l := layout()
	rng := rand.New(rand.NewPCG(1, 1))
	prompt := randTokens(rng, 18, 0, 1000) // 4 full blocks, a partial one of 2
	blocks := chain(l, prompt, rng)
	dir := t.TempDir()
	written(t, dir, l, blocks)

	tier := open(t, dir, l, 1<<20)
	if st := tier.Stats(); st.Blocks != len(blocks) {
		t.Fatalf("after a restart the tier holds %d blocks, want %d", st.Blocks, len(blocks))
	}
	tests := []struct {
		name         string
		prompt       []int32
		from         int
		blocks, cell int
	}{
		{name: "whole prompt", prompt: prompt, from: 0, blocks: 5, cell: 18},
		{name: "from block 2", prompt: prompt, from: 2, blocks: 3, cell: 10},
		{name: "longer prompt: the partial tail is a prefix of its rest", prompt: append(slices.Clone(prompt), 5, 6), from: 0, blocks: 5, cell: 18},
		{name: "diverging in block 3", prompt: append(slices.Clone(prompt[:13]), 999999, 1, 2, 3), from: 0, blocks: 3, cell: 12},
		{name: "another first token", prompt: append([]int32{-5}, prompt[1:]...), from: 0, blocks: 0, cell: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := lookup(l, tc.prompt, tc.from)
			h := tier.Probe(q)
			if h.Blocks != tc.blocks || h.Cells != tc.cell {
				t.Fatalf("Probe = %+v, want %d blocks of %d cells", h, tc.blocks, tc.cell)
			}
			got, err := tier.Fetch(context.Background(), q, h)
			if err != nil || len(got) != tc.blocks {
				t.Fatalf("Fetch = %d blocks, %v", len(got), err)
			}
			for i, b := range got {
				w := blocks[tc.from+i]
				if b.Key != w.Key || !slices.Equal(b.Tokens, w.Tokens) || !slices.Equal(b.Data, w.Data) {
					t.Fatalf("block %d differs from the one written", tc.from+i)
				}
			}
		})
	}
}

// TestSaltedBlocks: blocks written under a salt (a full chain with a partial tail, and a lone
// partial first block) are found, after a restart, by lookups of that salt only.
func TestSaltedBlocks(t *testing.T) {
	l := layout()
	rng := rand.New(rand.NewPCG(3, 3))
	a := kvcache.NewSalt("tenant-a")
	prompt, short := randTokens(rng, 18, 0, 1000), randTokens(rng, 3, 0, 1000)
	dir := t.TempDir()
	written(t, dir, l, append(saltedChain(l, a, prompt, rng), saltedChain(l, a, short, rng)...))
	tier := open(t, dir, l, 1<<20)
	tests := []struct {
		name   string
		salt   kvcache.Salt
		prompt []int32
		blocks int
	}{
		{name: "same salt", salt: a, prompt: prompt, blocks: 5},
		{name: "same salt, partial first block", salt: a, prompt: short, blocks: 1},
		{name: "another salt", salt: kvcache.NewSalt("tenant-b"), prompt: prompt},
		{name: "another salt, partial first block", salt: kvcache.NewSalt("tenant-b"), prompt: short},
		{name: "no salt", prompt: prompt},
		{name: "no salt, partial first block", prompt: short},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := &engine.Lookup{Tokens: tc.prompt, Keys: kvcache.ChainKeysFrom(nil, tc.salt.Key, tc.prompt, l.BlockSize),
				BlockSize: l.BlockSize, Salt: tc.salt}
			h := tier.Probe(q)
			got, err := tier.Fetch(context.Background(), q, h)
			if h.Blocks != tc.blocks || err != nil || len(got) != tc.blocks {
				t.Fatalf("Probe = %+v, Fetch = %d blocks, %v; want %d", h, len(got), err, tc.blocks)
			}
		})
	}
}

// TestFIFOInTheDirectory: a FIFO named like a block file does not hang the start (the scan
// opens regular files only); it is ignored and left alone.
func TestFIFOInTheDirectory(t *testing.T) {
	l := layout()
	dir := t.TempDir()
	fifo := filepath.Join(dir, strings.Repeat("ab", 32)+ext)
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("no FIFOs here: %v", err)
	}
	done := make(chan *Tier, 1)
	go func() {
		tier, err := Open(dir, l, 1<<20, nil)
		if err != nil {
			t.Error(err)
		}
		done <- tier
	}()
	select {
	case tier := <-done:
		if tier == nil {
			return
		}
		defer tier.Close()
		if st := tier.Stats(); st.Blocks != 0 || st.Rejected != 1 {
			t.Fatalf("stats %+v, want no block and one file rejected", st)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Open still scanning after 5s: it opened the FIFO")
	}
	if _, err := os.Lstat(fifo); err != nil {
		t.Fatalf("the FIFO was removed: %v", err)
	}
}

// TestCrashAndCorruption cuts block files at random offsets (a write killed midway), flips a
// byte in one, writes a file of another model and leaves a temporary file: reopening removes
// the torn files and the temporary one and ignores the foreign one (never read, not removed),
// and the flipped one is rejected (and removed) when read, never returned.
func TestCrashAndCorruption(t *testing.T) {
	l := layout()
	rng := rand.New(rand.NewPCG(2, 2))
	prompt := randTokens(rng, 40, 0, 1000)
	blocks := chain(l, prompt, rng)
	dir := t.TempDir()
	tier := written(t, dir, l, blocks)
	path := func(b kvfile.Block) string { return tier.path(b.Key) }
	for _, b := range blocks[5:8] { // torn
		fi, err := os.Stat(path(b))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(path(b), rng.Int64N(fi.Size())); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(path(blocks[3])) // flipped inside its K/V data
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)-10] ^= 0x40
	if err := os.WriteFile(path(blocks[3]), data, 0o644); err != nil {
		t.Fatal(err)
	}
	foreign := l
	foreign.Model = kvfile.ModelID{8}
	fb := chain(foreign, []int32{1, 2, 3, 4}, rng)
	if _, err := kvfile.WriteFile(filepath.Join(dir, "x"+ext), foreign, fb); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ".y.kvb.123.tmp"), []byte("half a write"), 0o644); err != nil {
		t.Fatal(err)
	}

	tier = open(t, dir, l, 1<<20)
	st := tier.Stats()
	if st.Blocks != len(blocks)-3 || st.Rejected != 4 {
		t.Fatalf("reopened: %d blocks, %d rejected; want %d and 4 (3 torn, 1 foreign)", st.Blocks, st.Rejected, len(blocks)-3)
	}
	des, _ := os.ReadDir(dir)
	if len(des) != len(blocks)-3+1 {
		t.Fatalf("%d files left, want %d (the intact ones and the foreign one)", len(des), len(blocks)-3+1)
	}
	q := lookup(l, prompt, 0)
	h := tier.Probe(q)
	if h.Blocks != 5 { // blocks 0..4 in a row; 5 is gone
		t.Fatalf("Probe = %+v, want 5 blocks", h)
	}
	got, _ := tier.Fetch(context.Background(), q, h)
	if len(got) != 3 {
		t.Fatalf("Fetch returned %d blocks, want the 3 before the flipped one", len(got))
	}
	if _, err := os.Stat(path(blocks[3])); !os.IsNotExist(err) {
		t.Fatalf("the flipped file is still there: %v", err)
	}
	if st := tier.Stats(); st.Rejected != 5 {
		t.Fatalf("%d rejected, want 5", st.Rejected)
	}
}

// TestSizeBound keeps the files under the bound, and blocks read back often (a shared system
// prompt) outlive one-off prefixes written after them.
func TestSizeBound(t *testing.T) {
	l := layout()
	rng := rand.New(rand.NewPCG(3, 3))
	hot := randTokens(rng, 8, 0, 1000)
	hotBlocks := chain(l, hot, rng)
	one := kvfile.Size(l, hotBlocks[:1])
	tier := open(t, t.TempDir(), l, 6*one)
	put(tier, hotBlocks)
	for range 4 {
		q := lookup(l, hot, 0)
		if got, _ := tier.Fetch(context.Background(), q, tier.Probe(q)); len(got) != 2 {
			t.Fatalf("read %d hot blocks, want 2", len(got))
		}
	}
	for range 5 {
		put(tier, chain(l, randTokens(rng, 12, 0, 1000), rng))
	}
	st := tier.Stats()
	if st.Bytes > 6*one || st.Blocks != 6 || st.Evicted != 2+15-6 {
		t.Fatalf("%+v: want 6 blocks within %d bytes, %d evicted", st, 6*one, 2+15-6)
	}
	if h := tier.Probe(lookup(l, hot, 0)); h.Blocks != 2 {
		t.Fatalf("the hot prefix lost blocks to one-off ones (Probe %+v)", h)
	}
}

func TestWantAndDrop(t *testing.T) {
	l := layout()
	tier := open(t, t.TempDir(), l, 1<<30)
	rng := rand.New(rand.NewPCG(4, 4))
	blocks := chain(l, randTokens(rng, 4*(QueueLen+50), 0, 1000), rng)
	// Faster than the writer: Put never waits for it, so once the queue is full blocks drop.
	for _, b := range blocks {
		tier.Put(b, false)
	}
	tier.Flush()
	st := tier.Stats()
	if st.Dropped == 0 || st.Writes+st.Dropped != int64(len(blocks)) {
		t.Fatalf("%+v: want some dropped and the rest written", st)
	}
	if tier.Want(blocks[0].Key) {
		t.Fatal("Want a block the tier holds")
	}
}
