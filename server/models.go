package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"ubatch/engine"
)

// Several models per server. A Registry knows the models that can be served (ModelSpec, e.g. the
// library's) and holds those in memory (Loaded: a Server over its own engine, KV cache and
// metrics). A model is loaded on its first request, by one goroutine however many requests ask
// at once; it stays while requests use it and for its keep-alive after the last one, then it is
// closed: engine, runner context and KV pool dropped, the GGUF unmapped, and the Go heap given
// back to the system. NewMulti puts the registry behind one HTTP handler.

// DefaultKeepAlive is how long an idle model stays loaded (Ollama's default).
const DefaultKeepAlive = 5 * time.Minute

// DefaultLoadTimeout bounds how long a request waits for its model to load.
const DefaultLoadTimeout = 5 * time.Minute

// ModelSpec is a model a Registry can serve.
type ModelSpec struct {
	ID      string   // the name the API reports (a library name, --alias, or the file name)
	Aliases []string // other names it answers to (the ORG/REPO:QUANT it was pulled as, ...)
	Path    string   // the GGUF file
	Size    int64    // the file's size in bytes: the registry's estimate of its memory before it is loaded
}

// names are every name s answers to: its id, aliases, and the file name with and without
// .gguf.
func (s ModelSpec) names() []string {
	base := filepath.Base(s.Path)
	return append([]string{s.ID, base, strings.TrimSuffix(base, filepath.Ext(base))}, s.Aliases...)
}

// answersTo reports whether name names s (SameModelName).
func (s ModelSpec) answersTo(name string) bool {
	return slices.ContainsFunc(s.names(), func(n string) bool { return n != "" && SameModelName(n, name) })
}

// SameModelName reports whether a and b name one model as Ollama compares names: without case,
// ":latest" implied where there is no tag ("qwen3" is "qwen3:latest").
func SameModelName(a, b string) bool {
	return strings.EqualFold(strings.TrimSuffix(a, ":latest"), strings.TrimSuffix(b, ":latest"))
}

// ollamaName is the name:tag Ollama's listings (/api/tags, /api/ps) give the model id: lower
// case, a file name without .gguf, ":latest" where there is no tag (stories260K.gguf is
// stories260k:latest; a library name, qwen3-0.6b:q4_k_m, stays). Requests naming it so find
// the model (answersTo). The library's own rule is hub.NormalizeName; this adds the file stem.
func ollamaName(id string) string {
	n := strings.ToLower(id)
	n = strings.TrimSuffix(n, ".gguf")
	if !strings.Contains(n[strings.LastIndex(n, "/")+1:], ":") {
		n += ":latest"
	}
	return n
}

// Loaded is one model in memory, as a Loader builds it.
type Loaded struct {
	Server  *Server             // its routes, over Engine
	Engine  *engine.Engine      // running until Close
	Metrics prometheus.Gatherer // its series, labelled model=ID; nil: none
	// Bytes is the memory it holds (weights and KV pool), counted against RegistryConfig.MemBudget.
	Bytes int64
	// Close stops the engine and frees the context, KV pool and file mapping; called once, when
	// no request uses the model.
	Close func()
}

// Loader builds spec's Loaded. ctx ends when the registry closes.
type Loader func(ctx context.Context, spec ModelSpec) (*Loaded, error)

