package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"runtime"

	"ubatch/grammar"
	"ubatch/grammar/jsonschema"
)

// responseFormat is OpenAI's response_format, with llama.cpp's extension of a schema on
// json_object.
type responseFormat struct {
	Type       string `json:"type"`
	JSONSchema *struct {
		Name   string          `json:"name"`
		Schema json.RawMessage `json:"schema"`
		Strict *bool           `json:"strict"` // accepted: the output always follows the schema
	} `json:"json_schema"`
	Schema json.RawMessage `json:"schema"`
}

// Constrain compiles the request's output constraint, if any, once for all its sequences:
// llama.cpp's grammar (GBNF) or json_schema, OpenAI's response_format (rf, chat only), or vLLM's
// guided_json, guided_choice, guided_regex, guided_grammar or structured_outputs (guided.go). At
// most one may be given (a second is a 400 naming it, before anything is converted); an invalid
// one, or one past the server's grammar limits, is a 400 naming its field. Compilation stops
// when ctx (the request's) ends. It also checks min_tokens against the length the request
// allows, which its callers have set by now.
func (s *Server) Constrain(ctx context.Context, g *GenParams, f *SamplingFields, rf json.RawMessage) error {
	if err := g.checkMinTokens(); err != nil {
		return err
	}
	if err := checkGuidedBackend(f.GuidedBackend); err != nil {
		return err
	}
	cands := []struct {
		field string
		set   bool
		gbnf  func() (string, error)
	}{
		{"grammar", f.Grammar != nil && *f.Grammar != "", func() (string, error) { return *f.Grammar, nil }},
		{"json_schema", !IsNull(f.JSONSchema), func() (string, error) { return s.schemaGrammar(ctx, "json_schema", f.JSONSchema) }},
		{"response_format", !IsNull(rf) && !isTextFormat(rf), func() (string, error) { return s.responseFormatGrammar(ctx, rf) }},
		{"guided_json", !IsNull(f.GuidedJSON), func() (string, error) { return s.schemaGrammar(ctx, "guided_json", f.GuidedJSON) }},
		{"guided_choice", !IsNull(f.GuidedChoice), func() (string, error) { return s.choiceGrammar("guided_choice", f.GuidedChoice) }},
		{"guided_regex", f.GuidedRegex != nil, func() (string, error) { return s.regexGrammar(ctx, "guided_regex", *f.GuidedRegex) }},
		{"guided_grammar", f.GuidedGrammar != nil && *f.GuidedGrammar != "", func() (string, error) { return *f.GuidedGrammar, nil }},
		{"structured_outputs", !IsNull(f.StructuredOutputs), func() (string, error) { return s.structuredGrammar(ctx, f.StructuredOutputs) }},
	}
	var given []string
	pick := -1
	for i, c := range cands {
		if c.set {
			given = append(given, c.field)
			if pick < 0 {
				pick = i
			}
		}
	}
	if len(given) > 1 {
		return BadRequest(given[1], "%s and %s cannot be used together: give one output constraint", given[0], given[1])
	}
	if pick < 0 {
		return nil
	}
	release, err := s.compileSlot(ctx)
	if err != nil {
		return err
	}
	defer release()
	field := cands[pick].field
	src, err := cands[pick].gbnf()
	if err != nil || src == "" { // "": a response_format of type text
		return err
	}
	gr, err := s.compileConstraint(ctx, field, src)
	if err != nil {
		return err
	}
	return s.setGrammar(g, gr)
}

// setGrammar makes gr the request's constraint, matched within the server's budget.
func (s *Server) setGrammar(g *GenParams, gr *grammar.Grammar) error {
	v, err := s.grammarVocab()
	if err != nil {
		return InternalError(err)
	}
	g.sampling.Grammar, g.sampling.GrammarVocab, g.sampling.GrammarBudget = gr, v, s.cfg.Limits.GrammarBudget
	return nil
}

