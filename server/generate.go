package server

import (
	"context"
	"errors"
	"strings"
	"sync"
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

// generation is a set of sequences running in the engine for one HTTP request. Events of all
// sequences arrive on events, which is closed once every sequence has reported done (or the
// request's context ended). cancel must be called when the handler returns: it cancels every
// sequence still running, freeing its KV blocks at the engine's next step.
type generation struct {
	events  <-chan seqEvent
	cancel  context.CancelFunc
	prompts []int // prompt tokens of each prompt
	n       int   // sequences per prompt
}

// errNoOutput is the error of a sequence that the engine ended without a reason the client can act
// on (it was cancelled by the server, not by the client).
var errNoOutput = errors.New("generation was cancelled")

// generate submits n sequences for each prompt and starts relaying their outputs. Submission
// errors (queue full, prompt too long, shutdown) are returned before anything was sent, so the
// handler can still answer with an error status; sequences already submitted are cancelled.
func (s *Server) generate(ctx context.Context, prompts [][]int32, g genParams) (*generation, error) {
	ctx, cancel := context.WithCancel(ctx)
	gen := &generation{cancel: cancel, n: g.n}
	for _, p := range prompts {
		gen.prompts = append(gen.prompts, len(p))
	}
	total := len(prompts) * g.n
	events := make(chan seqEvent, total*4)
	gen.events = events
	if g.noGeneration {
		for i := range total {
			events <- seqEvent{index: i, done: true, finish: "length",
				usage: engine.Usage{PromptTokens: len(prompts[i/g.n])}}
		}
		close(events)
		return gen, nil
	}
	streams := make([]*engine.Stream, total)
	fail := func(err error) (*generation, error) {
		for _, st := range streams {
			if st != nil {
				st.Cancel(engine.FinishCancelled)
			}
		}
		cancel()
		return nil, err
	}
	submit := func(i int) error {
		req := engine.Request{
			Prompt: prompts[i/g.n], MaxTokens: g.maxTokens, Sampling: g.sampling, IgnoreEOS: g.ignoreEOS,
			Priority: g.priority, Logprobs: g.logprobs, TopLogprobs: g.topLogprobs,
		}
		// Independent sequences of one request need distinct random streams.
		req.Sampling.Seed += uint64(i % g.n)
		st, err := s.cfg.Engine.Submit(ctx, req)
		streams[i] = st
		return err
	}
	// With n > 1 the engine computes each prompt once: the other sequences wait until the first
	// has the prompt in the KV cache and start from it.
	for i := range total {
		if err := submit(i); err != nil {
			return fail(err)
		}
	}
	var wg sync.WaitGroup
	for i, st := range streams {
		wg.Go(func() { s.relay(ctx, i, st, g, events) })
	}
	go func() {
		wg.Wait()
		close(events)
	}()
	return gen, nil
}

// relay reads one sequence's outputs, turns them into text events and sends them on out until
// the sequence is done or ctx ends (then the sequence is cancelled).
func (s *Server) relay(ctx context.Context, index int, st *engine.Stream, g genParams, out chan<- seqEvent) {
	ts := newTextStream(s.cfg.Model.Vocab, g.stop)
	send := func(e seqEvent) bool {
		e.index = index
		if !g.logprobs && !g.keepTokens {
			e.tokens = nil
		}
		select {
		case out <- e:
			return true
		case <-ctx.Done():
			return false
		}
	}
	kept := 0
	var firstAt time.Time
	for {
		o, err := st.Recv(ctx)
		if err != nil {
			st.Cancel(engine.FinishCancelled)
			return
		}
		if o.Done {
			text, toks, word := ts.flush()
			ev := seqEvent{text: text, tokens: toks, done: true, finish: string(o.Finish), stopWord: word, usage: o.Usage}
			switch {
			case word != "":
				ev.finish = "stop"
				ev.usage.CompletionTokens = kept
			case o.Finish == engine.FinishError:
				ev.err = o.Err
				if ev.err == nil {
					ev.err = errors.New("generation failed")
				}
			case o.Finish == engine.FinishCancelled:
				ev.err = errNoOutput
			}
			ev.genTime = sinceOrZero(firstAt)
			s.observeSequence(firstAt, ev.usage.CompletionTokens)
			send(ev)
			return
		}
		if kept == 0 {
			firstAt = time.Now()
		}
		kept++
		text, toks, word := ts.add(genToken{id: o.Token, logprob: o.LogProb, top: o.Top})
		if word != "" {
			st.Cancel(engine.FinishStop)
			// The final output carries the usage counts; it follows within one engine step.
			usage, ok := drain(ctx, st)
			if !ok {
				return
			}
			usage.CompletionTokens = kept
			s.observeSequence(firstAt, kept)
			send(seqEvent{text: text, tokens: toks, done: true, finish: "stop", stopWord: word,
				usage: usage, genTime: sinceOrZero(firstAt)})
			return
		}
		if text == "" && (len(toks) == 0 || !g.logprobs && !g.keepTokens) {
			continue
		}
		if !send(seqEvent{text: text, tokens: toks}) {
			st.Cancel(engine.FinishCancelled)
			return
		}
	}
}

// drain discards outputs up to the final one and returns its usage.
func drain(ctx context.Context, st *engine.Stream) (engine.Usage, bool) {
	for {
		o, err := st.Recv(ctx)
		if err != nil {
			st.Cancel(engine.FinishCancelled)
			return engine.Usage{}, false
		}
		if o.Done {
			return o.Usage, true
		}
	}
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

// collect waits for every sequence of gen and returns their outputs by choice index. It fails
// when a sequence failed or ctx ended first (with ctx's cause: errShutdown for a request cut at
// shutdown).
func (gen *generation) collect(ctx context.Context) ([]*choiceResult, error) {
	res := make([]*choiceResult, len(gen.prompts)*gen.n)
	for i := range res {
		res[i] = &choiceResult{}
	}
	for {
		select {
		case ev, ok := <-gen.events:
			if !ok {
				// The relays also stop when ctx ends, before their sequences are done.
				if ctx.Err() != nil {
					return nil, context.Cause(ctx)
				}
				return res, nil
			}
			r := res[ev.index]
			r.text.WriteString(ev.text)
			r.tokens = append(r.tokens, ev.tokens...)
			if ev.done {
				if ev.err != nil {
					return nil, ev.err
				}
				r.finish, r.stopWord, r.usage, r.genTime = ev.finish, ev.stopWord, ev.usage, ev.genTime
			}
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
}

// usageOf sums token counts over a generation's sequences. Prompt tokens count once per prompt
// (its n sequences share it), and so do cached tokens: those the prompt's first sequence took from
// the prefix cache (the others reuse that sequence's blocks); completion tokens add up.
func (gen *generation) usageOf(seqs []engine.Usage) usageJSON {
	var u usageJSON
	for i, n := range gen.prompts {
		u.PromptTokens += n
		u.PromptTokensDetails.CachedTokens += seqs[i*gen.n].CachedTokens
		for j := range gen.n {
			u.CompletionTokens += seqs[i*gen.n+j].CompletionTokens
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