// RegistryConfig configures a Registry. Models and Load are required.
type RegistryConfig struct {
	// Models lists what can be served; it is read again (at most every second) so that a model
	// pulled into the library while the server runs is found.
	Models func() ([]ModelSpec, error)
	Load   Loader
	// Default is the id of the model a request without "model" goes to; "" means the only
	// model when Models lists one, else such a request is a 400 naming model.
	Default string
	// KeepAlive is how long a model stays loaded after its last request; 0 unloads it at once,
	// negative keeps it forever. A request's keep_alive (Ollama's routes) overrides it.
	KeepAlive time.Duration
	// MaxModels bounds the models loaded at once (0: no bound) and MemBudget their Bytes in all
	// (0: no bound): loading another first unloads the least recently used idle ones.
	MaxModels int
	MemBudget int64
	// LoadTimeout bounds a request's wait for its model to load (then 503 with Retry-After);
	// 0 means DefaultLoadTimeout.
	LoadTimeout time.Duration
	// AnyName is llama-server's leniency for a server of one model (serve -m once): a request
	// naming any other model is answered by it, under its own id, and each unknown name is
	// logged once (up to maxLoggedNames). It applies only while Models lists one model; with
	// several, an unknown name stays a 404 model_not_found. Pulls and deletes stay strict.
	AnyName bool
	// Pull, when set, serves Ollama's /api/pull for a model the server does not have yet: it puts
	// name (ORG/REPO[:QUANT]) into what Models lists, calling progress as bytes arrive (total < 0
	// when unknown). nil: /api/pull only knows the models served.
	Pull   func(ctx context.Context, name string, progress func(done, total int64)) error
	Logger *slog.Logger // nil: slog.Default()
}

// Registry holds the loaded models. It is safe for concurrent use.
type Registry struct {
	cfg    RegistryConfig
	ctx    context.Context // ends at Close: loads in progress give up
	cancel context.CancelFunc

	mu      sync.Mutex
	loaded  map[string]*slot // by ModelSpec.ID: loading or loaded
	closed  bool
	specs   []ModelSpec // Models' last answer
	specErr error
	specAt  time.Time
	named   map[string]bool // the unknown names AnyName answered and logged
}

// maxLoggedNames bounds the unknown names a Registry remembers having logged: a client choosing
// a new name per request grows nothing past it.
const maxLoggedNames = 256

// slot is one model loading or loaded. Its fields are guarded by Registry.mu, but l and err,
// which are written once before ready closes.
type slot struct {
	spec     ModelSpec
	ready    chan struct{}
	l        *Loaded
	err      error
	loadTime time.Duration
	refs     int       // requests using it; never unloaded while > 0
	lastUsed time.Time // for least-recently-used eviction
	keep     time.Duration
	expires  time.Time // when it unloads, idle; zero: never
	gen      uint64    // bumped on every use, so that an older expiry timer does nothing
	timer    *time.Timer
}

