package server

import (
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"testing"

	"ubatch/engine"
	"ubatch/sample"
)

func TestParsePrompts(t *testing.T) {
	tests := []struct {
		name    string
		raw     string
		want    []PromptInput
		wantErr bool
	}{
		{name: "string", raw: `"hi"`, want: []PromptInput{{text: "hi", isText: true}}},
		{name: "token ids", raw: `[1, 2, 3]`, want: []PromptInput{{tokens: []int32{1, 2, 3}}}},
		{name: "list of strings", raw: `["a", "b"]`, want: []PromptInput{{text: "a", isText: true}, {text: "b", isText: true}}},
		{name: "list of token lists", raw: `[[1], [2, 3]]`, want: []PromptInput{{tokens: []int32{1}}, {tokens: []int32{2, 3}}}},
		{name: "mixed list", raw: `["a", [4]]`, want: []PromptInput{{text: "a", isText: true}, {tokens: []int32{4}}}},
		{name: "absent", raw: ``, wantErr: true},
		{name: "null", raw: `null`, wantErr: true},
		{name: "number", raw: `5`, wantErr: true},
		{name: "empty list", raw: `[]`, want: []PromptInput{{tokens: []int32{}}}},
		{name: "fractional token", raw: `[1.5]`, wantErr: true},
		{name: "object element", raw: `[{"a": 1}]`, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParsePrompts("prompt", json.RawMessage(tc.raw))
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want error %v", err, tc.wantErr)
			}
			if err != nil {
				checkParam(t, err, "prompt")
				return
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// checkParam checks that err is a 400 naming param.
func checkParam(t *testing.T, err error, param string) {
	t.Helper()
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || ae.Param != param {
		t.Fatalf("error %#v: want a 400 about %q", err, param)
	}
}

func TestParseFieldForms(t *testing.T) {
	tests := []struct {
		name    string
		parse   func(json.RawMessage) (any, error)
		raw     string
		want    any
		wantErr string // param of the expected error
	}{
		{name: "stop string", parse: wrap(parseStop), raw: `"x"`, want: []string{"x"}},
		{name: "stop list drops empty", parse: wrap(parseStop), raw: `["a", "", "b"]`, want: []string{"a", "b"}},
		{name: "stop null", parse: wrap(parseStop), raw: `null`, want: []string(nil)},
		{name: "stop number", parse: wrap(parseStop), raw: `1`, wantErr: "stop"},
		{name: "stop too many", parse: wrap(parseStop), raw: `["1","2","3","4","5","6","7","8","9","10","11","12","13","14","15","16","17"]`, wantErr: "stop"},
		{name: "priority high", parse: wrap(parsePriority), raw: `"high"`, want: engine.PriorityHigh},
		{name: "priority LOW", parse: wrap(parsePriority), raw: `"LOW"`, want: engine.PriorityLow},
		{name: "priority int", parse: wrap(parsePriority), raw: `3`, want: engine.Priority(3)},
		{name: "priority absent", parse: wrap(parsePriority), raw: ``, want: engine.PriorityNormal},
		{name: "priority word", parse: wrap(parsePriority), raw: `"urgent"`, wantErr: "priority"},
		{name: "priority huge", parse: wrap(parsePriority), raw: `1e9`, wantErr: "priority"},
		{name: "logprobs bool", parse: logprobsPair, raw: `true`, want: [2]any{true, 0}},
		{name: "logprobs int", parse: logprobsPair, raw: `4`, want: [2]any{true, 4}},
		{name: "logprobs false", parse: logprobsPair, raw: `false`, want: [2]any{false, 0}},
		{name: "logprobs too many", parse: logprobsPair, raw: `50`, wantErr: "logprobs"},
		{name: "logprobs negative", parse: logprobsPair, raw: `-1`, wantErr: "logprobs"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.parse(json.RawMessage(tc.raw))
			if tc.wantErr != "" {
				checkParam(t, err, tc.wantErr)
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %#v, %v; want %#v", got, err, tc.want)
			}
		})
	}
}

func wrap[T any](f func(json.RawMessage) (T, error)) func(json.RawMessage) (any, error) {
	return func(raw json.RawMessage) (any, error) { return f(raw) }
}

func logprobsPair(raw json.RawMessage) (any, error) {
	on, top, err := ParseLogprobs(raw)
	return [2]any{on, top}, err
}

func TestSamplingDefaultsAndValidation(t *testing.T) {
	eog := []int32{2}
	t.Run("OpenAI defaults", func(t *testing.T) {
		var f SamplingFields
		g, err := f.Params(OpenAIDefaults(), eog, 1000)
		if err != nil {
			t.Fatal(err)
		}
		p := g.sampling
		if p.Temperature != 1 || p.TopP != 1 || p.TopK != 0 || p.MinP != 0 || p.RepeatPenalty != 1 || g.n != 1 || g.MaxTokens != 0 {
			t.Fatalf("params %+v", g)
		}
	})
	t.Run("llama.cpp defaults", func(t *testing.T) {
		var f SamplingFields
		g, err := f.Params(sample.DefaultParams(), eog, 1000)
		if err != nil {
			t.Fatal(err)
		}
		d := sample.DefaultParams()
		d.Seed = g.sampling.Seed
		if !reflect.DeepEqual(g.sampling, d) {
			t.Fatalf("params %+v, want %+v", g.sampling, d)
		}
	})
	t.Run("fields override and ignore_eos bans EOG", func(t *testing.T) {
		var f SamplingFields
		if err := json.Unmarshal([]byte(`{"temperature": 0, "top_k": 5, "min_p": 0.1, "seed": 42, "ignore_eos": true, "n_predict": 7, "stop": "x"}`), &f); err != nil {
			t.Fatal(err)
		}
		g, err := f.Params(OpenAIDefaults(), eog, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if g.sampling.Temperature != 0 || g.sampling.TopK != 5 || g.sampling.MinP != float32(0.1) || g.sampling.Seed != 42 ||
			!reflect.DeepEqual(g.sampling.IgnoreTokens, eog) || g.MaxTokens != 7 || !reflect.DeepEqual(g.stop, []string{"x"}) {
			t.Fatalf("params %+v", g)
		}
	})
	t.Run("ignore_eos false lifts a server-wide ban", func(t *testing.T) {
		d := sample.DefaultParams()
		d.IgnoreTokens = eog // serve --ignore-eos
		var absent, off SamplingFields
		if err := json.Unmarshal([]byte(`{"ignore_eos": false}`), &off); err != nil {
			t.Fatal(err)
		}
		if g, err := absent.Params(d, eog, 1000); err != nil || !reflect.DeepEqual(g.sampling.IgnoreTokens, eog) {
			t.Fatalf("absent: ignored %v (%v), want the server's %v", g.sampling.IgnoreTokens, err, eog)
		}
		if g, err := off.Params(d, eog, 1000); err != nil || len(g.sampling.IgnoreTokens) != 0 {
			t.Fatalf("ignore_eos false: ignored %v (%v), want none", g.sampling.IgnoreTokens, err)
		}
	})
	t.Run("n_predict 0 generates nothing", func(t *testing.T) {
		zero := 0
		g, err := (&SamplingFields{NPredict: &zero}).Params(OpenAIDefaults(), eog, 1000)
		if err != nil || !g.noGeneration {
			t.Fatalf("params %+v, %v", g, err)
		}
	})
	bad := []struct {
		name  string
		json  string
		param string
	}{
		{name: "negative temperature", json: `{"temperature": -0.5}`, param: "temperature"},
		{name: "top_p above 1", json: `{"top_p": 1.5}`, param: "top_p"},
		{name: "negative top_k", json: `{"top_k": -1}`, param: "top_k"},
		{name: "min_p above 1", json: `{"min_p": 2}`, param: "min_p"},
		{name: "zero repeat_penalty", json: `{"repeat_penalty": 0}`, param: "repeat_penalty"},
		{name: "repeat_last_n below -1", json: `{"repeat_last_n": -2}`, param: "repeat_last_n"},
		{name: "frequency_penalty out of range", json: `{"frequency_penalty": 3}`, param: "frequency_penalty"},
		{name: "presence_penalty out of range", json: `{"presence_penalty": -3}`, param: "presence_penalty"},
		{name: "temperature above 100", json: `{"temperature": 101}`, param: "temperature"},
		{name: "temperature beyond float32", json: `{"temperature": 1e300}`, param: "temperature"},
		{name: "repeat_penalty above 100", json: `{"repeat_penalty": 101}`, param: "repeat_penalty"},
		{name: "logit_bias outside the vocabulary", json: `{"logit_bias": [[1000, 1]]}`, param: "logit_bias"},
		{name: "logit_bias out of range", json: `{"logit_bias": {"3": -101}}`, param: "logit_bias"},
		{name: "logit_bias id beyond int32", json: `{"logit_bias": [[4294967296, 1]]}`, param: "logit_bias"},
		{name: "negative seed", json: `{"seed": -5}`, param: "seed"},
		{name: "n_predict below -1", json: `{"n_predict": -2}`, param: "n_predict"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			var f SamplingFields
			if err := json.Unmarshal([]byte(tc.json), &f); err != nil {
				t.Fatal(err)
			}
			_, err := f.Params(OpenAIDefaults(), eog, 1000)
			checkParam(t, err, tc.param)
		})
	}
}
