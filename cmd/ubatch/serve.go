package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"ubatch/engine"
	"ubatch/runner"
	"ubatch/server"
)

// cmdServe loads a model, starts the continuous-batching engine and serves the OpenAI and
// llama.cpp HTTP APIs until ctx ends (SIGINT/SIGTERM), then drains in-flight requests.
func cmdServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("serve", "serve [-m MODEL] [--host 127.0.0.1] [--port 8080] [-c CTX] [-np 16] [flags]\n\n"+
		"Routes: POST /v1/completions, POST /v1/chat/completions, GET /v1/models (OpenAI);\n"+
		"POST /completion, POST /tokenize, POST /detokenize, GET /health (llama.cpp); GET /metrics (Prometheus).\n"+
		"Requests may set \"priority\": \"low\"|\"normal\"|\"high\" or an integer (higher is served first).\n"+
		"SIGINT/SIGTERM stops accepting connections, lets running requests finish, then exits.", stderr)
	var mf modelFlags
	mf.register(fs)
	var ff fleetFlags
	ff.register(fs)
	host := fs.String("host", "127.0.0.1", "address to listen on (0.0.0.0 for every interface)")
	port := fs.Int("port", 8080, "TCP port to listen on (0 = any free port; the log says which)")
	var np int
	fs.IntVar(&np, "np", 16, "most sequences decoded together; each of a request's n choices is one (llama.cpp's --parallel)")
	fs.IntVar(&np, "parallel", 16, "same as -np")
	// The defaults favour latency on a CPU: a step's time grows with its tokens, and every running
	// stream waits for the whole step, so small steps keep inter-token gaps short while long
	// prompts arrive. For throughput on prompt-heavy loads raise both (e.g. 512 and 256).
	batchSize := fs.Int("batch-size", 192, "token budget of one engine step: one decode token per running sequence plus prompt chunks (at most -b); smaller = steadier streams, larger = faster prompts")
	chunkSize := fs.Int("chunk-size", 48, "most prompt tokens of one sequence per step, so long prompts do not stall other streams")
	maxQueue := fs.Int("max-queue", 64, "requests waiting for a free sequence slot; beyond it requests get 429 with Retry-After")
	policy := fs.String("policy", "sjf", "order of prompt chunks of equal priority: sjf (shortest remaining prompt first, so short requests are not stuck behind long ones) or fcfs (arrival order)")
	apiKey := fs.String("api-key", "", "require \"Authorization: Bearer KEY\" on every route but /health (default: no key)")
	alias := fs.String("alias", "", "model id the API reports (default: the model file name)")
	maxBody := fs.Int64("max-body", server.DefaultMaxBodyBytes, "largest request body in bytes (413 beyond it)")
	grace := fs.Duration("shutdown-timeout", 30*time.Second, "on SIGINT/SIGTERM, how long in-flight requests may run before their connections are closed")
	verbose := fs.Bool("v", false, "log every request (debug level)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run, until shutdown, to this file (inspect with go tool pprof)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := checkServeFlags(np, *batchSize, *chunkSize, *maxQueue, *port, *maxBody, *policy); err != nil {
		fmt.Fprintln(stderr, err)
		fs.Usage()
		return errUsage
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	stopProfile, err := startCPUProfile(*cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	m, _, err := mf.open(ctx, stderr)
	if err != nil {
		return err
	}
	defer m.Close()
	lctx, err := mf.newContext(m, np, func(o *runner.Options) {
		if o.NCtx == 0 { // no -c: room for every slot, as llama.cpp's server gives n_ctx per slot
			o.NCtx = serveKVCells(m.Hparams(), np)
		}
		o.OnBlock = ff.onBlock()
	})
	if err != nil {
		return err
	}
	defer lctx.Close()
	opts := lctx.Options()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := server.NewMetrics(reg)
	eng, err := engine.New(lctx,
		engine.Limits{NCtx: opts.NCtx, NSeqMax: opts.NSeqMax, NBatch: opts.NBatch, Vocab: m.Hparams().Vocab},
		engine.Config{BatchSize: *batchSize, ChunkSize: *chunkSize, MaxRunning: np, MaxQueue: *maxQueue,
			Policy: engine.Policy(*policy), IsEOG: m.Vocab.IsEOG, Observer: metrics})
	if err != nil {
		return err
	}
	// The engine outlives ctx: it must keep serving in-flight requests while the HTTP server drains.
	engCtx, stopEngine := context.WithCancel(context.Background())
	defer func() {
		stopEngine()
		<-eng.Done()
	}()
	go eng.Run(engCtx)

	srv, err := server.New(server.Config{Model: m, Engine: eng, APIKey: *apiKey, MaxBodyBytes: *maxBody,
		Logger: logger, Metrics: metrics, Gatherer: reg, ModelID: *alias})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(*host, strconv.Itoa(*port)))
	if err != nil {
		return err
	}
	cfg := eng.Config()
	logger.Info("listening", "url", "http://"+ln.Addr().String(), "n_ctx", opts.NCtx, "parallel", cfg.MaxRunning,
		"batch_size", cfg.BatchSize, "chunk_size", cfg.ChunkSize, "max_queue", cfg.MaxQueue, "policy", cfg.Policy,
		"kv_type", mf.kvType, "api_key", *apiKey != "")
	stopFleet, err := ff.start(ctx, fleetNode{addr: ln.Addr(), model: apiModelID(*alias, m.Path), blockSize: opts.BlockSize,
		maxBody: *maxBody, maxRunning: cfg.MaxRunning, stats: eng.Stats, reg: reg, logger: logger})
	if err != nil {
		ln.Close()
		return err
	}
	defer stopFleet()
	if err := server.Serve(ctx, ln, srv.Handler(), *grace, logger); err != nil {
		return err
	}
	logger.Info("server stopped")
	return nil
}

func checkServeFlags(np, batchSize, chunkSize, maxQueue, port int, maxBody int64, policy string) error {
	switch {
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
// model's training context (at most 2048 tokens), within 2 GiB of F16 K and V.
func serveKVCells(m *runner.Hparams, np int) int {
	perCell := 2 * 2 * m.NLayers * m.KVDim() // K and V, F16
	return max(512, min(np*min(m.CtxTrain, 2048), (2<<30)/perCell))
}
