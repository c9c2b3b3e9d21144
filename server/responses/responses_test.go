package responses

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"ubatch/internal/sse"
	"ubatch/server"
	"ubatch/server/servertest"
)

// responseResult decodes a response object as a client reads it.
type responseResult struct {
	ID                string `json:"id"`
	Object            string `json:"object"`
	Status            string `json:"status"`
	Model             string `json:"model"`
	IncompleteDetails *struct {
		Reason string `json:"reason"`
	} `json:"incomplete_details"`
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	PreviousResponseID *string `json:"previous_response_id"`
	Instructions       *string `json:"instructions"`
	Output             []struct {
		ID      string `json:"id"`
		Type    string `json:"type"`
		Status  string `json:"status"`
		Role    string `json:"role"`
		Content []struct {
			Type        string `json:"type"`
			Text        string `json:"text"`
			Annotations []any  `json:"annotations"`
		} `json:"content"`
		CallID    string `json:"call_id"`
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"output"`
	Usage *struct {
		InputTokens        int `json:"input_tokens"`
		OutputTokens       int `json:"output_tokens"`
		TotalTokens        int `json:"total_tokens"`
		InputTokensDetails struct {
			CachedTokens *int `json:"cached_tokens"`
		} `json:"input_tokens_details"`
	} `json:"usage"`
}

// text is the output message's text ("" without one).
func (r *responseResult) text() string {
	var sb strings.Builder
	for _, o := range r.Output {
		if o.Type == "message" {
			for _, c := range o.Content {
				sb.WriteString(c.Text)
			}
		}
	}
	return sb.String()
}

// respond posts a /v1/responses body and decodes the 200 answer.
func respond(e *servertest.Env, body map[string]any) responseResult {
	e.T.Helper()
	var r responseResult
	e.PostJSON("/v1/responses", body, http.StatusOK, &r)
	if r.Object != "response" || !strings.HasPrefix(r.ID, "resp_") || r.Usage == nil ||
		r.Usage.TotalTokens != r.Usage.InputTokens+r.Usage.OutputTokens || r.Usage.InputTokensDetails.CachedTokens == nil {
		e.T.Fatalf("not a response object: %+v", r)
	}
	return r
}

// namedEvent is one event of a Responses stream: its event: name and its data.
type namedEvent struct {
	name string
	data map[string]any
}

// streamResponse posts body with stream: true and returns the events, checking that each
// event's name is its data's type and that sequence numbers count from 0.
func streamResponse(e *servertest.Env, body map[string]any) []namedEvent {
	e.T.Helper()
	resp := e.PostStream("/v1/responses", body)
	defer resp.Body.Close()
	var events []namedEvent
	sc := sse.NewReader(resp.Body, 1<<20)
	sc.All = true
	for sc.Next() {
		name, line := sc.Name(), sc.Raw()
		// The server writes each event as its name and one data line: anything else is unexpected.
		if name == "" || string(line) != "event: "+name+"\ndata: "+sc.Text()+"\n\n" {
			e.T.Fatalf("unexpected SSE event %q", line)
		}
		var d map[string]any
		if err := json.Unmarshal(sc.Data(), &d); err != nil {
			e.T.Fatalf("event %s: %v", line, err)
		}
		if d["type"] != name || d["sequence_number"] != float64(len(events)) {
			e.T.Fatalf("event %d named %q: %s", len(events), name, line)
		}
		events = append(events, namedEvent{name, d})
	}
	if err := sc.Err(); err != nil {
		e.T.Fatal(err)
	}
	return events
}

// chatAnswer is the prompt size and the text /v1/chat/completions gives msgs (and tools) at
// temperature 0 within maxTokens.
func chatAnswer(e *servertest.Env, msgs []map[string]any, tools []any, maxTokens int) (int, string) {
	e.T.Helper()
	body := map[string]any{"messages": msgs, "max_tokens": maxTokens, "temperature": 0}
	if tools != nil {
		body["tools"] = tools
	}
	var r struct {
		Choices []struct {
			Message struct {
				Content *string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
		Usage server.UsageJSON `json:"usage"`
	}
	e.PostJSON("/v1/chat/completions", body, http.StatusOK, &r)
	return r.Usage.PromptTokens, deref(r.Choices[0].Message.Content)
}

// weather is a tool in the Responses API's flat shape and in chat's.
var (
	weatherParams = map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string", "maxLength": 12}},
		"required": []any{"city"}}
	weatherFlat = map[string]any{"type": "function", "name": "get_weather", "description": "The weather in a city", "parameters": weatherParams}
	weatherChat = map[string]any{"type": "function", "function": map[string]any{"name": "get_weather", "description": "The weather in a city", "parameters": weatherParams}}
)

// TestResponsesInput: each input shape renders as the chat messages it stands for: the prompt
// has as many tokens as /v1/chat/completions gives those messages, and the greedy text is the
// same.
func TestResponsesInput(t *testing.T) {
	e := newEnv(t, servertest.Options{NCtx: 2048})
	call := []any{map[string]any{"id": "call_1", "type": "function", "function": map[string]any{"name": "get_weather", "arguments": `{"city":"Paris"}`}}}
	tests := []struct {
		name  string
		body  map[string]any
		chat  []map[string]any
		tools []any
	}{
		{name: "string", body: map[string]any{"input": "Once upon a time"},
			chat: []map[string]any{{"role": "user", "content": "Once upon a time"}}},
		{name: "instructions", body: map[string]any{"input": "Once upon a time", "instructions": "Tell a story."},
			chat: []map[string]any{{"role": "system", "content": "Tell a story."}, {"role": "user", "content": "Once upon a time"}}},
		{name: "input_text parts", body: map[string]any{"input": []any{map[string]any{"role": "user", "content": []any{
			map[string]any{"type": "input_text", "text": "Once "}, map[string]any{"type": "input_text", "text": "upon a time"}}}}},
			chat: []map[string]any{{"role": "user", "content": "Once upon a time"}}},
		{name: "developer, history with output_text", body: map[string]any{"input": []any{
			map[string]any{"role": "developer", "content": "Tell stories."},
			map[string]any{"type": "message", "role": "user", "content": "Hi"},
			map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "output_text", "text": "Hello."}}},
			map[string]any{"role": "user", "content": "A story?"}}},
			chat: []map[string]any{{"role": "system", "content": "Tell stories."}, {"role": "user", "content": "Hi"},
				{"role": "assistant", "content": "Hello."}, {"role": "user", "content": "A story?"}}},
		{name: "function_call and its output, flat tools", body: map[string]any{"tools": []any{weatherFlat}, "input": []any{
			map[string]any{"role": "user", "content": "Weather?"},
			map[string]any{"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": `{"city":"Paris"}`},
			map[string]any{"type": "function_call_output", "call_id": "call_1", "output": "22C"}}},
			chat: []map[string]any{{"role": "user", "content": "Weather?"}, {"role": "assistant", "content": "", "tool_calls": call},
				{"role": "tool", "tool_call_id": "call_1", "content": "22C"}},
			tools: []any{weatherChat}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.body["max_output_tokens"], tt.body["temperature"] = 6, 0
			r := respond(e, tt.body)
			prompt, text := chatAnswer(e, tt.chat, tt.tools, 6)
			if r.Usage.InputTokens != prompt || r.text() != text || text == "" {
				t.Fatalf("input_tokens %d, text %q; chat: prompt %d, text %q", r.Usage.InputTokens, r.text(), prompt, text)
			}
			if r.Status != "incomplete" && r.Status != "completed" || r.Usage.OutputTokens < 1 || r.Model != "stories" {
				t.Fatalf("%+v", r)
			}
			if tt.body["instructions"] != nil && deref(r.Instructions) != tt.body["instructions"] {
				t.Errorf("instructions %v not echoed", r.Instructions)
			}
		})
	}
	// The route is served without /v1 too.
	var r responseResult
	e.PostJSON("/responses", map[string]any{"input": "Hi", "max_output_tokens": 2}, http.StatusOK, &r)
	if r.Object != "response" {
		t.Errorf("/responses: %+v", r)
	}
}

// TestResponsesStatus: a reply cut by max_output_tokens is incomplete (reason
// max_output_tokens, its message too), one the grammar ends is completed, streamed or not.
func TestResponsesStatus(t *testing.T) {
	e := newEnv(t, servertest.Options{})
	tests := []struct {
		name       string
		body       map[string]any
		status     string
		reason     string
		outputToks int // 0: not checked
		text       string
	}{
		{name: "cut", body: map[string]any{"input": "Once upon a time", "max_output_tokens": 3, "ignore_eos": true},
			status: "incomplete", reason: "max_output_tokens", outputToks: 3},
		{name: "ended", body: map[string]any{"input": "Once upon a time", "max_output_tokens": 30, "grammar": `root ::= "Once"`},
			status: "completed", text: "Once"},
		{name: "empty", body: map[string]any{"input": "Once upon a time", "max_output_tokens": 30, "grammar": `root ::= ""`},
			status: "completed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.body["temperature"] = 0
			r := respond(e, tt.body)
			reason := ""
			if r.IncompleteDetails != nil {
				reason = r.IncompleteDetails.Reason
			}
			if r.Status != tt.status || reason != tt.reason || len(r.Output) != 1 || r.Output[0].Status != tt.status ||
				tt.outputToks > 0 && r.Usage.OutputTokens != tt.outputToks || tt.text != "" && r.text() != tt.text {
				t.Fatalf("%+v, want status %s (%q)", r, tt.status, tt.reason)
			}
			events := streamResponse(e, tt.body)
			last := events[len(events)-1]
			want := map[string]string{"completed": "response.completed", "incomplete": "response.incomplete"}[tt.status]
			resp, _ := last.data["response"].(map[string]any)
			output, _ := resp["output"].([]any)
			if last.name != want || resp["status"] != tt.status || len(output) != 1 {
				t.Fatalf("last event %s %v, want %s", last.name, last.data, want)
			}
		})
	}
}

// TestResponsesStream: a streamed response's events come in OpenAI's order, their deltas join
// into the done text, and the final response is the one a request without stream gets.
func TestResponsesStream(t *testing.T) {
	e := newEnv(t, servertest.Options{})
	body := map[string]any{"input": "Once upon a time", "max_output_tokens": 12, "temperature": 0, "instructions": "Tell a story."}
	plain := respond(e, body)
	events := streamResponse(e, body)
	var names []string
	var deltas strings.Builder
	for _, ev := range events {
		if ev.name == "response.output_text.delta" {
			deltas.WriteString(ev.data["delta"].(string))
			if len(names) > 0 && names[len(names)-1] == ev.name {
				continue // one name for a run of deltas
			}
		}
		names = append(names, ev.name)
	}
	final := map[string]string{"completed": "response.completed", "incomplete": "response.incomplete"}[plain.Status]
	want := []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
		"response.output_text.delta", "response.output_text.done", "response.content_part.done", "response.output_item.done", final}
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Fatalf("events %v, want %v", names, want)
	}
	if created := events[0].data["response"].(map[string]any); created["status"] != "in_progress" || created["id"] == "" {
		t.Errorf("response.created: %v", created)
	}
	done := events[len(events)-4].data["text"]
	var last responseResult
	raw, _ := json.Marshal(events[len(events)-1].data["response"])
	json.Unmarshal(raw, &last)
	if deltas.String() == "" || done != deltas.String() || last.text() != deltas.String() || plain.text() != deltas.String() {
		t.Fatalf("deltas %q, done %q, final %q, not streamed %q", deltas.String(), done, last.text(), plain.text())
	}
	if last.Usage == nil || last.Usage.InputTokens != plain.Usage.InputTokens || last.Usage.OutputTokens != plain.Usage.OutputTokens ||
		last.ID != events[0].data["response"].(map[string]any)["id"] {
		t.Fatalf("final response %+v, not streamed %+v", last, plain)
	}
}

// TestResponsesStreamFailure: a generation that fails once the stream is open ends it with
// response.failed and an error event naming the field, not a completed response.
func TestResponsesStreamFailure(t *testing.T) {
	e := newEnv(t, servertest.Options{})
	events := streamResponse(e, map[string]any{"input": "x", "grammar": `root ::= "a"`, "ignore_eos": true, "max_output_tokens": 8})
	n := len(events)
	if n < 4 || events[n-2].name != "response.failed" || events[n-1].name != "error" {
		t.Fatalf("events %v", events)
	}
	failed := events[n-2].data["response"].(map[string]any)
	errObj, _ := failed["error"].(map[string]any)
	if failed["status"] != "failed" || errObj["code"] != "grammar_dead_end" ||
		events[n-1].data["param"] != "ignore_eos" || events[n-1].data["code"] != "grammar_dead_end" {
		t.Fatalf("failure events %v %v", events[n-2].data, events[n-1].data)
	}
}

// TestResponsesErrors: what this server does not implement, and malformed input, are 400s
// naming the field.
func TestResponsesErrors(t *testing.T) {
	e := newEnv(t, servertest.Options{})
	many := make([]any, maxResponseItems+1)
	for i := range many {
		many[i] = map[string]any{"role": "user", "content": "x"}
	}
	tests := []struct {
		name  string
		body  map[string]any
		param string
		want  string // in the message
	}{
		{"no input", map[string]any{}, "input", "required"},
		{"empty input", map[string]any{"input": []any{}}, "input", "empty"},
		{"too many items", map[string]any{"input": many}, "input", "at most 1024"},
		{"input not text or items", map[string]any{"input": 3}, "input", "string or a list"},
		{"image part", map[string]any{"input": []any{map[string]any{"role": "user", "content": []any{
			map[string]any{"type": "input_image", "image_url": "http://x/a.png"}}}}}, "input[0].content[0]", "text only"},
		{"unknown item type", map[string]any{"input": []any{map[string]any{"type": "item_reference", "id": "msg_1"}}}, "input[0].type", "item_reference"},
		{"no role", map[string]any{"input": []any{map[string]any{"content": "x"}}}, "input[0].role", "no role"},
		{"bad role", map[string]any{"input": []any{map[string]any{"role": "tool", "content": "x"}}}, "input[0].role", "tool"},
		{"call without id", map[string]any{"input": []any{map[string]any{"type": "function_call_output", "output": "x"}}}, "input[0]", "call_id"},
		{"max_output_tokens 0", map[string]any{"input": "x", "max_output_tokens": 0}, "max_output_tokens", ">= 1"},
		{"background", map[string]any{"input": "x", "background": true}, "background", "not supported"},
		{"include", map[string]any{"input": "x", "include": []any{"message.output_text.logprobs"}}, "include", "not supported"},
		{"truncation auto", map[string]any{"input": "x", "truncation": "auto"}, "truncation", "not supported"},
		{"reasoning effort without a thinking switch", map[string]any{"input": "x", "reasoning": map[string]any{"effort": "high"}}, "reasoning.effort", "does not support thinking"},
		{"reasoning effort unknown", map[string]any{"input": "x", "reasoning": map[string]any{"effort": "max"}}, "reasoning.effort", "use none"},
		{"reasoning summary", map[string]any{"input": "x", "reasoning": map[string]any{"summary": "auto"}}, "reasoning.summary", "not supported"},
		{"stored prompt", map[string]any{"input": "x", "prompt": map[string]any{"id": "pmpt_1"}}, "prompt", "not supported"},
		{"conversation", map[string]any{"input": "x", "conversation": "conv_1"}, "conversation", "not supported"},
		{"top_logprobs", map[string]any{"input": "x", "top_logprobs": 2}, "top_logprobs", "not supported"},
		{"built-in tool", map[string]any{"input": "x", "tools": []any{map[string]any{"type": "web_search"}}}, "tools[0].type", "web_search"},
		{"bad tool name", map[string]any{"input": "x", "tools": []any{map[string]any{"type": "function", "name": "a b"}}}, "tools[0].name", "letters"},
		{"tool_choice of a built-in tool", map[string]any{"input": "x", "tools": []any{weatherFlat},
			"tool_choice": map[string]any{"type": "file_search"}}, "tool_choice", "tool_choice"},
		{"tool_choice of no tool", map[string]any{"input": "x", "tools": []any{weatherFlat},
			"tool_choice": map[string]any{"type": "function", "name": "nope"}}, "tool_choice", "nope"},
		{"json_schema without schema", map[string]any{"input": "x", "text": map[string]any{"format": map[string]any{"type": "json_schema", "name": "a"}}},
			"text.format.schema", "schema"},
		{"format type", map[string]any{"input": "x", "text": map[string]any{"format": map[string]any{"type": "xml"}}}, "text.format.type", "xml"},
		{"bad schema", map[string]any{"input": "x", "text": map[string]any{"format": map[string]any{"type": "json_schema", "schema": map[string]any{"type": 7}}}},
			"text.format", "text.format"},
		{"verbosity", map[string]any{"input": "x", "text": map[string]any{"verbosity": "low"}}, "text.verbosity", "low"},
		{"metadata pairs", map[string]any{"input": "x", "metadata": func() map[string]any {
			m := map[string]any{}
			for i := range 17 {
				m[string(rune('a'+i))] = "v"
			}
			return m
		}()}, "metadata", "at most 16"},
		{"unknown previous response", map[string]any{"input": "x", "previous_response_id": "resp_nope"}, "previous_response_id", "resp_nope"},
		{"temperature", map[string]any{"input": "x", "temperature": -1}, "temperature", "temperature"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := e.CheckBadParam(t, "/v1/responses", tt.body, tt.param, tt.want)
			if tt.param == "previous_response_id" && deref(body.Error.Code) != "previous_response_not_found" {
				t.Errorf("code %v, want previous_response_not_found", deref(body.Error.Code))
			}
		})
	}
	// Fields that do not change the output are accepted.
	respond(e, map[string]any{"input": "x", "max_output_tokens": 2, "store": true, "user": "u", "metadata": map[string]any{"k": "v"},
		"reasoning": map[string]any{"effort": nil}, "truncation": "disabled", "background": false, "service_tier": "auto",
		"text": map[string]any{"format": map[string]any{"type": "text"}, "verbosity": "medium"}, "parallel_tool_calls": true})
}

// TestResponsesPrevious: previous_response_id continues a stored conversation (its input and
// output, not its instructions, as OpenAI does); GET returns a stored response, DELETE forgets
// it; store: false keeps nothing.
func TestResponsesPrevious(t *testing.T) {
	e := newEnv(t, servertest.Options{NCtx: 1024})
	first := respond(e, map[string]any{"input": "Once upon a time", "instructions": "Tell a story.", "max_output_tokens": 6, "temperature": 0})
	second := respond(e, map[string]any{"input": "And then?", "previous_response_id": first.ID, "max_output_tokens": 6, "temperature": 0})
	prompt, text := chatAnswer(e, []map[string]any{{"role": "user", "content": "Once upon a time"},
		{"role": "assistant", "content": first.text()}, {"role": "user", "content": "And then?"}}, nil, 6)
	if second.Usage.InputTokens != prompt || second.text() != text || deref(second.PreviousResponseID) != first.ID {
		t.Fatalf("continued: input_tokens %d, text %q, previous %v; chat: %d, %q", second.Usage.InputTokens, second.text(),
			second.PreviousResponseID, prompt, text)
	}
	// A third turn carries both earlier ones.
	third := respond(e, map[string]any{"input": "The end.", "previous_response_id": second.ID, "max_output_tokens": 2})
	if third.Usage.InputTokens <= second.Usage.InputTokens+second.Usage.OutputTokens {
		t.Errorf("third turn: %d input tokens, the second had %d in and %d out", third.Usage.InputTokens, second.Usage.InputTokens, second.Usage.OutputTokens)
	}

	get := func(id string, want int) responseResult {
		t.Helper()
		resp, err := e.Client.Get(e.URL + "/v1/responses/" + id)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != want {
			t.Fatalf("GET %s: %d, want %d: %s", id, resp.StatusCode, want, data)
		}
		var r responseResult
		json.Unmarshal(data, &r)
		return r
	}
	if got := get(first.ID, http.StatusOK); got.ID != first.ID || got.text() != first.text() || got.Status != first.Status {
		t.Errorf("GET: %+v, created %+v", got, first)
	}
	req, _ := http.NewRequest(http.MethodDelete, e.URL+"/responses/"+first.ID, nil)
	resp, err := e.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var del map[string]any
	json.NewDecoder(resp.Body).Decode(&del)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || del["deleted"] != true || del["id"] != first.ID {
		t.Fatalf("DELETE: %d %v", resp.StatusCode, del)
	}
	get(first.ID, http.StatusNotFound)
	e.PostJSON("/v1/responses", map[string]any{"input": "x", "previous_response_id": first.ID}, http.StatusBadRequest, nil)

	unstored := respond(e, map[string]any{"input": "x", "max_output_tokens": 2, "store": false})
	get(unstored.ID, http.StatusNotFound)
}

// TestResponsesTools: a forced call of a flat function tool comes back as a function_call item
// (streamed too, its arguments in several deltas), and its function_call_output, after previous_response_id or in full input
// items, renders as chat's tool message after the assistant's call.
func TestResponsesTools(t *testing.T) {
	e := newEnv(t, servertest.Options{NCtx: 2048})
	body := map[string]any{"input": "Weather in Paris?", "tools": []any{weatherFlat}, "max_output_tokens": 160, "temperature": 0,
		"tool_choice": map[string]any{"type": "function", "name": "get_weather"}}
	r := respond(e, body)
	if len(r.Output) != 1 || r.Status != "completed" {
		t.Fatalf("output %+v", r)
	}
	call := r.Output[0]
	var args map[string]any
	if call.Type != "function_call" || call.Name != "get_weather" || !strings.HasPrefix(call.CallID, "call_") ||
		!strings.HasPrefix(call.ID, "fc_") || json.Unmarshal([]byte(call.Arguments), &args) != nil || args["city"] == nil {
		t.Fatalf("call %+v", call)
	}

	// Streamed, the arguments come in several deltas, as chat streams them, joining into the
	// non-streamed call's.
	events := streamResponse(e, body)
	var names []string
	var joined strings.Builder
	fragments := 0
	for _, ev := range events {
		if ev.name == "response.function_call_arguments.delta" {
			joined.WriteString(ev.data["delta"].(string))
			if fragments++; fragments > 1 {
				continue // one name for a run of deltas
			}
		}
		names = append(names, ev.name)
	}
	want := "response.created response.in_progress response.output_item.added response.function_call_arguments.delta " +
		"response.function_call_arguments.done response.output_item.done response.completed"
	if strings.Join(names, " ") != want {
		t.Fatalf("streamed call: events %v", names)
	}
	item := events[len(events)-2].data["item"].(map[string]any)
	done := events[len(events)-3].data["arguments"]
	if item["type"] != "function_call" || item["arguments"] != call.Arguments || joined.String() != call.Arguments ||
		done != call.Arguments || fragments < 3 {
		t.Fatalf("streamed call %v (%d deltas joining into %q, done %v), not streamed %+v", item, fragments, joined.String(), done, call)
	}

	output := map[string]any{"type": "function_call_output", "call_id": call.CallID, "output": "22C and sunny"}
	follow := map[string]any{"tools": []any{weatherFlat}, "max_output_tokens": 4, "temperature": 0}
	follow["input"], follow["previous_response_id"] = []any{output}, r.ID
	viaPrevious := respond(e, follow)
	delete(follow, "previous_response_id")
	follow["input"] = []any{map[string]any{"role": "user", "content": "Weather in Paris?"},
		map[string]any{"type": "function_call", "call_id": call.CallID, "name": call.Name, "arguments": call.Arguments}, output}
	viaItems := respond(e, follow)
	prompt, text := chatAnswer(e, []map[string]any{{"role": "user", "content": "Weather in Paris?"},
		{"role": "assistant", "content": "", "tool_calls": []any{map[string]any{"id": call.CallID, "type": "function",
			"function": map[string]any{"name": call.Name, "arguments": call.Arguments}}}},
		{"role": "tool", "tool_call_id": call.CallID, "content": "22C and sunny"}}, []any{weatherChat}, 4)
	for _, got := range []responseResult{viaPrevious, viaItems} {
		if got.Usage.InputTokens != prompt || got.text() != text {
			t.Errorf("after the call: input_tokens %d, text %q; chat %d, %q", got.Usage.InputTokens, got.text(), prompt, text)
		}
	}
}

// TestResponsesTextFormat: text.format json_schema constrains the output as chat's
// response_format does.
func TestResponsesTextFormat(t *testing.T) {
	e := newEnv(t, servertest.Options{})
	schema := map[string]any{"type": "object", "properties": map[string]any{"name": map[string]any{"type": "string", "maxLength": 8},
		"age": map[string]any{"type": "integer", "maximum": 99}}, "required": []any{"name", "age"}, "additionalProperties": false}
	r := respond(e, map[string]any{"input": "A girl.", "max_output_tokens": 64, "temperature": 0,
		"text": map[string]any{"format": map[string]any{"type": "json_schema", "name": "person", "schema": schema, "strict": true}}})
	var person struct {
		Name *string `json:"name"`
		Age  *int    `json:"age"`
	}
	if err := json.Unmarshal([]byte(r.text()), &person); err != nil || person.Name == nil || person.Age == nil || r.Status != "completed" {
		t.Fatalf("%s %q does not follow the schema: %v", r.Status, r.text(), err)
	}
}

// TestResponseStoreBound: the store keeps the most recently used responses within its count
// and byte bounds, and does not keep one larger than the byte bound.
func TestResponseStoreBound(t *testing.T) {
	resp := func(id string, text int) *responseObject {
		return &responseObject{ID: id, Output: []any{&messageItem{Content: []outputText{{Text: strings.Repeat("x", text)}}}}}
	}
	conv := []map[string]any{{"role": "user", "content": "hi"}}
	st := &responseStore{maxEntries: 3, maxBytes: 4000}
	for _, id := range []string{"a", "b", "c"} {
		st.put(resp(id, 100), conv)
	}
	st.get("a") // a is now the most recently used: b goes first
	st.put(resp("d", 100), conv)
	has := func() string {
		var got []string
		for _, id := range []string{"a", "b", "c", "d", "e", "f"} {
			if _, ok := st.get(id); ok {
				got = append(got, id)
			}
		}
		return strings.Join(got, ",")
	}
	if got := has(); got != "a,c,d" {
		t.Fatalf("after a fourth response: %s, want a,c,d", got)
	}
	st.put(resp("e", 5000), conv) // over the byte bound alone: not kept, nothing evicted
	if got := has(); got != "a,c,d" {
		t.Fatalf("after an oversized response: %s, want a,c,d", got)
	}
	st.put(resp("f", 3000), conv) // fits alone: the others go to make room
	if got := has(); got != "f" || st.bytes > st.maxBytes {
		t.Fatalf("after a large response: %s (%d bytes of %d), want f", got, st.bytes, st.maxBytes)
	}
	total := 0
	for el := st.order.Front(); el != nil; el = el.Next() {
		total += el.Value.(*storedResponse).size()
	}
	if total != st.bytes || st.order.Len() != len(st.byID) {
		t.Fatalf("accounting: %d bytes counted, %d held; %d in order, %d by id", st.bytes, total, st.order.Len(), len(st.byID))
	}
	var zero responseStore // the server's: default bounds
	zero.put(resp("z", 10), conv)
	if _, ok := zero.get("z"); !ok || zero.maxEntries != defaultMaxStoredResponses || zero.maxBytes != defaultMaxStoredBytes {
		t.Fatalf("zero store: %d entries, bounds %d and %d", zero.order.Len(), zero.maxEntries, zero.maxBytes)
	}
}
