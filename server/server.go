// Package server is the HTTP core over an engine: requests, streams, limits, errors, the
// engine hand-off, the mux and the middleware, with GET /v1/models, /health, /ready, /live and
// Prometheus metrics. What several API dialects share is here too: chat rendering
// (ChatRequest, ChatParams), tool-call and reasoning parsing, the sampling fields, the error
// body and server-sent events. The API dialects are packages of their own (server/openai,
// server/llamacpp, server/ollama, server/responses) that register their routes
// (Config.Dialects) and import only this one. Their handlers tokenize, submit to the
// continuous-batching engine and stream results back; every request's sequences are cancelled
// when its client goes away. GET / is a built-in web page (package web) whose live view of the
// batching reads GET /live (a Live hub).
package server

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"ubatch/chat"
	"ubatch/engine"
	"ubatch/grammar"
	"ubatch/internal/httpauth"
	"ubatch/kvfile"
	"ubatch/model"
	"ubatch/sample"
	"ubatch/server/web"
)

// DefaultMaxBodyBytes bounds request bodies when Config.MaxBodyBytes is 0.
const DefaultMaxBodyBytes = 4 << 20

// Config configures a Server. Model and Engine are required; the engine must have been built over
// a context of Model and be running (Run) while the server serves.
type Config struct {
	Model *model.Model
	// SlotSavePath is the directory of POST /slots/{id}?action=save|restore files (serve
	// --slot-save-path); "" answers those actions 501. KVLayout is their kvfile layout.
	SlotSavePath string
	KVLayout     kvfile.Layout
	Engine       *engine.Engine
	// APIKey, when non-empty, is required as "Authorization: Bearer KEY" on every route but /health.
	APIKey string
	// CacheSaltPerKey salts every request's prefix-cache blocks by its bearer token (hashed),
	// besides its cache_salt: tenants that send different tokens never share a block (salt.go).
	CacheSaltPerKey bool
	// MaxClientPriority is the highest "priority" a request may ask for without the API key
	// (nil: engine.PriorityHigh); above it a completion request is a 400 naming priority. A
	// request carrying the APIKey may ask for any; without an APIKey the cap applies to all.
	MaxClientPriority *engine.Priority
	// MaxBodyBytes bounds request bodies (413 beyond it); 0 means DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// Logger receives one debug record per request and warnings; nil means slog.Default().
	Logger *slog.Logger
	// Metrics, when set, also records per-request figures (time per output token); it should be
	// the engine's Observer too.
	Metrics *Metrics
	// Gatherer is what GET /metrics exposes; nil means the route answers 404.
	Gatherer prometheus.Gatherer
	// ModelID is the model name the API reports; "" means the model file's base name.
	ModelID string
	// Aliases are other names the model answers to on Ollama's routes (a library model's
	// ORG/REPO:QUANT); the OpenAI routes take any name (NewMulti's front checks them).
	Aliases []string
	// Embedder, when set, serves POST /v1/embeddings (server/openai); nil answers 404.
	Embedder *Embedder
	// OllamaEmbedder serves Ollama's /api/embed and /api/embeddings (serve sets it for every
	// model: Ollama embeds with any); nil: Embedder's, and 404 without either.
	OllamaEmbedder *Embedder
	// Reranker, when set, serves POST /v1/rerank (server/openai; serve --rerank); nil answers 404.
	Reranker *Reranker
	// Sampling, when set, is every route's default for the sampling fields a request leaves out
	// (serve's --temp, --top-k, ...); nil keeps each API's own defaults (OpenAI's plain sampling
	// at temperature 1 on /v1, llama.cpp's on /completion).
	Sampling *sample.Params
	// ChatTemplate, when set, replaces the model's tokenizer.chat_template (Jinja source).
	ChatTemplate string
	// ReasoningFormat is the default of chat requests' reasoning_format (serve's
	// --reasoning-format): ReasoningNone, ReasoningAuto or ReasoningDeepSeek; "" means auto.
	ReasoningFormat string
	// CORSOrigins are the browser origins allowed to call the API ("*": any); empty allows only
	// pages served from localhost.
	CORSOrigins []string
	// ListenAddr is the address the server listens on (host:port as given to net.Listen, or a
	// host alone). On a loopback one (localhost, 127.0.0.0/8, ::1) requests whose Host header is
	// not a loopback name get 403, against DNS rebinding; "" or another address: no Host check.
	ListenAddr string
	// AllowedHosts are Host names (any port) served besides the loopback ones ("*": any). When
	// set, Host is checked wherever the server listens.
	AllowedHosts []string
	// Live, when set, feeds GET /live (the web page's live view); it should be the engine's
	// Observer too. nil answers 404.
	Live *Live
	// MaxLiveStreams caps open GET /live streams (503 beyond it); 0 means DefaultMaxLiveStreams.
	MaxLiveStreams int
	// MaxEmbeddingInputs and MaxEmbeddingTokens cap one /v1/embeddings request's inputs and their
	// tokens in all (400 naming input beyond them); 0 means DefaultMaxEmbeddingInputs and
	// DefaultMaxEmbeddingTokens.
	MaxEmbeddingInputs, MaxEmbeddingTokens int
	// MaxN caps one completion request's sequences, n times its prompts (400 naming n, or
	// prompt, beyond it); 0 means DefaultMaxN.
	MaxN int
	// Limits bound the constraints and the messages a request may bring; zero fields take
	// their defaults.
	Limits RequestLimits
	// ParseBudget bounds the bytes of request bodies being rendered and tokenized at once; one
	// budget may be shared by several Servers (serve's models). nil: a budget of this server's
	// own, DefaultParseBudget.
	ParseBudget *ParseBudget
	// Dialects are the API dialects served beside the core's routes, each its own package
	// (server/openai, server/llamacpp, server/ollama, server/responses); cmd/ubatch serves them
	// all. A NewMulti front's are its models'.
	Dialects []Dialect
	// KVBlocks, when set, serves POST /kv/blocks: this node's KV blocks for its fleet's peers
	// (peer.Handler), behind the API key like every other route; nil answers 404.
	KVBlocks http.Handler
}

