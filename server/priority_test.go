package server

import (
	"context"
	"io"
	"net/http"
	"testing"

	"ubatch/engine"
)

// TestMaxClientPriority: a completion asking for a priority above Config.MaxClientPriority
// (default high) is a 400 naming priority, on every completion route, unless it carries the
// server's API key; at or below the cap it is served.
func TestMaxClientPriority(t *testing.T) {
	normal := engine.PriorityNormal
	tests := []struct {
		name     string
		apiKey   string
		limit    *engine.Priority // nil: the default
		path     string
		priority any
		header   []string
		status   int
	}{
		{name: "default cap: high is served", path: "/v1/completions", priority: "high", status: http.StatusOK},
		{name: "default cap: 2 is refused", path: "/v1/completions", priority: 2, status: http.StatusBadRequest},
		{name: "cap normal: high refused on chat", limit: &normal, path: "/v1/chat/completions", priority: "high", status: http.StatusBadRequest},
		{name: "cap normal: high refused on /completion", limit: &normal, path: "/completion", priority: "high", status: http.StatusBadRequest},
		{name: "cap normal: low is served", limit: &normal, path: "/v1/completions", priority: "low", status: http.StatusOK},
		{name: "the API key lifts the cap", apiKey: "sekret", limit: &normal, path: "/v1/completions", priority: 1000,
			header: []string{"Authorization", "Bearer sekret"}, status: http.StatusOK},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOptions{apiKey: tc.apiKey})
			e.srv.cfg.MaxClientPriority = tc.limit // before any request reaches a handler
			body := map[string]any{"prompt": "Once upon a time", "max_tokens": 1, "n_predict": 1, "priority": tc.priority}
			if tc.path == "/v1/chat/completions" {
				body = map[string]any{"messages": []map[string]string{{"role": "user", "content": "hi"}}, "max_tokens": 1, "priority": tc.priority}
			}
			resp := e.Post(context.Background(), tc.path, body, tc.header...)
			defer resp.Body.Close()
			if tc.status != http.StatusBadRequest {
				if data, _ := io.ReadAll(resp.Body); resp.StatusCode != tc.status {
					t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, data)
				}
				return
			}
			if d := checkError(t, resp, tc.status, "invalid_request_error"); d.Param == nil || *d.Param != "priority" {
				t.Fatalf("error %+v does not name priority", d)
			}
		})
	}
}

// TestParsePriority is the --max-client-priority flag's reading.
func TestParsePriority(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    engine.Priority
		wantErr bool
	}{
		{name: "name", in: "normal", want: engine.PriorityNormal},
		{name: "integer", in: "-3", want: -3},
		{name: "unknown name", in: "urgent", wantErr: true},
		{name: "out of range", in: "1001", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParsePriority(tc.in)
			if (err != nil) != tc.wantErr || (err == nil && got != tc.want) {
				t.Fatalf("ParsePriority(%q) = %v, %v", tc.in, got, err)
			}
		})
	}
}
