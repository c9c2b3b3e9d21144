package router

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"ubatch/engine"
	"ubatch/fleet"
	"ubatch/gguf"
	"ubatch/internal/sse"
	"ubatch/internal/testdata"
	"ubatch/internal/testmodel"
	_ "ubatch/model/all"
	"ubatch/quant"
	"ubatch/runner"
	"ubatch/server"
	"ubatch/server/llamacpp"
	"ubatch/server/openai"
)

var quiet = slog.New(slog.DiscardHandler)

// testNode is a real node: stories260K in an engine behind the server's handler, publishing to
// Redis when given one.
type testNode struct {
	ts  *httptest.Server
	url string
}

func startNode(t *testing.T, id, redisURL string) *testNode {
	t.Helper()
	m := testmodel.Open(t, testdata.Model(t, "stories260K.gguf"))
	tr := fleet.NewTracker(64)
	lctx := testmodel.Runtime(t, m, runner.Options{NCtx: 1024, NBatch: 512, NUBatch: 512, NSeqMax: 8,
		KVType: quant.F32, Threads: 1, OnBlock: tr.OnBlock})
	eng := testmodel.Engine(t, m, lctx, engine.Config{})
	stop := testmodel.Run(t, eng)
	srv, err := server.New(server.Config{Model: m, Engine: eng, ModelID: "stories", Logger: quiet, Dialects: []server.Dialect{openai.Routes, llamacpp.Routes}})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	n := &testNode{ts: ts, url: ts.URL}
	var pubDone chan struct{}
	ctx, cancel := context.WithCancel(context.Background()) // the publisher's
	if redisURL != "" {
		rdb, err := fleet.NewClient(redisURL)
		if err != nil {
			t.Fatal(err)
		}
		pub, err := fleet.NewPublisher(fleet.PublisherConfig{Redis: rdb, Tracker: tr, NodeID: id, URL: ts.URL,
			BlockSize: lctx.Options().BlockSize, MaxBody: server.DefaultMaxBodyBytes, MaxRunning: 8,
			Load: func() fleet.Load {
				st := eng.Stats()
				return fleet.Load{Running: st.Running, Waiting: st.Waiting, KVTotal: st.KV.Total, KVFree: st.KV.Free}
			},
			Heartbeat: 100 * time.Millisecond, Flush: 10 * time.Millisecond, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		pubDone = make(chan struct{})
		go func() { defer close(pubDone); pub.Run(ctx); rdb.Close() }()
	}
	t.Cleanup(func() {
		ts.CloseClientConnections()
		ts.Close()
		cancel()
		stop()
		if pubDone != nil {
			<-pubDone
		}
	})
	return n
}

func prompter(t *testing.T) *Prompter {
	t.Helper()
	f, err := gguf.Open(testdata.Model(t, "stories260K.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	p, err := NewPrompter(f)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// testRouter is a started router behind an httptest server.
type testRouter struct {
	t   *testing.T
	r   *Router
	ts  *httptest.Server
	reg *prometheus.Registry
}

func startRouter(t *testing.T, cfg Config) *testRouter {
	t.Helper()
	if cfg.Prompter == nil {
		cfg.Prompter = prompter(t)
	}
	reg := prometheus.NewRegistry()
	cfg.Registerer, cfg.Gatherer, cfg.Logger = reg, reg, quiet
	if cfg.HealthInterval == 0 {
		cfg.HealthInterval = 50 * time.Millisecond
	}
	if cfg.RefreshInterval == 0 {
		cfg.RefreshInterval = 50 * time.Millisecond
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.Start(ctx)
	ts := httptest.NewServer(r.Handler())
	t.Cleanup(func() { ts.Close(); cancel() })
	return &testRouter{t: t, r: r, ts: ts, reg: reg}
}

// post sends a JSON body and returns the status, the serving node and the body.
func (tr *testRouter) post(path, body string) (int, string, []byte) {
	tr.t.Helper()
	resp, err := http.Post(tr.ts.URL+path, "application/json", strings.NewReader(body))
	if err != nil {
		tr.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		tr.t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get(NodeHeader), b
}

// events splits an SSE body into its data payloads.
func events(body []byte) []string {
	var out []string
	sc := sse.NewReader(bytes.NewReader(body), maxEvent)
	for sc.Next() {
		out = append(out, sc.Text())
	}
	return out
}

func (tr *testRouter) counter(name string, labels ...string) float64 {
	tr.t.Helper()
	r := tr.r.m
	switch name {
	case "decisions":
		return testutil.ToFloat64(r.decisions.WithLabelValues(labels...))
	case "retries":
		return testutil.ToFloat64(r.retries.WithLabelValues(labels...))
	case "stream_errors":
		return testutil.ToFloat64(r.streamErrors.WithLabelValues(labels...))
	case "healthy":
		return testutil.ToFloat64(r.healthy.WithLabelValues(labels...))
	case "mismatch":
		return testutil.ToFloat64(r.mismatch)
	case "unknown":
		return testutil.ToFloat64(r.unknownNodes)
	case "failures":
		return testutil.ToFloat64(r.failures.WithLabelValues(labels...))
	case "ejections":
		return testutil.ToFloat64(r.ejections.WithLabelValues(labels...))
	case "rejected":
		return testutil.ToFloat64(r.rejected.WithLabelValues(labels...))
	case "parses":
		return testutil.ToFloat64(r.parses.WithLabelValues(labels...))
	case "deaths":
		return testutil.ToFloat64(r.deaths.WithLabelValues(labels...))
	}
	tr.t.Fatalf("no counter %s", name)
	return 0
}

func usageOf(t *testing.T, body []byte) (prompt, cached int) {
	t.Helper()
	var u usage
	if err := json.Unmarshal(body, &u); err != nil || u.Usage == nil {
		t.Fatalf("no usage in %s", body)
	}
	return u.Usage.PromptTokens, u.Usage.PromptTokensDetails.CachedTokens
}

// label is the router's name for a test server.
func label(url string) string { return nodeLabel(url) }

func readAll(t *testing.T, resp *http.Response) []byte {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
