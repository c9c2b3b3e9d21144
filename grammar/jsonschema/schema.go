// Package jsonschema converts a JSON Schema into a GBNF grammar (package grammar's input) whose
// every sentence is JSON that validates against the schema, as llama.cpp's
// json_schema_to_grammar does for llama-server's json_schema and response_format fields.
//
// Supported: type (one or a list): object, array, string, number, integer, boolean, null;
// properties, required, additionalProperties (false, true or a schema; absent means no other
// properties: the grammar may be stricter than the schema, never looser); items, minItems,
// maxItems; minLength, maxLength, pattern (RE2 syntax: no lookaround or backreferences; not
// with the length keywords), format date, time, date-time and uuid; enum, const; anyOf,
// oneOf (as anyOf: give disjoint branches), allOf with one branch; $ref to "#", "#/$defs/..."
// or "#/definitions/..." (recursion allowed); integer minimum, maximum, exclusiveMinimum,
// exclusiveMaximum. Annotations (title, description, default, examples, ...) are ignored.
// Keywords that would restrict values in a way the grammar does not express (multipleOf,
// uniqueItems, not, if, patternProperties, ...) are refused with an error naming them, so that the
// output never fails validation silently.
//
// The output's whitespace is bounded (one space, or a newline and up to 20 blanks, between
// tokens), integers and integral parts have at most 16 digits, fractions at most 16 and
// exponents at most 2, so that a model cannot loop forever inside a number or spacing.
package jsonschema

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"ubatch/grammar"
)

// Grammar is Convert with no deadline but the default limits.
func Grammar(schema []byte) (string, error) {
	return Convert(context.Background(), schema, grammar.Limits{})
}

// Convert converts a JSON Schema document to GBNF source whose root rule matches the JSON values
// the schema accepts (a subset of them, see the package comment). Its output is linear in the
// schema's size; lim's MaxBytes and MaxRules bound it (and MaxTime the conversion), so that
// conversion stops with a *grammar.LimitError as soon as the output could not compile within
// lim (zero fields: the defaults). It stops soon after ctx is done, with an error wrapping
// ctx.Err().
func Convert(ctx context.Context, schema []byte, lim grammar.Limits) (string, error) {
	l := newLimits(lim)
	if len(schema) > l.bytes {
		return "", &grammar.LimitError{Limit: grammar.LimitBytes, Max: l.bytes, Got: len(schema)}
	}
	doc, err := decode(schema)
	if err != nil {
		return "", fmt.Errorf("json schema: not valid JSON: %v", err)
	}
	c := &converter{ctx: ctx, lim: l, doc: doc, rules: map[string]string{}, next: map[string]int{}, refs: map[string]string{"#": "root"}}
	// root is reserved first: the document is "#", which recursive schemas may refer to.
	c.define("root", "")
	top, err := c.visit(doc, "json", "#")
	if err != nil {
		return "", err
	}
	if c.define("root", top); c.err != nil {
		return "", c.err
	}
	return c.String(), nil
}

// ObjectGrammar is the GBNF of any JSON object, for OpenAI's json_object mode.
func ObjectGrammar() string {
	g, err := Grammar([]byte(`{"type": "object", "additionalProperties": true}`))
	if err != nil {
		panic(err) // a fixed schema
	}
	return g
}

type converter struct {
	ctx   context.Context
	lim   limits
	doc   any
	rules map[string]string // name -> body
	order []string
	next  map[string]int    // base name -> the next number to try for a unique name
	refs  map[string]string // JSON pointer -> rule name
	size  int               // bytes of output so far
	ticks int
	err   error // the first limit met or the context's end; it ends the conversion
}

func (c *converter) String() string {
	var sb strings.Builder
	sb.Grow(c.size)
	names := slices.Clone(c.order)
	// root first, the rest in the order they were made
	slices.SortStableFunc(names, func(a, b string) int {
		switch {
		case a == "root" && b != "root":
			return -1
		case b == "root" && a != "root":
			return 1
		}
		return 0
	})
	for _, n := range names {
		sb.WriteString(n)
		sb.WriteString(" ::= ")
		sb.WriteString(c.rules[n])
		sb.WriteByte('\n')
	}
	return sb.String()
}

