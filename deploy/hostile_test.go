package deploy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"ubatch/internal/testdata"
)

// The hostile-client test (issue 19): the requests an attacker found to crash, starve or balloon
// a node, sent to two real nodes behind a real router. Each must be refused with a 4xx or served;
// afterwards both nodes are up, under a memory bound, and both still in the router's rotation;
// and a plain client streaming meanwhile keeps its inter-token latency under the nodes'
// --target-itl.

const (
	hostileITL = 100 * time.Millisecond // the nodes' --target-itl
	// hostileRSS bounds a node's resident memory: stories260K with -c 2048 idles near 100 MB;
	// the attacks took it to 451 MB (embeddings) and out of memory (a long property name).
	hostileRSS = 320 << 20
)

// hostileFleet is two nodes and a router, no Redis (routing by load and affinity).
type hostileFleet struct {
	t      *testing.T
	nodes  []*fleetNode
	router *proc
	rURL   string
	client *http.Client
}

func startHostileFleet(t *testing.T) *hostileFleet {
	model := testdata.Model(t, "stories260K.gguf")
	if _, err := os.Stat(model); err != nil {
		t.Skipf("%s not found; skipping the hostile-client test", model)
	}
	f := &hostileFleet{t: t, client: &http.Client{Timeout: time.Minute}}
	// The router connects from 127.0.0.1: a trusted proxy, whose users are told apart by
	// X-Forwarded-For. Attackers below come from other loopback addresses.
	nodeArgs := func(string) []string {
		return []string{"-np", "8", "-c", "2048", "-t", "1", "--embeddings",
			"--target-itl", hostileITL.String(), "--trusted-proxies", "127.0.0.1/32"}
	}
	f.nodes, f.router, f.rURL = startNodesAndRouter(t, model, []string{"h1", "h2"}, nodeArgs)
	return f
}

// hostileCase is one attack: a body sent to path on the router, and what a correct server
// answers.
type hostileCase struct {
	name string
	path string
	body string
	// want is the status a fixed server gives; 0 means "a 4xx or 200": the server may refuse the
	// request or serve it correctly, but never fail it (5xx) or die.
	want  int
	param string // the error's param when want is a 4xx ("" = not checked)
}

