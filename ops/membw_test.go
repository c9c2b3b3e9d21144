package ops

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestSumWordsMatchesGo(t *testing.T) {
	if !runsAsm(opSumWords) {
		t.Skip("no sumWords assembly on this kernel path: SumWords is its Go twin")
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
		if !runsAsm(opSumWords) {
			t.Skip("no sumWords assembly on this kernel path")
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

// BenchmarkReadBandwidth reads a fresh 512 MiB buffer per iteration with 1 and 2 threads
// (ReadBandwidth, best of 3 rounds) and reports the lowest, median and highest reading: on a
// shared VM the readings of one command, seconds apart, need not agree (docs/performance.md).
// Run it with a count, e.g. -benchtime 12x.
func BenchmarkReadBandwidth(b *testing.B) {
	for _, threads := range []int{1, 2} {
		b.Run(fmt.Sprintf("threads=%d", threads), func(b *testing.B) {
			var reads []float64
			for b.Loop() {
				reads = append(reads, ReadBandwidth(make([]uint64, 64<<20), threads, 3))
			}
			slices.Sort(reads)
			b.ReportMetric(reads[0]/1e9, "min-GB/s")
			b.ReportMetric(reads[len(reads)/2]/1e9, "median-GB/s")
			b.ReportMetric(reads[len(reads)-1]/1e9, "max-GB/s")
		})
	}
}
