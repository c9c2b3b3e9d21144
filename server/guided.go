package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"

	"ubatch/grammar"
	"ubatch/grammar/jsonschema"
	"ubatch/grammar/regex"
)

// vLLM's structured output fields, mapped onto the grammar engine: guided_json is json_schema,
// guided_grammar is grammar (llama.cpp's GBNF, not the EBNF/Lark of vLLM's xgrammar and guidance
// backends), guided_choice a grammar of literal alternatives, guided_regex a regex's grammar
// (grammar/regex; the whole output matches it, as in vLLM). structured_outputs is vLLM's newer
// object of the same four (and json_object).

// guidedBackends are guided_decoding_backend's values vLLM documents: accepted and ignored, since
// every one of them means the same constraint here (the grammar engine is the only backend).
var guidedBackends = []string{"auto", "xgrammar", "guidance", "llguidance", "outlines", "lm-format-enforcer"}

// checkGuidedBackend accepts vLLM's backend names as no-ops and refuses others, so that a typo
// is not taken for a backend.
func checkGuidedBackend(b *string) error {
	if b == nil || *b == "" {
		return nil
	}
	name, _, _ := strings.Cut(*b, ":") // vLLM takes options after a colon: "xgrammar:disable-any-whitespace"
	if !slices.Contains(guidedBackends, name) {
		return BadRequest("guided_decoding_backend", "guided_decoding_backend %s: use one of %s (all mean the server's own grammar engine)",
			Echo(*b), strings.Join(guidedBackends, ", "))
	}
	return nil
}

// choiceGrammar is the GBNF of guided_choice (in field): exactly one of a list of strings.
func (s *Server) choiceGrammar(field string, raw json.RawMessage) (string, error) {
	var choices []string
	if err := json.Unmarshal(raw, &choices); err != nil {
		return "", BadRequest(field, "%s must be a list of strings", field)
	}
	if len(choices) == 0 {
		return "", BadRequest(field, "%s is an empty list: give at least one choice", field)
	}
	maxAlts := s.cfg.Limits.Grammar.MaxAlternatives
	if maxAlts <= 0 {
		maxAlts = grammar.DefaultMaxAlternatives
	}
	if len(choices) > maxAlts {
		return "", limitError(field, &grammar.LimitError{Limit: grammar.LimitAlternatives, Max: maxAlts, Got: len(choices)})
	}
	var sb strings.Builder
	sb.WriteString("root ::= ")
	for i, c := range choices {
		if i > 0 {
			sb.WriteString(" | ")
		}
		sb.WriteString(regex.Literal(c))
	}
	sb.WriteByte('\n')
	return sb.String(), nil // compileConstraint holds its size to the byte limit
}

// regexGrammar is the GBNF of guided_regex (in field).
func (s *Server) regexGrammar(ctx context.Context, field, pattern string) (string, error) {
	gbnf, err := regex.Grammar(ctx, pattern, s.cfg.Limits.Grammar)
	switch {
	case err == nil:
		return gbnf, nil
	case isLimit(err):
		return "", limitError(field, err)
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return "", BadRequest(field, "%s: the request ended before its regex was converted", field)
	}
	return "", BadRequest(field, "%s: %v", field, err)
}

// structuredOutputs is vLLM's structured_outputs object. Its other keys are refused (the decoder
// disallows unknown fields): they ask for what this server does not do.
type structuredOutputs struct {
	JSON            json.RawMessage `json:"json"`
	Regex           *string         `json:"regex"`
	Choice          json.RawMessage `json:"choice"`
	Grammar         *string         `json:"grammar"`
	JSONObject      *bool           `json:"json_object"`
	DisableFallback *bool           `json:"disable_fallback"` // accepted: there is no other backend to fall back to
}

// structuredGrammar is the GBNF of structured_outputs ("" when it sets nothing).
func (s *Server) structuredGrammar(ctx context.Context, raw json.RawMessage) (string, error) {
	const field = "structured_outputs"
	var so structuredOutputs
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&so); err != nil {
		return "", BadRequest(field, "structured_outputs must be an object with one of json, regex, choice, grammar or json_object: %v", err)
	}
	var given []string
	for _, k := range []struct {
		name string
		set  bool
	}{{"json", !IsNull(so.JSON)}, {"regex", so.Regex != nil}, {"choice", !IsNull(so.Choice)},
		{"grammar", so.Grammar != nil}, {"json_object", so.JSONObject != nil && *so.JSONObject}} {
		if k.set {
			given = append(given, k.name)
		}
	}
	switch {
	case len(given) > 1:
		return "", BadRequest(field, "structured_outputs sets %s: give one of them", strings.Join(given, " and "))
	case len(given) == 0:
		return "", nil
	}
	switch given[0] {
	case "json":
		return s.schemaGrammar(ctx, field, so.JSON)
	case "regex":
		return s.regexGrammar(ctx, field, *so.Regex)
	case "choice":
		return s.choiceGrammar(field, so.Choice)
	case "grammar":
		return *so.Grammar, nil
	}
	return jsonschema.ObjectGrammar(), nil
}
