package all_test

import (
	"encoding/json"
	"math"
	"testing"

	"ubatch/internal/testdata"
	"ubatch/internal/testmodel"
	"ubatch/runner"
)

// embeddingRefs reads llama.cpp's sentence embeddings of stories260K.
func embeddingRefs(t testing.TB) []struct {
	Prompt    string    `json:"prompt"`
	Pooling   string    `json:"pooling"`
	Embedding []float32 `json:"embedding"`
} {
	var ref struct {
		Items []struct {
			Prompt    string    `json:"prompt"`
			Pooling   string    `json:"pooling"`
			Embedding []float32 `json:"embedding"`
		} `json:"items"`
	}
	if err := json.Unmarshal(testdata.ReadFile(t, "reference/stories260K.embeddings.json"), &ref); err != nil {
		t.Fatal(err)
	}
	return ref.Items
}

func cosine(a, b []float32) float64 {
	var ab, aa, bb float64
	for i := range a {
		ab += float64(a[i]) * float64(b[i])
		aa += float64(a[i]) * float64(a[i])
		bb += float64(b[i]) * float64(b[i])
	}
	return ab / math.Sqrt(aa*bb)
}

// TestEmbeddingsMatchLlamaCpp: mean and last pooling of the final-norm hidden states equal
// llama-embedding's (cosine >= 0.999; measured in the log).
func TestEmbeddingsMatchLlamaCpp(t *testing.T) {
	m := load(t, "stories260K.gguf", false)
	c := testmodel.Runtime(t, m, runner.Options{NCtx: 256, Threads: 2, Embeddings: true})
	for _, it := range embeddingRefs(t) {
		t.Run(it.Pooling+"/"+it.Prompt, func(t *testing.T) {
			pool, err := runner.ParsePooling(it.Pooling)
			if err != nil {
				t.Fatal(err)
			}
			got, err := runner.Embed(c, m.Vocab.Encode(it.Prompt, true, false), pool)
			if err != nil {
				t.Fatal(err)
			}
			cos := cosine(got, it.Embedding)
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
