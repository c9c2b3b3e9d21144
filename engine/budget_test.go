package engine

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	"ubatch/batch"
)

func TestCostModelRecoversCoefficients(t *testing.T) {
	tests := []struct {
		name  string
		theta [nFeat]float64
		want  [nFeat]float64
	}{
		{name: "all positive", theta: [nFeat]float64{0.004, 0.002, 0.001, 0.0005, 0.0002}, want: [nFeat]float64{0.004, 0.002, 0.001, 0.0005, 0.0002}},
		// A cost that falls with attended cells is not a cost: the fit keeps it at 0 and
		// explains the times with the others as best it can.
		{name: "negative clamped", theta: [nFeat]float64{0.004, 0.002, 0.001, -0.0001, 0.0002}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var m costModel
			for i := range 60 {
				d, p := 1+i%7, (i*37)%200
				if i%3 == 0 {
					p = 0
				}
				x := features(d, p, float64((i*911)%9000), chunkCells((i*53)%3000, p))
				y := 0.0
				for k := range nFeat {
					y += tc.theta[k] * x[k]
				}
				m.observe(x, y)
			}
			if !m.ready() {
				t.Fatal("not ready after 60 varied steps")
			}
			for k := range nFeat {
				if m.theta[k] < 0 {
					t.Fatalf("coefficient %d is %g < 0", k, m.theta[k])
				}
				if tc.want != ([nFeat]float64{}) && math.Abs(m.theta[k]-tc.want[k]) > 1e-6 {
					t.Fatalf("theta %v, want %v", m.theta, tc.want)
				}
			}
			if tc.want != ([nFeat]float64{}) && m.margin(0.05) > 1e-6 {
				t.Fatalf("exact data, yet a margin of %g s", m.margin(0.05))
			}
		})
	}
}

func TestChunkForInvertsPromptCost(t *testing.T) {
	m := costModel{theta: [nFeat]float64{0.002, 0.001, 0.0004, 0.003, 0.002}}
	for _, n := range []int{0, 100, 5000} {
		for _, avail := range []float64{0.001, 0.02, 0.2} {
			l := m.chunkFor(n, avail, 100000)
			if m.promptCost(n, l) > avail+1e-12 || m.promptCost(n, l+1) <= avail {
				t.Fatalf("n %d avail %g: chunk %d costs %g, one more %g", n, avail, l, m.promptCost(n, l), m.promptCost(n, l+1))
			}
		}
	}
}

// fakeClock is the time the engine times its steps with: Decode advances it by the fake
// model's cost of the batch, so step times are exact and the test takes no real time to
// measure them.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// timedDecoder is fakeDecoder on a fake clock with the step cost 3 ms + 1 ms per decode token +
// 0.25 ms per prompt token + 0.5 ms per 1024 attended cells.
type timedDecoder struct {
	*fakeDecoder
	clock *fakeClock
	cost  []time.Duration // per Decode
	// costOf, when set, is the step cost instead of stepCost.
	costOf func(*batch.Batch) time.Duration
}

// newTimed is a timedDecoder over newFake(t, blocks, blockSize, seqs) on a clock that starts at
// the Unix epoch.
func newTimed(t *testing.T, blocks, blockSize, seqs int) *timedDecoder {
	return &timedDecoder{fakeDecoder: newFake(t, blocks, blockSize, seqs), clock: &fakeClock{now: time.Unix(0, 0)}}
}

// startTimed is start over d, the engine timing its steps on d's clock.
func startTimed(t *testing.T, d *timedDecoder, lim Limits, cfg Config) *Engine {
	t.Helper()
	return startHooked(t, d, lim, cfg, nil, d.clock.Now)
}

func stepCost(b *batch.Batch) time.Duration {
	per := map[int32]int{}
	for i := range b.Len() {
		per[b.Seqs[i][0]]++
	}
	cost, cells := 3*time.Millisecond, 0
	for i := range b.Len() {
		if per[b.Seqs[i][0]] == 1 {
			cost += time.Millisecond
		} else {
			cost += 250 * time.Microsecond
		}
		cells += int(b.Pos[i]) + 1
	}
	return cost + time.Duration(cells)*500*time.Microsecond/1024
}

