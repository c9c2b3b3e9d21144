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
	// maxPiece is the most bytes of text one token stands for (the vocabulary's longest piece):
	// a text of more than n_ctx*maxPiece bytes is more than n_ctx tokens.
	maxPiece int
}

// NewPrompter reads the tokenizer and chat template from a model file's metadata. A chat template
// that is absent or does not parse is replaced by ChatML, as the node does.
func NewPrompter(f *gguf.File) (*Prompter, error) {
	v, err := tokenizer.FromGGUF(f)
	if err != nil {
		return nil, err
	}
	p := &Prompter{vocab: v, maxPiece: longestPiece(v)}
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
	Messages           json.RawMessage   `json:"messages"` // decoded lazily, a bounded prefix (see chatPrefix)
	Tools              []json.RawMessage `json:"tools"`
	ChatTemplateKwargs map[string]any    `json:"chat_template_kwargs"`
	CacheSalt          string            `json:"cache_salt"`
}

// parsed is what the router learned from a request body.
type parsed struct {
	stream bool
	tokens []int32 // the (first) prompt's tokens, or its leading ones (see whole); nil when unknown
	multi  bool    // several prompts: tokens is the first one's
	// whole is whether tokens is the whole prompt; a prompt longer than limits.prefixBytes is
	// routed by its leading tokens only.
	whole bool
	// textBytes is the length of a completion's prompt text (0 for tokens or chats), which
	// the router measures against the nodes' context before tokenizing anything.
	textBytes int
	// root is the routing hash its chain starts from: its cache_salt's (prefixhash.Salted), with
	// its tenant's part under Config.CacheSaltPerKey.
	root uint64
}

// parse reads a body for route path, tokenizing at most lim's bounded prefix of its prompt. A
// body the router cannot make sense of yields no tokens: the node then answers the client's
// error itself.
func (p *Prompter) parse(path string, body []byte, lim limits) parsed {
	var req request
	if json.Unmarshal(body, &req) != nil {
		return parsed{}
	}
	out := parsed{stream: req.Stream, root: prefixhash.Salted(prefixhash.TenantSalt(lim.tenant, req.CacheSalt))}
	switch path {
	case "/v1/completions", "/completions", "/completion":
		out.tokens, out.multi, out.whole, out.textBytes = p.completionTokens(req.Prompt, lim)
	case "/v1/chat/completions", "/chat/completions":
		out.tokens, out.whole = p.chatTokens(&req, lim)
	}
	return out
}

// completionTokens is the (first) prompt's tokens, its leading ones for a text longer than
// lim.prefixBytes (whole false), and the text's length in bytes.
func (p *Prompter) completionTokens(raw json.RawMessage, lim limits) (toks []int32, multi, whole bool, textBytes int) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if s == "" || (lim.ctxBytes > 0 && len(s) > lim.ctxBytes) {
			return nil, false, false, len(s) // too long for any node: the caller refuses it
		}
		toks, whole := p.encodePrefix(s, true, lim.prefixBytes)
		return toks, false, whole, len(s)
	}
	if json.Unmarshal(raw, &toks) == nil {
		if n := lim.prefixTokens(); len(toks) > n {
			return toks[:n:n], false, false, 0
		}
		return toks, false, true, 0
	}
	var list []json.RawMessage
	if json.Unmarshal(raw, &list) != nil || len(list) == 0 {
		return nil, false, false, 0
	}
	first, _, whole, n := p.completionTokens(list[0], lim)
	return first, len(list) > 1, whole, n
}

// chatTokens renders the leading messages of req (see chatPrefix) and tokenizes the text's
// leading lim.prefixBytes; whole is whether that is the whole prompt.
func (p *Prompter) chatTokens(req *request, lim limits) ([]int32, bool) {
	msgs, all, ok := chatPrefix(req.Messages, lim)
	if !ok || len(msgs) == 0 {
		return nil, false
	}
	var tools []any
	size := 0
	for _, t := range req.Tools {
		tools = append(tools, json.RawMessage(bytes.Clone(t)))
		size += len(t)
	}
	if size > lim.prefixBytes {
		// Tools render before the messages, and which of them fits is the template's to say:
		// routed by load, rather than render megabytes for a prefix.
		return nil, false
	}
	// The generation prompt ends the whole conversation only; a prefix of it stops at its last
	// message.
	text, err := p.tmpl.Render(msgs, chat.Options{BOS: p.bos, EOS: p.eos, AddGenerationPrompt: all,
		Tools: tools, Vars: req.ChatTemplateKwargs})
	if err != nil {
		return nil, false
	}
	toks, whole := p.encodePrefix(text, false, lim.prefixBytes)
	if p.vocab.AddBOS() && p.vocab.BOS() >= 0 && (p.bos == "" || !strings.HasPrefix(text, p.bos)) {
		toks = append([]int32{p.vocab.BOS()}, toks...)
	}
	return toks, whole && all
}
