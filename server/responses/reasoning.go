package responses

import (
	"crypto/rand"

	"ubatch/chat"
	"ubatch/server"
)

// The reasoning of a /v1/responses reply: with a chat template that teaches <think>...</think>
// (and no reasoning.effort turning it off), the thought is split out of the text into a
// "reasoning" output item before the message, as OpenAI's reasoning models return it: its
// content one reasoning_text part. Streamed, the item is added, its text goes out as
// response.reasoning_text.delta events, then response.reasoning_text.done and
// response.output_item.done, before the message's first event.

// reasoningItem is a reasoning output item; summary stays empty (no summaries are written).
type reasoningItem struct {
	ID      string          `json:"id"`
	Type    string          `json:"type"`
	Status  string          `json:"status"`
	Summary []any           `json:"summary"`
	Content []reasoningText `json:"content"`
}

type reasoningText struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// openReasoning appends the reasoning item (with one empty reasoning_text part) to the output.
func (r *responsesReply) openReasoning() {
	r.thought = &reasoningItem{ID: "rs_" + rand.Text(), Type: "reasoning", Status: "in_progress", Summary: []any{},
		Content: []reasoningText{{Type: "reasoning_text"}}}
	r.resp.Output = append(r.resp.Output, r.thought)
}

// splitWhole takes the reasoning out of a whole reply's text into the reasoning item.
func (r *responsesReply) splitWhole(text string) string {
	if !r.reasoning.Split {
		return text
	}
	thought, content := chat.SplitReasoning(text, r.reasoning.InThought)
	if thought != "" {
		r.openReasoning()
		r.thought.Content[0].Text, r.thought.Status = thought, "completed"
	}
	return content
}

// outputIndex is item's place in the output.
func (r *responsesReply) outputIndex(item any) int {
	for i, o := range r.resp.Output {
		if o == item {
			return i
		}
	}
	return len(r.resp.Output)
}

// streamReasoning sends one delta of the thought, adding the reasoning item first if it is the
// thought's first.
func (r *responsesReply) streamReasoning(sse *server.SSEWriter, delta string) error {
	zero := 0
	if r.thought == nil {
		r.openReasoning()
		idx := r.outputIndex(r.thought)
		added := *r.thought
		if err := r.emit(sse, responseEvent{Type: "response.output_item.added", OutputIndex: &idx, Item: &added}); err != nil {
			return err
		}
	}
	idx := r.outputIndex(r.thought)
	r.thoughtText.WriteString(delta)
	return r.emit(sse, responseEvent{Type: "response.reasoning_text.delta", ItemID: r.thought.ID, OutputIndex: &idx,
		ContentIndex: &zero, Delta: &delta})
}

// closeReasoning ends a streamed thought (once: the text that follows it has begun, or the
// reply ended): its whole text, then the item.
func (r *responsesReply) closeReasoning(sse *server.SSEWriter) error {
	if r.thought == nil || r.thought.Status == "completed" {
		return nil
	}
	zero, idx := 0, r.outputIndex(r.thought)
	part := &r.thought.Content[0]
	part.Text, r.thought.Status = r.thoughtText.String(), "completed"
	if err := r.emit(sse, responseEvent{Type: "response.reasoning_text.done", ItemID: r.thought.ID, OutputIndex: &idx,
		ContentIndex: &zero, Text: &part.Text}); err != nil {
		return err
	}
	return r.emit(sse, responseEvent{Type: "response.output_item.done", OutputIndex: &idx, Item: r.thought})
}
