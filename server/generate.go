package server

import (
	"context"
	"errors"
	"io"
	"strings"
	"time"

	"ubatch/engine"
)

// seqEvent is what one sequence of a generation reports: newly releasable text (with its tokens
// when log-probabilities were asked for), and finally a done event.
type seqEvent struct {
	index  int // choice index: prompt*n + sequence
	text   string
	tokens []genToken

	done     bool
	finish   string // "stop" or "length", with done
	stopWord string // the stop string that ended the sequence, if any
	usage    engine.Usage
	genTime  time.Duration // from the first generated token to the end
	err      error         // with done, when the sequence failed
}

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
	ready      []seqEvent // events to return before reading the stream
	observe    func(first time.Time, tokens int)
	remember   func(reply string, ids []int32) // genParams.remember
}

// seqText is one sequence's text: stop-string detection over its decoded tokens.
type seqText struct {
	text    *textStream
	kept    int // tokens generated up to the end of the text (a stop string included)
	firstAt time.Time
	// stopped is the final event once a stop string ended the sequence: it goes out with the
	// engine's final output (its usage), which follows within one step of the cancel.
	stopped *seqEvent
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
func (s *Server) generate(ctx context.Context, prompts [][]int32, g genParams) (*generation, error) {
	ctx, cancel := context.WithCancel(ctx)
	gen := &generation{cancel: cancel, n: g.n, withTokens: g.logprobs || g.keepTokens, observe: s.observeSequence, remember: g.remember}
	for _, p := range prompts {
		gen.prompts = append(gen.prompts, len(p))
	}
	total := len(prompts) * g.n
	if g.noGeneration {
		for i := range total {
			gen.ready = append(gen.ready, seqEvent{index: i, done: true, finish: "length",
				usage: engine.Usage{PromptTokens: len(prompts[i/g.n])}})
		}
		return gen, nil
	}
	salt := requestSalt(ctx, g.cacheSalt)
	reqs := make([]engine.Request, total)
	gen.seqs = make([]seqText, total)
	for i := range reqs {
		reqs[i] = engine.Request{Prompt: prompts[i/g.n], MaxTokens: g.maxTokens, Sampling: g.sampling,
			Priority: g.priority, Client: clientID(ctx), Logprobs: g.logprobs, TopLogprobs: g.topLogprobs, Salt: salt}
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
func (gen *generation) next(ctx context.Context) (seqEvent, error) {
	for {
		if len(gen.ready) > 0 {
			ev := gen.ready[0]
			gen.ready = gen.ready[1:]
			return ev, nil
		}
		if ctx.Err() != nil {
			return seqEvent{}, context.Cause(ctx)
		}
		if gen.st == nil {
			return seqEvent{}, io.EOF
		}
		o, err := gen.st.Recv(ctx)
		switch {
		case errors.Is(err, io.EOF):
			return seqEvent{}, io.EOF
		case err != nil:
			return seqEvent{}, context.Cause(ctx)
		}
		if ev, ok := gen.event(o); ok {
			if ev.err != nil {
				return seqEvent{}, ev.err
			}
			return ev, nil
		}
	}
}

// event turns one engine output into the sequence's event, if it has one to send: text that is
// safe to release, or the final event.
func (gen *generation) event(o engine.Output) (seqEvent, bool) {
	q := &gen.seqs[o.Seq]
	var ev seqEvent
	switch {
	case o.Done && q.stopped != nil:
		ev = *q.stopped
		ev.usage = o.Usage
		ev.usage.CompletionTokens = q.kept
	case o.Done:
		text, toks, word := q.text.flush()
		ev = seqEvent{text: text, tokens: toks, done: true, finish: string(o.Finish), stopWord: word, usage: o.Usage}
		switch {
		case word != "":
			ev.finish = "stop"
			ev.usage.CompletionTokens = q.kept
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
		text, toks, word := q.text.add(genToken{id: o.Token, logprob: o.LogProb, top: o.Top})
		if gen.remember != nil {
			q.ids = append(q.ids, o.Token)
			q.reply.WriteString(text)
		}
		if word != "" {
			gen.st.CancelSeq(o.Seq, engine.FinishStop)
			q.stopped = &seqEvent{text: text, tokens: toks, done: true, finish: "stop", stopWord: word}
			return ev, false
		}
		ev = seqEvent{text: text, tokens: toks}
	}
	ev.index = o.Seq
	if !gen.withTokens {
		ev.tokens = nil
	}
	if ev.done {
		ev.genTime = sinceOrZero(q.firstAt)
		gen.observe(q.firstAt, ev.usage.CompletionTokens)
		return ev, true
	}
	return ev, ev.text != "" || len(ev.tokens) > 0
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

// choiceResult is one sequence's complete output, for non-streaming responses.
type choiceResult struct {
	text     strings.Builder
	tokens   []genToken
	finish   string
	stopWord string
	usage    engine.Usage
	genTime  time.Duration
}

// usageOf sums token counts over a generation's sequences (res by choice index). Prompt tokens
// count once per prompt (its n sequences share it), and so do cached tokens: those the prompt's
// first sequence took from the prefix cache (the others reuse that sequence's blocks);
// completion tokens add up.
func (gen *generation) usageOf(res []*choiceResult) usageJSON {
	var u usageJSON
	for i, n := range gen.prompts {
		u.PromptTokens += n
		u.PromptTokensDetails.CachedTokens += res[i*gen.n].usage.CachedTokens
		for j := range gen.n {
			u.CompletionTokens += res[i*gen.n+j].usage.CompletionTokens
		}
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	return u
}

// usageJSON is OpenAI's usage object.
type usageJSON struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}
