package sample

import (
	"errors"
	"fmt"

	"ubatch/grammar"
)

// RequestError is a failure to sample that the request itself caused, not the model or the
// server: its grammar reached a dead end or was too costly to follow, or it disabled the only
// tokens that could come next (ignore_eos). A server reports it as the client's fault (400, or
// an error event in a stream already answered) so that a router does not hold it against the
// node. Test for it with errors.As.
type RequestError struct {
	Param string // the request field at fault in llama.cpp's and OpenAI's API: "grammar", "ignore_eos"
	Code  string // machine-readable reason, e.g. "grammar_dead_end"
	Err   error  // the explanation (it may wrap grammar.ErrTooAmbiguous or another grammar limit)
}

func (e *RequestError) Error() string { return e.Err.Error() }
func (e *RequestError) Unwrap() error { return e.Err }

// Codes of RequestError.
const (
	CodeGrammarDeadEnd      = "grammar_dead_end"      // no token can continue the output (or end it)
	CodeGrammarTooAmbiguous = "grammar_too_ambiguous" // grammar.ErrTooAmbiguous
	CodeGrammarTooExpensive = "grammar_too_expensive" // a grammar work limit, or sampling too slow
	CodeNoToken             = "no_token"              // every token of the vocabulary is excluded
)

func requestError(param, code string, format string, args ...any) *RequestError {
	return &RequestError{Param: param, Code: code, Err: fmt.Errorf(format, args...)}
}

// grammarLimit words an error of the matcher's own (Matcher.Err: it refused the work the grammar
// asked of it, grammar.ErrBudget or grammar.ErrTooAmbiguous) as the request's fault: the grammar
// is the client's. Any other matcher error counts as too expensive too: every one of them is a
// limit the grammar ran into.
func grammarLimit(err error) *RequestError {
	code := CodeGrammarTooExpensive // grammar.ErrBudget
	if errors.Is(err, grammar.ErrTooAmbiguous) {
		code = CodeGrammarTooAmbiguous
	}
	return &RequestError{Param: "grammar", Code: code, Err: fmt.Errorf("sample: %w", err)}
}
