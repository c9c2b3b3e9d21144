package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"

	"ubatch/engine"
	"ubatch/sample"
)

// DefaultMaxN is the default of Config.MaxN (serve --max-n): sequences per request, n times
// the number of prompts. The engine shares its slots between clients whatever it is.
const DefaultMaxN = 64

// Limits on request fields, so that one request cannot monopolise the server.
const (
	maxStopStrings = 16
	maxStopLen     = 256 // bytes per stop string
	MaxTopLogprobs = 20
)

// DecodeBody reads the JSON request body into v. Errors are reported as 413 (body over limit) or
// 400 naming the offending field where the decoder knows it. Unknown fields are ignored, since
// OpenAI clients send many that do not apply here.
func DecodeBody(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	_, err := decodeBodyN(w, r, limit, v)
	return err
}

// decodeBodyN is DecodeBody that also returns the body's size in bytes.
func decodeBodyN(w http.ResponseWriter, r *http.Request, limit int64, v any) (int, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return 0, &APIError{Status: http.StatusRequestEntityTooLarge, Type: "invalid_request_error",
				Code: "request_too_large", Message: fmt.Sprintf("request body is larger than %d bytes", mbe.Limit)}
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return 0, &APIError{Status: http.StatusRequestTimeout, Type: "invalid_request_error", Code: "request_timeout",
				Message: "the request body did not arrive within the server's read deadline: send it whole and at once"}
		}
		return 0, BadRequest("", "reading the request body: %v", err)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return 0, BadRequest("", "the request body is empty: send a JSON object")
	}
	if err := json.Unmarshal(body, v); err != nil {
		var te *json.UnmarshalTypeError
		var se *json.SyntaxError
		switch {
		case errors.As(err, &te) && te.Field != "":
			// The decoder names fields of embedded structs with the Go struct's name first.
			field := te.Field
			for _, embedded := range []string{"ChatRequest.", "SamplingFields.", "OpenAIFields.", "vllmTokenizeFields."} {
				field = strings.ReplaceAll(field, embedded, "")
			}
			return 0, BadRequest(field, "field %q: expected %s, got JSON %s", field, te.Type, te.Value)
		case errors.As(err, &te):
			return 0, BadRequest("", "the request body must be a JSON object, got JSON %s", te.Value)
		case errors.As(err, &se):
			return 0, BadRequest("", "malformed JSON at byte %d: %v", se.Offset, err)
		}
		return 0, BadRequest("", "malformed JSON: %v", err)
	}
	return len(body), rejectUnsupported(body, v)
}

// unsupported are request fields of OpenAI's or llama-server's API that this server does not
// implement, each with the test of whether a value asks for something (their no-op values, such
// as echo: false or n_probs: 0, pass). A request that sets one gets 400 naming it, not a reply
// that silently ignores it. Fields that do not change the output (user, store, metadata, ...)
// are accepted and ignored.
var unsupported = map[string]func(json.RawMessage) bool{
	"n_probs": Positive, "echo": IsTrue, "best_of": aboveOne, "suffix": NonEmpty,
	"lora": NonEmpty, "image_data": NonEmpty, "multimodal_data": NonEmpty, "audio": NonEmpty,
	"functions": NonEmpty, "function_call": NonEmpty, "prediction": NonEmpty,
	"web_search_options": NonEmpty, "mirostat": Positive, "typical_p": BelowOne,
	"dynatemp_range": Positive, "dry_multiplier": Positive, "xtc_probability": Positive,
	"top_n_sigma": Positive, "n_indent": Positive, "t_max_predict_ms": Positive,
	"logit_bias_eog": NonEmpty, "modalities": notTextOnly,
	// vLLM's: beam search, prompt log-probabilities, its own penalty and token lists
	// (guided_* and min_tokens are implemented: guided.go).
	"use_beam_search": IsTrue, "length_penalty": NotOne, "early_stopping": IsTrue, "prompt_logprobs": notNull,
	"stop_token_ids": NonEmpty, "bad_words": NonEmpty, "allowed_token_ids": NonEmpty,
	"include_stop_str_in_output": IsTrue, "logits_processors": NonEmpty, "truncate_prompt_tokens": notNull,
	"guided_whitespace_pattern": NonEmpty,
}

// supporter is a request type that implements some fields the unsupported list names for the
// other routes (llama.cpp's /completion takes n_probs).
type supporter interface{ Supports(field string) bool }

