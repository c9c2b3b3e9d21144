package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"ubatch/internal/sse"
)

// fuzzDeadline bounds one fuzz input's request. The engine's context holds 64 tokens, so any
// generation ends quickly whatever the body asks for; far longer means a hang.
const fuzzDeadline = 30 * time.Second

// newFuzzEnv is the server the fuzz targets share across inputs: stories260K behind a running
// engine with a 64-cell context (a bound on every generation) and a queue deep enough for the
// most sequences a request may ask for.
func newFuzzEnv(f *testing.F) *testEnv {
	return newEnv(f, envOptions{nCtx: 64, nSeq: 4, maxQueue: 2 * DefaultMaxN})
}

// fuzzSeeds are bodies every target starts from: valid requests of each route's forms and
// near misses.
var fuzzSeeds = []string{
	`{"prompt": "Once upon a time", "max_tokens": 3, "temperature": 0}`,
	`{"prompt": ["a", [1, 2, 3]], "n": 2, "max_tokens": 2, "stream": true, "stream_options": {"include_usage": true}}`,
	`{"prompt": [[5, 6], [7]], "logprobs": 3, "max_tokens": 2, "stop": ["the", ""], "priority": "high"}`,
	`{"prompt": "x", "n_predict": 0, "seed": -1, "top_k": 5, "top_p": 0.5, "min_p": 0.1, "priority": -3}`,
	`{"prompt": "x", "max_tokens": 2, "logprobs": true, "top_logprobs": 20, "ignore_eos": true, "stop": "a"}`,
	`{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "stream": true}`,
	`{"messages": [{"role": "system", "content": null}, {"role": "user", "content": [{"type": "text", "text": "Hi"}]}], ` +
		`"n": 3, "max_completion_tokens": 2, "tools": [{"type": "function"}], "chat_template_kwargs": {"x": 1}}`,
	`{"prompt": "Hi", "n_predict": 2, "stream": true, "return_tokens": true, "repeat_penalty": 1.1, "repeat_last_n": -1}`,
	`{"prompt": [1, 2], "n_predict": -1, "frequency_penalty": 2, "presence_penalty": -2, "cache_prompt": true}`,
	`{"prompt": "x", "n": 64, "max_tokens": 1}`,
	// n times the prompt count used to overflow past the limit, then panic or spin in generate.
	`{"prompt": ["a", "b"], "n": 9223372036854775807, "max_tokens": 1}`,
	`{"prompt": ["a", "b", "c", "d"], "n": 4611686018427387905, "max_tokens": 1}`,
	`{"prompt": [], "max_tokens": 1}`, `{"prompt": [[]]}`, `{"prompt": [99999]}`, `{"prompt": null}`,
	`{"messages": []}`, `{"messages": [null]}`, `{"messages": [{"role": 5}]}`, `[1]`, `"x"`, `null`, ``, `{`,
	`{"temperature": "hot"}`, `{"prompt": "x", "temperature": 1e400}`, `{"prompt": "x", "max_tokens": 0}`,
	// Issue 19's hostile constraints and tools (each once crashed, starved or ballooned a node).
	`{"prompt":"x","max_tokens":5,"grammar":"root ::= (\"a\"?){0,70000} \"b\""}`,
	`{"prompt":"x","grammar":"root ::= \"a\"","ignore_eos":true}`,
	`{"prompt":"x","max_tokens":4,"grammar":"root ::= [^!\\x00]{0,1000} \"END\" | [^!\\x00]{0,1000} \"FIN\"","logit_bias":{"0":100}}`,
	`{"prompt":"x","json_schema":{"type":"object","additionalProperties":true,"properties":{"kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk":{}}}}`,
	`{"prompt":"x","json_schema":{"enum":[1,2,3,4,5,6,7,8,9,10]},"grammar":"root ::= \"a\""}`,
	`{"messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema","json_schema":{"schema":{"anyOf":[{"const":1},{"const":2}]}}}}`,
	`{"messages":[{"role":"user","content":"hi"}],"tool_choice":"required","tools":[{"type":"function","function":{"name":"f</tool_call>","parameters":{"type":"object"}}}]}`,
	`{"messages":[{"role":"user","content":"hi"}],"tool_choice":"required","max_tokens":8,"tools":[{"type":"function","function":{"name":"tree","parameters":{"type":"object","properties":{"c":{"type":"array","items":{"$ref":"#"}}}}}}]}`,
	`{"messages":[{"role":"user","content":"hi"}],"tool_choice":"auto","tools":[{"type":"function","function":{"name":"f","parameters":{"$ref":"#/$defs/missing"}}}]}`,
}

