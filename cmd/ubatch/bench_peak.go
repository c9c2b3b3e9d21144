package main

import (
	"fmt"
	"io"
	"strings"

	"ubatch/internal/cpu"
	"ubatch/ops"
	"ubatch/runner"
)

// benchPeak prints the peak int8 and f32 throughput of this CPU (ops.PeakLoops: loops of
// independent multiply-adds), per core and on threads cores at once.
func benchPeak(stdout io.Writer, threads int) error {
	loops := ops.PeakLoops()
	if len(loops) == 0 {
		return fmt.Errorf("--peak: no peak loops for this architecture (amd64 only)")
	}
	fmt.Fprintf(stdout, "CPU: %s; a multiply-add counts as 2 ops; best of 5 rounds of %v each\n\n", cpuInfo(), "~4ms")
	fmt.Fprintf(stdout, "| %-38s | %14s | %24s | %19s |\n", "loop", "1 core GOP/s", fmt.Sprintf("%d cores GOP/s (CPU time)", threads), "wall-clock GOP/s")
	fmt.Fprintf(stdout, "| %s | %s: | %s: | %s: |\n", strings.Repeat("-", 38), strings.Repeat("-", 13), strings.Repeat("-", 23), strings.Repeat("-", 18))
	for _, l := range loops {
		r := ops.MeasurePeak(l, threads, 5)
		fmt.Fprintf(stdout, "| %-38s | %14.1f | %24.1f | %19.1f |\n", l.Name, r.PerCore/1e9, r.AllCores/1e9, r.AllCoresWall/1e9)
	}
	fmt.Fprintln(stdout, "\nCPU time: what the cores do while the loop runs; wall clock: what the machine gave it (lower when other work shares the cores).")
	return nil
}

// gemmCount is a pp test's matmul counts (runner.GEMMStats), kept for the summary.
type gemmCount struct {
	test  string
	stats []runner.GEMMStat
}

// gemmMinTokens: only the prompt's full micro-batches count as its GEMM, not a short tail.
const gemmMinTokens = 64

// peakFor is the loop a weight type's products are measured against on the selected path: its
// best int8 loop for the quantized types, its f32 loop for the float ones (f32, f16, bf16).
// ok is false where this CPU has no loop for the path (the Go twins are compared with the
// CPU's best).
func peakFor(loops []ops.PeakLoop, types string) (ops.PeakLoop, bool) {
	kind := ops.PeakInt8
	for _, t := range strings.Split(types, "+") {
		if t == "F32" || t == "F16" || t == "BF16" {
			kind = ops.PeakF32
		}
	}
	path := cpu.Selected()
	for pass := range 2 {
		for _, l := range loops {
			if l.Kind == kind && (pass == 1 || l.Path == path) {
				return l, true
			}
		}
	}
	return ops.PeakLoop{}, false
}

// printGEMMShares prints every pp test's GEMM rate by weight type (wall time, and by process
// CPU time where known) and the share of the peak of its loop on all threads (measured now, by
// CPU time: the cores' own rate) that the CPU-time rate is (the wall-time one without it).
func printGEMMShares(w io.Writer, counts []gemmCount, threads int) {
	loops := ops.PeakLoops()
	peaks := map[string]ops.PeakResult{}
	for _, c := range counts {
		for _, s := range c.stats {
			if s.Time <= 0 {
				continue
			}
			rate := s.Ops / s.Time.Seconds()
			fmt.Fprintf(w, "%s GEMM %s: %.1f GOP/s", c.test, s.Types, rate/1e9)
			if s.CPU > 0 {
				// The rate the threads reach per second of their own CPU time.
				rate = s.Ops / (s.CPU.Seconds() / float64(threads))
				fmt.Fprintf(w, ", %.1f GOP/s by process CPU time", rate/1e9)
			}
			fmt.Fprintf(w, " (%d runs of at least %d tokens)", s.Runs, gemmMinTokens)
			if l, ok := peakFor(loops, s.Types); ok {
				p, seen := peaks[l.Name]
				if !seen {
					p = ops.MeasurePeak(l, threads, 5)
					peaks[l.Name] = p
				}
				fmt.Fprintf(w, ", %.0f%% of the peak %.1f GOP/s (%s, %d threads)", 100*rate/p.AllCores, p.AllCores/1e9, l.Name, threads)
			}
			fmt.Fprintln(w)
		}
	}
}

// printCPURates prints each test's rate by process CPU time per thread (the median over its
// repetitions): the tokens per second the threads reach per second of their own CPU time,
// which on a loaded machine is closer to what the cores can do than the wall-clock rate. The
// pool's workers spin while they wait for each other, so waiting for a preempted one still
// costs CPU time.
func printCPURates(w io.Writer, rows []benchRow, threads int) {
	for _, r := range rows {
		var rates []float64
		for _, ns := range r.CPUNs {
			if ns > 0 {
				rates = append(rates, float64(r.NPrompt+r.NGen)/(float64(ns)/1e9/float64(threads)))
			}
		}
		if len(rates) > 0 {
			fmt.Fprintf(w, "%s: %.2f t/s by process CPU time per thread (median of %d; wall clock %.2f)\n", r.testName(), median(rates), len(rates), r.AvgTs)
		}
	}
}
