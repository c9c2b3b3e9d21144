package ollama

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"ubatch/chat"
	"ubatch/engine"
	"ubatch/server"
)

// ollamaChatRequest is the body of Ollama's POST /api/chat.
type ollamaChatRequest struct {
	server.OllamaRoute
	Model     string                     `json:"model"`
	Messages  json.RawMessage            `json:"messages"`
	Tools     json.RawMessage            `json:"tools"`
	Format    json.RawMessage            `json:"format"`
	Options   map[string]json.RawMessage `json:"options"`
	Stream    *bool                      `json:"stream"`
	Think     json.RawMessage            `json:"think"`
	KeepAlive json.RawMessage            `json:"keep_alive"` // accepted: the one model stays loaded
	Logprobs  *bool                      `json:"logprobs"`
	CacheSalt *string                    `json:"cache_salt"` // vLLM's (server/salt.go), ours on Ollama's routes

	api *api // the routes it came in on
}

// ollamaGenerateRequest is the body of Ollama's POST /api/generate.
type ollamaGenerateRequest struct {
	server.OllamaRoute
	Model     string                     `json:"model"`
	Prompt    string                     `json:"prompt"`
	Suffix    string                     `json:"suffix"`
	System    string                     `json:"system"`
	Template  string                     `json:"template"`
	Context   []int32                    `json:"context"`
	Raw       bool                       `json:"raw"`
	Format    json.RawMessage            `json:"format"`
	Images    json.RawMessage            `json:"images"`
	Options   map[string]json.RawMessage `json:"options"`
	Stream    *bool                      `json:"stream"`
	Think     json.RawMessage            `json:"think"`
	KeepAlive json.RawMessage            `json:"keep_alive"`
	Logprobs  *bool                      `json:"logprobs"`
	CacheSalt *string                    `json:"cache_salt"` // vLLM's (server/salt.go), ours on Ollama's routes

	api *api // the routes it came in on
}

func (s *api) handleOllamaChat(w http.ResponseWriter, r *http.Request) {
	s.ServeCompletion(w, r, &ollamaChatRequest{api: s})
}

func (s *api) handleOllamaGenerate(w http.ResponseWriter, r *http.Request) {
	s.ServeCompletion(w, r, &ollamaGenerateRequest{api: s})
}

// ollamaLoad is the answer to a request with nothing to generate, which Ollama clients send to
// load a model: one final object with done_reason "load", through the shared path's
// no-generation case (an empty prompt is never submitted).
func ollamaLoad(rep *ollamaReply, stream bool) (server.GenParams, [][]int32, server.Reply, error) {
	rep.load = true
	return server.NoGeneration(stream), [][]int32{{}}, rep, nil
}

func (req *ollamaChatRequest) Prepare(ctx context.Context, srv *server.Server) (server.GenParams, [][]int32, server.Reply, error) {
	s := req.api
	rep := &ollamaReply{s: s, model: req.Model, chat: true}
	rep.start, rep.loadTime = server.RequestLoad(ctx)
	stream := server.ParseOllamaStream(req.Stream)
	var err error
	if rep.model, err = s.ollamaModelName(ctx, "model", req.Model); err != nil {
		return server.GenParams{}, nil, nil, err
	}
	if req.Logprobs != nil && *req.Logprobs {
		return server.GenParams{}, nil, nil, server.BadRequest("logprobs", "logprobs is not supported on Ollama's routes: use /v1/chat/completions")
	}
	if t := bytes.TrimSpace(req.Messages); server.IsNull(t) || string(t) == "[]" {
		return ollamaLoad(rep, stream)
	}
	if err := checkOllamaImages(req.Messages); err != nil {
		return server.GenParams{}, nil, nil, err
	}
	sf, err := s.ollamaSampling(req.Options)
	if err != nil {
		return server.GenParams{}, nil, nil, err
	}
	sf.CacheSalt = req.CacheSalt
	cr := &server.ChatRequest{SamplingFields: sf, Messages: req.Messages, Tools: req.Tools}
	cr.Stream = stream
	if cr.ResponseFormat, err = ollamaFormat(req.Format, &cr.SamplingFields); err != nil {
		return server.GenParams{}, nil, nil, err
	}
	if cr.ReasoningFormat, cr.ChatTemplateKwargs, err = s.ollamaThink(req.Think); err != nil {
		return server.GenParams{}, nil, nil, err
	}
	g, prompt, err := s.ChatParams(ctx, cr)
	if err != nil {
		return g, nil, nil, formatError(err)
	}
	rep.setup(g, cr.Reasoning)
	return g, [][]int32{prompt}, rep, nil
}

