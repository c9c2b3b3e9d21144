package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"ubatch/internal/testdata"
)

// TestVocabVectors runs every llama.cpp test vector of every vocabulary in shared/models/vocab:
// no BOS/EOS, special-token text not parsed.
func TestVocabVectors(t *testing.T) {
	files, _ := filepath.Glob(testdata.Model(t, "vocab/*.gguf"))
	if len(files) == 0 {
		t.Skip("no vocab files in shared/models/vocab")
	}
	for _, path := range files {
		name := filepath.Base(path)
		t.Run(name, func(t *testing.T) {
			tk := loadShared(t, filepath.Join("vocab", name))
			cases := readVectors(t, path)
			pass := 0
			for i, c := range cases {
				got := tk.Encode(c.text, false, false)
				if slices.Equal(got, c.want) {
					pass++
					continue
				}
				t.Errorf("case %d %q:\n got %v\nwant %v", i, c.text, got, c.want)
			}
			t.Logf("%s: %d/%d vectors pass", name, pass, len(cases))
		})
	}
}

// TestReferencePrompts checks Encode (BOS added, special text not parsed) against the prompt
// tokens llama.cpp produced for the reference runs, and the streaming decoder against llama.cpp's
// greedy continuation text.
func TestReferencePrompts(t *testing.T) {
	files, _ := filepath.Glob(testdata.Path(t, "reference/*.json"))
	if len(files) == 0 {
		t.Skip("no reference outputs in shared/reference")
	}
	for _, path := range files {
		name := strings.TrimSuffix(filepath.Base(path), ".json")
		model := name + ".gguf"
		switch {
		case strings.HasSuffix(name, ".embeddings"):
			continue // embeddings, not a prompt run
		case strings.HasPrefix(name, "synth-types-"):
			model = "types/" + model
		case strings.HasPrefix(name, "synth-") && !strings.HasPrefix(name, "synth-tiny-"):
			model = "arch/" + model
		}
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var ref struct {
				Prompt       string  `json:"prompt"`
				PromptTokens []int32 `json:"prompt_tokens"`
				Greedy       []int32 `json:"greedy_tokens"`
				GreedyText   string  `json:"greedy_text"`
			}
			if err := json.Unmarshal(raw, &ref); err != nil {
				t.Fatal(err)
			}
			tk := loadShared(t, model)
			if got := tk.Encode(ref.Prompt, true, false); !slices.Equal(got, ref.PromptTokens) {
				t.Errorf("Encode(%q) = %v, want %v", ref.Prompt, got, ref.PromptTokens)
			}
			s := tk.NewStream()
			var text strings.Builder
			for _, id := range ref.Greedy {
				text.WriteString(s.Add(id))
			}
			text.WriteString(s.Flush())
			// The reference JSON holds text, so llama.cpp's writer replaced every byte that is not
			// valid UTF-8 (a random model's continuation can stop mid-character) with U+FFFD, as
			// a Go string-to-rune conversion (and encoding/json in the server) does.
			if string([]rune(text.String())) != ref.GreedyText {
				t.Errorf("streamed greedy text %q, want %q", text.String(), ref.GreedyText)
			}
		})
	}
}
