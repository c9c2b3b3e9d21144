package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"ubatch/engine"
	"ubatch/model"
	"ubatch/quant"
	"ubatch/runner"
	"ubatch/synth"
)

// multiOptions shape a multiEnv.
type multiOptions struct {
	cfg      RegistryConfig // Models and Load are filled in
	embedder bool           // each model serves /v1/embeddings and /api/embed
	live     bool
	gate     chan struct{} // when set, every load waits for a value on it
	one      bool          // Models lists alpha alone (a server of one model)
	maxQueue int           // each engine's Config.MaxQueue (0: its default)
}

// multiEnv is a NewMulti front over two real synth models (qwen3 Q8_0 "alpha", llama Q4_0
// "beta"), each loaded by a real Loader: model file, runner context, engine, Server.
type multiEnv struct {
	ts       *httptest.Server
	reg      *Registry
	loads    atomic.Int32 // Loader calls
	closes   atomic.Int32 // Loaded.Close calls
	live     *Live
	specs    []ModelSpec
	client   *http.Client
	maxQueue int
}

func newMultiEnv(t *testing.T, o multiOptions) *multiEnv {
	t.Helper()
	dir := t.TempDir()
	e := &multiEnv{client: &http.Client{Timeout: 60 * time.Second}, maxQueue: o.maxQueue}
	for _, m := range []struct{ id, arch, typ, alias string }{{"alpha", "qwen3", "q8_0", "Org/Alpha-GGUF:Q8_0"}, {"beta", "llama", "q4_0", "Org/Beta-GGUF:Q4_0"}} {
		w, err := synth.TaskFixture(m.arch, m.typ, false, false)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, m.id+"-"+strings.ToUpper(m.typ)+".gguf")
		if err := w.WriteFile(path); err != nil {
			t.Fatal(err)
		}
		e.specs = append(e.specs, ModelSpec{ID: m.id, Aliases: []string{m.alias}, Path: path, Size: 1})
	}
	if o.live {
		e.live = NewLive()
	}
	cfg := o.cfg
	if o.one {
		e.specs = e.specs[:1]
	}
	cfg.Models = func() ([]ModelSpec, error) { return e.specs, nil }
	cfg.Load = func(ctx context.Context, spec ModelSpec) (*Loaded, error) {
		e.loads.Add(1)
		if o.gate != nil {
			<-o.gate
		}
		return e.load(spec, o.embedder)
	}
	reg, err := NewRegistry(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.reg = reg
	front, err := NewMulti(Config{Live: e.live, Dialects: testDialects}, reg)
	if err != nil {
		t.Fatal(err)
	}
	e.ts = httptest.NewServer(front.Handler())
	t.Cleanup(func() {
		e.client.CloseIdleConnections()
		if e.live != nil {
			e.live.Close()
		}
		e.ts.Close()
		reg.Close()
	})
	return e
}

// load is the test's Loader: what serve's does, at test sizes.
func (e *multiEnv) load(spec ModelSpec, embedder bool) (*Loaded, error) {
	m, err := model.Open(spec.Path)
	if err != nil {
		return nil, err
	}
	lctx, err := runner.New(m.Graph, runner.Options{NCtx: 512, NBatch: 256, NUBatch: 256, NSeqMax: 4, KVType: quant.F32, Threads: 2})
	if err != nil {
		m.Close()
		return nil, err
	}
	sub := prometheus.NewRegistry()
	met := NewMetrics(prometheus.WrapRegistererWith(prometheus.Labels{"model": spec.ID}, sub))
	var obs engine.Observer = met
	if e.live != nil {
		obs = Observers{met, e.live}
	}
	opts := lctx.Options()
	eng, err := engine.New(lctx, engine.Limits{NCtx: opts.NCtx, NSeqMax: opts.NSeqMax, NBatch: opts.NBatch, Vocab: m.Hparams().Vocab},
		engine.Config{IsEOG: m.Vocab.IsEOG, Observer: obs, MaxQueue: e.maxQueue, MaxRunning: min(e.maxQueue, 4)})
	if err != nil {
		lctx.Close()
		m.Close()
		return nil, err
	}
	var emb *Embedder
	if embedder {
		emb = NewEmbedder(engine.PoolMean, 128)
	}
	srv, err := New(Config{Model: m, Engine: eng, Dialects: testDialects, ModelID: spec.ID, Aliases: spec.Aliases, Metrics: met, Embedder: emb, Live: e.live})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	go eng.Run(ctx)
	return &Loaded{Server: srv, Engine: eng, Metrics: sub, Bytes: m.Size, Close: func() {
		e.closes.Add(1)
		cancel()
		<-eng.Done()
		lctx.Close()
		m.Close()
	}}, nil
}

