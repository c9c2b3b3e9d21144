// Package testhttp holds the HTTP client side that the tests of the server core and of its
// dialects (through server/servertest) share: posting JSON to a test server and reading its
// event streams. It imports no ubatch package but internal/sse, so the core's own tests may use
// it without an import cycle.
package testhttp

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"ubatch/internal/sse"
)

// Caller sends requests to the server at URL (no trailing slash) with Client, failing T on
// transport errors. Test fixtures embed it.
type Caller struct {
	T      testing.TB
	URL    string
	Client *http.Client
}

// Post sends body (a value to encode, or a string sent as is) to path with header's name, value
// pairs and returns the response; the caller closes its body.
func (c *Caller) Post(ctx context.Context, path string, body any, header ...string) *http.Response {
	c.T.Helper()
	var raw []byte
	switch b := body.(type) {
	case string:
		raw = []byte(b)
	default:
		var err error
		if raw, err = json.Marshal(b); err != nil {
			c.T.Fatal(err)
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL+path, bytes.NewReader(raw))
	if err != nil {
		c.T.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.Client.Do(req)
	if err != nil {
		c.T.Fatalf("POST %s: %v", path, err)
	}
	return resp
}

// PostJSON posts body, checks the status and decodes the JSON response into out (unless nil).
func (c *Caller) PostJSON(path string, body any, wantStatus int, out any) {
	c.T.Helper()
	resp := c.Post(context.Background(), path, body)
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != wantStatus {
		c.T.Fatalf("POST %s: status %d, want %d: %s", path, resp.StatusCode, wantStatus, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			c.T.Fatalf("POST %s: decoding %s: %v", path, data, err)
		}
	}
}

// PostStream posts body to path with stream: true and returns the response, failing unless it
// is a 200 event stream; the caller closes its body.
func (c *Caller) PostStream(path string, body map[string]any) *http.Response {
	c.T.Helper()
	body["stream"] = true
	resp := c.Post(context.Background(), path, body)
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "text/event-stream" {
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		c.T.Fatalf("%s: status %d (Content-Type %q, want text/event-stream): %s", path, resp.StatusCode, ct, data)
	}
	return resp
}

// GetJSON GETs path, checks for 200 and decodes the JSON response into out.
func (c *Caller) GetJSON(path string, out any) {
	c.T.Helper()
	resp, err := c.Client.Get(c.URL + path)
	if err != nil {
		c.T.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		c.T.Fatalf("GET %s: status %d", path, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		c.T.Fatalf("GET %s: %v", path, err)
	}
}

// Usage is what the tests read of an OpenAI usage object.
type Usage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

// Completion is what the tests read of a /v1/completions answer or stream chunk.
type Completion struct {
	ID, Object, Model string
	Choices           []struct {
		Text         string `json:"text"`
		Index        int    `json:"index"`
		FinishReason string `json:"finish_reason"`
		// Logprobs is the legacy completions logprobs object: one entry per token in each list.
		Logprobs *struct {
			Tokens        []string             `json:"tokens"`
			TokenLogprobs []float64            `json:"token_logprobs"`
			TopLogprobs   []map[string]float64 `json:"top_logprobs"`
			TextOffset    []int                `json:"text_offset"`
		} `json:"logprobs"`
	} `json:"choices"`
	Usage Usage `json:"usage"`
}

// Complete runs a non-streaming /v1/completions request.
func (c *Caller) Complete(body map[string]any) Completion {
	c.T.Helper()
	var res Completion
	c.PostJSON("/v1/completions", body, http.StatusOK, &res)
	return res
}

// ErrorBody is OpenAI's error shape, {"error": {...}}, as the tests decode it.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the inside of OpenAI's error shape.
type ErrorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// CheckBadParam posts body to path and checks that the answer is a 400 whose error names param
// and has a message containing want ("": any message), reporting to t (which may be a subtest's)
// without stopping it; it returns the error body.
func (c *Caller) CheckBadParam(t *testing.T, path string, body any, param, want string) ErrorBody {
	t.Helper()
	resp := c.Post(context.Background(), path, body)
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var eb ErrorBody
	if err := json.Unmarshal(data, &eb); resp.StatusCode != http.StatusBadRequest || err != nil ||
		eb.Error.Param == nil || *eb.Error.Param != param || !strings.Contains(eb.Error.Message, want) {
		t.Errorf("%s: status %d, body %.300s; want a 400 naming %s with a message containing %q", path, resp.StatusCode, data, param, want)
	}
	return eb
}

// SSEEvents reads a whole event stream and returns the data payloads, failing t on an event
// that is not one data line (the server writes each event so) or a broken stream.
func SSEEvents(t testing.TB, r io.Reader) []string {
	t.Helper()
	var out []string
	rd := sse.NewReader(r, 1<<20)
	rd.All = true
	for rd.Next() {
		if string(rd.Raw()) != "data: "+rd.Text()+"\n\n" {
			t.Fatalf("unexpected SSE event %q", rd.Raw())
		}
		out = append(out, rd.Text())
	}
	if err := rd.Err(); err != nil {
		t.Fatalf("reading the event stream: %v", err)
	}
	return out
}