// NewRegistry checks cfg and makes an empty registry.
func NewRegistry(cfg RegistryConfig) (*Registry, error) {
	if cfg.Models == nil || cfg.Load == nil {
		return nil, errors.New("server: RegistryConfig.Models and Load are required")
	}
	if cfg.MaxModels < 0 || cfg.MemBudget < 0 || cfg.LoadTimeout < 0 {
		return nil, errors.New("server: RegistryConfig.MaxModels, MemBudget and LoadTimeout must not be negative")
	}
	if cfg.LoadTimeout == 0 {
		cfg.LoadTimeout = DefaultLoadTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Registry{cfg: cfg, ctx: ctx, cancel: cancel, loaded: map[string]*slot{}}, nil
}

// Specs lists the models that can be served.
func (r *Registry) Specs() ([]ModelSpec, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.specsLocked()
}

func (r *Registry) specsLocked() ([]ModelSpec, error) {
	if r.specs == nil || time.Since(r.specAt) > time.Second {
		r.specs, r.specErr = r.cfg.Models()
		r.specAt = time.Now()
	}
	return r.specs, r.specErr
}

// refresh makes the next listing read Models again (a model was pulled).
func (r *Registry) refresh() {
	r.mu.Lock()
	r.specs = nil
	r.mu.Unlock()
}

// Find resolves a request's model name: "" is the default model. It is strict: an unknown name
// is a 404 whatever AnyName says.
func (r *Registry) Find(name string) (ModelSpec, error) {
	spec, _, err := r.resolve(name, false)
	return spec, err
}

// resolve is Find; with lenient and RegistryConfig.AnyName, a name the one model does not
// answer to resolves to it (mapped true), logged the first time.
func (r *Registry) resolve(name string, lenient bool) (spec ModelSpec, mapped bool, err error) {
	spec, err = r.find(name)
	if err == nil || !lenient || !r.cfg.AnyName || ToAPIError(err).Code != "model_not_found" {
		return spec, false, err
	}
	specs, lerr := r.Specs()
	if lerr != nil || len(specs) != 1 {
		return spec, false, err
	}
	r.mu.Lock()
	first := !r.named[name] && len(r.named) < maxLoggedNames
	if first {
		if r.named == nil {
			r.named = map[string]bool{}
		}
		r.named[name] = true
	}
	r.mu.Unlock()
	if first {
		r.cfg.Logger.Info("a request names another model: the one model served answers it", "name", name, "model", specs[0].ID)
	}
	return specs[0], true, nil
}

func (r *Registry) find(name string) (ModelSpec, error) {
	specs, err := r.Specs()
	if err != nil {
		return ModelSpec{}, InternalError(fmt.Errorf("listing the models: %w", err))
	}
	if name == "" {
		def := r.cfg.Default
		if def == "" && len(specs) == 1 {
			return specs[0], nil
		}
		for _, s := range specs {
			if def != "" && s.ID == def {
				return s, nil
			}
		}
		return ModelSpec{}, BadRequest("model", "model is required: this server serves several models (%s); GET /v1/models lists them", specIDs(specs))
	}
	for _, s := range specs { // an id wins over another model's alias
		if strings.EqualFold(s.ID, name) {
			return s, nil
		}
	}
	for _, s := range specs {
		if s.answersTo(name) {
			return s, nil
		}
	}
	return ModelSpec{}, &APIError{Status: http.StatusNotFound, Type: "invalid_request_error", Param: "model", Code: "model_not_found",
		Message: fmt.Sprintf("model %s not found: this server serves %s (GET /v1/models; ubatch pull adds to the library)", Echo(name), specIDs(specs))}
}

func specIDs(specs []ModelSpec) string {
	if len(specs) == 0 {
		return "no model (the library is empty)"
	}
	ids := make([]string, len(specs))
	for i, s := range specs {
		ids[i] = s.ID
	}
	return strings.Join(ids, ", ")
}

// errNoRoom is a load that must wait for a busy model to be released.
func errNoRoom(format string, args ...any) *APIError {
	return &APIError{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "model_busy",
		Message: fmt.Sprintf(format, args...) + "; retry later"}
}

// acquire returns spec loaded and marks it used until release; it waits for a load in progress
// (its own or another request's) up to LoadTimeout.
func (r *Registry) acquire(ctx context.Context, spec ModelSpec) (*slot, error) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, errShutdown
	}
	s := r.loaded[spec.ID]
	var victims []*slot
	if s == nil {
		var err error
		if victims, err = r.makeRoomLocked(spec.ID, spec.Size, true); err != nil {
			r.mu.Unlock()
			return nil, err
		}
		s = &slot{spec: spec, ready: make(chan struct{}), lastUsed: time.Now(), keep: r.cfg.KeepAlive}
		r.loaded[spec.ID] = s
		go r.load(s, victims)
	}
	s.refs++
	s.gen++
	if s.timer != nil {
		s.timer.Stop()
	}
	r.mu.Unlock()
	timer := time.NewTimer(r.cfg.LoadTimeout)
	defer timer.Stop()
	select {
	case <-s.ready:
	case <-ctx.Done():
		r.release(s, nil)
		return nil, ctx.Err()
	case <-timer.C:
		r.release(s, nil)
		return nil, &APIError{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "model_loading",
			Message: fmt.Sprintf("model %s is still loading after %v; retry later", spec.ID, r.cfg.LoadTimeout)}
	}
	if s.err != nil {
		r.release(s, nil)
		return nil, s.err
	}
	return s, nil
}