// compileConstraint compiles the GBNF of request field (grammar, json_schema, response_format or
// tools) within the server's grammar limits; its errors are 400s naming field, and the limit
// when one was met.
func (s *Server) compileConstraint(ctx context.Context, field, src string) (*grammar.Grammar, error) {
	gr, err := grammar.Compile(ctx, src, s.cfg.Limits.Grammar)
	switch {
	case err == nil:
		return gr, nil
	case isLimit(err):
		return nil, limitError(field, err)
	case field == "grammar" || field == "guided_grammar" || field == "structured_outputs":
		return nil, BadRequest(field, "%s: %v", field, err)
	}
	return nil, BadRequest(field, "%s: the schema's grammar is not usable: %v", field, err)
}

func isLimit(err error) bool {
	var le *grammar.LimitError
	return errors.As(err, &le)
}

// limitError is the 400 of a constraint past a grammar limit: the message names the field and
// the limit (the LimitError's own text: "grammar: 70000 repetitions exceed the limit of 10000
// (...)").
func limitError(field string, err error) error {
	return BadRequest(field, "%s is too large or too complex to follow: %v", field, err)
}

// schemaGrammar converts a JSON Schema given as a JSON object (or, as some clients send it, a
// string holding one) to GBNF.
func (s *Server) schemaGrammar(ctx context.Context, field string, raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '"' {
		var text string
		if err := json.Unmarshal(raw, &text); err != nil {
			return "", BadRequest(field, "%s must be a JSON Schema object", field)
		}
		raw = []byte(text)
	}
	gbnf, err := jsonschema.Convert(ctx, raw, s.cfg.Limits.Grammar)
	if isLimit(err) {
		return "", limitError(field, err)
	}
	if err != nil {
		return "", BadRequest(field, "%s: %v", field, err)
	}
	return gbnf, nil
}

// isTextFormat reports whether response_format asks for plain text, which constrains nothing.
func isTextFormat(raw json.RawMessage) bool {
	var rf struct {
		Type string `json:"type"`
	}
	return json.Unmarshal(raw, &rf) == nil && rf.Type == "text"
}

// responseFormatGrammar returns the GBNF for response_format ("" for type text).
func (s *Server) responseFormatGrammar(ctx context.Context, raw json.RawMessage) (string, error) {
	var rf responseFormat
	if err := json.Unmarshal(raw, &rf); err != nil {
		return "", BadRequest("response_format", "response_format must be an object like {\"type\": \"json_object\"}")
	}
	switch rf.Type {
	case "text":
		return "", nil
	case "json_object":
		if IsNull(rf.Schema) {
			return jsonschema.ObjectGrammar(), nil
		}
		return s.schemaGrammar(ctx, "response_format", rf.Schema)
	case "json_schema":
		if rf.JSONSchema == nil || IsNull(rf.JSONSchema.Schema) {
			return "", BadRequest("response_format", "response_format of type json_schema needs json_schema.schema")
		}
		return s.schemaGrammar(ctx, "response_format", rf.JSONSchema.Schema)
	case "":
		return "", BadRequest("response_format", "response_format.type is required: text, json_object or json_schema")
	}
	return "", BadRequest("response_format", "response_format.type %s is not supported: use text, json_object or json_schema", Echo(rf.Type))
}

// compileSlots is how many constraints compile at once: half the cores, at least one. A
// compilation is CPU-bound for up to Limits.MaxTime, and clients that send expensive ones in a
// loop would otherwise take every core from the engine's goroutine, whose steps every stream
// waits for (measured: four clients looping on a 90-140 ms grammar took a plain stream's
// inter-token p99 to 30-60 ms on 2 cores).
func compileSlots() int { return max(1, runtime.GOMAXPROCS(0)/2) }

// compileSlot waits for a compilation slot, or for ctx (the request's) to end; release gives
// the slot back.
func (s *Server) compileSlot(ctx context.Context) (release func(), err error) {
	select {
	case s.compiling <- struct{}{}:
		return func() { <-s.compiling }, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// buildGrammarVocab gives the grammar matcher every token's text, built once per server on the
// first constrained request.
func (s *Server) buildGrammarVocab() (*grammar.Vocab, error) {
	v := s.cfg.Model.Vocab
	pieces := make([][]byte, v.VocabSize())
	for i := range pieces {
		pieces[i] = v.Piece(int32(i))
	}
	return grammar.NewVocab(pieces, v.EOG())
}
