package main

import (
	"cmp"
	"context"
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

	"ubatch/engine"
	"ubatch/kvcache"
	"ubatch/runner"
	"ubatch/sample"
	"ubatch/server"
)

// cmdServe loads a model, starts the continuous-batching engine and serves the OpenAI and
// llama.cpp HTTP APIs until ctx ends (SIGINT/SIGTERM), then drains in-flight requests.
func cmdServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("serve", "serve [-m MODEL] [--host 127.0.0.1] [--port 8080] [-c CTX] [-np 16] [flags]\n\n"+
		"Routes: POST /v1/completions, POST /v1/chat/completions, GET /v1/models, GET /v1/models/{id},\n"+
		"POST /v1/embeddings (with --embeddings) (OpenAI; also without /v1); POST /completion, POST /infill,\n"+
		"POST /v1/rerank (with --rerank), POST /tokenize, "+
		"POST /detokenize, POST /apply-template, GET /props, GET /health (llama.cpp); GET /metrics (Prometheus);\n"+
		"GET / (the web page: chat playground and live batching view), GET /live (its event feed).\n"+
		"Requests may set \"priority\": \"low\"|\"normal\"|\"high\" or an integer (higher is served first; a waiting\n"+
		"request gains one level per 5 s waited, up to high; above --max-client-priority only with the --api-key).\n"+
		"SIGINT/SIGTERM stops accepting connections, lets running requests finish (for up to --shutdown-timeout,\n"+
		"then cuts them: streams end with an error event), then exits.", stderr)
	var mf modelFlags
	var sf samplingFlags
	mf.register(fs, 192)
	sf.register(fs)
	var ff fleetFlags
	ff.register(fs)
	var kf kvDiskFlags
	kf.register(fs)
	var cf constraintFlags
	cf.register(fs)
	host := fs.String("host", "127.0.0.1", "address to listen on (0.0.0.0 for every interface)")
	port := fs.Int("port", 8080, "TCP port to listen on (0 = any free port; the log says which)")
	var np int
	fs.IntVar(&np, "parallel", 16, "most sequences decoded together (-np); each of a request's n choices is one")
	// The defaults favour latency on a CPU: a step's time grows with its tokens, and every running
	// stream waits for the whole step, so small steps keep inter-token gaps short while long
	// prompts arrive. For throughput on prompt-heavy loads raise both (e.g. 512 and 256).
	chunkSize := fs.Int("chunk-size", 48, "most prompt tokens of one sequence per step, so long prompts do not stall other streams")
	targetITL := fs.Duration("target-itl", 60*time.Millisecond, "inter-token latency a step should meet while sequences decode: prompt chunks are sized to it from a cost model of steps fitted online (--batch-size and --chunk-size stay upper bounds; 0 = no target)")
	maxQueue := fs.Int("max-queue", 64, "requests waiting for a free sequence slot; beyond it requests get 429 with Retry-After")
	policy := fs.String("policy", "sjf", "order of requests of equal priority: sjf (admission by expected cost, prompt tokens not cached plus max_tokens, and prompt chunks by remaining prompt, so short requests are not stuck behind long ones; a request waiting 10 s goes first) or fcfs (arrival order)")
	maxClientPriority := fs.String("max-client-priority", "high", "highest request \"priority\" (low, normal, high or an integer) a request may ask for without the --api-key; above it, 400. Without --api-key it applies to every request")
	apiKey := fs.String("api-key", "", "require \"Authorization: Bearer KEY\" on every route but /health (default: no key)")
	alias := fs.String("alias", "", "model id the API reports (default: the model file name)")
	maxBody := fs.Int64("max-body", server.DefaultMaxBodyBytes, "largest request body in bytes (413 beyond it)")
	grace := fs.Duration("shutdown-timeout", server.DefaultGrace, "on SIGINT/SIGTERM, how long in-flight requests may run before they are cut (streams end with an error event)")
	readTimeout := fs.Duration("read-timeout", server.DefaultReadTimeout, "longest time to read one request, headers and body (a body still arriving then gets 408)")
	writeTimeout := fs.Duration("write-timeout", server.DefaultWriteTimeout, "longest time one write to a client may take: a response, or one event of a stream (a client that stops reading is cut)")
	maxConns := fs.Int("max-connections", server.DefaultMaxConnections, "most open connections, idle keep-alive ones included; beyond it new connections get 503 at once")
	maxConnsPerClient := fs.Int("max-conns-per-client", server.DefaultMaxConnsPerClient, "most open connections from one client address (IPv6: its /64), so one client cannot take every --max-connections slot; beyond it new connections get 429 at once. Behind --trusted-proxies it caps each client's requests in flight instead (/health, /metrics exempt)")
	trustedProxies := fs.String("trusted-proxies", "", "reverse proxies (nginx, ubatch route) in front, comma-separated CIDRs or addresses: their connections are not capped per address, and their X-Forwarded-For names the client that --max-conns-per-client counts (default: none)")
	maxLive := fs.Int("max-live-streams", server.DefaultMaxLiveStreams, "most open GET /live streams (the web page's live view); beyond it they get 503 at once. They do not count against --max-connections")
	maxEmbInputs := fs.Int("max-embedding-inputs", server.DefaultMaxEmbeddingInputs, "most inputs of one /v1/embeddings request (400 beyond it)")
	maxEmbTokens := fs.Int("max-embedding-tokens", server.DefaultMaxEmbeddingTokens, "most tokens of one /v1/embeddings request's inputs in all (400 beyond it)")
	verbose := fs.BoolP("verbose", "v", false, "log every request (debug level)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run, until shutdown, to this file (inspect with go tool pprof)")
	embeddings := fs.Bool("embeddings", false, "serve POST /v1/embeddings (and Ollama's /api/embed, /api/embeddings; llama.cpp's --embeddings): each input is a prompt-only sequence of the engine, computed by its one worker pool under the step budget beside the streams, at --embedding-priority")
	rerank := fs.Bool("rerank", false, "serve POST /v1/rerank (llama-server's --rerank/--reranking; a reranker GGUF: pooling type rank; --max-embedding-inputs and --max-embedding-tokens bound its documents), through the engine as --embeddings")
	embedPriority := fs.String("embedding-priority", "low", "priority of embedding and rerank inputs' prompt chunks against completions' prompts (low, normal, high or an integer); decode tokens always go first, so the streams keep --target-itl")
	corsOrigin := fs.String("cors-origin", "", "browser origins allowed to call the API, comma-separated (\"*\" for any; default: pages on localhost only)")
	allowedHosts := fs.String("allowed-hosts", "", "Host header names served besides localhost ones, comma-separated (\"*\" for any); on a loopback --host other names get 403, so that a web page cannot reach the server by DNS rebinding (its own name re-resolved to 127.0.0.1)")
	contextShift := fs.Bool("context-shift", false, "let a sequence that reaches n_ctx_seq go on: drop the older half of its history and shift the rest (llama.cpp's --context-shift); without it, it stops there")
	keep := fs.Int("keep", 0, "with --context-shift, prompt tokens a shift never drops besides BOS (llama.cpp's --keep/n_keep: a model that adds BOS keeps it too); -1: the whole prompt")
	chatTemplate := fs.String("chat-template", "", "Jinja chat template to use instead of the model's tokenizer.chat_template")
	chatTemplateFile := fs.String("chat-template-file", "", "read the chat template from this file")
	reasoningFormat := fs.String("reasoning-format", server.ReasoningAuto, "default of chat requests' reasoning_format: auto (split the reasoning the chat template teaches, <think>...</think>, into reasoning_content), deepseek (split <think>...</think> whatever the template) or none (leave it in content)")
	fs.Bool("jinja", true, "accepted for llama.cpp compatibility: templates are always rendered with Jinja")
	pooling := fs.String("pooling", "", "how /v1/embeddings pools the tokens' final hidden states: mean, cls (the first token) or last (default: the model's ARCH.pooling_type when it is one of these, else mean)")
	memLimit := fs.String("mem-limit", "", "memory the KV cache may take, e.g. 8G or 512M; -c is refused beyond it (default: what the system has available: MemAvailable, within the cgroup's limit)")
	if err := parse(fs, args, mf.check, sf.check, cf.check); err != nil {
		return err
	}
	if *pooling != "" {
		if _, err := engine.ParsePooling(*pooling); err != nil {
			return flagError(fs, fmt.Errorf("--%w", err))
		}
	}
	embedPrio, err := server.ParsePriority(*embedPriority)
	if err != nil {
		return flagError(fs, fmt.Errorf("--embedding-priority %q: use low, normal, high or an integer in [-1000, 1000]", *embedPriority))
	}
	clientPriority, err := server.ParsePriority(*maxClientPriority)
	if err != nil {
		return flagError(fs, fmt.Errorf("--max-client-priority %q: use low, normal, high or an integer in [-1000, 1000]", *maxClientPriority))
	}
	err = checkServeFlags(np, mf.batch, *chunkSize, *maxQueue, *port, *maxBody, *policy, *targetITL)
	if err == nil {
		err = ff.check(*host)
	}
	if err == nil {
		err = checkHTTPFlags(*grace, *readTimeout, *writeTimeout, *maxConns)
	}
	var proxies []netip.Prefix
	if err == nil {
		proxies, err = checkClientLimitFlags(*maxConnsPerClient, *maxLive, *maxEmbInputs, *maxEmbTokens, *trustedProxies)
	}
	if err != nil {
		return flagError(fs, err)
	}
	kvOpts, err := mf.options(np)
	if err != nil {
		return err
	}
	budget, budgetSource := int64(-1), ""
	if *memLimit != "" {
		if budget, err = parseSize(*memLimit); err != nil {
			return fmt.Errorf("--mem-limit: %w", err)
		}
		budgetSource = "--mem-limit"
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	m, done, err := mf.openProfiled(ctx, stderr, *cpuProfile)
	if err != nil {
		return err
	}
	defer done()
	nCtx, what := mf.ctx, fmt.Sprintf("-c %d", mf.ctx)
	if nCtx == 0 { // no -c: room for every slot, as llama.cpp's server gives n_ctx per slot
		nCtx = serveKVCells(m.Hparams(), np, kvOpts.KVType)
		what = fmt.Sprintf("the default -c %d (room for -np %d sequences)", nCtx, np)
	}
	if budgetSource == "" { // read now: the model's pages are in memory already
		if avail, source, ok := availableMemory(os.DirFS("/")); ok {
			budget, budgetSource = avail, source
		}
	}
	blockSize := cmp.Or(max(kvOpts.BlockSize, 0), kvcache.DefaultBlockSize)
	if err := checkKVPool(m.Hparams().NLayers, m.Hparams().KVDim(), nCtx, blockSize, kvOpts.KVType, budget, budgetSource, what); err != nil {
		return err
	}
	lctx, err := mf.newContext(m, np, func(o *runner.Options) { o.NCtx, o.OnBlock = nCtx, ff.onBlock() })
	if err != nil {
		return err
	}
	defer lctx.Close()
	opts := lctx.Options()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := server.NewMetrics(reg)
	live := server.NewLive()
	// -c is the KV pool all sequences share; one sequence stops at the context the model was
	// trained for (its context_length, which a model extended by rope scaling states as such).
	nCtxSeq := min(opts.NCtx, m.Hparams().CtxTrain)
	if opts.NCtx/np > m.Hparams().CtxTrain {
		logger.Warn("-c gives each of the -np sequences more than the model's training context; "+
			"sequences stop at n_ctx_seq", "n_ctx", opts.NCtx, "np", np, "n_ctx_train", m.Hparams().CtxTrain, "n_ctx_seq", nCtxSeq)
	}
	eng, err := engine.New(lctx,
		engine.Limits{NCtx: opts.NCtx, NCtxSeq: nCtxSeq, NSeqMax: opts.NSeqMax, NBatch: opts.NBatch, Vocab: m.Hparams().Vocab},
		engine.Config{BatchSize: mf.batch, ChunkSize: *chunkSize, MaxRunning: np, MaxQueue: *maxQueue,
			Policy: engine.Policy(*policy), ContextShift: *contextShift, Keep: shiftKeep(*keep, m.Vocab.AddBOS()), IsEOG: m.Vocab.IsEOG, Observer: server.Observers{metrics, live}, TargetITL: *targetITL, MaxSampleTime: cf.sampleTime, Logger: logger})
	if err != nil {
		return err
	}
	diskTier, kvLay, closeTiers, err := kf.start(m, lctx, eng, logger, ff.peerTier(*apiKey, reg, logger))
	if err != nil {
		return err
	}
	defer closeTiers() // after the engine stopped (deferred below, so run before this)
	if diskTier != nil {
		server.RegisterDiskTier(reg, diskTier.Stats)
	}
	// The engine outlives ctx: it must keep serving in-flight requests while the HTTP server drains.
	engCtx, stopEngine := context.WithCancel(context.Background())
	defer func() {
		stopEngine()
		<-eng.Done()
	}()
	go eng.Run(engCtx)

	if *chatTemplateFile != "" {
		data, err := os.ReadFile(*chatTemplateFile)
		if err != nil {
			return fmt.Errorf("--chat-template-file: %w", err)
		}
		*chatTemplate = string(data)
	}
	// Sampling flags given on the command line become every route's defaults, as in llama-server.
	var sampling *sample.Params
	for _, name := range sf.names() {
		if fs.Changed(name) {
			p := sf.params(m.Vocab.EOG())
			sampling = &p
			break
		}
	}
	var emb *server.Embedder
	if *embeddings {
		emb = server.NewEmbedder(modelPooling(m, *pooling), min(m.Hparams().CtxTrain, 2048))
		emb.Priority = embedPrio
	}
	rr, err := newReranker(*rerank, m, embedPrio)
	if err != nil {
		return err
	}
	srv, err := server.New(server.Config{Model: m, Engine: eng, SlotSavePath: kf.slotPath, KVLayout: kvLay, APIKey: *apiKey, MaxClientPriority: &clientPriority, MaxBodyBytes: *maxBody,
		Logger: logger, Metrics: metrics, Gatherer: reg, ModelID: *alias, Embedder: emb, Reranker: rr, CORSOrigins: splitList(*corsOrigin), ChatTemplate: *chatTemplate, ReasoningFormat: *reasoningFormat,
		Live: live, Sampling: sampling, ListenAddr: net.JoinHostPort(*host, strconv.Itoa(*port)), AllowedHosts: splitList(*allowedHosts),
		MaxLiveStreams: *maxLive, MaxEmbeddingInputs: *maxEmbInputs, MaxEmbeddingTokens: *maxEmbTokens, Limits: cf.lim,
		KVBlocks: ff.kvBlocks(eng, reg, logger)})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(*host, strconv.Itoa(*port)))
	if err != nil {
		return err
	}
	cfg := eng.Config()
	logger.Info("listening", "url", "http://"+ln.Addr().String(), "n_ctx", opts.NCtx, "n_ctx_seq", eng.Limits().NCtxSeq,
		"parallel", cfg.MaxRunning,
		"batch_size", cfg.BatchSize, "chunk_size", cfg.ChunkSize, "target_itl", cfg.TargetITL, "max_queue", cfg.MaxQueue, "policy", cfg.Policy,
		"kv_type", mf.kvType, "api_key", *apiKey != "", "max_connections", *maxConns, "max_conns_per_client", *maxConnsPerClient,
		"trusted_proxies", len(proxies))
	stopFleet, err := ff.start(ctx, fleetNode{addr: ln.Addr(), model: apiModelID(*alias, m.Path), blockSize: opts.BlockSize,
		maxBody: *maxBody, maxRunning: cfg.MaxRunning, stats: eng.Stats, reg: reg, logger: logger})
	if err != nil {
		ln.Close()
		return err
	}
	defer stopFleet()
	scfg := server.ServeConfig{Grace: *grace, ReadTimeout: *readTimeout, WriteTimeout: *writeTimeout,
		MaxConnections: *maxConns, MaxConnsPerClient: *maxConnsPerClient, TrustedProxies: proxies, Logger: logger}
	context.AfterFunc(ctx, live.Close) // open pages' live streams must not hold the graceful shutdown
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
	case np < 1:
		return fmt.Errorf("-np %d: need at least one sequence", np)
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

// serveKVCells sizes the default KV cache of the server: each of np sequences may reach the
// model's training context (at most 2048 tokens), within 2 GiB of K and V of type dt.
func serveKVCells(m *runner.Hparams, np int, dt kvcache.DType) int {
	perCell, err := kvcache.CellBytes(m.NLayers, m.KVDim(), dt)
	if err != nil || perCell <= 0 {
		perCell = int64(4 * m.NLayers * m.KVDim()) // F16
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
