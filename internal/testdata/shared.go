// Package testdata locates the read-only shared test data (../shared beside the repository) and
// reads llama.cpp's reference results from it. Tests skip when the folder is absent.
//
// It also tells go test's cache about the shared files the tests look at (see declare), so that
// a result cached without ../shared, a skip, is rerun once the folder is there.
package testdata

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// repoRoot returns the repository (module) root from this file's path as compiled in.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(filepath.Dir(file))) // internal/testdata -> repo root
}

// realRoot is repoRoot with symbolic links resolved, "" when its path is not absolute (a
// -trimpath build). It is found at initialisation, before go test records what the tests look
// at: resolving stats the root, whose time changes with any file added to it.
var realRoot = func() string {
	root := repoRoot()
	if !filepath.IsAbs(root) {
		return ""
	}
	if r, err := filepath.EvalSymlinks(root); err == nil {
		root = r
	}
	return root
}()

// declare makes go test's cache record the state of path (present or not, size, time), so that
// a change to it reruns the test instead of replaying its cached result. The cache rechecks
// what a test stats or opens only under the module root, and decides that by comparing the
// names as strings, without cleaning them: a path outside the repository, as ../shared is, is
// stat-ed here as <root>/../shared/... (inModule), which the system resolves to the same file
// and the go command takes for one inside. (Should a later go command clean the names, this
// records nothing, and a cached skip needs go test -count=1 after adding ../shared.)
func declare(path string) {
	if name, ok := inModule(path); ok {
		os.Stat(name)
	}
}

// inModule returns path spelt from the resolved repository root (<root>/../x for a path beside
// the repository), or false when it cannot be.
func inModule(path string) (string, bool) {
	root := realRoot
	abs, err := filepath.Abs(path)
	if root == "" || err != nil {
		return "", false
	}
	rel, err := filepath.Rel(root, abs)
	if err != nil {
		return "", false
	}
	return root + string(filepath.Separator) + rel, true
}

// Lookup returns the shared folder ($UBATCH_SHARED, else ../shared beside the repository) and
// whether it is present (it has a models folder), for code that falls back to other data
// instead of skipping.
func Lookup() (string, bool) {
	d := os.Getenv("UBATCH_SHARED")
	if d == "" {
		d = filepath.Join(filepath.Dir(repoRoot()), "shared")
	}
	models := filepath.Join(d, "models")
	declare(models)
	_, err := os.Stat(models)
	return d, err == nil
}

// Dir returns the shared folder, or skips the test when it cannot be found.
func Dir(t testing.TB) string {
	t.Helper()
	d, ok := Lookup()
	if !ok {
		t.Skipf("shared test data not found at %s (set UBATCH_SHARED to its path)", d)
	}
	return d
}

// Path returns the path of REL (slash-separated, e.g. "templates/x.jinja") under the shared
// folder, skipping the test when the folder is absent; the test cache then sees REL change.
func Path(t testing.TB, rel string) string {
	t.Helper()
	p := filepath.Join(Dir(t), filepath.FromSlash(rel))
	declare(p)
	return p
}

// Model returns the path of a file in shared/models (NAME may be slash-separated, e.g.
// "vocab/ggml-vocab-gpt-2.gguf").
func Model(t testing.TB, name string) string {
	t.Helper()
	return Path(t, "models/"+name)
}

// ReadFile returns the contents of REL under the shared folder (see Path); a missing file fails
// the test.
func ReadFile(t testing.TB, rel string) []byte {
	t.Helper()
	data, err := os.ReadFile(Path(t, rel))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// Reference is llama.cpp's result for one model (shared/reference/NAME.json).
type Reference struct {
	Model        string         `json:"model"`
	Prompt       string         `json:"prompt"`
	NVocab       int            `json:"n_vocab"`
	PromptTokens []int32        `json:"prompt_tokens"`
	Top10        [][][2]float64 `json:"top10"`
	GreedyTokens []int32        `json:"greedy_tokens"`
	GreedyText   string         `json:"greedy_text"`
	LogitsFile   string         `json:"logits_file"`
	Logits       []float32      `json:"-"` // [len(PromptTokens)][NVocab]
}

// ReadReference reads shared/reference/NAME.json without its logits file (Logits stays nil).
func ReadReference(t testing.TB, name string) *Reference {
	t.Helper()
	raw := ReadFile(t, "reference/"+name+".json")
	var r Reference
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatalf("%s.json: %v", name, err)
	}
	return &r
}

// LoadReference reads shared/reference/NAME.json and its logits file.
func LoadReference(t testing.TB, name string) *Reference {
	t.Helper()
	r := ReadReference(t, name)
	lr := ReadFile(t, "reference/"+r.LogitsFile)
	if len(lr) != 4*len(r.PromptTokens)*r.NVocab {
		t.Fatalf("%s: %d bytes, want %d", r.LogitsFile, len(lr), 4*len(r.PromptTokens)*r.NVocab)
	}
	r.Logits = make([]float32, len(lr)/4)
	for i := range r.Logits {
		r.Logits[i] = math.Float32frombits(binary.LittleEndian.Uint32(lr[4*i:]))
	}
	return r
}

// Row returns the logits of prompt position I.
func (r *Reference) Row(i int) []float32 {
	return r.Logits[i*r.NVocab : (i+1)*r.NVocab]
}

// RelRMS is the relative RMS error of got against want, ||got-want|| / ||want|| (the absolute
// ||got-want|| when want is all zeros): how the tests compare logits and dequantized values
// with a reference. The slices have the same length.
func RelRMS(got, want []float32) float64 {
	var num, den float64
	for i := range want {
		d := float64(got[i]) - float64(want[i])
		num += d * d
		den += float64(want[i]) * float64(want[i])
	}
	if den == 0 {
		return math.Sqrt(num)
	}
	return math.Sqrt(num / den)
}

// Embedding is one of llama-embedding's sentence embeddings of stories260K.
type Embedding struct {
	Prompt    string    `json:"prompt"`
	Pooling   string    `json:"pooling"` // "mean" or "last"
	Embedding []float32 `json:"embedding"`
}

// LoadEmbeddings reads shared/reference/stories260K.embeddings.json.
func LoadEmbeddings(t testing.TB) []Embedding {
	t.Helper()
	var ref struct {
		Items []Embedding `json:"items"`
	}
	if err := json.Unmarshal(ReadFile(t, "reference/stories260K.embeddings.json"), &ref); err != nil {
		t.Fatal(err)
	}
	return ref.Items
}

// Cosine is the cosine similarity of a and b (of the same length): how the tests compare
// embeddings with a reference.
func Cosine(a, b []float32) float64 {
	var ab, aa, bb float64
	for i := range a {
		ab += float64(a[i]) * float64(b[i])
		aa += float64(a[i]) * float64(a[i])
		bb += float64(b[i]) * float64(b[i])
	}
	return ab / math.Sqrt(aa*bb)
}

// MaskAttackGBNF is issue 19's mask-cost attack on the grammar engine: 250 alternatives that
// each allow up to 1000 of nearly any character, so that no two parses merge, every position is
// a new state, and a mask must step every stack through most of a vocabulary's trie. It
// compiles only past the default element limit.
func MaskAttackGBNF() string {
	var sb strings.Builder
	sb.WriteString("root ::= ")
	for i := range 250 {
		if i > 0 {
			sb.WriteString(" | ")
		}
		sb.WriteString(`[^!\x00]{0,1000} "END"`)
	}
	return sb.String() + "\n"
}
