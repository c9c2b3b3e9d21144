package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sync/semaphore"
)

// errorOf decodes an OpenAI-shaped error response.
func errorOf(t *testing.T, resp *http.Response) (msg, param, code string) {
	t.Helper()
	var e struct {
		Error struct {
			Message string  `json:"message"`
			Param   *string `json:"param"`
			Code    *string `json:"code"`
		} `json:"error"`
	}
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("status %d, not an OpenAI error: %.300s", resp.StatusCode, b)
	}
	if e.Error.Param != nil {
		param = *e.Error.Param
	}
	if e.Error.Code != nil {
		code = *e.Error.Code
	}
	return e.Error.Message, param, code
}

// userMessages is n user messages of content text.
func userMessages(n int, text string) []map[string]any {
	m := make([]map[string]any, n)
	for i := range m {
		m[i] = map[string]any{"role": "user", "content": text}
	}
	return m
}

// TestTextBounds sends each prompt form and chat field a client can size past what fits a
// sequence (stories260K: n_ctx_seq 512, tokens of at most 9 bytes, so 5632 bytes): each is a
// 400 naming its field, decided before the text is tokenized or rendered (sooner than
// tokenizing the 4.2 MB text takes alone), and a text that fits is served.
func TestTextBounds(t *testing.T) {
	e := newEnv(t, envOptions{maxBody: 8 << 20, limits: RequestLimits{MaxMessages: 100, MaxContentParts: 8}})
	bound := e.srv.TextBound()
	if want := 512*e.model.Vocab.MaxTokenBytes() + boundSlack; bound != want {
		t.Fatalf("TextBound %d, want %d", bound, want)
	}
	huge := strings.Repeat("ab ", 1_390_000) // 4.2 MB, the prompt
	t0 := time.Now()
	e.model.Vocab.Encode(huge, true, true)
	tokenizing := time.Since(t0) // what a refusal after tokenizing would take at least
	parts := make([]any, 9)
	for i := range parts {
		parts[i] = map[string]any{"type": "text", "text": "x"}
	}
	for _, c := range []struct {
		name  string
		path  string
		body  map[string]any
		want  int
		param string
		code  string
	}{
		{name: "a 4.2 MB prompt", path: "/v1/completions", body: map[string]any{"prompt": huge, "max_tokens": 1},
			want: 400, param: "prompt", code: "context_length_exceeded"},
		{name: "one prompt of a list over the bound", path: "/v1/completions", body: map[string]any{"prompt": []string{"Once", huge}, "max_tokens": 1},
			want: 400, param: "prompt", code: "context_length_exceeded"},
		{name: "just over the bound", path: "/v1/completions", body: map[string]any{"prompt": strings.Repeat("a", bound+1), "max_tokens": 1},
			want: 400, param: "prompt", code: "context_length_exceeded"},
		{name: "llama.cpp's prompt", path: "/completion", body: map[string]any{"prompt": huge, "n_predict": 1},
			want: 400, param: "prompt", code: "context_length_exceeded"},
		{name: "ollama raw prompt", path: "/api/generate", body: map[string]any{"model": "stories", "prompt": huge, "raw": true, "stream": false},
			want: 400},
		{name: "an embedding input", path: "/v1/embeddings", body: map[string]any{"input": huge}, want: 404}, // (no embedder here)
		{name: "too many messages", path: "/v1/chat/completions", body: map[string]any{"messages": userMessages(101, "hi"), "max_tokens": 1},
			want: 400, param: "messages"},
		{name: "too many content parts", path: "/v1/chat/completions",
			body: map[string]any{"messages": []any{map[string]any{"role": "user", "content": parts}}, "max_tokens": 1}, want: 400, param: "messages"},
		{name: "messages' text over the bound", path: "/v1/chat/completions", body: map[string]any{"messages": userMessages(100, strings.Repeat("a", bound/99)), "max_tokens": 1},
			want: 400, param: "messages", code: "context_length_exceeded"},
		{name: "one huge message", path: "/v1/chat/completions", body: map[string]any{"messages": userMessages(1, huge), "max_tokens": 1},
			want: 400, param: "messages", code: "context_length_exceeded"},
		{name: "chat_template_kwargs over the bound", path: "/v1/chat/completions",
			body: map[string]any{"messages": userMessages(1, "hi"), "max_tokens": 1, "chat_template_kwargs": map[string]any{"x": huge}},
			want: 400, param: "chat_template_kwargs", code: "context_length_exceeded"},
		{name: "apply-template", path: "/apply-template", body: map[string]any{"messages": userMessages(1, huge)}, want: 400, param: "messages"},
		{name: "vLLM tokenize of messages", path: "/tokenize", body: map[string]any{"messages": userMessages(1, huge)}, want: 400, param: "messages"},
		{name: "a prompt that fits", path: "/v1/completions", body: map[string]any{"prompt": strings.Repeat("ab ", 100), "max_tokens": 1}, want: 200},
		{name: "10 messages that fit", path: "/v1/chat/completions", body: map[string]any{"messages": userMessages(10, "hi"), "max_tokens": 1}, want: 200},
	} {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			resp := e.Post(context.Background(), c.path, c.body)
			defer resp.Body.Close()
			took := time.Since(start)
			if resp.StatusCode != c.want {
				b, _ := io.ReadAll(resp.Body)
				t.Fatalf("status %d, want %d: %.300s", resp.StatusCode, c.want, b)
			}
			if c.want == 200 || strings.HasPrefix(c.path, "/api/") { // (Ollama's errors are {"error": "..."})
				return
			}
			msg, param, code := errorOf(t, resp)
			if param != c.param && c.param != "" || code != c.code && c.code != "" {
				t.Errorf("param %q code %q, want %q %q (%s)", param, code, c.param, c.code, msg)
			}
			if len(msg) > 400 {
				t.Errorf("a %d-byte message: %.200s", len(msg), msg)
			}
			if took > tokenizing {
				t.Errorf("refused after %v, longer than tokenizing the 4.2 MB text takes (%v): it was tokenized before it was measured", took, tokenizing)
			}
		})
	}
}

