package sample

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// refDir is the llama.cpp reference output folder, relative to this package's directory.
const refDir = "../../shared/reference"

type reference struct {
	NVocab       int           `json:"n_vocab"`
	PromptTokens []int32       `json:"prompt_tokens"`
	Top10        [][][]float64 `json:"top10"`
	GreedyTokens []int32       `json:"greedy_tokens"`
	LogitsFile   string        `json:"logits_file"`
}

// loadReference reads NAME.json and its logits rows; it skips the test when the shared data is
// absent.
func loadReference(t testing.TB, name string) (reference, [][]float32) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(refDir, name+".json"))
	if os.IsNotExist(err) {
		t.Skipf("shared reference data not found at %s (it lives beside the repository)", refDir)
	}
	if err != nil {
		t.Fatal(err)
	}
	var ref reference
	if err := json.Unmarshal(raw, &ref); err != nil {
		t.Fatalf("%s.json: %v", name, err)
	}
	bin, err := os.ReadFile(filepath.Join(refDir, ref.LogitsFile))
	if err != nil {
		t.Fatal(err)
	}
	rows := len(ref.PromptTokens)
	if len(bin) != rows*ref.NVocab*4 {
		t.Fatalf("%s: %d bytes, want %d rows of %d float32", ref.LogitsFile, len(bin), rows, ref.NVocab)
	}
	out := make([][]float32, rows)
	for r := range out {
		out[r] = make([]float32, ref.NVocab)
		for i := range out[r] {
			out[r][i] = math.Float32frombits(binary.LittleEndian.Uint32(bin[(r*ref.NVocab+i)*4:]))
		}
	}
	return ref, out
}

// TestReferenceLogits checks greedy selection and the LogProbs ranking against what llama.cpp
// reported for real model outputs.
func TestReferenceLogits(t *testing.T) {
	tests := []struct{ name string }{
		{name: "stories260K"}, {name: "synth-tiny-f16"}, {name: "synth-tiny-q4_k_m"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ref, rows := loadReference(t, tc.name)
			greedy := mustNew(t, Params{Temperature: 0, TopP: 1, RepeatPenalty: 1}, ref.NVocab)
			last := rows[len(rows)-1]
			if got := greedy.Sample(last); got != ref.GreedyTokens[0] {
				t.Fatalf("greedy after the prompt: %d, llama.cpp chose %d", got, ref.GreedyTokens[0])
			}
			for r, row := range rows {
				_, top := LogProbs(row, 0, 10)
				for i, want := range ref.Top10[r] {
					// Rounded reference logits cannot order near-ties; compare ids only where
					// the margin to the next entry is clear.
					clear := i+1 >= len(ref.Top10[r]) || want[1]-ref.Top10[r][i+1][1] > 1e-3
					if i > 0 && ref.Top10[r][i-1][1]-want[1] <= 1e-3 {
						clear = false
					}
					if clear && top[i].Token != int32(want[0]) {
						t.Fatalf("row %d rank %d: token %d, llama.cpp lists %d", r, i, top[i].Token, int32(want[0]))
					}
				}
			}
		})
	}
}
