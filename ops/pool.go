// Package ops holds the float kernels of the forward pass (normalisation, rotary embedding,
// softmax, activation functions, vector arithmetic) and the worker pool that runs them in parallel.
package ops

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Task is work split into n independent pieces. Do runs piece i on worker w (0 <= w < Pool.Size()),
// so a task may keep per-worker scratch buffers indexed by w. Implementations are usually
// long-lived structs whose fields are set before Run: passing them as an interface allocates
// nothing, unlike a fresh closure per call.
type Task interface {
	Do(i, w int)
}

// spinFor is how long an idle worker polls for new work before it parks. A forward pass issues
// hundreds of Runs per token with only microseconds of serial work between them; waking a parked
// goroutine costs tens of microseconds, so workers stay hot between Runs of one pass and park
// once the engine goes idle.
const spinFor = 200 * time.Microsecond

// Pool is a fixed set of worker goroutines that execute Tasks. The caller of Run works too, so a
// pool of size n starts n-1 goroutines. Run calls must not overlap (one forward pass at a time).
//
// Parking is a two-flag handshake: a worker sets sleeping[w] and then reads gen (and closed); Run
// bumps gen and then claims sleeping[w] (Close: closed, then sleeping[w]). Sequentially
// consistent atomics guarantee that at least one side sees the other's write, so no wake-up is
// lost. Plain Stores would do under the Go memory model and on arm64 hardware, yet every write
// of the handshake is a read-modify-write (gen.Add, Swap): qemu-user on an amd64 host emits an
// arm64 store-release (STLR) and a following load-acquire (LDAR) of another word with no fence
// between them, the host's store buffer reorders the two, and a worker parked on a Run that
// never woke it (Run then waited forever; the arm64 tests hung). A read-modify-write becomes a
// locked host instruction, which keeps the order. The path is taken once per park.
type Pool struct {
	size     int
	spin     time.Duration // spinFor; tests shorten it so that workers park between Runs
	gen      atomic.Uint64 // bumped by every Run; workers watch it
	pending  atomic.Int64  // helpers that have not finished the current Run
	next     atomic.Int64
	n        int64
	task     Task
	sleeping []atomic.Bool
	wake     []chan struct{}
	closed   atomic.Bool
	close    sync.Once
}

// NewPool starts a pool with n workers; n <= 0 means runtime.NumCPU().
func NewPool(n int) *Pool {
	if n <= 0 {
		n = runtime.NumCPU()
	}
	return newPool(n, spinFor)
}

// newPool starts a pool of n >= 1 workers that poll for spin before they park.
func newPool(n int, spin time.Duration) *Pool {
	p := &Pool{size: n, spin: spin, wake: make([]chan struct{}, n), sleeping: make([]atomic.Bool, n)}
	for w := 1; w < n; w++ {
		p.wake[w] = make(chan struct{}, 1)
		go p.worker(w)
	}
	return p
}

// Size is the number of workers, the caller included.
func (p *Pool) Size() int { return p.size }

// Run executes t.Do(i, w) for every i in [0, n) and returns when all are done. Pieces are handed
// out dynamically, so uneven pieces still keep every core busy.
func (p *Pool) Run(n int, t Task) {
	if n <= 0 {
		return
	}
	if n == 1 || p.size == 1 {
		for i := 0; i < n; i++ {
			t.Do(i, 0)
		}
		return
	}
	p.task, p.n = t, int64(n)
	p.next.Store(0)
	p.pending.Store(int64(p.size - 1))
	p.gen.Add(1)
	for w := 1; w < p.size; w++ {
		if p.sleeping[w].CompareAndSwap(true, false) {
			p.wake[w] <- struct{}{}
		}
	}
	p.drain(0)
	for spins := 1; p.pending.Load() != 0; spins++ {
		if spins%64 == 0 {
			runtime.Gosched()
		}
	}
	p.task = nil
}

func (p *Pool) drain(w int) {
	for {
		i := p.next.Add(1) - 1
		if i >= p.n {
			return
		}
		p.task.Do(int(i), w)
	}
}

func (p *Pool) worker(w int) {
	var seen uint64 // the generation at construction: a Run may start before this goroutine does
	for {
		start := time.Now()
		for spins := 0; p.gen.Load() == seen; spins++ {
			if spins&63 == 63 && time.Since(start) > p.spin {
				p.sleeping[w].Swap(true) // not Store: see Pool
				if p.gen.Load() != seen || p.closed.Load() {
					// Work (or Close) arrived while parking: un-park, unless Run already
					// claimed us, in which case its wake-up token must be consumed.
					if !p.sleeping[w].CompareAndSwap(true, false) {
						<-p.wake[w]
					}
				} else {
					<-p.wake[w]
				}
				start = time.Now()
			}
			if p.closed.Load() {
				return
			}
			// Yield now and then only: a Gosched per poll costs a trip through the scheduler's
			// locks, while other goroutines (HTTP handlers) still get the CPU regularly.
			if spins&15 == 15 {
				runtime.Gosched()
			}
		}
		if p.closed.Load() {
			return
		}
		seen = p.gen.Load()
		p.drain(w)
		p.pending.Add(-1)
	}
}

// Close stops the worker goroutines. The pool must not be used afterwards.
func (p *Pool) Close() {
	p.close.Do(func() {
		p.closed.Swap(true) // not Store: see Pool
		for w := 1; w < p.size; w++ {
			if p.sleeping[w].CompareAndSwap(true, false) {
				p.wake[w] <- struct{}{}
			}
		}
	})
}

// Split divides [0, n) into parts pieces of nearly equal size, each a multiple of align where
// possible, and returns piece i as [lo, hi).
func Split(n, parts, align, i int) (lo, hi int) {
	if align < 1 {
		align = 1
	}
	units := (n + align - 1) / align
	lo = units * i / parts * align
	hi = units * (i + 1) / parts * align
	return min(lo, n), min(hi, n)
}