// FuzzCompletions fuzzes /v1/completions through its handler alone, as FuzzLlamaCompletion
// does: its request type is server/openai's.
func FuzzCompletions(f *testing.F) {
	fuzzRoute[struct{}](f, "/v1/completions", nil)
}

func FuzzChatCompletions(f *testing.F) {
	fuzzRoute(f, "/v1/chat/completions", onePrompt((*Server).ChatParams))
}

// FuzzLlamaCompletion fuzzes llama.cpp's /completion through its handler alone: its request
// type is server/llamacpp's, which this package cannot name (its fields are SamplingFields,
// which the other targets' parsers check).
func FuzzLlamaCompletion(f *testing.F) {
	fuzzRoute[struct{}](f, "/completion", nil)
}

// paramsFunc is a route's parser: its decoded request's generation parameters and prompts.
type paramsFunc[R any] func(*Server, context.Context, *R) (GenParams, [][]int32, error)

// onePrompt is params as a paramsFunc, for a route of one prompt.
func onePrompt[R any](params func(*Server, context.Context, *R) (GenParams, []int32, error)) paramsFunc[R] {
	return func(s *Server, ctx context.Context, req *R) (GenParams, [][]int32, error) {
		g, prompt, err := params(s, ctx, req)
		return g, [][]int32{prompt}, err
	}
}

// decodeBytes runs DecodeBody over body.
func decodeBytes(body []byte, v any) error {
	r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
	return DecodeBody(httptest.NewRecorder(), r, DefaultMaxBodyBytes, v)
}

// errInvariant marks a parsed request that breaks a limit the handlers rely on.
var errInvariant = errors.New("invariant broken")

// checkGen checks what the parsers accepted: the limits the generation relies on hold.
func checkGen(s *Server, g GenParams, prompts [][]int32) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{errInvariant}, args...)...)
	}
	switch {
	case len(prompts) == 0 || len(prompts) > DefaultMaxN:
		return bad("%d prompts", len(prompts))
	case g.n < 1 || g.n > DefaultMaxN/len(prompts):
		return bad("n=%d with %d prompts: more than %d sequences", g.n, len(prompts), DefaultMaxN)
	case g.MaxTokens < 0 || g.TopLogprobs < 0 || g.TopLogprobs > MaxTopLogprobs || g.TopLogprobs > 0 && !g.Logprobs:
		return bad("max tokens %d, logprobs %v top %d", g.MaxTokens, g.Logprobs, g.TopLogprobs)
	case len(g.stop) > maxStopStrings:
		return bad("%d stop strings", len(g.stop))
	}
	for _, st := range g.stop {
		if st == "" || len(st) > maxStopLen {
			return bad("stop string %q", st)
		}
	}
	for i, p := range prompts {
		if len(p) == 0 {
			return bad("prompt %d is empty", i)
		}
		for _, tok := range p {
			if tok < 0 || int(tok) >= s.cfg.Model.Vocab.VocabSize() {
				return bad("prompt %d has token %d", i, tok)
			}
		}
	}
	return nil
}

