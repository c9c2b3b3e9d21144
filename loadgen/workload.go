// Package loadgen drives an OpenAI-compatible completions server (ubatch,
// llama.cpp's server, vLLM) with streaming requests from a fixed workload and
// reports serving metrics: throughput, time to first token and inter-token
// latency. It replicates the protocol behind the reference figures in
// shared/perf/README.md ("Serving"): requests are sent in workload order by C
// closed-loop clients, each taking the next request as soon as its previous
// one ends.
package loadgen

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
)

// Request kinds. Latency percentiles are also reported per kind, because a
// long prompt's prefill is what stalls the other streams.
const (
	KindShort = "short"
	KindLong  = "long"
)

// Request is one completion request of a workload, in the JSON-lines format
// of shared/perf/workloads/*.jsonl.
type Request struct {
	Kind      string `json:"kind"` // KindShort or KindLong
	Prompt    string `json:"prompt"`
	MaxTokens int    `json:"max_tokens"` // > 0
	// Conversation, when > 0, makes the request one turn of a chat conversation (chat.go):
	// Prompt is the user's message of turn Turn (1-based), sent to /v1/chat/completions after
	// the conversation's earlier messages and replies; System, on the first turn, is its
	// system message.
	Conversation int    `json:"conversation,omitempty"`
	Turn         int    `json:"turn,omitempty"`
	System       string `json:"system,omitempty"`
}

func (r Request) validate() error {
	if r.Kind != KindShort && r.Kind != KindLong {
		return fmt.Errorf("kind %q is not %q or %q", r.Kind, KindShort, KindLong)
	}
	if r.Prompt == "" {
		return errors.New("empty prompt")
	}
	if r.MaxTokens <= 0 {
		return fmt.Errorf("max_tokens %d is not positive", r.MaxTokens)
	}
	if r.Conversation < 0 || (r.Conversation > 0) != (r.Turn > 0) {
		return fmt.Errorf("conversation %d, turn %d: give both (positive) or neither", r.Conversation, r.Turn)
	}
	return nil
}

// maxWorkloadLine bounds one JSON line so that a corrupt (newline-free) file
// fails with an error instead of being read whole into memory.
const maxWorkloadLine = 16 << 20

// LoadWorkload reads a workload file: one JSON Request object per line, blank
// lines ignored, order preserved. Every request must have kind short|long, a
// non-empty prompt and max_tokens > 0; the file must hold at least one.
func LoadWorkload(path string) ([]Request, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("loadgen: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), maxWorkloadLine)
	var reqs []Request
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		var r Request
		if err := json.Unmarshal([]byte(text), &r); err != nil {
			return nil, fmt.Errorf("loadgen: %s:%d: %w", path, line, err)
		}
		if err := r.validate(); err != nil {
			return nil, fmt.Errorf("loadgen: %s:%d: %w", path, line, err)
		}
		reqs = append(reqs, r)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("loadgen: %s: %w", path, err)
	}
	if len(reqs) == 0 {
		return nil, fmt.Errorf("loadgen: %s: no requests", path)
	}
	return reqs, nil
}

// Shapes of the synthesized workloads, matching shared/perf/README.md.
const (
	WorkloadShared  = "shared"
	WorkloadMixed   = "mixed"
	WorkloadTenants = "tenants"
	WorkloadChat    = "chat"

	// DefaultTenants and DefaultSystemWords shape the tenants workload Synthesize builds.
	DefaultTenants     = 8
	DefaultSystemWords = 300

	sharedPrefixWords = 200
	questionWords     = 20
	longPromptWords   = 600
	mixedLongEvery    = 8 // K: one long prompt every K requests, starting with the first
	synthMaxTokens    = 64
	maxSynthRequests  = 100_000
)

// vocabulary is the word pool of synthesized prompts: plain, common English
// nouns so that every tokenizer maps them to few tokens each.
var vocabulary = [...]string{
	"apple", "answer", "bird", "boat", "book", "bread", "bridge", "candle",
	"castle", "chair", "city", "cloud", "coffee", "corner", "desert", "doctor",
	"door", "dream", "energy", "engine", "evening", "family", "field", "fire",
	"flower", "forest", "friend", "garden", "glass", "harbor", "house", "island",
	"lamp", "letter", "light", "market", "memory", "method", "money", "morning",
	"mountain", "music", "number", "ocean", "paper", "pencil", "power", "question",
	"rain", "reason", "river", "road", "school", "signal", "station", "stone",
	"story", "street", "summer", "table", "teacher", "train", "valley", "window",
}

