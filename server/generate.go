package server

import (
	"context"
	"errors"
	"io"
	"strings"
	"time"

	"ubatch/engine"
)

// SeqEvent is what one sequence of a generation reports: newly releasable text (with its tokens
// when log-probabilities were asked for), and finally a done event.
type SeqEvent struct {
	index  int // choice index: prompt*n + sequence
	Text   string
	Tokens []GenToken

	Done     bool
	Finish   string // "stop" or "length", with done
	StopWord string // the stop string that ended the sequence, if any
	Usage    engine.Usage
	genTime  time.Duration // from the first generated token to the end
	err      error         // with done, when the sequence failed
}

// Index is the event's choice index: prompt*n + sequence.
func (ev SeqEvent) Index() int { return ev.index }

// generation is the sequences running in the engine for one HTTP request, all on one engine
// stream that the handler's goroutine reads through next. cancel must be called when the handler
// returns: it cancels every sequence still running, freeing its KV blocks at the engine's next
// step.
type generation struct {
	st      *engine.Stream // nil when nothing is generated (n_predict 0)
	cancel  context.CancelFunc
	prompts []int // prompt tokens of each prompt
	n       int   // sequences per prompt
	seqs    []seqText
	// withTokens: events carry their tokens (for logprobs or llama.cpp's return_tokens).
	withTokens bool
	ready      []SeqEvent // events to return before reading the stream
	observe    func(first time.Time, tokens int)
	remember   func(reply string, ids []int32) // GenParams.remember
}

// seqText is one sequence's text: stop-string detection over its decoded tokens.
type seqText struct {
	text    *textStream
	kept    int // tokens generated up to the end of the text (a stop string included)
	firstAt time.Time
	// stopped is the final event once a stop string ended the sequence: it goes out with the
	// engine's final output (its usage), which follows within one step of the cancel.
	stopped *SeqEvent
	// With generation.remember: the tokens generated and the text released so far.
	ids   []int32
	reply strings.Builder
}

// errNoOutput is the error of a sequence that the engine ended without a reason the client can act
// on (it was cancelled by the server, not by the client).
var errNoOutput = errors.New("generation was cancelled")

// generate submits n sequences for each prompt, as one group on one engine stream. Submission
// errors (queue full, prompt too long, shutdown) are returned before anything was sent, so the
// handler can still answer with an error status.
func (s *Server) generate(ctx context.Context, prompts [][]int32, g GenParams) (*generation, error) {
	ctx, cancel := context.WithCancel(ctx)
	gen := &generation{cancel: cancel, n: g.n, withTokens: g.Logprobs || g.KeepTokens, observe: s.observeSequence, remember: g.remember}
	for _, p := range prompts {
		gen.prompts = append(gen.prompts, len(p))
	}
	total := len(prompts) * g.n
	if g.noGeneration {
		for i := range total {
			gen.ready = append(gen.ready, SeqEvent{index: i, Done: true, Finish: "length",
				Usage: engine.Usage{PromptTokens: len(prompts[i/g.n])}})
		}
		return gen, nil
	}
	salt := requestSalt(ctx, g.cacheSalt)
	reqs := make([]engine.Request, total)
	gen.seqs = make([]seqText, total)
	for i := range reqs {
		reqs[i] = engine.Request{Prompt: prompts[i/g.n], MaxTokens: g.MaxTokens, Sampling: g.sampling,
			Priority: g.priority, Client: clientID(ctx), Logprobs: g.Logprobs, TopLogprobs: g.TopLogprobs, Salt: salt}
		// Independent sequences of one request need distinct random streams.
		reqs[i].Sampling.Seed += uint64(i % g.n)
		gen.seqs[i].text = newTextStream(s.cfg.Model.Vocab, g.stop)
		gen.seqs[i].text.minTokens = g.sampling.MinTokens
	}
	// With n > 1 the engine computes each prompt once: the other sequences wait until the first
	// has the prompt in the KV cache and start from it.
	st, err := s.cfg.Engine.Submit(ctx, reqs...)
	if err != nil {
		cancel()
		return nil, err
	}
	gen.st = st
	return gen, nil
}