func rejectUnsupported(body []byte, v any) error {
	sup, _ := v.(supporter)
	var fields map[string]json.RawMessage
	if json.Unmarshal(body, &fields) != nil {
		return nil
	}
	var bad []string
	for k, v := range fields {
		if asks, ok := unsupported[k]; ok && asks(v) && (sup == nil || !sup.Supports(k)) {
			bad = append(bad, k)
		}
	}
	if len(bad) == 0 {
		return nil
	}
	slices.Sort(bad)
	return BadRequest(bad[0], "%s is not supported by this server; remove it from the request (see the README's API table)", strings.Join(bad, ", "))
}

func number(v json.RawMessage) (float64, bool) {
	var f float64
	return f, json.Unmarshal(v, &f) == nil
}

func Positive(v json.RawMessage) bool { f, ok := number(v); return ok && f > 0 || !ok && !IsNull(v) }
func aboveOne(v json.RawMessage) bool { f, ok := number(v); return ok && f > 1 || !ok && !IsNull(v) }
func BelowOne(v json.RawMessage) bool { f, ok := number(v); return ok && f < 1 || !ok && !IsNull(v) }
func IsTrue(v json.RawMessage) bool   { return string(bytes.TrimSpace(v)) == "true" }
func NotOne(v json.RawMessage) bool   { f, ok := number(v); return ok && f != 1 || !ok && !IsNull(v) }
func notNull(v json.RawMessage) bool  { return !IsNull(v) }

func NonEmpty(v json.RawMessage) bool {
	switch string(bytes.TrimSpace(v)) {
	case "", "null", "false", `""`, "[]", "{}":
		return false
	}
	return true
}

func notTextOnly(v json.RawMessage) bool {
	var m []string
	return NonEmpty(v) && (json.Unmarshal(v, &m) != nil || !slices.Equal(m, []string{"text"}))
}

// IsNull reports whether a raw field is absent or JSON null.
func IsNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || string(t) == "null"
}

// PromptInput is one prompt: text to tokenize, or token ids given by the client.
type PromptInput struct {
	text   string
	tokens []int32
	isText bool
}

// TextPrompt is a prompt of text, to tokenize.
func TextPrompt(text string) PromptInput { return PromptInput{text: text, isText: true} }

// TokenPrompt is a prompt of token ids, given by the client.
func TokenPrompt(tokens []int32) PromptInput { return PromptInput{tokens: tokens} }

// ParsePrompts accepts OpenAI's prompt forms (in the request field named field): a string, a list of token ids, a list of strings or
// a list of token-id lists. Each element is one prompt.
func ParsePrompts(field string, raw json.RawMessage) ([]PromptInput, error) {
	if IsNull(raw) {
		return nil, BadRequest(field, "%s is required", field)
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []PromptInput{{text: s, isText: true}}, nil
	}
	var toks []int32
	if json.Unmarshal(raw, &toks) == nil {
		return []PromptInput{{tokens: toks}}, nil
	}
	var list []json.RawMessage
	if json.Unmarshal(raw, &list) != nil {
		return nil, BadRequest(field, "%s must be a string, a list of token ids, or a list of those", field)
	}
	if len(list) == 0 {
		return nil, BadRequest(field, "%s is an empty list", field)
	}
	out := make([]PromptInput, 0, len(list))
	for i, el := range list {
		if json.Unmarshal(el, &s) == nil {
			out = append(out, PromptInput{text: s, isText: true})
			continue
		}
		var toks []int32 // fresh each time: Unmarshal would reuse the previous backing array
		if err := json.Unmarshal(el, &toks); err != nil || toks == nil {
			return nil, BadRequest(field, "%s[%d] must be a string or a list of token ids", field, i)
		}
		out = append(out, PromptInput{tokens: toks})
	}
	return out, nil
}

// parseStop accepts a string or a list of strings. Empty strings are dropped: they would match
// before any text.
func parseStop(raw json.RawMessage) ([]string, error) {
	if IsNull(raw) {
		return nil, nil
	}
	var one string
	var list []string
	if json.Unmarshal(raw, &one) == nil {
		list = []string{one}
	} else if err := json.Unmarshal(raw, &list); err != nil {
		return nil, BadRequest("stop", "stop must be a string or a list of strings")
	}
	if len(list) > maxStopStrings {
		return nil, BadRequest("stop", "stop has %d strings, at most %d are allowed", len(list), maxStopStrings)
	}
	out := list[:0]
	for _, s := range list {
		if len(s) > maxStopLen {
			return nil, BadRequest("stop", "a stop string is %d bytes long, at most %d are allowed", len(s), maxStopLen)
		}
		if s != "" {
			out = append(out, s)
		}
	}
	return out, nil
}

