package server

import (
	"encoding/json"
	"strings"
	"testing"
)

// openAINodeResponses is the OpenAI Node client the Responses test runs: a pinned release of
// major version 6 (4 predates much of the Responses API; the chat test keeps its own).
const openAINodeResponses = "6.30.1"

// nodeOpenAIVersion installs npm "openai@version" (see nodePackage) and returns the folder
// holding node_modules.
func nodeOpenAIVersion(t *testing.T, version string) string {
	t.Helper()
	return nodePackage(t, "openai", version)
}

// nodeResult is what testdata/responses_client.js prints for one response.
type nodeResult struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	Text   string `json:"text"`
	Usage  struct {
		InputTokens  int `json:"input_tokens"`
		OutputTokens int `json:"output_tokens"`
		TotalTokens  int `json:"total_tokens"`
	} `json:"usage"`
	Incomplete *struct {
		Reason string `json:"reason"`
	} `json:"incomplete"`
	Instructions *string  `json:"instructions"`
	Previous     *string  `json:"previous"`
	OutputTypes  []string `json:"output_types"`
}

// finished reports whether r is a finished response with text and consistent usage.
func (r nodeResult) finished() bool {
	ok := strings.HasPrefix(r.ID, "resp_") && r.Usage.InputTokens > 0 && r.Usage.OutputTokens > 0 &&
		r.Usage.TotalTokens == r.Usage.InputTokens+r.Usage.OutputTokens
	switch r.Status {
	case "completed":
		return ok && r.Incomplete == nil
	case "incomplete":
		return ok && r.Incomplete != nil && r.Incomplete.Reason == "max_output_tokens"
	}
	return false
}

// TestResponsesNodeClient: the official OpenAI Node client's responses.create, plain and
// streamed (iterating the events, and the SDK's stream helper rebuilding the response from
// them), with instructions, and a tool call answered by function_call_output after
// previous_response_id, against a real server on stories260K.
func TestResponsesNodeClient(t *testing.T) {
	dir := nodeOpenAIVersion(t, openAINodeResponses)
	e := newEnv(t, envOptions{nCtx: 2048}) // the tools' system turn needs more than 512 tokens
	out := runNodeScript(t, dir, "responses_client.js", "BASE_URL="+e.URL+"/v1")
	var got struct {
		Plain  nodeResult `json:"plain"`
		Stream struct {
			Types  []string `json:"types"`
			Deltas string   `json:"deltas"`
			Status string   `json:"status"`
			Text   string   `json:"text"`
			Usage  struct {
				InputTokens  int `json:"input_tokens"`
				OutputTokens int `json:"output_tokens"`
			} `json:"usage"`
		} `json:"stream"`
		Helper struct {
			Deltas string `json:"deltas"`
			Text   string `json:"text"`
		} `json:"helper"`
		Instructions nodeResult `json:"instructions"`
		Call         struct {
			Response nodeResult `json:"response"`
			Call     struct {
				Type      string `json:"type"`
				CallID    string `json:"call_id"`
				Name      string `json:"name"`
				Arguments string `json:"arguments"`
			} `json:"call"`
		} `json:"call"`
		Follow  nodeResult `json:"follow"`
		Unknown struct {
			Status int    `json:"status"`
			Code   string `json:"code"`
			Param  string `json:"param"`
		} `json:"unknown"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("client output %q: %v", out, err)
	}

	p := got.Plain
	if !p.finished() || p.Text == "" {
		t.Errorf("responses.create: %+v", p)
	}
	s := got.Stream
	if len(s.Types) < 4 || s.Types[0] != "response.created" || s.Types[len(s.Types)-1] != "response."+s.Status ||
		s.Deltas == "" || s.Deltas != s.Text || s.Text != p.Text || s.Status != p.Status ||
		s.Usage.InputTokens != p.Usage.InputTokens || s.Usage.OutputTokens != p.Usage.OutputTokens {
		t.Errorf("streamed: %+v; not streamed: %+v", s, p)
	}
	if got.Helper.Deltas != p.Text || got.Helper.Text != p.Text {
		t.Errorf("stream helper: deltas %q, rebuilt text %q; want %q", got.Helper.Deltas, got.Helper.Text, p.Text)
	}
	in := got.Instructions
	if !in.finished() || in.Text == "" || deref(in.Instructions) != "Tell a story." || in.Usage.InputTokens <= p.Usage.InputTokens {
		t.Errorf("with instructions: %+v (without: %d input tokens)", in, p.Usage.InputTokens)
	}
	c := got.Call
	var args map[string]any
	if c.Response.Status != "completed" || c.Call.Type != "function_call" || c.Call.Name != "get_weather" || c.Call.CallID == "" ||
		json.Unmarshal([]byte(c.Call.Arguments), &args) != nil || args["city"] == nil {
		t.Errorf("tool call: %+v", c)
	}
	f := got.Follow
	if !f.finished() || deref(f.Previous) != c.Response.ID ||
		f.Usage.InputTokens <= c.Response.Usage.InputTokens+c.Response.Usage.OutputTokens {
		t.Errorf("after function_call_output: %+v (the call: %+v)", f, c.Response)
	}
	if u := got.Unknown; u.Status != 400 || u.Code != "previous_response_not_found" || u.Param != "previous_response_id" {
		t.Errorf("unknown previous_response_id: %+v", u)
	}
}
