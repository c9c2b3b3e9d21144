package llamacpp

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"ubatch/server"
	"ubatch/server/servertest"
)

// FuzzCompletionParse fuzzes /completion's parser (a decoded body through llamaParams): bad
// input is a 400 (or a 500 it words), never a panic, and what it accepts is what the generation
// relies on: one non-empty prompt of the vocabulary's tokens, n_probs within [0,
// MaxTopLogprobs]. Package server's FuzzLlamaCompletion serves the same bodies through the
// whole route.
func FuzzCompletionParse(f *testing.F) {
	for _, s := range []string{
		`{"prompt": "Once upon a time", "n_predict": 3, "temperature": 0}`,
		`{"prompt": [1, 2, 3], "n_predict": -1, "n_probs": 3, "return_tokens": true, "stream": true}`,
		`{"prompt": ["a", "b"]}`, `{"prompt": []}`, `{"prompt": [99999]}`, `{"prompt": null}`,
		`{"prompt": "x", "n_probs": -1}`, `{"prompt": "x", "n_probs": 1000}`, `{"prompt": "x", "n_predict": 0}`,
		`{"prompt": "x", "grammar": "root ::= \"a\"", "ignore_eos": true}`,
		`{"prompt": "x", "json_schema": {"type": "object"}, "grammar": "root ::= \"a\""}`,
		`{"prompt": "x", "logit_bias": [[1, false], [2, -3.5]], "repeat_penalty": 1.1, "repetition_penalty": 1.2}`,
		`{"prompt": "x", "temperature": "hot"}`, `[1]`, `null`, ``, `{`,
	} {
		f.Add([]byte(s))
	}
	e := newEnv(f, servertest.Options{NCtx: 64, NSeq: 4})
	s := &api{e.Server}
	vocab := e.Model.Vocab.VocabSize()
	f.Fuzz(func(t *testing.T, body []byte) {
		var req llamaCompletionRequest
		r := httptest.NewRequest(http.MethodPost, "/completion", bytes.NewReader(body))
		err := server.DecodeBody(httptest.NewRecorder(), r, server.DefaultMaxBodyBytes, &req)
		var g server.GenParams
		var prompt []int32
		if err == nil {
			g, prompt, err = s.llamaParams(context.Background(), &req)
		}
		if err != nil {
			var ae *server.APIError
			if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest && ae.Status != http.StatusInternalServerError {
				t.Fatalf("parsing %q: %v", body, err)
			}
			return
		}
		if len(prompt) == 0 || g.TopLogprobs < 0 || g.TopLogprobs > server.MaxTopLogprobs || g.TopLogprobs > 0 && !g.Logprobs {
			t.Fatalf("%q accepted: %d prompt tokens, logprobs %v top %d", body, len(prompt), g.Logprobs, g.TopLogprobs)
		}
		for _, tok := range prompt {
			if tok < 0 || int(tok) >= vocab {
				t.Fatalf("%q accepted with token %d outside the vocabulary of %d", body, tok, vocab)
			}
		}
	})
}
