package server

import (
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"

	validator "github.com/santhosh-tekuri/jsonschema/v6"
)

// personSchema bounds every string, number and list, so that a complete object always fits the
// token budget and the grammar must end the output.
const personSchema = `{
  "type": "object",
  "properties": {
    "name": {"type": "string", "minLength": 1, "maxLength": 12},
    "age": {"type": "integer", "minimum": 1, "maximum": 99},
    "pet": {"enum": ["cat", "dog", "bird"]},
    "happy": {"type": "boolean"},
    "friends": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 3}
  },
  "required": ["name", "age", "pet", "happy"],
  "additionalProperties": false
}`

// schemaValidator compiles schema with an independent JSON Schema implementation.
func schemaValidator(t *testing.T, schema string) *validator.Schema {
	t.Helper()
	doc, err := validator.UnmarshalJSON(strings.NewReader(schema))
	if err != nil {
		t.Fatal(err)
	}
	c := validator.NewCompiler()
	if err := c.AddResource("schema.json", doc); err != nil {
		t.Fatal(err)
	}
	v, err := c.Compile("schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func checkAgainst(t *testing.T, v *validator.Schema, text string) {
	t.Helper()
	inst, err := validator.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		t.Fatalf("output %q is not JSON: %v", text, err)
	}
	if err := v.Validate(inst); err != nil {
		t.Fatalf("output %q does not validate: %v", text, err)
	}
}

func TestResponseFormatJSONSchema(t *testing.T) {
	e := newEnv(t, envOptions{})
	v := schemaValidator(t, personSchema)
	msgs := []map[string]any{{"role": "user", "content": "Describe a person as JSON."}}
	format := map[string]any{"type": "json_schema", "json_schema": map[string]any{
		"name": "person", "strict": true, "schema": json.RawMessage(personSchema)}}
	t.Run("greedy", func(t *testing.T) {
		var res chatResult
		e.PostJSON("/v1/chat/completions", map[string]any{"messages": msgs, "response_format": format,
			"temperature": 0, "max_tokens": 400}, http.StatusOK, &res)
		c := res.Choices[0]
		if c.FinishReason != "stop" {
			t.Fatalf("finish %q for %q: the grammar should have ended the output", c.FinishReason, c.Message.Content)
		}
		t.Logf("greedy: %s", c.Message.Content)
		checkAgainst(t, v, c.Message.Content)
	})
	t.Run("sampled", func(t *testing.T) {
		var res chatResult
		e.PostJSON("/v1/chat/completions", map[string]any{"messages": msgs, "response_format": format,
			"temperature": 1.2, "seed": 7, "n": 4, "max_tokens": 400}, http.StatusOK, &res)
		for _, c := range res.Choices {
			if c.FinishReason != "stop" {
				t.Fatalf("choice %d: finish %q for %q", c.Index, c.FinishReason, c.Message.Content)
			}
			t.Logf("sampled: %s", c.Message.Content)
			checkAgainst(t, v, c.Message.Content)
		}
	})
	t.Run("streamed", func(t *testing.T) {
		resp := e.Post(context.Background(), "/v1/chat/completions", map[string]any{"messages": msgs,
			"response_format": format, "temperature": 0.8, "seed": 3, "max_tokens": 400, "stream": true})
		defer resp.Body.Close()
		var text strings.Builder
		for _, ev := range sseEvents(t, resp.Body) {
			if ev == "[DONE]" {
				continue
			}
			var ch struct {
				Choices []struct {
					Delta chatDelta `json:"delta"`
				} `json:"choices"`
			}
			if err := json.Unmarshal([]byte(ev), &ch); err != nil {
				t.Fatalf("chunk %q: %v", ev, err)
			}
			for _, c := range ch.Choices {
				if c.Delta.Content != nil {
					text.WriteString(*c.Delta.Content)
				}
			}
		}
		checkAgainst(t, v, text.String())
	})
	t.Run("json_object", func(t *testing.T) {
		var res chatResult
		e.PostJSON("/v1/chat/completions", map[string]any{"messages": msgs, "temperature": 0, "max_tokens": 60,
			"response_format": map[string]any{"type": "json_object"}}, http.StatusOK, &res)
		out := res.Choices[0].Message.Content
		if !strings.HasPrefix(out, "{") {
			t.Fatalf("json_object output %q does not start an object", out)
		}
		if res.Choices[0].FinishReason == "stop" && !json.Valid([]byte(out)) {
			t.Fatalf("finished json_object output %q is not JSON", out)
		}
	})
	t.Run("text", func(t *testing.T) {
		var res chatResult
		e.PostJSON("/v1/chat/completions", map[string]any{"messages": msgs, "temperature": 0, "max_tokens": 5,
			"response_format": map[string]any{"type": "text"}}, http.StatusOK, &res)
		if res.Choices[0].Message.Content == "" {
			t.Fatal("no text")
		}
	})
}

