package openai_test

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"ubatch/engine"
	"ubatch/internal/testmodel"
	"ubatch/quant"
	"ubatch/runner"
	"ubatch/server"
	"ubatch/server/servertest"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden answers in testdata")

// goldenCase is one request whose whole answer (status, Content-Type, body) is compared with
// testdata/NAME.golden.
type goldenCase struct {
	name   string
	method string
	path   string
	body   string // %d is the biased token's id
}

// Every generation biases one token by +100 (and 100 again as a second choice is never near),
// so that the text is the same on every CPU path: the golden answers check the wording of the
// routes, not the model's arithmetic.
var goldenCases = []goldenCase{
	{name: "completion", method: "POST", path: "/v1/completions",
		body: `{"prompt": "Once upon", "max_tokens": 3, "logit_bias": {"%d": 100}}`},
	{name: "completion_noprefix", method: "POST", path: "/completions",
		body: `{"prompt": "Once upon", "max_tokens": 2, "logit_bias": {"%d": 100}, "seed": 3}`},
	{name: "completion_n2_two_prompts", method: "POST", path: "/v1/completions",
		body: `{"prompt": ["Once upon", "A cat"], "n": 2, "max_tokens": 2, "logit_bias": {"%d": 100}}`},
	{name: "completion_stream_usage", method: "POST", path: "/v1/completions",
		body: `{"prompt": "Once upon", "max_tokens": 3, "stream": true, "stream_options": {"include_usage": true}, "logit_bias": {"%d": 100}}`},
	{name: "completion_stream", method: "POST", path: "/v1/completions",
		body: `{"prompt": [1, 2, 3], "max_tokens": 2, "stream": true, "logit_bias": {"%d": 100}}`},
	{name: "completion_zero", method: "POST", path: "/v1/completions",
		body: `{"prompt": "Once upon", "n_predict": 0}`},
	{name: "chat", method: "POST", path: "/v1/chat/completions",
		body: `{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3, "logit_bias": {"%d": 100}}`},
	{name: "chat_logprobs", method: "POST", path: "/v1/chat/completions",
		body: `{"messages": [{"role": "user", "content": "Hi"}], "max_completion_tokens": 2, "logprobs": true, "top_logprobs": 0, "logit_bias": {"%d": 100}}`},
	{name: "chat_stream", method: "POST", path: "/v1/chat/completions",
		body: `{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}], "max_tokens": 3, "n": 2, "stream": true, "stream_options": {"include_usage": true}, "logit_bias": {"%d": 100}}`},
	{name: "chat_bad_n", method: "POST", path: "/v1/chat/completions",
		body: `{"messages": [{"role": "user", "content": "Hi"}], "n": "two"}`},
	{name: "chat_bad_temperature", method: "POST", path: "/v1/chat/completions",
		body: `{"messages": [{"role": "user", "content": "Hi"}], "temperature": "hot"}`},
	{name: "chat_no_messages", method: "POST", path: "/v1/chat/completions", body: `{"max_tokens": 3}`},
	{name: "chat_tool_choice_unknown", method: "POST", path: "/v1/chat/completions",
		body: `{"messages": [{"role": "user", "content": "Hi"}], "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}], "tool_choice": {"type": "function", "function": {"name": "g"}}}`},
	{name: "completion_echo", method: "POST", path: "/v1/completions", body: `{"prompt": "x", "echo": true}`},
	{name: "completion_bad_max_tokens", method: "POST", path: "/v1/completions", body: `{"prompt": "x", "max_tokens": 0}`},
	{name: "chat_get", method: "GET", path: "/v1/chat/completions"},
	{name: "embeddings_off", method: "POST", path: "/v1/embeddings", body: `{"input": "x"}`},
	{name: "rerank_not_reranker", method: "POST", path: "/v1/rerank", body: `{"query": "x", "documents": ["y"]}`},
}

// TestOpenAIGolden compares whole OpenAI answers with the golden files, ids and times masked.
func TestOpenAIGolden(t *testing.T) {
	e := servertest.New(t, servertest.Options{Model: servertest.SynthModel(t, "qwen3", false, false), NSeq: 4})
	runGolden(t, e, goldenCases)
}

// TestOpenAIGoldenEmbeddings compares /v1/embeddings and /v1/rerank answers, their vectors and
// scores masked (they are the model's arithmetic).
func TestOpenAIGoldenEmbeddings(t *testing.T) {
	m := testmodel.Open(t, servertest.SynthModel(t, "qwen3", false, true))
	rt := testmodel.Runtime(t, m, runner.Options{NCtx: 512, NBatch: 512, NUBatch: 512, NSeqMax: 4, KVType: quant.F32, Threads: 2})
	eng := testmodel.Engine(t, m, rt, engine.Config{})
	testmodel.Run(t, eng)
	rr, err := server.NewReranker(m, 0)
	if err != nil {
		t.Fatal(err)
	}
	e := servertest.Serve(t, m, eng, server.Config{ModelID: "synth", Reranker: rr, Embedder: server.NewEmbedder(engine.PoolMean, 256)})
	runGolden(t, e, []goldenCase{
		{name: "embeddings", method: "POST", path: "/v1/embeddings", body: `{"input": ["Once upon", [1, 2, 3]], "dimensions": 4}`},
		{name: "embeddings_noprefix", method: "POST", path: "/embeddings", body: `{"input": "A cat", "dimensions": 2}`},
		{name: "embeddings_bad_format", method: "POST", path: "/v1/embeddings", body: `{"input": "x", "encoding_format": "hex"}`},
		{name: "embeddings_bad_dimensions", method: "POST", path: "/v1/embeddings", body: `{"input": "x", "dimensions": 100000}`},
		{name: "rerank", method: "POST", path: "/v1/rerank", body: `{"query": "cat", "documents": ["a cat"], "top_n": 2}`},
		{name: "rerank_tei", method: "POST", path: "/rerank", body: `{"query": "cat", "texts": ["a dog"], "return_text": true}`},
		{name: "rerank_no_query", method: "POST", path: "/v1/reranking", body: `{"documents": ["a"]}`},
	})
}

// masks hide what changes between runs (ids, times) or between CPU paths (floats).
var masks = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`"id":"(cmpl-|chatcmpl-|call_)[A-Za-z0-9]+"`), `"id":"${1}*"`},
	{regexp.MustCompile(`"created":[0-9]+`), `"created":0`},
	{regexp.MustCompile(`"(logprob|relevance_score|score)":-?[0-9][0-9.e+-]*`), `"${1}":*`},
	{regexp.MustCompile(`-?[0-9]+\.[0-9]+(e[-+]?[0-9]+)?|-?[0-9]+e[-+]?[0-9]+`), `*`},
}

func runGolden(t *testing.T, e *servertest.Env, cases []goldenCase) {
	t.Helper()
	biased := e.Model.Vocab.Encode("cat", false, false)[0]
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			body := c.body
			if strings.Contains(body, "%d") {
				body = fmt.Sprintf(body, biased)
			}
			req, err := http.NewRequestWithContext(context.Background(), c.method, e.URL+c.path, strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := e.Client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			data, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			got := fmt.Sprintf("%d\nContent-Type: %s\nAllow: %s\n\n%s", resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("Allow"), data)
			for _, m := range masks {
				got = m.re.ReplaceAllString(got, m.with)
			}
			path := filepath.Join("testdata", c.name+".golden")
			if *updateGolden {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to write it)", err)
			}
			if got != string(want) {
				t.Errorf("%s %s answers\n%s\nwant (%s)\n%s", c.method, c.path, got, path, want)
			}
		})
	}
}