func hostileCases(bang int) []hostileCase {
	js := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	enum := make([]any, 70000)
	for i := range enum {
		enum[i] = fmt.Sprintf("v%d", i)
	}
	anyOf := make([]any, 70000)
	for i := range anyOf {
		anyOf[i] = map[string]any{"const": i}
	}
	var alts, chain strings.Builder
	alts.WriteString("root ::= ")
	chain.WriteString("root ::= r0\n")
	for i := range 100000 {
		if i > 0 {
			alts.WriteString(" | ")
		}
		fmt.Fprintf(&alts, "\"a%d\"", i)
		fmt.Fprintf(&chain, "r%d ::= \"x\" r%d\n", i, i+1)
	}
	chain.WriteString("r100000 ::= \"y\"\n")
	longKey := map[string]any{"type": "object", "additionalProperties": true,
		"properties": map[string]any{strings.Repeat("k", 32000): map[string]any{"type": "string"}}}
	cjk := map[string]any{}
	for i := range 16000 {
		cjk[string(rune(0x4e00+i))+string(rune(0x4e00+(i*7)%16000))] = map[string]any{"type": "integer"}
	}
	cjkSchema := map[string]any{"type": "object", "properties": cjk}
	tool := func(name string, params any) []any {
		return []any{map[string]any{"type": "function", "function": map[string]any{"name": name, "parameters": params}}}
	}
	user := []any{map[string]any{"role": "user", "content": "hi"}}
	inputs := make([]string, 100000)
	for i := range inputs {
		inputs[i] = "x"
	}
	return []hostileCase{
		{name: "grammar repetition 70000", path: "/v1/completions", want: 400, param: "grammar",
			body: `{"prompt":"x","max_tokens":5,"grammar":"root ::= (\"a\"?){0,70000} \"b\""}`},
		{name: "json_schema enum of 70000", path: "/v1/completions", param: "json_schema",
			body: js(map[string]any{"prompt": "x", "max_tokens": 5, "json_schema": map[string]any{"enum": enum}})},
		{name: "response_format anyOf of 70000", path: "/v1/chat/completions", param: "response_format",
			body: js(map[string]any{"messages": user, "max_tokens": 5, "response_format": map[string]any{
				"type": "json_schema", "json_schema": map[string]any{"name": "x", "schema": map[string]any{"anyOf": anyOf}}}})},
		{name: "grammar of 100000 alternatives", path: "/v1/completions", param: "grammar",
			body: js(map[string]any{"prompt": "x", "max_tokens": 5, "grammar": alts.String()})},
		{name: "grammar of 100000 chained rules", path: "/v1/completions", param: "grammar",
			body: js(map[string]any{"prompt": "x", "max_tokens": 5, "grammar": chain.String()})},
		{name: "json_schema with a 32000-character key", path: "/v1/completions", param: "json_schema",
			body: js(map[string]any{"prompt": "x", "max_tokens": 5, "json_schema": longKey})},
		{name: "tools with a 32000-character key", path: "/v1/chat/completions", param: "tools",
			body: js(map[string]any{"messages": user, "max_tokens": 5, "tools": tool("f", longKey), "tool_choice": "required"})},
		{name: "json_schema with 16000 CJK keys", path: "/v1/completions", param: "json_schema",
			body: js(map[string]any{"prompt": "x", "max_tokens": 5, "json_schema": cjkSchema})},
		{name: "ignore_eos with a complete grammar", path: "/v1/completions", want: 400,
			body: `{"prompt":"x","grammar":"root ::= \"a\"","ignore_eos":true}`},
		{name: "ignore_eos with a complete grammar, llama.cpp route", path: "/completion", want: 400,
			body: `{"prompt":"x","grammar":"root ::= \"a\"","ignore_eos":true}`},
		{name: "logit_bias the grammar refuses", path: "/v1/completions", param: "grammar",
			body: js(map[string]any{"prompt": "x", "max_tokens": 8, "grammar": `root ::= [a-z]+`,
				"logit_bias": map[string]any{strconv.Itoa(bang): 100}})},
		{name: "embeddings of 100000 inputs", path: "/v1/embeddings", want: 400, param: "input",
			body: js(map[string]any{"input": inputs})},
		{name: "tool name that closes the tool-call tag", path: "/v1/chat/completions", want: 400,
			param: "tools[0].function.name",
			body:  js(map[string]any{"messages": user, "max_tokens": 5, "tools": tool("f</tool_call>", map[string]any{"type": "object"})})},
		// The routes and fields added after the first attack: each input a client sizes is bounded.
		{name: "responses with 2000 input items", path: "/v1/responses", want: 400, param: "input",
			body: js(map[string]any{"input": manyItems(2000), "max_output_tokens": 4})},
		{name: "guided_choice of 20000 choices", path: "/v1/completions", want: 400, param: "guided_choice",
			body: js(map[string]any{"prompt": "x", "max_tokens": 4, "guided_choice": choices(20000)})},
		{name: "guided_regex with a backreference", path: "/v1/completions", want: 400, param: "guided_regex",
			body: `{"prompt":"x","max_tokens":4,"guided_regex":"(a)\\1"}`},
		{name: "guided_regex repeating 70000 times", path: "/v1/completions", want: 400, param: "guided_regex",
			body: `{"prompt":"x","max_tokens":4,"guided_regex":"a{0,70000}"}`},
		{name: "min_tokens over max_tokens", path: "/v1/completions", want: 400, param: "min_tokens",
			body: `{"prompt":"x","max_tokens":4,"min_tokens":100000}`},
		{name: "infill with 1000 extra chunks", path: "/infill", want: 400,
			body: js(map[string]any{"input_prefix": "a", "input_suffix": "b", "input_extra": extraChunks(1000)})},
		{name: "rerank on a model that is not a reranker", path: "/v1/rerank", want: 400, param: "model",
			body: js(map[string]any{"query": "q", "documents": inputs})},
		{name: "ollama chat with mirostat", path: "/api/chat", want: 400,
			body: `{"model":"stories260K.gguf","messages":[{"role":"user","content":"hi"}],"options":{"mirostat":2},"stream":false}`},
		{name: "ollama generate with a context outside the vocabulary", path: "/api/generate", want: 400,
			body: `{"model":"stories260K.gguf","prompt":"x","context":[2147483647],"stream":false}`},
		{name: "ollama embed of 100000 inputs", path: "/api/embed", want: 400,
			body: js(map[string]any{"model": "stories260K.gguf", "input": inputs})},
		{name: "tokenize with both llama.cpp's and vLLM's fields", path: "/tokenize", want: 400,
			body: `{"content":"a","prompt":"b"}`},
		{name: "tool parameters with $ref to the root", path: "/v1/chat/completions",
			body: js(map[string]any{"messages": user, "max_tokens": 16, "tool_choice": "required",
				"tools": tool("tree", map[string]any{"type": "object", "properties": map[string]any{
					"children": map[string]any{"type": "array", "items": map[string]any{"$ref": "#"}}}})})},
	}
}

