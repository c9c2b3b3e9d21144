// Package router is `ubatch route`: an OpenAI-compatible HTTP front over a fleet of ubatch nodes
// that sends each request to the node most likely to hold its prompt's prefix in its KV cache.
//
// For a completion or chat request it tokenizes the prompt with the model's tokenizer (package
// Prompter), computes the routing hashes of the prompt's full blocks (package prefixhash), asks
// the fleet index in Redis (package fleet) which nodes hold the longest prefix, and scores that
// against each node's load (see decide). Responses, streams included, pass through unchanged. A
// request that fails for a reason of the node's (see retryable) before the first response byte
// is retried on the next best; one whose node dies mid-stream ends with an error event. Fall
// consecutive failures take a node out of rotation, Rise good health checks bring it back. Redis being away degrades routing to load and recent affinity,
// never stops it. The fleet is Config.Nodes, or a Discovery's changing membership (router/kube:
// a Kubernetes Service's endpoints), or else the nodes that publish to Redis.
package router

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"ubatch/fleet"
	"ubatch/kvcache"
)

// DefaultMaxResponseBytes is Config.MaxResponseBytes's default: far above any completion's JSON
// (a 4096-token answer with 20 top logprobs is about 4 MB), small enough that a few hundred
// concurrent responses fit in memory.
const DefaultMaxResponseBytes = 16 << 20

// Config configures a Router. Prompter is required, and Nodes or Index (or both).
type Config struct {
	Prompter *Prompter
	// Index reads the fleet from Redis; nil routes by load alone.
	Index *fleet.Index
	// Nodes are the nodes' base URLs. Empty: the fleet is discovered from Discovery, or else from
	// Index. Given: only these nodes are used, and Redis entries of other nodes are ignored.
	Nodes []string
	// Discovery, when set, gives the fleet's membership as it changes (a Kubernetes Service's
	// endpoints); Nodes must then be empty. See Discovery.
	Discovery Discovery
	// BlockSize is the KV block size assumed for nodes that publish none (default
	// kvcache.DefaultBlockSize, serve's).
	BlockSize int
	// MaxBodyBytes bounds request bodies (413 beyond it); 0 = 4 MiB, the nodes' default. A body
	// is also never sent to a node that publishes a smaller limit.
	MaxBodyBytes int64
	// LoadWeight is how many cached prompt tokens one request of load on a node is worth
	// (default 16), QueueWeight one more request queued beyond its max_running (default 256);
	// see decide.
	LoadWeight, QueueWeight float64
	// PeerCredit (0..1) is the share of a prefix held by a node of the same KV identity that
	// counts as cached on a node that lacks it, since that node fetches the blocks from its peer
	// (serve --peer-kv) instead of computing them. 0 (the default) pins a tenant to the node
	// holding its prefix until load outweighs the whole prefix; near 1 load alone decides
	// between peers, so a tenant spreads as soon as its node is busier than another. See decide.
	PeerCredit float64
	// AffinityTTL is how long the router remembers where it sent a prompt's blocks, covering the
	// time before the node publishes them (default 10 s; negative = off).
	AffinityTTL    time.Duration
	HealthInterval time.Duration // default 1 s
	HealthTimeout  time.Duration // default 1 s
	// Fall is how many failures in a row take a node out of rotation (default 3, as HAProxy's
	// fall): Fall failed requests (a 5xx the node did not give as a well-formed verdict on the
	// request, transport error, timeout, garbage; a request the node answers below 500 resets
	// the count, a busy 503 with Retry-After and a verdict 5xx neither count nor reset), or Fall
	// failed health checks (a good check resets that count; a late one while the node serves
	// this router's requests is not counted). One failure never ejects alone, so a request that makes a node fail cannot
	// empty the fleet. Rise is how many good health checks in a row bring it back (default 2).
	Rise, Fall      int
	RefreshInterval time.Duration // how often node statuses are read from Redis (default 1 s)
	StatusMaxAge    time.Duration // a status older than this is not weighed (default 10 s)
	LookupTimeout   time.Duration // one prefix lookup in Redis (default 150 ms)
	// FirstByteTimeout bounds the wait from forwarding a request to the first byte of the node's
	// response body (default 2 min). It covers the node's queue and prefill and, for a
	// non-streamed request, the whole generation, since a node answers those when done. On it
	// the request goes to the next node: nothing has reached the client yet.
	FirstByteTimeout time.Duration
	// StreamIdleTimeout bounds each gap between the bytes of a response after the first
	// (default 5 min); a stream it ends gets an error event.
	StreamIdleTimeout time.Duration
	// MaxResponseBytes bounds a non-streamed response read from a node (default 16 MiB, the
	// most the router holds in memory for one); beyond it the client gets 502 response_too_large.
	MaxResponseBytes int64
	MaxAttempts      int // nodes tried per request before giving up (default 3)
	// PrefixBytes bounds the leading bytes of a prompt's text (a chat's rendered messages) that
	// the router tokenizes to route by prefix (default DefaultPrefixBytes); see bounds.go.
	PrefixBytes int
	// ParseBudget bounds the request body bytes being parsed at once (default
	// DefaultParseBudget); a request beyond it is routed by load, unparsed.
	ParseBudget int64
	// QuarantineTTL is how long the router remembers a request body whose node died serving it
	// (default 10 min); one that killed two nodes is refused meanwhile. See guard.go.
	QuarantineTTL time.Duration
	// CacheSaltPerKey roots each request's routing hashes at its bearer token and cache_salt
	// (prefixhash.TenantSalt), as nodes started with serve --cache-salt-per-key root their
	// blocks': set it when they are, or their salted prefixes are never found.
	CacheSaltPerKey bool
	Logger          *slog.Logger
	Registerer      prometheus.Registerer // nil = a private registry
	Gatherer        prometheus.Gatherer   // what /metrics serves; nil = that private registry
	Transport       http.RoundTripper     // nil = a transport tuned for streaming to nodes
}

