package sample

import "testing"

// TestLogitBias: a bias moves greedy's choice, -100 keeps a token from being chosen, and
// sampling follows the biased distribution.
func TestLogitBias(t *testing.T) {
	logits := []float32{1, 3, 2, 0}
	for _, tc := range []struct {
		name string
		bias map[int32]float32
		want int32
	}{
		{"none", nil, 1},
		{"raise", map[int32]float32{3: 5}, 3},
		{"ban the best", map[int32]float32{1: -100}, 2},
		{"ban two", map[int32]float32{1: -100, 2: -100}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := DefaultParams()
			p.Temperature, p.LogitBias = 0, tc.bias
			s, err := New(p, len(logits))
			if err != nil {
				t.Fatal(err)
			}
			if got := s.Sample(logits); got != tc.want {
				t.Errorf("greedy with bias %v = %d, want %d", tc.bias, got, tc.want)
			}
			p.Temperature, p.TopK, p.TopP, p.MinP = 1, 0, 1, 0
			if s, err = New(p, len(logits)); err != nil {
				t.Fatal(err)
			}
			for range 200 {
				if got := s.Sample(logits); tc.bias[got] == -100 {
					t.Fatalf("sampled banned token %d", got)
				}
			}
		})
	}
	if _, err := New(Params{TopP: 1, RepeatPenalty: 1, LogitBias: map[int32]float32{9: 1}}, 4); err == nil {
		t.Error("a bias outside the vocabulary was accepted")
	}
}