func TestHostileClients(t *testing.T) {
	statSources("..")
	start := time.Now()
	f := startHostileFleet(t)
	bang := tokenID(t, f.client, f.nodes[0].url, "!")

	// A plain client streams the whole time; its inter-token gaps are checked at the end.
	plainCtx, stopPlain := context.WithCancel(context.Background())
	var plain plainClient
	plainDone := make(chan struct{})
	go func() {
		defer close(plainDone)
		plain.run(plainCtx, f.nodes[1].url, completion("Once upon a time", 400, true))
	}()

	for _, c := range hostileCases(bang) {
		t.Run(c.name, func(t *testing.T) { f.attack(t, c) })
	}
	// Issue 32's parse attacks, straight at a node (hostile_parse_test.go; through the router in
	// TestHostileParseViaRouter).
	for _, row := range parseBurstRows() {
		t.Run(row.name+" at a node", func(t *testing.T) {
			burst(t, f.nodes[0].url, row, []*proc{f.nodes[0].p}, []string{f.nodes[0].url, f.rURL})
		})
	}
	t.Run("refusals at a node", func(t *testing.T) { refusals(t, f.nodes[0].url) })
	t.Run("expensive grammar beside a plain stream", f.starve)
	t.Run("slow-header flood from one address", func(t *testing.T) { f.flood(t, "slow", 2000) })
	t.Run("600 live streams from one address", func(t *testing.T) { f.flood(t, "live", 600) })
	t.Run("the page and foreign Host headers", f.page)

	stopPlain()
	<-plainDone
	plain.check(t, "beside the attacks")
	for _, n := range f.nodes {
		if n.p.exited() {
			t.Fatalf("node %s died", n.id)
		}
		if rss := rssOf(n.p); rss > hostileRSS {
			t.Errorf("node %s uses %d MB, over the %d MB bound", n.id, rss>>20, hostileRSS>>20)
		}
	}
	waitHTTP(t, f.router, f.rURL+"/health", `"nodes_healthy":2`, 5*time.Second)
	t.Logf("whole test: %v", time.Since(start).Round(time.Millisecond))
}

