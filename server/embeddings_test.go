package server

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"ubatch/engine"
	"ubatch/internal/testdata"
	"ubatch/internal/testkit"
	"ubatch/internal/testmodel"
	"ubatch/quant"
	"ubatch/runner"
)

// TestEmbeddingsEndpoint: /v1/embeddings returns llama-embedding's vectors (cosine >= 0.999) for
// both poolings, as floats and as base64, one item per input in order.
func TestEmbeddingsEndpoint(t *testing.T) {
	refs := testdata.LoadEmbeddings(t)
	for _, pool := range []engine.Pooling{engine.PoolMean, engine.PoolLast} {
		t.Run(string(pool), func(t *testing.T) {
			e := newEnv(t, envOptions{embedder: pool})
			var want []testdata.Embedding
			var inputs []string
			for _, it := range refs {
				if it.Pooling == string(pool) {
					want = append(want, it)
					inputs = append(inputs, it.Prompt)
				}
			}
			for _, format := range []string{"float", "base64"} {
				var body struct {
					Object string `json:"object"`
					Data   []struct {
						Index     int             `json:"index"`
						Embedding json.RawMessage `json:"embedding"`
					} `json:"data"`
					Usage struct {
						PromptTokens int `json:"prompt_tokens"`
					} `json:"usage"`
				}
				e.PostJSON("/v1/embeddings", map[string]any{"input": inputs, "model": "stories", "encoding_format": format}, http.StatusOK, &body)
				if body.Object != "list" || len(body.Data) != len(want) || body.Usage.PromptTokens == 0 {
					t.Fatalf("%s: response %+v", format, body)
				}
				for i, d := range body.Data {
					var vec []float32
					if format == "float" {
						if err := json.Unmarshal(d.Embedding, &vec); err != nil {
							t.Fatal(err)
						}
					} else {
						var s string
						json.Unmarshal(d.Embedding, &s)
						raw, err := base64.StdEncoding.DecodeString(s)
						if err != nil {
							t.Fatal(err)
						}
						for j := 0; j+4 <= len(raw); j += 4 {
							vec = append(vec, math.Float32frombits(binary.LittleEndian.Uint32(raw[j:])))
						}
					}
					if c := testdata.Cosine(vec, want[i].Embedding); d.Index != i || len(vec) != len(want[i].Embedding) || c < 0.999 {
						t.Errorf("%s item %d (index %d): cosine %.5f, len %d", format, i, d.Index, c, len(vec))
					}
				}
			}
		})
	}
}

// TestEmbeddingsDimensions: dimensions below the model's width (64) keeps the first ones of
// llama-embedding's vector, normalized again (OpenAI's text-embedding-3 shortening); the width
// itself is the whole vector.
func TestEmbeddingsDimensions(t *testing.T) {
	refs := testdata.LoadEmbeddings(t)
	var ref testdata.Embedding
	for _, it := range refs {
		if it.Pooling == "mean" {
			ref = it
			break
		}
	}
	e := newEnv(t, envOptions{embedder: engine.PoolMean})
	for _, tc := range []struct {
		name string
		dims int
	}{
		{name: "one", dims: 1},
		{name: "seven", dims: 7},
		{name: "the width", dims: 64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var body struct {
				Data []struct{ Embedding []float32 } `json:"data"`
			}
			e.PostJSON("/v1/embeddings", map[string]any{"input": ref.Prompt, "dimensions": tc.dims}, http.StatusOK, &body)
			if len(body.Data) != 1 || len(body.Data[0].Embedding) != tc.dims {
				t.Fatalf("got %d items, want one of %d dimensions: %+v", len(body.Data), tc.dims, body)
			}
			got, want := body.Data[0].Embedding, normalize(ref.Embedding[:tc.dims])
			var norm float64
			for _, x := range got {
				norm += float64(x) * float64(x)
			}
			if c := testdata.Cosine(got, want); c < 0.999 || math.Abs(norm-1) > 1e-4 {
				t.Errorf("cosine %.5f against the reference's first %d renormalized, norm² %.6f", c, tc.dims, norm)
			}
		})
	}
}

