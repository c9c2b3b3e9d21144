package server

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"ubatch/sample"
)

func TestExtraRoutes(t *testing.T) {
	e := newEnv(t, envOptions{})
	var m modelJSON
	e.GetJSON("/v1/models/stories", &m)
	if m.ID != "stories" || m.Object != "model" {
		t.Errorf("GET /v1/models/stories = %+v", m)
	}
	var props map[string]any
	e.GetJSON("/props", &props)
	if props["total_slots"] == nil || props["architecture"] != "llama" || props["default_generation_settings"] == nil {
		t.Errorf("GET /props = %v", props)
	}
	var tmpl struct{ Prompt string }
	e.PostJSON("/apply-template", map[string]any{"messages": []map[string]string{{"role": "user", "content": "Hi there"}}}, http.StatusOK, &tmpl)
	if !strings.Contains(tmpl.Prompt, "Hi there") {
		t.Errorf("apply-template prompt %q lacks the message", tmpl.Prompt)
	}
	// llama-server's routes without /v1 are the same handlers.
	var c struct {
		Choices []struct{ Text string } `json:"choices"`
	}
	e.PostJSON("/completions", map[string]any{"prompt": "Once upon a time", "max_tokens": 4, "temperature": 0}, http.StatusOK, &c)
	if len(c.Choices) != 1 || c.Choices[0].Text == "" {
		t.Errorf("POST /completions = %+v", c)
	}
	var list struct{ Data []modelJSON }
	e.GetJSON("/models", &list)
	if len(list.Data) != 1 {
		t.Errorf("GET /models = %+v", list)
	}
}

func TestCORS(t *testing.T) {
	e := newEnv(t, envOptions{})
	for _, tc := range []struct {
		name, method, origin string
		status               int
		allowed              bool
	}{
		{"preflight from localhost", http.MethodOptions, "http://localhost:5173", http.StatusNoContent, true},
		{"preflight from elsewhere", http.MethodOptions, "https://evil.example", http.StatusForbidden, false},
		{"get from localhost", http.MethodGet, "http://127.0.0.1:3000", http.StatusOK, true},
		{"get from elsewhere", http.MethodGet, "https://evil.example", http.StatusOK, false},
		{"no origin", http.MethodGet, "", http.StatusOK, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequestWithContext(context.Background(), tc.method, e.URL+"/v1/models", nil)
			if tc.origin != "" {
				req.Header.Set("Origin", tc.origin)
			}
			req.Header.Set("Access-Control-Request-Method", "POST")
			resp, err := e.Client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			got := resp.Header.Get("Access-Control-Allow-Origin")
			if resp.StatusCode != tc.status || (got == tc.origin && tc.origin != "") != tc.allowed {
				t.Errorf("status %d, Allow-Origin %q; want %d, allowed %v", resp.StatusCode, got, tc.status, tc.allowed)
			}
		})
	}
}

// TestLogitBias: banning the greedy choice's first token changes it, in OpenAI's and llama.cpp's
// forms; echo false and n_probs 0 (no-op values of unsupported fields) are accepted.
func TestLogitBiasRequest(t *testing.T) {
	e := newEnv(t, envOptions{})
	complete := func(extra map[string]any) []int {
		body := map[string]any{"prompt": "Once upon a time", "n_predict": 1, "temperature": 0, "echo": false, "n_probs": 0, "return_tokens": true}
		for k, v := range extra {
			body[k] = v
		}
		var resp struct {
			Tokens []int `json:"tokens"`
		}
		e.PostJSON("/completion", body, http.StatusOK, &resp)
		return resp.Tokens
	}
	first := complete(nil)
	if len(first) != 1 {
		t.Fatalf("tokens %v", first)
	}
	id := strconv.Itoa(first[0])
	for _, bias := range []any{map[string]any{id: -100}, [][]any{{first[0], false}}} {
		if got := complete(map[string]any{"logit_bias": bias}); len(got) != 1 || got[0] == first[0] {
			t.Errorf("logit_bias %v: token %v, the unbiased choice was %d", bias, got, first[0])
		}
	}
}

// TestServerSamplingDefaults: the server's sampling defaults (serve --temp ...) apply to fields a
// request leaves out, and /props reports them.
func TestServerSamplingDefaults(t *testing.T) {
	e := newEnv(t, envOptions{})
	d := sample.DefaultParams()
	d.Temperature, d.TopK = 0, 7
	e.srv.cfg.Sampling = &d
	var props struct {
		Settings struct {
			Params map[string]float64 `json:"params"`
		} `json:"default_generation_settings"`
	}
	e.GetJSON("/props", &props)
	if props.Settings.Params["temperature"] != 0 || props.Settings.Params["top_k"] != 7 {
		t.Errorf("/props params %v", props.Settings.Params)
	}
	// Greedy by default: two requests without a temperature agree.
	var a, b struct {
		Choices []struct{ Text string } `json:"choices"`
	}
	body := map[string]any{"prompt": "Once upon a time", "max_tokens": 12}
	e.PostJSON("/v1/completions", body, http.StatusOK, &a)
	e.PostJSON("/v1/completions", body, http.StatusOK, &b)
	if a.Choices[0].Text != b.Choices[0].Text {
		t.Errorf("server default temperature 0 not applied: %q vs %q", a.Choices[0].Text, b.Choices[0].Text)
	}
}
