package runner

import (
	"math"
	"slices"
	"testing"
)

// TestExpertGroups checks the grouping bookkeeping on fake router output: per expert, which
// tokens (in token order) and with which weights, including experts no token chose, K > 1, and
// a token routed to every expert.
func TestExpertGroups(t *testing.T) {
	type group struct {
		tok []int32
		w   []float32
	}
	cases := []struct {
		name    string
		experts int
		k       int
		ids     []int32   // [n][k]
		w       []float32 // [n][k]
		want    []group   // per expert
	}{
		{name: "one token, k=1", experts: 3, k: 1, ids: []int32{2}, w: []float32{1},
			want: []group{{}, {}, {[]int32{0}, []float32{1}}}},
		{name: "k=2, token order kept within an expert", experts: 4, k: 2,
			ids:  []int32{3, 1, 1, 3, 0, 3},
			w:    []float32{.6, .4, .7, .3, .9, .1},
			want: []group{{[]int32{2}, []float32{.9}}, {[]int32{0, 1}, []float32{.4, .7}}, {}, {[]int32{0, 1, 2}, []float32{.6, .3, .1}}}},
		{name: "every token to one expert, the others empty", experts: 5, k: 1,
			ids: []int32{4, 4, 4, 4}, w: []float32{.1, .2, .3, .4},
			want: []group{{}, {}, {}, {}, {[]int32{0, 1, 2, 3}, []float32{.1, .2, .3, .4}}}},
		{name: "one token to all experts (k=E)", experts: 3, k: 3,
			ids: []int32{2, 0, 1}, w: []float32{.5, .3, .2},
			want: []group{{[]int32{0}, []float32{.3}}, {[]int32{0}, []float32{.2}}, {[]int32{0}, []float32{.5}}}},
		{name: "no tokens", experts: 2, k: 2, want: []group{{}, {}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := newExpertGroups(tc.experts, len(tc.ids))
			g.group(tc.ids, tc.w, tc.k, tc.experts)
			if g.off[0] != 0 || int(g.off[tc.experts]) != len(tc.ids) {
				t.Fatalf("offsets %v do not span the %d entries", g.off, len(tc.ids))
			}
			for e, want := range tc.want {
				lo, hi := g.off[e], g.off[e+1]
				tok, w := g.tok[lo:hi], g.w[lo:hi]
				if n := int(hi - lo); n != len(want.tok) {
					t.Errorf("expert %d: %d tokens %v, want %v", e, n, tok, want.tok)
					continue
				}
				if !slices.Equal(tok, want.tok) || !slices.Equal(w, want.w) {
					t.Errorf("expert %d: tokens %v weights %v, want %v %v", e, tok, w, want.tok, want.w)
				}
			}
		})
	}
}

// TestRoute checks every gating function on hand-computed router logits.
func TestRoute(t *testing.T) {
	sm := func(x ...float64) []float64 { // softmax, in float64
		var s float64
		out := make([]float64, len(x))
		for i, v := range x {
			out[i] = math.Exp(v)
			s += out[i]
		}
		for i := range out {
			out[i] /= s
		}
		return out
	}
	p := sm(1, 3, 2, 0)
	cases := []struct {
		name    string
		g       Gating
		logits  []float32
		bias    []float32
		wantIDs []int32
		wantW   []float64
	}{
		{name: "softmax then top-2", g: Gating{Func: SoftmaxTopK, K: 2}, logits: []float32{1, 3, 2, 0},
			wantIDs: []int32{1, 2}, wantW: []float64{p[1], p[2]}},
		{name: "softmax then top-2, renormalised", g: Gating{Func: SoftmaxTopK, K: 2, Norm: true}, logits: []float32{1, 3, 2, 0},
			wantIDs: []int32{1, 2}, wantW: []float64{p[1] / (p[1] + p[2]), p[2] / (p[1] + p[2])}},
		{name: "top-2 then softmax", g: Gating{Func: TopKSoftmax, K: 2}, logits: []float32{1, 3, 2, 0},
			wantIDs: []int32{1, 2}, wantW: sm(3, 2)},
		{name: "router bias changes the choice", g: Gating{Func: TopKSoftmax, K: 2}, logits: []float32{1, 3, 2, 0},
			bias: []float32{0, -5, 0, 2.5}, wantIDs: []int32{3, 2}, wantW: sm(2.5, 2)},
		{name: "scale", g: Gating{Func: SoftmaxTopK, K: 1, Norm: true, Scale: 2.5}, logits: []float32{1, 3, 2, 0},
			wantIDs: []int32{1}, wantW: []float64{2.5}},
		{name: "ties go to the lower expert", g: Gating{Func: SoftmaxTopK, K: 3}, logits: []float32{2, 5, 5, 2},
			wantIDs: []int32{1, 2, 0}, wantW: func() []float64 { q := sm(2, 5, 5, 2); return []float64{q[1], q[2], q[0]} }()},
		{name: "all experts", g: Gating{Func: SoftmaxTopK, K: 4, Norm: true}, logits: []float32{1, 3, 2, 0},
			wantIDs: []int32{1, 2, 0, 3}, wantW: []float64{p[1], p[2], p[0], p[3]}},
		{name: "a NaN logit is not chosen", g: Gating{Func: TopKSoftmax, K: 1}, logits: []float32{float32(math.NaN()), -1, 4, 2},
			wantIDs: []int32{2}, wantW: []float64{1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			order := make([]int32, len(tc.logits))
			w := make([]float32, tc.g.K)
			tc.g.Route(slices.Clone(tc.logits), tc.bias, order, w)
			if !slices.Equal(order[:tc.g.K], tc.wantIDs) {
				t.Fatalf("experts %v, want %v", order[:tc.g.K], tc.wantIDs)
			}
			for j := range w {
				if math.Abs(float64(w[j])-tc.wantW[j]) > 1e-6 {
					t.Errorf("weight %d = %v, want %v", j, w[j], tc.wantW[j])
				}
			}
		})
	}
}
