package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/pflag"

	"ubatch/engine"
	"ubatch/kvcache"
	"ubatch/quant"
	"ubatch/runner"
	"ubatch/server"
)

// serveOpts are serve's flags.
type serveOpts struct {
	mf                modelFlags
	sf                samplingFlags
	ff                fleetFlags
	kf                kvDiskFlags
	cf                constraintFlags
	np                int
	kvSeqs            int // the sequences the default -c makes room for (16 when np was 0)
	mm                modelsFlags
	host              *string
	port              *int
	chunkSize         *int
	targetITL         *time.Duration
	maxQueue          *int
	policy            *string
	maxClientPriority *string
	apiKey            *string
	alias             *string
	maxBody           *int64
	grace             *time.Duration
	readTimeout       *time.Duration
	writeTimeout      *time.Duration
	maxConns          *int
	maxConnsPerClient *int
	trustedProxies    *string
	maxLive           *int
	maxEmbInputs      *int
	maxEmbTokens      *int
	maxN              *int
	verbose           *bool
	cpuProfile        *string
	embeddings        *bool
	rerank            *bool
	embedPriority     *string
	corsOrigin        *string
	allowedHosts      *string
	cacheSaltPerKey   *bool
	contextShift      *bool
	keep              *int
	chatTemplate      *string
	chatTemplateFile  *string
	reasoningFormat   *string
	pooling           *string
	memLimit          *string
	stateCache        *string
}