// Router is the HTTP front. Create it with New, call Start, serve Handler.
type Router struct {
	cfg    Config
	log    *slog.Logger
	m      *metrics
	index  *fleet.Index
	client *http.Client
	recent *affinity
	static bool
	rr     atomic.Uint64
	budget *byteBudget
	qod    *quarantine
	mhttp  http.Handler
	pickMu sync.Mutex // makes a routing decision and its claim one step (see decide)

	mu           sync.Mutex
	nodes        map[string]*node // by normalized URL
	redisDown    bool
	redisRetryAt time.Time
	redisBackoff time.Duration
	unknown      int // Redis entries ignored at the last refresh
}

// New validates cfg. It contacts nothing: Start does.
func New(cfg Config) (*Router, error) {
	if cfg.Prompter == nil {
		return nil, errors.New("router: Config.Prompter is required")
	}
	if len(cfg.Nodes) == 0 && cfg.Index == nil && cfg.Discovery == nil {
		return nil, errors.New("router: give the nodes (--nodes), a Service to discover them from (--kube-service) or a Redis to discover them from (--redis)")
	}
	if len(cfg.Nodes) > 0 && cfg.Discovery != nil {
		return nil, errors.New("router: give the nodes (--nodes) or a Service to discover them from (--kube-service), not both")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&cfg.AffinityTTL, 10*time.Second)
	def(&cfg.HealthInterval, time.Second)
	def(&cfg.HealthTimeout, time.Second)
	def(&cfg.RefreshInterval, time.Second)
	def(&cfg.StatusMaxAge, 10*time.Second)
	def(&cfg.LookupTimeout, 150*time.Millisecond)
	def(&cfg.FirstByteTimeout, 2*time.Minute)
	def(&cfg.StreamIdleTimeout, 5*time.Minute)
	if cfg.MaxResponseBytes <= 0 {
		cfg.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if cfg.BlockSize <= 0 {
		cfg.BlockSize = kvcache.DefaultBlockSize
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 4 << 20
	}
	if cfg.LoadWeight <= 0 {
		cfg.LoadWeight = 16
	}
	if cfg.PeerCredit < 0 || cfg.PeerCredit > 1 {
		return nil, fmt.Errorf("router: PeerCredit %v outside [0, 1]", cfg.PeerCredit)
	}
	if cfg.QueueWeight <= 0 {
		cfg.QueueWeight = 256
	}
	if cfg.Rise <= 0 {
		cfg.Rise = 2
	}
	if cfg.Fall <= 0 {
		cfg.Fall = 3
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = 3
	}
	if cfg.PrefixBytes <= 0 {
		cfg.PrefixBytes = DefaultPrefixBytes
	}
	if cfg.ParseBudget <= 0 {
		cfg.ParseBudget = DefaultParseBudget
	}
	def(&cfg.QuarantineTTL, 10*time.Minute)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Registerer == nil {
		reg := prometheus.NewRegistry()
		cfg.Registerer, cfg.Gatherer = reg, reg
	}
	if cfg.Transport == nil {
		cfg.Transport = &http.Transport{
			DialContext:         (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        512,
			MaxIdleConnsPerHost: 128,
			IdleConnTimeout:     90 * time.Second,
			DisableCompression:  true, // pass bytes through as the node sent them
		}
	}
	r := &Router{cfg: cfg, log: cfg.Logger.With("component", "router"), m: newMetrics(cfg.Registerer),
		index: cfg.Index, client: &http.Client{Transport: cfg.Transport},
		recent: newAffinity(cfg.AffinityTTL, 1<<18), static: len(cfg.Nodes) > 0 || cfg.Discovery != nil, nodes: map[string]*node{},
		budget: &byteBudget{max: cfg.ParseBudget}, qod: newQuarantine(cfg.QuarantineTTL, maxQuarantined)}
	for _, raw := range cfg.Nodes {
		u, err := normalizeURL(raw)
		if err != nil {
			return nil, fmt.Errorf("--nodes: %w", err)
		}
		if _, dup := r.nodes[u]; dup {
			return nil, fmt.Errorf("--nodes: %s is listed twice", u)
		}
		r.nodes[u] = &node{url: u, label: nodeLabel(u)}
		r.m.healthy.WithLabelValues(nodeLabel(u)).Set(0)
	}
	if cfg.Gatherer != nil {
		r.mhttp = promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{})
	}
	return r, nil
}

// Start reads the fleet and probes every node once, then keeps doing both in the background
// until ctx ends. With Config.Discovery, its watch runs in the background too: nodes join as it
// lists them.
func (r *Router) Start(ctx context.Context) {
	if d := r.cfg.Discovery; d != nil {
		go d.Watch(ctx, func(urls []string) { r.setNodes(ctx, urls) })
	}
	r.refresh(ctx)
	r.checkHealth(ctx)
	go r.loop(ctx, r.cfg.HealthInterval, r.checkHealth)
	go r.loop(ctx, r.cfg.RefreshInterval, func(ctx context.Context) {
		r.refresh(ctx)
		r.recent.sweep()
		r.qod.sweep(time.Now())
	})
}

func (r *Router) loop(ctx context.Context, every time.Duration, f func(context.Context)) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f(ctx)
		}
	}
}