// TestTemplateTimeoutIsTheClients renders with a template that runs past the render timeout:
// the request is a 400 naming messages (it was a 500, which a router holds against the node).
func TestTemplateTimeoutIsTheClients(t *testing.T) {
	slow := `{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}{{ messages[0].content }}`
	e := newEnv(t, envOptions{chatTemplate: slow, limits: RequestLimits{RenderTimeout: 50 * time.Millisecond}})
	resp := e.Post(context.Background(), "/v1/chat/completions", map[string]any{"messages": userMessages(1, "hi"), "max_tokens": 1})
	defer resp.Body.Close()
	msg, param, code := errorOf(t, resp)
	if resp.StatusCode != 400 || param != "messages" || code != "template_timeout" {
		t.Fatalf("status %d param %q code %q (%s), want 400 messages template_timeout", resp.StatusCode, param, code, msg)
	}
}

// TestParseBudget takes a whole budget and checks what the next request gets: a body under
// smallBody passes at once, a larger one waits its wait out and gets a 503 with Retry-After,
// or gets the budget as soon as it is given back; a request whose client leaves stops waiting.
func TestParseBudget(t *testing.T) {
	b := NewParseBudget(1<<20, 100*time.Millisecond)
	hold, err := b.acquire(context.Background(), 4<<20) // more than the budget: takes all of it
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name     string
		n        int
		giveBack time.Duration // when the holder releases (0: not during the call)
		cancel   bool
		wantErr  bool
	}{
		{name: "a small body does not wait", n: smallBody - 1},
		{name: "a large body waits out the wait", n: smallBody, wantErr: true},
		{name: "a client that leaves stops waiting", n: 1 << 20, cancel: true, wantErr: true},
		{name: "the budget given back within the wait", n: 1 << 20, giveBack: 30 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if c.cancel {
				cancel()
			}
			if c.giveBack > 0 {
				time.AfterFunc(c.giveBack, hold)
			}
			start := time.Now()
			release, err := b.acquire(ctx, c.n)
			took := time.Since(start)
			if (err != nil) != c.wantErr {
				t.Fatalf("err %v after %v, want an error: %v", err, took, c.wantErr)
			}
			if err != nil {
				if ae := ToAPIError(err); ae.Status != http.StatusServiceUnavailable || ae.Code != "server_busy" {
					t.Fatalf("%d %s, want 503 server_busy", ae.Status, ae.Code)
				}
				if !c.cancel && took < 90*time.Millisecond {
					t.Fatalf("refused after %v, before the 100ms wait", took)
				}
				return
			}
			release()
			release() // a second release gives nothing back twice
		})
	}
	// Everything is back: the whole budget and every worker can be taken again at once.
	if !b.sem.TryAcquire(1<<20) || !b.workers.TryAcquire(int64(max(1, runtime.GOMAXPROCS(0)/2))) {
		t.Fatal("the budget is not whole after every release")
	}
}

