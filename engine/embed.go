package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync/atomic"

	"ubatch/kvcache"
)

// Embedding requests are prompt-only sequences: admitted into the running set like generation
// requests (a KV sequence id, blocks), their prompt computed in chunks under the same step token
// budget as other prompts (buildBatch's prompt loop, ordered by priority: EmbedRequest.Priority,
// low by default, so interactive prompts go first and decode tokens always do), on the one
// decoder, with the tokens they pool marked as wanting their final-norm hidden state
// (batch.Batch.Hidden) instead of logits. After the last chunk the pooled vector is the
// stream's one output and the sequence is freed. They wait in a queue of their own
// (embedQueue), so that a large embedding batch neither counts against Config.MaxQueue nor
// passes through the admission order of generation requests (orderWaiting), and at most
// EmbedConfig.MaxRunning of them run at once, so they cannot take every slot from chat.

// Pooling says which prompt tokens' final hidden states make an embedding.
type Pooling string

const (
	PoolMean Pooling = "mean" // the mean over every prompt token
	PoolCLS  Pooling = "cls"  // the first token's state
	PoolLast Pooling = "last" // the last token's state
)

// ParsePooling checks a pooling name.
func ParsePooling(s string) (Pooling, error) {
	switch p := Pooling(s); p {
	case PoolMean, PoolCLS, PoolLast:
		return p, nil
	}
	return "", fmt.Errorf("pooling %q: use mean, cls or last", s)
}

// wants reports whether the token at position pos of an n-token prompt is pooled.
func (p Pooling) wants(pos, n int) bool {
	switch p {
	case PoolCLS:
		return pos == 0
	case PoolLast:
		return pos == n-1
	}
	return true
}

// EmbedRequest is one embedding job: a prompt whose pooled final hidden state is the answer.
type EmbedRequest struct {
	Prompt  []int32 // already tokenized; at most Limits.NCtxSeq tokens
	Pooling Pooling // "" is PoolMean
	// Normalize scales the pooled vector to unit L2 norm (what /v1/embeddings returns); without
	// it a mean is divided by the token count and cls or last is the raw state (a reranker's
	// head reads that).
	Normalize bool
	// Priority orders the request's prompt chunks against other prompts and its admission
	// against other embedding requests; it does not age. Decode tokens always go first.
	Priority Priority
	// Salt is the input's prefix-cache namespace (Request.Salt); it matters for PoolLast inputs,
	// the only ones that use the prefix cache.
	Salt kvcache.Salt
}

// EmbedConfig bounds the embedding requests of an engine (Config.Embed).
type EmbedConfig struct {
	// MaxRunning is the most embedding sequences admitted at once, so that a batch of inputs
	// leaves slots to chat; 0 = a quarter of Config.MaxRunning, at least 1.
	MaxRunning int
	// MaxQueue is the most embedding sequences waiting; SubmitEmbed beyond it is ErrQueueFull.
	// 0 = 1024 (four requests of 256 inputs).
	MaxQueue int
}

func (c *EmbedConfig) defaults(maxRunning int) {
	if c.MaxRunning <= 0 {
		c.MaxRunning = max(1, maxRunning/4)
	}
	c.MaxRunning = min(c.MaxRunning, maxRunning)
	if c.MaxQueue <= 0 {
		c.MaxQueue = 1024
	}
}

// ErrNoEmbeddings is SubmitEmbed's error when the decoder cannot return hidden states.
var ErrNoEmbeddings = errors.New("engine: the decoder does not return hidden states (no Embedding method)")

// embedDecoder is a Decoder that can return the final-norm hidden state of a batch token marked
// in batch.Batch.Hidden (runner.Runtime).
type embedDecoder interface {
	Embedding(i int) []float32
}

// embedState is the pooling of one embedding sequence.
type embedState struct {
	pool      Pooling
	normalize bool
	sum       []float64 // Σ of the pooled tokens' states so far, in token order
	n         int       // tokens pooled into sum
}

// embedQueue is the engine's embedding requests waiting for admission (Run's goroutine owns
// waiting; queued counts them for SubmitEmbed).
type embedQueue struct {
	waiting []*sequence
	queued  atomic.Int64
	bs      int // the KV manager's block size
}

