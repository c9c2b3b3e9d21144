package router

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"ubatch/internal/httpauth"
	"ubatch/tokenizer"
)

// What the router parses of a request is bounded, since it renders and tokenizes prompts itself
// and a client chooses their size. To route by prefix it needs the prompt's leading blocks only:
// it decodes the leading messages of a chat, renders them, and tokenizes the text's leading
// Config.PrefixBytes; the node judges the rest. Config.ParseBudget bounds the body bytes being
// parsed at once: a request beyond it is routed by load, unparsed, rather than refused.

// Defaults of Config's parse bounds.
const (
	// DefaultPrefixBytes is Config.PrefixBytes's default: 32 KiB of prompt text, some 8,000
	// tokens, beyond what most prompts share with others (system prompts, tools, documents).
	DefaultPrefixBytes = 32 << 10
	// DefaultParseBudget is Config.ParseBudget's default: sixteen bodies of the default
	// --max-body parsed at once.
	DefaultParseBudget = 64 << 20
	// maxParsedMessages and maxParsedParts bound the messages of a chat, and the content parts
	// of a message, that the router decodes for its prefix (the node checks the whole request).
	maxParsedMessages = 512
	maxParsedParts    = 64
	// tailTokens are dropped from the end of a cut prefix: cutting text inside a word (or a
	// special token's text) changes its last tokens, which then hash to no cached block.
	tailTokens = 16
)

// limits bound what parse reads of one request.
type limits struct {
	prefixBytes int // leading bytes of a prompt's text that are tokenized (positive)
	maxMessages int // leading messages of a chat decoded
	maxParts    int // leading content parts of a message decoded
	// ctxBytes is the longest completion prompt text that may fit a node's context (its n_ctx
	// times the vocabulary's longest piece); 0 = unknown, no bound.
	ctxBytes int
	// tenant is the request's bearer token under Config.CacheSaltPerKey ("" otherwise): the
	// tenant part of its salt, as the nodes' (prefixhash.TenantSalt).
	tenant string
}

// prefixTokens bounds a prompt given as tokens: about as many as prefixBytes of English text.
func (l limits) prefixTokens() int { return max(l.prefixBytes/4, 1) }

// encodePrefix tokenizes text, or its leading limit bytes when it is longer (whole false),
// without the last tailTokens tokens of the cut, which may differ from the whole text's.
func (p *Prompter) encodePrefix(text string, addSpecial bool, limit int) (toks []int32, whole bool) {
	if len(text) <= limit {
		return p.vocab.Encode(text, addSpecial, true), true
	}
	toks = p.vocab.Encode(cutUTF8(text, limit), addSpecial, true)
	return toks[:max(0, len(toks)-tailTokens)], false
}

// cutUTF8 is s cut to at most n bytes, at the start of a character.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// chatPrefix decodes the leading messages of raw (a JSON array of messages) that start within
// lim.prefixBytes of it, at most lim.maxMessages, each message's content cut to
// lim.prefixBytes and lim.maxParts parts. all is whether that is every message, whole. ok is
// false for what is not an array of objects: the node answers such a request.
func chatPrefix(raw json.RawMessage, lim limits) (msgs []map[string]any, all, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('[') {
		return nil, false, false
	}
	all = true
	for dec.More() {
		if len(msgs) >= lim.maxMessages || dec.InputOffset() > int64(lim.prefixBytes) {
			return msgs, false, true
		}
		var m map[string]any
		if dec.Decode(&m) != nil || m == nil {
			return nil, false, false
		}
		if cutContent(m, lim) {
			all = false
		}
		msgs = append(msgs, m)
		if !all {
			break
		}
	}
	return msgs, all, true
}

// cutContent cuts message m's content to lim.prefixBytes of text and lim.maxParts parts, and
// reports whether it cut anything. The text a template renders from the cut message begins as
// the whole message's does for longer than the prefix the router tokenizes.
func cutContent(m map[string]any, lim limits) bool {
	switch c := m["content"].(type) {
	case string:
		if len(c) > lim.prefixBytes {
			m["content"] = cutUTF8(c, lim.prefixBytes)
			return true
		}
	case []any:
		cut := false
		if len(c) > lim.maxParts {
			c, cut = c[:lim.maxParts], true
			m["content"] = c
		}
		for _, part := range c {
			if pm, ok := part.(map[string]any); ok {
				if s, ok := pm["text"].(string); ok && len(s) > lim.prefixBytes {
					pm["text"], cut = cutUTF8(s, lim.prefixBytes), true
				}
			}
		}
		return cut
	}
	return false
}

