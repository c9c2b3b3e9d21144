package chat

import "testing"

func TestSplitReasoning(t *testing.T) {
	for _, tc := range []struct {
		name      string
		text      string
		inThought bool
		reasoning string
		content   string
	}{
		{"think then answer", "<think>\nlet me see\n</think>\n\nIt is four.", false, "let me see", "It is four."},
		{"blanks before the tag", "\n <think>a b</think>c", false, "a b", "c"},
		{"no thought", "Just an answer.", false, "", "Just an answer."},
		{"tag later is content", "Answer <think>x</think>", false, "", "Answer <think>x</think>"},
		{"unclosed thought", "<think>still thinking  ", false, "still thinking", ""},
		{"empty thought", "<think>\n\n</think>\n\nHi", false, "", "Hi"},
		{"opened by the prompt", "reasoning here\n</think>\n\nanswer", true, "reasoning here", "answer"},
		{"opened by the prompt, never closed", "only reasoning", true, "only reasoning", ""},
		{"partial open tag only", "<thi", false, "", "<thi"},
		{"partial close tag at the end", "<think>x </thi", false, "x </thi", ""},
		{"close tag look-alike inside", "<think>a </thinker> b</think>c", false, "a </thinker> b", "c"},
		{"content keeps its inner blanks", "<think>t</think> a  b ", false, "t", "a  b "},
		// Gemma 4's thought channel, as its template teaches it.
		{"gemma4 thought then answer", "<|channel>thought\nweigh it\n<channel|>It is four.", false, "weigh it", "It is four."},
		{"gemma4 empty thought", "<|channel>thought\n<channel|>Hi", false, "", "Hi"},
		{"gemma4 unclosed thought", "<|channel>thought\nstill", false, "still", ""},
		{"gemma4 close tag is its own", "<|channel>thought a </think> b<channel|>c", false, "a </think> b", "c"},
		{"gemma4 other channel is content", "<|channel>final x", false, "", "<|channel>final x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, c := SplitReasoning(tc.text, tc.inThought)
			if r != tc.reasoning || c != tc.content {
				t.Fatalf("whole: reasoning %q content %q, want %q %q", r, c, tc.reasoning, tc.content)
			}
			// In pieces of every size, the same texts.
			for size := 1; size <= 9; size++ {
				p := NewReasoningParser(tc.inThought)
				var rs, cs string
				for i := 0; i < len(tc.text); i += size {
					r, c := p.Add(tc.text[i:min(len(tc.text), i+size)])
					rs, cs = rs+r, cs+c
				}
				r, c := p.Finish()
				if rs+r != tc.reasoning || cs+c != tc.content {
					t.Fatalf("pieces of %d: reasoning %q content %q, want %q %q", size, rs+r, cs+c, tc.reasoning, tc.content)
				}
			}
		})
	}
}

func TestDetectReasoning(t *testing.T) {
	for _, tc := range []struct {
		name, template, prompt string
		format                 ReasoningFormat
		open                   bool
	}{
		{"qwen3 thinking", "...<think>...", "<|im_start|>assistant\n", ReasoningThink, false},
		{"qwen3 enable_thinking false", "...<think>...", "<|im_start|>assistant\n<think>\n\n</think>\n\n", ReasoningThink, false},
		{"r1 distill opens it", "...<think>...", "<｜Assistant｜><think>\n", ReasoningThink, true},
		{"chatml", "<|im_start|>", "<|im_start|>assistant\n", ReasoningNone, false},
		{"gemma4", "{{- '<|channel>thought\n' -}}...<channel|>", "<|turn>model\n", ReasoningGemma4, false},
		{"harmony is not gemma4", "<|channel|>analysis", "<|start|>assistant", ReasoningHarmony, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if f := DetectReasoningFormat(tc.template); f != tc.format {
				t.Errorf("format %v, want %v", f, tc.format)
			}
			if open := PromptOpensThought(tc.prompt); open != tc.open {
				t.Errorf("PromptOpensThought %v, want %v", open, tc.open)
			}
		})
	}
}
