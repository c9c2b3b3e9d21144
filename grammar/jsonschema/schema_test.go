package jsonschema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	validator "github.com/santhosh-tekuri/jsonschema/v6"

	"ubatch/grammar"
)

// compileBoth returns the grammar for schema and an independent validator of it.
func compileBoth(t testing.TB, schema string) (*grammar.Grammar, *validator.Schema) {
	t.Helper()
	src, err := Grammar([]byte(schema))
	if err != nil {
		t.Fatalf("Grammar: %v", err)
	}
	g, err := grammar.Parse(src)
	if err != nil {
		t.Fatalf("grammar.Parse: %v\n%s", err, src)
	}
	doc, err := validator.UnmarshalJSON(strings.NewReader(schema))
	if err != nil {
		t.Fatal(err)
	}
	c := validator.NewCompiler()
	c.AssertFormat()
	if err := c.AddResource("schema.json", doc); err != nil {
		t.Fatal(err)
	}
	v, err := c.Compile("schema.json")
	if err != nil {
		t.Fatalf("validator: %v", err)
	}
	return g, v
}

// valid reports whether text is one JSON value that validates against v.
func valid(v *validator.Schema, text string) error {
	dec := json.NewDecoder(strings.NewReader(text))
	dec.UseNumber()
	var x any
	if err := dec.Decode(&x); err != nil {
		return fmt.Errorf("not JSON: %v", err)
	}
	if dec.More() {
		return fmt.Errorf("more than one JSON value")
	}
	inst, err := validator.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		return err
	}
	return v.Validate(inst)
}

func accepts(g *grammar.Grammar, s string) bool {
	m := grammar.NewMatcher(g, nil)
	return m.AcceptBytes([]byte(s)) == nil && m.Complete()
}