// register adds serve's flags to fs.
func (o *serveOpts) register(fs *pflag.FlagSet) {
	// -b 512: one micro-batch (-ub) per step. While sequences decode, --target-itl sizes the
	// prompt chunks and -b is only their cap; it decides the steps with nobody decoding (a
	// burst of new prompts), and 512 served the shared and mixed workloads faster than 192
	// (the default until then) and, on mixed, than 2048 (docs/performance.md).
	o.mf.register(fs, engine.DefaultBatchSize)
	o.mm.register(fs, &o.mf)
	o.sf.register(fs)
	o.ff.register(fs)
	o.kf.register(fs)
	o.cf.register(fs)
	o.host = fs.String("host", "127.0.0.1", "address to listen on (0.0.0.0 for every interface)")
	o.port = fs.Int("port", 8080, "TCP port to listen on (0 = any free port; the log says which)")
	fs.IntVar(&o.np, "parallel", 0, "most sequences decoded together (-np), an upper bound: within it the engine runs as many as the KV cache holds at the mean sequence length seen and --target-itl allows (/metrics: ubatch_sequences_running_bound, ubatch_admission_stop); each of a request's n choices is one. 0 = up to "+strconv.Itoa(autoParallel)+" (within --batch-size), with the default -c sized for "+strconv.Itoa(autoParallelKV)+" sequences")
	// The chunk default favours latency on a CPU: a step's time grows with its tokens, and every
	// running stream waits for the whole step, so small chunks keep inter-token gaps short while
	// long prompts arrive. For throughput on prompt-heavy loads raise it (e.g. 256).
	o.chunkSize = fs.Int("chunk-size", 48, "most prompt tokens of one sequence per step, so long prompts do not stall other streams")
	o.targetITL = fs.Duration("target-itl", 60*time.Millisecond, "inter-token latency a step should meet while sequences decode: prompt chunks are sized to it from a cost model of steps fitted online (--batch-size and --chunk-size stay upper bounds; 0 = no target)")
	o.maxQueue = fs.Int("max-queue", 64, "requests waiting for a free sequence slot; beyond it requests get 429 with Retry-After")
	o.policy = fs.String("policy", "sjf", "order of requests of equal priority: sjf (admission by expected cost, prompt tokens not cached plus max_tokens, and prompt chunks by remaining prompt, so short requests are not stuck behind long ones; a request waiting 10 s goes first) or fcfs (arrival order)")
	o.maxClientPriority = fs.String("max-client-priority", "high", "highest request \"priority\" (low, normal, high or an integer) a request may ask for without the --api-key; above it, 400. Without --api-key it applies to every request")
	o.apiKey = fs.String("api-key", "", "require \"Authorization: Bearer KEY\" on every route but /health (default: no key)")
	o.alias = fs.String("alias", "", "model id the API reports for the first -m (default: its library name, else the file name)")
	o.maxBody = fs.Int64("max-body", server.DefaultMaxBodyBytes, "largest request body in bytes (413 beyond it)")
	o.grace = fs.Duration("shutdown-timeout", server.DefaultGrace, "on SIGINT/SIGTERM, how long in-flight requests may run before they are cut (streams end with an error event)")
	o.readTimeout = fs.Duration("read-timeout", server.DefaultReadTimeout, "longest time to read one request, headers and body (a body still arriving then gets 408)")
	o.writeTimeout = fs.Duration("write-timeout", server.DefaultWriteTimeout, "longest time one write to a client may take: a response, or one event of a stream (a client that stops reading is cut)")
	o.maxConns = fs.Int("max-connections", server.DefaultMaxConnections, "most open connections, idle keep-alive ones included; beyond it new connections get 503 at once")
	o.maxConnsPerClient = fs.Int("max-conns-per-client", server.DefaultMaxConnsPerClient, "most open connections from one client address (IPv6: its /64), so one client cannot take every --max-connections slot; beyond it new connections get 429 at once. Behind --trusted-proxies it caps each client's requests in flight instead (/health, /metrics exempt)")
	o.trustedProxies = fs.String("trusted-proxies", "", "reverse proxies (nginx, ubatch route) in front, comma-separated CIDRs or addresses: their connections are not capped per address, and their X-Forwarded-For names the client that --max-conns-per-client counts (default: none)")
	o.maxLive = fs.Int("max-live-streams", server.DefaultMaxLiveStreams, "most open GET /live streams (the web page's live view); beyond it they get 503 at once. They do not count against --max-connections")
	o.maxEmbInputs = fs.Int("max-embedding-inputs", server.DefaultMaxEmbeddingInputs, "most inputs of one /v1/embeddings request (400 beyond it)")
	o.maxEmbTokens = fs.Int("max-embedding-tokens", server.DefaultMaxEmbeddingTokens, "most tokens of one /v1/embeddings request's inputs in all (400 beyond it)")
	o.maxN = fs.Int("max-n", server.DefaultMaxN, "most sequences of one completion request, n times its prompts (400 naming n beyond it); the engine shares slots and KV between clients whatever n is")
	o.verbose = fs.BoolP("verbose", "v", false, "log every request (debug level)")
	o.cpuProfile = fs.String("cpuprofile", "", "write a CPU profile of the whole run, until shutdown, to this file (inspect with go tool pprof)")
	o.embeddings = fs.Bool("embeddings", false, "serve POST /v1/embeddings (llama.cpp's --embeddings; Ollama's /api/embed and /api/embeddings embed without it, as Ollama does): each input is a prompt-only sequence of the engine, computed by its one worker pool under the step budget beside the streams, at --embedding-priority")
	o.rerank = fs.Bool("rerank", false, "serve POST /v1/rerank (llama-server's --rerank/--reranking; a reranker GGUF: pooling type rank; --max-embedding-inputs and --max-embedding-tokens bound its documents), through the engine as --embeddings")
	o.embedPriority = fs.String("embedding-priority", "low", "priority of embedding and rerank inputs' prompt chunks against completions' prompts (low, normal, high or an integer); decode tokens always go first, so the streams keep --target-itl")
	o.corsOrigin = fs.String("cors-origin", "", "browser origins allowed to call the API, comma-separated (\"*\" for any; default: pages on localhost only)")
	o.cacheSaltPerKey = fs.Bool("cache-salt-per-key", false, "salt every request's prefix-cache blocks by its bearer token (hashed), besides its cache_salt: tenants sending different tokens never share a cached prefix, so cached_tokens and the time to first token reveal nothing of each other's prompts (at the cost of no sharing between them)")
	o.allowedHosts = fs.String("allowed-hosts", "", "Host header names served besides localhost ones, comma-separated (\"*\" for any); on a loopback --host other names get 403, so that a web page cannot reach the server by DNS rebinding (its own name re-resolved to 127.0.0.1)")
	o.contextShift = fs.Bool("context-shift", false, "let a sequence that reaches n_ctx_seq go on: drop the older half of its history and shift the rest (llama.cpp's --context-shift); without it, it stops there")
	o.stateCache = fs.String("state-cache", "", "memory for a hybrid model's (qwen35) snapshots of its recurrent state, e.g. 256M: a prompt prefix is reused up to the longest block boundary with a snapshot (every 512 tokens, where prompts branch, each prompt's last block and each sequence's latest one); 0 keeps none, so no prefix of a hybrid is reused (default: 8 snapshots per sequence, within 1G)")
	o.keep = fs.Int("keep", 0, "with --context-shift, prompt tokens a shift never drops besides BOS (llama.cpp's --keep/n_keep: a model that adds BOS keeps it too); -1: the whole prompt")
	o.chatTemplate = fs.String("chat-template", "", "Jinja chat template to use instead of the model's tokenizer.chat_template")
	o.chatTemplateFile = fs.String("chat-template-file", "", "read the chat template from this file")
	o.reasoningFormat = fs.String("reasoning-format", server.ReasoningAuto, "default of chat requests' reasoning_format: auto (split the reasoning the chat template teaches, <think>...</think> or gpt-oss's analysis channel, into reasoning_content), deepseek (split <think>...</think> whatever the template) or none (leave it in content)")
	fs.Bool("jinja", true, "accepted for llama.cpp compatibility: templates are always rendered with Jinja")
	o.pooling = fs.String("pooling", "", "how /v1/embeddings pools the tokens' final hidden states: mean, cls (the first token) or last (default: the model's ARCH.pooling_type when it is one of these, else mean)")
	o.memLimit = fs.String("mem-limit", "", "memory the KV cache may take, e.g. 8G or 512M; -c is refused beyond it; serving several models, also what the loaded models' weights and KV caches may take in all (the least recently used idle one is unloaded to make room) (default: what the system has available: MemAvailable, within the cgroup's limit)")
}