var nonName = regexp.MustCompile(`[^a-zA-Z0-9-]+`)

// primitives are the shared rules, added on first use.
var primitives = map[string]string{
	"space":            `| " " | "\n" [ \t]{0,20}`,
	"char":             `[^"\\\x7F\x00-\x1F] | [\\] (["\\/bfnrt] | "u" ([0-9a-cA-C] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2} | [e-fE-F] [0-9a-fA-F]{3}))`,
	"integral-part":    `[0] | [1-9] [0-9]{0,15}`,
	"decimal-part":     `[0-9]{1,16}`,
	"integer":          `"-"? integral-part space`,
	"number":           `"-"? integral-part ("." decimal-part)? ([eE] [-+]? [0-9]{1,2})? space`,
	"boolean":          `("true" | "false") space`,
	"null":             `"null" space`,
	"string":           `"\"" char* "\"" space`,
	"value":            `object | array | string | number | boolean | null`,
	"object":           `"{" space (string ":" space value ("," space string ":" space value)*)? "}" space`,
	"array":            `"[" space (value ("," space value)*)? "]" space`,
	"date":             `[0-9]{4} "-" ("0" [1-9] | "1" [0-2]) "-" ("0" [1-9] | [1-2] [0-9] | "3" [0-1])`,
	"time":             `([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9]{1,6})? ("Z" | [+-] ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9])`,
	"uuid":             `[0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12}`,
	"date-string":      `"\"" date "\"" space`,
	"time-string":      `"\"" time "\"" space`,
	"date-time-string": `"\"" date "T" time "\"" space`,
	"uuid-string":      `"\"" uuid "\"" space`,
	"plain-char":       `[^"\\\x7F\x00-\x1F]`,
}

var (
	primitiveDeps = regexp.MustCompile(`[a-z][a-z-]*`)
	quotedOrClass = regexp.MustCompile(`"(\\.|[^"\\])*"|\[(\\.|[^\]\\])*\]`)
)

// prim adds primitive name and the primitives it uses, and returns name.
func (c *converter) prim(name string) string {
	body, ok := primitives[name]
	if !ok {
		panic("jsonschema: no primitive " + name)
	}
	if _, done := c.rules[name]; done {
		return name
	}
	c.define(name, body)
	// Rule names in the body (outside literals and classes) are primitives too.
	stripped := quotedOrClass.ReplaceAllString(body, " ")
	for _, dep := range primitiveDeps.FindAllString(stripped, -1) {
		if _, ok := primitives[dep]; ok {
			c.prim(dep)
		}
	}
	return name
}

