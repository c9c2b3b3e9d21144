package quant_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"ubatch/ops"
	"ubatch/quant"
)

// BenchmarkMatMulPackedShare is a decode step's matmul without the rest of the step: one token
// times a 256 MiB packed matrix (k=2048) split into row halves over the threads, each iteration
// between two read-bandwidth measurements with as many threads (ops.ReadBandwidth, as `ubatch
// bench --membw`). It reports the median over iterations of the matmul's read rate divided by
// the larger of its two neighbouring measurements (share), and the medians of both rates. On a
// shared machine the bandwidth moves between readings seconds apart (see docs/performance.md), so
// only the neighbouring ones are compared. Run it with a count of iterations, e.g.
// -benchtime 20x; it needs ~600 MiB.
func BenchmarkMatMulPackedShare(b *testing.B) {
	const k, matBytes = 2048, 256 << 20
	buf := make([]uint64, matBytes/8)
	for _, typ := range []quant.Type{quant.Q4_0, quant.Q8_0, quant.Q4_K, quant.Q6_K} {
		if !quant.CanPack(typ, k, quant.PanelRows) {
			b.Skipf("no packed %v kernel on this CPU", typ)
		}
		w, xq, nRows := streamMatrix(b, typ, k, matBytes)
		out := make([]float32, nRows)
		for _, threads := range []int{1, 2} {
			b.Run(fmt.Sprintf("%v/threads=%d", typ, threads), func(b *testing.B) {
				var rates, reads, shares []float64
				before := ops.ReadBandwidth(buf, threads, 3)
				for b.Loop() {
					t0 := time.Now()
					var wg sync.WaitGroup
					for t := range threads {
						r0, r1 := ops.Split(nRows, threads, quant.PanelRows, t)
						wg.Go(func() { quant.MatMulPacked(typ, k, w, xq, 1, out, nRows, r0, r1) })
					}
					wg.Wait()
					rate := float64(len(w)) / time.Since(t0).Seconds()
					b.StopTimer()
					after := ops.ReadBandwidth(buf, threads, 3)
					b.StartTimer()
					ref := max(before, after)
					rates, reads, shares = append(rates, rate), append(reads, ref), append(shares, rate/ref)
					before = after
				}
				b.ReportMetric(median(rates)/1e9, "GB/s")
				b.ReportMetric(median(reads)/1e9, "read-GB/s")
				b.ReportMetric(median(shares), "share")
			})
		}
	}
}

// streamMatrix returns a packed matrix of about matBytes of typ with rows of k elements (64
// distinct rows repeated), an activation row for it and its row count.
func streamMatrix(b *testing.B, typ quant.Type, k, matBytes int) (w, xq []byte, nRows int) {
	rowBytes := typ.RowSize(k)
	nRows = matBytes / rowBytes / 64 * 64
	src := make([]byte, nRows*rowBytes)
	r := rand.New(rand.NewPCG(1, uint64(typ)))
	f := make([]float32, k)
	for i := range 64 {
		for j := range f {
			f[j] = float32(r.NormFloat64())
		}
		if err := quant.Quantize(typ, f, src[i*rowBytes:(i+1)*rowBytes]); err != nil {
			b.Fatal(err)
		}
	}
	for i := 64; i < nRows; i++ {
		copy(src[i*rowBytes:(i+1)*rowBytes], src[(i%64)*rowBytes:])
	}
	w = make([]byte, len(src))
	if err := quant.PackRows(typ, k, w, src); err != nil {
		b.Fatal(err)
	}
	xq = make([]byte, quant.ActType(typ).RowSize(k))
	quant.QuantizeAct(typ, f, xq)
	return w, xq, nRows
}

func median(x []float64) float64 {
	s := slices.Clone(x)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}
