package engine

import (
	"math"
	"slices"
	"time"
)

// BudgetReason says what set a step's token budget (StepInfo.Budget).
type BudgetReason string

const (
	BudgetNoDecode  BudgetReason = "no_decode"  // nobody decoding: prompts take the whole --batch-size
	BudgetFixed     BudgetReason = "fixed"      // no latency target: --batch-size and --chunk-size only
	BudgetLearning  BudgetReason = "learning"   // target set, cost model not fitted yet: one --chunk-size of prompt in all
	BudgetTarget    BudgetReason = "target"     // prompt chunks sized so the step meets the inter-token target
	BudgetQueue     BudgetReason = "queue"      // as target, relaxed because requests wait for admission
	BudgetFloor     BudgetReason = "floor"      // decode alone reaches the target: a minimal prompt chunk keeps prompts moving
	BudgetBatchSize BudgetReason = "batch_size" // the target allows more than --batch-size
)

// Cost model features: a step's time is modelled as θ·x with x = [1, decode tokens, prompt
// tokens, cells the decode tokens attend / cellScale, cells the prompt tokens attend /
// cellScale]. Decode tokens and prompt tokens are separate because only decode tokens (and a
// prompt's last) pay for the output matrix; attended cells are the sum over the tokens of the
// cells each one reads, the attention's share, and a prompt chunk's grow with its depth (a
// chunk of l tokens over n cells attends l·n + l(l+1)/2). Decode and prompt attention are
// priced apart: one query row per sequence reading its cells is not the tiled prompt kernel's
// cost per cell, and one coefficient for both (fitted mostly on decode steps) priced a chunk
// deep in a 2,000-token input at a fraction of its time.
const (
	nFeat     = 5
	cellScale = 1024.0
	// forget weights the steps seen: each step's weight decays by this factor per later step,
	// so the fit follows a machine whose speed changes (an effective window of ~100 steps).
	forget = 0.99
	// minFitSteps steps with prompt tokens, of at least two sizes, and twice as many in all
	// before the fit is trusted: the prompt-token cost is what plans chunks, so it must have
	// been seen to vary.
	minFitSteps = 4
	// minChunk is the fewest prompt tokens a step carries while prompts wait, even when the
	// decode tokens alone reach the target: prompts are never starved.
	minChunk = 8
	// errWindow steps that carried a decode token make the error distribution the margin is a
	// quantile of (errQuantile): the steps a stream waits on; a few hundred so that the
	// quantile's sample (the 3rd largest error) moves with the machine within seconds. Above
	// the p99 a stream's target is about: a client sees the step plus its delivery (measured
	// beside embeddings, quiet: steps p99 77 ms, the client's gaps 79 ms with the p99 error).
	errWindow   = 512
	errQuantile = 0.995
	// errMinSteps of them before the quantile (at first their largest) replaces the
	// mean-and-deviation margin, which starts at 0 when the model becomes ready: the steps
	// planned before it are the ones that overrun (beside embeddings after a stream alone, the
	// first 64 steps planned ran up to 92 ms against an 80 ms target).
	errMinSteps = 8
)

// costModel fits step times online by exponentially weighted least squares with non-negative
// coefficients, and tracks its prediction error.
type costModel struct {
	xx                [nFeat][nFeat]float64 // Σ w x xᵀ
	xy                [nFeat]float64        // Σ w x y
	theta             [nFeat]float64        // seconds per unit of each feature
	steps, withPrompt int                   // steps seen, and those with prompt tokens
	minP, maxP        float64               // fewest and most prompt tokens of those
	errMean, errVar   float64               // exponentially weighted prediction error (seconds)
	tail              errTail               // recent errors of steps a stream waited on
}

// errTail is a ring of the last errWindow prediction errors (measured minus modelled seconds)
// of steps that carried a decode token, and their errQuantile quantile: a step time's tail is
// not a normal distribution's (a step preempted by a handler goroutine or another process runs
// 2-3x its mean), so mean plus two deviations left a stream's p99 over the target.
type errTail struct {
	ring    [errWindow]float64
	n, next int                // errors held, and the slot the next one goes to
	sorted  [errWindow]float64 // scratch of the quantile's sort (the engine's steps allocate nothing)
	q       float64            // errQuantile quantile of ring[:n]
}