// Keywords by what the converter does with them.
var (
	annotations = setOf("$schema", "$id", "$comment", "$anchor", "title", "description", "default",
		"examples", "deprecated", "readOnly", "writeOnly", "contentMediaType", "contentEncoding",
		"$defs", "definitions", "strict", "name", "nullable", "discriminator", "x-order")
	unsupported = setOf("patternProperties", "multipleOf", "uniqueItems", "not", "if", "then",
		"else", "contains", "minContains", "maxContains", "prefixItems", "propertyNames",
		"minProperties", "maxProperties", "dependentRequired", "dependentSchemas", "dependencies",
		"unevaluatedProperties", "unevaluatedItems", "$dynamicRef", "$recursiveRef", "additionalItems")
	objectKeys = setOf("properties", "required", "additionalProperties")
	arrayKeys  = setOf("items", "minItems", "maxItems")
	stringKeys = setOf("minLength", "maxLength", "format", "pattern")
	intKeys    = setOf("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
	otherKeys  = setOf("type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref")
)

func setOf(keys ...string) map[string]bool {
	m := map[string]bool{}
	for _, k := range keys {
		m[k] = true
	}
	return m
}

// schemaError names where in the schema a problem is.
func schemaError(path, format string, args ...any) error {
	return fmt.Errorf("json schema at %s: %s", path, fmt.Sprintf(format, args...))
}

// visit returns the name of a rule matching the values schema s accepts, each followed by
// optional space. name suggests the rule's name; path is s's JSON pointer, for errors.
func (c *converter) visit(s any, name, path string) (string, error) {
	if err := c.tick(); err != nil {
		return "", err
	}
	name = clip(name, 4*maxName) // names are built from the parent's: keep them from growing
	if strings.Count(path, "/") > maxDepth {
		return "", schemaError(path, "nested deeper than %d levels", maxDepth)
	}
	switch t := s.(type) {
	case bool:
		if !t {
			return "", schemaError(path, "the schema false accepts no value")
		}
		return c.prim("value"), nil
	case *object:
		return c.visitObject(t, name, path)
	}
	return "", schemaError(path, "a schema must be an object or a boolean, got JSON %s", jsonType(s))
}

func (c *converter) visitObject(s *object, name, path string) (string, error) {
	for _, k := range s.keys {
		if unsupported[k] {
			return "", schemaError(path, "keyword %q is not supported", k)
		}
	}
	only := func(k string) error {
		for _, o := range s.keys {
			if o != k && (objectKeys[o] || arrayKeys[o] || stringKeys[o] || intKeys[o] || otherKeys[o]) {
				return schemaError(path, "%q cannot be combined with %q here; wrap them in allOf or move %q into each branch", k, o, o)
			}
		}
		return nil
	}
	if ref, ok := s.get("$ref"); ok {
		if err := only("$ref"); err != nil {
			return "", err
		}
		r, isStr := ref.(string)
		if !isStr {
			return "", schemaError(path, "$ref must be a string")
		}
		return c.visitRef(r, path)
	}
	if v, ok := s.get("const"); ok {
		if err := only("const"); err != nil {
			return "", err
		}
		var sb strings.Builder
		encode(&sb, v)
		c.prim("space")
		return c.add(name, literal(sb.String())+" space"), nil
	}
	if v, ok := s.get("enum"); ok {
		return c.visitEnum(s, v, name, path)
	}
	for _, k := range []string{"anyOf", "oneOf"} {
		if v, ok := s.get(k); ok {
			if err := only(k); err != nil {
				return "", err
			}
			list, isList := v.([]any)
			if !isList || len(list) == 0 {
				return "", schemaError(path, "%s must be a non-empty list of schemas", k)
			}
			var alts []string
			for i, sub := range list {
				r, err := c.visit(sub, fmt.Sprintf("%s-%d", name, i), fmt.Sprintf("%s/%s/%d", path, k, i))
				if err != nil {
					return "", err
				}
				alts = append(alts, r)
			}
			return c.add(name, strings.Join(alts, " | ")), nil
		}
	}
	if v, ok := s.get("allOf"); ok {
		if err := only("allOf"); err != nil {
			return "", err
		}
		list, isList := v.([]any)
		if !isList || len(list) != 1 {
			return "", schemaError(path, "allOf is supported with exactly one schema")
		}
		return c.visit(list[0], name, path+"/allOf/0")
	}
	types, err := c.types(s, path)
	if err != nil {
		return "", err
	}
	if len(types) == 1 {
		return c.visitType(s, types[0], name, path)
	}
	var alts []string
	for _, ty := range types {
		r, err := c.visitType(s, ty, name+"-"+ty, path)
		if err != nil {
			return "", err
		}
		alts = append(alts, r)
	}
	return c.add(name, strings.Join(alts, " | ")), nil
}

// types returns the schema's types: its "type" keyword, or what its keywords imply, or every
// type ("any") when nothing constrains it.
func (c *converter) types(s *object, path string) ([]string, error) {
	known := setOf("object", "array", "string", "number", "integer", "boolean", "null")
	v, ok := s.get("type")
	if !ok {
		var implied []string
		for _, k := range s.keys {
			switch {
			case objectKeys[k]:
				implied = append(implied, "object")
			case arrayKeys[k]:
				implied = append(implied, "array")
			case stringKeys[k]:
				implied = append(implied, "string")
			case intKeys[k]:
				implied = append(implied, "integer")
			}
		}
		// Keywords of another type than a value's do not constrain it: the grammar produces only
		// the implied types, a subset of what the schema accepts.
		implied = slices.Compact(slices.Sorted(slices.Values(implied)))
		if len(implied) == 0 {
			return []string{"any"}, nil
		}
		return implied, nil
	}
	var list []string
	switch t := v.(type) {
	case string:
		list = []string{t}
	case []any:
		for _, e := range t {
			str, isStr := e.(string)
			if !isStr {
				return nil, schemaError(path, "type must be a string or a list of strings")
			}
			list = append(list, str)
		}
	default:
		return nil, schemaError(path, "type must be a string or a list of strings")
	}
	if len(list) == 0 {
		return nil, schemaError(path, "type is an empty list")
	}
	for _, t := range list {
		if !known[t] {
			return nil, schemaError(path, "unknown type %q (use object, array, string, number, integer, boolean or null)", t)
		}
	}
	return slices.Compact(list), nil
}

func (c *converter) visitEnum(s *object, v any, name, path string) (string, error) {
	list, isList := v.([]any)
	if !isList {
		return "", schemaError(path, "enum must be a list")
	}
	var allowed map[string]bool
	if _, hasType := s.get("type"); hasType {
		types, err := c.types(s, path)
		if err != nil {
			return "", err
		}
		allowed = setOf(types...)
		if allowed["number"] {
			allowed["integer"] = true
		}
	}
	for _, k := range s.keys {
		if k != "enum" && k != "type" && !annotations[k] {
			return "", schemaError(path, "%q cannot be combined with enum", k)
		}
	}
	var alts []string
	for _, e := range list {
		if allowed != nil && !allowed[jsonType(e)] {
			continue // the type excludes it
		}
		var sb strings.Builder
		encode(&sb, e)
		alts = append(alts, literal(sb.String()))
	}
	if len(alts) == 0 {
		return "", schemaError(path, "enum has no value (of the given type)")
	}
	c.prim("space")
	return c.add(name, "("+strings.Join(alts, " | ")+") space"), nil
}

// visitRef resolves a local JSON pointer; the rule's name is reserved before its body is built,
// so recursive schemas become recursive rules.
func (c *converter) visitRef(ref, path string) (string, error) {
	if r, ok := c.refs[ref]; ok {
		return r, nil
	}
	if ref != "#" && !strings.HasPrefix(ref, "#/") {
		return "", schemaError(path, "$ref %q: only references inside the schema (#/...) are supported", ref)
	}
	target := c.doc
	segs := strings.Split(strings.TrimPrefix(ref, "#"), "/")[1:]
	for _, seg := range segs {
		seg = strings.ReplaceAll(strings.ReplaceAll(seg, "~1", "/"), "~0", "~")
		o, isObj := target.(*object)
		if !isObj {
			return "", schemaError(path, "$ref %q does not resolve", ref)
		}
		next, ok := o.get(seg)
		if !ok {
			return "", schemaError(path, "$ref %q does not resolve: no %q", ref, seg)
		}
		target = next
	}
	name := c.add(segs[len(segs)-1], "") // reserved; filled below
	c.refs[ref] = name
	body, err := c.visit(target, name+"-body", ref)
	if err != nil {
		return "", err
	}
	c.define(name, body)
	return name, c.err
}

func (c *converter) visitType(s *object, ty, name, path string) (string, error) {
	switch ty {
	case "any":
		return c.prim("value"), nil
	case "object":
		return c.visitProperties(s, name, path)
	case "array":
		return c.visitArray(s, name, path)
	case "string":
		return c.visitString(s, name, path)
	case "integer":
		return c.visitInteger(s, name, path)
	case "number":
		for _, k := range s.keys {
			if intKeys[k] {
				return "", schemaError(path, "%s is supported for integers only", k)
			}
		}
	}
	return c.prim(ty), nil
}
