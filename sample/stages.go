package sample

import (
	"math"
	"slices"

	"ubatch/ops"
)

// better orders candidates by descending logit, then ascending id, so that every selection and
// sort is deterministic.
func better(a, b candidate) bool {
	return a.logit > b.logit || (a.logit == b.logit && a.id < b.id)
}

func cmpCand(a, b candidate) int {
	switch {
	case better(a, b):
		return -1
	case better(b, a):
		return 1
	}
	return 0
}

// sampleDist runs top-k, top-p, min-p and temperature over c (non-empty, no NaN, ascending ids)
// whose largest logit is maxL, and draws a token. c is reordered and overwritten.
func (s *Sampler) sampleDist(c []candidate, maxL float32) int32 {
	if len(c) == 0 {
		return -1
	}
	if math.IsInf(float64(maxL), 0) {
		// +Inf outweighs everything (a point mass on the first such token); a row of only -Inf
		// has no distribution at all. Either way the lowest id among the largest wins.
		return argmaxCand(c)
	}
	sorted := false
	if k := s.p.TopK; k > 0 && k < len(c) {
		selectTop(c, k)
		c = c[:k]
		slices.SortFunc(c, cmpCand)
		sorted = true
	}
	if s.p.TopP < 1 {
		if sorted {
			c = topPSorted(c, maxL, float64(s.p.TopP))
		} else {
			c = s.topPBuckets(c, maxL, float64(s.p.TopP))
		}
	}
	if s.p.MinP > 0 {
		c = minP(c, maxL+float32(math.Log(float64(s.p.MinP))), sorted)
	}
	return s.draw(c, maxL)
}

// topPSorted keeps the smallest prefix of c (sorted by cmpCand, largest logit maxL) whose
// probability mass, normalised over c, reaches p.
func topPSorted(c []candidate, maxL float32, p float64) []candidate {
	var z float64
	for _, x := range c {
		z += widen(ops.ExpNeg(x.logit - maxL))
	}
	target := p * z
	var cum float64
	for i, x := range c {
		cum += widen(ops.ExpNeg(x.logit - maxL))
		if cum >= target {
			return c[:i+1]
		}
	}
	return c // rounding left the total a hair below target
}

// topPBuckets selects the same set as topPSorted on unsorted candidates without sorting the
// whole vocabulary: one pass spreads the probability mass over buckets of logit value, the
// buckets fully inside the nucleus are kept as they are, and only the bucket that straddles the
// boundary is sorted. The result is not in sorted order.
func (s *Sampler) topPBuckets(c []candidate, maxL float32, p float64) []candidate {
	minL := maxL
	for _, x := range c {
		if x.logit < minL {
			minL = x.logit
		}
	}
	var scale float32 // all-equal logits share bucket 0
	if maxL > minL {
		scale = (numBuckets - 1) / (maxL - minL)
	}
	bucket := func(l float32) int {
		return min(int((maxL-l)*scale), numBuckets-1)
	}
	mass := &s.bucketMass
	clear(mass[:])
	var z float64
	for _, x := range c {
		w := widen(ops.ExpNeg(x.logit - maxL))
		mass[bucket(x.logit)] += w
		z += w
	}
	target := p * z
	var cum float64
	edge := numBuckets - 1
	for b := range numBuckets {
		if cum+mass[b] >= target {
			edge = b
			break
		}
		cum += mass[b]
	}
	// Move the buckets above the edge to the front, then the edge bucket right after them.
	head := 0
	for i, x := range c {
		if bucket(x.logit) < edge {
			c[head], c[i] = x, c[head]
			head++
		}
	}
	end := head
	for i := head; i < len(c); i++ {
		if x := c[i]; bucket(x.logit) == edge {
			c[end], c[i] = x, c[end]
			end++
		}
	}
	border := c[head:end]
	slices.SortFunc(border, cmpCand)
	for i, x := range border {
		cum += widen(ops.ExpNeg(x.logit - maxL))
		if cum >= target {
			return c[:head+i+1]
		}
	}
	return c[:end]
}

// minP keeps the candidates whose logit is at least threshold (max logit + ln(min_p)), in order.
// The maximum always survives, so the result is never empty.
func minP(c []candidate, threshold float32, sorted bool) []candidate {
	if sorted {
		for i, x := range c {
			if x.logit < threshold {
				return c[:i]
			}
		}
		return c
	}
	n := 0
	for _, x := range c {
		if x.logit >= threshold {
			c[n] = x
			n++
		}
	}
	return c[:n]
}

// draw applies the temperature and samples from softmax(c/T). maxL is the largest logit in c
// (every filter keeps the maximum), so each weight is at most 1 and z is at least 1: no overflow,
// and no all-zero underflow however low the temperature.
func (s *Sampler) draw(c []candidate, maxL float32) int32 {
	if len(c) == 1 {
		return c[0].id
	}
	invT := float32(1 / float64(s.p.Temperature))
	if math.IsInf(float64(invT), 0) {
		// A temperature too small for float32 is greedy; it would also turn the maximum's
		// 0 * Inf into NaN below.
		best := c[0]
		for _, x := range c[1:] {
			if better(x, best) {
				best = x
			}
		}
		return best.id
	}
	var z float64
	for i := range c {
		w := ops.ExpNeg((c[i].logit - maxL) * invT)
		c[i].logit = w
		z += widen(w)
	}
	u := s.rng.Float64() * z
	var cum float64
	for _, x := range c {
		cum += widen(x.logit)
		if u < cum {
			return x.id
		}
	}
	return c[len(c)-1].id
}

// selectTop rearranges c so that its k best candidates (by better) occupy c[:k], in no
// particular order; the rest keep to c[k:]. It runs in O(n log k) without allocating: c[:k] is
// kept as a heap whose root is the worst of the current best k.
func selectTop(c []candidate, k int) {
	if k <= 0 || k >= len(c) {
		return
	}
	h := c[:k]
	for i := k/2 - 1; i >= 0; i-- {
		siftDown(h, i, better)
	}
	for i := k; i < len(c); i++ {
		if better(c[i], h[0]) {
			h[0], c[i] = c[i], h[0]
			siftDown(h, 0, better)
		}
	}
}

// siftDown restores the heap property (parent worse than children, by better) below node i;
// the heaps of selectTop and of the log-probabilities' top n.
func siftDown[T any](h []T, i int, better func(a, b T) bool) {
	n := len(h)
	for {
		w := i
		l, r := 2*i+1, 2*i+2
		if l < n && better(h[w], h[l]) {
			w = l
		}
		if r < n && better(h[w], h[r]) {
			w = r
		}
		if w == i {
			return
		}
		h[i], h[w] = h[w], h[i]
		i = w
	}
}
