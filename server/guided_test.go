package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"testing"

	"ubatch/internal/testhttp"
)

// guidedText posts body to path (one of the three completion routes) and returns every
// choice's text and finish reason, in llama.cpp's stop_type words mapped to OpenAI's.
func (e *testEnv) guidedText(path string, body map[string]any) (texts, finishes []string) {
	e.T.Helper()
	switch path {
	case "/v1/chat/completions":
		body["messages"] = []map[string]any{{"role": "user", "content": "Tell me a story."}}
		var res chatResult
		e.PostJSON(path, body, http.StatusOK, &res)
		for _, c := range res.Choices {
			texts, finishes = append(texts, c.Message.Content), append(finishes, c.FinishReason)
		}
	case "/completion":
		body["prompt"] = "Once upon a time"
		var res llamaCompletion
		e.PostJSON(path, body, http.StatusOK, &res)
		finish := map[string]string{"eos": "stop", "limit": "length"}[res.StopType]
		texts, finishes = []string{res.Content}, []string{finish}
	default:
		body["prompt"] = "Once upon a time"
		res := e.Complete(body)
		for _, c := range res.Choices {
			texts, finishes = append(texts, c.Text), append(finishes, c.FinishReason)
		}
	}
	return texts, finishes
}

// guidedRuns are the sampling settings every guided test goes through: greedy, and sampled at
// several temperatures and seeds (n > 1 where the route has it).
var guidedRuns = []map[string]any{
	{"temperature": 0},
	{"temperature": 0.8, "seed": 1},
	{"temperature": 1.5, "seed": 2, "n": 3},
}

func guidedBody(run map[string]any, path string, extra map[string]any) map[string]any {
	body := map[string]any{"max_tokens": 200}
	for k, v := range run {
		if k == "n" && path == "/completion" {
			continue
		}
		body[k] = v
	}
	for k, v := range extra {
		body[k] = v
	}
	return body
}

var guidedRoutes = []string{"/v1/completions", "/v1/chat/completions", "/completion"}

func TestGuidedChoice(t *testing.T) {
	e := newEnv(t, envOptions{})
	choices := []string{"cat", "dog", `a "quoted" \ bird`, "yes, no\n", "漢字"}
	for _, path := range guidedRoutes {
		for i, run := range guidedRuns {
			t.Run(fmt.Sprintf("%s run %d", path, i), func(t *testing.T) {
				texts, finishes := e.guidedText(path, guidedBody(run, path, map[string]any{"guided_choice": choices}))
				for j, text := range texts {
					if !slices.Contains(choices, text) || finishes[j] != "stop" {
						t.Errorf("choice %d: %q (finish %q) is not one of %q", j, text, finishes[j], choices)
					}
				}
			})
		}
	}
}

// personSchema (grammar_test.go) through guided_json as an object, as a string, and through
// structured_outputs.json; the output validates with an independent validator.
func TestGuidedJSON(t *testing.T) {
	e := newEnv(t, envOptions{})
	v := schemaValidator(t, personSchema)
	for _, tc := range []struct {
		name  string
		field map[string]any
	}{
		{name: "object", field: map[string]any{"guided_json": json.RawMessage(personSchema), "guided_decoding_backend": "xgrammar"}},
		{name: "string", field: map[string]any{"guided_json": personSchema}},
		{name: "structured_outputs", field: map[string]any{"structured_outputs": map[string]any{"json": json.RawMessage(personSchema)}}},
	} {
		for _, path := range guidedRoutes {
			for i, run := range guidedRuns {
				t.Run(fmt.Sprintf("%s %s run %d", tc.name, path, i), func(t *testing.T) {
					body := guidedBody(run, path, tc.field)
					body["max_tokens"] = 400
					texts, finishes := e.guidedText(path, body)
					for j, text := range texts {
						if finishes[j] != "stop" {
							t.Fatalf("choice %d: finish %q for %q", j, finishes[j], text)
						}
						checkAgainst(t, v, text)
					}
				})
			}
		}
	}
}