// add records one error and refreshes the quantile (a sort of at most errWindow numbers, ~10 µs
// against steps of milliseconds).
func (t *errTail) add(e float64) {
	t.ring[t.next] = e
	t.next = (t.next + 1) % errWindow
	t.n = min(t.n+1, errWindow)
	s := t.sorted[:t.n]
	copy(s, t.ring[:t.n])
	slices.Sort(s)
	t.q = s[min(t.n-1, int(errQuantile*float64(t.n)))]
}

// features is the cost model's x of a step of decode decode tokens attending cells cells and
// prompt prompt tokens attending promptCells cells.
func features(decode, prompt int, cells, promptCells float64) [nFeat]float64 {
	return [nFeat]float64{1, float64(decode), float64(prompt), cells / cellScale, promptCells / cellScale}
}

// chunkCells is the cells a prompt chunk of l tokens extending a sequence of n cells attends:
// n+1, ..., n+l.
func chunkCells(n, l int) float64 { return float64(l)*float64(n) + float64(l)*float64(l+1)/2 }

func (m *costModel) ready() bool {
	return m.withPrompt >= minFitSteps && m.steps >= 2*minFitSteps && m.maxP > m.minP
}

func (m *costModel) predict(x [nFeat]float64) float64 {
	t := 0.0
	for i, v := range x {
		t += m.theta[i] * v
	}
	return t
}

// observe adds one measured step and refits.
func (m *costModel) observe(x [nFeat]float64, sec float64) {
	if m.ready() {
		const a = 0.05
		e := sec - m.predict(x)
		if x[1] > 0 {
			m.tail.add(e)
		}
		d := e - m.errMean
		m.errMean += a * d
		m.errVar = (1 - a) * (m.errVar + a*d*d)
	}
	m.steps++
	if p := x[2]; p > 0 {
		if m.withPrompt == 0 {
			m.minP, m.maxP = p, p
		}
		m.minP, m.maxP = min(m.minP, p), max(m.maxP, p)
		m.withPrompt++
	}
	for i := range nFeat {
		m.xy[i] = forget*m.xy[i] + x[i]*sec
		for j := range nFeat {
			m.xx[i][j] = forget*m.xx[i][j] + x[i]*x[j]
		}
	}
	m.fit()
}

// fit solves the normal equations over the features still free, dropping (fixing at 0) the
// most negative coefficient until none is: a per-token cost below zero means too little data
// to tell it apart, and zero is the safe reading of that.
func (m *costModel) fit() {
	free := [nFeat]bool{true, true, true, true, true}
	for range nFeat {
		theta, ok := m.solve(free)
		if !ok {
			return // singular even with the ridge: keep the previous fit
		}
		worst := -1
		for i := range nFeat {
			if free[i] && theta[i] < 0 && (worst < 0 || theta[i] < theta[worst]) {
				worst = i
			}
		}
		if worst < 0 {
			m.theta = theta
			return
		}
		free[worst] = false
	}
	m.theta = [nFeat]float64{}
}

// solve does Gaussian elimination with partial pivoting on the free features' normal
// equations, with a small ridge so that a feature that never varied gets a coefficient of 0.
func (m *costModel) solve(free [nFeat]bool) ([nFeat]float64, bool) {
	var idx [nFeat]int
	n := 0
	for i := range nFeat {
		if free[i] {
			idx[n] = i
			n++
		}
	}
	var a [nFeat][nFeat + 1]float64
	for r := range n {
		for c := range n {
			a[r][c] = m.xx[idx[r]][idx[c]]
		}
		a[r][r] += 1e-9 * (1 + m.xx[idx[r]][idx[r]])
		a[r][n] = m.xy[idx[r]]
	}
	for c := range n {
		p := c
		for r := c + 1; r < n; r++ {
			if math.Abs(a[r][c]) > math.Abs(a[p][c]) {
				p = r
			}
		}
		if a[p][c] == 0 {
			return [nFeat]float64{}, false
		}
		a[c], a[p] = a[p], a[c]
		for r := c + 1; r < n; r++ {
			f := a[r][c] / a[c][c]
			for k := c; k <= n; k++ {
				a[r][k] -= f * a[c][k]
			}
		}
	}
	var theta [nFeat]float64
	for r := n - 1; r >= 0; r-- {
		v := a[r][n]
		for k := r + 1; k < n; k++ {
			v -= a[r][k] * theta[idx[k]]
		}
		theta[idx[r]] = v / a[r][r]
	}
	return theta, true
}

