package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"ubatch/engine"
	"ubatch/gguf"
	"ubatch/server/web"
)

// The front of several models: one Server without a model of its own (NewMulti) answers the
// listings (/v1/models, /api/tags, /api/ps), /health, /metrics, /live and the web page itself,
// and hands every other route of a model's Server (Server.route) to the model the request names (its body's "model",
// or ?model= on GET routes), loaded through the Registry. The front does the Host check, CORS,
// the API key and panic recovery once; the model's own Server then only routes and answers.

// NewMulti builds the front of reg's models. cfg's Model and Engine must be nil; its security
// fields (APIKey, CORSOrigins, ListenAddr, AllowedHosts), MaxBodyBytes, Logger and Gatherer
// (the process's own series; every loaded model's are added to it) apply to every route;
// ChatTemplate and Sampling are what /api/show reports for a model not loaded.
func NewMulti(cfg Config, reg *Registry) (*Server, error) {
	if cfg.Model != nil || cfg.Engine != nil {
		return nil, errors.New("server: NewMulti's Config has no Model or Engine: the registry loads them")
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = reg.cfg.Logger
	}
	hosts, err := newHostGuard(cfg.ListenAddr, cfg.AllowedHosts)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, created: time.Now().Unix(), hosts: hosts, mux: http.NewServeMux()}
	f := &front{s: s, reg: reg}
	s.engineStats = f.stats
	// The routes of a model's Server, learnt from a template that is never served: every route
	// the front does not answer itself goes to the request's model.
	tmpl := &Server{mux: http.NewServeMux(), cfg: Config{KVBlocks: http.NotFoundHandler(), Dialects: cfg.Dialects}} // (optional routes too)
	tmpl.route()
	s.modelMux, s.dispatch = tmpl.mux, f.dispatch
	for _, prefix := range []string{"/v1", ""} {
		s.mux.HandleFunc("GET "+prefix+"/models", f.handleModels)
		s.mux.HandleFunc("GET "+prefix+"/models/{id}", f.handleModel)
	}
	s.mux.HandleFunc("GET /api/tags", f.handleTags)
	s.mux.HandleFunc("GET /api/ps", f.handlePS)
	s.mux.HandleFunc("GET /api/version", s.HandleOllamaVersion)
	s.mux.HandleFunc("POST /api/pull", f.handlePull)
	s.mux.HandleFunc("POST /api/show", f.handleShow)
	s.mux.HandleFunc("GET /health", s.handleHealth)
	s.mux.HandleFunc("GET /ready", f.handleReady)
	s.mux.HandleFunc("GET /metrics", f.handleMetrics)
	s.mux.HandleFunc("GET /live", s.handleLive) // cfg.Live: every model's engine observes it
	s.mux.Handle("GET /{$}", web.Page())
	s.mux.Handle("GET /ui/", web.Assets())
	return s, nil
}

// front routes the requests of a NewMulti server to its registry's models.
type front struct {
	s   *Server
	reg *Registry

	mu      sync.Mutex
	entries map[string]ollamaCached // /api/tags' entries by path, read once per file version

	// pulling is set while an /api/pull downloads: a client asks for the download, so one at a
	// time, and the next is a 429 until it ends (disk and bandwidth are the node's).
	pulling atomic.Bool
}

type ollamaCached struct {
	mod  time.Time
	size int64
	e    OllamaIdentity
}

// frontError answers err in the shape of r's API: Ollama's on /api/, else OpenAI's.
func frontError(w http.ResponseWriter, r *http.Request, err error) {
	if ae := ToAPIError(err); ae.Code == "model_loading" || ae.Code == "model_busy" {
		w.Header().Set("Retry-After", "5")
	}
	if strings.HasPrefix(r.URL.Path, "/api/") {
		WriteOllamaError(w, err)
		return
	}
	WriteError(w, err)
}

// dispatch finds the request's model, loads it if need be, and serves the request with the
// model's routes; the model stays in use until the answer is written.
func (f *front) dispatch(w http.ResponseWriter, r *http.Request) {
	name, keep, err := f.requestModel(r)
	if err != nil {
		frontError(w, r, err)
		return
	}
	var spec ModelSpec
	var mapped bool
	if name == "" && r.Method == http.MethodGet {
		spec, err = f.getDefault()
	} else {
		// A delete names what it removes: never another model's file.
		spec, mapped, err = f.reg.resolve(name, r.URL.Path != "/api/delete")
	}
	if err != nil {
		frontError(w, r, err)
		return
	}
	received := time.Now()
	slot, err := f.reg.acquire(r.Context(), spec)
	if err != nil {
		frontError(w, r, err)
		return
	}
	defer f.reg.release(slot, keep)
	ctx := context.WithValue(r.Context(), loadKey{}, loadInfo{received: received, load: time.Since(received), mapped: mapped})
	r = r.WithContext(ctx)
	ms := slot.l.Server
	if rec, ok := w.(*recorder); ok { // (always, behind Handler) a panic is counted in the model's metrics
		recoverPanics(rec, r, ms.cfg.Logger, ms.cfg.Metrics, ms.mux.ServeHTTP)
		return
	}
	ms.mux.ServeHTTP(w, r)
}

