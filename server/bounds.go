package server

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"golang.org/x/sync/semaphore"
)

// Bounds on the text a request brings before it is rendered or tokenized: whatever a client
// sizes is measured against what can fit first, and the work in flight has a budget.
const (
	// DefaultMaxMessages caps the messages of one chat request (400 naming messages beyond it).
	DefaultMaxMessages = 4096
	// DefaultMaxContentParts caps the content parts of one message.
	DefaultMaxContentParts = 256
	// DefaultParseBudget is the bytes of request bodies whose text may be rendered and tokenized
	// at once, server-wide. Tokenizing allocates about 130 bytes per byte of text (45 of them
	// live at the end; stories260K, 4.2 MB of "ab "), so 16 MiB of text is about 700 MiB of heap
	// at the worst moment.
	DefaultParseBudget = 16 << 20
	// DefaultParseWait is how long a request waits for the parse budget before a 503: waiting
	// costs a parked goroutine (a large body waits unread), and a burst of large requests is
	// refused with 4xx one after another rather than partly with 503.
	DefaultParseWait = 10 * time.Second

	// boundSlack is what the text bound allows beyond n_ctx_seq × the longest token: a space
	// prefix, the BOS text a template writes, rounding.
	boundSlack = 1024
	// smallBody is the body size under which a request does not take the parse budget: its
	// work is small, and it never waits behind large ones.
	smallBody = 64 << 10
	// largeBody is the body size after which the budget gives memory back to the system once
	// nothing is parsed any more (see ParseBudget.release).
	largeBody = 1 << 20
	// freeOSEvery bounds how often that happens.
	freeOSEvery = 2 * time.Second
	// echoLimit is the most bytes of a client's string an error message quotes back.
	echoLimit = 128
)

// ParseBudget bounds the bytes of request bodies being rendered and tokenized at once across a
// whole server (every model of a NewMulti front shares one). A request over smallBody takes its
// body's size (at most the whole budget) before its text is parsed and gives it back after, and
// waits for it within its context up to the budget's wait; past that it gets a 503 with
// Retry-After. Safe for concurrent use.
type ParseBudget struct {
	sem   *semaphore.Weighted
	total int64
	wait  time.Duration
	// workers caps the large bodies parsed at once at half the CPUs (at least one), so that
	// parsing never holds every CPU: /health, /metrics and the engine's steps find one free.
	workers *semaphore.Weighted

	mu       sync.Mutex
	inFlight int64     // bytes taken
	large    bool      // a body over largeBody was parsed since memory was last given back
	freed    time.Time // when memory was last given back
}

// NewParseBudget returns a budget of total bytes (<= 0: DefaultParseBudget) whose requests
// wait up to wait (<= 0: DefaultParseWait).
func NewParseBudget(total int64, wait time.Duration) *ParseBudget {
	if total <= 0 {
		total = DefaultParseBudget
	}
	if wait <= 0 {
		wait = DefaultParseWait
	}
	return &ParseBudget{sem: semaphore.NewWeighted(total), total: total, wait: wait,
		workers: semaphore.NewWeighted(int64(max(1, runtime.GOMAXPROCS(0)/2)))}
}

// errParseBusy is the 503 of a request that waited out the parse budget.
var errParseBusy = &APIError{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "server_busy",
	Message: "the server is parsing too many large requests at once (--parse-budget); retry later"}

// acquire takes the budget of a body of n bytes; release gives it back. A body under smallBody
// takes nothing.
func (b *ParseBudget) acquire(ctx context.Context, n int) (release func(), err error) {
	if b == nil || n < smallBody {
		return func() {}, nil
	}
	w := min(int64(n), b.total)
	ctx, cancel := context.WithTimeout(ctx, b.wait)
	defer cancel()
	if err := b.workers.Acquire(ctx, 1); err != nil {
		return nil, errParseBusy
	}
	if err := b.sem.Acquire(ctx, w); err != nil {
		b.workers.Release(1)
		return nil, errParseBusy
	}
	b.mu.Lock()
	b.inFlight += w
	b.large = b.large || n >= largeBody
	b.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { b.release(w) }) }, nil
}

// release gives w bytes back. When that leaves nothing in flight after a large body, the heap
// the parse grew is handed back to the system (debug.FreeOSMemory, at most once per
// freeOSEvery), so that RSS does not stay at a burst's peak; the Go memory limit serve sets
// does the same under pressure.
func (b *ParseBudget) release(w int64) {
	b.sem.Release(w)
	b.workers.Release(1)
	b.mu.Lock()
	b.inFlight -= w
	free := b.inFlight == 0 && b.large && time.Since(b.freed) >= freeOSEvery
	if free {
		b.large, b.freed = false, time.Now()
	}
	b.mu.Unlock()
	if free {
		go debug.FreeOSMemory()
	}
}