// longestPiece is the most bytes of text one token of v stands for.
func longestPiece(v *tokenizer.Tokenizer) int {
	n := 1
	for id := range v.VocabSize() {
		// Token is a piece's text as the vocabulary spells it (a special token's whole text, a
		// byte-level BPE piece's bytes as longer runes); Piece its decoded bytes.
		n = max(n, len(v.Token(int32(id))), len(v.Piece(int32(id))))
	}
	return n
}

// byteBudget is a weighted semaphore of bytes that never waits: tryAcquire takes n bytes if
// they fit under max.
type byteBudget struct {
	max  int64
	used atomic.Int64
}

func (b *byteBudget) tryAcquire(n int64) bool {
	for {
		u := b.used.Load()
		if u+n > b.max {
			return false
		}
		if b.used.CompareAndSwap(u, u+n) {
			return true
		}
	}
}

func (b *byteBudget) release(n int64) { b.used.Add(-n) }

// A refused body is drained, as nginx's lingering close does: closing a connection with unread
// data resets it, and a client still sending its body would see ECONNRESET, not the 413.
const (
	maxDrain  = 8 << 20         // bytes of a refused body read and discarded at most
	drainTime = 5 * time.Second // how long they may take
)

// refuseTooLarge answers 413 request_too_large with msg and closes the connection after reading
// what the client still sends of the body from src (the request's own body, not a
// MaxBytesReader over it), up to maxDrain bytes or drainTime.
func refuseTooLarge(w http.ResponseWriter, src io.Reader, msg string) {
	rc := http.NewResponseController(w)
	_ = rc.EnableFullDuplex() // HTTP/1 lets a handler read the body after answering only so
	w.Header().Set("Connection", "close")
	writeError(w, http.StatusRequestEntityTooLarge, "invalid_request_error", "request_too_large", msg)
	_ = rc.Flush()
	_ = rc.SetReadDeadline(time.Now().Add(drainTime))
	_, _ = io.CopyN(io.Discard, src, maxDrain)
}

// parse reads the prompt of a completion or chat body within the parse bounds (see the top of
// this file), or answers the client itself and reports false: a completion prompt text longer
// than every node's context could hold is a 400 before it is tokenized.
func (r *Router) parse(w http.ResponseWriter, req *http.Request, body []byte) (parsed, bool) {
	p, ref := r.parseBody(req.URL.Path, httpauth.Bearer(req), body)
	if ref != nil {
		writeParamError(w, ref.status, ref.typ, ref.code, ref.param, ref.msg)
		return parsed{}, false
	}
	return p, true
}

// refusal is a client's error the router answers itself, in OpenAI's error shape.
type refusal struct {
	status                int
	typ, code, param, msg string
}

// parseBody is parse for a body sent to path with bearer token bearer ("" for none): the
// prompt's (leading) tokens, or the refusal to answer instead of routing.
func (r *Router) parseBody(path, bearer string, body []byte) (parsed, *refusal) {
	size := int64(len(body))
	if !r.budget.tryAcquire(size) {
		r.m.parses.WithLabelValues("over_budget").Inc()
		return parsed{}, nil
	}
	defer r.budget.release(size)
	lim := limits{prefixBytes: r.cfg.PrefixBytes, maxMessages: maxParsedMessages, maxParts: maxParsedParts}
	nctx := r.nodeContext()
	if nctx > 0 {
		lim.ctxBytes = nctx * r.cfg.Prompter.maxPiece
	}
	if r.cfg.CacheSaltPerKey {
		lim.tenant = bearer
	}
	p := r.cfg.Prompter.parse(path, body, lim)
	if lim.ctxBytes > 0 && p.textBytes > lim.ctxBytes {
		r.m.rejected.WithLabelValues("context_length").Inc()
		return parsed{}, &refusal{http.StatusBadRequest, "invalid_request_error", "context_length_exceeded", "prompt",
			fmt.Sprintf("the prompt is %d bytes, more than the %d tokens of the nodes' context can hold (a token is at most %d bytes "+
				"of this model's text): shorten it", p.textBytes, nctx, r.cfg.Prompter.maxPiece)}
	}
	switch {
	case p.whole:
		r.m.parses.WithLabelValues("whole").Inc()
	case p.tokens != nil:
		r.m.parses.WithLabelValues("prefix").Inc()
	}
	return p, nil
}
