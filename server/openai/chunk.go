package openai

import (
	"ubatch/chat"
	"ubatch/server"
)

// toolCallDelta is one entry of a streamed delta.tool_calls, as OpenAI, vLLM and llama-server
// send them: the call's first delta has its id, type and name (arguments ""), the next ones its
// index and a fragment of the arguments.
type toolCallDelta struct {
	Index    int    `json:"index"`
	ID       string `json:"id,omitempty"`
	Type     string `json:"type,omitempty"`
	Function struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// chatStream is one streamed choice's reading of the reply: reasoning first, then tool calls
// in what is left.
type chatStream struct {
	reasoning *chat.ReasoningParser // nil: no reasoning split
	tools     *chat.ToolParser      // nil: no tools
	ids       []string              // the ids of the calls started
}

// sendToolDeltas sends each of a choice's tool-call deltas as a chunk of its own, so that a
// call's name arrives before its arguments; with parallel false only the first call goes out.
func (c *chatReply) sendToolDeltas(sse *server.SSEWriter, index int, deltas []chat.ToolDelta) error {
	cs := &c.streams[index]
	for _, d := range deltas {
		if d.Index > 0 && !c.g.Tools.Parallel {
			continue
		}
		var td toolCallDelta
		td.Index = d.Index
		if d.Name != "" {
			cs.ids = append(cs.ids, server.NewCallID())
			td.ID, td.Type, td.Function.Name = cs.ids[d.Index], "function", d.Name
		}
		td.Function.Arguments = d.Arguments
		if err := c.send(sse, chatChoice{Index: index, Delta: &chatDelta{ToolCalls: []toolCallDelta{td}}}); err != nil {
			return err
		}
	}
	return nil
}

// Chunk sends one event of a choice: the assistant role first, then the reasoning and content
// it adds, the tool-call deltas, and at the end what the parsers held back and the finish.
func (c *chatReply) Chunk(sse *server.SSEWriter, ev server.SeqEvent) error {
	index := ev.Index()
	// Each choice opens with the assistant role, as OpenAI's streams do.
	if !c.started[index] {
		c.started[index] = true
		empty := ""
		if err := c.send(sse, chatChoice{Index: index, Delta: &chatDelta{Role: "assistant", Content: &empty}}); err != nil {
			return err
		}
	}
	cs := &c.streams[index]
	reasoning, content := server.SplitThought(cs.reasoning, ev)
	var deltas []chat.ToolDelta
	if cs.tools != nil {
		content = cs.tools.Add(content)
		deltas = cs.tools.TakeDeltas()
	}
	if reasoning != "" || content != "" || len(ev.Tokens) > 0 {
		d := &chatDelta{}
		if reasoning != "" {
			d.ReasoningContent = &reasoning
		}
		if content != "" || reasoning == "" {
			d.Content = &content
		}
		ch := chatChoice{Index: index, Delta: d}
		if c.g.Logprobs {
			ch.Logprobs = chatLogprobsOf(c.s, ev.Tokens)
		}
		if err := c.send(sse, ch); err != nil {
			return err
		}
	}
	if err := c.sendToolDeltas(sse, index, deltas); err != nil || !ev.Done {
		return err
	}
	finish := ev.Finish
	if cs.tools != nil {
		rest, calls := cs.tools.Finish()
		if rest != "" {
			if err := c.send(sse, chatChoice{Index: index, Delta: &chatDelta{Content: &rest}}); err != nil {
				return err
			}
		}
		if err := c.sendToolDeltas(sse, index, cs.tools.TakeDeltas()); err != nil {
			return err
		}
		if len(calls) > 0 {
			finish = toolsFinish(finish)
		}
	}
	return c.send(sse, chatChoice{Index: index, Delta: &chatDelta{}, FinishReason: &finish})
}

// toolsFinish is the finish_reason of a reply with tool calls: "tool_calls", but "length" for
// one cut by max_tokens (its last call may be incomplete), as OpenAI reports it.
func toolsFinish(finish string) string {
	if finish == "length" {
		return finish
	}
	return "tool_calls"
}