func (d *timedDecoder) Decode(b *batch.Batch) error {
	c := stepCost(b)
	if d.costOf != nil {
		c = d.costOf(b)
	}
	d.clock.advance(c)
	d.mu.Lock()
	d.cost = append(d.cost, c)
	d.mu.Unlock()
	return d.fakeDecoder.Decode(b)
}

type stepRecorder struct {
	mu    sync.Mutex
	steps []StepInfo
}

func (r *stepRecorder) Step(s StepInfo) {
	r.mu.Lock()
	r.steps = append(r.steps, s)
	r.mu.Unlock()
}
func (r *stepRecorder) Admitted(time.Duration, int, int) {}
func (r *stepRecorder) Token(bool, time.Duration)        {}
func (r *stepRecorder) Finished(FinishReason, Usage)     {}
func (r *stepRecorder) Lookup(int, int)                  {}
func (r *stepRecorder) Preempted()                       {}
func (r *stepRecorder) Rejected()                        {}
func (r *stepRecorder) Preemptions(int)                  {}
func (r *stepRecorder) snapshot() []StepInfo {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]StepInfo(nil), r.steps...)
}

var _ Observer = (*stepRecorder)(nil)

// recvEach reads n outputs from each of streams (decoding beside each other), failing t on an
// error.
func recvEach(t *testing.T, streams []*Stream, n int) {
	t.Helper()
	for _, s := range streams {
		for range n {
			if _, err := s.Recv(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestBudgetFollowsTarget: four sequences decode while a 1500-token prompt is computed, under
// the fake step cost above. Once the cost model has its first steps, every step that carries
// prompt tokens beside decode tokens costs at most the target, and nearly all of it: the prompt
// chunk follows the target, growing with it.
func TestBudgetFollowsTarget(t *testing.T) {
	tests := []struct {
		name   string
		target time.Duration
	}{
		{name: "20ms", target: 20 * time.Millisecond},
		{name: "50ms", target: 50 * time.Millisecond},
		{name: "120ms", target: 120 * time.Millisecond},
	}
	var chunks []float64
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := newTimed(t, 2048, 16, 8)
			// A little real time per step, and decoders that outlast the test however slowly it
			// runs beside them: the steps checked have all four decoding.
			d.delay = 20 * time.Microsecond
			rec := &stepRecorder{}
			e := startTimed(t, d, Limits{NCtx: 32768, NSeqMax: 8, NBatch: 1024, Vocab: vocab},
				Config{BatchSize: 1024, ChunkSize: 1024, TargetITL: tc.target, Observer: rec})
			ctx := context.Background()
			var decoders []*Stream
			for i := range 4 {
				s, err := e.Submit(ctx, Request{Prompt: prompt(3, int32(i)), MaxTokens: 6000, Sampling: greedy()})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := s.Recv(ctx); err != nil {
					t.Fatal(err)
				}
				decoders = append(decoders, s)
			}
			// Decode-only steps, so that the cost model has seen both kinds (the decoders'
			// prompts were the steps with prompt tokens) before the long prompt comes.
			recvEach(t, decoders, 2*minFitSteps)
			long, err := e.Submit(ctx, Request{Prompt: prompt(1500, 9), MaxTokens: 1, Sampling: greedy()})
			if err != nil {
				t.Fatal(err)
			}
			collect(t, long)
			steps, costs := endDecoders(decoders, rec, d)
			var mixed, prompt int
			for i, s := range steps {
				// Only steps whose prompt allowance was used up: the prompt's last chunk may be short.
				if s.Reason != BudgetTarget || s.DecodeTokens != 4 || s.PrefillTokens < s.Budget-s.DecodeTokens {
					continue
				}
				mixed++
				prompt += s.PrefillTokens
				if s.Capacity != s.Budget { // the latency-targeted budget, not the slots, was the limit
					t.Errorf("step %d: capacity %d, want the budget %d", i, s.Capacity, s.Budget)
				}
				c := costs[i] // one Decode per observed step
				if c > tc.target || c < tc.target*8/10 {
					t.Errorf("step %d (%d decode + %d prompt tokens, budget %d) costs %v, target %v",
						i, s.DecodeTokens, s.PrefillTokens, s.Budget, c, tc.target)
				}
			}
			if mixed < 3 {
				reasons := map[BudgetReason]int{}
				for _, s := range steps {
					if s.PrefillTokens > 0 {
						reasons[s.Reason]++
					}
				}
				t.Fatalf("only %d steps sized to the target (of %d); steps with prompt tokens by reason %v", mixed, len(steps), reasons)
			}
			chunks = append(chunks, float64(prompt)/float64(mixed))
		})
	}
	for i := 1; i < len(chunks); i++ {
		if chunks[i] <= chunks[i-1] {
			t.Fatalf("mean prompt chunk per step %v does not grow with the target", chunks)
		}
	}
}

// TestLearningStepsStaySmall: until the cost model is fitted, a step beside decoding sequences
// carries one chunk of prompt tokens in all, however many prompts wait for theirs.
func TestLearningStepsStaySmall(t *testing.T) {
	d := newTimed(t, 512, 16, 8)
	rec := &stepRecorder{}
	e := startTimed(t, d, Limits{NCtx: 8192, NSeqMax: 8, NBatch: 512, Vocab: vocab},
		Config{BatchSize: 256, ChunkSize: 16, TargetITL: 50 * time.Millisecond, Observer: rec})
	ctx := context.Background()
	dec, err := e.Submit(ctx, Request{Prompt: prompt(3, 1), MaxTokens: 5000, Sampling: greedy()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dec.Recv(ctx); err != nil {
		t.Fatal(err)
	}
	var longs []*Stream
	for i := range 4 {
		s, err := e.Submit(ctx, Request{Prompt: prompt(200, int32(2+i)), MaxTokens: 1, Sampling: greedy()})
		if err != nil {
			t.Fatal(err)
		}
		longs = append(longs, s)
	}
	for _, s := range longs {
		collect(t, s)
	}
	dec.Cancel(FinishCancelled)
	learning := 0
	for _, s := range rec.snapshot() {
		if s.Reason != BudgetLearning {
			continue
		}
		learning++
		if s.PrefillTokens > 16 || s.Budget != min(256, s.DecodeTokens+16) {
			t.Fatalf("learning step %+v: more than one 16-token chunk of prompt", s)
		}
	}
	if learning == 0 {
		t.Fatal("no learning step seen")
	}
}

// TestMarginCoversTheTail feeds the cost model steps whose times are its prediction plus an
// error drawn from a heavy-tailed distribution, and checks that the margin is at least the
// errors' 99th percentile, which mean plus two deviations is not for these.
func TestMarginCoversTheTail(t *testing.T) {
	tests := []struct {
		name   string
		err    func(i int) float64 // the error of step i, seconds
		p99    float64             // its 99th percentile over a window
		target float64
	}{
		{name: "rare long steps", err: func(i int) float64 {
			if i%40 == 0 { // 2.5% of the steps run 30 ms over
				return 0.030
			}
			return 0
		}, p99: 0.030, target: 0.080},
		{name: "no error", err: func(int) float64 { return 0 }, p99: 0, target: 0.080},
		{name: "capped", err: func(i int) float64 { return 0.2 }, p99: 0.75 * 0.080, target: 0.080},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			theta := [nFeat]float64{0.004, 0.002, 0.001, 0.0005}
			var m costModel
			for i := range 2000 {
				x := features(1+i%7, (i*37)%200, float64((i*911)%9000), 0)
				y := 0.0
				for k := range nFeat {
					y += theta[k] * x[k]
				}
				if m.ready() {
					y = m.predict(x) + tc.err(i) // the error against the model as it stands
				}
				m.observe(x, y)
			}
			got := m.margin(tc.target)
			if math.Abs(got-tc.p99) > 1e-9 {
				t.Fatalf("margin %g s, want the errors' p99 %g s (mean+2σ would be %g)", got, tc.p99, m.errMean+2*math.Sqrt(m.errVar))
			}
		})
	}
}

// endDecoders cancels the decoding streams and returns the steps rec observed and the cost d
// charged for each.
func endDecoders(decoders []*Stream, rec *stepRecorder, d *timedDecoder) ([]StepInfo, []time.Duration) {
	for _, s := range decoders {
		s.Cancel(FinishCancelled)
	}
	steps := rec.snapshot()
	d.mu.Lock()
	defer d.mu.Unlock()
	return steps, append([]time.Duration(nil), d.cost...)
}