func TestGuidedRegex(t *testing.T) {
	e := newEnv(t, envOptions{})
	for _, tc := range []struct {
		name, pattern string
	}{
		{name: "sentence", pattern: `[A-Z][a-z]{1,8} (is|was) [0-9]{1,3}\.`},
		{name: "anchored", pattern: `^\d{3}-\d{4}$`},
		{name: "case-insensitive", pattern: `(?i)(yes|no)!`},
		{name: "quotes and newline", pattern: `"[a-z ]{1,12}"\n`},
	} {
		re := regexp.MustCompile(`^(?:` + tc.pattern + `)$`)
		for _, path := range guidedRoutes {
			for i, run := range guidedRuns {
				t.Run(fmt.Sprintf("%s %s run %d", tc.name, path, i), func(t *testing.T) {
					field := map[string]any{"guided_regex": tc.pattern}
					if i == 1 {
						field = map[string]any{"structured_outputs": map[string]any{"regex": tc.pattern}}
					}
					texts, finishes := e.guidedText(path, guidedBody(run, path, field))
					for j, text := range texts {
						if !re.MatchString(text) || finishes[j] != "stop" {
							t.Errorf("choice %d: %q (finish %q) does not match %s", j, text, finishes[j], re)
						}
					}
				})
			}
		}
	}
}

func TestGuidedGrammar(t *testing.T) {
	e := newEnv(t, envOptions{})
	const gbnf = `root ::= "The " ("cat" | "dog") " ran " [0-9] " miles."`
	re := regexp.MustCompile(`^The (cat|dog) ran [0-9] miles\.$`)
	for _, path := range guidedRoutes {
		for i, run := range guidedRuns {
			t.Run(fmt.Sprintf("%s run %d", path, i), func(t *testing.T) {
				field := map[string]any{"guided_grammar": gbnf}
				if i == 2 {
					field = map[string]any{"structured_outputs": map[string]any{"grammar": gbnf}}
				}
				texts, _ := e.guidedText(path, guidedBody(run, path, field))
				for _, text := range texts {
					if !re.MatchString(text) {
						t.Errorf("%q does not follow the grammar", text)
					}
				}
			})
		}
	}
}

// TestMinTokens: with the end of generation pushed up by +100, a completion ends at its first
// token, and with min_tokens after exactly that many; stop strings wait for min_tokens too.
func TestMinTokens(t *testing.T) {
	e := newEnv(t, envOptions{})
	bias := map[string]float64{}
	for _, id := range e.model.Vocab.EOG() {
		bias[fmt.Sprint(id)] = 100
	}
	for _, tc := range []struct {
		name       string
		body       map[string]any
		wantTokens int // completion tokens, the end of generation included
		atLeast    bool
	}{
		{name: "no min_tokens", body: map[string]any{"logit_bias": bias}, wantTokens: 1},
		{name: "greedy", body: map[string]any{"logit_bias": bias, "min_tokens": 12, "temperature": 0}, wantTokens: 13},
		{name: "sampled", body: map[string]any{"logit_bias": bias, "min_tokens": 7, "temperature": 1.3, "seed": 4}, wantTokens: 8},
		{name: "equal to max_tokens", body: map[string]any{"logit_bias": bias, "min_tokens": 30, "max_tokens": 30}, wantTokens: 30},
		{name: "stop string early", body: map[string]any{"min_tokens": 10, "stop": []string{" "}, "temperature": 0}, wantTokens: 10, atLeast: true},
	} {
		for _, path := range []string{"/v1/completions", "/v1/chat/completions"} {
			t.Run(tc.name+" "+path, func(t *testing.T) {
				body := map[string]any{"max_tokens": 40}
				for k, v := range tc.body {
					body[k] = v
				}
				var usage testhttp.Usage
				var text string
				if path == "/v1/completions" {
					body["prompt"] = "Once upon a time"
					res := e.Complete(body)
					usage, text = res.Usage, res.Choices[0].Text
				} else {
					body["messages"] = []map[string]any{{"role": "user", "content": "Tell me a story."}}
					var res chatResult
					e.PostJSON(path, body, http.StatusOK, &res)
					usage, text = res.Usage, res.Choices[0].Message.Content
				}
				got := usage.CompletionTokens
				if got != tc.wantTokens && !(tc.atLeast && got >= tc.wantTokens) {
					t.Fatalf("%d completion tokens (%q), want %d", got, text, tc.wantTokens)
				}
			})
		}
	}
}

