package ops

import (
	"math/rand/v2"
	"testing"
)

func TestSumWordsMatchesGo(t *testing.T) {
	if !sumWordsAsm {
		t.Skip("no sumWords assembly on this CPU: SumWords is its Go twin")
	}
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{32, 33, 64, 95, 1000, 4096 + 7} {
		x := make([]uint64, n)
		for i := range x {
			x[i] = r.Uint64() // sums wrap around
		}
		if got, want := SumWords(x), sumWordsGo(x); got != want {
			t.Fatalf("n=%d: SumWords %#x, Go twin %#x", n, got, want)
		}
	}
}

func FuzzSumWords(f *testing.F) {
	f.Add(uint64(1), 40)
	f.Fuzz(func(t *testing.T, seed uint64, n int) {
		if !sumWordsAsm {
			t.Skip("no sumWords assembly on this CPU")
		}
		n = min(max(n, 0), 1<<14)
		r := rand.New(rand.NewPCG(seed, 0))
		x := make([]uint64, n)
		for i := range x {
			x[i] = r.Uint64()
		}
		if got, want := SumWords(x), sumWordsGo(x); got != want {
			t.Fatalf("n=%d: SumWords %#x, Go twin %#x", n, got, want)
		}
	})
}

func TestReadBandwidthPositive(t *testing.T) {
	if bw := ReadBandwidth(make([]uint64, 1<<16), 2, 1); !(bw > 0) {
		t.Fatalf("ReadBandwidth %v, want > 0", bw)
	}
}
