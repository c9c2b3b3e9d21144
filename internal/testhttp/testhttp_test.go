package testhttp

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestCaller: PostJSON sends the body as JSON with the headers asked for and decodes the answer;
// PostStream sets stream and accepts an event stream.
func TestCaller(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if strings.Contains(string(body), `"stream":true`) {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: a\n\ndata: [DONE]\n\n")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"got":`+string(body)+`,"h":"`+r.Header.Get("X-K")+`","ct":"`+r.Header.Get("Content-Type")+`"}`)
	}))
	defer ts.Close()
	c := &Caller{T: t, URL: ts.URL, Client: ts.Client()}
	var out struct {
		Got   map[string]int `json:"got"`
		H, CT string
	}
	c.PostJSON("/x", map[string]int{"n": 3}, http.StatusOK, &out)
	if out.Got["n"] != 3 || out.CT != "application/json" {
		t.Errorf("PostJSON decoded %+v", out)
	}
	resp := c.Post(t.Context(), "/x", `{"n":1}`, "X-K", "v")
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(data), `"h":"v"`) || !strings.Contains(string(data), `"got":{"n":1}`) {
		t.Errorf("Post with a header and a string body: the server saw %s", data)
	}
	resp = c.PostStream("/x", map[string]any{})
	defer resp.Body.Close()
	if got := SSEEvents(t, resp.Body); len(got) != 2 || got[0] != "a" || got[1] != "[DONE]" {
		t.Errorf("SSEEvents = %q, want [a [DONE]]", got)
	}
}

// TestCheckBadParam: a 400 naming the parameter passes and its body comes back decoded.
func TestCheckBadParam(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, `{"error":{"message":"max_tokens must be positive","type":"invalid_request_error","param":"max_tokens","code":null}}`)
	}))
	defer ts.Close()
	c := &Caller{T: t, URL: ts.URL, Client: ts.Client()}
	eb := c.CheckBadParam(t, "/v1/completions", map[string]any{"max_tokens": -1}, "max_tokens", "positive")
	if eb.Error.Type != "invalid_request_error" || eb.Error.Code != nil {
		t.Errorf("error body %+v", eb)
	}
}
