package sample

import (
	"math"
	"slices"

	"ubatch/ops"
)

// TokenLogProb is one token with its log-probability.
type TokenLogProb struct {
	Token   int32
	LogProb float32
}

// LogProbs returns the log-softmax of the raw logits (one entry per token id) at tok, and the n
// most likely tokens with their log-probabilities in descending order (ties: lowest id first),
// as the OpenAI `logprobs` field reports them. The returned slice is the only allocation; it is
// nil when n <= 0. A tok outside the row yields -Inf; NaN logits are skipped and never listed.
func LogProbs(logits []float32, tok int32, n int) (float32, []TokenLogProb) {
	negInf := float32(math.Inf(-1))
	maxL := negInf
	for _, v := range logits {
		if v > maxL {
			maxL = v
		}
	}
	if maxL == negInf || math.IsInf(float64(maxL), 1) {
		return degenerate(logits, tok, n, maxL)
	}
	var z float64
	for _, v := range logits {
		if v == v {
			z += widen(ops.ExpNeg(v - maxL))
		}
	}
	logZ := float64(maxL) + math.Log(z)
	lp := negInf
	if tok >= 0 && int(tok) < len(logits) && logits[tok] == logits[tok] {
		lp = float32(float64(logits[tok]) - logZ)
	}
	top := topN(logits, n)
	for i := range top {
		top[i].LogProb = float32(float64(top[i].LogProb) - logZ)
	}
	return lp, top
}

// degenerate handles rows whose maximum is infinite: with +Inf the mass is shared evenly by the
// +Inf entries; with no finite entry at all (empty, all -Inf or NaN) every probability is 0.
func degenerate(logits []float32, tok int32, n int, maxL float32) (float32, []TokenLogProb) {
	negInf := float32(math.Inf(-1))
	var lpInf float32 = negInf
	if maxL > 0 {
		cnt := 0
		for _, v := range logits {
			if v == maxL {
				cnt++
			}
		}
		lpInf = float32(-math.Log(float64(cnt)))
	}
	conv := func(v float32) float32 {
		if maxL > 0 && v == maxL {
			return lpInf
		}
		return negInf
	}
	lp := negInf
	if tok >= 0 && int(tok) < len(logits) {
		lp = conv(logits[tok])
	}
	top := topN(logits, n)
	for i := range top {
		top[i].LogProb = conv(top[i].LogProb)
	}
	return lp, top
}

// topN returns the n largest non-NaN logits (LogProb holds the raw logit) sorted descending,
// ties by ascending id. The result doubles as the selection heap, so nothing else is allocated.
func topN(logits []float32, n int) []TokenLogProb {
	if n <= 0 {
		return nil
	}
	valid := 0
	for _, v := range logits {
		if v == v {
			valid++
		}
	}
	n = min(n, valid)
	if n == 0 {
		return nil
	}
	h := make([]TokenLogProb, 0, n)
	for i, v := range logits {
		if v != v {
			continue
		}
		x := TokenLogProb{Token: int32(i), LogProb: v}
		if len(h) < n {
			h = append(h, x)
			if len(h) == n {
				for j := n/2 - 1; j >= 0; j-- {
					siftDown(h, j, betterTLP)
				}
			}
			continue
		}
		if betterTLP(x, h[0]) {
			h[0] = x
			siftDown(h, 0, betterTLP)
		}
	}
	slices.SortFunc(h, func(a, b TokenLogProb) int {
		switch {
		case betterTLP(a, b):
			return -1
		case betterTLP(b, a):
			return 1
		}
		return 0
	})
	return h
}

func betterTLP(a, b TokenLogProb) bool {
	return a.LogProb > b.LogProb || (a.LogProb == b.LogProb && a.Token < b.Token)
}