// do sends body to path and returns the status, the Retry-After header and the body.
func (e *multiEnv) do(t *testing.T, method, path, body string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(method, e.ts.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Retry-After"), string(b)
}

// psNames lists /api/ps's models by id.
func (e *multiEnv) psNames(t *testing.T) []string {
	t.Helper()
	code, _, body := e.do(t, "GET", "/api/ps", "")
	if code != 200 {
		t.Fatalf("/api/ps: %d %s", code, body)
	}
	var ps struct{ Models []struct{ Name string } }
	if err := json.Unmarshal([]byte(body), &ps); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range ps.Models {
		id, ok := strings.CutSuffix(m.Name, ":latest") // listed as name:tag (TestMultiRoutes checks it)
		if !ok {
			t.Fatalf("/api/ps lists %q, not name:latest", m.Name)
		}
		names = append(names, id)
	}
	return names
}

func chatBody(model string, extra string) string {
	return fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hi"}],"max_tokens":3,"options":{"num_predict":3},"stream":false%s}`, model, extra)
}

// TestMultiRoutes: each route finds the model its request names (id, alias, file name, any
// case, :latest), an unknown one is 404 model_not_found in each API's shape, a request without
// model is a 400 naming it when there are several, and the listings say what is loaded.
func TestMultiRoutes(t *testing.T) {
	e := newMultiEnv(t, multiOptions{cfg: RegistryConfig{KeepAlive: -1}})
	tests := []struct {
		name, method, path, body string
		want                     int
		contains                 string
	}{
		{name: "openai by id", method: "POST", path: "/v1/chat/completions", body: chatBody("alpha", ""), want: 200, contains: `"model":"alpha"`},
		{name: "openai by alias", method: "POST", path: "/v1/completions", body: `{"model":"org/beta-gguf:q4_0","prompt":"a","max_tokens":2}`, want: 200, contains: `"model":"beta"`},
		{name: "ollama by file name and tag", method: "POST", path: "/api/chat", body: chatBody("alpha-Q8_0:latest", ""), want: 200, contains: `"done":true`},
		{name: "openai by the name /api/tags lists", method: "POST", path: "/v1/chat/completions", body: chatBody("alpha:latest", ""), want: 200, contains: `"model":"alpha"`},
		{name: "ollama show by the listed name", method: "POST", path: "/api/show", body: `{"model":"beta:latest"}`, want: 200, contains: `"details"`},
		{name: "llama.cpp route", method: "POST", path: "/completion", body: `{"model":"beta","prompt":"a","n_predict":2}`, want: 200, contains: `"content"`},
		{name: "tokenize", method: "POST", path: "/tokenize", body: `{"model":"alpha","content":"a b"}`, want: 200, contains: `"tokens"`},
		{name: "openai unknown", method: "POST", path: "/v1/chat/completions", body: chatBody("gamma", ""), want: 404, contains: `"code":"model_not_found"`},
		{name: "responses unknown", method: "POST", path: "/v1/responses", body: `{"model":"gamma","input":"hi"}`, want: 404, contains: `"code":"model_not_found"`},
		{name: "ollama unknown", method: "POST", path: "/api/generate", body: `{"model":"gamma","prompt":"a"}`, want: 404, contains: `{"error":"model \"gamma\" not found`},
		{name: "show unknown", method: "POST", path: "/api/show", body: `{"model":"gamma"}`, want: 404, contains: `{"error":`},
		{name: "no model, several", method: "POST", path: "/v1/chat/completions", body: `{"messages":[{"role":"user","content":"hi"}]}`, want: 400, contains: `"param":"model"`},
		{name: "model not a string", method: "POST", path: "/v1/completions", body: `{"model":3,"prompt":"a"}`, want: 400, contains: `"param":"model"`},
		{name: "bad keep_alive", method: "POST", path: "/api/generate", body: `{"model":"alpha","prompt":"a","keep_alive":"soon"}`, want: 400, contains: `keep_alive`},
		{name: "models/{id}", method: "GET", path: "/v1/models/beta", want: 200, contains: `"id":"beta"`},
		{name: "models/{id} unknown", method: "GET", path: "/v1/models/gamma", want: 404, contains: `"code":"model_not_found"`},
		{name: "props by query", method: "GET", path: "/props?model=beta", want: 200, contains: `beta`},
		{name: "a model's route, wrong method", method: "GET", path: "/v1/chat/completions", want: 405, contains: `method_not_allowed`},
		{name: "no such route", method: "POST", path: "/v1/nope", body: `{"model":"alpha"}`, want: 404, contains: `no route`},
		{name: "health", method: "GET", path: "/health", want: 200, contains: `ok`},
		{name: "pull a served model", method: "POST", path: "/api/pull", body: `{"model":"Org/Alpha-GGUF:Q8_0","stream":false}`, want: 200, contains: `{"status":"success"}`},
		{name: "pull another, no library", method: "POST", path: "/api/pull", body: `{"model":"Org/Gamma-GGUF:Q8_0"}`, want: 404, contains: `{"error":"model \"Org/Gamma-GGUF:Q8_0\" not found`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, _, body := e.do(t, tc.method, tc.path, tc.body)
			if code != tc.want || !strings.Contains(body, tc.contains) {
				t.Errorf("%s %s: %d %s, want %d with %s", tc.method, tc.path, code, body, tc.want, tc.contains)
			}
		})
	}
	if n := e.loads.Load(); n != 2 {
		t.Errorf("%d loads, want 2: one per model", n)
	}
	code, _, body := e.do(t, "GET", "/v1/models", "")
	var list struct {
		Data []struct {
			ID     string
			Status struct{ Value string }
		}
	}
	if err := json.Unmarshal([]byte(body), &list); code != 200 || err != nil || len(list.Data) != 2 ||
		list.Data[0].ID != "alpha" || list.Data[0].Status.Value != "loaded" || list.Data[1].Status.Value != "loaded" {
		t.Errorf("/v1/models: %d %s", code, body)
	}
	code, _, body = e.do(t, "GET", "/api/tags", "")
	if code != 200 || !strings.Contains(body, `"name":"alpha:latest"`) || !strings.Contains(body, `"name":"beta:latest"`) || !strings.Contains(body, `"family":"llama"`) {
		t.Errorf("/api/tags: %d %s", code, body)
	}
	code, _, body = e.do(t, "GET", "/metrics", "")
	if code != 200 || !strings.Contains(body, `model="alpha"`) || !strings.Contains(body, `model="beta"`) {
		t.Errorf("/metrics lacks the per-model series: %d", code)
	}
}

