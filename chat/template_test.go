package chat

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"ubatch/internal/testdata"
)

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, src string
	}{
		{name: "unclosed expression", src: `{{ messages`},
		{name: "unclosed statement", src: `{% if x %}`},
		{name: "unclosed for", src: `{% for m in messages %}x`},
		{name: "bad expression", src: `{{ 1 + }}`},
		{name: "unclosed generation", src: `{% generation %}x`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tmpl, err := Parse(tt.src); err == nil {
				t.Fatalf("Parse(%q) succeeded (%v), want an error", tt.src, tmpl)
			}
		})
	}
}

func TestRenderVariables(t *testing.T) {
	msgs := []map[string]any{{"role": "user", "content": "hi"}}
	tools := []any{json.RawMessage(`{"type": "function", "function": {"name": "f"}}`)}
	tests := []struct {
		name string
		src  string
		msgs []map[string]any
		opts Options
		want string
	}{
		{name: "special tokens", src: `{{ bos_token }}|{{ eos_token }}`, opts: Options{BOS: "<s>", EOS: "</s>"}, want: "<s>|</s>"},
		{name: "generation prompt off", src: `{{ add_generation_prompt }}`, want: "False"},
		{name: "generation prompt on", src: `{{ add_generation_prompt }}`, opts: Options{AddGenerationPrompt: true}, want: "True"},
		{name: "no tools is none, as in transformers", src: `{{ tools is defined }} {{ tools is none }} {{ documents is none }}`, want: "True True True"},
		{name: "tools", src: `{{ tools | length }} {{ tools[0].function.name }}`, opts: Options{Tools: tools}, want: "1 f"},
		{name: "empty tools list is not none", src: `{{ tools is none }} {{ tools | length }}`, opts: Options{Tools: []any{}}, want: "False 0"},
		{name: "messages", src: `{% for m in messages %}{{ m.role }}:{{ m['content'] }}{% endfor %}`, msgs: msgs, want: "user:hi"},
		{name: "extra variables", src: `{{ enable_thinking }}`, opts: Options{Vars: map[string]any{"enable_thinking": false}}, want: "False"},
		{name: "trim_blocks and lstrip_blocks", src: "{% for m in messages %}\n    {% if true %}\n{{ m.role }}\n    {% endif %}\n{% endfor %}\n", msgs: msgs, want: "user\n"},
		{name: "generation block renders its body", src: `a{% generation %}b{% endgeneration %}c`, want: "abc"},
		{name: "content parts", src: `{% for p in messages[0].content %}{{ p.type }}={{ p.text }};{% endfor %}`,
			msgs: []map[string]any{{"role": "user", "content": json.RawMessage(`[{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "x"}}]`)}},
			want: "text=a;image_url=;"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := mustParse(t, tt.src).Render(tt.msgs, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestRenderInputErrors(t *testing.T) {
	tmpl := mustParse(t, `{{ messages | length }}`)
	tests := []struct {
		name string
		msgs []map[string]any
		opts Options
	}{
		{name: "var redefines messages", opts: Options{Vars: map[string]any{"messages": 1}}},
		{name: "var redefines bos_token", opts: Options{Vars: map[string]any{"bos_token": "x"}}},
		{name: "var redefines an internal hook", opts: Options{Vars: map[string]any{"__chat_tick": "x"}}},
		{name: "null message", msgs: []map[string]any{nil}},
		{name: "unconvertible content", msgs: []map[string]any{{"role": "user", "content": make(chan int)}}},
		{name: "unconvertible tool", opts: Options{Tools: []any{func() {}}}},
		{name: "unconvertible var", opts: Options{Vars: map[string]any{"x": complex(1, 2)}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if out, err := tmpl.Render(tt.msgs, tt.opts); err == nil {
				t.Fatalf("rendered %q, want an error", out)
			}
		})
	}
	var nilTmpl *Template
	if _, err := nilTmpl.Render(nil, Options{}); err == nil {
		t.Error("Render on a nil *Template succeeded")
	}
}

// TestHostileTemplates checks that templates which make the engine panic or
// misbehave give errors instead of crashing the caller.
func TestHostileTemplates(t *testing.T) {
	tests := []struct {
		name, src string
	}{
		{name: "negative string repeat panics in the engine", src: `{{ 'a' * -1 }}`},
		{name: "negative indent panics in the engine", src: `{{ 'x' | indent(-5) }}`},
		{name: "unknown filter", src: `{{ 'x' | no_such_filter }}`},
		{name: "calling a non-callable", src: `{{ messages() }}`},
		{name: "oversized range", src: `{% for i in range(10**6) %}{% endfor %}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tmpl, err := Parse(tt.src)
			if err != nil {
				return // rejected at parse time: also fine
			}
			if out, err := tmpl.Render(nil, Options{}); err == nil {
				t.Fatalf("rendered %.60q, want an error", out)
			}
		})
	}
}

func TestRenderTimeout(t *testing.T) {
	// Tens of milliseconds of work: far beyond the deadline, short enough
	// that the abandoned render does not linger.
	tmpl := mustParse(t, `{% for a in range(100000) %}{% endfor %}{% for a in range(100000) %}{% endfor %}done`)
	// ErrTimeout can only come from the deadline firing before the render
	// finished; wall-clock checks would be flaky on a loaded machine.
	_, err := tmpl.Render(nil, Options{Timeout: time.Millisecond})
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("got %v, want ErrTimeout", err)
	}
	// Without a deadline the same template completes.
	out, err := tmpl.Render(nil, Options{Timeout: -1})
	if err != nil || out != "done" {
		t.Fatalf("without deadline: got (%q, %v)", out, err)
	}
}

// TestAbandonedRenderStops checks that a render that would run for hours
// stops soon after its caller's deadline instead of burning a core.
func TestAbandonedRenderStops(t *testing.T) {
	tmpl := mustParse(t, `{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}`)
	before := runtime.NumGoroutine()
	if _, err := tmpl.Render(nil, Options{Timeout: 20 * time.Millisecond, MaxSteps: math.MaxInt}); !errors.Is(err, ErrTimeout) {
		t.Fatalf("got %v, want ErrTimeout", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			t.Fatalf("render goroutine still running 5s after the deadline (%d goroutines, %d before)", runtime.NumGoroutine(), before)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestRenderConcurrent(t *testing.T) {
	tmpl := mustParse(t, `{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}{{ tools | tojson }}`)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Go(func() {
			msg := fmt.Sprintf("message %d", i)
			out, err := tmpl.Render([]map[string]any{{"role": "user", "content": msg}}, Options{Tools: []any{i}})
			want := fmt.Sprintf("<user>%s[%d]", msg, i)
			if err != nil || out != want {
				errs <- fmt.Errorf("goroutine %d: got (%q, %v), want %q", i, out, err, want)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestMessagesFromJSON(t *testing.T) {
	msgs, err := MessagesFromJSON([]byte(`[{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": {"z": 1, "a": 2}}}]}]`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := mustParse(t, `{{ messages[0].role }} {{ messages[0].tool_calls[0].function | tojson }}`).Render(msgs, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if want := `assistant {"name": "f", "arguments": {"z": 1, "a": 2}}`; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	for _, bad := range []string{`{"role": "user"}`, `[1]`, `[null]`, `[{"role": }]`, ``} {
		if _, err := MessagesFromJSON([]byte(bad)); err == nil {
			t.Errorf("MessagesFromJSON(%q) succeeded, want an error", bad)
		}
	}
}

func TestSourceIsUnchanged(t *testing.T) {
	src := `{{ messages | tojson(indent=2) }}`
	if got := mustParse(t, src).Source(); got != src {
		t.Errorf("Source() = %q, want %q", got, src)
	}
}

func TestFallback(t *testing.T) {
	tests := []struct {
		name string
		msgs []map[string]any
		gen  bool
		want string
	}{
		{name: "conversation with generation prompt",
			msgs: []map[string]any{{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}},
			gen:  true,
			want: "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"},
		{name: "finished conversation",
			msgs: []map[string]any{{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}},
			want: "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n"},
		{name: "text parts joined by newline, other parts dropped",
			msgs: []map[string]any{{"role": "user", "content": json.RawMessage(`[{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "u"}}, {"type": "text", "text": "b"}]`)}},
			want: "<|im_start|>user\na\nb<|im_end|>\n"},
		{name: "null content",
			msgs: []map[string]any{{"role": "assistant", "content": nil}},
			want: "<|im_start|>assistant\n<|im_end|>\n"},
		{name: "no messages", gen: true, want: "<|im_start|>assistant\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Fallback().Render(tt.msgs, Options{AddGenerationPrompt: tt.gen})
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}

// TestRealTemplateWithToolCall renders an assistant tool call and a tool
// result through a shipped template, checking the parts the server relies on.
func TestRealTemplateWithToolCall(t *testing.T) {
	src := string(testdata.ReadFile(t, "templates/Qwen-Qwen2.5-7B-Instruct.jinja"))
	msgs := []map[string]any{
		{"role": "user", "content": "Weather in Paris?"},
		{"role": "assistant", "content": nil, "tool_calls": json.RawMessage(`[{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]`)},
		{"role": "tool", "content": "22C"},
	}
	got, err := mustParse(t, src).Render(msgs, Options{AddGenerationPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
		"<|im_start|>user\n<tool_response>\n22C\n</tool_response><|im_end|>",
		"<|im_start|>assistant\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
}

// BenchmarkRender renders a shipped template with tools, as a server would
// per request.
func BenchmarkRender(b *testing.B) {
	for _, name := range []string{"meta-llama-Llama-3.1-8B-Instruct", "Qwen-Qwen3-0.6B", "openai-gpt-oss-120b"} {
		b.Run(name, func(b *testing.B) {
			tmpl, err := Parse(string(testdata.ReadFile(b, "templates/"+name+".jinja")))
			if err != nil {
				b.Fatal(err)
			}
			msgs := []map[string]any{{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "What is the weather in Paris?"}}
			opts := Options{AddGenerationPrompt: true, Tools: []any{json.RawMessage(`{"type": "function", "function": {"name": "get_weather", "description": "Get the weather.", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}`)}}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := tmpl.Render(msgs, opts); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