func (req *ollamaGenerateRequest) Prepare(ctx context.Context, srv *server.Server) (server.GenParams, [][]int32, server.Reply, error) {
	s := req.api
	rep := &ollamaReply{s: s, model: req.Model}
	rep.start, rep.loadTime = server.RequestLoad(ctx)
	stream := server.ParseOllamaStream(req.Stream)
	var err error
	if rep.model, err = s.ollamaModelName(ctx, "model", req.Model); err != nil {
		return server.GenParams{}, nil, nil, err
	}
	switch {
	case req.Template != "":
		return server.GenParams{}, nil, nil, server.BadRequest("template", "template is not supported: the model's own chat template is used "+
			"(serve --chat-template replaces it; raw: true sends the prompt as is)")
	case server.NonEmpty(req.Images):
		return server.GenParams{}, nil, nil, server.BadRequest("images", "images are not supported: this server runs text models only")
	case req.Logprobs != nil && *req.Logprobs:
		return server.GenParams{}, nil, nil, server.BadRequest("logprobs", "logprobs is not supported on Ollama's routes: use /v1/completions")
	case req.Prompt == "" && req.Suffix == "" && len(req.Context) == 0:
		return ollamaLoad(rep, stream)
	}
	sf, err := s.ollamaSampling(req.Options)
	if err != nil {
		return server.GenParams{}, nil, nil, err
	}
	sf.CacheSalt = req.CacheSalt
	rf, err := ollamaFormat(req.Format, &sf)
	if err != nil {
		return server.GenParams{}, nil, nil, err
	}
	g, err := sf.Params(s.Defaults(server.OpenAIDefaults()), s.Config().Model.Vocab.EOG(), s.Config().Model.Vocab.VocabSize())
	if err != nil {
		return g, nil, nil, err
	}
	g.Stream, g.KeepTokens = stream, true // keepTokens: the reply's context lists the generated ids
	if err := s.Constrain(ctx, &g, &sf, rf); err != nil {
		return g, nil, nil, formatError(err)
	}
	toks, reasoning, err := s.generatePrompt(req, &g)
	if err != nil {
		return g, nil, nil, err
	}
	rep.context = toks
	rep.setup(g, reasoning)
	return g, [][]int32{toks}, rep, nil
}

// generatePrompt tokenizes a generate request: the prompt in the model's chat template after
// the system prompt (or as is with raw, or between the suffix's fill-in-the-middle tokens), after
// the token ids of context, a previous reply's, as Ollama continues a conversation.
func (s *api) generatePrompt(req *ollamaGenerateRequest, g *server.GenParams) ([]int32, server.ReasoningMode, error) {
	v := s.Config().Model.Vocab
	var prev []int32
	if len(req.Context) > 0 {
		var err error
		if prev, err = s.PromptTokens("context", server.TokenPrompt(req.Context)); err != nil {
			return nil, server.ReasoningMode{}, err
		}
	}
	bos := len(prev) == 0 // the context already starts with the model's BOS
	var toks []int32
	var reasoning server.ReasoningMode
	switch {
	case req.Suffix != "":
		if !v.FIM().HasInfill() {
			return nil, reasoning, server.BadRequest("suffix", "suffix is not supported by this model: its vocabulary has no fill-in-the-middle tokens")
		}
		lim := s.Config().Engine.Limits()
		in := server.InfillInput{Prefix: req.Prompt, Suffix: req.Suffix}
		in.Clip(s.TextBound())
		toks = server.BuildInfill(v, in, lim.NBatch, lim.NCtxSeq, g.MaxTokens)
	case req.Raw:
		var err error
		if toks, err = s.Encode("prompt", req.Prompt, bos, true); err != nil {
			return nil, reasoning, err
		}
	default:
		var msgs []map[string]string
		if req.System != "" {
			msgs = append(msgs, map[string]string{"role": "system", "content": req.System})
		}
		msgs = append(msgs, map[string]string{"role": "user", "content": req.Prompt})
		raw, _ := json.Marshal(msgs)
		format, kwargs, err := s.ollamaThink(req.Think)
		if err != nil {
			return nil, reasoning, err
		}
		text, err := s.RenderChat(raw, nil, kwargs)
		if err != nil {
			return nil, reasoning, err
		}
		if reasoning, err = s.ReasoningSetup(format, text, g); err != nil {
			return nil, reasoning, err
		}
		toks = v.Encode(text, false, true)
		if bos && v.AddBOS() && v.BOS() >= 0 && (s.BOSText() == "" || !strings.HasPrefix(text, s.BOSText())) {
			toks = append([]int32{v.BOS()}, toks...)
		}
	}
	toks = append(prev, toks...)
	if len(toks) == 0 {
		return nil, reasoning, server.BadRequest("prompt", "the prompt is empty")
	}
	return toks, reasoning, nil
}

