package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// checkError checks an error response's status and OpenAI error shape and returns its body.
func checkError(t *testing.T, resp *http.Response, status int, typ string) errorDetail {
	t.Helper()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != status {
		t.Fatalf("status %d, want %d: %s", resp.StatusCode, status, data)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q, want application/json", ct)
	}
	var body struct {
		Error *errorDetail `json:"error"`
	}
	if err := json.Unmarshal(data, &body); err != nil || body.Error == nil {
		t.Fatalf("body %s is not an OpenAI error object (%v)", data, err)
	}
	if body.Error.Message == "" || body.Error.Type != typ {
		t.Fatalf("error %+v: want type %q and a message", body.Error, typ)
	}
	// param and code are always present, possibly null, as in OpenAI's responses.
	var raw map[string]map[string]json.RawMessage
	json.Unmarshal(data, &raw)
	for _, k := range []string{"message", "type", "param", "code"} {
		if _, ok := raw["error"][k]; !ok {
			t.Fatalf("error object %s lacks %q", data, k)
		}
	}
	return *body.Error
}

func TestErrorResponses(t *testing.T) {
	e := newEnv(t, envOptions{apiKey: "sekret", maxBody: 4096})
	auth := []string{"Authorization", "Bearer sekret"}
	tests := []struct {
		name      string
		method    string
		path      string
		body      string
		header    []string
		status    int
		typ       string
		param     string // expected error.param ("" = not checked)
		msgSubstr string
	}{
		{name: "malformed JSON", method: "POST", path: "/v1/completions", body: `{"prompt": "x",`, header: auth, status: 400, typ: "invalid_request_error", msgSubstr: "JSON"},
		{name: "empty body", method: "POST", path: "/v1/completions", body: ``, header: auth, status: 400, typ: "invalid_request_error"},
		{name: "body not an object", method: "POST", path: "/v1/completions", body: `[1,2]`, header: auth, status: 400, typ: "invalid_request_error"},
		{name: "wrong field type", method: "POST", path: "/v1/completions", body: `{"prompt": "x", "temperature": "hot"}`, header: auth, status: 400, typ: "invalid_request_error", param: "temperature"},
		{name: "bad temperature", method: "POST", path: "/v1/completions", body: `{"prompt": "x", "temperature": -1}`, header: auth, status: 400, typ: "invalid_request_error", param: "temperature"},
		{name: "bad top_p", method: "POST", path: "/v1/completions", body: `{"prompt": "x", "top_p": 0}`, header: auth, status: 400, typ: "invalid_request_error", param: "top_p"},
		{name: "bad max_tokens", method: "POST", path: "/v1/completions", body: `{"prompt": "x", "max_tokens": 0}`, header: auth, status: 400, typ: "invalid_request_error", param: "max_tokens"},
		{name: "bad n", method: "POST", path: "/v1/completions", body: `{"prompt": "x", "n": 0}`, header: auth, status: 400, typ: "invalid_request_error", param: "n"},
		{name: "bad stop", method: "POST", path: "/v1/completions", body: `{"prompt": "x", "stop": 3}`, header: auth, status: 400, typ: "invalid_request_error", param: "stop"},
		{name: "bad priority", method: "POST", path: "/v1/completions", body: `{"prompt": "x", "priority": "urgent"}`, header: auth, status: 400, typ: "invalid_request_error", param: "priority"},
		{name: "missing prompt", method: "POST", path: "/v1/completions", body: `{"max_tokens": 3}`, header: auth, status: 400, typ: "invalid_request_error", param: "prompt"},
		{name: "empty prompt", method: "POST", path: "/v1/completions", body: `{"prompt": ""}`, header: auth, status: 400, typ: "invalid_request_error", param: "prompt"},
		{name: "token outside vocabulary", method: "POST", path: "/v1/completions", body: `{"prompt": [1, 99999]}`, header: auth, status: 400, typ: "invalid_request_error", param: "prompt"},
		{name: "prompt too long", method: "POST", path: "/v1/completions", body: `{"prompt": [` + strings.Repeat("300,", 600) + `1]}`, header: auth, status: 400, typ: "invalid_request_error", param: "prompt"},
		{name: "missing messages", method: "POST", path: "/v1/chat/completions", body: `{"model": "x"}`, header: auth, status: 400, typ: "invalid_request_error", param: "messages"},
		{name: "message without role", method: "POST", path: "/v1/chat/completions", body: `{"messages": [{"content": "hi"}]}`, header: auth, status: 400, typ: "invalid_request_error", param: "messages"},
		{name: "top_logprobs without logprobs", method: "POST", path: "/v1/chat/completions", body: `{"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 2}`, header: auth, status: 400, typ: "invalid_request_error", param: "top_logprobs"},
		{name: "missing API key", method: "POST", path: "/v1/completions", body: `{"prompt": "x"}`, status: 401, typ: "authentication_error"},
		{name: "wrong API key", method: "POST", path: "/v1/completions", body: `{"prompt": "x"}`, header: []string{"Authorization", "Bearer nope"}, status: 401, typ: "authentication_error"},
		{name: "key needed for models", method: "GET", path: "/v1/models", status: 401, typ: "authentication_error"},
		{name: "oversize body", method: "POST", path: "/v1/completions", body: `{"prompt": "` + strings.Repeat("a", 5000) + `"}`, header: auth, status: 413, typ: "invalid_request_error"},
		{name: "unknown route", method: "GET", path: "/v2/nothing", header: auth, status: 404, typ: "invalid_request_error"},
		{name: "wrong method", method: "GET", path: "/v1/completions", header: auth, status: 405, typ: "invalid_request_error"},
		{name: "max_tokens of the wrong type", method: "POST", path: "/v1/completions", body: `{"prompt": "x", "max_tokens": "many"}`, header: auth, status: 400, typ: "invalid_request_error", param: "max_tokens"},
		{name: "n_probs too large", method: "POST", path: "/completion", body: `{"prompt": "x", "n_probs": 50}`, header: auth, status: 400, typ: "invalid_request_error", param: "n_probs"},
		{name: "n_probs on OpenAI's route", method: "POST", path: "/v1/completions", body: `{"prompt": "x", "n_probs": 5}`, header: auth, status: 400, typ: "invalid_request_error", param: "n_probs"},
		{name: "unsupported echo", method: "POST", path: "/v1/completions", body: `{"prompt": "x", "echo": true}`, header: auth, status: 400, typ: "invalid_request_error", param: "echo"},
		{name: "unsupported lora", method: "POST", path: "/v1/chat/completions", body: `{"messages": [{"role": "user", "content": "hi"}], "lora": [{"id": 0, "scale": 1}]}`, header: auth, status: 400, typ: "invalid_request_error", param: "lora"},
		{name: "unsupported mirostat", method: "POST", path: "/completion", body: `{"prompt": "x", "mirostat": 2}`, header: auth, status: 400, typ: "invalid_request_error", param: "mirostat"},
		{name: "image part", method: "POST", path: "/v1/chat/completions", body: `{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,"}}]}]}`, header: auth, status: 400, typ: "invalid_request_error", param: "messages"},
		{name: "bad logit_bias id", method: "POST", path: "/v1/completions", body: `{"prompt": "x", "logit_bias": {"99999": 5}}`, header: auth, status: 400, typ: "invalid_request_error", param: "logit_bias"},
		{name: "bad logit_bias value", method: "POST", path: "/v1/completions", body: `{"prompt": "x", "logit_bias": {"5": 500}}`, header: auth, status: 400, typ: "invalid_request_error", param: "logit_bias"},
		{name: "unknown model id", method: "GET", path: "/v1/models/gpt-4", header: auth, status: 404, typ: "invalid_request_error", param: "model"},
		{name: "apply-template without messages", method: "POST", path: "/apply-template", body: `{}`, header: auth, status: 400, typ: "invalid_request_error", param: "messages"},
		{name: "tokenize without content", method: "POST", path: "/tokenize", body: `{}`, header: auth, status: 400, typ: "invalid_request_error", param: "content"},
		{name: "detokenize bad token", method: "POST", path: "/detokenize", body: `{"tokens": [-1]}`, header: auth, status: 400, typ: "invalid_request_error", param: "tokens"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(context.Background(), tc.method, e.URL+tc.path, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i+1 < len(tc.header); i += 2 {
				req.Header.Set(tc.header[i], tc.header[i+1])
			}
			resp, err := e.Client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			d := checkError(t, resp, tc.status, tc.typ)
			if tc.param != "" && (d.Param == nil || *d.Param != tc.param) {
				t.Fatalf("error param %v, want %q (%s)", d.Param, tc.param, d.Message)
			}
			if tc.msgSubstr != "" && !strings.Contains(d.Message, tc.msgSubstr) {
				t.Fatalf("message %q lacks %q", d.Message, tc.msgSubstr)
			}
			if tc.status == 405 && resp.Header.Get("Allow") != "POST" {
				t.Fatalf("Allow %q, want POST", resp.Header.Get("Allow"))
			}
		})
	}
	t.Run("health needs no key", func(t *testing.T) {
		resp, err := e.Client.Get(e.URL + "/health")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body map[string]string
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != 200 || body["status"] != "ok" {
			t.Fatalf("health: %d %v %v", resp.StatusCode, body, err)
		}
	})
	t.Run("key accepted", func(t *testing.T) {
		resp := e.Post(context.Background(), "/v1/completions", `{"prompt": "x", "max_tokens": 2}`, auth...)
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			data, _ := io.ReadAll(resp.Body)
			t.Fatalf("status %d: %s", resp.StatusCode, data)
		}
	})
}
