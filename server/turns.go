package server

import (
	"container/list"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"
)

// A chat client continues a conversation by sending it again with the assistant's reply and a
// new message. Rendered and tokenized again, the reply's text need not come back as the tokens
// the model generated (a model may write a word in tokens the tokenizer would not choose), and
// from the first difference on the prefix cache has nothing: the reply and the new message are
// computed again. turnMemo keeps, for recent chat completions, the text of the conversation as
// the model saw it (rendered prompt, then reply) with its tokens (prompt tokens, then the
// generated ones); a request whose rendered prompt starts with such a text gets those tokens
// for it, followed by its own tokens for the rest (reuseTurn), so that the KV cache holds its
// whole history and only the new message is computed.
type turnMemo struct {
	mu       sync.Mutex
	byKey    map[string]*list.Element // of *turnEntry
	lru      list.List                // most recently used first
	bytes    int
	maxBytes int
	maxItems int
}

type turnEntry struct {
	key    string  // the conversation's text: rendered prompt and reply
	tokens []int32 // its tokens: the prompt's and the generated ones; read only
}

// Bounds of the turn memory: conversations are kept least recently used first out, within
// these many entries and bytes (texts and tokens).
const (
	defaultTurnEntries = 1024
	defaultTurnBytes   = 64 << 20
)

func newTurnMemo(maxItems, maxBytes int) *turnMemo {
	return &turnMemo{byKey: map[string]*list.Element{}, maxItems: maxItems, maxBytes: maxBytes}
}

func (e *turnEntry) size() int { return len(e.key) + 4*len(e.tokens) }

// put remembers that key tokenizes, as the model saw it, to tokens (kept, not copied). An entry
// larger than the whole memory is not kept.
func (m *turnMemo) put(key string, tokens []int32) {
	e := &turnEntry{key: key, tokens: tokens}
	if key == "" || e.size() > m.maxBytes {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if el, ok := m.byKey[key]; ok {
		m.bytes -= el.Value.(*turnEntry).size()
		m.lru.Remove(el)
	}
	m.byKey[key] = m.lru.PushFront(e)
	m.bytes += e.size()
	for m.bytes > m.maxBytes || m.lru.Len() > m.maxItems {
		old := m.lru.Back()
		oe := old.Value.(*turnEntry)
		m.lru.Remove(old)
		delete(m.byKey, oe.key)
		m.bytes -= oe.size()
	}
}

func (m *turnMemo) empty() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lru.Len() == 0
}

// get returns the tokens remembered for key (read only), or nil.
func (m *turnMemo) get(key string) []int32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	el, ok := m.byKey[key]
	if !ok {
		return nil
	}
	m.lru.MoveToFront(el)
	return el.Value.(*turnEntry).tokens
}

// maxTurnTries bounds the assistant messages, latest first, that reuseTurn looks up.
const maxTurnTries = 4

// reuseTurn returns the tokens of a chat prompt: text is the rendered conversation, full its
// tokenization, messages its request's messages (checked by RenderChat already). When text starts with a remembered conversation (a previous
// completion's prompt and reply, ending at the content of one of msgs' assistant messages), it
// returns that conversation's tokens followed by the tokenization of the rest of text, provided
// full ends with the same tokens (no token spans the seam, so the rest means what it meant in
// full); otherwise full. The second result is how many tokens came from the memory. ns is the
// request's cache namespace (turnNamespace): conversations are remembered and found within it.
func (s *Server) reuseTurn(ns, text string, full []int32, messages json.RawMessage) ([]int32, int) {
	if s.turns == nil || s.turns.empty() {
		return full, 0
	}
	var msgs []struct {
		Role    string `json:"role"`
		Content any    `json:"content"`
	}
	if json.Unmarshal(messages, &msgs) != nil {
		return full, 0
	}
	tries := 0
	for i := len(msgs) - 1; i >= 0 && tries < maxTurnTries; i-- {
		c, _ := msgs[i].Content.(string)
		if msgs[i].Role != "assistant" || c == "" {
			continue
		}
		tries++
		at := strings.LastIndex(text, c)
		if at < 0 {
			continue
		}
		end := at + len(c)
		known := s.turns.get(ns + text[:end])
		if known == nil {
			continue
		}
		rest := s.cfg.Model.Vocab.EncodeContinuation(text[end:])
		if len(rest) > len(full) || !slices.Equal(full[len(full)-len(rest):], rest) {
			return full, 0
		}
		return append(slices.Clip(known), rest...), len(known)
	}
	return full, 0
}

// rememberTurn returns the hook that remembers a chat completion's conversation when it ends:
// text and prompt are the rendered prompt and its tokens; the hook gets the reply's text and
// generated tokens (nil when the memory is off). ns is as for reuseTurn.
func (s *Server) rememberTurn(ns, text string, prompt []int32) func(reply string, ids []int32) {
	if s.turns == nil {
		return nil
	}
	return func(reply string, ids []int32) {
		if reply == "" {
			return
		}
		s.turns.put(ns+text+asSent(reply), append(slices.Clip(prompt), ids...))
	}
}

// turnNamespace is the turn memory's namespace of a request with cache_salt salt in ctx: its
// salt's key, "" unsalted. A remembered turn changes the tokens of the conversation that
// continues it (and so its prompt_tokens), which would tell a client of another salt that this
// conversation took place.
func turnNamespace(ctx context.Context, salt string) string {
	if k := requestSalt(ctx, salt); !k.IsZero() {
		return string(k.Key[:])
	}
	return ""
}

// asSent is reply as the client read it, and so as it comes back in the next turn: JSON
// encoding replaces every byte that is not UTF-8 (a model may write a character's bytes out
// of order, or a lone one) with U+FFFD. The tokens stay the model's.
func asSent(reply string) string {
	if utf8.ValidString(reply) {
		return reply
	}
	var b strings.Builder
	for i := 0; i < len(reply); {
		r, n := utf8.DecodeRuneInString(reply[i:])
		if r == utf8.RuneError && n == 1 {
			b.WriteRune(utf8.RuneError)
		} else {
			b.WriteString(reply[i : i+n])
		}
		i += n
	}
	return b.String()
}
