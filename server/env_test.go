package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"ubatch/engine"
	"ubatch/internal/sse"
	"ubatch/internal/testdata"
	"ubatch/internal/testhttp"
	"ubatch/internal/testmodel"
	"ubatch/model"
	_ "ubatch/model/all"
	"ubatch/quant"
	"ubatch/runner"
)

// envOptions size a test server; zero fields take small defaults.
type envOptions struct {
	nCtx, nSeq, maxQueue, maxRunning, batch int
	apiKey                                  string
	maxBody                                 int64
	embedder                                engine.Pooling // "" = no /v1/embeddings
	live                                    bool           // feed GET /live (a Live hub beside the metrics)
	limits                                  RequestLimits
	chatTemplate                            string // "": the model's (stories260K has none: ChatML)
	reasoningFormat                         string // serve's --reasoning-format
	parseBudget                             *ParseBudget
	cacheSaltPerKey                         bool // serve's --cache-salt-per-key
}

// testEnv is a real engine over stories260K behind an httptest server.
type testEnv struct {
	testhttp.Caller
	model   *model.Model
	eng     *engine.Engine
	srv     *Server
	ts      *httptest.Server
	reg     *prometheus.Registry
	metrics *Metrics
	// stopEngine ends the engine's Run loop (as `ubatch serve` does after draining).
	stopEngine func()
}

func newEnv(t testing.TB, o envOptions) *testEnv {
	t.Helper()
	m := testmodel.Open(t, testdata.Model(t, "stories260K.gguf"))
	if o.nCtx == 0 {
		o.nCtx = 512
	}
	if o.nSeq == 0 {
		o.nSeq = 8
	}
	lctx := testmodel.Runtime(t, m, runner.Options{NCtx: o.nCtx, NBatch: 512, NUBatch: 512, NSeqMax: o.nSeq, KVType: quant.F32, Threads: 2})
	reg := prometheus.NewRegistry()
	met := NewMetrics(reg)
	var obs engine.Observer = met
	var live *Live
	if o.live {
		live = NewLive()
		obs = Observers{met, live}
	}
	eng := testmodel.Engine(t, m, lctx, engine.Config{BatchSize: o.batch, MaxRunning: o.maxRunning, MaxQueue: o.maxQueue, Observer: obs})
	stop := testmodel.Run(t, eng)
	var emb *Embedder
	if o.embedder != "" {
		emb = NewEmbedder(o.embedder, 128)
	}
	srv, err := New(Config{Model: m, Engine: eng, Dialects: testDialects, APIKey: o.apiKey, MaxBodyBytes: o.maxBody, Metrics: met, Gatherer: reg, ModelID: "stories", Embedder: emb, Live: live,
		Limits: o.limits, ChatTemplate: o.chatTemplate, ReasoningFormat: o.reasoningFormat, ParseBudget: o.parseBudget,
		CacheSaltPerKey: o.cacheSaltPerKey})
	if err != nil {
		t.Fatal(err)
	}
	e := serveEnv(t, m, eng, srv, stop, &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 60 * time.Second})
	e.reg, e.metrics = reg, met
	return e
}

// serveEnv is the testEnv of srv (over m and eng; stop ends eng's Run) behind an httptest
// server, which the test's end closes after client's idle connections.
func serveEnv(t testing.TB, m *model.Model, eng *engine.Engine, srv *Server, stop func(), client *http.Client) *testEnv {
	ts := httptest.NewServer(srv.Handler())
	e := &testEnv{Caller: testhttp.Caller{T: t, URL: ts.URL, Client: client}, model: m, eng: eng, srv: srv, ts: ts, stopEngine: stop}
	t.Cleanup(func() { e.Client.CloseIdleConnections(); ts.Close() })
	return e
}

// sseEvents reads a whole event stream and returns the data payloads.
var sseEvents = testhttp.SSEEvents

// streamCompletion posts a streaming /v1/completions request and returns the concatenated text,
// the finish reason and the raw events.
func (e *testEnv) streamCompletion(body map[string]any) (string, string, []string) {
	e.T.Helper()
	resp := e.PostStream("/v1/completions", body)
	defer resp.Body.Close()
	events := sseEvents(e.T, resp.Body)
	var text strings.Builder
	finish := ""
	for _, ev := range events {
		if ev == "[DONE]" {
			continue
		}
		var ch struct {
			Choices []completionChoice `json:"choices"`
		}
		if err := json.Unmarshal([]byte(ev), &ch); err != nil {
			e.T.Fatalf("bad chunk %q: %v", ev, err)
		}
		for _, x := range ch.Choices {
			text.WriteString(x.Text)
			if x.FinishReason != nil {
				finish = *x.FinishReason
			}
		}
	}
	return text.String(), finish, events
}

// kvUsed returns the engine's used KV blocks.
func (e *testEnv) kvUsed() int { return e.eng.Stats().KV.Used }

// streamText posts a streaming /v1/completions request with client and returns the text, the
// finish reason and every chunk's text. It reports errors instead of failing, so goroutines can
// use it.
func streamText(ctx context.Context, client *http.Client, url string, body map[string]any) (text, finish string, chunks []string, err error) {
	body["stream"] = true
	raw, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/completions", bytes.NewReader(raw))
	if err != nil {
		return "", "", nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", "", nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(resp.Body)
		return "", "", nil, fmt.Errorf("status %d: %s", resp.StatusCode, data)
	}
	sc := sse.NewReader(resp.Body, 1<<20)
	var sb strings.Builder
	sawDone := false
	for sc.Next() {
		data := sc.Text()
		if data == "[DONE]" {
			sawDone = true
			continue
		}
		var ch struct {
			Choices []completionChoice `json:"choices"`
		}
		if err := json.Unmarshal([]byte(data), &ch); err != nil {
			return "", "", nil, fmt.Errorf("bad chunk %q: %v", data, err)
		}
		for _, c := range ch.Choices {
			sb.WriteString(c.Text)
			chunks = append(chunks, c.Text)
			if c.FinishReason != nil {
				finish = *c.FinishReason
			}
		}
	}
	if err := sc.Err(); err != nil {
		return "", "", nil, err
	}
	if !sawDone {
		return "", "", nil, fmt.Errorf("stream ended without [DONE]")
	}
	return sb.String(), finish, chunks, nil
}

// metricValue reads a counter's or gauge's current value.
func metricValue(t testing.TB, m prometheus.Metric) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		t.Fatal(err)
	}
	switch {
	case d.Counter != nil:
		return d.Counter.GetValue()
	case d.Gauge != nil:
		return d.Gauge.GetValue()
	}
	t.Fatalf("metric %v is neither a counter nor a gauge", m.Desc())
	return 0
}