// TestMultiKeepAlive: Ollama's keep_alive 0 unloads once the request is answered, a negative one
// keeps the model, a duration unloads after it; the registry's default applies without one.
func TestMultiKeepAlive(t *testing.T) {
	e := newMultiEnv(t, multiOptions{cfg: RegistryConfig{KeepAlive: time.Hour}})
	tests := []struct {
		name, keep string
		want       []string // /api/ps after the request (and the wait)
		wait       time.Duration
	}{
		{name: "default keeps", keep: "", want: []string{"alpha"}},
		{name: "zero unloads", keep: `,"keep_alive":0`, want: nil},
		{name: "negative keeps", keep: `,"keep_alive":-1`, want: []string{"alpha"}},
		{name: "a duration expires", keep: `,"keep_alive":"200ms"`, want: nil, wait: 2 * time.Second},
		{name: "seconds as a number", keep: `,"keep_alive":0.2`, want: nil, wait: 2 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if code, _, body := e.do(t, "POST", "/api/chat", chatBody("alpha", tc.keep)); code != 200 {
				t.Fatalf("chat: %d %s", code, body)
			}
			deadline := time.Now().Add(tc.wait)
			for {
				got := e.psNames(t)
				if fmt.Sprint(got) == fmt.Sprint(tc.want) {
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("/api/ps lists %v, want %v", got, tc.want)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
	if l, c := e.loads.Load(), e.closes.Load(); l != 3 || c != 3 { // the negative keep_alive's load lasted until "200ms"
		t.Errorf("%d loads and %d closes, want 3 of each", l, c)
	}
}

// TestMultiLoadOnce: concurrent first requests load a model once and all wait for it; a request
// that waits longer than LoadTimeout gets 503 with Retry-After, and the load still completes for
// the next one.
func TestMultiLoadOnce(t *testing.T) {
	gate := make(chan struct{})
	e := newMultiEnv(t, multiOptions{gate: gate, cfg: RegistryConfig{KeepAlive: -1, LoadTimeout: 300 * time.Millisecond}})
	code, retry, body := e.do(t, "POST", "/v1/chat/completions", chatBody("alpha", ""))
	if code != 503 || retry == "" || !strings.Contains(body, "model_loading") {
		t.Fatalf("a request past the load timeout: %d Retry-After %q %s, want 503 model_loading with Retry-After", code, retry, body)
	}
	e.reg.cfg.LoadTimeout = time.Minute // (no request in flight)
	var wg sync.WaitGroup
	codes := make([]int, 8)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i], _, _ = e.do(t, "POST", "/v1/chat/completions", chatBody("alpha", ""))
		}()
	}
	for e.reg.state("alpha") != "loading" {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // the requests are waiting on the load
	gate <- struct{}{}
	wg.Wait()
	for i, c := range codes {
		if c != 200 {
			t.Errorf("request %d: %d", i, c)
		}
	}
	if n := e.loads.Load(); n != 1 {
		t.Errorf("%d loads for concurrent first requests, want 1", n)
	}
	// Ollama's load_duration is the wait for the model: the gate's on a first request, little after.
	loadDuration := func() time.Duration {
		code, _, body := e.do(t, "POST", "/api/generate", `{"model":"beta","prompt":"a","raw":true,"stream":false,"options":{"num_predict":1}}`)
		var got struct {
			LoadDuration int64 `json:"load_duration"`
		}
		if err := json.Unmarshal([]byte(body), &got); code != 200 || err != nil {
			t.Fatalf("generate: %d %s", code, body)
		}
		return time.Duration(got.LoadDuration)
	}
	// The gate opens 200 ms after this goroutine starts, a little less after the request's
	// clock starts (measured 197.8 ms on a loaded machine): 150 ms tells a waited load from none.
	go func() { time.Sleep(200 * time.Millisecond); gate <- struct{}{} }()
	if d := loadDuration(); d < 150*time.Millisecond {
		t.Errorf("load_duration of the request that loaded beta: %v, want about the 200 ms it waited", d)
	}
	if d := loadDuration(); d >= 100*time.Millisecond {
		t.Errorf("load_duration once beta is loaded: %v", d)
	}
}

// TestMultiMaxModels: with room for one model, a request for the other unloads the idle one
// (least recently used), but never one that is serving a request: then it is a 503 with
// Retry-After.
func TestMultiMaxModels(t *testing.T) {
	e := newMultiEnv(t, multiOptions{cfg: RegistryConfig{KeepAlive: -1, MaxModels: 1}})
	for _, m := range []string{"alpha", "beta"} {
		if code, _, body := e.do(t, "POST", "/v1/chat/completions", chatBody(m, "")); code != 200 {
			t.Fatalf("%s: %d %s", m, code, body)
		}
		if got := e.psNames(t); len(got) != 1 || got[0] != m {
			t.Fatalf("after a request for %s, /api/ps lists %v", m, got)
		}
	}
	// Hold beta busy with a streaming request that has not finished.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", e.ts.URL+"/v1/completions", strings.NewReader(`{"model":"beta","prompt":"a","max_tokens":100000,"ignore_eos":true,"stream":true}`))
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := resp.Body.Read(make([]byte, 1)); err != nil { // the stream is under way
		t.Fatal(err)
	}
	code, retry, body := e.do(t, "POST", "/v1/chat/completions", chatBody("alpha", ""))
	if code != 503 || retry == "" || !strings.Contains(body, "model_busy") {
		t.Errorf("a load with the one room busy: %d Retry-After %q %s, want 503 model_busy", code, retry, body)
	}
	cancel()
	resp.Body.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, _, body = e.do(t, "POST", "/v1/chat/completions", chatBody("alpha", ""))
		if code == 200 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code != 200 {
		t.Fatalf("once beta is idle: %d %s", code, body)
	}
	if got := e.psNames(t); len(got) != 1 || got[0] != "alpha" {
		t.Errorf("/api/ps lists %v, want alpha alone", got)
	}
}

// TestMultiMemBudget: with a memory budget that holds one of the two models, loading the second
// unloads the idle first once the second's real size is known (the estimate before the load is
// only its file).
func TestMultiMemBudget(t *testing.T) {
	e := newMultiEnv(t, multiOptions{cfg: RegistryConfig{KeepAlive: -1, MemBudget: 150_000}})
	for _, tc := range []struct{ model, want string }{{"alpha", "[alpha]"}, {"beta", "[beta]"}, {"alpha", "[alpha]"}} {
		if code, _, body := e.do(t, "POST", "/v1/chat/completions", chatBody(tc.model, "")); code != 200 {
			t.Fatalf("%s: %d %s", tc.model, code, body)
		}
		if got := fmt.Sprint(e.psNames(t)); got != tc.want {
			t.Errorf("after a request for %s: /api/ps lists %s, want %s", tc.model, got, tc.want)
		}
	}
}

// TestMultiPullOneAtATime: a client asks for the download, so a second /api/pull while one runs
// is a 429 with Retry-After, and the next after it ends is taken again.
func TestMultiPullOneAtATime(t *testing.T) {
	started, release := make(chan struct{}, 1), make(chan struct{})
	pull := func(ctx context.Context, name string, progress func(done, total int64)) error {
		started <- struct{}{}
		<-release
		return errors.New("no such repository on the hub")
	}
	e := newMultiEnv(t, multiOptions{cfg: RegistryConfig{KeepAlive: -1, Pull: pull}})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock) // a failure below must not leave the first pull holding the server
	body := `{"model":"Org/Huge-GGUF:Q8_0","stream":false}`
	first := make(chan int, 1)
	go func() {
		code, _, _ := e.do(t, "POST", "/api/pull", body)
		first <- code
	}()
	<-started
	code, retry, out := e.do(t, "POST", "/api/pull", `{"model":"Org/Other-GGUF:Q4_0","stream":false}`)
	if code != http.StatusTooManyRequests || retry == "" || !strings.Contains(out, "one pull at a time") {
		t.Fatalf("a pull while another runs: %d (Retry-After %q) %s, want 429 with Retry-After naming the limit", code, retry, out)
	}
	unblock()
	if code := <-first; code != http.StatusNotFound {
		t.Fatalf("the first pull: %d, want 404 (the hub has no such repository)", code)
	}
	go func() { <-started }()
	if code, _, out := e.do(t, "POST", "/api/pull", body); code != http.StatusNotFound {
		t.Fatalf("a pull after the first ended: %d %s, want it taken (404 from the hub)", code, out)
	}
}

// TestRegistryCloseBounded: a request that holds its model past the shutdown (stuck where no
// context reaches it) no longer keeps Close, and with it the process, from returning.
func TestRegistryCloseBounded(t *testing.T) {
	e := newMultiEnv(t, multiOptions{})
	spec, err := e.reg.Find(e.specs[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	s, err := e.reg.acquire(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	e.reg.Close()
	if took := time.Since(start); took < closeWait || took > closeWait+5*time.Second {
		t.Fatalf("Close returned after %v with a model in use, want about %v", took, closeWait)
	}
	e.reg.release(s, nil)
}
