package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"ubatch/grammar"
)

// TestConstraintLimits sends issue 19's hostile constraints: each is a 400 naming its field and
// the grammar limit it met, not a panic, an out-of-memory node or a long compilation.
func TestConstraintLimits(t *testing.T) {
	// Each body must meet the limit it names, not the compile time limit, which a loaded machine
	// under -race can reach first (2.04 s seen against the 2 s default).
	e := newEnv(t, envOptions{limits: RequestLimits{Grammar: grammar.Limits{MaxTime: time.Minute}}})
	msgs := []map[string]any{{"role": "user", "content": "hi"}}
	enum := make([]int, 70000)
	for i := range enum {
		enum[i] = i
	}
	consts := make([]map[string]any, 70000)
	for i := range consts {
		consts[i] = map[string]any{"const": 1}
	}
	longKey := map[string]any{"type": "object", "properties": map[string]any{strings.Repeat("k", 32000): map[string]any{}}, "additionalProperties": true}
	cjk := map[string]any{}
	for i := range 16000 {
		cjk[fmt.Sprintf("%c%c%c", '一'+rune(i), '名', '前')] = map[string]any{}
	}
	chain := "root ::= " + strings.Repeat(`("a"?){0,9000} `, 8) + `"b"`
	tests := []struct {
		name, path string
		body       map[string]any
		field      string // the param, or its prefix for tools
		want       string
	}{
		{name: "repetition", path: "/completion", body: map[string]any{"prompt": "x", "max_tokens": 5, "grammar": `root ::= ("a"?){0,70000} "b"`},
			field: "grammar", want: "70000 repetitions exceed the limit of 10000"},
		{name: "start parses", path: "/v1/completions", body: map[string]any{"prompt": "x", "grammar": chain},
			field: "grammar", want: "parses at the start exceed the limit of 65536"},
		{name: "enum", path: "/completion", body: map[string]any{"prompt": "x", "json_schema": map[string]any{"enum": enum}},
			field: "json_schema", want: "alternatives exceed the limit of 10000"},
		{name: "anyOf", path: "/v1/chat/completions", body: map[string]any{"messages": msgs,
			"response_format": map[string]any{"type": "json_schema", "json_schema": map[string]any{"schema": map[string]any{"anyOf": consts}}}},
			field: "response_format", want: "rules exceed the limit of 10000"},
		{name: "long key", path: "/v1/completions", body: map[string]any{"prompt": "x", "json_schema": longKey},
			field: "json_schema", want: "bytes exceed the limit of 1048576"},
		{name: "CJK keys", path: "/completion", body: map[string]any{"prompt": "x", "json_schema": map[string]any{"type": "object", "properties": cjk}},
			field: "json_schema", want: "rules exceed the limit of 10000"},
		{name: "tools", path: "/v1/chat/completions", body: map[string]any{"messages": msgs, "tool_choice": "required",
			"tools": []map[string]any{{"type": "function", "function": map[string]any{"name": "f", "parameters": map[string]any{"type": "object", "properties": map[string]any{"e": map[string]any{"enum": enum[:20000]}}}}}}},
			field: "tools", want: "exceed the limit of"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := e.Post(context.Background(), tt.path, tt.body)
			defer resp.Body.Close()
			d := checkError(t, resp, http.StatusBadRequest, "invalid_request_error")
			if d.Param == nil || !strings.HasPrefix(*d.Param, tt.field) || !strings.Contains(d.Message, tt.want) {
				t.Fatalf("error %.300s, want param %q and a message containing %q", d.Message, tt.field, tt.want)
			}
		})
	}
}

// TestConstrainStopsWithTheRequest: a constraint whose compilation would take long stops as soon
// as the request's context ends, on every field that compiles one.
func TestConstrainStopsWithTheRequest(t *testing.T) {
	e := newEnv(t, envOptions{})
	cjk := map[string]any{}
	for i := range 4000 {
		cjk[fmt.Sprintf("%c%c", '一'+rune(i), '名')] = map[string]any{"type": "integer"}
	}
	schema, _ := json.Marshal(map[string]any{"type": "object", "properties": cjk})
	tools, _ := json.Marshal([]map[string]any{{"type": "function", "function": map[string]any{"name": "f",
		"parameters": json.RawMessage(schema)}}})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name string
		run  func() error
	}{
		{"json_schema", func() error {
			return constrain(ctx, e.srv, SamplingFields{JSONSchema: schema})
		}},
		{"tools", func() error {
			_, _, err := e.srv.ChatParams(ctx, &ChatRequest{Messages: json.RawMessage(`[{"role":"user","content":"hi"}]`),
				Tools: tools, ToolChoice: json.RawMessage(`"required"`)})
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.run()
			if err == nil || !strings.Contains(err.Error(), context.Canceled.Error()) {
				t.Fatalf("a cancelled request's %s compiled anyway: err %v", tt.name, err)
			}
		})
	}
}