// Synthesize builds a workload of n requests of 64 output tokens each, fully
// determined by seed:
//
//   - "shared": every prompt is the same 200-word prefix followed by
//     "\nQuestion: " and a unique 20-word question (all kind short), the
//     case prefix caching helps;
//   - "mixed": request i is a unique 600-word prompt (kind long) when
//     i%8 == 0, else a unique 20-word prompt (kind short).
//
// Words are separated and followed by single spaces, like the shipped files.
// n must be in [1, 100000].
func Synthesize(kind string, n int, seed uint64) ([]Request, error) {
	if n < 1 || n > maxSynthRequests {
		return nil, fmt.Errorf("loadgen: synthesize: n = %d, want 1..%d", n, maxSynthRequests)
	}
	rng := rand.New(rand.NewPCG(seed, 0x6c6f616467656e)) // second word: "loadgen"
	seen := make(map[string]bool, n)
	// unique redraws on the (astronomically rare) repeat, so that no request
	// is a cache hit of an earlier one.
	unique := func(nw int) string {
		for {
			if w := words(rng, nw); !seen[w] {
				seen[w] = true
				return w
			}
		}
	}
	reqs := make([]Request, n)
	switch kind {
	case WorkloadShared:
		prefix := words(rng, sharedPrefixWords)
		for i := range reqs {
			reqs[i] = Request{
				Kind:      KindShort,
				Prompt:    prefix + "\nQuestion: " + unique(questionWords),
				MaxTokens: synthMaxTokens,
			}
		}
	case WorkloadMixed:
		for i := range reqs {
			r := Request{Kind: KindShort, MaxTokens: synthMaxTokens}
			if i%mixedLongEvery == 0 {
				r.Kind = KindLong
				r.Prompt = unique(longPromptWords)
			} else {
				r.Prompt = unique(questionWords)
			}
			reqs[i] = r
		}
	case WorkloadTenants:
		return SynthesizeTenants(n, DefaultTenants, DefaultSystemWords, seed)
	case WorkloadChat:
		return synthesizeChat(n, rng, unique), nil
	default:
		return nil, fmt.Errorf("loadgen: synthesize: unknown workload %q (want %q, %q, %q or %q)",
			kind, WorkloadShared, WorkloadMixed, WorkloadTenants, WorkloadChat)
	}
	return reqs, nil
}

// SynthesizeTenants builds the "tenants" workload: tenants tenants, each with its own system
// prompt of systemWords random words, and n requests of 64 output tokens, each from a tenant
// drawn at random (so tenants interleave), its system prompt followed by "\nUser: " and a unique
// 20-word question. Whether a request's system prompt is in the cache of the server that gets
// it is what a router decides. Fully determined by seed; n in [1, 100000], tenants in [1, 1000],
// systemWords in [1, 10000].
func SynthesizeTenants(n, tenants, systemWords int, seed uint64) ([]Request, error) {
	switch {
	case n < 1 || n > maxSynthRequests:
		return nil, fmt.Errorf("loadgen: synthesize: n = %d, want 1..%d", n, maxSynthRequests)
	case tenants < 1 || tenants > 1000:
		return nil, fmt.Errorf("loadgen: synthesize: %d tenants, want 1..1000", tenants)
	case systemWords < 1 || systemWords > 10000:
		return nil, fmt.Errorf("loadgen: synthesize: %d system-prompt words, want 1..10000", systemWords)
	}
	rng := rand.New(rand.NewPCG(seed, 0x74656e616e7473)) // "tenants"
	system := make([]string, tenants)
	for i := range system {
		system[i] = fmt.Sprintf("Tenant %d. ", i) + words(rng, systemWords)
	}
	reqs := make([]Request, n)
	for i := range reqs {
		// A request index keeps questions unique without a set.
		q := fmt.Sprintf("\nUser %d: ", i) + words(rng, questionWords)
		reqs[i] = Request{Kind: KindShort, Prompt: system[rng.IntN(tenants)] + q, MaxTokens: synthMaxTokens}
	}
	return reqs, nil
}

// words returns n random vocabulary words, each followed by a space.
func words(rng *rand.Rand, n int) string {
	var b strings.Builder
	for range n {
		b.WriteString(vocabulary[rng.IntN(len(vocabulary))])
		b.WriteByte(' ')
	}
	return b.String()
}
