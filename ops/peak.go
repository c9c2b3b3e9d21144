package ops

import (
	"runtime"
	"sync"
	"time"

	"ubatch/internal/cpu"
	"ubatch/internal/cputime"
)

// Peak throughput of this CPU's vector units: loops of independent multiply-adds with nothing
// else in them (peak_amd64.s), the roofline that a compute-bound kernel (a prompt's GEMM) is
// measured against. They measure the machine, not the kernels: their results are never read,
// and they have no Go twins.

// PeakKind is the arithmetic a peak loop measures.
type PeakKind uint8

const (
	PeakInt8 PeakKind = iota // int8 multiply-adds into int32 (the quantized kernels)
	PeakF32                  // f32 fused multiply-adds (the float kernels)
)

func (k PeakKind) String() string {
	if k == PeakInt8 {
		return "int8"
	}
	return "f32"
}

// PeakLoop is one measurement loop: the instruction, the arithmetic and the kernel path it
// belongs to.
type PeakLoop struct {
	Name       string
	Kind       PeakKind
	Path       cpu.Path
	opsPerIter float64 // a multiply-add counts as two ops
	run        func(n int)
}

// PeakLoops lists the loops this CPU can run (none off amd64), the fastest of each kind and
// path first.
func PeakLoops() []PeakLoop { return peakLoops() }

// PeakResult is a loop's throughput in ops per second (a multiply-add is two ops), the best of
// its rounds. PerCore and AllCores divide by the CPU time of the measuring threads (what a core
// does while it runs the loop, whatever else the machine is running); AllCoresWall divides by
// the wall time of the round instead (what the machine gave the threads).
type PeakResult struct {
	Loop                            PeakLoop
	Threads                         int
	PerCore, AllCores, AllCoresWall float64
}

// peakRound is how long a round of a peak loop runs: long enough to dwarf a timer read, short
// enough that a round often runs without being preempted on a busy machine.
const peakRound = 4 * time.Millisecond

// MeasurePeak runs l for rounds rounds on one thread, then rounds rounds on threads threads at
// once (each locked to its OS thread), and reports the best round of each.
func MeasurePeak(l PeakLoop, threads, rounds int) PeakResult {
	threads, rounds = max(1, threads), max(1, rounds)
	n := calibrate(l)
	res := PeakResult{Loop: l, Threads: threads}
	var wg sync.WaitGroup
	rates := make([]float64, threads)
	for range rounds {
		wg.Go(func() { res.PerCore = max(res.PerCore, timedRun(l, n)) })
		wg.Wait()
	}
	for range rounds {
		start := time.Now()
		for t := range threads {
			wg.Go(func() { rates[t] = timedRun(l, n) })
		}
		wg.Wait()
		wall := time.Since(start).Seconds()
		var sum float64
		for _, r := range rates {
			sum += r
		}
		res.AllCores = max(res.AllCores, sum)
		res.AllCoresWall = max(res.AllCoresWall, float64(threads)*float64(n)*l.opsPerIter/wall)
	}
	return res
}

// calibrate returns an iteration count that runs l for about peakRound.
func calibrate(l PeakLoop) int {
	n := 1000
	for {
		start := time.Now()
		l.run(n)
		d := time.Since(start)
		if d >= peakRound/4 || n >= 1<<30 {
			return max(1, int(float64(n)*float64(peakRound)/float64(max(d, time.Microsecond))))
		}
		n *= 4
	}
}

// timedRun runs n iterations of l on the calling goroutine locked to its thread and returns the
// ops per second of the thread's CPU time (wall time where the OS has no per-thread clock).
func timedRun(l PeakLoop, n int) float64 {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	t0 := threadTime()
	l.run(n)
	d := threadTime() - t0
	if d <= 0 {
		return 0
	}
	return float64(n) * l.opsPerIter / d.Seconds()
}

var clockStart = time.Now()

// threadTime is the calling thread's CPU time, or monotonic wall time where that is unknown.
func threadTime() time.Duration {
	if d, ok := cputime.Thread(); ok {
		return d
	}
	return time.Since(clockStart)
}

// ProcessCPU is the CPU time (user + system) of the whole process so far, 0 if unknown.
func ProcessCPU() time.Duration { return cputime.Process() }