// byteVocab has one token per byte value (token b+1 is byte b) and an end token 0, so a
// token walk is a byte walk.
func byteVocab(t testing.TB) *grammar.Vocab {
	pieces := [][]byte{nil}
	for b := range 256 {
		pieces = append(pieces, []byte{byte(b)})
	}
	v, err := grammar.NewVocab(pieces, []int32{0})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// walk picks random allowed bytes (ASCII more often, so strings stay readable) until the end
// token is picked or maxLen bytes; it returns the text and whether it ended.
func walk(g *grammar.Grammar, v *grammar.Vocab, rng *rand.Rand, maxLen int) (string, bool) {
	m := grammar.NewMatcher(g, v)
	var out []byte
	for len(out) < maxLen {
		mask := m.Mask()
		var allowed []int32
		for tok := range int32(v.Size()) {
			if mask[tok>>6]&(1<<(tok&63)) != 0 {
				allowed = append(allowed, tok)
			}
		}
		if len(allowed) == 0 {
			return string(out), false
		}
		tok := allowed[rng.IntN(len(allowed))]
		if m.Complete() && rng.IntN(3) == 0 {
			tok = 0
		}
		if tok > 128 && rng.IntN(4) != 0 { // favour ASCII, keep some multi-byte characters
			tok = allowed[rng.IntN(len(allowed))]
		}
		if err := m.AcceptToken(tok); err != nil {
			panic(err)
		}
		if tok == 0 {
			return string(out), true
		}
		out = append(out, byte(tok-1))
	}
	return string(out), false
}

type schemaCase struct {
	name   string
	schema string
	good   []string // valid instances the grammar must accept
	bad    []string // instances the grammar must reject (invalid, or outside its subset)
}

var schemaCases = []schemaCase{
	{name: "string", schema: `{"type": "string"}`, good: []string{`"hi"`, `"a\"\\\u00e9\n"`, `""`}, bad: []string{`hi`, `"\ud800"`, `1`}},
	{name: "bounded string", schema: `{"type": "string", "minLength": 2, "maxLength": 3}`,
		good: []string{`"ab"`, `"abc"`, `"é日"`}, bad: []string{`"a"`, `"abcd"`}},
	{name: "integer", schema: `{"type": "integer"}`, good: []string{`0`, `-12`, `1234567890123456`}, bad: []string{`01`, `1.5`, `12345678901234567`}},
	{name: "integer range", schema: `{"type": "integer", "minimum": -5, "exclusiveMaximum": 120}`,
		good: []string{`-5`, `0`, `119`, `7`}, bad: []string{`-6`, `120`, `-0`}},
	{name: "number", schema: `{"type": "number"}`, good: []string{`1.5`, `-0.25e-10`, `3E+2`}, bad: []string{`.5`, `1.`, `1e999`}},
	{name: "boolean or null", schema: `{"type": ["boolean", "null"]}`, good: []string{`true`, `null`}, bad: []string{`0`}},
	{name: "enum", schema: `{"enum": ["red", "green", 3, null, {"a": [1]}]}`,
		good: []string{`"red"`, `3`, `null`, `{"a":[1]}`}, bad: []string{`"blue"`, `{"a": [1]}`}},
	{name: "enum with type", schema: `{"type": "string", "enum": ["a", 1]}`, good: []string{`"a"`}, bad: []string{`1`}},
	{name: "const", schema: `{"const": "x<y"}`, good: []string{`"x<y"`}, bad: []string{`"x"`}},
	{name: "formats", schema: `{"type": "array", "items": {"anyOf": [{"type": "string", "format": "date"}, {"type": "string", "format": "uuid"}, {"type": "string", "format": "date-time"}]}}`,
		good: []string{`["2024-02-29", "123e4567-e89b-12d3-a456-426614174000", "2024-01-01T12:30:00Z"]`}, bad: []string{`["2024-13-01"]`}},
	{name: "array bounds", schema: `{"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3}`,
		good: []string{`[1]`, `[1, 2, 3]`}, bad: []string{`[]`, `[1,2,3,4]`, `["a"]`}},
	{name: "array exact", schema: `{"type": "array", "minItems": 2, "maxItems": 2}`, good: []string{`[1, "a"]`}, bad: []string{`[1]`}},
	{name: "no items", schema: `{"type": "array", "items": false}`, good: []string{`[]`}, bad: []string{`[1]`}},
	{name: "object", schema: `{"type": "object", "properties": {"name": {"type": "string", "maxLength": 10}, "age": {"type": "integer", "minimum": 0, "maximum": 150}, "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3}}, "required": ["name", "age"], "additionalProperties": false}`,
		good: []string{`{"name": "Ann", "age": 31}`, `{"name":"B","age":0,"tags":["x"]}`}, bad: []string{`{"age": 31, "name": "Ann"}`, `{"name": "Ann"}`, `{"name": "Ann", "age": 200}`, `{"name": "Ann", "age": 1, "x": 1}`}},
	{name: "all optional", schema: `{"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "boolean"}, "c": {"type": "null"}}}`,
		good: []string{`{}`, `{"b": true}`, `{"a": 1, "c": null}`, `{"a":1,"b":false,"c":null}`}, bad: []string{`{"b": true, "a": 1}`, `{"d": 1}`}},
	{name: "additional schema", schema: `{"type": "object", "properties": {"id": {"type": "integer"}}, "additionalProperties": {"type": "string"}}`,
		good: []string{`{"id": 1, "x": "y"}`, `{"ix": "a", "i": "b"}`, `{}`}, bad: []string{`{"id": "s"}`, `{"x": 1}`, `{"id": 1, "id": 2}`}},
	{name: "required unlisted", schema: `{"required": ["n"], "additionalProperties": {"type": "integer"}}`,
		good: []string{`{"n": 3}`}, bad: []string{`{"n": "x"}`, `{}`}},
	{name: "any object", schema: `{"type": "object", "additionalProperties": true}`,
		good: []string{`{"a": [1, {"b": null}], "c": "d"}`}, bad: []string{`[]`}},
	{name: "anyOf", schema: `{"anyOf": [{"type": "string"}, {"type": "object", "properties": {"k": {"const": 1}}, "required": ["k"]}]}`,
		good: []string{`"s"`, `{"k": 1}`}, bad: []string{`{"k": 2}`, `1`}},
	{name: "refs", schema: `{"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"}, "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}}, "required": ["v", "next"], "additionalProperties": false}}, "$ref": "#/$defs/node"}`,
		good: []string{`{"v": 1, "next": {"v": 2, "next": null}}`}, bad: []string{`{"v": 1}`}},
	{name: "definitions and root ref", schema: `{"definitions": {"leaf": {"type": "boolean"}}, "type": "array", "items": {"anyOf": [{"$ref": "#/definitions/leaf"}, {"$ref": "#"}]}, "maxItems": 2}`,
		good: []string{`[true, [false, []]]`}, bad: []string{`[1]`}},
	{name: "allOf one", schema: `{"allOf": [{"type": "integer", "maximum": 3}], "description": "x"}`, good: []string{`3`}, bad: []string{`4`}},
	{name: "anchored pattern", schema: `{"type": "string", "pattern": "^[A-Z]{2}-\\d{3}(x|yz)?$"}`,
		good: []string{`"AB-123"`, `"QQ-000yz"`}, bad: []string{`"ab-123"`, `"AB-1234"`, `" AB-123"`}},
	{name: "unanchored pattern", schema: `{"type": "string", "pattern": "a\"b|\\\\c"}`,
		good: []string{`"xa\"by"`, `"\\c"`, `"zz\\c"`}, bad: []string{`"ab"`, `"c"`}},
	{name: "pattern classes", schema: `{"type": "array", "items": {"type": "string", "pattern": "^[^a-y]+\\s.$"}}`,
		good: []string{`["Z1 q"]`, `["é\\ \""]`}, bad: []string{`["a q"]`}},
	{name: "case-insensitive pattern", schema: `{"type": "string", "pattern": "^(?i)ok$"}`,
		good: []string{`"ok"`, `"OK"`, `"oK"`}, bad: []string{`"ox"`}},
	{name: "pattern star of nullable", schema: `{"type": "string", "pattern": "^(a|)*b$"}`,
		good: []string{`"b"`, `"aab"`}, bad: []string{`"ba"`}},
	{name: "empty", schema: `{}`, good: []string{`{"a": [1, "b", null, true]}`, `"x"`, `1.5`}},
	{name: "true", schema: `true`, good: []string{`[]`}},
	{name: "whitespace", schema: `{"type": "array", "items": {"type": "integer"}}`,
		good: []string{"[\n  1,\n  2\n]", `[ 1 , 2 ]`}, bad: []string{"[  1]", "[\n" + strings.Repeat(" ", 21) + "1]"}},
}

func TestSchemas(t *testing.T) {
	bv := byteVocab(t)
	for _, tc := range schemaCases {
		t.Run(tc.name, func(t *testing.T) {
			g, v := compileBoth(t, tc.schema)
			for _, s := range tc.good {
				if err := valid(v, s); err != nil {
					t.Fatalf("good example %s is invalid: %v", s, err)
				}
				if !accepts(g, s) {
					t.Errorf("grammar rejects %s", s)
				}
			}
			for _, s := range tc.bad {
				if accepts(g, s) {
					t.Errorf("grammar accepts %s", s)
				}
			}
			rng := rand.New(rand.NewPCG(11, uint64(len(tc.name))))
			ended := 0
			for range 150 {
				s, ok := walk(g, bv, rng, 300)
				if !ok {
					continue
				}
				ended++
				if err := valid(v, s); err != nil {
					t.Fatalf("the grammar produced %q, which does not validate: %v", s, err)
				}
			}
			if ended < 10 {
				t.Fatalf("only %d of 150 walks ended", ended)
			}
		})
	}
}

func TestObjectGrammar(t *testing.T) {
	g, err := grammar.Parse(ObjectGrammar())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{`{}`, `{"a": {"b": [1, 2.5, "x", null, false]}}`} {
		if !accepts(g, s) {
			t.Errorf("rejects %s", s)
		}
	}
	for _, s := range []string{`[]`, `"x"`, `{"a"}`} {
		if accepts(g, s) {
			t.Errorf("accepts %s", s)
		}
	}
}

func TestSchemaErrors(t *testing.T) {
	tests := []struct{ name, schema, want string }{
		{name: "not json", schema: `{`, want: "not valid JSON"},
		{name: "trailing", schema: `{} {}`, want: "unexpected data"},
		{name: "false", schema: `false`, want: "accepts no value"},
		{name: "not a schema", schema: `3`, want: "must be an object or a boolean"},
		{name: "pattern lookahead", schema: `{"type": "string", "pattern": "^(?=a)"}`, want: `pattern "^(?=a)"`},
		{name: "pattern backreference", schema: `{"type": "string", "pattern": "(a)\\1"}`, want: "pattern"},
		{name: "pattern inner anchor", schema: `{"type": "string", "pattern": "a^b"}`, want: "anchor inside"},
		{name: "pattern and length", schema: `{"type": "string", "pattern": "a", "maxLength": 3}`, want: "cannot be combined"},
		{name: "nested unsupported", schema: `{"properties": {"x": {"uniqueItems": true}}}`, want: `at #/properties/x: keyword "uniqueItems"`},
		{name: "unknown type", schema: `{"type": "text"}`, want: `unknown type "text"`},
		{name: "remote ref", schema: `{"$ref": "http://x/y.json"}`, want: "only references inside the schema"},
		{name: "dangling ref", schema: `{"$ref": "#/$defs/none"}`, want: "does not resolve"},
		{name: "ref siblings", schema: `{"$ref": "#", "type": "object"}`, want: "cannot be combined"},
		{name: "left recursive ref", schema: `{"anyOf": [{"$ref": "#"}, {"type": "null"}]}`, want: ""},
		{name: "bad bound", schema: `{"type": "string", "maxLength": -1}`, want: "non-negative integer"},
		{name: "huge bound", schema: `{"type": "array", "maxItems": 100000}`, want: "above the supported"},
		{name: "crossed bounds", schema: `{"type": "array", "minItems": 3, "maxItems": 2}`, want: "below minItems"},
		{name: "empty range", schema: `{"type": "integer", "minimum": 5, "maximum": 4}`, want: "no integer"},
		{name: "number range", schema: `{"type": "number", "minimum": 0}`, want: "integers only"},
		{name: "empty enum", schema: `{"enum": []}`, want: "enum has no value"},
		{name: "required but forbidden", schema: `{"required": ["0"], "additionalProperties": false}`, want: `required property "0" is not in properties`},
		{name: "allOf two", schema: `{"allOf": [{}, {}]}`, want: "exactly one"},
		{name: "deep", schema: strings.Repeat(`{"items":`, 70) + `{}` + strings.Repeat(`}`, 70), want: "deeper than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src, err := Grammar([]byte(tt.schema))
			if tt.want == "" {
				// A schema whose grammar is left-recursive converts, and the grammar compiler
				// then refuses it with its own error.
				if err == nil {
					_, err = grammar.Parse(src)
				}
				if err == nil || !strings.Contains(err.Error(), "left-recursive") {
					t.Fatalf("got %v, want a left-recursion error", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// TestIntRange compares every integer range grammar with arithmetic over a window of values.
func TestIntRange(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	p := func(v int64) *int64 { return &v }
	cases := [][2]*int64{{nil, nil}, {p(0), nil}, {nil, p(0)}, {p(-1), nil}, {nil, p(-1)}, {p(7), p(7)}, {p(0), p(0)}, {p(-10), p(-10)}}
	for range 40 {
		a, b := rng.Int64N(2500)-1200, rng.Int64N(2500)-1200
		cases = append(cases, [2]*int64{p(min(a, b)), p(max(a, b))})
		cases = append(cases, [2]*int64{p(a), nil}, [2]*int64{nil, p(b)})
	}
	for _, c := range cases {
		lo, hi := c[0], c[1]
		expr := intRange(lo, hi)
		g, err := grammar.Parse("root ::= " + expr)
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		for v := int64(-1500); v <= 1500; v++ {
			want := (lo == nil || v >= *lo) && (hi == nil || v <= *hi)
			if got := accepts(g, strconv.FormatInt(v, 10)); got != want {
				t.Fatalf("range [%v, %v] (%s): %d accepted %v, want %v", deref(lo), deref(hi), expr, v, got, want)
			}
		}
		for _, s := range []string{"-0", "01", "00", "-01", ""} {
			if accepts(g, s) {
				t.Fatalf("range %s accepts %q", expr, s)
			}
		}
	}
}

func deref(p *int64) any {
	if p == nil {
		return "open"
	}
	return *p
}

// FuzzSchema converts arbitrary schema text: it must fail cleanly or give a grammar that
// compiles or is refused with an error, never a panic; a compiled grammar's walks must validate.
func FuzzSchema(f *testing.F) {
	for _, tc := range schemaCases {
		f.Add(tc.schema)
	}
	bv := byteVocab(f)
	f.Fuzz(func(t *testing.T, schema string) {
		if len(schema) > 4000 {
			return
		}
		src, err := Grammar([]byte(schema))
		if err != nil {
			return
		}
		g, err := grammar.Parse(src)
		if err != nil {
			var le *grammar.LimitError
			if !strings.Contains(err.Error(), "left-recursive") && !strings.Contains(err.Error(), "never finish") && !errors.As(err, &le) {
				t.Fatalf("the converter wrote a grammar that does not compile: %v\n%s", err, src)
			}
			return
		}
		doc, err := validator.UnmarshalJSON(bytes.NewReader([]byte(schema)))
		if err != nil {
			return
		}
		c := validator.NewCompiler()
		if c.AddResource("s.json", doc) != nil {
			return
		}
		v, err := c.Compile("s.json")
		if err != nil {
			return // the validator refuses schemas we accept (e.g. invalid keyword values)
		}
		rng := rand.New(rand.NewPCG(uint64(len(schema)), 3))
		for range 5 {
			if s, ok := walk(g, bv, rng, 200); ok {
				if err := valid(v, s); err != nil {
					t.Fatalf("produced %q, invalid: %v\nschema %s\ngrammar:\n%s", s, err, schema, src)
				}
			}
		}
	})
}