// TextBound is the most bytes of text that can tokenize into one sequence (n_ctx_seq tokens):
// no token stands for more than the vocabulary's MaxTokenBytes.
func (s *Server) TextBound() int {
	lim := s.cfg.Engine.Limits()
	n := lim.NCtxSeq
	if n <= 0 {
		n = lim.NCtx
	}
	return n*s.cfg.Model.Vocab.MaxTokenBytes() + boundSlack
}

// CheckText refuses a text of n bytes (in the request field field) that cannot fit in a
// sequence, before anything tokenizes it.
func (s *Server) CheckText(field string, n int) error {
	if bound := s.TextBound(); n > bound {
		lim := s.cfg.Engine.Limits()
		return &APIError{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: field, Code: "context_length_exceeded",
			Message: fmt.Sprintf("%s is %d bytes of text: it cannot fit in a sequence of %d tokens (n_ctx_seq; no token of this model stands for more than %d bytes, so at most %d bytes fit); shorten it",
				field, n, max(lim.NCtxSeq, 0), s.cfg.Model.Vocab.MaxTokenBytes(), bound)}
	}
	return nil
}

// Encode tokenizes text (the request field field) as tokenizer.Encode does, once CheckText
// allows it.
func (s *Server) Encode(field, text string, addSpecial, parseSpecial bool) ([]int32, error) {
	if err := s.CheckText(field, len(text)); err != nil {
		return nil, err
	}
	return s.cfg.Model.Vocab.Encode(text, addSpecial, parseSpecial), nil
}

// DecodeParsed is DecodeBody under the parse budget for the body's bytes, taken before the body
// is read when its Content-Length says it is large (else once it is read). The caller releases
// it once the request's text is rendered and tokenized; on error there is nothing to release.
func (s *Server) DecodeParsed(w http.ResponseWriter, r *http.Request, v any) (release func(), err error) {
	b := s.cfg.ParseBudget
	release = func() {}
	if r.ContentLength >= smallBody {
		if release, err = b.acquire(r.Context(), int(min(r.ContentLength, s.cfg.MaxBodyBytes))); err != nil {
			return nil, err
		}
	}
	n, err := decodeBodyN(w, r, s.cfg.MaxBodyBytes, v)
	if err != nil {
		release()
		return nil, err
	}
	if r.ContentLength < smallBody {
		return b.acquire(r.Context(), n)
	}
	return release, nil
}

// Echo is a client's string as an error message quotes it: Go-quoted, and past echoLimit bytes
// cut at a character boundary with an ellipsis and its whole length, so that an error never
// sends back what the client sized.
func Echo(s string) string {
	if len(s) <= echoLimit {
		return strconv.Quote(s)
	}
	return strconv.Quote(firstBytes(s, echoLimit)) + "… (" + strconv.Itoa(len(s)) + " bytes)"
}

// clip is s cut as Echo cuts it, unquoted (for a value an error suggests as a flag's).
func clip(s string) string {
	if len(s) <= echoLimit {
		return s
	}
	return firstBytes(s, echoLimit) + "…"
}

// firstBytes is the start of s within n bytes, ending at a character boundary.
func firstBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// lastBytes is the end of s within n bytes, starting at a character boundary.
func lastBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := len(s) - n
	for cut < len(s) && !utf8.RuneStart(s[cut]) {
		cut++
	}
	return s[cut:]
}

// countElements counts the elements of raw, valid JSON, when it is an array (else 0), and stops
// once it has seen more than limit: one pass over the bytes, no allocation, so that a list is
// measured before anything decodes it.
func countElements(raw []byte, limit int) int {
	i := 0
	for i < len(raw) && raw[i] <= ' ' {
		i++
	}
	if i == len(raw) || raw[i] != '[' {
		return 0
	}
	depth, n, inString, empty := 0, 0, false, true
	for ; i < len(raw); i++ {
		c := raw[i]
		switch {
		case inString:
			if c == '\\' {
				i++
			} else if c == '"' {
				inString = false
			}
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			depth++
		case c == ']' || c == '}':
			if depth--; depth == 0 {
				if !empty {
					n++
				}
				return n
			}
		case c == ',' && depth == 1:
			if n++; n > limit {
				return n
			}
		}
		if depth == 1 && c > ' ' && c != '[' && c != ',' {
			empty = false
		}
		if depth > 1 {
			empty = false
		}
	}
	return n
}