// RequestLimits bound the output constraints one request may ask the server to compile and
// follow (grammar, json_schema, response_format, tools). Past one, the request is a 400 naming
// the field and the limit. Zero fields take the defaults.
type RequestLimits struct {
	// Grammar bounds the compilation of every constraint (size, rules, alternatives, {m,n}
	// bounds, expanded elements, time); zero fields are grammar's defaults.
	Grammar grammar.Limits
	// GrammarBudget bounds the work of one token's grammar mask (grammar.Matcher.SetBudget; 0:
	// grammar.DefaultBudget); a sequence past it ends with a 400 or an error event.
	GrammarBudget int
	// MaxTools caps the tools of one chat request (0: DefaultMaxTools) and MaxToolsBytes the
	// size of their parameters in all, as sent (0: DefaultMaxToolsBytes).
	MaxTools, MaxToolsBytes int
	// MaxMessages caps the messages of one chat request (0: DefaultMaxMessages) and
	// MaxContentParts the content parts of one message (0: DefaultMaxContentParts).
	MaxMessages, MaxContentParts int
	// RenderTimeout bounds one chat template render (0: chat.DefaultTimeout); past it the
	// request is a 400 naming messages.
	RenderTimeout time.Duration
}

func (l RequestLimits) withDefaults() RequestLimits {
	if l.MaxTools <= 0 {
		l.MaxTools = DefaultMaxTools
	}
	if l.MaxToolsBytes <= 0 {
		l.MaxToolsBytes = DefaultMaxToolsBytes
	}
	if l.MaxMessages <= 0 {
		l.MaxMessages = DefaultMaxMessages
	}
	if l.MaxContentParts <= 0 {
		l.MaxContentParts = DefaultMaxContentParts
	}
	return l
}

// Server is the HTTP front end. Create it with New; it is safe for concurrent use.
type Server struct {
	cfg     Config
	tmpl    *chat.Template
	bosText string
	eosText string
	created int64     // Unix time the server was created, reported as the model's creation time
	turns   *turnMemo // recent chat conversations' tokens, for their next turn (turns.go)
	mux     *http.ServeMux
	hosts   hostGuard // which Host headers are answered (Config.ListenAddr, AllowedHosts)
	metrics http.Handler
	// grammarVocab is the model's vocabulary for grammars, built on first use.
	grammarVocab func() (*grammar.Vocab, error)
	// compiling holds a slot per constraint being compiled (see compileSlot).
	compiling chan struct{}

	// modelMux and dispatch are a NewMulti front's: the routes of a model's server (a template's,
	// never served), and what serves a request on one of them.
	modelMux *http.ServeMux
	dispatch http.HandlerFunc

	// engineStats is what the live view shows of the engine: Config.Engine's, or on a NewMulti
	// front the loaded models' together.
	engineStats func() engine.Stats
}