// checkOllamaImages refuses messages with images: this server runs text models.
func checkOllamaImages(raw json.RawMessage) error {
	var msgs []struct {
		Images json.RawMessage `json:"images"`
	}
	if json.Unmarshal(raw, &msgs) != nil {
		return nil // parseMessages words the shape error
	}
	for i, m := range msgs {
		if server.NonEmpty(m.Images) {
			return server.BadRequest("messages", "messages[%d].images: images are not supported, this server runs text models only", i)
		}
	}
	return nil
}

// ollamaFormat maps format onto the grammar engine: "json" is response_format json_object
// (returned, for Constrain), a JSON schema object is json_schema (set in f).
func ollamaFormat(raw json.RawMessage, f *server.SamplingFields) (json.RawMessage, error) {
	raw = bytes.TrimSpace(raw)
	if server.IsNull(raw) {
		return nil, nil
	}
	var name string
	if json.Unmarshal(raw, &name) == nil {
		switch name {
		case "":
			return nil, nil
		case "json":
			return json.RawMessage(`{"type":"json_object"}`), nil
		}
		return nil, server.BadRequest("format", `format must be "json" or a JSON schema object, got %s`, server.Echo(name))
	}
	if raw[0] != '{' {
		return nil, server.BadRequest("format", `format must be "json" or a JSON schema object`)
	}
	f.JSONSchema = raw
	return nil, nil
}

// formatError renames the constraint fields format was mapped onto in an error, so that the
// client reads the name it sent.
func formatError(err error) error {
	ae := server.ToAPIError(err)
	for _, field := range []string{"json_schema", "response_format"} {
		if ae.Param == field {
			c := *ae
			c.Param, c.Message = "format", strings.Replace(c.Message, field, "format", 1)
			return &c
		}
	}
	return err
}

// ollamaThink maps think onto the reasoning split and the template's switch: true (or a level,
// "high", "medium", "low") splits the thought into thinking and tells the template to think;
// false keeps the reply whole and tells the template not to; absent is the server's default.
// A model whose template does not think cannot be asked to (400, as Ollama answers).
func (s *api) ollamaThink(raw json.RawMessage) (*string, map[string]any, error) {
	if server.IsNull(raw) {
		return nil, nil, nil
	}
	var on bool
	var level string
	switch {
	case json.Unmarshal(raw, &on) == nil:
	case json.Unmarshal(raw, &level) == nil && (level == "high" || level == "medium" || level == "low"):
		on = true
	default:
		return nil, nil, server.BadRequest("think", `think must be true, false, "high", "medium" or "low"`)
	}
	return s.ThinkSwitch("think", on, level)
}

// ollamaReply words a generation as Ollama does: one object a line while streaming (message
// fragments on /api/chat, response text on /api/generate), the last with done, done_reason and
// the timings; without streaming, that last object holding the whole reply.
type ollamaReply struct {
	server.OllamaRoute
	s         *api
	model     string
	chat      bool          // message objects (/api/chat) rather than response text
	start     time.Time     // when the request arrived
	loadTime  time.Duration // spent getting its model loaded (a NewMulti front's wait)
	load      bool          // nothing was generated: done_reason "load"
	g         server.GenParams
	reasoning server.ReasoningMode
	// context is /api/generate's prompt, which with the generated ids is the reply's context.
	context   []int32
	generated []int32
	// streaming: the parsers that read the reply for its thought and its tool calls
	thought *chat.ReasoningParser
	tools   *chat.ToolParser
}

func (o *ollamaReply) setup(g server.GenParams, r server.ReasoningMode) {
	o.g, o.reasoning = g, r
	if !g.Stream {
		return
	}
	if r.Split {
		o.thought = chat.NewReasoningParser(r.InThought)
	}
	if g.Tools != nil {
		o.tools = chat.NewToolParser(g.Tools.Format, g.Tools.Names)
	}
}

// ollamaMessage is a chat reply or a fragment of one.
type ollamaMessage struct {
	Role      string           `json:"role"`
	Content   string           `json:"content"`
	Thinking  string           `json:"thinking,omitempty"`
	ToolCalls []ollamaToolCall `json:"tool_calls,omitempty"`
}

