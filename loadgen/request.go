package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"time"
)

type status uint8

const (
	statusNotRun    status = iota // never started: the run was cancelled first
	statusOK                      // stream ended with [DONE]
	statusFailed                  // counted in Result.Errors
	statusRejected                // HTTP 429
	statusCancelled               // aborted by cancelling the run: not counted
)

// outcome is what one request produced.
type outcome struct {
	status  status
	kind    string
	err     string // statusFailed, statusRejected
	hasTTFT bool   // some non-empty text chunk arrived
	ttft    time.Duration
	gaps    []time.Duration // between consecutive non-empty text chunks
	tokens  int
	// prompt and cached are the usage's prompt_tokens and prompt_tokens_details.cached_tokens,
	// -1 when the server sent no usage.
	prompt, cached int
	turn           int    // the request's chat turn (0: not chat)
	reply          string // a chat turn's reply text, for the conversation's next turn
}

// client sends single completion requests; it is safe for concurrent use.
type client struct {
	http     *http.Client
	endpoint string // /v1/completions
	chat     string // /v1/chat/completions
	model    string
	apiKey   string
	timeout  time.Duration
}

// completionRequest is the body of POST /v1/completions. Temperature has no
// omitempty: 0 must be sent, since servers default to sampling.
type completionRequest struct {
	Model         string        `json:"model,omitempty"`
	Prompt        string        `json:"prompt"`
	MaxTokens     int           `json:"max_tokens"`
	Stream        bool          `json:"stream"`
	Temperature   float64       `json:"temperature"`
	IgnoreEOS     bool          `json:"ignore_eos"`
	StreamOptions streamOptions `json:"stream_options"`
}

