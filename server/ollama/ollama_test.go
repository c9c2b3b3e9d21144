package ollama

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"ubatch/server"
	"ubatch/server/servertest"
)

// ollamaCall posts body to path and returns the status and the body.
func ollamaCall(e *servertest.Env, method, path string, body any) (int, []byte) {
	e.T.Helper()
	var resp *http.Response
	if method == http.MethodPost {
		resp = e.Post(context.Background(), path, body)
	} else {
		raw, _ := json.Marshal(body)
		req, err := http.NewRequest(method, e.URL+path, strings.NewReader(string(raw)))
		if err != nil {
			e.T.Fatal(err)
		}
		if body == nil {
			req.Body = http.NoBody
		}
		if resp, err = e.Client.Do(req); err != nil {
			e.T.Fatal(err)
		}
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

// TestOllamaOptions: each option's mapping onto the sampler, Ollama's defaults, and the 400s
// naming an option this server does not implement or a num_ctx it cannot give.
func TestOllamaOptions(t *testing.T) {
	e := newEnv(t, servertest.Options{})
	f32 := func(p *float64) float64 {
		if p == nil {
			return -99
		}
		return *p
	}
	tests := []struct {
		name  string
		opts  string
		param string // "": accepted
		check func(f server.SamplingFields) bool
	}{
		{name: "defaults are Ollama's", opts: `{}`, check: func(f server.SamplingFields) bool {
			return f32(f.Temperature) == 0.8 && f32(f.TopP) == 0.9 && f32(f.RepeatPenalty) == 1.1 && *f.TopK == 40
		}},
		{name: "sampling options map", opts: `{"temperature":0.2,"top_k":5,"top_p":0.5,"min_p":0.1,"seed":7,"repeat_penalty":1.3,"repeat_last_n":-1,"presence_penalty":0.5,"frequency_penalty":0.25,"stop":["x"]}`,
			check: func(f server.SamplingFields) bool {
				return f32(f.Temperature) == 0.2 && *f.TopK == 5 && f32(f.TopP) == 0.5 && f32(f.MinP) == 0.1 && *f.Seed == 7 &&
					f32(f.RepeatPenalty) == 1.3 && *f.RepeatLastN == -1 && f32(f.PresencePenalty) == 0.5 &&
					f32(f.FrequencyPenalty) == 0.25 && string(f.Stop) == `["x"]`
			}},
		{name: "num_predict", opts: `{"num_predict":12}`, check: func(f server.SamplingFields) bool { return *f.NPredict == 12 }},
		{name: "num_predict -2 fills the context", opts: `{"num_predict":-2}`, check: func(f server.SamplingFields) bool { return *f.NPredict == -1 }},
		{name: "load and hardware options are accepted", opts: `{"num_gpu":99,"num_thread":4,"num_batch":512,"use_mmap":true,"num_keep":4,"numa":false,"main_gpu":0}`,
			check: func(f server.SamplingFields) bool { return f.NPredict == nil }},
		{name: "no-op values of unsupported options pass", opts: `{"mirostat":0,"typical_p":1,"tfs_z":1,"mirostat_tau":5}`,
			check: func(f server.SamplingFields) bool { return true }},
		{name: "num_ctx within the context", opts: `{"num_ctx":256}`, check: func(f server.SamplingFields) bool { return true }},
		{name: "unknown options are ignored as Ollama does", opts: `{"future_knob":3}`, check: func(f server.SamplingFields) bool { return true }},
		{name: "mirostat", opts: `{"mirostat":2}`, param: "mirostat"},
		{name: "typical_p", opts: `{"typical_p":0.5}`, param: "typical_p"},
		{name: "tfs_z", opts: `{"tfs_z":0.9}`, param: "tfs_z"},
		{name: "num_ctx larger than the server's", opts: `{"num_ctx":100000}`, param: "num_ctx"},
		{name: "num_ctx not a number", opts: `{"num_ctx":"big"}`, param: "num_ctx"},
		{name: "wrong type names the option", opts: `{"temperature":"hot"}`, param: "temperature"},
		{name: "top_k wrong type", opts: `{"top_k":1.5}`, param: "top_k"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var opts map[string]json.RawMessage
			if err := json.Unmarshal([]byte(tc.opts), &opts); err != nil {
				t.Fatal(err)
			}
			f, err := (&api{Server: e.Server}).ollamaSampling(opts)
			if tc.param != "" {
				if ae := server.ToAPIError(err); err == nil || ae.Status != http.StatusBadRequest || ae.Param != tc.param ||
					!strings.Contains(ae.Message, tc.param) {
					t.Fatalf("err %v, want a 400 naming %s", err, tc.param)
				}
				return
			}
			if err != nil || !tc.check(f) {
				t.Fatalf("err %v, fields %+v", err, f)
			}
		})
	}
}

// TestOllamaErrors: the 4xx of Ollama's routes, each in Ollama's {"error": "..."} shape with its
// status and a message naming the field.
func TestOllamaErrors(t *testing.T) {
	e := newEnv(t, servertest.Options{})
	msgs := []map[string]any{{"role": "user", "content": "hi"}}
	tests := []struct {
		name, method, path string
		body               any
		status             int
		want               string // in the message
	}{
		{"unknown model", "POST", "/api/chat", map[string]any{"model": "nope", "messages": msgs}, 404, `model "nope" not found`},
		{"unknown model generate", "POST", "/api/generate", map[string]any{"model": "x:7b", "prompt": "a"}, 404, `model "x:7b" not found`},
		{"no model", "POST", "/api/chat", map[string]any{"messages": msgs}, 400, "model is required"},
		{"images in a message", "POST", "/api/chat", map[string]any{"model": "stories", "messages": []map[string]any{{"role": "user", "content": "a", "images": []string{"aGk="}}}}, 400, "images"},
		{"images on generate", "POST", "/api/generate", map[string]any{"model": "stories", "prompt": "a", "images": []string{"aGk="}}, 400, "images"},
		{"template", "POST", "/api/generate", map[string]any{"model": "stories", "prompt": "a", "template": "{{ .Prompt }}"}, 400, "template"},
		{"suffix without FIM tokens", "POST", "/api/generate", map[string]any{"model": "stories", "prompt": "a", "suffix": "b"}, 400, "suffix"},
		{"format not json", "POST", "/api/chat", map[string]any{"model": "stories", "messages": msgs, "format": "xml"}, 400, "format"},
		{"format schema invalid", "POST", "/api/chat", map[string]any{"model": "stories", "messages": msgs, "format": map[string]any{"type": 5}}, 400, "format"},
		{"think on a model that does not", "POST", "/api/chat", map[string]any{"model": "stories", "messages": msgs, "think": true}, 400, "does not support thinking"},
		{"think of another type", "POST", "/api/chat", map[string]any{"model": "stories", "messages": msgs, "think": 3}, 400, "think"},
		{"unsupported option", "POST", "/api/chat", map[string]any{"model": "stories", "messages": msgs, "options": map[string]any{"mirostat": 1}}, 400, "mirostat"},
		{"num_ctx too large", "POST", "/api/generate", map[string]any{"model": "stories", "prompt": "a", "options": map[string]any{"num_ctx": 1 << 20}}, 400, "num_ctx"},
		{"context outside the vocabulary", "POST", "/api/generate", map[string]any{"model": "stories", "prompt": "a", "context": []int{1, 1 << 30}}, 400, "vocabulary"},
		{"logprobs", "POST", "/api/chat", map[string]any{"model": "stories", "messages": msgs, "logprobs": true}, 400, "logprobs"},
		{"malformed body", "POST", "/api/chat", "{", 400, "malformed JSON"},
		{"embed without --embeddings", "POST", "/api/embed", map[string]any{"model": "stories", "input": "a"}, 404, "--embeddings"},
		{"embeddings without --embeddings", "POST", "/api/embeddings", map[string]any{"model": "stories", "prompt": "a"}, 404, "--embeddings"},
		{"show unknown", "POST", "/api/show", map[string]any{"model": "other"}, 404, `model "other" not found`},
		{"pull another model", "POST", "/api/pull", map[string]any{"model": "llama3"}, 404, "cannot pull"},
		{"delete the served model", "DELETE", "/api/delete", map[string]any{"model": "stories"}, 400, "cannot be deleted"},
		{"delete another", "DELETE", "/api/delete", map[string]any{"name": "llama3"}, 404, `model "llama3" not found`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, data := ollamaCall(e, tc.method, tc.path, tc.body)
			var body struct {
				Error *string `json:"error"`
			}
			if status != tc.status || json.Unmarshal(data, &body) != nil || body.Error == nil || !strings.Contains(*body.Error, tc.want) {
				t.Fatalf("status %d %s, want %d with an error string containing %q", status, data, tc.status, tc.want)
			}
		})
	}
}