// SubmitEmbed queues embedding requests that share one Stream, as Submit does generation ones:
// each request's one output (Output.Seq its index in reqs) carries Embedding and Done, or an
// error. It fails at once, queueing none, with ErrPromptSize for an empty prompt or one longer
// than a sequence (Limits.NCtxSeq), ErrQueueFull past EmbedConfig.MaxQueue, ErrNoEmbeddings
// when the decoder returns no hidden states, ErrClosed after shutdown. Cancelling ctx (the
// client went away) drops the requests at the next step.
func (e *Engine) SubmitEmbed(ctx context.Context, reqs ...EmbedRequest) (*Stream, error) {
	if e.closed.Load() {
		return nil, ErrClosed
	}
	if _, ok := e.dec.(embedDecoder); !ok {
		return nil, ErrNoEmbeddings
	}
	if len(reqs) == 0 {
		return nil, fmt.Errorf("%w: no input", ErrPromptSize)
	}
	st, seqs, err := newSeqs(reqs, func(req EmbedRequest, st *Stream, i int) (*sequence, error) {
		return e.newEmbedSeq(ctx, req, st, i)
	})
	if err != nil {
		return nil, err
	}
	if err := e.send(seqs, &e.embeds.queued, e.cfg.Embed.MaxQueue, nil); err != nil {
		return nil, err
	}
	return st, nil
}

func (e *Engine) newEmbedSeq(ctx context.Context, req EmbedRequest, st *Stream, seq int) (*sequence, error) {
	switch {
	case len(req.Prompt) == 0:
		return nil, fmt.Errorf("%w: input %d is empty", ErrPromptSize, seq)
	case len(req.Prompt) > e.lim.NCtxSeq:
		return nil, fmt.Errorf("%w: input %d has %d tokens, but a sequence holds at most %d (n_ctx_seq)", ErrPromptSize, seq, len(req.Prompt), e.lim.NCtxSeq)
	}
	for _, t := range req.Prompt {
		if t < 0 || int(t) >= e.lim.Vocab {
			return nil, fmt.Errorf("engine: input token %d is outside the vocabulary (%d)", t, e.lim.Vocab)
		}
	}
	pool := cmp.Or(req.Pooling, PoolMean)
	if _, err := ParsePooling(string(pool)); err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	s := &sequence{
		kvSeq: -1, req: Request{Prompt: req.Prompt, Priority: req.Priority, Salt: req.Salt}, ctx: ctx, stream: st, choice: seq,
		tokens: append([]int32(nil), req.Prompt...), nPrompt: len(req.Prompt), promptTokens: len(req.Prompt),
		arrival: e.arrivals.Add(1), level: req.Priority, // preempted by its own priority: it never ages
		embed: &embedState{pool: pool, normalize: req.Normalize},
	}
	s.submitted = e.now()
	return s, nil
}

// isEmbed reports whether a Submit's sequences are embedding ones (they never mix).
func isEmbed(ss []*sequence) bool { return len(ss) > 0 && ss[0].embed != nil }

// admitEmbeds drops the waiting embedding requests whose client left, then admits the others,
// by priority then arrival, while a slot, a sequence id and the KV blocks of the whole prompt
// are free, at most EmbedConfig.MaxRunning running, and no generation request of the same or a
// higher priority is still waiting for them. A mean or cls pooling needs every (or the first)
// token's hidden state, so its prompt is computed whole, never attached from the prefix cache;
// a last pooling needs only the last token's, so it starts from the cached prefix as a
// generation prompt does.
func (e *Engine) admitEmbeds() {
	q := &e.embeds
	q.waiting = slices.DeleteFunc(q.waiting, func(s *sequence) bool {
		if reason, ok := s.stream.cancelled(s.choice); ok {
			q.queued.Add(-1)
			e.finishEmbed(s, reason, nil)
			return true
		}
		if s.ctx.Err() != nil {
			q.queued.Add(-1)
			e.finishEmbed(s, FinishCancelled, nil)
			return true
		}
		return false
	})
	if len(q.waiting) == 0 {
		return
	}
	slices.SortStableFunc(q.waiting, before)
	running := 0
	for _, s := range e.running {
		if s.embed != nil {
			running++
		}
	}
	for len(q.waiting) > 0 && running < e.cfg.Embed.MaxRunning && len(e.running) < e.cfg.MaxRunning && len(e.freeIDs) > 0 {
		s := q.waiting[0]
		for _, w := range e.waiting {
			if w.req.Priority >= s.req.Priority {
				return // a generation request could not be admitted: it goes first
			}
		}
		last := s.embed.pool == PoolLast
		a := e.kv.CanAdmit(s.req.Salt, s.tokens, 0)
		need := a.Need
		if !last {
			need = (len(s.tokens) + e.kvBlockSize() - 1) / e.kvBlockSize()
		}
		if need > a.Avail && len(e.running) > 0 {
			return // blocks free up as running sequences finish
		}
		q.waiting = q.waiting[1:]
		q.queued.Add(-1)
		n, ok := e.start(s, 0, last)
		if !ok {
			continue
		}
		e.stats.PromptCached += uint64(n)
		st := s.embed
		st.sum, st.n = st.sum[:0], 0
		s.usage.CachedTokens = s.cached
		running++
	}
}