// Healthy is the number of nodes in rotation.
func (r *Router) Healthy() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := 0
	for _, n := range r.nodes {
		if n.healthy {
			k++
		}
	}
	return k
}

// Handler serves the routes of `ubatch serve`, forwarded to the nodes, plus the router's own
// /health and /metrics.
func (r *Router) Handler() http.Handler {
	mux := http.NewServeMux()
	for _, p := range []string{"/v1/completions", "/completions", "/v1/chat/completions", "/chat/completions", "/completion"} {
		mux.HandleFunc(p, r.handlePrompt)
	}
	// Routed by load alone. /v1/responses is its create only: a response kept for
	// previous_response_id lives on the node that made it, so GET /v1/responses/{id} is not
	// forwarded (a follow-up with previous_response_id may land on another node: 400).
	for _, p := range []string{"/v1/models", "/models", "/v1/models/", "/models/", "/v1/embeddings", "/embeddings",
		"/tokenize", "/detokenize", "/apply-template", "/props", "/v1/responses", "/responses", "/infill",
		"/v1/rerank", "/rerank", "/v1/reranking", "/reranking", "/api/"} {
		mux.HandleFunc(p, r.handleOther)
	}
	mux.HandleFunc("/health", r.handleHealth)
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, req *http.Request) { r.mhttp.ServeHTTP(w, req) })
	// The web page (GET /, /ui/*) and its live feed come from a node picked by load: the page
	// shows that node's batching.
	mux.HandleFunc("/live", r.handleOther)
	mux.HandleFunc("/ui/", r.handleOther)
	mux.HandleFunc("/", func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == "/" {
			r.handleOther(w, req)
			return
		}
		writeError(w, http.StatusNotFound, "invalid_request_error", "not_found", fmt.Sprintf("no route %s %s", clip(req.Method), clip(req.URL.Path)))
	})
	return mux
}

func (r *Router) handleHealth(w http.ResponseWriter, _ *http.Request) {
	k := r.Healthy()
	status, word := http.StatusOK, "ok"
	if k == 0 {
		status, word = http.StatusServiceUnavailable, "no healthy node"
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"status": word, "nodes_healthy": k})
}

// writeError answers in OpenAI's error shape.
func writeError(w http.ResponseWriter, status int, typ, code, msg string) {
	writeParamError(w, status, typ, code, "", msg)
}

// writeParamError answers in OpenAI's error shape naming the request field at fault (param; ""
// for none).
func writeParamError(w http.ResponseWriter, status int, typ, code, param, msg string) {
	w.Header().Set("Content-Type", "application/json")
	if status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	w.WriteHeader(status)
	w.Write(errorBody(typ, code, param, msg))
}

func errorJSON(typ, code, msg string) []byte { return errorBody(typ, code, "", msg) }

func errorBody(typ, code, param, msg string) []byte {
	var p any
	if param != "" {
		p = param
	}
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": p, "code": code}})
	return append(b, '\n')
}

// maxEcho bounds a client's string echoed in an error message.
const maxEcho = 200

// clip is s cut to maxEcho bytes (marked "..."), for echoing a client's string.
func clip(s string) string {
	if len(s) <= maxEcho {
		return s
	}
	return cutUTF8(s, maxEcho) + "..."
}
