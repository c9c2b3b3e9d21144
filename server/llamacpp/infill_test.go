package llamacpp

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"ubatch/server"
	"ubatch/server/servertest"
)

// TestInfillEndpoint: /infill answers as /completion does over the FIM prompt: the same greedy
// tokens as /completion given that prompt's ids, tokens_evaluated its length; streamed, chunks
// then the stop:true summary.
func TestInfillEndpoint(t *testing.T) {
	e := synthEnv(t, true)
	body := map[string]any{"n_predict": 6, "temperature": 0, "ignore_eos": true, "return_tokens": true,
		"input_prefix": "func a(", "input_suffix": ") {}", "prompt": "b", "input_extra": []map[string]string{{"filename": "x.go", "text": "package x"}}}
	in := server.InfillInput{Prefix: "func a(", Suffix: ") {}", Prompt: "b", Extra: []server.InfillChunk{{Filename: strp("x.go"), Text: strp("package x")}}}
	prompt := server.BuildInfill(e.Model.Vocab, in, synthNBatch, synthNCtx, 6)
	var got, ref llamaCompletion
	e.PostJSON("/infill", body, http.StatusOK, &got)
	if got.TokensEvaluated != len(prompt) || got.TokensPredicted != 6 || len(got.Tokens) != 6 || !got.Stop {
		t.Fatalf("infill: %+v; want %d prompt tokens", got, len(prompt))
	}
	e.PostJSON("/completion", map[string]any{"prompt": prompt, "n_predict": 6, "temperature": 0, "ignore_eos": true, "return_tokens": true}, http.StatusOK, &ref)
	if !slices.Equal(got.Tokens, ref.Tokens) || got.Content != ref.Content || ref.TokensCached == 0 {
		t.Errorf("infill tokens %v %q, /completion over its prompt %v %q (cached %d)", got.Tokens, got.Content, ref.Tokens, ref.Content, ref.TokensCached)
	}

	resp := e.PostStream("/infill", body)
	defer resp.Body.Close()
	var streamed []int32
	events := servertest.SSEEvents(t, resp.Body)
	for i, ev := range events {
		var c llamaCompletion
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatal(err)
		}
		streamed = append(streamed, c.Tokens...)
		if c.Stop != (i == len(events)-1) || (c.Stop && c.TokensEvaluated != len(prompt)) {
			t.Errorf("event %d: %s", i, ev)
		}
	}
	if !slices.Equal(streamed, got.Tokens) {
		t.Errorf("streamed %v, want %v", streamed, got.Tokens)
	}
}

// TestInfillErrors: a model without FIM tokens is a 400 infill_unsupported; the required
// fields, chunk texts and the chunk cap are 400s naming the field.
func TestInfillErrors(t *testing.T) {
	plain := synthEnv(t, false)
	var eb servertest.ErrorBody
	plain.PostJSON("/infill", map[string]any{"input_prefix": "a", "input_suffix": "b"}, http.StatusBadRequest, &eb)
	if eb.Error.Code == nil || *eb.Error.Code != "infill_unsupported" || !strings.Contains(eb.Error.Message, "FIM") {
		t.Errorf("no FIM tokens: %+v", eb.Error)
	}
	e := synthEnv(t, true)
	many := make([]map[string]string, maxInfillChunks+1)
	for i := range many {
		many[i] = map[string]string{"text": "x"}
	}
	for _, tc := range []struct {
		body  map[string]any
		param string
	}{
		{map[string]any{"input_suffix": "b"}, "input_prefix"},
		{map[string]any{"input_prefix": "a"}, "input_suffix"},
		{map[string]any{"input_prefix": "a", "input_suffix": "b", "input_extra": []map[string]string{{"filename": "f"}}}, "input_extra"},
		{map[string]any{"input_prefix": "a", "input_suffix": "b", "input_extra": many}, "input_extra"},
		{map[string]any{"input_prefix": "a", "input_suffix": "b", "prompt": 3}, "prompt"},
		{map[string]any{"input_prefix": "a", "input_suffix": "b", "n_probs": 100}, "n_probs"},
	} {
		var eb servertest.ErrorBody
		e.PostJSON("/infill", tc.body, http.StatusBadRequest, &eb)
		if eb.Error.Param == nil || *eb.Error.Param != tc.param {
			t.Errorf("%v: %+v, want param %s", tc.body, eb.Error, tc.param)
		}
	}
}
