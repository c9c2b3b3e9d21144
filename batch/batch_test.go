package batch

import (
	"slices"
	"strings"
	"testing"
)

type tok struct {
	id, pos int32
	seqs    []int32
	logits  bool
}

func build(toks ...tok) *Batch {
	b := &Batch{}
	for _, t := range toks {
		b.Add(t.id, t.pos, t.seqs, t.logits)
	}
	return b
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		b       *Batch
		nVocab  int
		nSeqMax int
		wantErr string // substring; "" means valid
	}{
		{name: "valid single", b: build(tok{1, 0, []int32{0}, true}), nVocab: 10, nSeqMax: 4},
		{name: "valid multi seq prompt then split decode", b: build(
			tok{1, 0, []int32{0, 1, 2}, false}, tok{2, 1, []int32{0, 1, 2}, true},
			tok{3, 2, []int32{0}, true}, tok{4, 2, []int32{1}, true}), nVocab: 10, nSeqMax: 3},
		{name: "valid position gap", b: build(tok{1, 0, []int32{0}, false}, tok{1, 5, []int32{0}, true}), nVocab: 10, nSeqMax: 1},
		{name: "empty batch", b: &Batch{}, nVocab: 10, nSeqMax: 4, wantErr: "empty batch"},
		{name: "bad vocab size", b: build(tok{1, 0, []int32{0}, true}), nVocab: 0, nSeqMax: 4, wantErr: "vocabulary size"},
		{name: "bad seq max", b: build(tok{1, 0, []int32{0}, true}), nVocab: 10, nSeqMax: 0, wantErr: "maximum sequence count"},
		{name: "length mismatch", b: &Batch{Tokens: []int32{1, 2}, Pos: []int32{0}, Seqs: [][]int32{{0}, {0}}, Logits: []bool{true, true}},
			nVocab: 10, nSeqMax: 4, wantErr: "slice lengths differ"},
		{name: "token negative", b: build(tok{1, 0, []int32{0}, false}, tok{-1, 1, []int32{0}, true}), nVocab: 10, nSeqMax: 4,
			wantErr: "token 1: id -1 outside vocabulary"},
		{name: "token too large", b: build(tok{10, 0, []int32{0}, true}), nVocab: 10, nSeqMax: 4, wantErr: "token 0: id 10 outside vocabulary"},
		{name: "negative position", b: build(tok{1, -1, []int32{0}, true}), nVocab: 10, nSeqMax: 4, wantErr: "token 0: negative position"},
		{name: "no seq", b: build(tok{1, 0, nil, true}), nVocab: 10, nSeqMax: 4, wantErr: "token 0: no sequence id"},
		{name: "seq negative", b: build(tok{1, 0, []int32{-1}, true}), nVocab: 10, nSeqMax: 4, wantErr: "token 0: sequence id -1 outside"},
		{name: "seq too large", b: build(tok{1, 0, []int32{0}, false}, tok{1, 0, []int32{4}, true}), nVocab: 10, nSeqMax: 4,
			wantErr: "token 1: sequence id 4 outside"},
		{name: "duplicate seq", b: build(tok{1, 0, []int32{2, 1, 2}, true}), nVocab: 10, nSeqMax: 4, wantErr: "token 0: sequence id 2 listed twice"},
		{name: "position repeated", b: build(tok{1, 3, []int32{0}, false}, tok{1, 3, []int32{0}, true}), nVocab: 10, nSeqMax: 4,
			wantErr: "token 1: position 3 in sequence 0"},
		{name: "position decreasing in one of several seqs", b: build(tok{1, 3, []int32{1}, false}, tok{1, 2, []int32{0, 1}, true}),
			nVocab: 10, nSeqMax: 4, wantErr: "token 1: position 2 in sequence 1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.b.Validate(tc.nVocab, tc.nSeqMax)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate: unexpected error %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Validate error = %v, want it to contain %q", err, tc.wantErr)
			}
		})
	}
}

func TestValidateReusesScratchAcrossSizes(t *testing.T) {
	b := build(tok{1, 0, []int32{0}, true})
	if err := b.Validate(10, 2); err != nil {
		t.Fatal(err)
	}
	b.Clear()
	b.Add(1, 0, []int32{7}, true)
	if err := b.Validate(10, 8); err != nil {
		t.Fatalf("larger nSeqMax after a smaller one: %v", err)
	}
	// The scratch from the previous call must not leak into this one.
	if err := b.Validate(10, 8); err != nil {
		t.Fatalf("second identical Validate: %v", err)
	}
}

