package server

import (
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"

	"ubatch/batch"
	"ubatch/internal/testmodel"
	"ubatch/quant"
	"ubatch/runner"
	"ubatch/synth"
)

// directScore is a pair's score computed apart from the server's path: the prompt llama-server
// builds from the rerank template (filled in, tokenized with special tokens), decoded in an
// embeddings context, the last token's hidden state dotted with cls.output.weight's rows as
// dequantized from the file, and for Qwen 3 the softmax over the two classes (llama.cpp's).
func directScore(t *testing.T, e *testEnv, query, doc string) float64 {
	t.Helper()
	m := e.model
	text := strings.ReplaceAll(strings.ReplaceAll(synth.RerankTemplate, "{query}", query), "{document}", doc)
	toks := m.Vocab.Encode(text, false, true)
	c := testmodel.Session(t, m, runner.Options{NCtx: 512, NBatch: 512, NUBatch: 512, Threads: 1, Embeddings: true})
	var b batch.Batch
	for i, tok := range toks {
		b.Add(tok, int32(i), []int32{0}, i == len(toks)-1)
	}
	if err := c.Decode(&b); err != nil {
		t.Fatal(err)
	}
	hidden := c.Embedding(len(toks) - 1)
	ti, ok := m.File.Tensor("cls.output.weight")
	if !ok {
		t.Fatal("no cls.output.weight")
	}
	dim := int(ti.Dims[0])
	w := make([]float32, dim*int(ti.Dims[1]))
	if err := quant.Dequantize(ti.Type, ti.Data, w); err != nil {
		t.Fatal(err)
	}
	logits := make([]float64, ti.Dims[1])
	for r := range logits {
		for i, h := range hidden {
			logits[r] += float64(w[r*dim+i]) * float64(h)
		}
	}
	if m.Arch != "qwen3" {
		return logits[0]
	}
	return 1 / (1 + math.Exp(logits[1]-logits[0]))
}

type rerankJSON struct {
	Model   string `json:"model"`
	Object  string `json:"object"`
	Results []struct {
		Index          int      `json:"index"`
		RelevanceScore *float64 `json:"relevance_score"`
		Score          *float64 `json:"score"`
		Text           *string  `json:"text"`
	} `json:"results"`
	Usage struct {
		PromptTokens int `json:"prompt_tokens"`
		TotalTokens  int `json:"total_tokens"`
	} `json:"usage"`
}

// TestRerankEndpoint: every document's score equals the direct computation, the results are
// sorted best first and cut at top_n, usage counts every pair's tokens; the other three route
// names answer the same, and TEI's texts get a bare list with score and text.
func TestRerankEndpoint(t *testing.T) {
	docs := []string{"a b c", "the cat sat", "zz yy", "a", "q r s t u v"}
	for _, arch := range []string{"qwen3", "llama3"} {
		t.Run(arch, func(t *testing.T) {
			e := synthEnv(t, synthOptions{arch: arch, rerank: true, serveRerank: true})
			want := make([]float64, len(docs))
			tokens := 0
			for i, d := range docs {
				want[i] = directScore(t, e, "what sat", d)
				// The template filled in and tokenized whole, as llama-server does (no special text).
				tokens += len(e.model.Vocab.Encode(strings.NewReplacer("{query}", "what sat", "{document}", d).Replace(synth.RerankTemplate), false, true))
			}
			order := []int{0, 1, 2, 3, 4}
			slices.SortStableFunc(order, func(a, b int) int { return -cmpFloat(want[a], want[b]) })
			var got rerankJSON
			e.PostJSON("/v1/rerank", map[string]any{"model": "x", "query": "what sat", "documents": docs, "top_n": 3}, http.StatusOK, &got)
			if got.Object != "list" || got.Model != "synth" || len(got.Results) != 3 || got.Usage.PromptTokens != tokens || got.Usage.TotalTokens != tokens {
				t.Fatalf("response %+v (want 3 results, %d tokens)", got, tokens)
			}
			for k, r := range got.Results {
				if r.Index != order[k] || r.RelevanceScore == nil || math.Abs(*r.RelevanceScore-want[r.Index]) > 1e-4*max(1, math.Abs(want[r.Index])) {
					t.Errorf("result %d: %+v, want index %d score %v (all: %v)", k, r, order[k], want[order[k]], want)
				}
			}
			if arch == "qwen3" && (want[0] <= 0 || want[0] >= 1) {
				t.Errorf("qwen3 scores are probabilities: %v", want)
			}
			for _, p := range []string{"/rerank", "/reranking", "/v1/reranking"} {
				var all rerankJSON
				e.PostJSON(p, map[string]any{"query": "what sat", "documents": docs}, http.StatusOK, &all)
				if len(all.Results) != len(docs) || all.Results[0].Index != order[0] {
					t.Errorf("%s: %+v", p, all)
				}
			}
			var tei []struct {
				Index int      `json:"index"`
				Score *float64 `json:"score"`
				Text  string   `json:"text"`
			}
			e.PostJSON("/rerank", map[string]any{"query": "what sat", "texts": docs, "return_text": true, "top_n": 1}, http.StatusOK, &tei)
			if len(tei) != 1 || tei[0].Index != order[0] || tei[0].Score == nil || tei[0].Text != docs[order[0]] {
				t.Errorf("TEI: %+v", tei)
			}
		})
	}
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// TestRerankErrors: a model that is not a reranker is a 400 naming model; a reranker served
// without --rerank is a 404; the caps, a missing query, no documents and top_n 0 are 400s naming
// the field, before anything is scored.
func TestRerankErrors(t *testing.T) {
	var eb errorBody
	synthEnv(t, synthOptions{}).PostJSON("/v1/rerank", map[string]any{"query": "q", "documents": []string{"d"}}, http.StatusBadRequest, &eb)
	if eb.Error.Param == nil || *eb.Error.Param != "model" || !strings.Contains(eb.Error.Message, "not a reranker") {
		t.Errorf("not a reranker: %+v", eb.Error)
	}
	synthEnv(t, synthOptions{rerank: true}).PostJSON("/v1/rerank", map[string]any{"query": "q", "documents": []string{"d"}}, http.StatusNotFound, &eb)
	if !strings.Contains(eb.Error.Message, "--rerank") {
		t.Errorf("off: %+v", eb.Error)
	}
	e := synthEnv(t, synthOptions{rerank: true, serveRerank: true, cfg: Config{MaxEmbeddingInputs: 3, MaxEmbeddingTokens: 900}})
	for _, tc := range []struct {
		body  map[string]any
		param string
	}{
		{map[string]any{"documents": []string{"d"}}, "query"},
		{map[string]any{"query": "q", "documents": []string{}}, "documents"},
		{map[string]any{"query": "q", "documents": []string{"a", "b", "c", "d"}}, "documents"},
		{map[string]any{"query": "q", "documents": []string{"a", "b", "c"}}, "documents"}, // 3 × 318 template tokens > 900
		{map[string]any{"query": "q", "documents": []string{strings.Repeat("a b ", 200)}}, "documents"},
		{map[string]any{"query": "q", "documents": []string{"a"}, "top_n": 0}, "top_n"},
	} {
		var eb errorBody
		e.PostJSON("/v1/rerank", tc.body, http.StatusBadRequest, &eb)
		if eb.Error.Param == nil || *eb.Error.Param != tc.param {
			t.Errorf("%v: %+v, want param %s", tc.body, eb.Error, tc.param)
		}
	}
	if n := e.srv.cfg.Reranker.computed.Load(); n != 0 {
		t.Errorf("%d pairs scored by refused requests", n)
	}
}