// TestGuidedErrors: every vLLM field this server cannot honour as asked is a 400 naming it.
// TestRepetitionPenalty: vLLM's repetition_penalty is repeat_penalty under another name: the
// same greedy text for the same value, and (at 5) not the unpenalized text; both names with one
// value pass.
func TestRepetitionPenalty(t *testing.T) {
	e := newEnv(t, envOptions{})
	text := func(extra map[string]any) string {
		body := map[string]any{"prompt": "Once upon a time", "max_tokens": 40, "temperature": 0}
		for k, v := range extra {
			body[k] = v
		}
		res := e.Complete(body)
		if len(res.Choices) != 1 {
			t.Fatalf("%v: %d choices", extra, len(res.Choices))
		}
		return res.Choices[0].Text
	}
	plain := text(nil)
	tests := []struct {
		name  string
		extra map[string]any
		same  bool // the same text as repeat_penalty 5, else as no penalty
	}{
		{name: "vLLM's name", extra: map[string]any{"repetition_penalty": 5}, same: true},
		{name: "both names agreeing", extra: map[string]any{"repetition_penalty": 5, "repeat_penalty": 5}, same: true},
		{name: "one disables", extra: map[string]any{"repetition_penalty": 1}},
	}
	want := text(map[string]any{"repeat_penalty": 5})
	if want == plain {
		t.Fatalf("repeat_penalty 5 leaves the greedy text as it is (%q): the test cannot tell the names apart", plain)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, w := text(tc.extra), plain
			if tc.same {
				w = want
			}
			if got != w {
				t.Errorf("%v: %q, want %q", tc.extra, got, w)
			}
		})
	}
}

