package openai

import (
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"

	"ubatch/server"
	"ubatch/tokenizer"
)

// rerankPrompt is llama-server's prompt of one pair. With the model's rerank template (Qwen 3
// rerankers carry one), {query} and {document} are filled in and the text is tokenized with its
// special tokens, as llama-server does; but when the query or the document itself holds a
// special token's text, the template's pieces are tokenized with special tokens and the
// client's text without, so that a document cannot close the template's turn and write its own
// verdict (the tokens at the seams may then differ from llama-server's). Without a template:
// BOS (if the vocabulary adds it), the query, EOS (if it adds EOS), the document, EOS (idem);
// llama-server's separator token is left out, as no family ubatch runs has one.
func rerankPrompt(v *tokenizer.Tokenizer, template, query, doc string) []int32 {
	if template == "" {
		var out []int32
		if v.AddBOS() {
			out = append(out, v.BOS())
		}
		out = append(out, v.Encode(query, false, false)...)
		if v.AddEOS() {
			out = append(out, v.EOS())
		}
		out = append(out, v.Encode(doc, false, false)...)
		if v.AddEOS() {
			out = append(out, v.EOS())
		}
		return out
	}
	plain := func(s string) bool { return slices.Equal(v.Encode(s, false, true), v.Encode(s, false, false)) }
	if plain(query) && plain(doc) {
		return v.Encode(strings.NewReplacer("{query}", query, "{document}", doc).Replace(template), false, true)
	}
	var out []int32
	rest := template
	for rest != "" {
		i, j := strings.Index(rest, "{query}"), strings.Index(rest, "{document}")
		at, hole, text := i, "{query}", query
		if i < 0 || (j >= 0 && j < i) {
			at, hole, text = j, "{document}", doc
		}
		if at < 0 {
			out = append(out, v.Encode(rest, false, true)...)
			break
		}
		out = append(out, v.Encode(rest[:at], false, true)...)
		out = append(out, v.Encode(text, false, false)...)
		rest = rest[at+len(hole):]
	}
	return out
}

// rerankRequest is the body of POST /v1/rerank: Jina's and Cohere's shape, or Hugging Face
// TEI's (texts instead of documents; the answer is then a bare list), as llama-server takes.
type rerankRequest struct {
	Model      string   `json:"model"`
	Query      *string  `json:"query"`
	Documents  []string `json:"documents"`
	Texts      []string `json:"texts"`
	TopN       *int     `json:"top_n"`
	ReturnText bool     `json:"return_text"` // TEI: each result carries its text
}

type rerankResult struct {
	Index          int      `json:"index"`
	RelevanceScore *float32 `json:"relevance_score,omitempty"`
	Score          *float32 `json:"score,omitempty"` // TEI's name
	Text           *string  `json:"text,omitempty"`
}

type rerankResponse struct {
	Model   string         `json:"model"`
	Object  string         `json:"object"`
	Usage   usageTokens    `json:"usage"`
	Results []rerankResult `json:"results"`
}

type usageTokens struct {
	PromptTokens int `json:"prompt_tokens"`
	TotalTokens  int `json:"total_tokens"`
}

// handleRerank is llama-server's POST /v1/rerank (also /rerank, /reranking, /v1/reranking): the
// score of each document against the query, sorted best first, the first top_n of them. The
// embedding caps bound it: documents per request (--max-embedding-inputs) and their prompts'
// tokens in all (--max-embedding-tokens), each prompt within the rerank context.
func (a *api) handleRerank(w http.ResponseWriter, r *http.Request) {
	cfg := a.Config()
	if cfg.Model.RankHead() == nil {
		server.WriteError(w, &server.APIError{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: "model", Code: "model_not_reranker",
			Message: fmt.Sprintf("model %s is not a reranker: its %s.pooling_type is not rank (4) with a cls.output.weight head", cfg.ModelID, cfg.Model.Arch)})
		return
	}
	rr := cfg.Reranker
	if rr == nil {
		server.WriteError(w, server.NotFound("reranking is off: start the server with --rerank"))
		return
	}
	var req rerankRequest
	release, err := a.DecodeParsed(w, r, &req)
	if err != nil {
		server.WriteError(w, err)
		return
	}
	docs, tei := req.Documents, req.Texts != nil && req.Documents == nil
	if tei {
		docs = req.Texts
	}
	prompts, err := rerankPrompts(a.Server, rr, &req, docs)
	release()
	if err != nil {
		server.WriteError(w, err)
		return
	}
	scores, err := a.Score(r.Context(), rr, prompts)
	if err != nil {
		server.WriteError(w, err)
		return
	}
	results := make([]rerankResult, len(scores))
	var usage usageTokens
	for i := range scores {
		results[i] = rerankResult{Index: i, RelevanceScore: &scores[i]}
		if tei {
			results[i].RelevanceScore, results[i].Score = nil, &scores[i]
			if req.ReturnText {
				results[i].Text = &docs[i]
			}
		}
		usage.PromptTokens += len(prompts[i])
	}
	usage.TotalTokens = usage.PromptTokens
	sort.SliceStable(results, func(i, j int) bool { return scores[results[i].Index] > scores[results[j].Index] })
	if req.TopN != nil {
		results = results[:min(*req.TopN, len(results))]
	}
	if tei {
		server.WriteJSON(w, http.StatusOK, results)
		return
	}
	server.WriteJSON(w, http.StatusOK, rerankResponse{Model: cfg.ModelID, Object: "list", Usage: usage, Results: results})
}

// rerankPrompts checks the request and tokenizes every pair before any is scored, so that a
// request over a limit costs no compute.
func rerankPrompts(s *server.Server, rr *server.Reranker, req *rerankRequest, docs []string) ([][]int32, error) {
	switch {
	case req.Query == nil:
		return nil, server.BadRequest("query", "query is required")
	case len(docs) == 0:
		return nil, server.BadRequest("documents", "documents must be a non-empty list of strings")
	case req.TopN != nil && *req.TopN < 1:
		return nil, server.BadRequest("top_n", "top_n must be >= 1, got %d", *req.TopN)
	}
	if limit := s.MaxEmbeddingInputs(); len(docs) > limit {
		return nil, server.BadRequest("documents", "documents has %d items; this server ranks at most %d per request "+
			"(--max-embedding-inputs): split the request", len(docs), limit)
	}
	limit := s.MaxEmbeddingTokens()
	if err := s.CheckText("query", len(*req.Query)); err != nil {
		return nil, err
	}
	out := make([][]int32, 0, len(docs))
	total := 0
	for i, d := range docs {
		if err := s.CheckText("documents", len(d)); err != nil {
			return nil, err
		}
		toks := rerankPrompt(s.Config().Model.Vocab, rr.Template(), *req.Query, d)
		if len(toks) == 0 {
			return nil, server.BadRequest("documents", "documents[%d] and the query are empty", i)
		}
		if len(toks) > s.EmbedCtx(rr.NCtx()) {
			return nil, &server.APIError{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: "documents", Code: "context_length_exceeded",
				Message: fmt.Sprintf("documents[%d] with the query is %d tokens, more than the rerank context of %d", i, len(toks), s.EmbedCtx(rr.NCtx()))}
		}
		if total += len(toks); total > limit {
			return nil, server.BadRequest("documents", "the documents with the query have more than %d tokens in all (%d in the first %d); this "+
				"server ranks at most %d per request (--max-embedding-tokens): split the request", limit, total, i+1, limit)
		}
		out = append(out, toks)
	}
	return out, nil
}
