package server

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync/atomic"

	"ubatch/engine"
	"ubatch/model"
	"ubatch/tokenizer"
)

// Reranker configures POST /v1/rerank: each (query, document) prompt goes to the engine as an
// embedding request (engine.SubmitEmbed, last pooling, not normalized), as Embedder's inputs do;
// a pair's score is the model's rank head (model.RankHead) over the last token's final-norm
// hidden state.
type Reranker struct {
	head     *model.RankHead
	template string          // tokenizer.chat_template.rerank, or ""
	nCtx     int             // longest prompt; 0: the engine's n_ctx_seq
	Priority engine.Priority // of its prompt chunks, as Embedder's
	// computed counts the pairs scored since the start (tests read it).
	computed atomic.Int64
}

// NewReranker configures reranking with m's head for prompts of at most nCtx tokens, at low
// priority. m must be a reranker: a file whose pooling type is rank, with a rank head.
func NewReranker(m *model.Model, nCtx int) (*Reranker, error) {
	head := m.RankHead()
	if head == nil {
		return nil, fmt.Errorf("%s is not a reranker (%s.pooling_type is not rank, 4, with a cls.output.weight head)", m.Name, m.Arch)
	}
	tmpl, _ := m.File.String("tokenizer.chat_template.rerank")
	return &Reranker{head: head, template: tmpl, nCtx: nCtx, Priority: engine.PriorityLow}, nil
}

// scoreAll scores each prompt in the engine, in order; when ctx ends it stops with
// context.Cause(ctx).
func (s *Server) scoreAll(ctx context.Context, rr *Reranker, prompts [][]int32) ([]float32, error) {
	hidden, err := s.Embed(ctx, prompts, engine.PoolLast, false, rr.Priority, "", &rr.computed)
	if err != nil {
		return nil, err
	}
	out := make([]float32, len(hidden))
	for i, h := range hidden {
		out[i] = rr.head.Score(h)
	}
	return out, nil
}

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
func (s *Server) handleRerank(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Model.RankHead() == nil {
		WriteError(w, &APIError{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: "model", Code: "model_not_reranker",
			Message: fmt.Sprintf("model %s is not a reranker: its %s.pooling_type is not rank (4) with a cls.output.weight head", s.cfg.ModelID, s.cfg.Model.Arch)})
		return
	}
	rr := s.cfg.Reranker
	if rr == nil {
		WriteError(w, NotFound("reranking is off: start the server with --rerank"))
		return
	}
	var req rerankRequest
	release, err := s.DecodeParsed(w, r, &req)
	if err != nil {
		WriteError(w, err)
		return
	}
	docs, tei := req.Documents, req.Texts != nil && req.Documents == nil
	if tei {
		docs = req.Texts
	}
	prompts, err := s.rerankPrompts(rr, &req, docs)
	release()
	if err != nil {
		WriteError(w, err)
		return
	}
	scores, err := s.scoreAll(r.Context(), rr, prompts)
	if err != nil {
		WriteError(w, err)
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
		WriteJSON(w, http.StatusOK, results)
		return
	}
	WriteJSON(w, http.StatusOK, rerankResponse{Model: s.cfg.ModelID, Object: "list", Usage: usage, Results: results})
}

// rerankPrompts checks the request and tokenizes every pair before any is scored, so that a
// request over a limit costs no compute.
func (s *Server) rerankPrompts(rr *Reranker, req *rerankRequest, docs []string) ([][]int32, error) {
	switch {
	case req.Query == nil:
		return nil, BadRequest("query", "query is required")
	case len(docs) == 0:
		return nil, BadRequest("documents", "documents must be a non-empty list of strings")
	case req.TopN != nil && *req.TopN < 1:
		return nil, BadRequest("top_n", "top_n must be >= 1, got %d", *req.TopN)
	}
	if limit := orDefault(s.cfg.MaxEmbeddingInputs, DefaultMaxEmbeddingInputs); len(docs) > limit {
		return nil, BadRequest("documents", "documents has %d items; this server ranks at most %d per request "+
			"(--max-embedding-inputs): split the request", len(docs), limit)
	}
	limit := orDefault(s.cfg.MaxEmbeddingTokens, DefaultMaxEmbeddingTokens)
	if err := s.CheckText("query", len(*req.Query)); err != nil {
		return nil, err
	}
	out := make([][]int32, 0, len(docs))
	total := 0
	for i, d := range docs {
		if err := s.CheckText("documents", len(d)); err != nil {
			return nil, err
		}
		toks := rerankPrompt(s.cfg.Model.Vocab, rr.template, *req.Query, d)
		if len(toks) == 0 {
			return nil, BadRequest("documents", "documents[%d] and the query are empty", i)
		}
		if len(toks) > s.EmbedCtx(rr.nCtx) {
			return nil, &APIError{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: "documents", Code: "context_length_exceeded",
				Message: fmt.Sprintf("documents[%d] with the query is %d tokens, more than the rerank context of %d", i, len(toks), s.EmbedCtx(rr.nCtx))}
		}
		if total += len(toks); total > limit {
			return nil, BadRequest("documents", "the documents with the query have more than %d tokens in all (%d in the first %d); this "+
				"server ranks at most %d per request (--max-embedding-tokens): split the request", limit, total, i+1, limit)
		}
		out = append(out, toks)
	}
	return out, nil
}
