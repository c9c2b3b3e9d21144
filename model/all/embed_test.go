package all_test

import (
	"testing"

	"ubatch/engine"
	"ubatch/internal/testdata"
	"ubatch/internal/testmodel"
	"ubatch/runner"
)

// TestEmbeddingsMatchLlamaCpp: mean and last pooling of the final-norm hidden states equal
// llama-embedding's (cosine >= 0.999; measured in the log).
func TestEmbeddingsMatchLlamaCpp(t *testing.T) {
	m := load(t, "stories260K.gguf", false)
	c := testmodel.Session(t, m, runner.Options{NCtx: 256, Threads: 2, Embeddings: true})
	for _, it := range testdata.LoadEmbeddings(t) {
		t.Run(it.Pooling+"/"+it.Prompt, func(t *testing.T) {
			pool, err := engine.ParsePooling(it.Pooling)
			if err != nil {
				t.Fatal(err)
			}
			got, err := testmodel.Embed(c, m.Vocab.Encode(it.Prompt, true, false), pool)
			if err != nil {
				t.Fatal(err)
			}
			cos := testdata.Cosine(got, it.Embedding)
			if len(got) != len(it.Embedding) || cos < 0.999 {
				t.Fatalf("cosine %.5f with llama.cpp's embedding (len %d vs %d), want >= 0.999", cos, len(got), len(it.Embedding))
			}
			t.Logf("cosine %.6f", cos)
			if c.KV().Stats().Used != 0 {
				t.Errorf("Embed left KV blocks in use: %+v", c.KV().Stats())
			}
		})
	}
}