func TestGuidedErrors(t *testing.T) {
	e := newEnv(t, envOptions{limits: RequestLimits{}})
	msgs := []map[string]any{{"role": "user", "content": "hi"}}
	many := make([]string, 10001)
	for i := range many {
		many[i] = fmt.Sprint(i)
	}
	tests := []struct {
		name, path string
		body       map[string]any
		field      string
		want       string
	}{
		{name: "grammar and guided_json", path: "/v1/completions", body: map[string]any{"grammar": `root ::= "a"`, "guided_json": map[string]any{}},
			field: "guided_json", want: "cannot be used together"},
		{name: "guided_choice and guided_regex", path: "/v1/chat/completions", body: map[string]any{"guided_choice": []string{"a"}, "guided_regex": "a"},
			field: "guided_regex", want: "cannot be used together"},
		{name: "response_format and guided_json", path: "/v1/chat/completions", body: map[string]any{"response_format": map[string]any{"type": "json_object"}, "guided_json": map[string]any{}},
			field: "guided_json", want: "cannot be used together"},
		{name: "json_schema and structured_outputs", path: "/completion", body: map[string]any{"json_schema": map[string]any{}, "structured_outputs": map[string]any{"regex": "a"}},
			field: "structured_outputs", want: "cannot be used together"},
		{name: "second is named before the first converts", path: "/v1/completions", body: map[string]any{"guided_regex": "(?=a)", "guided_grammar": "root ::= "},
			field: "guided_grammar", want: "cannot be used together"},
		{name: "structured_outputs twice", path: "/v1/completions", body: map[string]any{"structured_outputs": map[string]any{"regex": "a", "choice": []string{"a"}}},
			field: "structured_outputs", want: "regex and choice"},
		{name: "structured_outputs unknown key", path: "/v1/completions", body: map[string]any{"structured_outputs": map[string]any{"structural_tag": "x"}},
			field: "structured_outputs", want: "structural_tag"},
		{name: "lookahead", path: "/v1/completions", body: map[string]any{"guided_regex": "a(?=b)"},
			field: "guided_regex", want: "lookaround"},
		{name: "backreference", path: "/v1/chat/completions", body: map[string]any{"guided_regex": `(a)\1`},
			field: "guided_regex", want: "backreferences"},
		{name: "inner anchor", path: "/completion", body: map[string]any{"guided_regex": `a$b`},
			field: "guided_regex", want: "anchor inside"},
		{name: "regex not a string", path: "/v1/completions", body: map[string]any{"guided_regex": 3},
			field: "guided_regex", want: "guided_regex"},
		{name: "choice not a list", path: "/v1/completions", body: map[string]any{"guided_choice": "a"},
			field: "guided_choice", want: "list of strings"},
		{name: "choice empty", path: "/v1/completions", body: map[string]any{"guided_choice": []string{}},
			field: "guided_choice", want: "empty list"},
		{name: "too many choices", path: "/v1/completions", body: map[string]any{"guided_choice": many},
			field: "guided_choice", want: "10001 alternatives exceed the limit of 10000"},
		{name: "bad guided_grammar", path: "/v1/completions", body: map[string]any{"guided_grammar": "root ::= [a-"},
			field: "guided_grammar", want: "unterminated character class"},
		{name: "bad guided_json", path: "/v1/chat/completions", body: map[string]any{"guided_json": map[string]any{"type": "text"}},
			field: "guided_json", want: `unknown type "text"`},
		{name: "unknown backend", path: "/v1/completions", body: map[string]any{"guided_decoding_backend": "magic", "guided_regex": "a"},
			field: "guided_decoding_backend", want: "xgrammar"},
		{name: "whitespace pattern", path: "/v1/completions", body: map[string]any{"guided_json": map[string]any{}, "guided_whitespace_pattern": `[\n ]*`},
			field: "guided_whitespace_pattern", want: "not supported"},
		{name: "min_tokens over max_tokens", path: "/v1/completions", body: map[string]any{"min_tokens": 20, "max_tokens": 10},
			field: "min_tokens", want: "at most max_tokens"},
		{name: "negative min_tokens", path: "/v1/chat/completions", body: map[string]any{"min_tokens": -1},
			field: "min_tokens", want: ">= 0"},
		{name: "min_tokens with n_predict 0", path: "/completion", body: map[string]any{"min_tokens": 1, "n_predict": 0},
			field: "min_tokens", want: "generates nothing"},
		{name: "grammar ends before min_tokens", path: "/v1/completions", body: map[string]any{"min_tokens": 30, "guided_choice": []string{"a"}},
			field: "min_tokens", want: "min_tokens asks for 30"},
		{name: "beam search", path: "/v1/completions", body: map[string]any{"use_beam_search": true},
			field: "use_beam_search", want: "not supported"},
		{name: "length_penalty", path: "/v1/chat/completions", body: map[string]any{"length_penalty": 0.5},
			field: "length_penalty", want: "not supported"},
		{name: "prompt_logprobs", path: "/v1/completions", body: map[string]any{"prompt_logprobs": 0},
			field: "prompt_logprobs", want: "not supported"},
		{name: "best_of", path: "/v1/completions", body: map[string]any{"best_of": 2},
			field: "best_of", want: "not supported"},
		{name: "repetition_penalty zero", path: "/v1/completions", body: map[string]any{"repetition_penalty": 0},
			field: "repetition_penalty", want: "(0, 100]"},
		{name: "repetition_penalty against repeat_penalty", path: "/v1/chat/completions", body: map[string]any{"repetition_penalty": 1.2, "repeat_penalty": 1.1},
			field: "repetition_penalty", want: "set one of them"},
		{name: "stop_token_ids", path: "/v1/chat/completions", body: map[string]any{"stop_token_ids": []int{2}},
			field: "stop_token_ids", want: "not supported"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := map[string]any{"max_tokens": 40}
			for k, v := range tt.body {
				body[k] = v
			}
			if tt.path == "/v1/chat/completions" {
				body["messages"] = msgs
			} else {
				body["prompt"] = "Once upon a time"
			}
			e.CheckBadParam(t, tt.path, body, tt.field, tt.want)
		})
	}
	// The no-op values of vLLM's refused fields pass.
	e.Complete(map[string]any{"prompt": "a", "max_tokens": 2, "use_beam_search": false, "length_penalty": 1,
		"best_of": 1, "repetition_penalty": 1, "guided_decoding_backend": "auto", "min_tokens": 0, "stop_token_ids": []int{}})
}