// loadKey keys a request's loadInfo in its context.
type loadKey struct{}

// loadInfo is when the front received a request and how long getting its model took; mapped
// is set when the request named another model and the one served answers it
// (RegistryConfig.AnyName).
type loadInfo struct {
	received time.Time
	load     time.Duration
	mapped   bool
}

// RequestLoad is when the request of ctx arrived and how long it waited for its model to load
// (now and 0 without a front).
func RequestLoad(ctx context.Context) (time.Time, time.Duration) {
	if li, ok := ctx.Value(loadKey{}).(loadInfo); ok {
		return li.received, li.load
	}
	return time.Now(), 0
}

// NameMapped reports whether the front answered the request of ctx with its one model though
// the request named another (RegistryConfig.AnyName).
func NameMapped(ctx context.Context) bool {
	li, _ := ctx.Value(loadKey{}).(loadInfo)
	return li.mapped
}

// getDefault is the model of a GET route without ?model= (/props, /slots, a stored
// response): the default one, else the most recently used loaded one.
func (f *front) getDefault() (ModelSpec, error) {
	spec, err := f.reg.Find("")
	if err == nil {
		return spec, nil
	}
	var last *slot
	f.reg.mu.Lock()
	for _, s := range f.reg.loaded {
		if s.l != nil && (last == nil || s.lastUsed.After(last.lastUsed)) {
			last = s
		}
	}
	f.reg.mu.Unlock()
	if last == nil {
		return ModelSpec{}, err
	}
	return last.spec, nil
}

// modelPeek is what the front reads of a body: the model, and Ollama's keep_alive.
type modelPeek struct {
	Model     json.RawMessage `json:"model"`
	Name      json.RawMessage `json:"name"` // /api/show's and /api/pull's older name of model
	KeepAlive json.RawMessage `json:"keep_alive"`
}

// requestModel reads the model a request names (its body's, or ?model= on GET and DELETE)
// without consuming the body, and on Ollama's routes its keep_alive.
func (f *front) requestModel(r *http.Request) (name string, keep *time.Duration, err error) {
	if r.Method != http.MethodPost {
		return r.URL.Query().Get("model"), nil, nil
	}
	limit := f.s.cfg.MaxBodyBytes
	buf, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return "", nil, &APIError{Status: http.StatusBadRequest, Type: "invalid_request_error", Message: "reading the request body: " + err.Error()}
	}
	if int64(len(buf)) > limit {
		return "", nil, &APIError{Status: http.StatusRequestEntityTooLarge, Type: "invalid_request_error", Code: "request_too_large",
			Message: fmt.Sprintf("the request body is larger than %d bytes", limit)}
	}
	r.Body = io.NopCloser(bytes.NewReader(buf))
	var p modelPeek
	if json.Unmarshal(buf, &p) != nil {
		return "", nil, nil // the model's route words the JSON error (a default model's, or "model is required")
	}
	raw := p.Model
	if len(raw) == 0 || IsNull(raw) {
		raw = p.Name
	}
	if len(raw) > 0 && !IsNull(raw) {
		if json.Unmarshal(raw, &name) != nil {
			return "", nil, BadRequest("model", "model must be a string")
		}
	}
	if strings.HasPrefix(r.URL.Path, "/api/") && len(p.KeepAlive) > 0 && !IsNull(p.KeepAlive) {
		d, err := parseKeepAlive(p.KeepAlive)
		if err != nil {
			return "", nil, err
		}
		keep = &d
	}
	return name, keep, nil
}

