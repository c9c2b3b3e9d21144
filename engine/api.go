// Package engine schedules many generation requests onto one model context with continuous
// batching: one goroutine owns all scheduling state and, every step, packs one decode token for
// each running sequence plus prompt chunks of sequences still prefilling into a single batch.
package engine

import (
	"errors"
	"log/slog"
	"time"

	"ubatch/kvcache"
	"ubatch/sample"
)

// Policy orders requests of equal priority: waiting ones for admission (SJF within Config.MaxWait)
// and prompt chunks competing for the token budget.
type Policy string

const (
	FCFS Policy = "fcfs" // first come, first served
	SJF  Policy = "sjf"  // shortest first: admission by expected cost, prompt chunks by remaining prompt
)

// Priority of a request: higher runs first and is preempted last.
type Priority int

const (
	PriorityLow    Priority = -1
	PriorityNormal Priority = 0
	PriorityHigh   Priority = 1
)

// DefaultBatchSize is Config.BatchSize when it is 0: one micro-batch of the default physical
// batch (runner.DefaultNUBatch) per step.
const DefaultBatchSize = 512

// Config tunes the scheduler.
type Config struct {
	BatchSize int // token budget per step (default DefaultBatchSize, at most the context's n_batch)
	ChunkSize int // most prompt tokens of one sequence per step (default 256)
	// MaxRunning bounds the concurrent sequences (default: the context's n_seq_max): an upper
	// bound, within which the engine runs as many as the KV cache holds at the mean sequence
	// length and the inter-token target allows (parallelism; StepInfo.Bound, AdmitStop).
	MaxRunning int
	MaxQueue   int    // waiting requests beyond which Submit returns ErrQueueFull (default 64)
	Policy     Policy // default FCFS
	IsEOG      func(tok int32) bool
	Observer   Observer // metrics sink; nil = none
	// ContextShift lets a sequence that reaches the per-sequence cap go on: the older half of
	// its history after the first Keep tokens is dropped and the rest shifted down over it
	// (llama.cpp's --context-shift), compacted into whole blocks so that the dropped half's
	// memory is released; without it the sequence ends with FinishLength.
	ContextShift bool
	// StateCacheBytes bounds the memory of a hybrid model's recurrent-state snapshots, which its
	// prefix hits resume from (a KV prefix is reused only up to a block boundary with a
	// snapshot of the state there). 0 = 8 snapshots per sequence id within 1 GiB; < 0 = none,
	// so no prefix of a hybrid is reused. Other models ignore it.
	StateCacheBytes int64
	// Keep is the number of leading tokens a context shift never drops (llama.cpp's n_keep as
	// llama-server counts it, BOS included: serve passes --keep plus one for a model that adds
	// BOS). Negative: the whole prompt. When Keep leaves nothing to drop, the sequence ends with
	// FinishLength at the cap.
	Keep int
	// TargetITL is the inter-token latency a step should meet while sequences decode: prompt
	// chunks are sized to it from a cost model of steps fitted online. 0 = no target (prompt
	// chunks of ChunkSize within BatchSize).
	TargetITL time.Duration
	// MaxSampleTime bounds the mean time one sequence's sampling (its grammar's token masks above
	// all) may take per token, over a window of 8 tokens, since it runs on the step every other
	// stream waits for: a sequence above it ends with a *sample.RequestError wrapping
	// ErrSamplingTooSlow. 0 = TargetITL/2, at least 5 ms, or 50 ms without a target; < 0 = no bound.
	MaxSampleTime time.Duration
	// MaxWait bounds SJF's short-first order of the waiting queue: a request that has waited
	// this long goes before every request of its aged priority that has not, oldest first, so a
	// stream of short requests cannot keep a long one waiting. 0 = 10 s; < 0 = no bound. FCFS
	// admits by arrival already and ignores it.
	MaxWait time.Duration
	// PriorityAging raises a waiting request's priority by one level per PriorityAging waited,
	// up to PriorityHigh, so that a flood of high-priority requests cannot starve lower ones. It
	// orders admission; a waiting request preempts by its own priority alone, and a running one
	// is preempted by the priority it was admitted at (makeRoom says why). 0 = 5 s; < 0 =
	// priorities never age.
	//
	// Together, with FCFS a request of priority p <= PriorityHigh is ahead of every request
	// submitted after it (but those above PriorityHigh) once it has waited
	// (PriorityHigh-p)·PriorityAging; with SJF, once it has waited that and MaxWait. From then
	// on it waits only for older requests in the same position and for a slot to free.
	PriorityAging time.Duration
	// Logger receives the step log at debug level (nil: none) and recovered panics at error level
	// (nil: slog.Default()).
	Logger *slog.Logger
	// Embed bounds the embedding requests (SubmitEmbed); zero fields take their defaults.
	Embed EmbedConfig
}

// Request is one generation job. Prompt is already tokenized (BOS included as the model wants).
type Request struct {
	Prompt    []int32
	MaxTokens int // tokens to generate; <= 0 means until end of generation or the sequence cap (Limits.NCtxSeq)
	// Sampling is the request's sampler; llama.cpp's ignore_eos is Sampling.IgnoreTokens holding
	// the end-of-generation tokens (Config.IsEOG then never sees one).
	Sampling sample.Params
	Priority Priority
	// Client identifies who sent the request (the server's client address, with the API key
	// when one is sent): the engine shares slots and KV blocks fairly between clients
	// (fair.go). Requests without one share the identity "".
	Client      string
	Logprobs    bool // report each chosen token's log-probability
	TopLogprobs int  // and this many top alternatives (needs Logprobs)
	// Salt is the request's prefix-cache namespace (vLLM's cache_salt, kvcache.NewSalt): its
	// prompt matches only blocks of the same salt, in RAM and in every tier, and the blocks it
	// computes are of that salt. The zero Salt shares with every unsalted request.
	Salt kvcache.Salt
}