// kvBlockSize is the KV manager's block size (its Config, defaults applied: New).
func (e *Engine) kvBlockSize() int { return e.embeds.bs }

// addEmbedChunk adds s's chunk to the batch: the tokens its pooling reads want their hidden state.
func (e *Engine) addEmbedChunk(s *sequence) {
	n := len(s.tokens)
	for i := range s.chunk {
		p := s.before + i
		e.b.AddHidden(s.tokens[p], int32(p), s.seqIDs(), s.embed.pool.wants(p, n))
	}
}

// poolChunk adds the hidden states of s's chunk, batch tokens [row, row+s.chunk), to its pool
// and, after the prompt's last chunk, finishes s with the embedding.
func (e *Engine) poolChunk(s *sequence, row int) {
	dec := e.dec.(embedDecoder) // SubmitEmbed checked it
	st := s.embed
	for i := range s.chunk {
		v := dec.Embedding(row + i)
		if v == nil {
			continue
		}
		if len(st.sum) == 0 {
			st.sum = append(st.sum[:0], make([]float64, len(v))...)
		}
		for j, x := range v {
			st.sum[j] += float64(x)
		}
		st.n++
	}
	if e.nKV(s) == len(s.tokens) {
		e.finishEmbed(s, FinishStop, nil)
	}
}

// pooled is the embedding of a finished pool: the sum scaled to unit L2 norm (a zero vector
// stays zero), or, without normalize, divided by the tokens pooled.
func (st *embedState) pooled() []float32 {
	out := make([]float32, len(st.sum))
	if st.normalize {
		var norm float64
		for _, v := range st.sum {
			norm += v * v
		}
		if norm = math.Sqrt(norm); norm > 0 {
			for j, v := range st.sum {
				out[j] = float32(v / norm)
			}
		}
		return out
	}
	for j, v := range st.sum {
		out[j] = float32(v / float64(max(st.n, 1)))
	}
	return out
}

// errEmbedKV is the error of an embedding whose prompt the KV cache cannot hold even alone.
var errEmbedKV = errors.New("engine: the KV cache cannot hold this input even alone: shorten it or give the server a larger -c")

// finishEmbed ends embedding sequence s: frees its KV sequence (full blocks stay in the prefix
// cache: their K/V are what a generation prompt with the same prefix would compute) and sends
// its one output: the embedding when reason is FinishStop, else the reason and err. Embedding
// requests are not counted in the generation metrics (Observer.Finished).
func (e *Engine) finishEmbed(s *sequence, reason FinishReason, err error) {
	e.release(s, false)
	out := Output{Seq: s.choice, Done: true, Finish: reason, Err: err}
	switch {
	case reason == FinishLength && err == nil:
		out.Finish, out.Err = FinishError, errEmbedKV
	case err != nil:
		out.Finish = FinishError
	case reason == FinishStop:
		out.Embedding = s.embed.pooled()
	}
	s.usage.PromptTokens = s.promptTokens
	s.usage.Latency = e.now().Sub(s.submitted)
	out.Usage = s.usage
	s.stream.push(out)
	s.done = true
}

// enqueue adds a submission's sequences (counted in queued by SubmitEmbed) to the queue.
func (q *embedQueue) enqueue(ss []*sequence) { q.waiting = append(q.waiting, ss...) }

// requeue puts a preempted embedding sequence back in the queue: it starts again from its
// first token.
func (q *embedQueue) requeue(s *sequence) {
	q.waiting = append(q.waiting, s)
	q.queued.Add(1)
}

// shutdownEmbeds ends every waiting embedding request with ErrClosed.
func (e *Engine) shutdownEmbeds() {
	for _, s := range e.embeds.waiting {
		e.embeds.queued.Add(-1)
		e.finishEmbed(s, FinishError, ErrClosed)
	}
	e.embeds.waiting = nil
}

// embedFloorWait is how many steps in a row an embedding prompt goes without a chunk before the
// floor (minChunk tokens beyond the modelled time, planStep's BudgetFloor) applies to it: when
// the decode tokens alone reach the target, a generation prompt still gets its floor every
// step, but an embedding one, of a lower priority than the streams, only once in this many, so
// that it keeps moving without pushing more than ~2% of the streams' steps past the target.
const embedFloorWait = 50

// floorFor reports whether the first prompt chunk of a BudgetFloor step, s's, may take the floor.
func (e *Engine) floorFor(s *sequence) bool {
	return s.embed == nil || s.passedOver >= embedFloorWait
}
