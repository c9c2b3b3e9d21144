package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"ubatch/engine"
	"ubatch/internal/testkit"
	"ubatch/sample"
)

func explode() { panic("assignment to entry in nil map") }

// TestHandlerPanicRecovered: behind recoverPanics, a handler that panics before answering gets a
// 500 with an error ID in OpenAI's body, and one that panics mid-stream has its connection cut
// (the client sees a broken body, not a clean end); both are logged with the ID and the
// panicking frame and counted. A handler's own http.ErrAbortHandler is neither.
func TestHandlerPanicRecovered(t *testing.T) {
	var logs testkit.SyncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	met := NewMetrics(nil)
	handlers := map[string]func(http.ResponseWriter, *http.Request){
		"/before": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "99")
			explode()
		},
		"/stream": func(w http.ResponseWriter, r *http.Request) {
			sse := startSSE(w)
			sse.Send(map[string]string{"text": "partial"})
			explode()
		},
		"/abort": func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusOK)
			w.Write([]byte("x"))
			http.NewResponseController(w).Flush()
			panic(http.ErrAbortHandler)
		},
	}
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		recoverPanics(&recorder{ResponseWriter: w, status: http.StatusOK}, r, logger, met, handlers[r.URL.Path])
	}))
	ts.Config.ErrorLog = failLogger(t) // net/http's own log: it must stay silent for ErrAbortHandler
	ts.Start()
	defer ts.Close()
	handlerPanics := func() float64 { return metricValue(t, met.panics.WithLabelValues("handler")) }

	resp, err := ts.Client().Get(ts.URL + "/before")
	if err != nil {
		t.Fatal(err)
	}
	d := checkError(t, resp, http.StatusInternalServerError, "server_error")
	resp.Body.Close()
	id, ok := strings.CutPrefix(d.Message, "internal error ")
	id, _, _ = strings.Cut(id, ":")
	if !ok || len(id) != 8 || d.Code == nil || *d.Code != "internal_error" {
		t.Fatalf("error %+v: want an internal_error with an 8-digit id", d)
	}
	if out := logs.String(); !strings.Contains(out, "error_id="+id) || !strings.Contains(out, "server.explode") ||
		!strings.Contains(out, "level=ERROR") {
		t.Fatalf("the log lacks the error record with the id and the panicking frame:\n%s", out)
	}
	if n := handlerPanics(); n != 1 {
		t.Fatalf("%v handler panics counted, want 1", n)
	}

	resp, err = ts.Client().Get(ts.URL + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || err == nil || !bytes.Contains(body, []byte("partial")) {
		t.Fatalf("mid-stream panic: status %d, body %q, read error %v; want 200, the partial body, then a cut", resp.StatusCode, body, err)
	}
	if n := handlerPanics(); n != 2 {
		t.Fatalf("%v handler panics counted, want 2", n)
	}

	before := logs.String()
	resp, err = ts.Client().Get(ts.URL + "/abort")
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil {
		t.Fatal("http.ErrAbortHandler did not cut the response")
	}
	if n := handlerPanics(); n != 2 || logs.String() != before {
		t.Fatalf("http.ErrAbortHandler was counted (%v) or logged (%q)", n, strings.TrimPrefix(logs.String(), before))
	}
}

// failLogger is a *log.Logger that fails the test when net/http writes to it.
func failLogger(t *testing.T) *log.Logger {
	return log.New(failWriter{t}, "", 0)
}

type failWriter struct{ t *testing.T }

func (f failWriter) Write(p []byte) (int, error) {
	f.t.Errorf("net/http logged: %s", p)
	return len(p), nil
}

// TestSamplingErrorStatus: what the request caused (its grammar, its ignore_eos) is a 400 naming
// the field; a recovered panic a 500 with its id; NaN logits stay a 500.
func TestSamplingErrorStatus(t *testing.T) {
	tests := []struct {
		err                 error
		status              int
		param, code, inText string
	}{
		{&sample.RequestError{Param: "ignore_eos", Code: sample.CodeGrammarDeadEnd, Err: errors.New("complete")},
			400, "ignore_eos", "grammar_dead_end", "complete"},
		{&sample.RequestError{Param: "grammar", Code: sample.CodeGrammarTooExpensive, Err: engine.ErrSamplingTooSlow},
			400, "grammar", "grammar_too_expensive", "too long"},
		{&engine.PanicError{ID: "0badc0de"}, 500, "", "internal_error", "internal error 0badc0de: please report it"},
		{errors.New("sample: every token the grammar allows has a NaN logit"), 500, "", "", "NaN"},
	}
	for _, tc := range tests {
		ae := ToAPIError(tc.err)
		d := ae.body().Error
		if ae.Status != tc.status || deref(d.Param) != tc.param || deref(d.Code) != tc.code || !strings.Contains(d.Message, tc.inText) {
			b, _ := json.Marshal(ae.body())
			t.Errorf("%v: %d %s; want %d param %q code %q", tc.err, ae.Status, b, tc.status, tc.param, tc.code)
		}
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// TestGrammarCompleteWithIgnoreEOS is issue 19's request: a grammar that is complete after "a"
// with end of generation disabled cannot go on. That is the client's doing: a 400 on ignore_eos
// on OpenAI's and llama.cpp's routes, and in a stream already answered 200 an error event with
// the same body.
func TestGrammarCompleteWithIgnoreEOS(t *testing.T) {
	e := newEnv(t, envOptions{})
	body := map[string]any{"prompt": "x", "grammar": `root ::= "a"`, "ignore_eos": true, "max_tokens": 8}
	for _, path := range []string{"/v1/completions", "/completion"} {
		resp := e.Post(t.Context(), path, body)
		d := checkError(t, resp, http.StatusBadRequest, "invalid_request_error")
		resp.Body.Close()
		if deref(d.Param) != "ignore_eos" || deref(d.Code) != sample.CodeGrammarDeadEnd || !strings.Contains(d.Message, "ignore_eos") {
			t.Fatalf("%s: error %+v, want param ignore_eos, code %s", path, d, sample.CodeGrammarDeadEnd)
		}
	}
	streamed := map[string]any{"stream": true}
	for k, v := range body {
		streamed[k] = v
	}
	resp := e.Post(t.Context(), "/v1/completions", streamed)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("streamed: status %d", resp.StatusCode)
	}
	events := sseEvents(t, resp.Body)
	var last struct {
		Error *errorDetail `json:"error"`
	}
	if len(events) == 0 || json.Unmarshal([]byte(events[len(events)-1]), &last) != nil || last.Error == nil ||
		deref(last.Error.Param) != "ignore_eos" || deref(last.Error.Code) != sample.CodeGrammarDeadEnd {
		t.Fatalf("streamed: events %q, want an error event on ignore_eos last", events)
	}
	if n := metricValue(t, e.metrics.panics.WithLabelValues("engine")); n != 0 {
		t.Fatalf("%v engine panics", n)
	}
}