func TestEmbeddingsErrors(t *testing.T) {
	e := newEnv(t, envOptions{embedder: engine.PoolMean})
	long := strings.Repeat("Once upon a time ", 100)
	for _, tc := range []struct {
		name, body, param string
		status            int
	}{
		{"no input", `{"model":"m"}`, "input", 400},
		{"bad format", `{"input":"hi","encoding_format":"int8"}`, "encoding_format", 400},
		{"dimensions zero", `{"input":"hi","dimensions":0}`, "dimensions", 400},
		{"dimensions over the width", `{"input":"hi","dimensions":65}`, "dimensions", 400},
		{"token outside vocabulary", `{"input":[1,99999]}`, "input", 400},
		{"too long", `{"input":"` + long + `"}`, "input", 400},
		{"malformed", `{"input":`, "", 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := e.Post(context.Background(), "/v1/embeddings", tc.body)
			defer resp.Body.Close()
			d := checkError(t, resp, tc.status, "invalid_request_error")
			got := ""
			if d.Param != nil {
				got = *d.Param
			}
			if got != tc.param {
				t.Errorf("param %q, want %q (%s)", got, tc.param, d.Message)
			}
		})
	}
	off := newEnv(t, envOptions{})
	resp := off.Post(context.Background(), "/v1/embeddings", `{"input":"hi"}`)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("embeddings off: status %d, want 404", resp.StatusCode)
	}
}

// embedEnv serves /v1/embeddings over e's model and engine with a fresh embedder (inputs of at
// most 128 tokens) and cfg's limits; wrap, when set, wraps the handler.
func embedEnv(t *testing.T, e *testEnv, cfg Config, wrap func(http.Handler) http.Handler) (*Embedder, string) {
	t.Helper()
	emb := NewEmbedder(engine.PoolMean, 128)
	cfg.Model, cfg.Engine, cfg.Embedder, cfg.ModelID = e.model, e.eng, emb, "stories"
	cfg.Dialects = testDialects
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := srv.Handler()
	if wrap != nil {
		h = wrap(h)
	}
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	return emb, ts.URL
}

// tokenInputs is n inputs of l token ids each.
func tokenInputs(n, l int) [][]int {
	in := make([][]int, n)
	for i := range in {
		for j := range l {
			in[i] = append(in[i], 10+j)
		}
	}
	return in
}

// TestEmbeddingsLimits: a request over the input or the token cap is a 400 naming input and the
// limit, refused before anything is embedded; one at the caps is served.
func TestEmbeddingsLimits(t *testing.T) {
	e := newEnv(t, envOptions{})
	emb, url := embedEnv(t, e, Config{MaxEmbeddingInputs: 3, MaxEmbeddingTokens: 40}, nil)
	for _, tc := range []struct {
		name     string
		input    any
		status   int
		mention  string // in the error message
		embedded int64  // inputs computed
	}{
		{"at both caps", tokenInputs(2, 20), 200, "", 2},
		{"three inputs", tokenInputs(3, 5), 200, "", 3},
		{"one input over the input cap", tokenInputs(4, 1), 400, "at most 3 per request (--max-embedding-inputs)", 0},
		{"many inputs", tokenInputs(100000, 1), 400, "input has 100000 items", 0},
		{"one token over the token cap", tokenInputs(3, 14), 400, "at most 40 per request (--max-embedding-tokens)", 0},
		{"one long input", tokenInputs(1, 41), 400, "more than 40 tokens", 0},
		{"longer than the context", tokenInputs(1, 129), 400, "embedding context of 128", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := emb.computed.Load()
			body, _ := json.Marshal(map[string]any{"input": tc.input})
			resp, err := http.Post(url+"/v1/embeddings", "application/json", bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if got := emb.computed.Load() - before; got != tc.embedded {
				t.Errorf("%d inputs embedded, want %d", got, tc.embedded)
			}
			if tc.status == 200 {
				var out embeddingsResponse
				if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&out) != nil || int64(len(out.Data)) != tc.embedded {
					t.Fatalf("status %d, %d items", resp.StatusCode, len(out.Data))
				}
				return
			}
			d := checkError(t, resp, tc.status, "invalid_request_error")
			if d.Param == nil || *d.Param != "input" || !strings.Contains(d.Message, tc.mention) {
				t.Errorf("param %v message %q, want input and %q", d.Param, d.Message, tc.mention)
			}
		})
	}
}