// next returns the next event of any sequence (seqEvent.index says which); io.EOF once every
// sequence has reported done; the error of a failed sequence; or ctx's cause when ctx ends first
// (errShutdown for a request cut at shutdown).
func (gen *generation) next(ctx context.Context) (SeqEvent, error) {
	for {
		if len(gen.ready) > 0 {
			ev := gen.ready[0]
			gen.ready = gen.ready[1:]
			return ev, nil
		}
		if ctx.Err() != nil {
			return SeqEvent{}, context.Cause(ctx)
		}
		if gen.st == nil {
			return SeqEvent{}, io.EOF
		}
		o, err := gen.st.Recv(ctx)
		switch {
		case errors.Is(err, io.EOF):
			return SeqEvent{}, io.EOF
		case err != nil:
			return SeqEvent{}, context.Cause(ctx)
		}
		if ev, ok := gen.event(o); ok {
			if ev.err != nil {
				return SeqEvent{}, ev.err
			}
			return ev, nil
		}
	}
}

// event turns one engine output into the sequence's event, if it has one to send: text that is
// safe to release, or the final event.
func (gen *generation) event(o engine.Output) (SeqEvent, bool) {
	q := &gen.seqs[o.Seq]
	var ev SeqEvent
	switch {
	case o.Done && q.stopped != nil:
		ev = *q.stopped
		ev.Usage = o.Usage
		ev.Usage.CompletionTokens = q.kept
	case o.Done:
		text, toks, word := q.text.flush()
		ev = SeqEvent{Text: text, Tokens: toks, Done: true, Finish: string(o.Finish), StopWord: word, Usage: o.Usage}
		switch {
		case word != "":
			ev.Finish = "stop"
			ev.Usage.CompletionTokens = q.kept
		case o.Finish == engine.FinishError:
			ev.err = o.Err
			if ev.err == nil {
				ev.err = errors.New("generation failed")
			}
		case o.Finish == engine.FinishCancelled:
			ev.err = errNoOutput
		case gen.remember != nil:
			q.reply.WriteString(text)
			gen.remember(q.reply.String(), q.ids)
		}
	case q.stopped != nil:
		return ev, false // generated before the engine saw the stop
	default:
		if q.kept == 0 {
			q.firstAt = time.Now()
		}
		q.kept++
		text, toks, word := q.text.add(GenToken{ID: o.Token, Logprob: o.LogProb, Top: o.Top})
		if gen.remember != nil {
			q.ids = append(q.ids, o.Token)
			q.reply.WriteString(text)
		}
		if word != "" {
			gen.st.CancelSeq(o.Seq, engine.FinishStop)
			q.stopped = &SeqEvent{Text: text, Tokens: toks, Done: true, Finish: "stop", StopWord: word}
			return ev, false
		}
		ev = SeqEvent{Text: text, Tokens: toks}
	}
	ev.index = o.Seq
	if !gen.withTokens {
		ev.Tokens = nil
	}
	if ev.Done {
		ev.genTime = sinceOrZero(q.firstAt)
		gen.observe(q.firstAt, ev.Usage.CompletionTokens)
		return ev, true
	}
	return ev, ev.Text != "" || len(ev.Tokens) > 0
}

func sinceOrZero(t time.Time) time.Duration {
	if t.IsZero() {
		return 0
	}
	return time.Since(t)
}

// observeSequence records the mean time per output token of a finished sequence: the time from
// its first to its last token over the tokens after the first.
func (s *Server) observeSequence(first time.Time, tokens int) {
	if s.cfg.Metrics == nil || first.IsZero() || tokens < 2 {
		return
	}
	s.cfg.Metrics.observeTimePerOutputToken(time.Since(first) / time.Duration(tokens-1))
}

// ChoiceResult is one sequence's complete output, for non-streaming responses.
type ChoiceResult struct {
	Text     strings.Builder
	Tokens   []GenToken
	Finish   string
	StopWord string
	Usage    engine.Usage
	genTime  time.Duration
}

// usageOf sums token counts over a generation's sequences (res by choice index). Prompt tokens
// count once per prompt (its n sequences share it), and so do cached tokens: those the prompt's
// first sequence took from the prefix cache (the others reuse that sequence's blocks);
// completion tokens add up.
func (gen *generation) usageOf(res []*ChoiceResult) UsageJSON {
	var u UsageJSON
	for i, n := range gen.prompts {
		u.PromptTokens += n
		u.PromptTokensDetails.CachedTokens += res[i*gen.n].Usage.CachedTokens
		for j := range gen.n {
			u.CompletionTokens += res[i*gen.n+j].Usage.CompletionTokens
		}
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	return u
}

// UsageJSON is OpenAI's usage object.
type UsageJSON struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

// Millis is d in milliseconds, as the APIs' timings give durations.
func Millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