// margin is the headroom the planner keeps below the target for the model's error: the
// errQuantile quantile of the recent errors of steps a stream waited on (errTail), so that a
// stream's inter-token p99 stays within the target; before errMinSteps of them, the mean overrun
// plus two standard deviations. At most three quarters of the target: a machine slower than its
// model by more than that gets minimal prompt chunks (planStep's floor), not none.
func (m *costModel) margin(target float64) float64 {
	if m.tail.n >= errMinSteps {
		return min(0.75*target, max(0, m.tail.q))
	}
	return min(0.75*target, max(0, m.errMean+2*math.Sqrt(m.errVar)))
}

// promptCost is the modelled time of a prompt chunk of l tokens extending a sequence that holds
// n cells: l prompt tokens attending n+1, ..., n+l cells.
func (m *costModel) promptCost(n, l int) float64 {
	return m.theta[2]*float64(l) + m.theta[4]*chunkCells(n, l)/cellScale
}

// chunkFor is the longest prompt chunk extending a sequence of n cells that costs at most avail
// seconds under the model (at most limit).
func (m *costModel) chunkFor(n int, avail float64, limit int) int {
	if avail <= 0 || limit <= 0 {
		return 0
	}
	// a l² + b l <= avail, from promptCost.
	a := m.theta[4] / cellScale / 2
	b := m.theta[2] + m.theta[4]/cellScale*(float64(n)+0.5)
	var l float64
	switch {
	case a > 0:
		l = (-b + math.Sqrt(b*b+4*a*avail)) / (2 * a)
	case b > 0:
		l = avail / b
	default:
		return limit
	}
	return int(min(l, float64(limit)))
}

// stepPlan is the budget of one step: at most Tokens tokens, and, while the target applies, at
// most avail seconds of modelled prompt work.
type stepPlan struct {
	tokens    int
	reason    BudgetReason
	target    time.Duration // the effective target (relaxed under a queue); 0 without one
	predicted time.Duration // modelled step time of the batch built
	timed     bool          // prompt chunks are limited by avail
	avail     float64       // seconds of prompt work left under the target
	floor     bool          // the first chunk may take minChunk tokens beyond avail
}

// planStep sets the budget of a step whose decode tokens are placed: decode of them, reading
// cells KV cells, and firstN the cells of the first sequence to get a prompt chunk.
func (e *Engine) planStep(decode int, cells float64, firstN int) stepPlan {
	p := stepPlan{tokens: e.cfg.BatchSize}
	switch {
	case decode == 0:
		p.reason = BudgetNoDecode
		return p
	case e.cfg.TargetITL <= 0:
		p.reason = BudgetFixed
		return p
	case !e.cost.ready():
		// Nothing known of this machine's steps yet: one chunk of prompt beside the decode
		// tokens, the smallest step that still teaches the model what prompt tokens cost.
		p.reason = BudgetLearning
		p.tokens = min(e.cfg.BatchSize, decode+e.cfg.ChunkSize)
		return p
	}
	p.reason, p.timed = BudgetTarget, true
	relax := 1.0
	if len(e.waiting) > 0 {
		// Requests are waiting: give throughput more weight, up to twice the target when as
		// many wait as can run.
		relax = 1 + min(1, float64(len(e.waiting))/float64(max(e.par.bound, 1)))
		p.reason = BudgetQueue
	}
	target := e.cfg.TargetITL.Seconds() * relax
	p.target = time.Duration(target * float64(time.Second))
	p.avail = target - e.cost.margin(target) - e.cost.predict(features(decode, 0, cells, 0))
	prompt := e.cost.chunkFor(firstN, p.avail, e.cfg.BatchSize-decode)
	if prompt < minChunk {
		prompt, p.floor, p.reason = minChunk, true, BudgetFloor
	}
	if decode+prompt >= e.cfg.BatchSize {
		p.reason = BudgetBatchSize
	}
	p.tokens = min(e.cfg.BatchSize, decode+prompt)
	return p
}
