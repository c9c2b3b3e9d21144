package server

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
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
