package jsonschema

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"ubatch/grammar"
)

// Issue 19's hostile schemas, built here rather than stored.

func enumSchema(n int) string {
	var sb strings.Builder
	sb.WriteString(`{"enum": [`)
	for i := range n {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprint(&sb, i)
	}
	return sb.String() + "]}"
}

func anyOfSchema(n int) string {
	return `{"anyOf": [` + strings.TrimSuffix(strings.Repeat(`{"const": 1},`, n), ",") + `]}`
}

func longKeySchema(n int) string {
	return `{"type": "object", "properties": {"` + strings.Repeat("k", n) + `": {}}, "additionalProperties": true}`
}

// cjkSchema has n property names of CJK characters only: their rule names all sanitize to the
// same base.
func cjkSchema(n int) string {
	var sb strings.Builder
	sb.WriteString(`{"type": "object", "properties": {`)
	for i := range n {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `"%c%c%c%c": {}`, '一'+rune(i%20000), '名', '前', '一'+rune(i/20000))
	}
	return sb.String() + "}}"
}

// compileSchema converts and compiles schema as a server does.
func compileSchema(schema string) (string, *grammar.Grammar, error) {
	src, err := Convert(context.Background(), []byte(schema), grammar.Limits{})
	if err != nil {
		return "", nil, err
	}
	g, err := grammar.Compile(context.Background(), src, grammar.Limits{})
	return src, g, err
}

func TestSchemaLimits(t *testing.T) {
	tests := []struct {
		name, schema string
		limit        string
	}{
		{name: "enum of 70000", schema: enumSchema(70000), limit: grammar.LimitAlternatives},
		{name: "anyOf of 70000", schema: anyOfSchema(70000), limit: grammar.LimitRules},
		{name: "32000-character key", schema: longKeySchema(32000), limit: grammar.LimitBytes},
		{name: "16k CJK keys", schema: cjkSchema(16000), limit: grammar.LimitRules},
		{name: "huge schema", schema: `{"description": "` + strings.Repeat("x", grammar.DefaultMaxBytes) + `"}`, limit: grammar.LimitBytes},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := compileSchema(tt.schema)
			var le *grammar.LimitError
			if !errors.As(err, &le) || le.Limit != tt.limit || le.Got <= le.Max {
				t.Fatalf("got %v, want a LimitError of %s", err, tt.limit)
			}
		})
	}
}

func TestSchemaCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// Cancellation is checked every 256 visits: a schema of many sub-schemas meets it.
	if _, err := Convert(ctx, []byte(anyOfSchema(1000)), grammar.Limits{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
}

// TestSchemaLinear checks that the grammar grows linearly with the schema where it used to grow
// quadratically: one long key with additionalProperties, and many keys whose names clash.
func TestSchemaLinear(t *testing.T) {
	tests := []struct {
		name   string
		schema func(n int) string
		n      int
		keys   []string // a key that must be accepted, then one that must not
	}{
		{name: "long key", schema: longKeySchema, n: 4000},
		{name: "CJK keys", schema: cjkSchema, n: 3000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			small, _, err := compileSchema(tt.schema(tt.n / 4))
			if err != nil {
				t.Fatal(err)
			}
			big, g, err := compileSchema(tt.schema(tt.n))
			if err != nil {
				t.Fatal(err)
			}
			// Four times the input: about four times the output (quadratic would be sixteen).
			if ratio := float64(len(big)) / float64(len(small)); ratio > 5 {
				t.Fatalf("output grew %.1f times for 4 times the input (%d -> %d bytes)", ratio, len(small), len(big))
			}
			if bound := sizeBound(len(tt.schema(tt.n))); len(big) > bound {
				t.Fatalf("%d bytes of grammar for %d of schema, beyond %d", len(big), len(tt.schema(tt.n)), bound)
			}
			if !accepts(g, `{}`) {
				t.Fatal("rejects {}")
			}
		})
	}
}

// sizeBound is the most grammar a schema of n bytes may give: the primitives, and per byte of
// schema at most a rule (a character of a key excluded from additionalProperties' names).
func sizeBound(n int) int { return 256*n + 16384 }

// FuzzSchemaSize checks that conversion is linear: the grammar of any schema is at most
// sizeBound of its size, or the conversion fails (with a LimitError when it is too big).
func FuzzSchemaSize(f *testing.F) {
	for _, tc := range schemaCases {
		f.Add(tc.schema)
	}
	for _, s := range []string{enumSchema(300), anyOfSchema(300), longKeySchema(1500), cjkSchema(100),
		`{"type": "string", "pattern": "^[a-z]{1000}$"}`, `{"type": "string", "pattern": "(.{1000}){1000}"}`,
		`{"properties": {"a/b/c": {"properties": {"~": {}}}}, "additionalProperties": {"items": {"anyOf": [{}, {"const": "x"}]}}}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, schema string) {
		if len(schema) > 20000 {
			return
		}
		src, err := Grammar([]byte(schema))
		if err != nil {
			return
		}
		if len(src) > sizeBound(len(schema)) {
			t.Fatalf("%d bytes of schema gave %d bytes of grammar", len(schema), len(src))
		}
	})
}
