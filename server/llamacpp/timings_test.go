package llamacpp

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"
	"ubatch/server/servertest"
)

// TestLlamaCompletionTimings: /completion's timings are the engine's: predicted_n is the
// completion's tokens, prompt_n the prompt tokens not cached, and prompt_ms and predicted_ms are
// within the request's wall time and take real model time (the handler reading a finished
// stream used to see 8 tokens in 0.0078 ms), whether or not the reply streams.
func TestLlamaCompletionTimings(t *testing.T) {
	e := newEnv(t, servertest.Options{})
	long := strings.Repeat("Once upon a time there was a little girl named Lily. ", 6)
	tests := []struct {
		name      string
		prompt    string
		nPredict  int
		stream    bool
		wantCache bool // the prompt was sent before: most of it comes from the cache
	}{
		{name: "whole", prompt: "The dog ran to the park", nPredict: 16},
		{name: "streaming", prompt: "A little bird sang", nPredict: 12, stream: true},
		{name: "first of a long prompt", prompt: long, nPredict: 8},
		{name: "long prompt again", prompt: long, nPredict: 8, wantCache: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body := map[string]any{"prompt": tc.prompt, "n_predict": tc.nPredict, "temperature": 0, "ignore_eos": true,
				"cache_prompt": true, "stream": tc.stream}
			began := time.Now()
			final := llamaFinalOf(t, e, body)
			wall := float64(time.Since(began)) / float64(time.Millisecond)
			tm := final.Timings
			if tm == nil {
				t.Fatalf("no timings: %+v", final)
			}
			if tm.PredictedN != tc.nPredict || tm.PredictedN != final.TokensPredicted {
				t.Errorf("predicted_n %d, tokens_predicted %d, want %d", tm.PredictedN, final.TokensPredicted, tc.nPredict)
			}
			if tm.CacheN != final.TokensCached || tm.PromptN != final.TokensEvaluated-tm.CacheN || tm.PromptN < 1 {
				t.Errorf("prompt_n %d, cache_n %d: want the %d prompt tokens less the %d cached", tm.PromptN, tm.CacheN, final.TokensEvaluated, final.TokensCached)
			}
			if tc.wantCache && tm.CacheN < final.TokensEvaluated/2 {
				t.Errorf("cache_n %d of %d prompt tokens sent again", tm.CacheN, final.TokensEvaluated)
			}
			// 2 µs a token is far below a forward pass of stories260K and far above what a reader
			// of an already finished stream measured.
			if tm.PromptMS <= 0 || tm.PredictedMS < 0.002*float64(tc.nPredict-1) || tm.PromptMS+tm.PredictedMS > wall {
				t.Errorf("prompt_ms %.4f, predicted_ms %.4f in a request of %.3f ms", tm.PromptMS, tm.PredictedMS, wall)
			}
			perTok, perSec := tm.PredictedMS/float64(tm.PredictedN), float64(tm.PredictedN)/tm.PredictedMS*1000
			if math.Abs(tm.PredictedPerTokenMS-perTok) > 1e-9*perTok || math.Abs(tm.PredictedPerSecond-perSec) > 1e-6*perSec {
				t.Errorf("predicted per token %g, per second %g; want %g, %g", tm.PredictedPerTokenMS, tm.PredictedPerSecond, perTok, perSec)
			}
			t.Logf("%+v in %.3f ms", *tm, wall)
		})
	}
}

// llamaFinalOf posts a /completion and returns its summary object: the reply, or the last event
// of a stream.
func llamaFinalOf(t *testing.T, e *servertest.Env, body map[string]any) llamaCompletion {
	t.Helper()
	var res llamaCompletion
	if body["stream"] != true {
		e.PostJSON("/completion", body, http.StatusOK, &res)
		return res
	}
	resp := e.Post(context.Background(), "/completion", body)
	defer resp.Body.Close()
	events := servertest.SSEEvents(t, resp.Body)
	if len(events) == 0 {
		t.Fatal("no events")
	}
	if err := json.Unmarshal([]byte(events[len(events)-1]), &res); err != nil {
		t.Fatal(err)
	}
	return res
}
