package main

import (
	"strings"
	"testing"

	"ubatch/chat"
	"ubatch/internal/testdata"
)

// TestReplyText: ubatch run prints a reply's thought between Thinking... and ...done thinking.
// and keeps only the answer as the history's content (the thought as reasoning_content), for
// gpt-oss's harmony and for <think>, however the tokens split the markup; a template without
// reasoning markup prints the reply as written.
func TestReplyText(t *testing.T) {
	for _, tc := range []struct {
		name, template, reply string
		printed, content      string
		thought               string
	}{
		{"harmony", "templates/openai-gpt-oss-120b.jinja",
			"<|channel|>analysis<|message|>Say hi.<|end|><|start|>assistant<|channel|>final<|message|>Hi!",
			"Thinking...\nSay hi.\n...done thinking.\n\nHi!", "Hi!", "Say hi."},
		{"think", "templates/Qwen-Qwen3-0.6B.jinja", "<think>\nhmm\n</think>\n\nHello.",
			"Thinking...\nhmm\n...done thinking.\n\nHello.", "Hello.", "hmm"},
		{"no reasoning markup", "templates/meta-llama-Llama-3.1-8B-Instruct.jinja", "<think>x</think> y",
			"<think>x</think> y", "<think>x</think> y", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tmpl, err := chat.Parse(string(testdata.ReadFile(t, tc.template)))
			if err != nil {
				t.Fatal(err)
			}
			for _, size := range []int{1, 4, len(tc.reply)} {
				var out strings.Builder
				r := newReplyText(&out, tmpl)
				for i := 0; i < len(tc.reply); i += size {
					r.add(tc.reply[i:min(len(tc.reply), i+size)])
				}
				r.finish()
				m := r.message()
				if out.String() != tc.printed || m["content"] != tc.content || tc.thought != "" && m["reasoning_content"] != tc.thought ||
					tc.thought == "" && m["reasoning_content"] != nil {
					t.Fatalf("size %d: printed %q, message %v; want %q, content %q, thought %q", size, out.String(), m, tc.printed, tc.content, tc.thought)
				}
			}
		})
	}
}