// parsePriority accepts "low", "normal", "high" or an integer (higher runs first).
func parsePriority(raw json.RawMessage) (engine.Priority, error) {
	if IsNull(raw) {
		return engine.PriorityNormal, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch strings.ToLower(s) {
		case "low":
			return engine.PriorityLow, nil
		case "normal", "":
			return engine.PriorityNormal, nil
		case "high":
			return engine.PriorityHigh, nil
		}
		return 0, BadRequest("priority", "priority %s: use \"low\", \"normal\", \"high\" or an integer", Echo(s))
	}
	var n int
	if err := json.Unmarshal(raw, &n); err != nil || n < -1000 || n > 1000 {
		return 0, BadRequest("priority", "priority must be \"low\", \"normal\", \"high\" or an integer in [-1000, 1000]")
	}
	return engine.Priority(n), nil
}

// ParsePriority reads a priority as a request names it ("low", "normal", "high" or an integer in
// [-1000, 1000]) from a flag's value.
func ParsePriority(v string) (engine.Priority, error) {
	raw := json.RawMessage(strconv.Quote(v))
	if _, err := strconv.Atoi(v); err == nil {
		raw = json.RawMessage(v)
	}
	p, err := parsePriority(raw)
	if err != nil {
		return 0, fmt.Errorf("priority %q: use low, normal, high or an integer in [-1000, 1000]", v)
	}
	return p, nil
}

// checkPriority refuses a priority above Config.MaxClientPriority unless r carries the server's
// API key: clients cannot all put themselves first (the engine's aging bounds what a flood of
// the highest priority costs the others, not that it happens).
func (s *Server) checkPriority(r *http.Request, p engine.Priority) error {
	limit := engine.PriorityHigh
	if s.cfg.MaxClientPriority != nil {
		limit = *s.cfg.MaxClientPriority
	}
	if p <= limit || (s.cfg.APIKey != "" && s.authorized(r)) {
		return nil
	}
	return BadRequest("priority", "priority %d is above %d, the highest a request may ask for without the API key", p, limit)
}

// ParseLogprobs reads a logprobs field that may be a bool (chat) or an integer number of top
// alternatives (completions). It returns whether log-probabilities are wanted and, for the
// integer form, how many alternatives.
func ParseLogprobs(raw json.RawMessage) (on bool, top int, err error) {
	if IsNull(raw) {
		return false, 0, nil
	}
	if json.Unmarshal(raw, &on) == nil {
		return on, 0, nil
	}
	if err := json.Unmarshal(raw, &top); err != nil || top < 0 || top > MaxTopLogprobs {
		return false, 0, BadRequest("logprobs", "logprobs must be a boolean or an integer in [0, %d]", MaxTopLogprobs)
	}
	return true, top, nil
}

// SamplingFields are the sampling and generation fields all completion routes share (OpenAI's
// and llama.cpp's names). A nil pointer means the field was absent.
type SamplingFields struct {
	Temperature      *float64        `json:"temperature"`
	TopP             *float64        `json:"top_p"`
	TopK             *int            `json:"top_k"`
	MinP             *float64        `json:"min_p"`
	RepeatPenalty    *float64        `json:"repeat_penalty"`
	RepeatLastN      *int            `json:"repeat_last_n"`
	FrequencyPenalty *float64        `json:"frequency_penalty"`
	PresencePenalty  *float64        `json:"presence_penalty"`
	Seed             *int64          `json:"seed"`
	Stop             json.RawMessage `json:"stop"`
	NPredict         *int            `json:"n_predict"`
	IgnoreEOS        *bool           `json:"ignore_eos"`
	CachePrompt      *bool           `json:"cache_prompt"` // accepted; prefix caching is always on
	Priority         json.RawMessage `json:"priority"`
	Grammar          *string         `json:"grammar"`     // llama.cpp: GBNF the output must follow
	JSONSchema       json.RawMessage `json:"json_schema"` // llama.cpp: a JSON Schema the output must follow
	LogitBias        json.RawMessage `json:"logit_bias"`
	MinTokens        *int            `json:"min_tokens"` // vLLM: no end of generation before this many tokens
	CacheSalt        *string         `json:"cache_salt"` // vLLM: the prefix-cache namespace (salt.go)

	// vLLM's (and Hugging Face's) name of repeat_penalty, the same multiplicative penalty; here
	// over repeat_last_n tokens, where vLLM's counts the whole sequence.
	RepetitionPenalty *float64 `json:"repetition_penalty"`

	// vLLM's structured output (guided.go).
	GuidedJSON        json.RawMessage `json:"guided_json"`
	GuidedChoice      json.RawMessage `json:"guided_choice"`
	GuidedRegex       *string         `json:"guided_regex"`
	GuidedGrammar     *string         `json:"guided_grammar"`
	GuidedBackend     *string         `json:"guided_decoding_backend"`
	StructuredOutputs json.RawMessage `json:"structured_outputs"`
}

