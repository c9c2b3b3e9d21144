package sample

import (
	"math"
	"slices"
	"testing"
)

// Tests of the candidate filters (top-k, top-p, min-p) and of draws staying in the set they leave.

func TestTopKOneIsGreedy(t *testing.T) {
	for seed := range uint64(20) {
		logits := randomLogits(seed, 3000)
		p := DefaultParams()
		p.TopK, p.Seed, p.Temperature = 1, seed, 1.5
		s := mustNew(t, p, len(logits))
		if got, want := s.Sample(logits), argmax(logits); got != want {
			t.Fatalf("seed %d: top-k 1 sampled %d, argmax is %d", seed, got, want)
		}
	}
}

// support returns the sorted set of ids a filter keeps from the candidates of logits.
func support(c []candidate) []int32 {
	ids := make([]int32, len(c))
	for i, x := range c {
		ids[i] = x.id
	}
	slices.Sort(ids)
	return ids
}

func fullCands(logits []float32) []candidate {
	c := make([]candidate, len(logits))
	for i, v := range logits {
		c[i] = candidate{int32(i), v}
	}
	return c
}

func rangeIDs(n int) []int32 {
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32(i)
	}
	return ids
}

func TestTopK(t *testing.T) {
	logits := randomLogits(7, 5000)
	for _, k := range []int{1, 2, 40, 1000, 4999} {
		c := fullCands(logits)
		selectTop(c, k)
		got := support(c[:k])
		order := make([]int32, len(logits))
		copy(order, rangeIDs(len(logits)))
		slices.SortFunc(order, func(a, b int32) int { return cmpCand(candidate{a, logits[a]}, candidate{b, logits[b]}) })
		want := slices.Clone(order[:k])
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("k=%d: selected set differs from the k best", k)
		}
	}
}

func TestTopP(t *testing.T) {
	probs := []float64{0.05, 0.5, 0.15, 0.3} // sorted: 1 (0.5), 3 (0.3), 2 (0.15), 0 (0.05)
	flat := make([]float64, 1000)
	for i := range flat {
		flat[i] = 1.0 / 1000
	}
	tests := []struct {
		name  string
		probs []float64
		p     float64
		want  []int32
	}{
		{name: "head alone reaches p", probs: probs, p: 0.45, want: []int32{1}},
		{name: "two tokens", probs: probs, p: 0.7, want: []int32{1, 3}},
		{name: "three tokens", probs: probs, p: 0.85, want: []int32{1, 2, 3}},
		{name: "all tokens", probs: probs, p: 0.99, want: []int32{0, 1, 2, 3}},
		{name: "flat needs growing head", probs: flat, p: 0.4004, want: rangeIDs(401)},
		{name: "flat whole vocabulary", probs: flat, p: 0.9995, want: rangeIDs(1000)},
	}
	for _, tc := range tests {
		for _, sorted := range []bool{false, true} {
			t.Run(tc.name, func(t *testing.T) {
				logits := probsToLogits(tc.probs)
				c := fullCands(logits)
				maxL := slices.Max(logits)
				var got []candidate
				if sorted {
					slices.SortFunc(c, cmpCand)
					got = topPSorted(c, maxL, tc.p)
				} else {
					s := mustNew(t, onlyParams(1), len(logits))
					got = s.topPBuckets(c, maxL, tc.p)
				}
				if ids := support(got); !slices.Equal(ids, tc.want) {
					t.Fatalf("sorted=%v: kept %v, want %v", sorted, ids, tc.want)
				}
			})
		}
	}
}

