package quant

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"ubatch/internal/cpu"
)

// benchImpls are the two implementations of each kernel compared by the benchmarks.
var benchImpls = []struct {
	name string
	get  func(Type) DotFunc
}{
	{"asm", func(t Type) DotFunc { return types[t].kernels.dot[cpu.AVX2] }},
	{"go", DotGo},
}

// streamBytes is the size of the weight matrix the "stream" benchmarks cycle through: far more
// than the L2 cache, so the weights come from L3 or DRAM (on machines whose L3 is smaller).
const streamBytes = 64 << 20

var (
	streamOnce sync.Once
	streamBuf  []byte
)

// streamWeights returns streamBytes of random bytes whose every 2-byte word is a finite f16 or
// bf16 with a small exponent, so that any weight type can read them without producing Inf/NaN.
func streamWeights() []byte {
	streamOnce.Do(func() {
		r := rand.New(rand.NewPCG(1, 2))
		streamBuf = make([]byte, streamBytes)
		for i := 0; i+2 <= len(streamBuf); i += 2 {
			v := uint16(r.Uint32())&0x83ff | 0x3800 // |v| in [0.5, 1) for f16; small for bf16
			streamBuf[i], streamBuf[i+1] = byte(v), byte(v>>8)
		}
	})
	return streamBuf
}

// BenchmarkKernel measures each DotFunc, assembly and Go, on one weight row of k elements with
// nx columns. "hot" reuses one row (L1/L2 resident: compute throughput); "stream" walks the rows
// of a 64 MiB matrix (memory throughput). An iteration is callsPerIter calls; MB/s counts weight
// bytes, GFLOP/s counts 2·k·nx per call, and the best-* metrics are those of the fastest iteration.
func BenchmarkKernel(b *testing.B) {
	for _, typ := range asmTypes {
		for _, impl := range benchImpls {
			if impl.name == "asm-rows" {
				continue // the same kernel as asm
			}
			for _, k := range []int{2048, 5632} {
				for _, nx := range []int{1, MaxCols} {
					for _, mode := range []string{"hot", "stream"} {
						name := fmt.Sprintf("%v/%s/k=%d/nx=%d/%s", typ, impl.name, k, nx, mode)
						b.Run(name, func(b *testing.B) {
							dot := impl.get(typ)
							if dot == nil {
								b.Skip("no kernel")
							}
							benchKernel(b, typ, dot, k, nx, mode == "stream")
						})
					}
				}
			}
		}
	}
}

func benchKernel(b *testing.B, typ Type, dot DotFunc, k, nx int, stream bool) {
	r := rand.New(rand.NewPCG(5, 6))
	rowBytes, xRow := typ.RowSize(k), ActType(typ).RowSize(k)
	x := randActs(r, typ, k, nx, xRow)
	var w []byte
	if stream {
		w = streamWeights()
	} else {
		w = randWeights(b, r, typ, k)
	}
	nRows := len(w) / rowBytes
	var out [MaxCols]float32
	b.SetBytes(int64(callsPerIter * rowBytes))
	b.ReportAllocs()
	row := 0
	best := time.Duration(math.MaxInt64)
	for b.Loop() {
		t0 := time.Now()
		for range callsPerIter {
			dot(k, w[row*rowBytes:(row+1)*rowBytes], x, xRow, nx, out[:])
			if row++; row == nRows {
				row = 0
			}
		}
		best = min(best, time.Since(t0))
	}
	b.ReportMetric(float64(2*k*nx*callsPerIter)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	reportBest(b, best, float64(callsPerIter*rowBytes), float64(2*k*nx*callsPerIter))
}

// callsPerIter is how many kernel calls one benchmark iteration makes (one timed window).
const callsPerIter = 8

// reportBest reports the throughput of the fastest timed window: on a shared, busy machine the
// averages include time the benchmark was not running, while the best window of thousands is
// close to what an idle core does.
func reportBest(b *testing.B, best time.Duration, bytes, flops float64) {
	if best <= 0 || best == time.Duration(math.MaxInt64) {
		return
	}
	b.ReportMetric(bytes/best.Seconds()/1e9, "best-GB/s")
	b.ReportMetric(flops/best.Seconds()/1e9, "best-GFLOP/s")
}

// BenchmarkMatMulSquare multiplies a 2048x2048 Q4_0 or Q8_0 matrix with nTok tokens, on one
// goroutine and split into row halves over two (as the model's worker pool does). MB/s counts
// weight bytes once per call; GFLOP/s counts 2·rows·cols·nTok.
func BenchmarkMatMulSquare(b *testing.B) {
	const k, nRows = 2048, 2048
	for _, typ := range []Type{Q4_0, Q8_0} {
		for _, impl := range benchImpls {
			dot := impl.get(typ)
			for _, nTok := range []int{1, 4, 16, 64} {
				for _, threads := range []int{1, 2} {
					b.Run(fmt.Sprintf("%v/%s/tok=%d/threads=%d", typ, impl.name, nTok, threads), func(b *testing.B) {
						if dot == nil {
							b.Skip("no kernel")
						}
						f := newMatmulFixture(b, typ, k, nRows, nTok)
						out := make([]float32, nTok*nRows)
						b.SetBytes(int64(len(f.w)))
						b.ReportAllocs()
						var best time.Duration
						if threads == 1 {
							best = time.Duration(math.MaxInt64)
							for b.Loop() {
								t0 := time.Now()
								MatMul(dot, typ, k, f.w, f.xq, nTok, out, nRows, 0, nRows)
								best = min(best, time.Since(t0))
							}
						} else {
							best = benchMatMul2(b, dot, typ, k, f, nTok, out, nRows)
						}
						flops := 2 * float64(k*nRows*nTok)
						b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
						reportBest(b, best, float64(len(f.w)), flops)
					})
				}
			}
		}
	}
}

// benchMatMul2 runs each MatMul as two halves of the rows on two long-lived goroutines and
// returns the fastest iteration.
func benchMatMul2(b *testing.B, dot DotFunc, typ Type, k int, f *matmulFixture, nTok int, out []float32, nRows int) time.Duration {
	start := make(chan struct{})
	done := make(chan struct{})
	go func() {
		for range start {
			MatMul(dot, typ, k, f.w, f.xq, nTok, out, nRows, nRows/2, nRows)
			done <- struct{}{}
		}
	}()
	best := time.Duration(math.MaxInt64)
	for b.Loop() {
		t0 := time.Now()
		start <- struct{}{}
		MatMul(dot, typ, k, f.w, f.xq, nTok, out, nRows, 0, nRows/2)
		<-done
		best = min(best, time.Since(t0))
	}
	close(start)
	return best
}
