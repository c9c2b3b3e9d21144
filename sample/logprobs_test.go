package sample

import (
	"math"
	"slices"
	"testing"
)

// refLogSoftmax computes log-softmax in float64 the direct way.
func refLogSoftmax(l []float32) []float64 {
	m := math.Inf(-1)
	for _, v := range l {
		m = math.Max(m, float64(v))
	}
	var z float64
	for _, v := range l {
		z += math.Exp(float64(v) - m)
	}
	out := make([]float64, len(l))
	for i, v := range l {
		out[i] = float64(v) - m - math.Log(z)
	}
	return out
}

func TestLogProbs(t *testing.T) {
	nan := float32(math.NaN())
	inf := float32(math.Inf(1))
	negInf := float32(math.Inf(-1))
	ln := func(x float64) float32 { return float32(math.Log(x)) }
	tests := []struct {
		name    string
		logits  []float32
		tok     int32
		n       int
		wantLP  float32
		wantTop []TokenLogProb
	}{
		{
			name:    "known distribution",
			logits:  []float32{ln(0.1), ln(0.2), ln(0.3), ln(0.4)},
			tok:     1,
			n:       2,
			wantLP:  ln(0.2),
			wantTop: []TokenLogProb{{3, ln(0.4)}, {2, ln(0.3)}},
		},
		{
			name:    "shift invariant",
			logits:  []float32{100 + ln(0.25), 100 + ln(0.75)},
			tok:     0,
			n:       5,
			wantLP:  ln(0.25),
			wantTop: []TokenLogProb{{1, ln(0.75)}, {0, ln(0.25)}},
		},
		{
			name:    "ties list lowest id first",
			logits:  []float32{0, 1, 1, 0},
			tok:     3,
			n:       3,
			wantLP:  ln(1 / (2 + 2*math.E)),
			wantTop: []TokenLogProb{{1, ln(math.E / (2 + 2*math.E))}, {2, ln(math.E / (2 + 2*math.E))}, {0, ln(1 / (2 + 2*math.E))}},
		},
		{name: "n zero", logits: []float32{0, 0}, tok: 0, n: 0, wantLP: ln(0.5)},
		{name: "token out of range", logits: []float32{0, 0}, tok: 2, n: 1, wantLP: negInf, wantTop: []TokenLogProb{{0, ln(0.5)}}},
		{name: "negative token", logits: []float32{0, 0}, tok: -1, n: 0, wantLP: negInf},
		{name: "NaN skipped", logits: []float32{nan, 0, 0}, tok: 0, n: 3, wantLP: negInf, wantTop: []TokenLogProb{{1, ln(0.5)}, {2, ln(0.5)}}},
		{name: "-Inf is probability zero", logits: []float32{negInf, 0}, tok: 0, n: 2, wantLP: negInf, wantTop: []TokenLogProb{{1, 0}, {0, negInf}}},
		{name: "+Inf takes the mass", logits: []float32{inf, 3, inf}, tok: 2, n: 2, wantLP: ln(0.5), wantTop: []TokenLogProb{{0, ln(0.5)}, {2, ln(0.5)}}},
		{name: "empty row", logits: nil, tok: 0, n: 3, wantLP: negInf},
	}
	close := func(a, b float32) bool {
		if math.IsInf(float64(a), 0) || math.IsInf(float64(b), 0) {
			return a == b
		}
		return math.Abs(float64(a-b)) < 1e-5
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lp, top := LogProbs(tc.logits, tc.tok, tc.n)
			if !close(lp, tc.wantLP) {
				t.Errorf("logprob = %v, want %v", lp, tc.wantLP)
			}
			if len(top) != len(tc.wantTop) {
				t.Fatalf("top = %v, want %v", top, tc.wantTop)
			}
			for i := range top {
				if top[i].Token != tc.wantTop[i].Token || !close(top[i].LogProb, tc.wantTop[i].LogProb) {
					t.Fatalf("top = %v, want %v", top, tc.wantTop)
				}
			}
		})
	}
}

func TestLogProbsLargeRow(t *testing.T) {
	logits := randomLogits(9, 32000)
	ref := refLogSoftmax(logits)
	order := rangeIDs(len(logits))
	slices.SortFunc(order, func(a, b int32) int { return cmpCand(candidate{a, logits[a]}, candidate{b, logits[b]}) })
	for _, tok := range []int32{0, 123, 31999, order[0]} {
		lp, top := LogProbs(logits, tok, 20)
		if math.Abs(float64(lp)-ref[tok]) > 1e-4 {
			t.Fatalf("token %d: logprob %v, want %v", tok, lp, ref[tok])
		}
		for i, x := range top {
			if x.Token != order[i] || math.Abs(float64(x.LogProb)-ref[x.Token]) > 1e-4 {
				t.Fatalf("rank %d: got %+v, want token %d logprob %v", i, x, order[i], ref[order[i]])
			}
		}
	}
	if n := testing.AllocsPerRun(10, func() { LogProbs(logits, 5, 20) }); n != 1 {
		t.Fatalf("LogProbs allocates %.1f times, want only the returned slice", n)
	}
}