// parseKeepAlive reads Ollama's keep_alive: a number of seconds or a duration string ("5m",
// "1h"); negative is forever (-1 here), 0 unloads once the request is answered.
func parseKeepAlive(raw json.RawMessage) (time.Duration, error) {
	var d time.Duration
	var secs float64
	var str string
	switch {
	case json.Unmarshal(raw, &secs) == nil:
		if math.IsNaN(secs) || secs > float64(math.MaxInt64/int64(time.Second)) {
			return 0, BadRequest("keep_alive", "keep_alive %v: too large", secs)
		}
		d = time.Duration(secs * float64(time.Second))
	case json.Unmarshal(raw, &str) == nil:
		var err error
		if d, err = time.ParseDuration(str); err != nil {
			n, nerr := strconv.ParseFloat(str, 64)
			if nerr != nil || math.IsNaN(n) || math.Abs(n) > float64(math.MaxInt64/int64(time.Second)) {
				return 0, BadRequest("keep_alive", "keep_alive %s: use a duration such as \"5m\", or seconds", Echo(str))
			}
			d = time.Duration(n * float64(time.Second))
		}
	default:
		return 0, BadRequest("keep_alive", "keep_alive must be a duration string or a number of seconds")
	}
	if d < 0 {
		d = -1
	}
	return d, nil
}

// modelJSON's status in a front's listings.
func (f *front) handleModels(w http.ResponseWriter, r *http.Request) {
	specs, err := f.reg.Specs()
	if err != nil {
		WriteError(w, InternalError(err))
		return
	}
	data := make([]modelJSON, 0, len(specs))
	for _, s := range specs {
		data = append(data, f.modelJSON(s))
	}
	WriteJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

func (f *front) modelJSON(s ModelSpec) modelJSON {
	created := f.s.created
	if fi, err := os.Stat(s.Path); err == nil {
		created = fi.ModTime().Unix()
	}
	return modelJSON{ID: s.ID, Object: "model", Created: created, OwnedBy: "ubatch", Status: &modelStatus{Value: f.reg.state(s.ID)}}
}

func (f *front) handleModel(w http.ResponseWriter, r *http.Request) {
	spec, err := f.reg.Find(r.PathValue("id"))
	if err != nil {
		WriteError(w, err)
		return
	}
	WriteJSON(w, http.StatusOK, f.modelJSON(spec))
}

// entry is spec's /api/tags entry: the loaded model's own, else read from the file's header
// (once per file version).
func (f *front) entry(spec ModelSpec) (OllamaModelEntry, error) {
	fi, err := os.Stat(spec.Path)
	if err != nil {
		return OllamaModelEntry{}, InternalError(err)
	}
	f.mu.Lock()
	c, ok := f.entries[spec.Path]
	f.mu.Unlock()
	if !ok || !c.mod.Equal(fi.ModTime()) || c.size != fi.Size() {
		file, err := gguf.Open(spec.Path)
		if err != nil {
			return OllamaModelEntry{}, InternalError(fmt.Errorf("model %s: %w", spec.ID, err))
		}
		c = ollamaCached{mod: fi.ModTime(), size: fi.Size(), e: DescribeOllama(spec.ID, spec.Path, file, fi.Size())}
		file.Close()
		f.mu.Lock()
		if f.entries == nil {
			f.entries = map[string]ollamaCached{}
		}
		f.entries[spec.Path] = c
		f.mu.Unlock()
	}
	e := c.e.Entry
	e.Name = ollamaName(spec.ID)
	e.Model = e.Name
	return e, c.e.Err
}

func (f *front) handleTags(w http.ResponseWriter, r *http.Request) {
	specs, err := f.reg.Specs()
	if err != nil {
		WriteOllamaError(w, InternalError(err))
		return
	}
	models := make([]OllamaModelEntry, 0, len(specs))
	for _, s := range specs {
		e, err := f.entry(s)
		if err != nil {
			f.s.cfg.Logger.Warn("listing a model", "model", s.ID, "err", err)
			continue
		}
		models = append(models, e)
	}
	WriteJSON(w, http.StatusOK, map[string]any{"models": models})
}

// handlePS lists the loaded models: size is the memory each holds (weights and KV pool),
// expires_at when it unloads if no request comes (far in the future for a model kept forever).
func (f *front) handlePS(w http.ResponseWriter, r *http.Request) {
	loaded := f.reg.loadedModels()
	models := make([]OllamaModelEntry, 0, len(loaded))
	for _, m := range loaded {
		e, err := f.entry(m.spec) // from the file: m may be unloading, its mapping gone
		if err != nil {
			WriteOllamaError(w, err)
			return
		}
		var vram int64
		e.ModifiedAt, e.SizeVRAM, e.Size = "", &vram, m.l.Bytes
		exp := m.expires
		if exp.IsZero() {
			exp = time.Date(2318, 1, 1, 0, 0, 0, 0, time.UTC)
		}
		e.ExpiresAt = OllamaTime(exp)
		e.ContextLength = m.l.Engine.Limits().NCtxSeq
		models = append(models, e)
	}
	WriteJSON(w, http.StatusOK, map[string]any{"models": models})
}

// stats sums the loaded models' engines for the live view: sequences and KV blocks.
func (f *front) stats() engine.Stats {
	var st engine.Stats
	for _, m := range f.reg.loadedModels() {
		e := m.l.Engine.Stats()
		st.Running += e.Running
		st.Waiting += e.Waiting
		st.KV.Total += e.KV.Total
		st.KV.Used += e.KV.Used
		st.KV.Shared += e.KV.Shared
		st.KV.Cached += e.KV.Cached
		st.KV.Free += e.KV.Free
	}
	return st
}

// handleMetrics exposes the process's series and every loaded model's, labelled model.
func (f *front) handleMetrics(w http.ResponseWriter, r *http.Request) {
	g := prometheus.Gatherers{}
	if f.s.cfg.Gatherer != nil {
		g = append(g, f.s.cfg.Gatherer)
	}
	for _, m := range f.reg.loadedModels() {
		if ms := m.l.Server.cfg.Metrics; ms != nil {
			ms.ObserveStats(m.l.Engine.Stats()) // an idle engine takes no steps that would update its gauges
		}
		if m.l.Metrics != nil {
			g = append(g, m.l.Metrics)
		}
	}
	promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorLog: slogPrinter{f.s.cfg.Logger}}).ServeHTTP(w, r)
}

