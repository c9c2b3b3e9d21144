package responses

import (
	"crypto/rand"
	"encoding/json"

	"ubatch/chat"
	"ubatch/server"
)

// responseEvent is one event of a streamed response; each type sets its own fields (OpenAI's
// ResponseStreamEvent union), the others are omitted.
type responseEvent struct {
	Type           string          `json:"type"`
	SequenceNumber int             `json:"sequence_number"`
	Response       *responseObject `json:"response,omitempty"`
	OutputIndex    *int            `json:"output_index,omitempty"`
	ItemID         string          `json:"item_id,omitempty"`
	ContentIndex   *int            `json:"content_index,omitempty"`
	Item           any             `json:"item,omitempty"`
	Part           *outputText     `json:"part,omitempty"`
	Delta          *string         `json:"delta,omitempty"`
	Text           *string         `json:"text,omitempty"`
	Name           string          `json:"name,omitempty"`
	Arguments      *string         `json:"arguments,omitempty"`
	Logprobs       server.RawJSON  `json:"logprobs,omitempty"`
	// The error event's.
	Code    *string `json:"code,omitempty"`
	Message string  `json:"message,omitempty"`
	Param   *string `json:"param,omitempty"`
}

// emit sends ev, numbered, as an SSE event named by its type (the Responses API's streams name
// every event; the SDKs dispatch on the name).
func (r *responsesReply) emit(sse *server.SSEWriter, ev responseEvent) error {
	ev.SequenceNumber = r.seq
	r.seq++
	b, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	return sse.SendEvent(ev.Type, b)
}

// begin opens the stream with response.created and response.in_progress, and makes the
// stream's failures response.failed and error events.
func (r *responsesReply) Begin(sse *server.SSEWriter) error {
	sse.ErrorEvent = func(err error) error { return r.fail(sse, err) }
	if err := r.emit(sse, responseEvent{Type: "response.created", Response: &r.resp}); err != nil {
		return err
	}
	return r.emit(sse, responseEvent{Type: "response.in_progress", Response: &r.resp})
}

func (r *responsesReply) Chunk(sse *server.SSEWriter, ev server.SeqEvent) error {
	thought, text := server.SplitThought(r.thinking, ev)
	if thought != "" {
		if err := r.streamReasoning(sse, thought); err != nil {
			return err
		}
	}
	if text != "" || ev.Done {
		if err := r.closeReasoning(sse); err != nil {
			return err
		}
	}
	var deltas []chat.ToolDelta
	if r.parser != nil {
		text = r.parser.Add(text)
		deltas = r.parser.TakeDeltas()
		if ev.Done {
			rest, _ := r.parser.Finish() // (its calls are what the deltas joined into)
			text, deltas = text+rest, append(deltas, r.parser.TakeDeltas()...)
		}
	}
	if text != "" {
		if err := r.streamText(sse, text); err != nil {
			return err
		}
	}
	if err := r.streamCallDeltas(sse, deltas); err != nil || !ev.Done {
		return err
	}
	if r.msg == nil && len(r.calls) == 0 {
		// An empty reply is still one (empty) message, as without streaming.
		if err := r.openStreamMessage(sse); err != nil {
			return err
		}
	}
	r.settle(ev.Finish)
	if r.msg != nil {
		if err := r.closeMessage(sse); err != nil {
			return err
		}
	}
	for _, it := range r.calls {
		if err := r.endCall(sse, it); err != nil {
			return err
		}
	}
	return nil
}

// openStreamMessage starts the output message and its text part.
func (r *responsesReply) openStreamMessage(sse *server.SSEWriter) error {
	zero := 0
	r.openMessage()
	idx := r.outputIndex(r.msg)
	added := *r.msg
	added.Content = []outputText{}
	if err := r.emit(sse, responseEvent{Type: "response.output_item.added", OutputIndex: &idx, Item: &added}); err != nil {
		return err
	}
	return r.emit(sse, responseEvent{Type: "response.content_part.added", ItemID: r.msg.ID, OutputIndex: &idx,
		ContentIndex: &zero, Part: &outputText{Type: "output_text", Annotations: []any{}}})
}

