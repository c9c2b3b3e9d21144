package gemma4_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"ubatch/gguf"
	"ubatch/internal/testdata"
	"ubatch/internal/testmodel"
	"ubatch/model"
	_ "ubatch/model/all"
	"ubatch/runner"
	"ubatch/synth"
)

// reference is one of testdata's llama.cpp references (see testdata/README.md).
func reference(t *testing.T, name string) *testdata.Reference {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var r testdata.Reference
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatalf("%s.json: %v", name, err)
	}
	lr, err := os.ReadFile(filepath.Join("testdata", r.LogitsFile))
	if err != nil {
		t.Fatal(err)
	}
	if len(lr) != 4*len(r.PromptTokens)*r.NVocab {
		t.Fatalf("%s: %d bytes, want %d", r.LogitsFile, len(lr), 4*len(r.PromptTokens)*r.NVocab)
	}
	r.Logits = make([]float32, len(lr)/4)
	for i := range r.Logits {
		r.Logits[i] = math.Float32frombits(binary.LittleEndian.Uint32(lr[4*i:]))
	}
	return &r
}

// synthModel writes the file the references were made from: ubatch synth --arch gemma4 --shape
// shape --type ftype with stories260K's vocabulary and the default seed, 42. tweak, when not nil,
// edits the loaded graph (the tests that switch a feature off).
func synthModel(t *testing.T, shape, ftype string) *model.Model {
	t.Helper()
	vocab, err := gguf.Open(testdata.Model(t, "stories260K.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vocab.Close() })
	a, err := synth.ArchByName("gemma4")
	if err != nil {
		t.Fatal(err)
	}
	s, err := a.ShapeByName(shape)
	if err != nil {
		t.Fatal(err)
	}
	w, err := synth.Build(synth.Options{Arch: "gemma4", Shape: s, FileType: ftype, Vocab: vocab, Seed: 42, Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	return testmodel.Open(t, testmodel.Write(t, w, "gemma4-"+shape+"-"+ftype+".gguf"))
}

// rowErrors decodes the reference's prompt in one batch and returns the relative RMS error of
// every position's logits against llama.cpp's.
func rowErrors(t *testing.T, m *model.Model, ref *testdata.Reference) []float64 {
	t.Helper()
	c := testmodel.Session(t, m, runner.Options{NCtx: 128, Threads: 2})
	loop, err := runner.NewLoop(c, 1)
	if err != nil {
		t.Fatal(err)
	}
	var errs []float64
	err = loop.Prompt([]int32{0}, ref.PromptTokens, func(_ int, l []float32) { errs = append(errs, testdata.RelRMS(l, ref.Row(len(errs)))) })
	if err != nil {
		t.Fatal(err)
	}
	return errs
}

// TestMatchesLlamaCpp compares every prompt position's logits with llama.cpp's on the files of
// testdata/README.md. A row may be past maxRel only where a router's near tie sends a token to
// another expert (ties rows at most): llama.cpp's own F32 of the same file lands past it there
// too (README), while a structural error puts most rows far past.
func TestMatchesLlamaCpp(t *testing.T) {
	cases := []struct {
		name, shape, ftype string
		maxRel             float64
		ties               int
	}{
		{"dense-f16", "dense", "f16", 0.02, 0},
		{"dense-q8_0", "dense", "q8_0", 0.15, 0},
		{"dense-q4_k_m", "dense", "q4_k_m", 0.15, 0},
		{"moe-f16", "moe", "f16", 0.02, 1},
		{"moe-q8_0", "moe", "q8_0", 0.15, 1},
		// llama.cpp's own F32 of this file has 7 rows past 0.15 (up to 0.29): Q4_K's rounding
		// moves several routers' choices. A structural error puts all 24 past.
		{"moe-q4_k_m", "moe", "q4_k_m", 0.15, 10},
		{"e-f16", "e", "f16", 0.02, 0},
		// The e shape's 9 layers carry more of the rounding: llama.cpp's own F32 of the Q8_0 file
		// is up to 0.165 from its Q8_0, of the Q4_K_M file up to 0.29 (16 of 24 rows past 0.15).
		// An unrelated answer is ~1.4.
		{"e-q8_0", "e", "q8_0", 0.25, 0},
		{"e-q4_k_m", "e", "q4_k_m", 0.40, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ref := reference(t, "gemma4-"+tc.name)
			errs := rowErrors(t, synthModel(t, tc.shape, tc.ftype), ref)
			worst, past := 0.0, 0
			for i, e := range errs {
				if e > tc.maxRel {
					past++
					t.Logf("position %d: relative RMS %.4f > %.2f", i, e, tc.maxRel)
					continue
				}
				worst = max(worst, e)
			}
			t.Logf("worst relative RMS %.4f over %d positions, %d past %.2f", worst, len(errs), past, tc.maxRel)
			if past > tc.ties {
				t.Errorf("%d positions past relative RMS %.2f, want at most %d", past, tc.maxRel, tc.ties)
			}
		})
	}
}

// TestGreedyMatchesLlamaCpp continues each reference's prompt greedily and compares the tokens
// with llama.cpp's 16 while they are clear choices: at the first step whose top-2 margin is
// under 2% of the logits' spread (rounding may pick either) the two may part, and it stops.
// Measured: dense-f16 and moe-f16 16 of 16 equal (no near tie: all must be), dense-q8_0 12,
// dense-q4_k_m 9, moe-q8_0 6, moe-q4_k_m 2, e-f16 14, e-q8_0 4, e-q4_k_m 3.
func TestGreedyMatchesLlamaCpp(t *testing.T) {
	for _, name := range []string{"dense-f16", "dense-q8_0", "dense-q4_k_m", "moe-f16", "moe-q8_0", "moe-q4_k_m", "e-f16", "e-q8_0", "e-q4_k_m"} {
		t.Run(name, func(t *testing.T) {
			ref := reference(t, "gemma4-"+name)
			shape, ftype, _ := strings.Cut(name, "-")
			c := testmodel.Session(t, synthModel(t, shape, ftype), runner.Options{NCtx: 128, Threads: 2})
			loop, err := runner.NewLoop(c, 1)
			if err != nil {
				t.Fatal(err)
			}
			var last []float32
			if err := loop.Prompt([]int32{0}, ref.PromptTokens, func(_ int, l []float32) { last = slices.Clone(l) }); err != nil {
				t.Fatal(err)
			}
			i, tie := 0, false
			err = loop.Generate(context.Background(), len(ref.GreedyTokens), func(_ int, l []float32) (int32, bool, error) {
				if l == nil {
					l = last
				}
				got, want := argmax(l), ref.GreedyTokens[i]
				if got != want {
					if margin, spread := top2(l); margin > 0.02*spread {
						return 0, false, fmt.Errorf("greedy token %d = %d, llama.cpp %d, with a clear margin %.3f (spread %.3f)", i, got, want, margin, spread)
					}
					tie = true
					return 0, false, nil
				}
				i++
				return got, true, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d of %d greedy tokens equal (then a near tie: %v)", i, len(ref.GreedyTokens), tie)
			if (name == "dense-f16" || name == "moe-f16") && i < len(ref.GreedyTokens) { // no near tie on them: all must be equal
				t.Errorf("only %d of %d greedy tokens equal", i, len(ref.GreedyTokens))
			}
		})
	}
}

func argmax(x []float32) int32 {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return int32(best)
}

// top2 is the gap between the two largest of x, and the spread max-min.
func top2(x []float32) (margin, spread float32) {
	a, b, lo := float32(math.Inf(-1)), float32(math.Inf(-1)), float32(math.Inf(1))
	for _, v := range x {
		switch {
		case v > a:
			a, b = v, a
		case v > b:
			b = v
		}
		lo = min(lo, v)
	}
	return a - b, a - lo
}