// cmdServe serves the models (-m, repeated, or the library) over the OpenAI, llama.cpp and
// Ollama HTTP APIs until ctx ends (SIGINT/SIGTERM), then drains in-flight requests.
func cmdServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	const synopsis = "serve [-m MODEL]... [--host 127.0.0.1] [--port 8080] [-c CTX] [-np N] [flags]"
	fs := newFlags("serve", synopsis, stderr)
	setHelpGroups(fs, synopsis, serveHelpText, serveHelpGroups, stderr)
	var o serveOpts
	o.register(fs)
	if err := parse(fs, args, o.mf.check, o.sf.check, o.cf.check, o.mm.check); err != nil {
		return err
	}
	ss, err := o.setup(fs, stderr)
	if err != nil {
		return err
	}
	stopProfile, err := startCPUProfile(*o.cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	reg, err := ss.registry(ctx)
	if err != nil {
		return err
	}
	defer reg.Close()
	first, err := ss.preload(ctx, reg)
	if err != nil {
		return err
	}
	return ss.listen(ctx, reg, first)
}

// setup checks the flags and gathers what loading a model needs.
func (o *serveOpts) setup(fs *pflag.FlagSet, stderr io.Writer) (*serveSetup, error) {
	ss := &serveSetup{o: o, stderr: stderr}
	var err error
	if *o.pooling != "" {
		if _, err := engine.ParsePooling(*o.pooling); err != nil {
			return nil, flagError(fs, fmt.Errorf("--%w", err))
		}
	}
	if ss.embedPriority, err = server.ParsePriority(*o.embedPriority); err != nil {
		return nil, flagError(fs, fmt.Errorf("--embedding-priority %q: use low, normal, high or an integer in [-1000, 1000]", *o.embedPriority))
	}
	if ss.clientPriority, err = server.ParsePriority(*o.maxClientPriority); err != nil {
		return nil, flagError(fs, fmt.Errorf("--max-client-priority %q: use low, normal, high or an integer in [-1000, 1000]", *o.maxClientPriority))
	}
	err = checkServeFlags(o.np, o.mf.batch, *o.chunkSize, *o.maxQueue, *o.port, *o.maxBody, *o.policy, *o.targetITL)
	if err == nil {
		err = o.ff.check(*o.host)
	}
	if err == nil {
		err = checkHTTPFlags(*o.grace, *o.readTimeout, *o.writeTimeout, *o.maxConns)
	}
	if err == nil {
		ss.proxies, err = checkClientLimitFlags(*o.maxConnsPerClient, *o.maxLive, *o.maxEmbInputs, *o.maxEmbTokens, *o.trustedProxies)
	}
	if err == nil && *o.maxN < 1 {
		err = fmt.Errorf("--max-n %d: must be positive", *o.maxN)
	}
	if err != nil {
		return nil, flagError(fs, err)
	}
	o.kvSeqs = o.np // the sequences the default -c makes room for
	if o.np == 0 {
		o.np, o.kvSeqs = min(autoParallel, o.mf.batch), autoParallelKV
	}
	if ss.kvOpts, err = o.mf.options(o.np); err != nil {
		return nil, err
	}
	ss.budget = -1
	if *o.memLimit != "" {
		if ss.budget, err = parseSize(*o.memLimit); err != nil {
			return nil, fmt.Errorf("--mem-limit: %w", err)
		}
		ss.budgetSource = "--mem-limit"
	}
	if *o.stateCache != "" {
		n, err := parseSize(*o.stateCache)
		if err != nil {
			return nil, fmt.Errorf("--state-cache: %w", err)
		}
		ss.stateCache = n
		if n == 0 {
			ss.stateCache = -1 // engine.Config's "none"
		}
	}
	level := slog.LevelInfo
	if *o.verbose {
		level = slog.LevelDebug
	}
	ss.logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	if *o.chatTemplateFile != "" {
		data, err := os.ReadFile(*o.chatTemplateFile)
		if err != nil {
			return nil, fmt.Errorf("--chat-template-file: %w", err)
		}
		*o.chatTemplate = string(data)
	}
	// Sampling flags given on the command line become every route's defaults, as in llama-server.
	for _, name := range o.sf.names() {
		if fs.Changed(name) {
			ss.sampling = true
			break
		}
	}
	ss.keepAliveSet = fs.Changed("keep-alive")
	ss.reg = prometheus.NewRegistry()
	ss.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	ss.live = server.NewLive()
	ss.parse = server.NewParseBudget(o.cf.parseBudget, o.cf.parseWait)
	return ss, nil
}