// chatRequest is the body of POST /v1/chat/completions for a chat turn.
type chatRequest struct {
	Model         string        `json:"model,omitempty"`
	Messages      []chatMessage `json:"messages"`
	MaxTokens     int           `json:"max_tokens"`
	Stream        bool          `json:"stream"`
	Temperature   float64       `json:"temperature"`
	IgnoreEOS     bool          `json:"ignore_eos"`
	StreamOptions streamOptions `json:"stream_options"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// completionChunk is the part of a streamed chunk loadgen reads.
type completionChunk struct {
	Choices []struct {
		Text  string `json:"text"`
		Delta struct {
			Content string `json:"content"`
		} `json:"delta"` // a chat chunk's
	} `json:"choices"`
	Usage *struct {
		CompletionTokens    int `json:"completion_tokens"`
		PromptTokens        int `json:"prompt_tokens"`
		PromptTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
	Error json.RawMessage `json:"error"`
}

// maxErrorBody bounds how much of a non-200 response body is read.
const maxErrorBody = 64 << 10

// do sends r and reads its stream to the end: to /v1/completions, or with messages (a chat
// turn: the conversation so far, r's user message last) to /v1/chat/completions, keeping the
// reply's text. ctx is the run's context: its cancellation yields statusCancelled, while the
// per-request timeout yields statusFailed.
func (c *client) do(ctx context.Context, r Request, messages []chatMessage) outcome {
	// rctx is always cancellable so that the drain below can be cut short.
	var (
		rctx   context.Context
		cancel context.CancelFunc
	)
	if c.timeout > 0 {
		rctx, cancel = context.WithTimeout(ctx, c.timeout)
	} else {
		rctx, cancel = context.WithCancel(ctx)
	}
	defer cancel()

	out := outcome{kind: r.Kind, prompt: -1, cached: -1, turn: r.Turn}
	fail := func(err error) outcome {
		switch {
		case ctx.Err() != nil:
			out.status = statusCancelled
		case errors.Is(err, context.DeadlineExceeded) || rctx.Err() != nil:
			out.status, out.err = statusFailed, fmt.Sprintf("timeout after %v", c.timeout)
		default:
			out.status, out.err = statusFailed, err.Error()
		}
		return out
	}

	req, err := c.newRequest(rctx, r, messages)
	if err != nil {
		return fail(err)
	}

	start := time.Now()
	resp, err := c.http.Do(req)
	if err != nil {
		return fail(err)
	}
	drain := false
	defer func() {
		if drain {
			// Reading the body to its end lets the transport reuse the
			// connection; the timer bounds the wait for a server that keeps
			// the response open after [DONE].
			t := time.AfterFunc(drainTimeout, cancel)
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
			t.Stop()
		}
		resp.Body.Close()
	}()

	if resp.StatusCode != http.StatusOK {
		msg, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		if err != nil && rctx.Err() != nil {
			return fail(err)
		}
		text := fmt.Sprintf("HTTP %d: %s", resp.StatusCode, errorMessage(msg))
		if resp.StatusCode == http.StatusTooManyRequests {
			out.status, out.err = statusRejected, text
			return out
		}
		out.status, out.err = statusFailed, text
		return out
	}
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		if mt, _, _ := mime.ParseMediaType(ct); mt != "text/event-stream" {
			return fail(fmt.Errorf("response is %q, not an event stream (does the server support stream: true?)", ct))
		}
	}

	reply, chunks, usage, err := readStream(resp.Body, start, messages != nil, &out)
	if err != nil {
		return fail(err) // a timeout or cancellation while reading: fail says so, whatever err is
	}
	drain = true
	out.reply = reply
	out.tokens = chunks
	if usage >= 0 {
		out.tokens = usage
	}
	out.status = statusOK
	return out
}

// newRequest makes the streaming request for r: a chat completion of messages when they are
// given, else a completion of r.Prompt.
func (c *client) newRequest(ctx context.Context, r Request, messages []chatMessage) (*http.Request, error) {
	var body []byte
	var err error
	endpoint := c.endpoint
	if messages != nil {
		endpoint = c.chat
		body, err = json.Marshal(chatRequest{Model: c.model, Messages: messages, MaxTokens: r.MaxTokens,
			Stream: true, Temperature: 0, IgnoreEOS: true, StreamOptions: streamOptions{IncludeUsage: true}})
	} else {
		body, err = json.Marshal(completionRequest{
			Model: c.model, Prompt: r.Prompt, MaxTokens: r.MaxTokens,
			Stream: true, Temperature: 0, IgnoreEOS: true,
			StreamOptions: streamOptions{IncludeUsage: true},
		})
	}
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	// Marked idempotent (the key is not sent: a nil value), so that the transport retries a
	// request whose reused keep-alive connection the server had closed before reading it
	// (llama-server closes idle ones; 8-11 of 64 requests failed so, EOF or "server closed idle
	// connection"), which no server saw.
	req.Header["X-Idempotency-Key"] = nil
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	return req, nil
}

// readStream reads a completion's event stream up to [DONE]: it records in out the time to the
// first text chunk, the gaps between later ones and the usage's prompt and cached tokens, and
// returns the reply's text (when chat: the deltas' content), the number of text chunks and the
// usage's completion tokens (-1 without usage). An error event, a malformed event or a stream
// that ends without [DONE] is an error.
func readStream(body io.Reader, start time.Time, chat bool, out *outcome) (reply string, chunks, usage int, err error) {
	var (
		text   strings.Builder
		last   time.Time
		events int // data events before [DONE]
	)
	usage = -1
	sc := newEventReader(body)
	for sc.Next() {
		now := time.Now()
		data := sc.Data()
		if string(bytes.TrimSpace(data)) == "[DONE]" {
			return text.String(), chunks, usage, nil
		}
		events++
		var chunk completionChunk
		if err := json.Unmarshal(data, &chunk); err != nil {
			return "", 0, 0, fmt.Errorf("bad stream event %d: %v: %.200q", events, err, data)
		}
		if len(chunk.Error) > 0 && string(chunk.Error) != "null" {
			return "", 0, 0, fmt.Errorf("error event: %s", errorMessage(chunk.Error))
		}
		if chunk.Usage != nil {
			usage = chunk.Usage.CompletionTokens
			out.prompt, out.cached = chunk.Usage.PromptTokens, chunk.Usage.PromptTokensDetails.CachedTokens
		}
		if !hasText(chunk) {
			continue
		}
		if chat {
			for _, ch := range chunk.Choices {
				text.WriteString(ch.Delta.Content)
			}
		}
		if chunks == 0 {
			out.ttft, out.hasTTFT = now.Sub(start), true
		} else {
			out.gaps = append(out.gaps, now.Sub(last))
		}
		last = now
		chunks++
	}
	if err := sc.Err(); err != nil {
		return "", 0, 0, fmt.Errorf("reading stream: %w", err)
	}
	return "", 0, 0, errors.New("stream ended without [DONE]")
}

// drainTimeout bounds reading the rest of a response after [DONE].
const drainTimeout = 200 * time.Millisecond

func hasText(c completionChunk) bool {
	for _, ch := range c.Choices {
		if ch.Text != "" || ch.Delta.Content != "" {
			return true
		}
	}
	return false
}

// errorMessage extracts a readable message from an error body or an error
// event: OpenAI's {"error": {"message": ...}}, {"error": "..."}, vLLM's and
// FastAPI's {"message": ...} / {"detail": ...}, a bare JSON string, or else
// the trimmed text itself (cut to 300 bytes).
func errorMessage(raw []byte) string {
	var v any
	if json.Unmarshal(raw, &v) == nil {
		if s := messageOf(v, 0); s != "" {
			return s
		}
	}
	s := strings.TrimSpace(string(raw))
	if s == "" {
		return "(empty body)"
	}
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

func messageOf(v any, depth int) string {
	switch v := v.(type) {
	case string:
		return v
	case map[string]any:
		if depth > 2 {
			return ""
		}
		for _, k := range []string{"error", "message", "detail"} {
			if s := messageOf(v[k], depth+1); s != "" {
				return s
			}
		}
	}
	return ""
}