// New validates cfg and builds the server. The chat template comes from the model's
// tokenizer.chat_template; when it is absent or does not parse, ChatML (chat.Fallback) is used.
func New(cfg Config) (*Server, error) {
	if cfg.Model == nil || cfg.Model.Vocab == nil {
		return nil, errors.New("server: Config.Model is required")
	}
	if cfg.Engine == nil {
		return nil, errors.New("server: Config.Engine is required")
	}
	if cfg.MaxBodyBytes < 0 {
		return nil, fmt.Errorf("server: MaxBodyBytes %d is negative", cfg.MaxBodyBytes)
	}
	if err := checkReasoningFormat(cfg.ReasoningFormat); err != nil {
		return nil, fmt.Errorf("server: ReasoningFormat: %w", err)
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ModelID == "" {
		cfg.ModelID = filepath.Base(cfg.Model.Path)
	}
	cfg.Limits = cfg.Limits.withDefaults()
	if cfg.ParseBudget == nil {
		cfg.ParseBudget = NewParseBudget(0, 0)
	}
	hosts, err := newHostGuard(cfg.ListenAddr, cfg.AllowedHosts)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, created: time.Now().Unix(), hosts: hosts, turns: newTurnMemo(defaultTurnEntries, defaultTurnBytes)}
	s.grammarVocab = sync.OnceValues(s.buildGrammarVocab)
	s.engineStats = cfg.Engine.Stats
	s.compiling = make(chan struct{}, compileSlots())
	v := cfg.Model.Vocab
	if v.BOS() >= 0 {
		s.bosText = v.Token(v.BOS())
	}
	if v.EOS() >= 0 {
		s.eosText = v.Token(v.EOS())
	}
	if cfg.ChatTemplate != "" {
		t, err := chat.Parse(cfg.ChatTemplate)
		if err != nil {
			return nil, fmt.Errorf("server: the chat template given does not parse: %w", err)
		}
		s.tmpl = t
	} else if src := cfg.Model.ChatTemplate(); src != "" {
		t, err := chat.Parse(src)
		if err != nil {
			cfg.Logger.Warn("the model's chat template does not parse; using ChatML", "err", err)
		}
		s.tmpl = t
	}
	if s.tmpl == nil {
		s.tmpl = chat.Fallback()
	}
	if cfg.Gatherer != nil {
		s.metrics = promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{ErrorLog: slogPrinter{cfg.Logger}})
	}
	s.mux = http.NewServeMux()
	s.route()
	return s, nil
}

// route registers every route of a model's server on s.mux. A NewMulti front runs it on a
// template Server of its own to learn which routes are a model's.
func (s *Server) route() {
	// OpenAI's models routes, also without /v1 as llama-server accepts them (a front answers
	// them for all its models; server/openai has the others), then the rest.
	for _, prefix := range []string{"/v1", ""} {
		s.mux.HandleFunc("GET "+prefix+"/models", s.handleModels)
		s.mux.HandleFunc("GET "+prefix+"/models/{id}", s.handleModel)
	}
	s.mux.HandleFunc("GET /health", s.handleHealth)
	s.mux.HandleFunc("GET /ready", s.handleReady)
	s.mux.HandleFunc("GET /metrics", s.handleMetrics)
	s.mux.HandleFunc("GET /live", s.handleLive)
	if s.cfg.KVBlocks != nil {
		s.mux.Handle("POST /kv/blocks", s.cfg.KVBlocks)
	}
	for _, d := range s.cfg.Dialects { // the dialects' packages (dialect.go)
		d(s)
	}
	// The web page only at exactly / so that unknown API paths keep their JSON 404.
	s.mux.Handle("GET /{$}", web.Page())
	s.mux.Handle("GET /ui/", web.Assets())
}

// Handler returns the server's HTTP handler: security headers and Host check, CORS, routing,
// API-key check, request logging, and the drain of a body refused with 413.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &recorder{ResponseWriter: w, status: http.StatusOK}
		body := r.Body
		s.serveRecovering(rec, r) // a panic: a 500 with an error id, logged and counted (recover.go)
		s.linger(rec, r, body)    // after a 413, the client gets to read it (linger.go)
		s.cfg.Logger.Debug("request", "method", r.Method, "path", r.URL.Path, "status", rec.status,
			"bytes", rec.bytes, "duration", time.Since(start), "remote", r.RemoteAddr)
	})
}