// listen serves the registry's models until ctx ends. first is the one model of a server that
// has one (loaded at start), which a fleet node publishes; nil when it serves several.
func (ss *serveSetup) listen(ctx context.Context, reg *server.Registry, first *server.Loaded) error {
	o, logger := ss.o, ss.logger
	addr := net.JoinHostPort(*o.host, strconv.Itoa(*o.port))
	srv, err := server.NewMulti(server.Config{APIKey: *o.apiKey, MaxBodyBytes: *o.maxBody, Logger: logger, Gatherer: ss.reg,
		CORSOrigins: splitList(*o.corsOrigin), Live: ss.live, ListenAddr: addr, AllowedHosts: splitList(*o.allowedHosts),
		CacheSaltPerKey: *o.cacheSaltPerKey,
		MaxLiveStreams:  *o.maxLive, ChatTemplate: *o.chatTemplate, Sampling: ss.showSampling(), Dialects: dialects()}, reg)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	attrs := []any{"url", "http://" + ln.Addr().String(), "models", len(ss.specsAtStart), "keep_alive", ss.keepAlive,
		"max_models", o.mm.maxModels, "api_key", *o.apiKey != "", "max_connections", *o.maxConns,
		"max_conns_per_client", *o.maxConnsPerClient, "trusted_proxies", len(ss.proxies)}
	stopFleet := func() {}
	if first != nil {
		cfg, lim := first.Engine.Config(), first.Engine.Limits()
		attrs = append(attrs, "n_ctx", lim.NCtx, "n_ctx_seq", lim.NCtxSeq, "parallel", cfg.MaxRunning, "batch_size", cfg.BatchSize,
			"chunk_size", cfg.ChunkSize, "target_itl", cfg.TargetITL, "max_queue", cfg.MaxQueue, "policy", cfg.Policy, "kv_type", o.mf.kvType)
		stopFleet, err = o.ff.start(ctx, fleetNode{addr: ln.Addr(), model: ss.specsAtStart[0].ID, blockSize: ss.blockSize,
			maxBody: *o.maxBody, maxRunning: cfg.MaxRunning, stats: first.Engine.Stats, reg: ss.reg, logger: logger})
		if err != nil {
			ln.Close()
			return err
		}
	} else if o.ff.redis != "" {
		ln.Close()
		return errors.New("--redis: a fleet node serves one model: give exactly one -m")
	}
	defer stopFleet()
	outside := ss.memBudget // several models: what the registry lets them take
	if first != nil {
		outside = first.Bytes
	}
	if limit := setGoMemLimit(os.DirFS("/"), outside, os.Getenv("GOMEMLIMIT")); limit > 0 {
		attrs = append(attrs, "go_mem_limit", fmtBytes(limit))
	}
	logger.Info("listening", attrs...)
	scfg := server.ServeConfig{Grace: *o.grace, ReadTimeout: *o.readTimeout, WriteTimeout: *o.writeTimeout,
		MaxConnections: *o.maxConns, MaxConnsPerClient: *o.maxConnsPerClient, TrustedProxies: ss.proxies, Logger: logger}
	context.AfterFunc(ctx, ss.live.Close) // open pages' live streams must not hold the graceful shutdown
	if err := server.Serve(ctx, ln, srv.Handler(), scfg); err != nil {
		return err
	}
	logger.Info("server stopped")
	return nil
}