// handlePull is Ollama's /api/pull: a model already served answers success; another is pulled
// through RegistryConfig.Pull (into the library) with Ollama's progress objects, streamed unless
// stream is false; without Pull it is a 404.
func (f *front) handlePull(w http.ResponseWriter, r *http.Request) {
	var req OllamaNameRequest
	if err := DecodeBody(w, r, f.s.cfg.MaxBodyBytes, &req); err != nil {
		WriteOllamaError(w, err)
		return
	}
	if req.Model == "" {
		req.Model = req.Name
	}
	if req.Model == "" {
		WriteOllamaError(w, BadRequest("model", "model is required"))
		return
	}
	stream := ParseOllamaStream(req.Stream)
	if _, err := f.reg.Find(req.Model); err == nil || f.reg.cfg.Pull == nil {
		if err != nil {
			WriteOllamaError(w, err)
			return
		}
		f.pullDone(w, stream, nil, nil)
		return
	}
	if len(req.Model) > 512 {
		WriteOllamaError(w, BadRequest("model", "model: a name of at most 512 bytes"))
		return
	}
	if !f.pulling.CompareAndSwap(false, true) {
		WriteOllamaError(w, &APIError{Status: http.StatusTooManyRequests, Type: "rate_limit_error", Param: "model", Code: "pull_in_progress",
			Message: "another model is being pulled: one pull at a time; retry when it is done"})
		return
	}
	defer f.pulling.Store(false)
	var sse *SSEWriter
	progress := func(done, total int64) {}
	if stream {
		sse = OllamaRoute{}.Open(w)
		sse.Send(map[string]string{"status": "pulling manifest"})
		progress = func(done, total int64) {
			p := map[string]any{"status": "pulling " + req.Model, "digest": req.Model, "completed": done}
			if total >= 0 {
				p["total"] = total
			}
			sse.Send(p)
		}
	}
	err := f.reg.cfg.Pull(r.Context(), req.Model, progress)
	f.reg.refresh()
	if err == nil {
		if _, err = f.reg.Find(req.Model); err != nil {
			err = InternalError(fmt.Errorf("pulled %s, but the library does not list it: %w", req.Model, err))
		}
	}
	if err != nil && !errors.As(err, new(*APIError)) {
		err = &APIError{Status: http.StatusNotFound, Type: "invalid_request_error", Param: "model", Code: "pull_failed",
			Message: fmt.Sprintf("pull %s: %v", req.Model, err)}
	}
	f.pullDone(w, stream, sse, err)
}

// pullDone ends a pull: {"status": "success"}, or the error (a line of the stream once started).
func (f *front) pullDone(w http.ResponseWriter, stream bool, sse *SSEWriter, err error) {
	switch {
	case sse != nil && err != nil:
		sse.sendError(err)
	case err != nil:
		WriteOllamaError(w, err)
	case sse != nil:
		sse.Send(map[string]string{"status": "success"})
	case stream:
		OllamaRoute{}.Open(w).Send(map[string]string{"status": "success"})
	default:
		WriteJSON(w, http.StatusOK, map[string]string{"status": "success"})
	}
}