// ollamaToolCall is a call as Ollama writes it: the arguments as an object, not JSON text.
type ollamaToolCall struct {
	Function struct {
		Index     int             `json:"index"`
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
}

// ollamaResponse is one object of a chat or generate reply; the timings come with the last.
type ollamaResponse struct {
	Model      string         `json:"model"`
	CreatedAt  string         `json:"created_at"`
	Message    *ollamaMessage `json:"message,omitempty"`
	Response   *string        `json:"response,omitempty"`
	Thinking   string         `json:"thinking,omitempty"`
	Done       bool           `json:"done"`
	DoneReason string         `json:"done_reason,omitempty"`
	Context    []int32        `json:"context,omitempty"`
	*ollamaTimings
}

// ollamaTimings are the final object's counts and durations, in nanoseconds. load_duration is
// the time the request waited for its model (0 on a Server without a front: loaded at start-up). prompt_eval_count counts the whole prompt, the tokens
// served from the prefix cache included.
type ollamaTimings struct {
	TotalDuration      int64 `json:"total_duration"`
	LoadDuration       int64 `json:"load_duration"`
	PromptEvalCount    int   `json:"prompt_eval_count"`
	PromptEvalDuration int64 `json:"prompt_eval_duration"`
	EvalCount          int   `json:"eval_count"`
	EvalDuration       int64 `json:"eval_duration"`
}

// between is b-a in nanoseconds, 0 when either time is unknown.
func between(a, b time.Time) int64 {
	if a.IsZero() || b.IsZero() {
		return 0
	}
	return int64(b.Sub(a))
}

// object builds one object of the reply; final ones (u set) carry done and the timings.
func (o *ollamaReply) object(content, thinking string, calls []chat.ToolCall, finish string, u *engine.Usage) ollamaResponse {
	resp := ollamaResponse{Model: o.model, CreatedAt: server.OllamaTime(time.Now())}
	if o.chat {
		resp.Message = &ollamaMessage{Role: "assistant", Content: content, Thinking: thinking, ToolCalls: ollamaCalls(calls)}
	} else {
		resp.Response, resp.Thinking = &content, thinking
	}
	if u == nil {
		return resp
	}
	resp.Done, resp.DoneReason = true, finish
	if o.load {
		resp.DoneReason = "load"
		return resp
	}
	if o.context != nil {
		resp.Context = append(o.context[:len(o.context):len(o.context)], o.generated...)
	}
	resp.ollamaTimings = &ollamaTimings{TotalDuration: int64(time.Since(o.start)), LoadDuration: int64(o.loadTime), PromptEvalCount: u.PromptTokens,
		PromptEvalDuration: between(u.PromptStart, u.FirstToken), EvalCount: u.CompletionTokens,
		EvalDuration: between(u.FirstToken, u.LastToken)}
	return resp
}

func ollamaCalls(calls []chat.ToolCall) []ollamaToolCall {
	var out []ollamaToolCall
	for i, c := range calls {
		var tc ollamaToolCall
		tc.Function.Index, tc.Function.Name = i, c.Name
		tc.Function.Arguments = json.RawMessage(c.Arguments)
		if !json.Valid(tc.Function.Arguments) {
			tc.Function.Arguments = json.RawMessage("{}")
		}
		out = append(out, tc)
	}
	return out
}

// Chunk sends a fragment of the reply, held back by the parsers while it may be markup, and at
// the end what they held, the tool calls and the timings, in the final object.
func (o *ollamaReply) Chunk(sse *server.SSEWriter, ev server.SeqEvent) error {
	thinking, content := server.SplitThought(o.thought, ev)
	var calls []chat.ToolCall
	if o.tools != nil {
		content = o.tools.Add(content)
		if ev.Done {
			var rest string
			rest, calls = o.tools.Finish()
			content += rest
		}
	}
	for _, t := range ev.Tokens {
		o.generated = append(o.generated, t.ID)
	}
	if !ev.Done {
		if thinking == "" && content == "" {
			return nil
		}
		return sse.Send(o.object(content, thinking, nil, "", nil))
	}
	return sse.Send(o.object(content, thinking, calls, ev.Finish, &ev.Usage))
}

// End has nothing to add: the final object went out with the sequence's done event.
func (o *ollamaReply) End(*server.SSEWriter, server.UsageJSON) error { return nil }

func (o *ollamaReply) Whole(res []*server.ChoiceResult, _ server.UsageJSON) any {
	r := res[0]
	content, thinking := r.Text.String(), ""
	if o.reasoning.Split {
		thinking, content = chat.SplitReasoning(content, o.reasoning.InThought)
	}
	var calls []chat.ToolCall
	if o.g.Tools != nil {
		content, calls = chat.ParseToolCalls(o.g.Tools.Format, content, o.g.Tools.Names)
	}
	for _, t := range r.Tokens {
		o.generated = append(o.generated, t.ID)
	}
	return o.object(content, thinking, calls, r.Finish, &r.Usage)
}