// TestTopPBucketsMatchesSort compares the bucketed nucleus with the sorted definition on large
// random rows, including rows with many exact ties.
func TestTopPBucketsMatchesSort(t *testing.T) {
	tests := []struct {
		name   string
		logits []float32
	}{
		{name: "normal", logits: randomLogits(1, 20000)},
		{name: "quantised ties", logits: quantise(randomLogits(2, 20000), 0.5)},
		{name: "all equal", logits: make([]float32, 5000)},
		{name: "one outlier", logits: append(make([]float32, 5000), 12)},
	}
	s := mustNew(t, onlyParams(1), 1)
	for _, tc := range tests {
		for _, p := range []float64{0.05, 0.5, 0.9, 0.95, 0.999} {
			t.Run(tc.name, func(t *testing.T) {
				maxL := slices.Max(tc.logits)
				ref := fullCands(tc.logits)
				slices.SortFunc(ref, cmpCand)
				want := support(topPSorted(ref, maxL, p))
				got := support(s.topPBuckets(fullCands(tc.logits), maxL, p))
				if !slices.Equal(got, want) {
					t.Fatalf("p=%v: buckets kept %d tokens, sorting keeps %d", p, len(got), len(want))
				}
			})
		}
	}
}

func quantise(l []float32, step float32) []float32 {
	for i, v := range l {
		l[i] = float32(math.Round(float64(v/step))) * step
	}
	return l
}

func TestMinP(t *testing.T) {
	probs := []float64{0.05, 0.5, 0.15, 0.3}
	tests := []struct {
		name string
		minP float32
		want []int32
	}{
		{name: "loose keeps all", minP: 0.05, want: []int32{0, 1, 2, 3}},
		{name: "drops tail", minP: 0.2, want: []int32{1, 2, 3}},
		{name: "half of max", minP: 0.5, want: []int32{1, 3}},
		{name: "only max", minP: 0.7, want: []int32{1}},
		{name: "one keeps max", minP: 1, want: []int32{1}},
	}
	for _, tc := range tests {
		for _, sorted := range []bool{false, true} {
			t.Run(tc.name, func(t *testing.T) {
				logits := probsToLogits(probs)
				c := fullCands(logits)
				if sorted {
					slices.SortFunc(c, cmpCand)
				}
				th := slices.Max(logits) + float32(math.Log(float64(tc.minP)))
				if ids := support(minP(c, th, sorted)); !slices.Equal(ids, tc.want) {
					t.Fatalf("sorted=%v: kept %v, want %v", sorted, ids, tc.want)
				}
			})
		}
	}
}

// TestFiltersBoundSampling checks, end to end, that draws only ever land in the set the chain
// keeps and that every member of that set is reachable.
func TestFiltersBoundSampling(t *testing.T) {
	probs := []float64{0.05, 0.5, 0.15, 0.3, 0}
	tests := []struct {
		name string
		mod  func(*Params)
		want []int32
	}{
		{name: "top-k 2", mod: func(p *Params) { p.TopK = 2 }, want: []int32{1, 3}},
		{name: "top-p 0.7", mod: func(p *Params) { p.TopP = 0.7 }, want: []int32{1, 3}},
		{name: "min-p 0.2", mod: func(p *Params) { p.MinP = 0.2 }, want: []int32{1, 2, 3}},
		{name: "top-k 3 then top-p 0.5", mod: func(p *Params) { p.TopK = 3; p.TopP = 0.5 }, want: []int32{1}},
		// Top-p runs before min-p, as in llama.cpp: top-p 0.6 keeps {1,3} (mass 0.8) and min-p
		// 0.5 keeps both. The other order would renormalise {1,3} to 0.625/0.375 and keep {1}.
		{name: "top-p before min-p", mod: func(p *Params) { p.TopP = 0.6; p.MinP = 0.5 }, want: []int32{1, 3}},
		{name: "ignore", mod: func(p *Params) { p.IgnoreTokens = []int32{1, 3} }, want: []int32{0, 2}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, logits := seededOver(t, 42, tc.mod, probs)
			seen := map[int32]bool{}
			for range 2000 {
				seen[s.Sample(logits)] = true
			}
			var got []int32
			for id := range seen {
				got = append(got, id)
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("sampled ids %v, want exactly %v", got, tc.want)
			}
		})
	}
}