// attack sends c and checks its answer, the nodes' health and memory.
func (f *hostileFleet) attack(t *testing.T, c hostileCase) {
	t0 := time.Now()
	resp, err := f.client.Post(f.rURL+c.path, "application/json", strings.NewReader(c.body))
	if err != nil {
		t.Fatalf("%s: %v (after %v)", c.name, err, time.Since(t0))
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	took := time.Since(t0)
	var e struct {
		Error struct {
			Message string  `json:"message"`
			Param   *string `json:"param"`
		} `json:"error"`
	}
	json.Unmarshal(body, &e)
	t.Logf("%d in %v: %.200s", resp.StatusCode, took.Round(time.Millisecond), body)
	switch {
	case c.want != 0 && resp.StatusCode != c.want:
		t.Errorf("status %d, want %d", resp.StatusCode, c.want)
	case c.want == 0 && resp.StatusCode != 200 && (resp.StatusCode < 400 || resp.StatusCode >= 500):
		t.Errorf("status %d, want a 4xx or 200", resp.StatusCode)
	}
	if resp.StatusCode >= 400 && resp.StatusCode < 500 && c.param != "" && (e.Error.Param == nil || *e.Error.Param != c.param) {
		t.Errorf("param %v, want %q", e.Error.Param, c.param)
	}
	if resp.StatusCode == 200 && strings.Contains(string(body), `"error"`) {
		t.Errorf("200 with an error body")
	}
	for _, n := range f.nodes {
		if n.p.exited() {
			t.Fatalf("node %s died", n.id)
		}
		if rss := rssOf(n.p); rss > hostileRSS {
			t.Errorf("node %s uses %d MB after the request, over the %d MB bound", n.id, rss>>20, hostileRSS>>20)
		}
	}
}

// starve runs four clients with an expensive grammar and a logit_bias it refuses (so every token
// goes through the grammar's mask) for a few seconds beside a plain stream, on a node of its own
// serving a model with a 32000-token vocabulary (stories260K's 512 tokens make masks cheap).
func (f *hostileFleet) starve(t *testing.T) {
	n := startNode(t, "starve", testdata.Model(t, "synth-tiny-q4_0.gguf"), "-np", "8", "-c", "2048", "-t", "1",
		"--target-itl", hostileITL.String())
	waitHTTP(t, n.p, n.url+"/health", "ok", 20*time.Second)
	url := n.url
	f.nodes = append(f.nodes, n)
	defer func() { f.nodes = f.nodes[:len(f.nodes)-1] }()
	bang := tokenID(t, f.client, url, "!")
	var g strings.Builder
	g.WriteString("root ::= ")
	for i := range 100 {
		if i > 0 {
			g.WriteString(" | ")
		}
		fmt.Fprintf(&g, "[^!\\x00]{0,1000} \"END%d\"", i)
	}
	body, _ := json.Marshal(map[string]any{"prompt": "x", "max_tokens": 200, "grammar": g.String(), "ignore_eos": true,
		"logit_bias": map[string]any{strconv.Itoa(bang): 100}})

	ctx, stop := context.WithCancel(context.Background())
	var plain plainClient
	plainDone := make(chan struct{})
	go func() { defer close(plainDone); plain.run(ctx, url, completion("Once upon a time", 100, true)) }()
	deadline := time.Now().Add(4 * time.Second)
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[int]int{}
	for range 4 {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				resp, err := f.client.Post(url+"/v1/completions", "application/json", strings.NewReader(string(body)))
				if err != nil {
					t.Error(err)
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
	wg.Wait()
	stop()
	<-plainDone
	t.Logf("expensive-grammar requests by status: %v", statuses)
	for s := range statuses {
		if s >= 500 {
			t.Errorf("%d expensive-grammar requests got %d", statuses[s], s)
		}
	}
	plain.check(t, "beside the expensive grammars")
}

// flood opens n connections to the first node from 127.0.0.3, slow-header ones ("slow": a
// request line and no end of headers) or /live subscriptions ("live"), and checks that another
// address (127.0.0.2) still gets /health and the API.
func (f *hostileFleet) flood(t *testing.T, kind string, n int) {
	addr := strings.TrimPrefix(f.nodes[0].url, "http://")
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range n {
		d := net.Dialer{Timeout: time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.3")}}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			break // refused at once is fine
		}
		conns = append(conns, c)
		switch kind {
		case "slow":
			fmt.Fprintf(c, "GET /health HTTP/1.1\r\nHost: %s\r\nX-Slow: ", addr)
		case "live":
			fmt.Fprintf(c, "GET /live HTTP/1.1\r\nHost: %s\r\nAccept: text/event-stream\r\n\r\n", addr)
		}
	}
	time.Sleep(300 * time.Millisecond)
	other := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}).DialContext}}
	for _, path := range []string{"/health", "/v1/models"} {
		resp, err := other.Get(f.nodes[0].url + path)
		if err != nil {
			t.Fatalf("%s from another address during the flood: %v", path, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("%s from another address during a flood of %d %s connections: %d", path, len(conns), kind, resp.StatusCode)
		}
	}
}

