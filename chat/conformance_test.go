package chat

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"ubatch/internal/testdata"
)

// Causes of the cases the engine (ardanlabs/jinja v1.8.0) cannot reproduce.
// None of them can be fixed from outside the engine: they are in its core
// evaluation (for loops, the + operator, string values), not in a filter
// or global that Render can supply.
const (
	noneNotIterable = "Jinja2 raises TypeError iterating over tools=None; the engine iterates none as an empty list and renders an empty tool list"
	undefinedPlus   = "Jinja2 raises UndefinedError on 'text' + undefined (the template needs the custom variables functions and datetime); the engine concatenates undefined as an empty string"
	markupEscaping  = "Jinja2's |safe returns Markup, and Markup + str HTML-escapes the str (the tool JSON becomes &#34;...); the engine has no Markup type, so |safe is the identity"
)

// knownMismatches lists template.conversation cases where the engine cannot
// reproduce Jinja2's behaviour, each with the cause.
var knownMismatches = map[string]string{
	"CohereForAI-c4ai-command-r-plus-tool_use.chat":          noneNotIterable,
	"CohereForAI-c4ai-command-r-plus-tool_use.nosystem":      noneNotIterable,
	"CohereForAI-c4ai-command-r-plus-tool_use.finished":      noneNotIterable,
	"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.chat":     noneNotIterable,
	"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.nosystem": noneNotIterable,
	"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.finished": noneNotIterable,
	"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.chat":       noneNotIterable,
	"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.nosystem":   noneNotIterable,
	"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.finished":   noneNotIterable,
	"fireworks-ai-llama-3-firefunction-v2.chat":              undefinedPlus,
	"fireworks-ai-llama-3-firefunction-v2.nosystem":          undefinedPlus,
	"fireworks-ai-llama-3-firefunction-v2.finished":          undefinedPlus,
	"fireworks-ai-llama-3-firefunction-v2.tools":             undefinedPlus,
	"meetkai-functionary-medium-v3.1.tools":                  markupEscaping,
}

type conversation struct {
	Name                string            `json:"name"`
	BOS                 string            `json:"bos_token"`
	EOS                 string            `json:"eos_token"`
	AddGenerationPrompt bool              `json:"add_generation_prompt"`
	Tools               []json.RawMessage `json:"tools"`
	Messages            json.RawMessage   `json:"messages"`
}

// messagesOf decodes the messages as a server would, keeping nested
// objects in document order as Python does.
func (c conversation) messagesOf(t *testing.T) []map[string]any {
	t.Helper()
	msgs, err := MessagesFromJSON(c.Messages)
	if err != nil {
		t.Fatalf("conversation %s: %v", c.Name, err)
	}
	return msgs
}

func (c conversation) options() Options {
	var tools []any
	for _, tl := range c.Tools {
		tools = append(tools, tl)
	}
	return Options{
		BOS:                 c.BOS,
		EOS:                 c.EOS,
		AddGenerationPrompt: c.AddGenerationPrompt,
		Tools:               tools,
		Now:                 func() time.Time { return time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC) },
	}
}

func TestConformance(t *testing.T) {
	dir := testdata.Path(t, "templates")
	raw := testdata.ReadFile(t, "templates/conversations.json")
	var convs []conversation
	if err := json.Unmarshal(raw, &convs); err != nil {
		t.Fatalf("conversations.json: %v", err)
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.jinja"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no templates in %s: %v", dir, err)
	}

	var pass, fail, known, cases int
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".jinja")
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		tmpl, parseErr := Parse(string(src))
		for _, c := range convs {
			id := name + "." + c.Name
			base := filepath.Join(dir, "expected", id)
			want, txtErr := os.ReadFile(base + ".txt")
			_, errErr := os.Stat(base + ".error")
			if txtErr != nil && errErr != nil {
				continue // no expectation recorded for this pair
			}
			cases++
			t.Run(id, func(t *testing.T) {
				ok := checkCase(t, tmpl, parseErr, c, want, txtErr == nil)
				reason, isKnown := knownMismatches[id]
				switch {
				case ok && isKnown:
					t.Errorf("listed as a known mismatch (%s) but now matches: remove it", reason)
				case ok:
					pass++
				case isKnown:
					known++
					t.Skipf("known engine mismatch: %s", reason)
				default:
					fail++
					t.Error("output differs from Jinja2's (see log)")
				}
			})
		}
	}
	if cases == 0 {
		t.Fatalf("no expected outputs found under %s/expected", dir)
	}
	t.Logf("%d cases: %d match, %d known mismatches, %d unexpected failures", cases, pass, known, fail)
}

// checkCase reports whether the case behaves as Jinja2 did, logging the
// difference (without failing) when it does not.
func checkCase(t *testing.T, tmpl *Template, parseErr error, c conversation, want []byte, wantText bool) bool {
	t.Helper()
	if parseErr != nil {
		if !wantText {
			return true
		}
		t.Logf("parse: %v", parseErr)
		return false
	}
	got, err := tmpl.Render(c.messagesOf(t), c.options())
	if !wantText {
		if err == nil {
			t.Logf("rendered without error, want an error; got:\n%s", got)
			return false
		}
		return true
	}
	if err != nil {
		t.Logf("render: %v", err)
		return false
	}
	if got != string(want) {
		t.Logf("mismatch at byte %d\n--- got:\n%s\n--- want:\n%s", firstDiff(got, string(want)), got, want)
		return false
	}
	return true
}

func firstDiff(a, b string) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}