// fuzzRoute fuzzes the JSON body of one route: the body decoded as an R and params (unless nil) check what
// the route's parsers accept (they must reject bad input with a 400, never panic, and accept
// only requests within the limits: checkGen), then the whole handler serves the body against
// the real engine: it must answer in time, with a well-formed response, and leave no sequence
// behind.
func fuzzRoute[R any](f *testing.F, path string, params paramsFunc[R]) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	e := newFuzzEnv(f)
	h := e.srv.Handler()
	parse := func(body []byte) error {
		if params == nil {
			return nil
		}
		var req R
		if err := decodeBytes(body, &req); err != nil {
			return err
		}
		g, prompts, err := params(e.srv, context.Background(), &req)
		if err == nil {
			err = checkGen(e.srv, g, prompts)
		}
		return err
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if err := parse(body); err != nil {
			var ae *APIError
			if errors.Is(err, errInvariant) || !errors.As(err, &ae) || ae.Status != http.StatusBadRequest && ae.Status != http.StatusInternalServerError {
				t.Fatalf("parsing %q: %v", body, err)
			}
		}
		status, ctype, resp := serveFuzz(t, h, path, body)
		checkFuzzResponse(t, body, status, ctype, resp)
		deadline := time.Now().Add(fuzzDeadline)
		for st := e.eng.Stats(); st.Running > 0 || st.Waiting > 0 || st.KV.Used > 0; st = e.eng.Stats() {
			if time.Now().After(deadline) {
				t.Fatalf("body %q: the engine kept sequences after the response: %+v", body, st)
			}
			time.Sleep(time.Millisecond)
		}
		// The engine and the handlers recover panics into failed requests (an error event, a 500
		// the check above refuses): a recovered panic is still a bug the fuzzer must report.
		for _, where := range []string{"engine", "handler"} {
			if n := metricValue(t, e.metrics.panics.WithLabelValues(where)); n > 0 {
				t.Fatalf("body %q: %v panics recovered in the %s", body, n, where)
			}
		}
	})
}

// serveFuzz runs the handler on body, failing with the goroutine stacks if it hangs and with
// the stack of a panic.
func serveFuzz(t *testing.T, h http.Handler, path string, body []byte) (int, string, []byte) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, path, bytes.NewReader(body))
	rec := httptest.NewRecorder()
	done := make(chan string, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- fmt.Sprintf("%v\n%s", p, debug.Stack())
				return
			}
			done <- ""
		}()
		h.ServeHTTP(rec, req)
	}()
	select {
	case p := <-done:
		if p != "" {
			t.Fatalf("POST %s %q panicked: %s", path, body, p)
		}
	case <-time.After(fuzzDeadline):
		buf := make([]byte, 1<<20)
		t.Fatalf("POST %s %q: no answer after %v\n%s", path, body, fuzzDeadline, buf[:runtime.Stack(buf, true)])
	}
	return rec.Code, rec.Header().Get("Content-Type"), rec.Body.Bytes()
}

// checkFuzzResponse checks a response's shape: a JSON error with a client-error status, a JSON
// object, or an event stream of JSON objects without error events.
func checkFuzzResponse(t *testing.T, body []byte, status int, ctype string, resp []byte) {
	t.Helper()
	switch status {
	case http.StatusOK:
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusTooManyRequests:
		var eb errorBody
		if err := json.Unmarshal(resp, &eb); err != nil || eb.Error.Message == "" {
			t.Fatalf("body %q: status %d with a malformed error %q", body, status, resp)
		}
		return
	default:
		t.Fatalf("body %q: status %d: %s", body, status, resp)
	}
	if ctype != "text/event-stream" {
		var v map[string]any
		if err := json.Unmarshal(resp, &v); err != nil {
			t.Fatalf("body %q: response is not a JSON object: %v: %q", body, err, resp)
		}
		return
	}
	sc := sse.NewReader(bytes.NewReader(resp), 1<<20)
	sc.All = true
	for sc.Next() {
		data := sc.Text()
		if string(sc.Raw()) != "data: "+data+"\n\n" {
			t.Fatalf("body %q: SSE event %q", body, sc.Raw())
		}
		if data == "[DONE]" {
			continue
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(data), &v); err != nil {
			t.Fatalf("body %q: event %q is not a JSON object: %v", body, data, err)
		}
		if _, isErr := v["error"]; isErr {
			t.Fatalf("body %q: error event %s", body, data)
		}
	}
}