func TestGrammarField(t *testing.T) {
	e := newEnv(t, envOptions{})
	prompt, _ := referenceGreedy(t)
	t.Run("llama.cpp completion", func(t *testing.T) {
		// The model's own continuation ("...there was a little girl named Lily") is outside this
		// grammar, so every token goes through the mask.
		var res llamaCompletion
		e.PostJSON("/completion", map[string]any{"prompt": prompt, "n_predict": 100, "temperature": 0,
			"grammar": "root ::= \" \" (\"yes\" | \"no\") \", \" [a-z]{2,8} \".\""}, http.StatusOK, &res)
		if !regexp.MustCompile(`^ (yes|no), [a-z]{2,8}\.$`).MatchString(res.Content) || res.StopType != "eos" {
			t.Fatalf("content %q, stop %q", res.Content, res.StopType)
		}
	})
	t.Run("completions json_schema", func(t *testing.T) {
		schema := `{"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9}, "minItems": 2, "maxItems": 4}`
		res := e.Complete(map[string]any{"prompt": prompt, "max_tokens": 100, "temperature": 0,
			"json_schema": json.RawMessage(schema)})
		c := res.Choices[0]
		if c.FinishReason != "stop" {
			t.Fatalf("finish %q for %q", c.FinishReason, c.Text)
		}
		checkAgainst(t, schemaValidator(t, schema), c.Text)
	})
	t.Run("streamed completions", func(t *testing.T) {
		text, finish, _ := e.streamCompletion(map[string]any{"prompt": prompt, "max_tokens": 100, "temperature": 1,
			"seed": 5, "grammar": `root ::= " " [A-Z] [a-z]+ ("-" [a-z]+)? "!"`})
		if !regexp.MustCompile(`^ [A-Z][a-z]+(-[a-z]+)?!$`).MatchString(text) || finish != "stop" {
			t.Fatalf("text %q, finish %q", text, finish)
		}
	})
}

func TestConstraintErrors(t *testing.T) {
	e := newEnv(t, envOptions{})
	msgs := []map[string]any{{"role": "user", "content": "hi"}}
	tests := []struct {
		name, path string
		body       map[string]any
		field      string
		want       string
	}{
		{name: "bad grammar", path: "/completion", body: map[string]any{"prompt": "a", "grammar": "root ::= [a-"},
			field: "grammar", want: "unterminated character class"},
		{name: "no root", path: "/v1/completions", body: map[string]any{"prompt": "a", "grammar": `start ::= "x"`},
			field: "grammar", want: "no rule named root"},
		{name: "left recursion", path: "/v1/chat/completions", body: map[string]any{"messages": msgs, "grammar": `root ::= root "a" | "a"`},
			field: "grammar", want: "left-recursive"},
		{name: "bad schema", path: "/completion", body: map[string]any{"prompt": "a", "json_schema": map[string]any{"type": "text"}},
			field: "json_schema", want: `unknown type "text"`},
		{name: "unsupported keyword", path: "/v1/completions", body: map[string]any{"prompt": "a", "json_schema": map[string]any{"type": "array", "uniqueItems": true}},
			field: "json_schema", want: `"uniqueItems" is not supported`},
		{name: "both", path: "/completion", body: map[string]any{"prompt": "a", "grammar": `root ::= "a"`, "json_schema": map[string]any{}},
			field: "json_schema", want: "cannot be used together"},
		{name: "format and grammar", path: "/v1/chat/completions", body: map[string]any{"messages": msgs, "grammar": `root ::= "a"`, "response_format": map[string]any{"type": "json_object"}},
			field: "response_format", want: "cannot be used together"},
		{name: "format type", path: "/v1/chat/completions", body: map[string]any{"messages": msgs, "response_format": map[string]any{"type": "xml"}},
			field: "response_format", want: `"xml" is not supported`},
		{name: "format without schema", path: "/v1/chat/completions", body: map[string]any{"messages": msgs, "response_format": map[string]any{"type": "json_schema"}},
			field: "response_format", want: "needs json_schema.schema"},
		{name: "format bad schema", path: "/v1/chat/completions", body: map[string]any{"messages": msgs,
			"response_format": map[string]any{"type": "json_schema", "json_schema": map[string]any{"schema": map[string]any{"minItems": "x"}}}},
			field: "response_format", want: "minItems must be a non-negative integer"},
		{name: "grammar not a string", path: "/completion", body: map[string]any{"prompt": "a", "grammar": 3},
			field: "grammar", want: "grammar"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e.CheckBadParam(t, tt.path, tt.body, tt.field, tt.want)
		})
	}
}