func TestAddCopiesAndClearKeepsCapacity(t *testing.T) {
	var b Batch
	seqs := []int32{0, 1}
	b.Add(5, 0, seqs, true)
	seqs[0] = 9
	if got := b.Seqs[0]; !slices.Equal(got, []int32{0, 1}) {
		t.Fatalf("Add did not copy seqs: %v", got)
	}
	inner := &b.Seqs[0][:1][0]
	b.Clear()
	if b.Len() != 0 || len(b.Pos) != 0 || len(b.Seqs) != 0 || len(b.Logits) != 0 {
		t.Fatalf("Clear left data: %+v", b)
	}
	b.Add(6, 1, []int32{3}, false)
	if &b.Seqs[0][0] != inner {
		t.Fatalf("Add after Clear did not reuse the inner seq slice")
	}
	if b.Tokens[0] != 6 || b.Pos[0] != 1 || b.Seqs[0][0] != 3 || len(b.Seqs[0]) != 1 || b.Logits[0] {
		t.Fatalf("unexpected contents %+v", b)
	}
}

func TestAddSteadyStateAllocatesNothing(t *testing.T) {
	var b Batch
	seqs := []int32{0, 1, 2}
	fill := func() {
		b.Clear()
		for i := range 64 {
			b.Add(int32(i), int32(i), seqs, i == 63)
		}
	}
	fill()
	if n := testing.AllocsPerRun(20, func() {
		fill()
		_ = b.Validate(100, 3)
	}); n != 0 {
		t.Fatalf("refilling and validating a batch allocates %v times", n)
	}
}

func TestSplit(t *testing.T) {
	tests := []struct {
		name     string
		n        int
		nUBatch  int
		wantLens []int
	}{
		{name: "exact multiple", n: 8, nUBatch: 4, wantLens: []int{4, 4}},
		{name: "remainder", n: 10, nUBatch: 4, wantLens: []int{4, 4, 2}},
		{name: "larger than batch", n: 3, nUBatch: 16, wantLens: []int{3}},
		{name: "one per ubatch", n: 3, nUBatch: 1, wantLens: []int{1, 1, 1}},
		{name: "no limit", n: 5, nUBatch: 0, wantLens: []int{5}},
		{name: "empty batch", n: 0, nUBatch: 4, wantLens: nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var b Batch
			for i := range tc.n {
				b.Add(int32(100+i), int32(i), []int32{int32(i % 2)}, i%3 == 0)
			}
			ubs := b.Split(tc.nUBatch, make([]UBatch, 5))
			if len(ubs) != len(tc.wantLens) {
				t.Fatalf("got %d micro-batches, want %d", len(ubs), len(tc.wantLens))
			}
			next := 0
			for k, u := range ubs {
				if u.Start != next || u.Len() != tc.wantLens[k] {
					t.Fatalf("ubatch %d: start %d len %d, want start %d len %d", k, u.Start, u.Len(), next, tc.wantLens[k])
				}
				for j := range u.Len() {
					i := u.Start + j
					if u.Tokens[j] != b.Tokens[i] || u.Pos[j] != b.Pos[i] || u.Seqs[j][0] != b.Seqs[i][0] || u.Logits[j] != b.Logits[i] {
						t.Fatalf("ubatch %d token %d differs from batch token %d", k, j, i)
					}
				}
				if u.Len() > 0 && &u.Tokens[0] != &b.Tokens[u.Start] {
					t.Fatalf("ubatch %d is a copy, want a view", k)
				}
				if cap(u.Tokens) != u.Len() {
					t.Fatalf("ubatch %d view not capped: cap %d len %d", k, cap(u.Tokens), u.Len())
				}
				next += u.Len()
			}
		})
	}
}

func TestSplitShortSlicesDoNotPanic(t *testing.T) {
	b := Batch{Tokens: []int32{1, 2, 3}, Pos: []int32{0}}
	ubs := b.Split(2, nil)
	if len(ubs) != 2 || len(ubs[0].Pos) != 1 || len(ubs[1].Pos) != 0 || len(ubs[1].Logits) != 0 {
		t.Fatalf("unexpected split of malformed batch: %+v", ubs)
	}
}

func TestOutputRows(t *testing.T) {
	tests := []struct {
		name   string
		logits []bool
		want   []int32
		wantN  int
	}{
		{name: "last only", logits: []bool{false, false, true}, want: []int32{-1, -1, 0}, wantN: 1},
		{name: "all", logits: []bool{true, true, true}, want: []int32{0, 1, 2}, wantN: 3},
		{name: "none", logits: []bool{false, false}, want: []int32{-1, -1}, wantN: 0},
		{name: "mixed", logits: []bool{true, false, true, false, true}, want: []int32{0, -1, 1, -1, 2}, wantN: 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var b Batch
			for i, l := range tc.logits {
				b.Add(1, int32(i), []int32{0}, l)
			}
			dst := make([]int32, 0, 8)
			rows, n := b.OutputRows(dst)
			if n != tc.wantN || !slices.Equal(rows, tc.want) {
				t.Fatalf("OutputRows = %v, %d; want %v, %d", rows, n, tc.want, tc.wantN)
			}
			if len(rows) > 0 && &rows[0] != &dst[:1][0] {
				t.Fatalf("OutputRows did not reuse dst")
			}
		})
	}
}