// TestRequestLimitsConfigured: the server's configured limits (serve's --grammar-*, --max-tools*
// flags) are the ones requests meet, not the defaults.
func TestRequestLimitsConfigured(t *testing.T) {
	e := newEnv(t, envOptions{limits: RequestLimits{Grammar: grammar.Limits{MaxRepetition: 50}, GrammarBudget: 1,
		MaxTools: 2, MaxToolsBytes: 64}})
	msgs := []map[string]any{{"role": "user", "content": "hi"}}
	tool := func(name string, params any) map[string]any {
		return map[string]any{"type": "function", "function": map[string]any{"name": name, "parameters": params}}
	}
	tests := []struct {
		name, path string
		body       map[string]any
		status     int
		param      string
		want       string // in the message
	}{
		{name: "repetition under the default, over the configured limit", path: "/v1/completions",
			body:   map[string]any{"prompt": "x", "max_tokens": 2, "grammar": `root ::= "a"{0,60}`},
			status: http.StatusBadRequest, param: "grammar", want: "60 repetitions exceed the limit of 50"},
		{name: "a mask over a budget of one unit", path: "/v1/completions",
			body:   map[string]any{"prompt": "x", "max_tokens": 2, "grammar": `root ::= [a-z]+`},
			status: http.StatusBadRequest, param: "grammar", want: "too expensive"},
		{name: "three tools", path: "/v1/chat/completions",
			body:   map[string]any{"messages": msgs, "tools": []any{tool("a", nil), tool("b", nil), tool("c", nil)}},
			status: http.StatusBadRequest, param: "tools", want: "at most 2"},
		{name: "parameters over 64 bytes", path: "/v1/chat/completions",
			body: map[string]any{"messages": msgs, "tools": []any{tool("a", map[string]any{"type": "object",
				"properties": map[string]any{"a_long_property_name": map[string]any{"type": "string", "description": "long"}}})}},
			status: http.StatusBadRequest, param: "tools", want: "exceed 64 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := e.Post(context.Background(), tt.path, tt.body)
			defer resp.Body.Close()
			d := checkError(t, resp, tt.status, "invalid_request_error")
			if d.Param == nil || *d.Param != tt.param || !strings.Contains(d.Message, tt.want) {
				t.Fatalf("error %+v; want one on %s saying %q", d, tt.param, tt.want)
			}
		})
	}
}

// TestCompileSlots: constraints compile at most compileSlots() at a time; a request waiting for
// a slot compiles once one is free, or gives up when its context ends.
func TestCompileSlots(t *testing.T) {
	e := newEnv(t, envOptions{})
	var held []func()
	for range compileSlots() {
		release, err := e.srv.compileSlot(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, release)
	}
	g := `root ::= "a"`
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := constrain(ctx, e.srv, SamplingFields{Grammar: &g}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("with every slot held, a constrained request got %v, want its context's end", err)
	}
	done := make(chan error, 1)
	go func() {
		done <- constrain(context.Background(), e.srv, SamplingFields{Grammar: &g})
	}()
	select {
	case err := <-done:
		t.Fatalf("compiled while every slot was held: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	held[0]()
	if err := <-done; err != nil {
		t.Fatalf("after a slot was freed: %v", err)
	}
	for _, release := range held[1:] {
		release()
	}
}

// constrain compiles f's constraint as a completion request does (Params, then Constrain).
func constrain(ctx context.Context, s *Server, f SamplingFields) error {
	v := s.cfg.Model.Vocab
	g, err := f.Params(s.Defaults(OpenAIDefaults()), v.EOG(), v.VocabSize())
	if err != nil {
		return err
	}
	return s.Constrain(ctx, &g, &f, nil)
}
