package prefixhash

import (
	"encoding/binary"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// spec is the definition in the package documentation, written out with one buffer: the
// streaming implementation must give the same value.
func spec(parent uint64, toks []int32) uint64 {
	b := binary.LittleEndian.AppendUint64(nil, parent)
	for _, t := range toks {
		b = binary.LittleEndian.AppendUint32(b, uint32(t))
	}
	return xxhash.Sum64(b)
}

func TestBlockMatchesDefinition(t *testing.T) {
	tests := []struct {
		name   string
		parent uint64
		toks   []int32
	}{
		{"empty", Root, nil},
		{"one token", Root, []int32{1}},
		{"block of 16", 0xdeadbeefcafef00d, seq(16, 3)},
		{"longer than the buffer", 7, seq(100, -5)},
		{"negative ids use their bit pattern", 1, []int32{-1, -2147483648}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got, want := Block(tc.parent, tc.toks), spec(tc.parent, tc.toks); got != want {
				t.Fatalf("Block = %#x, definition gives %#x", got, want)
			}
		})
	}
}

// TestKnownValue pins the hash (checked with xxhsum -H1 over the 72 bytes) so that a change of definition (which would split a fleet whose
// nodes and routers run different versions) cannot go unnoticed.
func TestKnownValue(t *testing.T) {
	got := Block(Root, []int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16})
	const want uint64 = 0x543ebdc79d062593
	if got != want {
		t.Fatalf("Block(Root, 1..16) = %#x, pinned %#x", got, want)
	}
}

func TestChain(t *testing.T) {
	toks := seq(50, 100)
	tests := []struct {
		name      string
		blockSize int
		want      int
	}{
		{"16", 16, 3},
		{"whole", 50, 1},
		{"too big", 51, 0},
		{"1", 1, 50},
		{"zero", 0, 0},
		{"negative", -4, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hs := Chain(nil, toks, tc.blockSize)
			if len(hs) != tc.want {
				t.Fatalf("%d hashes, want %d", len(hs), tc.want)
			}
			parent := Root
			for i, h := range hs {
				if w := spec(parent, toks[i*tc.blockSize:(i+1)*tc.blockSize]); h != w {
					t.Fatalf("hash %d = %#x, want %#x", i, h, w)
				}
				parent = h
			}
		})
	}
}

func TestChainPrefixProperty(t *testing.T) {
	a := append(seq(32, 0), seq(16, 1000)...)
	b := append(seq(32, 0), seq(16, 2000)...)
	ha, hb := Chain(nil, a, 16), Chain(nil, b, 16)
	if ha[0] != hb[0] || ha[1] != hb[1] {
		t.Fatal("shared leading blocks hash differently")
	}
	if ha[2] == hb[2] {
		t.Fatal("different third blocks hash alike")
	}
	// Same tokens at another depth: a different hash, since it names a different prefix.
	if Chain(nil, seq(16, 1000), 16)[0] == ha[2] {
		t.Fatal("a block's hash does not depend on its parent")
	}
}

func TestBlockAllocatesNothing(t *testing.T) {
	toks := seq(16, 9)
	if n := testing.AllocsPerRun(100, func() { Block(1, toks) }); n != 0 {
		t.Fatalf("%v allocations per Block", n)
	}
}

func BenchmarkBlock16(b *testing.B) {
	toks := seq(16, 9)
	b.ReportAllocs()
	for b.Loop() {
		Block(1, toks)
	}
}

func seq(n int, start int32) []int32 {
	s := make([]int32, n)
	for i := range s {
		s[i] = start + int32(i)
	}
	return s
}

// TestSalted: a salt's chain shares no hash with another salt's or the unsalted one over the
// same tokens; the empty salt is the unsalted chain; the root follows the definition.
func TestSalted(t *testing.T) {
	toks := seq(64, 7)
	if Salted("") != Root {
		t.Fatal("the empty salt is not Root")
	}
	if got, want := Salted("a"), xxhash.Sum64String(saltDomain+"a"); got != want {
		t.Fatalf("Salted(a) = %#x, definition gives %#x", got, want)
	}
	chains := map[string][]uint64{}
	for _, salt := range []string{"", "a", "b", "tenant-1", "tenant-10"} {
		chains[salt] = ChainFrom(nil, Salted(salt), toks, 16)
	}
	seen := map[uint64]string{}
	for salt, hs := range chains {
		if len(hs) != 4 {
			t.Fatalf("salt %q: %d hashes, want 4", salt, len(hs))
		}
		for _, h := range hs {
			if other, dup := seen[h]; dup {
				t.Fatalf("salts %q and %q share hash %#x", salt, other, h)
			}
			seen[h] = salt
		}
	}
	if got := Chain(nil, toks, 16); got[3] != chains[""][3] {
		t.Fatal("ChainFrom(Root) differs from Chain")
	}
}