func checkServeFlags(np, batchSize, chunkSize, maxQueue, port int, maxBody int64, policy string, targetITL time.Duration) error {
	switch {
	case targetITL < 0:
		return fmt.Errorf("--target-itl %v: must not be negative (0 = no target)", targetITL)
	case np < 0:
		return fmt.Errorf("-np %d: need at least one sequence (or 0: adaptive, up to %d)", np, autoParallel)
	case batchSize < 1:
		return fmt.Errorf("--batch-size %d: must be positive", batchSize)
	case chunkSize < 1:
		return fmt.Errorf("--chunk-size %d: must be positive", chunkSize)
	case maxQueue < 1:
		return fmt.Errorf("--max-queue %d: must be positive", maxQueue)
	case port < 0 || port > 65535:
		return fmt.Errorf("--port %d: must be in [0, 65535]", port)
	case maxBody < 1:
		return fmt.Errorf("--max-body %d: must be positive", maxBody)
	case policy != string(engine.FCFS) && policy != string(engine.SJF):
		return fmt.Errorf("--policy %q: use fcfs or sjf", policy)
	}
	return nil
}

// The adaptive parallelism of -np 0: at most autoParallel sequences run (fewer when the KV
// cache at the mean sequence length or --target-itl says so), and the default -c makes room
// for autoParallelKV of them at the model's training context, as -np 16 did.
const (
	autoParallel   = 64
	autoParallelKV = 16
)

// serveKVCells sizes the default KV cache of the server: each of np sequences may reach the
// model's training context (at most 2048 tokens), within 2 GiB of K and V of type dt.
func serveKVCells(m *runner.Hparams, np int, dt quant.Type) int {
	perCell, err := kvcache.CellBytes(kvLayers(m), kvWidest(m), dt)
	if err != nil || perCell <= 0 {
		perCell = int64(4 * kvLayers(m) * kvWidest(m)) // F16
	}
	return max(512, min(np*min(m.CtxTrain, 2048), int((2<<30)/perCell)))
}

func checkHTTPFlags(grace, readTimeout, writeTimeout time.Duration, maxConns int) error {
	switch {
	case grace <= 0:
		return fmt.Errorf("--shutdown-timeout %v: must be positive", grace)
	case readTimeout <= 0:
		return fmt.Errorf("--read-timeout %v: must be positive", readTimeout)
	case writeTimeout <= 0:
		return fmt.Errorf("--write-timeout %v: must be positive", writeTimeout)
	case maxConns < 1:
		return fmt.Errorf("--max-connections %d: must be positive", maxConns)
	}
	return nil
}

// checkClientLimitFlags checks the per-client, live-view and embedding limits and parses
// --trusted-proxies.
func checkClientLimitFlags(perClient, maxLive, embInputs, embTokens int, trusted string) ([]netip.Prefix, error) {
	switch {
	case perClient < 1:
		return nil, fmt.Errorf("--max-conns-per-client %d: must be positive (--max-connections or more: no cap of its own)", perClient)
	case maxLive < 1:
		return nil, fmt.Errorf("--max-live-streams %d: must be positive", maxLive)
	case embInputs < 1:
		return nil, fmt.Errorf("--max-embedding-inputs %d: must be positive", embInputs)
	case embTokens < 1:
		return nil, fmt.Errorf("--max-embedding-tokens %d: must be positive", embTokens)
	}
	proxies, err := server.ParseTrustedProxies(trusted)
	if err != nil {
		return nil, fmt.Errorf("--trusted-proxies: %w", err)
	}
	return proxies, nil
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// shiftKeep is engine.Config.Keep for --keep n: llama-server counts BOS beside n_keep (n_keep +
// add_bos_token), so the default 0 keeps BOS when the model adds one; -1 keeps the whole prompt.
func shiftKeep(n int, addBOS bool) int {
	if n < 0 {
		return -1
	}
	if addBOS {
		n++
	}
	return n
}
