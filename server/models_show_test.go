package server

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestMultiShowUnloaded: /api/show on a front describes a model that is not loaded from its
// file (details, metadata, template, parameters) without loading it, as Ollama reads the file;
// once loaded, the model answers itself (with its engine's num_ctx); unknown names stay 404.
func TestMultiShowUnloaded(t *testing.T) {
	e := newMultiEnv(t, multiOptions{cfg: RegistryConfig{KeepAlive: -1}})
	type show struct {
		Parameters   string         `json:"parameters"`
		Template     string         `json:"template"`
		Details      ollamaDetails  `json:"details"`
		ModelInfo    map[string]any `json:"model_info"`
		Capabilities []string       `json:"capabilities"`
	}
	get := func(name string) show {
		t.Helper()
		code, _, body := e.do(t, "POST", "/api/show", `{"model":"`+name+`"}`)
		var s show
		if err := json.Unmarshal([]byte(body), &s); code != 200 || err != nil {
			t.Fatalf("show %s: %d %s", name, code, body)
		}
		return s
	}
	tests := []struct {
		name, model, family string
	}{
		{name: "by id", model: "beta", family: "llama"},
		{name: "by alias and tag", model: "Org/Alpha-GGUF:Q8_0", family: "qwen3"},
		{name: "by file name", model: "alpha-Q8_0:latest", family: "qwen3"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := get(tc.model)
			if s.Details.Family != tc.family || s.ModelInfo["general.architecture"] != tc.family || s.Template == "" ||
				!strings.Contains(s.Parameters, "temperature 0.8") || strings.Contains(s.Parameters, "num_ctx") ||
				len(s.Capabilities) == 0 || s.Capabilities[0] != "completion" {
				t.Errorf("show %s: %+v", tc.model, s)
			}
		})
	}
	if n := e.loads.Load(); n != 0 {
		t.Fatalf("%d loads: /api/show loaded a model", n)
	}
	if code, _, body := e.do(t, "POST", "/api/show", `{"model":"gamma"}`); code != 404 || !strings.Contains(body, `not found`) {
		t.Errorf("show unknown: %d %s", code, body)
	}
	if code, _, body := e.do(t, "POST", "/api/chat", chatBody("alpha", "")); code != 200 {
		t.Fatalf("chat: %d %s", code, body)
	}
	loaded, unloaded := get("alpha"), get("beta")
	if !strings.Contains(loaded.Parameters, "num_ctx 512") || loaded.Template != get("Org/Alpha-GGUF:Q8_0").Template ||
		strings.Contains(unloaded.Parameters, "num_ctx") || e.loads.Load() != 1 {
		t.Errorf("after alpha loaded: alpha %q, beta %q, %d loads", loaded.Parameters, unloaded.Parameters, e.loads.Load())
	}
}

// TestOllamaName: Ollama's listings name every model name:tag, and that name finds the model
// again, as do the bare name and any case.
func TestOllamaName(t *testing.T) {
	tests := []struct {
		name, id, want string
		asks           []string // names that must find the spec
	}{
		{name: "a file name", id: "stories260K.gguf", want: "stories260k:latest", asks: []string{"stories260k:latest", "Stories260K", "stories260K.gguf"}},
		{name: "a library name keeps its tag", id: "qwen3-0.6b:q4_k_m", want: "qwen3-0.6b:q4_k_m", asks: []string{"QWEN3-0.6B:Q4_K_M"}},
		{name: "a created name", id: "mine:latest", want: "mine:latest", asks: []string{"mine", "Mine:latest"}},
		{name: "an alias without a tag", id: "tiny", want: "tiny:latest", asks: []string{"tiny:latest", "tiny"}},
		{name: "a namespace", id: "local/tiny", want: "local/tiny:latest", asks: []string{"local/tiny:latest"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := ollamaName(tc.id); got != tc.want {
				t.Errorf("ollamaName(%q) = %q, want %q", tc.id, got, tc.want)
			}
			spec := ModelSpec{ID: tc.id, Path: "/m/" + tc.id}
			for _, a := range append(tc.asks, ollamaName(tc.id)) {
				if !spec.answersTo(a) {
					t.Errorf("%q does not find %q", a, tc.id)
				}
			}
			if spec.answersTo("other:latest") {
				t.Errorf("other:latest finds %q", tc.id)
			}
		})
	}
}
