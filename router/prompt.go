package router

import (
	"bytes"
	"encoding/json"
	"strings"

	"ubatch/chat"
	"ubatch/gguf"
	"ubatch/prefixhash"
	"ubatch/tokenizer"
)

// Prompter computes the prompt tokens a node computes for a request, from the model's tokenizer
// and chat template alone (no weights). It mirrors the node's handlers (server/openai.go
// promptTokens, server/chat.go chatParams): a difference only costs cache hits, never
// correctness, and the router counts it (ubatch_route_prompt_mismatch_total) when the node's
// usage disagrees.
type Prompter struct {
	vocab    *tokenizer.Tokenizer
	tmpl     *chat.Template
	bos, eos string
}

// NewPrompter reads the tokenizer and chat template from a model file's metadata. A chat template
// that is absent or does not parse is replaced by ChatML, as the node does.
func NewPrompter(f *gguf.File) (*Prompter, error) {
	v, err := tokenizer.FromGGUF(f)
	if err != nil {
		return nil, err
	}
	p := &Prompter{vocab: v}
	if v.BOS() >= 0 {
		p.bos = v.Token(v.BOS())
	}
	if v.EOS() >= 0 {
		p.eos = v.Token(v.EOS())
	}
	if src, ok := f.String("tokenizer.chat_template"); ok && src != "" {
		p.tmpl, _ = chat.Parse(src)
	}
	if p.tmpl == nil {
		p.tmpl = chat.Fallback()
	}
	return p, nil
}

// request holds the fields of a completion or chat body the router looks at.
type request struct {
	Stream             bool              `json:"stream"`
	Prompt             json.RawMessage   `json:"prompt"`
	Messages           []json.RawMessage `json:"messages"`
	Tools              []json.RawMessage `json:"tools"`
	ChatTemplateKwargs map[string]any    `json:"chat_template_kwargs"`
	CacheSalt          string            `json:"cache_salt"`
}

// parsed is what the router learned from a request body.
type parsed struct {
	stream bool
	tokens []int32 // the (first) prompt's tokens; nil when unknown
	multi  bool    // several prompts: tokens is the first one's
	root   uint64  // the routing hash its chain starts from: its cache_salt's (prefixhash.Salted)
}

// parse reads a body for route path. A body the router cannot make sense of yields no tokens:
// the node then answers the client's error itself.
func (p *Prompter) parse(path string, body []byte) parsed {
	var req request
	if json.Unmarshal(body, &req) != nil {
		return parsed{}
	}
	out := parsed{stream: req.Stream, root: prefixhash.Salted(req.CacheSalt)}
	switch path {
	case "/v1/completions", "/completions", "/completion":
		out.tokens, out.multi = p.completionTokens(req.Prompt)
	case "/v1/chat/completions", "/chat/completions":
		out.tokens = p.chatTokens(&req)
	}
	return out
}

func (p *Prompter) completionTokens(raw json.RawMessage) ([]int32, bool) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if s == "" {
			return nil, false
		}
		return p.vocab.Encode(s, true, true), false
	}
	var toks []int32
	if json.Unmarshal(raw, &toks) == nil {
		return toks, false
	}
	var list []json.RawMessage
	if json.Unmarshal(raw, &list) != nil || len(list) == 0 {
		return nil, false
	}
	first, _ := p.completionTokens(list[0])
	return first, len(list) > 1
}

func (p *Prompter) chatTokens(req *request) []int32 {
	if len(req.Messages) == 0 {
		return nil
	}
	msgs := make([]map[string]any, len(req.Messages))
	for i, m := range req.Messages {
		if json.Unmarshal(m, &msgs[i]) != nil || msgs[i] == nil {
			return nil
		}
	}
	var tools []any
	for _, t := range req.Tools {
		tools = append(tools, json.RawMessage(bytes.Clone(t)))
	}
	text, err := p.tmpl.Render(msgs, chat.Options{BOS: p.bos, EOS: p.eos, AddGenerationPrompt: true,
		Tools: tools, Vars: req.ChatTemplateKwargs})
	if err != nil {
		return nil
	}
	toks := p.vocab.Encode(text, false, true)
	if p.vocab.AddBOS() && p.vocab.BOS() >= 0 && (p.bos == "" || !strings.HasPrefix(text, p.bos)) {
		toks = append([]int32{p.vocab.BOS()}, toks...)
	}
	return toks
}
