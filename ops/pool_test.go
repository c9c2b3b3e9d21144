package ops

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// countTask records how often each piece ran and on which workers.
type countTask struct {
	size  int
	runs  []atomic.Int32
	badW  atomic.Int32 // pieces run with a worker index outside [0, size)
	plain []int        // written by Do without atomics: Run must publish them to its caller
}

func newCountTask(size, n int) *countTask {
	return &countTask{size: size, runs: make([]atomic.Int32, n), plain: make([]int, n)}
}

func (t *countTask) Do(i, w int) {
	if w < 0 || w >= t.size {
		t.badW.Add(1)
	}
	t.runs[i].Add(1)
	t.plain[i] = i + 1
}

// check reports the first piece that did not run exactly runs times since the last check, or whose
// plain write of the last Run is not visible.
func (t *countTask) check(round int, runs int32) error {
	if b := t.badW.Load(); b != 0 {
		return fmt.Errorf("round %d: %d pieces ran with a worker index outside [0, %d)", round, b, t.size)
	}
	for i := range t.runs {
		if r := t.runs[i].Swap(0); r != runs {
			return fmt.Errorf("round %d: piece %d ran %d times, want %d", round, i, r, runs)
		}
		if t.plain[i] != i+1 {
			return fmt.Errorf("round %d: piece %d's plain write is not visible after Run", round, i)
		}
		t.plain[i] = 0
	}
	return nil
}

func TestPoolRunsEveryPieceOnce(t *testing.T) {
	for _, tc := range []struct {
		name    string
		size, n int
	}{
		{name: "one worker", size: 1, n: 100},
		{name: "one piece", size: 4, n: 1},
		{name: "fewer pieces than workers", size: 8, n: 3},
		{name: "as many pieces as workers", size: 4, n: 4},
		{name: "many pieces", size: 4, n: 1000},
		{name: "more workers than CPUs", size: 3 * runtime.NumCPU(), n: 97},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := NewPool(tc.size)
			defer p.Close()
			if p.Size() != tc.size {
				t.Fatalf("Size() = %d, want %d", p.Size(), tc.size)
			}
			task := newCountTask(tc.size, tc.n)
			for round := range 50 {
				p.Run(tc.n, task)
				if err := task.check(round, 1); err != nil {
					t.Fatal(err)
				}
			}
			p.Run(0, task) // nothing to do: returns at once
			if err := task.badW.Load(); err != 0 {
				t.Fatal("Run(0) ran pieces")
			}
		})
	}
}

// TestPoolWakesParkingWorkers runs many short Runs with pauses that let the workers give up
// spinning, so that Runs keep arriving while workers are parking: the hand-over that, when a
// worker's "I am parking" store and its following load of the generation are reordered (as qemu
// does to arm64's STLR/LDAR on amd64 hosts), left the worker asleep and Run waiting for it
// forever. Under qemu with Stores in the handshake, 3 of 4 runs of this test hung. Rounds that
// make no progress for a minute fail the test with every goroutine's stack.
func TestPoolWakesParkingWorkers(t *testing.T) {
	const rounds = 50000
	for _, tc := range []struct {
		name  string
		size  int
		spin  time.Duration
		pause func(round int) // between Runs
	}{
		// The workers park after 64 polls; pauses of 0-20µs let Runs arrive before, during and
		// after parking.
		{name: "park at once, 2 workers", size: 2, spin: 0, pause: busyPause(100*time.Nanosecond, 200)},
		{name: "park at once, 3 workers", size: 3, spin: 0, pause: busyPause(50*time.Nanosecond, 200)},
		{name: "park at once, 4 workers", size: 4, spin: 0, pause: busyPause(100*time.Nanosecond, 200)},
		{name: "pauses around the spin time", size: 3, spin: 20 * time.Microsecond, pause: busyPause(5*time.Microsecond, 7)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPool(tc.size, tc.spin)
			defer p.Close()
			task := newCountTask(tc.size, 2*tc.size)
			var done atomic.Int64
			errc := make(chan error, 1)
			go func() {
				// Nothing but Run and the pause per round (a check per round hid the lost
				// wake-up under qemu); progress is published every 1024 rounds.
				for round := range rounds {
					p.Run(len(task.runs), task)
					if round%1024 == 1023 {
						done.Store(int64(round + 1))
					}
					tc.pause(round)
				}
				errc <- task.check(rounds, rounds)
			}()
			last, stalled := int64(-1), 0 // rounds done at the last look, seconds since it changed
			for {
				select {
				case err := <-errc:
					if err != nil {
						t.Fatal(err)
					}
					return
				case <-time.After(time.Second):
				}
				if d := done.Load(); d != last {
					last, stalled = d, 0
					continue
				}
				if stalled++; stalled == 60 {
					buf := make([]byte, 1<<20)
					buf = buf[:runtime.Stack(buf, true)]
					t.Fatalf("after round %d of %d: no progress for a minute\n%s", last, rounds, buf)
				}
			}
		})
	}
}

// busyPause returns a pause of 0 to k-1 steps, varying from round to round, waited out busily:
// time.Sleep would take a millisecond.
func busyPause(step time.Duration, k int) func(round int) {
	return func(round int) {
		for d, t0 := time.Duration(round*7919%k)*step, time.Now(); time.Since(t0) < d; {
		}
	}
}

func TestPoolCloseStopsWorkers(t *testing.T) {
	for _, tc := range []struct {
		name string
		spin time.Duration
		runs int
	}{
		{name: "never used", spin: spinFor},
		{name: "workers spinning", spin: time.Hour, runs: 3},
		{name: "workers parked", spin: 0, runs: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := runtime.NumGoroutine()
			p := newPool(4, tc.spin)
			task := newCountTask(4, 16)
			for round := range tc.runs {
				p.Run(16, task)
				if err := task.check(round, 1); err != nil {
					t.Fatal(err)
				}
			}
			if tc.spin == 0 {
				time.Sleep(10 * time.Millisecond) // let the workers park
			}
			p.Close()
			p.Close() // idempotent
			// Close does not wait for the workers; they leave on their next poll or wake-up.
			for range 1000 {
				if runtime.NumGoroutine() <= before {
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
			t.Fatalf("%d goroutines after Close, %d before NewPool", runtime.NumGoroutine(), before)
		})
	}
}

func TestSplit(t *testing.T) {
	for _, tc := range []struct {
		name            string
		n, parts, align int
		wantLens        []int
	}{
		{name: "even", n: 12, parts: 3, align: 1, wantLens: []int{4, 4, 4}},
		{name: "aligned", n: 64, parts: 3, align: 8, wantLens: []int{16, 24, 24}},
		{name: "ragged tail", n: 21, parts: 2, align: 8, wantLens: []int{8, 13}},
		{name: "more parts than units", n: 8, parts: 4, align: 4, wantLens: []int{0, 4, 0, 4}},
		{name: "align below one", n: 5, parts: 5, align: 0, wantLens: []int{1, 1, 1, 1, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			next := 0
			for i := range tc.parts {
				lo, hi := Split(tc.n, tc.parts, tc.align, i)
				if lo != next || hi-lo != tc.wantLens[i] {
					t.Fatalf("piece %d = [%d, %d), want [%d, %d)", i, lo, hi, next, next+tc.wantLens[i])
				}
				next = hi
			}
			if next != tc.n {
				t.Fatalf("pieces end at %d, want %d", next, tc.n)
			}
		})
	}
}
