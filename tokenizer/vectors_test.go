package tokenizer

import (
	"path/filepath"
	"slices"
	"testing"
)

// TestVocabVectors runs every llama.cpp test vector of every vocabulary in shared/models/vocab:
// no BOS/EOS, special-token text not parsed.
func TestVocabVectors(t *testing.T) {
	shared := sharedDir(t)
	files, _ := filepath.Glob(filepath.Join(shared, "models", "vocab", "*.gguf"))
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