// TestEmbeddingsStopWhenClientLeaves: a client that goes away while its inputs are being embedded
// in the engine has them dropped there (the engine goes idle with most of them never computed);
// one that stays gets every input.
func TestEmbeddingsStopWhenClientLeaves(t *testing.T) {
	e := newEnv(t, envOptions{batch: 8}) // small steps: the inputs take thousands
	for _, tc := range []struct {
		name  string
		leave bool
		n, l  int // inputs, tokens each
	}{
		{"client stays", false, 16, 30},
		{"client leaves after the first input", true, 256, 120},
	} {
		n, l := tc.n, tc.l
		t.Run(tc.name, func(t *testing.T) {
			returned := make(chan struct{})
			wrap := func(h http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					defer close(returned)
					h.ServeHTTP(w, r)
				})
			}
			emb, url := embedEnv(t, e, Config{}, wrap)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			body, _ := json.Marshal(map[string]any{"input": tokenInputs(n, l)})
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/embeddings", bytes.NewReader(body))
			computedBefore := e.eng.Stats().PromptComputed
			got := make(chan int, 1)
			go func() {
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					got <- -1
					return
				}
				defer resp.Body.Close()
				got <- resp.StatusCode
			}()
			if tc.leave {
				testkit.Eventually(t, 30*time.Second, "the first embedding", func() bool { return emb.computed.Load() > 0 })
				cancel()
			}
			select {
			case <-returned:
			case <-time.After(60 * time.Second):
				t.Fatal("the handler did not return")
			}
			testkit.Eventually(t, 30*time.Second, "the engine to go idle", func() bool { return e.eng.Stats().Running == 0 })
			computed := e.eng.Stats().PromptComputed - computedBefore
			if status := <-got; !tc.leave && (status != 200 || emb.computed.Load() != int64(n) || computed != uint64(n*l)) {
				t.Errorf("status %d, %d inputs and %d tokens embedded, want %d and %d", status, emb.computed.Load(), computed, n, n*l)
			}
			if tc.leave && computed >= uint64(n*l/2) {
				t.Errorf("%d of the %d tokens computed after the client left early", computed, n*l)
			}
		})
	}
}

// TestEmbeddingsMatchRunner: embeddings computed in the engine, in chunks of a small step budget
// beside a generating stream, are testmodel.Embed's on a context of their own (the path before
// embeddings moved into the engine), for every pooling the runner has, within
// TestBatchedEqualsAlone's bound for this model (model/all): the kernels for different token
// counts may differ in the last bit, so a batch's composition is not bit-neutral.
func TestEmbeddingsMatchRunner(t *testing.T) {
	for _, pool := range []engine.Pooling{engine.PoolMean, engine.PoolLast} {
		t.Run(string(pool), func(t *testing.T) {
			e := newEnv(t, envOptions{embedder: pool, batch: 12})
			s := testmodel.Session(t, e.model, runner.Options{NCtx: 128, NBatch: 128, NUBatch: 128, KVType: quant.F32, Threads: 1, Embeddings: true})
			gen := e.Post(context.Background(), "/v1/completions", map[string]any{"prompt": "Once upon a time", "max_tokens": 60, "temperature": 0, "stream": true})
			defer gen.Body.Close()
			inputs := []string{"Once upon a time, there was a little girl named Lily.", "She liked to play", "The cat sat on the mat and looked at the big red ball for a long time."}
			var body struct {
				Data []struct {
					Embedding []float32 `json:"embedding"`
				} `json:"data"`
			}
			e.PostJSON("/v1/embeddings", map[string]any{"input": inputs}, http.StatusOK, &body)
			if len(body.Data) != len(inputs) {
				t.Fatalf("%d embeddings for %d inputs", len(body.Data), len(inputs))
			}
			for i, in := range inputs {
				toks, err := e.srv.PromptTokens("input", PromptInput{text: in, isText: true})
				if err != nil {
					t.Fatal(err)
				}
				want, err := testmodel.Embed(s, toks, pool)
				if err != nil {
					t.Fatal(err)
				}
				if got := body.Data[i].Embedding; len(got) != len(want) {
					t.Errorf("input %d (%d tokens): %d dimensions, testmodel.Embed's %d", i, len(toks), len(got), len(want))
				} else if e := testdata.RelRMS(got, want); e > 1e-4 {
					t.Errorf("input %d (%d tokens): relative RMS %.2e from testmodel.Embed's > 1e-4", i, len(toks), e)
				}
			}
			if _, err := io.Copy(io.Discard, gen.Body); err != nil {
				t.Error(err)
			}
		})
	}
}
