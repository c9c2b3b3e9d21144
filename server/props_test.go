package server

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"ubatch/internal/testkit"
	"ubatch/sample"
)

func TestExtraRoutes(t *testing.T) {
	e := newEnv(t, envOptions{})
	var m modelJSON
	e.getJSON("/v1/models/stories", &m)
	if m.ID != "stories" || m.Object != "model" {
		t.Errorf("GET /v1/models/stories = %+v", m)
	}
	var props map[string]any
	e.getJSON("/props", &props)
	if props["total_slots"] == nil || props["architecture"] != "llama" || props["default_generation_settings"] == nil {
		t.Errorf("GET /props = %v", props)
	}
	var tmpl struct{ Prompt string }
	e.postJSON("/apply-template", map[string]any{"messages": []map[string]string{{"role": "user", "content": "Hi there"}}}, http.StatusOK, &tmpl)
	if !strings.Contains(tmpl.Prompt, "Hi there") {
		t.Errorf("apply-template prompt %q lacks the message", tmpl.Prompt)
	}
	// llama-server's routes without /v1 are the same handlers.
	var c struct {
		Choices []struct{ Text string } `json:"choices"`
	}
	e.postJSON("/completions", map[string]any{"prompt": "Once upon a time", "max_tokens": 4, "temperature": 0}, http.StatusOK, &c)
	if len(c.Choices) != 1 || c.Choices[0].Text == "" {
		t.Errorf("POST /completions = %+v", c)
	}
	var list struct{ Data []modelJSON }
	e.getJSON("/models", &list)
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
			req, _ := http.NewRequestWithContext(context.Background(), tc.method, e.ts.URL+"/v1/models", nil)
			if tc.origin != "" {
				req.Header.Set("Origin", tc.origin)
			}
			req.Header.Set("Access-Control-Request-Method", "POST")
			resp, err := e.client.Do(req)
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

// getJSON GETs path, checks for 200 and decodes the JSON response into out.
func (e *testEnv) getJSON(path string, out any) {
	e.t.Helper()
	resp, err := e.client.Get(e.ts.URL + path)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		e.t.Fatalf("GET %s: status %d", path, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		e.t.Fatalf("GET %s: %v", path, err)
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
		e.postJSON("/completion", body, http.StatusOK, &resp)
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

// slotView reads a /slots entry: encoding/json cannot fill slotJSON's embedded pointer to an
// unexported type, so the task's fields are here by value (zero when idle: slotHead says so).
type slotView struct {
	slotHead
	slotTask
}

// TestSlots: /slots lists every slot as llama-server does (the engine's MaxRunning of them), idle
// ones with id_task -1; a running stream's slot shows its task, its sampling parameters under
// llama-server's names and its next_token counts, the other slots staying idle.
func TestSlots(t *testing.T) {
	tests := []struct {
		name       string
		maxRunning int
		wantSlots  int
	}{
		{name: "n_seq_max", wantSlots: 8},
		{name: "parallel below it", maxRunning: 3, wantSlots: 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOptions{maxRunning: tc.maxRunning})
			var idle []slotView
			e.getJSON("/slots", &idle)
			checkSlots(t, idle, tc.wantSlots, -1)

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			resp := e.post(ctx, "/completion", map[string]any{"prompt": "Once upon a time", "n_predict": 400, "ignore_eos": true,
				"stream": true, "seed": 42, "temperature": 0.5, "top_k": 7})
			defer resp.Body.Close()
			var slots []slotView
			testkit.Eventually(t, 5*time.Second, "a slot that decodes", func() bool {
				slots = nil
				e.getJSON("/slots", &slots)
				return len(slots) > 0 && slots[0].IsProcessing && slots[0].NDecoded > 0
			})
			checkSlots(t, slots, tc.wantSlots, 0)
			s := slots[0]
			next := s.NextToken
			if s.IDTask < 0 || s.State != "decoding" || s.NPromptTokens < 2 || s.NPromptTokensProcessed+s.NPromptTokensCache != s.NPromptTokens ||
				s.Params.Seed != 42 || s.Params.Temperature != 0.5 || s.Params.TopK != 7 || s.Params.NPredict != 400 ||
				len(next) != 1 || !next[0].HasNextToken || next[0].NDecoded < 1 || next[0].NRemain != 400-next[0].NDecoded {
				t.Errorf("running slot %+v", s)
			}
		})
	}
}

// checkSlots checks that slots are ids [0, n), n_ctx the sequence cap, and all idle but busy
// (-1: none).
func checkSlots(t *testing.T, slots []slotView, n, busy int) {
	t.Helper()
	if len(slots) != n {
		t.Fatalf("%d slots, want %d: %+v", len(slots), n, slots)
	}
	for i, s := range slots {
		if s.ID != int32(i) || s.NCtx != 512 || s.Speculative {
			t.Errorf("slot %d: %+v", i, s)
		}
		if i == busy {
			continue
		}
		if s.IsProcessing || s.IDTask != -1 || s.State != "idle" || s.NPromptTokens != 0 || s.NextToken != nil {
			t.Errorf("slot %d not idle: %+v", i, s)
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
	e.getJSON("/props", &props)
	if props.Settings.Params["temperature"] != 0 || props.Settings.Params["top_k"] != 7 {
		t.Errorf("/props params %v", props.Settings.Params)
	}
	// Greedy by default: two requests without a temperature agree.
	var a, b struct {
		Choices []struct{ Text string } `json:"choices"`
	}
	body := map[string]any{"prompt": "Once upon a time", "max_tokens": 12}
	e.postJSON("/v1/completions", body, http.StatusOK, &a)
	e.postJSON("/v1/completions", body, http.StatusOK, &b)
	if a.Choices[0].Text != b.Choices[0].Text {
		t.Errorf("server default temperature 0 not applied: %q vs %q", a.Choices[0].Text, b.Choices[0].Text)
	}
}

// TestNProbs: /completion with n_probs returns llama.cpp's completion_probabilities: each token
// with its log-probability and the top n, the chosen token first under greedy decoding.
func TestNProbs(t *testing.T) {
	e := newEnv(t, envOptions{})
	var resp struct {
		Content string `json:"content"`
		Probs   []struct {
			ID          int32   `json:"id"`
			Token       string  `json:"token"`
			Logprob     float64 `json:"logprob"`
			TopLogprobs []struct {
				ID      int32   `json:"id"`
				Logprob float64 `json:"logprob"`
			} `json:"top_logprobs"`
		} `json:"completion_probabilities"`
	}
	e.postJSON("/completion", map[string]any{"prompt": "Once upon a time", "n_predict": 5, "temperature": 0, "n_probs": 3}, http.StatusOK, &resp)
	if len(resp.Probs) != 5 {
		t.Fatalf("%d probabilities for 5 tokens: %+v", len(resp.Probs), resp)
	}
	for i, p := range resp.Probs {
		if len(p.TopLogprobs) != 3 || p.TopLogprobs[0].ID != p.ID || p.Logprob > 0 || p.TopLogprobs[1].Logprob > p.TopLogprobs[0].Logprob {
			t.Errorf("token %d: %+v", i, p)
		}
	}
}