// parseLogitBias reads OpenAI's logit_bias, {"token id": bias}, or llama.cpp's
// [[id, bias], ...] where a bias of false bans the token (-100). sample.Params.Validate checks
// the ids and the biases.
func parseLogitBias(raw json.RawMessage) (map[int32]float32, error) {
	if IsNull(raw) {
		return nil, nil
	}
	out := map[int32]float32{}
	var obj map[string]float64
	if json.Unmarshal(raw, &obj) == nil {
		for k, b := range obj {
			id, err := strconv.ParseInt(k, 10, 32)
			if err != nil {
				return nil, BadRequest("logit_bias", "logit_bias: key %s is not a token id", Echo(k))
			}
			out[int32(id)] = float32(b)
		}
		return out, nil
	}
	var pairs [][2]json.RawMessage
	if json.Unmarshal(raw, &pairs) != nil {
		return nil, BadRequest("logit_bias", `logit_bias must be an object {"token id": bias} or a list of [token id, bias] pairs`)
	}
	for _, pr := range pairs {
		var id int32
		if json.Unmarshal(pr[0], &id) != nil {
			return nil, BadRequest("logit_bias", "logit_bias: %s is not a token id", Echo(string(pr[0])))
		}
		bias := -100.0
		if string(bytes.TrimSpace(pr[1])) != "false" && json.Unmarshal(pr[1], &bias) != nil {
			return nil, BadRequest("logit_bias", "logit_bias: the bias of token %d must be a number or false", id)
		}
		out[id] = float32(bias)
	}
	return out, nil
}

// GenParams is a validated generation request for one prompt.
type GenParams struct {
	MaxTokens    int           // 0: until end of generation or a full context
	noGeneration bool          // n_predict 0: evaluate nothing, return an empty completion
	sampling     sample.Params // ignore_eos: IgnoreTokens holds the end-of-generation tokens
	priority     engine.Priority
	Logprobs     bool
	TopLogprobs  int
	stop         []string
	cacheSalt    string    // the request's cache_salt (CheckCacheSalt); the tenant's is added at submit
	n            int       // independent sequences per prompt
	KeepTokens   bool      // report token ids with the text even without logprobs
	Stream       bool      // answer with server-sent events
	Tools        *ToolMode // chat with tools: the reply is read for tool calls
	// remember, when set, gets the reply's text and generated tokens of a sequence that ended
	// by itself (end of generation or max_tokens, not a stop string): the turn memory's hook.
	remember func(reply string, ids []int32)
}

// N is the number of independent sequences per prompt (OpenAI's n; 1 unless SetN set it).
func (g GenParams) N() int { return g.n }

// NoGeneration is a generation of nothing, as n_predict 0 asks (streaming or not): the shared
// path answers it without submitting its prompt, which may be empty.
func NoGeneration(stream bool) GenParams { return GenParams{n: 1, noGeneration: true, Stream: stream} }

// OpenAIDefaults are the sampling settings of OpenAI's API when a field is absent: plain sampling
// from the softmax at temperature 1, no truncation, no penalties.
func OpenAIDefaults() sample.Params {
	return sample.Params{Temperature: 1, TopP: 1, RepeatPenalty: 1, RepeatLastN: 64}
}

// repeatPenalty is repeat_penalty, or vLLM's repetition_penalty in its place; both set must
// agree. nil: neither.
func (f *SamplingFields) repeatPenalty() (*float64, error) {
	v := f.RepetitionPenalty
	switch {
	case v == nil:
		return f.RepeatPenalty, nil
	case f.RepeatPenalty != nil && *f.RepeatPenalty != *v:
		return nil, BadRequest("repetition_penalty", "repetition_penalty %g and repeat_penalty %g are one penalty: set one of them", *v, *f.RepeatPenalty)
	case !(*v > 0 && *v <= 100):
		return nil, BadRequest("repetition_penalty", "repetition_penalty must be in (0, 100] (1 disables it), got %g", *v)
	}
	return v, nil
}

// Defaults is the base of a request's sampling: the server's --temp etc. when given, else the
// API's own (api).
func (s *Server) Defaults(api sample.Params) sample.Params {
	if s.cfg.Sampling != nil {
		return *s.cfg.Sampling
	}
	return api
}