// Output is one event of a request's stream: a generated token, or the final event (Done).
type Output struct {
	Seq     int // the request's index in its Submit call
	Token   int32
	LogProb float32
	Top     []sample.TokenLogProb // len Request.TopLogprobs
	Done    bool
	// Embedding is an embedding request's answer (SubmitEmbed), on its final event when it
	// finished with FinishStop.
	Embedding []float32
	Finish    FinishReason // set when Done
	Err       error        // set when Finish == FinishError
	Usage     Usage        // filled on the final event
}

// FinishReason says why generation ended, with OpenAI's words where they exist.
type FinishReason string

const (
	FinishStop      FinishReason = "stop"      // end-of-generation token (or the client's stop string)
	FinishLength    FinishReason = "length"    // MaxTokens or the sequence cap reached, or the KV cache outgrown
	FinishCancelled FinishReason = "cancelled" // the client went away
	FinishError     FinishReason = "error"
)

// Usage counts a request's tokens.
type Usage struct {
	PromptTokens     int
	CachedTokens     int // prompt tokens served from the prefix cache (not computed)
	CompletionTokens int
	QueueTime        time.Duration // from Submit to admission
	TimeToFirstToken time.Duration // from Submit to the first generated token
	Latency          time.Duration // from Submit to the final event
	Preemptions      int           // times the request was preempted (its KV freed, recomputed later)
	// Time stamps on the engine's clock, taken on its goroutine where the work happened (zero when
	// it never did), for llama.cpp's timings: a reader of the stream sees tokens later, in bursts.
	PromptStart time.Time // the forward pass carrying the request's first prompt chunk began
	FirstToken  time.Time // the first token was sampled: the prompt is done
	LastToken   time.Time // the last token was sampled
}

// PromptTime is llama.cpp's prompt_ms: from the first prompt chunk's forward pass to the first
// sampled token; 0 when no token was sampled.
func (u Usage) PromptTime() time.Duration {
	if u.PromptStart.IsZero() || u.FirstToken.IsZero() {
		return 0
	}
	return u.FirstToken.Sub(u.PromptStart)
}

// GenerationTime is llama.cpp's predicted_ms: from the first sampled token to the last (0 with
// one token, as llama-server's).
func (u Usage) GenerationTime() time.Duration {
	if u.FirstToken.IsZero() || u.LastToken.IsZero() {
		return 0
	}
	return u.LastToken.Sub(u.FirstToken)
}

// Errors Submit returns.
var (
	ErrQueueFull  = errors.New("engine: too many waiting requests")
	ErrClosed     = errors.New("engine: shut down")
	ErrPromptSize = errors.New("engine: prompt does not fit the context")
)

// StepInfo describes one forward pass, for metrics.
type StepInfo struct {
	Tokens, Budget int // tokens in the batch and the step's token budget
	// Capacity is the most tokens the step could have carried given the work there was when
	// its batch was built: the sum of the tokens each running sequence had left to compute (at
	// most ChunkSize of a prompt; no cap under BudgetNoDecode, where prompts take the whole
	// budget) and one per free slot (MaxRunning − running), within max(Budget, MaxRunning)
	// (decode tokens are placed before the budget is planned, so the slots can always decode).
	// So it is the latency-targeted budget when prompts were waiting (the budget was the
	// limit), and MaxRunning when every running sequence decodes and nothing waits (the slots
	// were the limit). Requests still waiting after admission could not be admitted this step
	// (no slot or KV blocks) and add only their free slot, if any. At least Tokens, so at
	// least 1 on a step that ran.
	Capacity         int
	Reason           BudgetReason  // what set Budget
	Target           time.Duration // the step-time target in force (relaxed under a queue), 0 if none
	Predicted        time.Duration // the cost model's time for the batch (0 before it is fitted)
	DecodeTokens     int
	PrefillTokens    int
	Duration         time.Duration // the forward pass
	Elapsed          time.Duration // the whole step, scheduling and sampling included
	Running, Waiting int
	// Bound is the running set's bound at this step's admission (at most MaxRunning: the KV
	// cache at the mean sequence length), AdmitStop what stopped that admission (slots, kv,
	// itl, prefix, queue_empty).
	Bound           int
	AdmitStop       AdmitReason
	KVUsed, KVTotal int // blocks
	KVCached        int // blocks kept only for prefix reuse
}

// Utilization is how full the batch was against what it could have carried, Tokens over
// Capacity, in [0, 1]: 16 sequences decoding on MaxRunning 16 with nothing waiting read 1,
// one of them alone 1/16. It is 0 when Capacity is (a StepInfo not from a step).
func (s StepInfo) Utilization() float64 {
	if s.Capacity <= 0 {
		return 0
	}
	return float64(s.Tokens) / float64(s.Capacity)
}

// Observer receives scheduler events; calls come from the engine goroutine and must not block.
// An Observer may also count recovered panics (PanicObserver).
type Observer interface {
	Step(StepInfo)
	Admitted(queueWait time.Duration, promptTokens, cachedTokens int) // a request's first admission
	// Lookup reports every admission's prefix-cache lookup, re-admissions after a preemption
	// included: tokens to be in the KV cache, of which cached were found there.
	Lookup(tokens, cached int)
	Token(first bool, sinceLast time.Duration) // sinceLast: since the previous token (first: since Submit)
	Finished(reason FinishReason, u Usage)
	Preempted()
	Rejected()
}