// page checks the page's security headers and that a foreign Host is refused on a loopback bind.
func (f *hostileFleet) page(t *testing.T) {
	resp, err := f.client.Get(f.nodes[0].url + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	h := resp.Header
	csp := h.Get("Content-Security-Policy")
	script := ""
	for d := range strings.SplitSeq(csp, ";") {
		if d = strings.TrimSpace(d); strings.HasPrefix(d, "script-src ") {
			script = d
		}
	}
	if !strings.Contains(script, "'self'") || strings.Contains(script, "'unsafe-inline'") {
		t.Errorf("the page's Content-Security-Policy %q does not keep scripts to the page's own files", csp)
	}
	if !strings.Contains(h.Get("Content-Security-Policy"), "frame-ancestors 'none'") && h.Get("X-Frame-Options") == "" {
		t.Error("the page may be framed: no frame-ancestors, no X-Frame-Options")
	}
	if h.Get("X-Content-Type-Options") != "nosniff" {
		t.Error("no X-Content-Type-Options: nosniff on the page")
	}
	req, _ := http.NewRequest(http.MethodGet, f.nodes[0].url+"/v1/models", nil)
	req.Host = "rebind.example:8080"
	resp, err = f.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("Host rebind.example on a loopback bind: %d, want 403", resp.StatusCode)
	}
}

// tokenID returns the id of the last token the node at base tokenizes text into.
func tokenID(t *testing.T, client *http.Client, base, text string) int {
	body, _ := json.Marshal(map[string]any{"content": text, "add_special": false})
	resp, err := client.Post(base+"/tokenize", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Tokens []int `json:"tokens"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || len(out.Tokens) == 0 {
		t.Fatalf("tokenizing %q: %v %v", text, out.Tokens, err)
	}
	return out.Tokens[len(out.Tokens)-1]
}

// plainClient streams completions one after another and records the gaps between tokens.
type plainClient struct {
	mu  sync.Mutex
	gap []time.Duration
}

func (p *plainClient) run(ctx context.Context, base, body string) {
	for ctx.Err() == nil {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return
		}
		sc := bufio.NewScanner(resp.Body)
		var last time.Time
		for sc.Scan() {
			if !strings.HasPrefix(sc.Text(), "data: {") {
				continue
			}
			now := time.Now()
			if !last.IsZero() {
				p.mu.Lock()
				p.gap = append(p.gap, now.Sub(last))
				p.mu.Unlock()
			}
			last = now
		}
		resp.Body.Close()
	}
}

// check fails t when the client got too few tokens to tell, or its inter-token p99 is over
// the nodes' --target-itl.
func (p *plainClient) check(t *testing.T, when string) {
	p.mu.Lock()
	g := slices.Clone(p.gap)
	p.mu.Unlock()
	slices.Sort(g)
	if len(g) < 100 {
		t.Fatalf("a plain client %s got %d tokens: it was not served meanwhile", when, len(g))
	}
	p50, p99 := g[len(g)/2], g[len(g)*99/100]
	t.Logf("plain client %s: %d tokens, inter-token p50 %v, p99 %v (target %v)", when, len(g), p50, p99, hostileITL)
	if p99 > hostileITL {
		t.Errorf("a plain client's inter-token p99 %s is %v, over the nodes' --target-itl %v", when, p99, hostileITL)
	}
}

// manyItems is n Responses input messages.
func manyItems(n int) []any {
	items := make([]any, n)
	for i := range items {
		items[i] = map[string]any{"role": "user", "content": "x"}
	}
	return items
}

// choices is n distinct guided_choice strings.
func choices(n int) []string {
	c := make([]string, n)
	for i := range c {
		c[i] = fmt.Sprintf("c%d", i)
	}
	return c
}

// extraChunks is n /infill input_extra chunks.
func extraChunks(n int) []any {
	c := make([]any, n)
	for i := range c {
		c[i] = map[string]any{"filename": fmt.Sprintf("f%d.go", i), "text": "x"}
	}
	return c
}

// rssOf returns the resident memory of p's process in bytes (0 when unknown).
func rssOf(p *proc) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