// TestOllamaHead: HEAD /, Ollama's liveness probe, answers 200 through the web page's route.
func TestOllamaHead(t *testing.T) {
	e := newEnv(t, servertest.Options{})
	resp, err := e.Client.Head(e.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("HEAD /: status %d", resp.StatusCode)
	}
}

// ollamaLines reads an NDJSON body into objects.
func ollamaLines(t *testing.T, r io.Reader) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q is not JSON: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

// TestOllamaStreams: /api/chat and /api/generate stream NDJSON by default, text in every object
// but the last, which has done, done_reason and the counts and durations; generate's context
// carries the prompt and the reply, and sending it back continues from it.
func TestOllamaStreams(t *testing.T) {
	e := newEnv(t, servertest.Options{})
	for _, tc := range []struct {
		name, path string
		body       map[string]any
		text       func(m map[string]any) string
	}{
		{"chat", "/api/chat", map[string]any{"model": "stories", "messages": []map[string]any{{"role": "user", "content": "Once"}},
			"options": map[string]any{"num_predict": 8, "seed": 1}}, func(m map[string]any) string {
			msg, _ := m["message"].(map[string]any)
			s, _ := msg["content"].(string)
			return s
		}},
		{"generate", "/api/generate", map[string]any{"model": "stories:latest", "prompt": "Once upon", "raw": true,
			"options": map[string]any{"num_predict": 8, "seed": 1}}, func(m map[string]any) string { s, _ := m["response"].(string); return s }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := e.Post(context.Background(), tc.path, tc.body)
			defer resp.Body.Close()
			if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-ndjson" {
				t.Fatalf("status %d, Content-Type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			lines := ollamaLines(t, resp.Body)
			if len(lines) < 2 {
				t.Fatalf("%d lines, want text then a final object", len(lines))
			}
			text := ""
			for _, l := range lines[:len(lines)-1] {
				if l["done"] != false || l["model"] != tc.body["model"] {
					t.Fatalf("object %v: want done false and the model asked for", l)
				}
				text += tc.text(l)
			}
			last := lines[len(lines)-1]
			if last["done"] != true || last["done_reason"] != "length" || last["eval_count"] != 8.0 ||
				last["prompt_eval_count"].(float64) < 2 || last["total_duration"].(float64) <= 0 || last["eval_duration"].(float64) <= 0 {
				t.Fatalf("final object %v", last)
			}
			if text == "" {
				t.Fatal("no text streamed")
			}
		})
	}
	t.Run("generate context round trip", func(t *testing.T) {
		var first struct {
			Response        string  `json:"response"`
			Context         []int32 `json:"context"`
			PromptEvalCount int     `json:"prompt_eval_count"`
			EvalCount       int     `json:"eval_count"`
		}
		e.PostJSON("/api/generate", map[string]any{"model": "stories", "prompt": "Once upon", "raw": true, "stream": false,
			"options": map[string]any{"num_predict": 4, "temperature": 0}}, 200, &first)
		if len(first.Context) != first.PromptEvalCount+first.EvalCount || first.EvalCount != 4 {
			t.Fatalf("context of %d ids, want prompt %d + reply %d", len(first.Context), first.PromptEvalCount, first.EvalCount)
		}
		var next struct {
			PromptEvalCount int `json:"prompt_eval_count"`
		}
		e.PostJSON("/api/generate", map[string]any{"model": "stories", "prompt": " a", "raw": true, "stream": false, "context": first.Context,
			"options": map[string]any{"num_predict": 2}}, 200, &next)
		if next.PromptEvalCount <= len(first.Context) {
			t.Fatalf("prompt_eval_count %d after a context of %d: the context was not prepended", next.PromptEvalCount, len(first.Context))
		}
	})
	t.Run("load", func(t *testing.T) {
		var got map[string]any
		e.PostJSON("/api/generate", map[string]any{"model": "stories", "stream": false}, 200, &got)
		if got["done"] != true || got["done_reason"] != "load" {
			t.Fatalf("%v, want done with done_reason load", got)
		}
	})
	t.Run("format json", func(t *testing.T) {
		var got struct {
			Message struct{ Content string } `json:"message"`
		}
		e.PostJSON("/api/chat", map[string]any{"model": "stories", "stream": false, "format": "json",
			"messages": []map[string]any{{"role": "user", "content": "a"}}, "options": map[string]any{"num_predict": 200}}, 200, &got)
		if c := strings.TrimSpace(got.Message.Content); !strings.HasPrefix(c, "{") {
			t.Fatalf("content %q: want a JSON object's start", c)
		}
	})
}
