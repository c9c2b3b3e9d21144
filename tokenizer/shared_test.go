package tokenizer

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"ubatch/gguf"
	"ubatch/internal/testdata"
)

var (
	loadMu sync.Mutex
	loaded = map[string]*Tokenizer{}
)

// loadShared builds (once per test binary) the tokenizer of a GGUF under shared/models, e.g.
// "vocab/ggml-vocab-gpt-2.gguf" or "stories260K.gguf".
func loadShared(tb testing.TB, rel string) *Tokenizer {
	tb.Helper()
	path := testdata.Model(tb, rel)
	loadMu.Lock()
	defer loadMu.Unlock()
	if tk, ok := loaded[path]; ok {
		return tk
	}
	f, err := gguf.Open(path)
	if err != nil {
		tb.Fatalf("open %s: %v", rel, err)
	}
	defer f.Close()
	tk, err := FromGGUF(f)
	if err != nil {
		tb.Fatalf("FromGGUF %s: %v", rel, err)
	}
	loaded[path] = tk
	return tk
}

// vocabCase is one string of a llama.cpp tokenizer test file with its expected ids.
type vocabCase struct {
	text string
	want []int32
}

// readVectors reads NAME.gguf.inp / NAME.gguf.out: strings separated by
// "\n__ggml_vocab_test__\n" (the file ends with one), one line of ids per string.
func readVectors(tb testing.TB, ggufPath string) []vocabCase {
	tb.Helper()
	inp, err := os.ReadFile(ggufPath + ".inp")
	if err != nil {
		tb.Fatal(err)
	}
	out, err := os.ReadFile(ggufPath + ".out")
	if err != nil {
		tb.Fatal(err)
	}
	texts := strings.Split(string(inp), "\n__ggml_vocab_test__\n")
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(texts) == len(lines)+1 && texts[len(texts)-1] == "" {
		texts = texts[:len(texts)-1]
	}
	if len(texts) != len(lines) {
		tb.Fatalf("%s: %d strings but %d id lines", ggufPath, len(texts), len(lines))
	}
	cases := make([]vocabCase, len(texts))
	for i := range texts {
		cases[i].text = texts[i]
		for _, f := range strings.Fields(lines[i]) {
			id, err := strconv.ParseInt(f, 10, 32)
			if err != nil {
				tb.Fatalf("%s.out line %d: %v", ggufPath, i+1, err)
			}
			cases[i].want = append(cases[i].want, int32(id))
		}
	}
	return cases
}