// methods probed for the Allow header of a 405.
var methods = []string{http.MethodGet, http.MethodPost}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if !s.secure(w, r) || s.cors(w, r) {
		return
	}
	own, pattern := s.pattern(r)
	if pattern == "" { // no route: find out whether another method has one (405) or none (404)
		var allow []string
		for _, m := range methods {
			probe := r.Clone(r.Context())
			probe.Method = m
			if _, p := s.pattern(probe); p != "" {
				allow = append(allow, m)
			}
		}
		if len(allow) == 0 {
			WriteError(w, NotFound(fmt.Sprintf("no route %s %s", r.Method, r.URL.Path)))
			return
		}
		w.Header().Set("Allow", strings.Join(allow, ", "))
		WriteError(w, &APIError{Status: http.StatusMethodNotAllowed, Type: "invalid_request_error",
			Code: "method_not_allowed", Message: fmt.Sprintf("%s %s is not supported: use %s", r.Method, r.URL.Path, strings.Join(allow, " or "))})
		return
	}
	// /health answers without a key so that load balancers can probe it, and the web page and
	// its assets so that a browser can show them (the page asks for the key and sends it itself).
	if !public(r.URL.Path) && !s.authorized(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="ubatch"`)
		WriteError(w, &APIError{Status: http.StatusUnauthorized, Type: "authentication_error",
			Code: "invalid_api_key", Message: "invalid or missing API key: send Authorization: Bearer KEY"})
		return
	}
	if s.cfg.CacheSaltPerKey {
		r = withTenantSalt(r)
	}
	if !own {
		s.dispatch(w, r) // a NewMulti front: a route of the request's model
		return
	}
	s.mux.ServeHTTP(w, r) // (it sets the path values that Handler does not)
}

// pattern is the route of r: on s.mux (own), or on a front's modelMux, the routes it hands to
// the request's model; "" when neither has one.
func (s *Server) pattern(r *http.Request) (own bool, pattern string) {
	if _, p := s.mux.Handler(r); p != "" {
		return true, p
	}
	if s.modelMux != nil {
		if _, p := s.modelMux.Handler(r); p != "" {
			return false, p
		}
	}
	return false, ""
}

// public reports whether path is served without the API key.
func public(path string) bool {
	return path == "/health" || path == "/ready" || path == "/" || strings.HasPrefix(path, "/ui/")
}

// authorized checks the bearer token in constant time.
func (s *Server) authorized(r *http.Request) bool {
	if s.cfg.APIKey == "" {
		return true
	}
	return subtle.ConstantTimeCompare([]byte(httpauth.Bearer(r)), []byte(s.cfg.APIKey)) == 1
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) {
	if s.metrics == nil {
		WriteError(w, NotFound("metrics are not enabled on this server"))
		return
	}
	if s.cfg.Metrics != nil {
		// Engine gauges are otherwise only updated by steps, and an idle engine takes none.
		s.cfg.Metrics.ObserveStats(s.cfg.Engine.Stats())
	}
	s.metrics.ServeHTTP(w, r)
}

type modelJSON struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
	// Status is set by a NewMulti front: whether the model is in memory.
	Status *modelStatus `json:"status,omitempty"`
}

// modelStatus is a model's state in a front's /v1/models: "loaded", "loading" or "unloaded".
type modelStatus struct {
	Value string `json:"value"`
}

func (s *Server) handleModels(w http.ResponseWriter, r *http.Request) {
	WriteJSON(w, http.StatusOK, map[string]any{
		"object": "list",
		"data":   []modelJSON{{ID: s.cfg.ModelID, Object: "model", Created: s.created, OwnedBy: "ubatch"}},
	})
}

// handleModel is OpenAI's GET /v1/models/{id}: the served model, or 404 for any other id.
func (s *Server) handleModel(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if id != s.cfg.ModelID {
		WriteError(w, &APIError{Status: http.StatusNotFound, Type: "invalid_request_error", Param: "model", Code: "model_not_found",
			Message: "the model " + id + " does not exist: this server serves " + s.cfg.ModelID})
		return
	}
	WriteJSON(w, http.StatusOK, modelJSON{ID: s.cfg.ModelID, Object: "model", Created: s.created, OwnedBy: "ubatch"})
}

// recorder remembers the status and size of a response for the request log. It forwards Flush
// (through Unwrap) so that streaming keeps working behind it.
type recorder struct {
	http.ResponseWriter
	status      int
	bytes       int
	wroteHeader bool
}

func (r *recorder) WriteHeader(code int) {
	if !r.wroteHeader {
		r.status, r.wroteHeader = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(p []byte) (int, error) {
	r.wroteHeader = true
	n, err := r.ResponseWriter.Write(p)
	r.bytes += n
	return n, err
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// slogPrinter adapts a slog.Logger to promhttp's Println-style error log.
type slogPrinter struct{ l *slog.Logger }

func (p slogPrinter) Println(v ...any) { p.l.Error(fmt.Sprint(v...)) }