// Params applies f over defaults d; eog lists the end-of-generation tokens that ignore_eos bans
// in the sampler (true bans them, false lifts a server-wide --ignore-eos); token ids are checked
// against vocab. The sampling ranges are sample.Params.Validate's; its errors name the field.
func (f *SamplingFields) Params(d sample.Params, eog []int32, vocab int) (GenParams, error) {
	g := GenParams{sampling: d, n: 1}
	p := &g.sampling
	var err error
	if p.LogitBias, err = parseLogitBias(f.LogitBias); err != nil {
		return g, err
	}
	repeat, err := f.repeatPenalty()
	if err != nil {
		return g, err
	}
	for _, v := range []struct {
		to   *float32
		from *float64
	}{{&p.Temperature, f.Temperature}, {&p.TopP, f.TopP}, {&p.MinP, f.MinP}, {&p.RepeatPenalty, repeat},
		{&p.FrequencyPenalty, f.FrequencyPenalty}, {&p.PresencePenalty, f.PresencePenalty}} {
		if v.from != nil {
			*v.to = float32(*v.from)
		}
	}
	if f.TopK != nil {
		p.TopK = *f.TopK
	}
	if f.RepeatLastN != nil {
		p.RepeatLastN = *f.RepeatLastN
	}
	switch {
	case f.Seed == nil || *f.Seed == -1: // llama.cpp's "random"
		p.Seed = rand.Uint64()
	case *f.Seed < 0:
		return g, BadRequest("seed", "seed must be >= 0 (or -1 for a random seed), got %d", *f.Seed)
	default:
		p.Seed = uint64(*f.Seed)
	}
	if v := f.NPredict; v != nil {
		if *v < -1 {
			return g, BadRequest("n_predict", "n_predict must be >= -1 (-1 = until the end of generation), got %d", *v)
		}
		g.MaxTokens = max(*v, 0)
		g.noGeneration = *v == 0
	}
	if g.stop, err = parseStop(f.Stop); err != nil {
		return g, err
	}
	if g.priority, err = parsePriority(f.Priority); err != nil {
		return g, err
	}
	if g.cacheSalt, err = CheckCacheSalt(f.CacheSalt); err != nil {
		return g, err
	}
	if f.MinTokens != nil {
		// Validate bounds it below; checkMinTokens against max_tokens, once that is known.
		p.MinTokens, p.EndTokens = *f.MinTokens, slices.Clone(eog)
	}
	if f.IgnoreEOS != nil {
		p.IgnoreTokens = nil
		if *f.IgnoreEOS {
			p.IgnoreTokens = slices.Clone(eog)
		}
	}
	if err := p.Validate(vocab); err != nil {
		return g, ToAPIError(err)
	}
	return g, nil
}

// checkMinTokens holds min_tokens within the tokens the request may generate.
func (g *GenParams) checkMinTokens() error {
	m := g.sampling.MinTokens
	switch {
	case m > 0 && g.noGeneration:
		return BadRequest("min_tokens", "min_tokens is %d but n_predict 0 generates nothing", m)
	case m > 0 && g.MaxTokens > 0 && m > g.MaxTokens:
		return BadRequest("min_tokens", "min_tokens (%d) must be at most max_tokens (%d)", m, g.MaxTokens)
	}
	return nil
}

// SetMaxTokens applies OpenAI's max_tokens / max_completion_tokens (the newer name wins).
func (g *GenParams) SetMaxTokens(maxTokens, maxCompletion *int) error {
	for _, f := range []struct {
		name string
		v    *int
	}{{"max_tokens", maxTokens}, {"max_completion_tokens", maxCompletion}} {
		if f.v == nil {
			continue
		}
		if *f.v < 1 {
			return BadRequest(f.name, "%s must be >= 1, got %d", f.name, *f.v)
		}
		g.MaxTokens, g.noGeneration = *f.v, false
	}
	return nil
}

// SetN applies OpenAI's n (independent sequences per prompt) and bounds the request's total
// number of sequences by maxN (Config.MaxN).
func (g *GenParams) SetN(n *int, prompts, maxN int) error {
	if prompts > maxN {
		return BadRequest("prompt", "%d prompts in one request, at most %d are allowed", prompts, maxN)
	}
	if n == nil {
		return nil
	}
	// Compare n with the per-prompt limit: n*prompts would overflow for a huge n and pass.
	if limit := maxN / max(prompts, 1); *n < 1 || *n > limit {
		return BadRequest("n", "n must be in [1, %d] (per prompt: %d prompts given), got %d", limit, prompts, *n)
	}
	g.n = *n
	return nil
}

// MaxN is Config.MaxN with its default.
func (s *Server) MaxN() int { return orDefault(s.cfg.MaxN, DefaultMaxN) }