// TestParseBudgetBusy checks the 503 on the wire: with the server's budget held, a large
// request waits and is answered 503 with Retry-After and code server_busy, not queued forever.
func TestParseBudgetBusy(t *testing.T) {
	b := NewParseBudget(1<<20, 50*time.Millisecond)
	e := newEnv(t, envOptions{parseBudget: b})
	hold, _ := b.acquire(context.Background(), 1<<20)
	defer hold()
	resp := e.Post(context.Background(), "/v1/completions", map[string]any{"prompt": strings.Repeat("a", 100<<10), "max_tokens": 1})
	defer resp.Body.Close()
	_, _, code := errorOf(t, resp)
	if resp.StatusCode != http.StatusServiceUnavailable || code != "server_busy" || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("status %d code %q Retry-After %q, want 503 server_busy with Retry-After", resp.StatusCode, code, resp.Header.Get("Retry-After"))
	}
}

// TestProbesBesideParseLoad runs clients that keep the parse budget full (4 MB texts to
// /tokenize, which tokenizes whatever the length, and 3.5 MB chats of 100,000 messages) and
// probes /health and /metrics meanwhile through Serve's connection caps: every probe answers
// 200 within a second, and no heavy request fails with a 5xx other than the budget's 503.
func TestProbesBesideParseLoad(t *testing.T) {
	e := newEnv(t, envOptions{maxBody: 8 << 20})
	addr := startServe(t, e.srv.Handler(), ServeConfig{})
	base := "http://" + addr
	tokenize, _ := json.Marshal(map[string]any{"content": strings.Repeat("ab ", 1_390_000)})
	chat, _ := json.Marshal(map[string]any{"messages": userMessages(100_000, "hello"), "max_tokens": 1})
	// The heavy clients send for 4 s and finish what they sent; the probes go on until then.
	ctx, stop := context.WithTimeout(context.Background(), 4*time.Second)
	defer stop()
	heavyDone := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[int]int{}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	for i := range 8 {
		body := tokenize
		if i%2 == 1 {
			body = chat
		}
		wg.Go(func() {
			for ctx.Err() == nil {
				req, _ := http.NewRequest(http.MethodPost, base+map[bool]string{true: "/tokenize", false: "/v1/chat/completions"}[i%2 == 0], strings.NewReader(string(body)))
				resp, err := client.Do(req)
				if err != nil {
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				mu.Lock()
				statuses[resp.StatusCode]++
				mu.Unlock()
			}
		})
	}
	go func() { wg.Wait(); close(heavyDone) }()
	probe := &http.Client{Timeout: 5 * time.Second}
	var worst time.Duration
	probes := 0
	for running := true; running; {
		select {
		case <-heavyDone:
			running = false
		default:
		}
		for _, path := range []string{"/health", "/metrics"} {
			start := time.Now()
			resp, err := probe.Get(base + path)
			took := time.Since(start)
			if err != nil {
				t.Fatalf("%s during the parse load: %v", path, err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 && !(path == "/metrics" && resp.StatusCode == 404) {
				t.Errorf("%s: %d during the parse load", path, resp.StatusCode)
			}
			worst = max(worst, took)
			probes++
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("%d probes, the slowest %v; heavy requests by status: %v", probes, worst.Round(time.Millisecond), statuses)
	if worst > time.Second {
		t.Errorf("a probe took %v beside the parse load, over 1 s", worst)
	}
	for s, n := range statuses {
		if s >= 500 && s != http.StatusServiceUnavailable {
			t.Errorf("%d heavy requests got %d", n, s)
		}
	}
	if statuses[200]+statuses[400] == 0 {
		t.Errorf("no heavy request was answered: %v", statuses)
	}
}

// TestEcho checks the cut of a client's string quoted in an error message.
func TestEcho(t *testing.T) {
	long := strings.Repeat("m", 5000)
	for _, c := range []struct {
		name, in, want string
	}{
		{name: "short", in: "gpt-4", want: `"gpt-4"`},
		{name: "exactly the limit", in: strings.Repeat("a", echoLimit), want: `"` + strings.Repeat("a", echoLimit) + `"`},
		{name: "5000 bytes", in: long, want: `"` + long[:echoLimit] + `"… (5000 bytes)`},
		{name: "cut inside a character", in: strings.Repeat("a", echoLimit-1) + "é" + long, want: `"` + strings.Repeat("a", echoLimit-1) + `"… (5129 bytes)`},
		{name: "quotes and control bytes", in: "a\"b\n", want: `"a\"b\n"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := Echo(c.in); got != c.want {
				t.Errorf("echo: %.200q, want %.200q", got, c.want)
			}
		})
	}
}

// TestLongModelNameIsCut asks for an unknown 5000-byte model on a route that checks the name:
// the 404 quotes it cut.
func TestLongModelNameIsCut(t *testing.T) {
	e := newEnv(t, envOptions{})
	resp := e.Post(context.Background(), "/api/generate", map[string]any{"model": strings.Repeat("m", 5000), "prompt": "x", "stream": false})
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusNotFound || len(b) > 1000 || !strings.Contains(string(b), "(5000 bytes)") {
		t.Fatalf("status %d, %d bytes: %.300s; want a 404 quoting the name cut", resp.StatusCode, len(b), b)
	}
}

// TestCountElements counts JSON arrays the way messages are counted before they are decoded.
func TestCountElements(t *testing.T) {
	for _, c := range []struct {
		name  string
		raw   string
		limit int
		want  int
	}{
		{name: "empty", raw: `[]`, limit: 10, want: 0},
		{name: "empty with spaces", raw: " [ \n ] ", limit: 10, want: 0},
		{name: "one object", raw: `[{"role":"user","content":"a, b"}]`, limit: 10, want: 1},
		{name: "commas and brackets in strings", raw: `[{"c":"],[,{"},"x\"],",3]`, limit: 10, want: 3},
		{name: "nested lists", raw: `[[1,2],[3,[4,5]],{}]`, limit: 10, want: 3},
		{name: "stops past the limit", raw: `[1,2,3,4,5,6,7,8]`, limit: 3, want: 4},
		{name: "not a list", raw: `{"a":1}`, limit: 10, want: 0},
		{name: "a string", raw: `"[1,2]"`, limit: 10, want: 0},
		{name: "escaped backslash before the quote", raw: `["a\\",2]`, limit: 10, want: 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := countElements([]byte(c.raw), c.limit); got != c.want {
				t.Errorf("countElements(%s, %d) = %d, want %d", c.raw, c.limit, got, c.want)
			}
		})
	}
	big, _ := json.Marshal(userMessages(100_000, "hello"))
	if got := countElements(big, 4096); got != 4097 {
		t.Errorf("100000 messages with limit 4096: %d, want 4097", got)
	}
	if got := countElements(big, 1<<20); got != 100_000 {
		t.Errorf("100000 messages: %d", got)
	}
}

// TestParseBudgetGivesMemoryBack: once the last large body in flight is done, the budget hands
// the heap back (debug.FreeOSMemory), and not after small bodies alone.
func TestParseBudgetGivesMemoryBack(t *testing.T) {
	b := NewParseBudget(0, 0)
	b.workers = semaphore.NewWeighted(2) // two bodies at once whatever the machine's cores
	freed := func() time.Time { b.mu.Lock(); defer b.mu.Unlock(); return b.freed }
	small, _ := b.acquire(context.Background(), smallBody)
	small()
	if !freed().IsZero() {
		t.Fatal("memory handed back after a small body")
	}
	big, _ := b.acquire(context.Background(), largeBody)
	other, _ := b.acquire(context.Background(), smallBody)
	big()
	if !freed().IsZero() {
		t.Fatal("memory handed back while a body is still parsed")
	}
	other()
	if freed().IsZero() {
		t.Fatal("memory not handed back after the last large body")
	}
}
