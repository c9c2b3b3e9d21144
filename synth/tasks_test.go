package synth_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"ubatch/gguf"
	"ubatch/model"
	"ubatch/synth"
)

func openWriter(t *testing.T, w *gguf.Writer) (*model.Model, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "m.gguf")
	if err := w.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	m, err := model.Open(path)
	if err == nil {
		t.Cleanup(func() { m.Close() })
	}
	return m, err
}

// TestFIMFixture: a FIM model's vocabulary has the six tokens, named by the fim keys, and a
// plain one has none; FIM over a vocabulary without them is an error.
func TestFIMFixture(t *testing.T) {
	w, err := synth.TaskFixture("qwen3", "f32", true, false)
	if err != nil {
		t.Fatal(err)
	}
	m, err := openWriter(t, w)
	if err != nil {
		t.Fatal(err)
	}
	f := m.Vocab.FIM()
	got := []string{m.Vocab.Token(f.Pre), m.Vocab.Token(f.Suf), m.Vocab.Token(f.Mid), m.Vocab.Token(f.Pad), m.Vocab.Token(f.Rep), m.Vocab.Token(f.Sep)}
	if !slices.Equal(got, synth.FIMTokens) || f.Pre != 314 {
		t.Fatalf("FIM %+v: %v, want %v from id 314", f, got, synth.FIMTokens)
	}
	if id, ok := m.File.Uint("tokenizer.ggml.fim_mid_token_id"); !ok || int32(id) != f.Mid {
		t.Errorf("fim_mid_token_id = %d, %v; want %d", id, ok, f.Mid)
	}
	if m := openFixture(t, "qwen3", "f32"); m.Vocab.FIM().HasInfill() {
		t.Errorf("plain fixture has FIM tokens %+v", m.Vocab.FIM())
	}
	v, _ := synth.BuiltinVocab(320)
	if _, err := synth.Build(synth.Options{Arch: "llama", Shape: synth.Shapes[3], FileType: "f32", Vocab: v, FIM: true}); err == nil ||
		!strings.Contains(err.Error(), "no fill-in-the-middle tokens") {
		t.Errorf("FIM over a vocabulary without FIM tokens: %v", err)
	}
}

// TestRerankFixture: a reranker's head is bound with its labels (softmax for Qwen 3 only, as
// llama.cpp), its rerank template is stored, a plain model has no head, and a file that says
// rank without a head fails to load naming the tensor.
func TestRerankFixture(t *testing.T) {
	for _, arch := range []string{"qwen3", "llama3", "gemma3"} {
		w, err := synth.TaskFixture(arch, "q8_0", false, true)
		if err != nil {
			t.Fatal(err)
		}
		m, err := openWriter(t, w)
		if err != nil {
			t.Fatal(err)
		}
		h := m.RankHead()
		if h == nil || h.Classes() != 2 || !slices.Equal(h.Labels, synth.RerankLabels) || h.Softmax != (arch == "qwen3") {
			t.Fatalf("%s: rank head %+v", arch, h)
		}
		if s, _ := m.File.String("tokenizer.chat_template.rerank"); s != synth.RerankTemplate {
			t.Errorf("%s: rerank template %q", arch, s)
		}
		hidden := make([]float32, m.Hparams().Dim)
		hidden[0] = 1
		if sc := h.Scores(hidden); len(sc) != 2 || (h.Softmax && sc[0]+sc[1] < 0.999) {
			t.Errorf("%s: scores %v", arch, sc)
		}
	}
	if m := openFixture(t, "qwen3", "f32"); m.RankHead() != nil {
		t.Error("plain fixture has a rank head")
	}
	w, err := synth.Fixture("qwen3", "f32")
	if err != nil {
		t.Fatal(err)
	}
	w.Set("qwen3.pooling_type", uint32(4))
	if _, err := openWriter(t, w); err == nil || !strings.Contains(err.Error(), "cls.output.weight") {
		t.Errorf("rank without a head: %v", err)
	}
}