// load closes the victims (the memory they hold is needed), then loads s.
func (r *Registry) load(s *slot, victims []*slot) {
	for _, v := range victims {
		r.unload(v, "room for "+s.spec.ID)
	}
	start := time.Now()
	l, err := r.cfg.Load(r.ctx, s.spec)
	r.mu.Lock()
	s.loadTime = time.Since(start)
	if err != nil {
		s.err = &APIError{Status: http.StatusInternalServerError, Type: "server_error", Code: "model_load_failed",
			Message: fmt.Sprintf("loading model %s: %v", s.spec.ID, err)}
		delete(r.loaded, s.spec.ID) // the next request tries again
	} else {
		s.l = l
	}
	close(s.ready)
	now := err == nil && r.idleLocked(s) // every request waiting for it gave up
	var more []*slot
	if err == nil {
		more, _ = r.makeRoomLocked(s.spec.ID, l.Bytes, false) // the estimate was the file: the KV pool may need more room
	}
	r.mu.Unlock()
	if err != nil {
		r.cfg.Logger.Error("loading a model failed", "model", s.spec.ID, "err", err)
		return
	}
	r.cfg.Logger.Info("model loaded", "model", s.spec.ID, "bytes", l.Bytes, "load_time", s.loadTime)
	if now {
		r.unload(s, "keep_alive 0")
	}
	for _, v := range more {
		r.unload(v, "room for "+s.spec.ID)
	}
}

// makeRoomLocked picks the idle loaded models to unload, least recently used first, so that
// model id of need bytes fits MaxModels and MemBudget (before: it is about to load, else it is
// loaded and counted as such), and removes them from the registry; the caller closes them.
// Busy or loading models are never picked: when they alone fill the room before a load, it is a
// 503 and nothing is unloaded.
func (r *Registry) makeRoomLocked(id string, need int64, before bool) ([]*slot, error) {
	var idle []*slot
	count, bytes := 1, need // id itself
	for _, s := range r.loaded {
		if s.spec.ID == id {
			continue
		}
		count++
		bytes += s.bytes()
		if s.refs == 0 && s.l != nil {
			idle = append(idle, s)
		}
	}
	slices.SortFunc(idle, func(a, b *slot) int { return a.lastUsed.Compare(b.lastUsed) })
	var victims []*slot
	over := func() bool {
		return r.cfg.MaxModels > 0 && count > r.cfg.MaxModels || r.cfg.MemBudget > 0 && bytes > r.cfg.MemBudget && count > 1
	}
	for over() && len(idle) > 0 {
		v := idle[0]
		idle = idle[1:]
		victims = append(victims, v)
		count--
		bytes -= v.bytes()
		delete(r.loaded, v.spec.ID)
	}
	if over() && before {
		for _, v := range victims { // nothing is unloaded for a load that cannot happen
			r.loaded[v.spec.ID] = v
		}
		return nil, errNoRoom("no room to load model %s: the models loaded are in use (max models %d, memory budget %d MiB)",
			id, r.cfg.MaxModels, r.cfg.MemBudget>>20)
	}
	return victims, nil
}

func (s *slot) bytes() int64 {
	if s.l != nil {
		return s.l.Bytes
	}
	return s.spec.Size
}

// release ends a request's use of s. keep, when set, is the request's keep_alive; else the
// registry's. An idle model unloads after it (at once for 0, never when negative).
func (r *Registry) release(s *slot, keep *time.Duration) {
	r.mu.Lock()
	s.refs--
	s.lastUsed = time.Now()
	s.keep = r.cfg.KeepAlive
	if keep != nil {
		s.keep = *keep
	}
	now := r.idleLocked(s)
	r.mu.Unlock()
	if now {
		r.unload(s, "keep_alive 0")
	}
}

// idleLocked starts s's keep-alive if nothing uses it; true when it is to unload at once (it
// is out of the registry then: the caller unloads it).
func (r *Registry) idleLocked(s *slot) bool {
	if s.refs > 0 || s.l == nil || r.loaded[s.spec.ID] != s {
		return false
	}
	switch {
	case s.keep < 0:
		s.expires = time.Time{}
	case s.keep == 0:
		delete(r.loaded, s.spec.ID)
		return true
	default:
		s.expires = s.lastUsed.Add(s.keep)
		gen := s.gen
		s.timer = time.AfterFunc(s.keep, func() { r.expire(s, gen) })
	}
	return false
}