// streamText sends one text delta, opening the output message first if this is its first.
func (r *responsesReply) streamText(sse *server.SSEWriter, text string) error {
	zero := 0
	if r.msg == nil {
		if err := r.openStreamMessage(sse); err != nil {
			return err
		}
	}
	r.text.WriteString(text)
	idx := r.outputIndex(r.msg)
	return r.emit(sse, responseEvent{Type: "response.output_text.delta", ItemID: r.msg.ID, OutputIndex: &idx,
		ContentIndex: &zero, Delta: &text, Logprobs: "[]"})
}

// closeMessage sends the end of the output message: its whole text, part and item.
func (r *responsesReply) closeMessage(sse *server.SSEWriter) error {
	zero, idx := 0, r.outputIndex(r.msg)
	part := &r.msg.Content[0]
	part.Text = r.text.String()
	if err := r.emit(sse, responseEvent{Type: "response.output_text.done", ItemID: r.msg.ID, OutputIndex: &idx,
		ContentIndex: &zero, Text: &part.Text, Logprobs: "[]"}); err != nil {
		return err
	}
	if err := r.emit(sse, responseEvent{Type: "response.content_part.done", ItemID: r.msg.ID, OutputIndex: &idx,
		ContentIndex: &zero, Part: part}); err != nil {
		return err
	}
	return r.emit(sse, responseEvent{Type: "response.output_item.done", OutputIndex: &idx, Item: r.msg})
}

// streamCallDeltas sends the tool parser's deltas as chat streams them: a call's item is added
// once its function is known, then its arguments go out in fragments as the model writes them
// (response.function_call_arguments.delta); without parallel_tool_calls only the first call.
func (r *responsesReply) streamCallDeltas(sse *server.SSEWriter, deltas []chat.ToolDelta) error {
	for _, d := range deltas {
		if d.Index > 0 && !r.g.Tools.Parallel {
			continue
		}
		if d.Name != "" {
			it := &functionCallItem{ID: "fc_" + rand.Text(), Type: "function_call", Status: "in_progress", CallID: server.NewCallID(), Name: d.Name}
			r.resp.Output = append(r.resp.Output, it)
			r.calls = append(r.calls, it)
			idx, added := r.outputIndex(it), *it
			if err := r.emit(sse, responseEvent{Type: "response.output_item.added", OutputIndex: &idx, Item: &added}); err != nil {
				return err
			}
		}
		if d.Arguments == "" || d.Index >= len(r.calls) {
			continue
		}
		it := r.calls[d.Index]
		it.Arguments += d.Arguments
		idx, frag := r.outputIndex(it), d.Arguments
		if err := r.emit(sse, responseEvent{Type: "response.function_call_arguments.delta", ItemID: it.ID, OutputIndex: &idx, Delta: &frag}); err != nil {
			return err
		}
	}
	return nil
}

// endCall sends the end of a streamed function call: its whole arguments, then the item.
func (r *responsesReply) endCall(sse *server.SSEWriter, it *functionCallItem) error {
	idx := r.outputIndex(it)
	it.Status = "completed"
	if err := r.emit(sse, responseEvent{Type: "response.function_call_arguments.done", ItemID: it.ID, OutputIndex: &idx,
		Name: it.Name, Arguments: &it.Arguments}); err != nil {
		return err
	}
	return r.emit(sse, responseEvent{Type: "response.output_item.done", OutputIndex: &idx, Item: it})
}

// End sends the finished response (response.completed, or response.incomplete when cut by
// max_output_tokens) once its usage is known, and stores it. Responses streams have no [DONE].
func (r *responsesReply) End(sse *server.SSEWriter, u server.UsageJSON) error {
	r.finishUsage(u)
	typ := "response.completed"
	if r.resp.Status == "incomplete" {
		typ = "response.incomplete"
	}
	return r.emit(sse, responseEvent{Type: typ, Response: &r.resp})
}

// fail reports a failure after the stream started: the response, failed, then the error (the
// SDKs throw on an error event, so the failed response comes first).
func (r *responsesReply) fail(sse *server.SSEWriter, err error) error {
	if r.failed {
		return nil
	}
	r.failed = true
	ae := server.ToAPIError(err)
	code := ae.Code
	if code == "" {
		code = ae.Type
	}
	r.resp.Status, r.resp.Error = "failed", &responseError{Code: code, Message: ae.Message}
	if err := r.emit(sse, responseEvent{Type: "response.failed", Response: &r.resp}); err != nil {
		return err
	}
	ev := responseEvent{Type: "error", Code: &code, Message: ae.Message}
	if ae.Param != "" {
		ev.Param = &ae.Param
	}
	return r.emit(sse, ev)
}