// expire unloads s if it has been idle since the use gen counted.
func (r *Registry) expire(s *slot, gen uint64) {
	r.mu.Lock()
	if s.gen != gen || s.refs > 0 || r.loaded[s.spec.ID] != s {
		r.mu.Unlock()
		return
	}
	delete(r.loaded, s.spec.ID)
	r.mu.Unlock()
	r.unload(s, "idle for its keep-alive")
}

// unload closes a model no request uses (it is out of the registry already) and gives the memory
// back: the file mapping is gone with Close, the Go heap (KV pool, scratch) after a collection.
func (r *Registry) unload(s *slot, why string) {
	r.mu.Lock()
	l := s.l
	s.l = nil // a listing's snapshot or a stopped timer must not keep the model's memory reachable
	if s.timer != nil {
		s.timer.Stop()
	}
	r.mu.Unlock()
	l.Close()
	runtime.GC()
	debug.FreeOSMemory()
	r.cfg.Logger.Info("model unloaded", "model", s.spec.ID, "why", why)
}

// Preload loads id now (e.g. the one model of a server, so that a bad file fails at start-up)
// and then lets it idle as any other.
func (r *Registry) Preload(ctx context.Context, id string) (*Loaded, error) {
	spec, err := r.Find(id)
	if err != nil {
		return nil, err
	}
	s, err := r.acquire(ctx, spec)
	if err != nil {
		var ae *APIError
		if errors.As(err, &ae) && ae.Code == "model_load_failed" {
			return nil, errors.New(ae.Message)
		}
		return nil, err
	}
	l := s.l
	r.release(s, nil)
	return l, nil
}

// loadedModel is a snapshot of one loaded model for listings.
type loadedModel struct {
	spec    ModelSpec
	l       *Loaded
	expires time.Time // zero: never
	busy    bool
	load    time.Duration
}

// Loaded lists the models in memory (not those still loading), by id.
func (r *Registry) loadedModels() []loadedModel {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []loadedModel
	for _, s := range r.loaded {
		if s.l == nil {
			continue
		}
		exp := s.expires
		if s.refs > 0 && s.keep > 0 { // in use: it expires its keep-alive after the last request
			exp = time.Now().Add(s.keep)
		}
		out = append(out, loadedModel{spec: s.spec, l: s.l, expires: exp, busy: s.refs > 0, load: s.loadTime})
	}
	slices.SortFunc(out, func(a, b loadedModel) int { return strings.Compare(a.spec.ID, b.spec.ID) })
	return out
}

// state is "loaded", "loading" or "unloaded".
func (r *Registry) state(id string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch s := r.loaded[id]; {
	case s == nil:
		return "unloaded"
	case s.l == nil:
		return "loading"
	}
	return "loaded"
}

// closeWait bounds how long Close waits for the requests still holding a model. Serve has
// cut every request by the time it returns, so one still holding a model then is stuck where
// no context reaches (a system call): waiting on it would keep the process from exiting.
const closeWait = 5 * time.Second

// Close unloads every model once no request uses it and refuses new requests; loads in progress
// are given up. A model still in use (or loading) after closeWait is left as it is, with a
// warning: the process is exiting, and unloading weights under a running request could crash it.
func (r *Registry) Close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.cancel()
	deadline := time.Now().Add(closeWait)
	for {
		r.mu.Lock()
		var idle []*slot
		left := 0
		for id, s := range r.loaded {
			select {
			case <-s.ready:
			default:
				left++
				continue
			}
			if s.refs > 0 {
				left++
				continue
			}
			delete(r.loaded, id)
			idle = append(idle, s)
		}
		r.mu.Unlock()
		for _, s := range idle {
			r.unload(s, "shutdown")
		}
		if left == 0 {
			return
		}
		if time.Now().After(deadline) {
			r.cfg.Logger.Warn("models still in use or loading at shutdown: exiting without unloading them", "models", left, "waited", closeWait)
			return
		}
		time.Sleep(10 * time.Millisecond) // requests drain within the server's grace
	}
}
