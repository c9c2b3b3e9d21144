package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"

	"ubatch/batch"
	"ubatch/engine"
	"ubatch/hub"
	"ubatch/kvcache"
	"ubatch/kvfile"
	"ubatch/model"
	"ubatch/runner"
	"ubatch/sample"
	"ubatch/server"
	"ubatch/server/llamacpp"
	"ubatch/server/ollama"
	"ubatch/server/openai"
	"ubatch/server/responses"
)

// modelsFlags are serve's flags for several models: -m repeated, the library, keep-alive and the
// bounds on what is loaded at once.
type modelsFlags struct {
	models      []string // every -m, in order (modelFlags.path is the first)
	dir         string
	keepAlive   string
	maxModels   int
	loadTimeout time.Duration
}

// modelList is -m as serve takes it: repeatable, each value one more model.
type modelList struct {
	vals  *[]string
	first *string
}

func (m modelList) String() string { return strings.Join(*m.vals, ",") }
func (m modelList) Type() string   { return "model" }
func (m modelList) Set(v string) error {
	*m.vals = append(*m.vals, v)
	*m.first = (*m.vals)[0]
	return nil
}

func (f *modelsFlags) register(fs *pflag.FlagSet, mf *modelFlags) {
	fl := fs.Lookup("model")
	fl.Value = modelList{vals: &f.models, first: &mf.path}
	fl.Usage = "a model to serve, repeatable: a GGUF path, a library name (ubatch list), ORG/REPO[:QUANT] (pulled into the library if missing) or hf://ORG/REPO/FILE.gguf (default: every model of the library, see --models-dir; the demo model stories260K.gguf when it is empty)"
	fs.StringVar(&f.dir, "models-dir", "", "the model library served without -m (default: $UBATCH_HOME/models, where ubatch pull puts models)")
	fs.StringVar(&f.keepAlive, "keep-alive", server.DefaultKeepAlive.String(), "how long a model stays loaded after its last request (Ollama's OLLAMA_KEEP_ALIVE: a duration such as 5m, or seconds; 0 unloads at once, negative keeps it); requests on /api/* may set their own keep_alive. With one -m the default is to keep it")
	fs.IntVar(&f.maxModels, "max-models", 3, "most models loaded at once (0: no bound); loading another unloads the least recently used idle one, and when all are busy the request gets 503 with Retry-After")
	fs.DurationVar(&f.loadTimeout, "load-timeout", server.DefaultLoadTimeout, "how long a request waits for its model to load before it gets 503 with Retry-After")
}

func (f *modelsFlags) check() error {
	switch {
	case f.maxModels < 0:
		return fmt.Errorf("--max-models %d: must not be negative (0: no bound)", f.maxModels)
	case f.loadTimeout <= 0:
		return fmt.Errorf("--load-timeout %v: must be positive", f.loadTimeout)
	}
	if _, err := f.keep(); err != nil {
		return err
	}
	return nil
}

// keep is --keep-alive as a duration (negative: forever).
func (f *modelsFlags) keep() (time.Duration, error) {
	if d, err := time.ParseDuration(f.keepAlive); err == nil {
		return d, nil
	}
	n, err := strconv.ParseFloat(f.keepAlive, 64)
	if err != nil || n != n || n > 1e9 || n < -1e9 {
		return 0, fmt.Errorf("--keep-alive %q: use a duration such as 5m or 30s, or seconds (negative: keep models loaded)", f.keepAlive)
	}
	return time.Duration(n * float64(time.Second)), nil
}

// serveSetup is what loading one model needs, shared by every model of the server.
type serveSetup struct {
	o              *serveOpts
	stderr         io.Writer
	logger         *slog.Logger
	embedPriority  engine.Priority // of embedding and rerank inputs
	clientPriority engine.Priority
	proxies        []netip.Prefix
	kvOpts         runner.Options
	budget         int64 // bytes, -1: unknown
	budgetSource   string
	stateCache     int64 // --state-cache as engine.Config.StateCacheBytes (0: default, -1: none)
	sampling       bool  // sampling flags were given: they are every route's defaults
	keepAliveSet   bool
	keepAlive      time.Duration
	reg            *prometheus.Registry // the process's series; each model has a registry of its own
	live           *server.Live         // every engine's steps, for the web page
	blockSize      int
	specsAtStart   []server.ModelSpec
	single         bool                // one model, given with -m (or the demo model): loaded at start
	library        bool                // serving the library: /api/pull pulls into it
	cores          *sync.Mutex         // one forward pass at a time across models (nil: one model)
	parse          *server.ParseBudget // shared by every model's server
	memBudget      int64               // what the registry lets loaded models take (0: no bound)
}

// registry lists the models to serve and makes the registry that loads them.
func (ss *serveSetup) registry(ctx context.Context) (*server.Registry, error) {
	o := ss.o
	list, err := ss.modelSpecs(ctx)
	if err != nil {
		return nil, err
	}
	if ss.specsAtStart, err = list(); err != nil {
		return nil, err
	}
	ss.keepAlive, _ = o.mm.keep()
	if ss.single && !ss.keepAliveSet {
		ss.keepAlive = -1 // llama-server's behaviour: the one model stays
	}
	if o.ff.redis != "" {
		if !ss.single {
			return nil, errors.New("--redis: a fleet node serves one model: give exactly one -m")
		}
		ss.keepAlive = -1 // its publisher and peer tier are the process's, over the one engine
	}
	if !ss.single {
		ss.cores = new(sync.Mutex)
	}
	ss.blockSize = ss.kvOpts.BlockSize // positive: modelFlags.check
	budget := int64(0)
	if ss.budget > 0 {
		budget = ss.budget
	} else if avail, _, ok := availableMemory(os.DirFS("/")); ok && !ss.single {
		budget = avail
	}
	var pull func(context.Context, string, func(done, total int64)) error
	if ss.library {
		pull = func(ctx context.Context, name string, progress func(done, total int64)) error {
			m, note, err := hub.Pull(ctx, name, hub.Options{Library: o.mm.dir, Progress: progress, Logger: ss.logger})
			if note != "" {
				ss.logger.Info(note)
			}
			if err == nil {
				ss.logger.Info("model pulled into the library", "name", m.Name, "path", m.Path)
			}
			return err
		}
	}
	ss.memBudget = budget
	return server.NewRegistry(server.RegistryConfig{Models: list, Load: ss.load, KeepAlive: ss.keepAlive,
		MaxModels: o.mm.maxModels, MemBudget: budget, LoadTimeout: o.mm.loadTimeout, Pull: pull, Logger: ss.logger,
		AnyName: ss.single}) // llama-server answers any name with its one model
}

// showSampling is the sampling flags as the front's /api/show reports them for a model not
// loaded; nil without sampling flags (each API's defaults).
func (ss *serveSetup) showSampling() *sample.Params {
	if !ss.sampling {
		return nil
	}
	p := ss.o.sf.params(nil) // (the end-of-generation tokens are the model's: not shown)
	return &p
}

// preload loads the one model of a single-model server now, so that a bad file or a -c that does
// not fit fails at start-up, as it always has.
func (ss *serveSetup) preload(ctx context.Context, reg *server.Registry) (*server.Loaded, error) {
	if !ss.single {
		return nil, nil
	}
	return reg.Preload(ctx, ss.specsAtStart[0].ID)
}

// modelSpecs is what serve serves: every -m (resolved now: a missing one is pulled), else the
// library, read again as it changes, else the demo model.
func (ss *serveSetup) modelSpecs(ctx context.Context) (func() ([]server.ModelSpec, error), error) {
	o := ss.o
	opts := hub.Options{Library: o.mm.dir, Progress: hub.ProgressPrinter(ss.stderr, "download"), Logger: ss.logger}
	args := o.mm.models
	if len(args) == 0 {
		lib, err := hub.List(opts)
		if err != nil {
			return nil, err
		}
		if len(usable(lib)) > 0 {
			ss.library = true
			return func() ([]server.ModelSpec, error) {
				lib, err := hub.List(opts)
				return usable(lib), err
			}, nil
		}
		args = []string{""} // the demo model
	}
	ss.single = len(args) == 1
	lib, _ := hub.List(opts)
	var specs []server.ModelSpec
	seen := map[string]string{}
	for i, arg := range args {
		path, err := hub.Resolve(ctx, arg, opts)
		if err != nil {
			return nil, err
		}
		spec := server.ModelSpec{ID: filepath.Base(path), Path: path}
		if arg != "" && arg != path {
			spec.Aliases = []string{arg}
		}
		for _, m := range lib {
			if m.Path == path {
				spec.ID, spec.Aliases = m.Name, append(spec.Aliases, libraryAliases(m)...)
			}
		}
		if i == 0 && *o.alias != "" {
			spec.Aliases = append(spec.Aliases, spec.ID)
			spec.ID = *o.alias
		}
		if st, err := os.Stat(path); err == nil {
			spec.Size = st.Size()
		}
		if prev, dup := seen[strings.ToLower(spec.ID)]; dup {
			return nil, fmt.Errorf("-m %s and -m %s are both named %s: give each model once", prev, arg, spec.ID)
		}
		seen[strings.ToLower(spec.ID)] = arg
		specs = append(specs, spec)
	}
	return func() ([]server.ModelSpec, error) { return specs, nil }, nil
}

// usable are the library's models that can be served, as specs.
func usable(lib []hub.Model) []server.ModelSpec {
	var out []server.ModelSpec
	for _, m := range lib {
		if m.Problem == "" {
			out = append(out, server.ModelSpec{ID: m.Name, Aliases: libraryAliases(m), Path: m.Path, Size: m.Size})
		}
	}
	return out
}

// libraryAliases are the other names of a library model: what it was pulled as, its
// ORG/REPO:QUANT and its hf:// reference.
func libraryAliases(m hub.Model) []string {
	a := []string{m.Source, "hf://" + m.Repo + "/" + m.File}
	if m.Quant != "" {
		a = append(a, m.Repo+":"+m.Quant)
	}
	return a
}

// load opens spec's model and builds its context, engine and routes (server.Loader).
func (ss *serveSetup) load(ctx context.Context, spec server.ModelSpec) (*server.Loaded, error) {
	o := ss.o
	mf := o.mf
	mf.path = spec.Path
	m, _, err := mf.open(ctx, ss.stderr)
	if err != nil {
		return nil, err
	}
	l, err := ss.build(spec, m)
	if err != nil {
		m.Close()
		return nil, err
	}
	return l, nil
}

// build makes the context, engine and routes over the open model m; on an error the caller
// closes m.
func (ss *serveSetup) build(spec server.ModelSpec, m *model.Model) (*server.Loaded, error) {
	o, np := ss.o, ss.o.np
	nCtx, what := o.mf.ctx, fmt.Sprintf("-c %d", o.mf.ctx)
	if nCtx == 0 { // no -c: room for every slot, as llama.cpp's server gives n_ctx per slot
		nCtx = serveKVCells(m.Hparams(), o.kvSeqs, ss.kvOpts.KVType)
		what = fmt.Sprintf("the default -c %d (room for %d sequences)", nCtx, o.kvSeqs)
	}
	budget, source := ss.budget, ss.budgetSource
	if source == "" { // read now: the model's pages are in memory already
		if avail, src, ok := availableMemory(os.DirFS("/")); ok {
			budget, source = avail, src
		}
	}
	if err := checkKVPool(kvLayers(m.Hparams()), kvWidest(m.Hparams()), nCtx, ss.blockSize, ss.kvOpts.KVType, budget, source, what); err != nil {
		return nil, err
	}
	lctx, err := o.mf.newContext(m, np, func(ro *runner.Options) { ro.NCtx, ro.OnBlock = nCtx, o.ff.onBlock() })
	if err != nil {
		return nil, err
	}
	opts := lctx.Options()
	sub := prometheus.NewRegistry()
	metrics := server.NewMetrics(prometheus.WrapRegistererWith(prometheus.Labels{"model": spec.ID}, sub))
	// -c is the KV pool all sequences share; one sequence stops at the context the model was
	// trained for (its context_length, which a model extended by rope scaling states as such).
	nCtxSeq := min(opts.NCtx, m.Hparams().CtxTrain)
	if opts.NCtx/o.kvSeqs > m.Hparams().CtxTrain {
		ss.logger.Warn("-c gives each of the -np sequences more than the model's training context; "+
			"sequences stop at n_ctx_seq", "model", spec.ID, "n_ctx", opts.NCtx, "np", np, "n_ctx_train", m.Hparams().CtxTrain, "n_ctx_seq", nCtxSeq)
	}
	var dec engine.Decoder = lctx
	if ss.cores != nil {
		dec = exclusiveDecoder{lctx, ss.cores}
	}
	eng, err := engine.New(dec,
		engine.Limits{NCtx: opts.NCtx, NCtxSeq: nCtxSeq, NSeqMax: opts.NSeqMax, NBatch: opts.NBatch, Vocab: m.Hparams().Vocab},
		engine.Config{BatchSize: o.mf.batch, ChunkSize: *o.chunkSize, MaxRunning: np, MaxQueue: *o.maxQueue,
			Policy: engine.Policy(*o.policy), ContextShift: *o.contextShift, StateCacheBytes: ss.stateCache, Keep: shiftKeep(*o.keep, m.Vocab.AddBOS()), IsEOG: m.Vocab.IsEOG,
			Observer: server.Observers{metrics, ss.live}, TargetITL: *o.targetITL, MaxSampleTime: o.cf.sampleTime, Logger: ss.logger})
	if err != nil {
		lctx.Close()
		return nil, err
	}
	if eng.Recurrent() {
		st := eng.Stats().States
		ss.logger.Info("hybrid model: a recurrent state per sequence, snapshots for prefix reuse", "model", spec.ID,
			"state_bytes", lctx.StateBytes(), "snapshot_slots", st.Slots, "snapshot_bytes", int64(st.Slots)*int64(lctx.StateBytes()))
	}
	// The Gateway API Inference Extension's pickers read vLLM's names, labelled model_name.
	server.RegisterVLLM(sub, spec.ID, eng.Stats)
	// A fleet node's peer tier and POST /kv/blocks are the process's (one model, kept: registry).
	diskTier, kvLay, closeTiers, err := o.kf.start(m, lctx, eng, ss.logger, o.ff.peerTier(*o.apiKey, ss.reg, ss.logger))
	if err != nil {
		lctx.Close()
		return nil, err
	}
	if diskTier != nil {
		server.RegisterDiskTier(prometheus.WrapRegistererWith(prometheus.Labels{"model": spec.ID}, sub), diskTier.Stats)
	}
	// The engine outlives the request that loaded it: it stops when the model is unloaded.
	engCtx, stopEngine := context.WithCancel(context.Background())
	go eng.Run(engCtx)
	// Closed last first: the tiers after the engine stopped, the context after both.
	closers := []func(){lctx.Close, closeTiers, func() { stopEngine(); <-eng.Done() }}
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	srv, err := ss.routes(spec, m, eng, metrics, kvLay, &closers)
	if err != nil {
		closeAll()
		return nil, err
	}
	kvBytes, _ := kvcache.PoolBytes(kvLayers(m.Hparams()), kvWidest(m.Hparams()), opts.NCtx, ss.kvOpts.KVType)
	return &server.Loaded{Server: srv, Engine: eng, Metrics: sub, Bytes: m.Size + kvBytes,
		Close: func() { closeAll(); m.Close() }}, nil
}

// routes makes the model's embedder and reranker (their closers appended) and its Server.
func (ss *serveSetup) routes(spec server.ModelSpec, m *model.Model, eng *engine.Engine, metrics *server.Metrics, kvLay kvfile.Layout, closers *[]func()) (*server.Server, error) {
	o := ss.o
	var sampling *sample.Params
	if ss.sampling {
		p := o.sf.params(m.Vocab.EOG())
		sampling = &p
	}
	// Ollama embeds with any model, so its routes always do; /v1/embeddings is llama-server's
	// and, as there, behind --embeddings.
	ollamaEmb := server.NewEmbedder(modelPooling(m, *o.pooling), embedCtx(m))
	ollamaEmb.Priority = ss.embedPriority
	var emb *server.Embedder
	if *o.embeddings {
		emb = ollamaEmb
	}
	rr, err := newReranker(*o.rerank, m, ss.embedPriority)
	if err != nil {
		return nil, err
	}
	return server.New(server.Config{Model: m, Engine: eng, SlotSavePath: o.kf.slotPath, KVLayout: kvLay, APIKey: *o.apiKey, MaxClientPriority: &ss.clientPriority,
		MaxBodyBytes: *o.maxBody, Logger: ss.logger.With("model", spec.ID), Metrics: metrics, ModelID: spec.ID,
		Aliases: spec.Aliases, Embedder: emb, OllamaEmbedder: ollamaEmb, Reranker: rr, ChatTemplate: *o.chatTemplate, ReasoningFormat: *o.reasoningFormat,
		Live: ss.live, Sampling: sampling, MaxLiveStreams: *o.maxLive, MaxEmbeddingInputs: *o.maxEmbInputs, MaxN: *o.maxN,
		MaxEmbeddingTokens: *o.maxEmbTokens, Limits: o.cf.lim, ParseBudget: ss.parse, KVBlocks: o.ff.kvBlocks(eng, ss.reg, ss.logger),
		Dialects: dialects()})
}

// dialects are the API dialects' packages every model's server (and the front) serves beside
// the core's routes.
func dialects() []server.Dialect {
	return []server.Dialect{llamacpp.Routes, ollama.Routes, openai.Routes, responses.Routes}
}

// exclusiveDecoder runs one forward pass at a time across the models of a server: each model's
// context has its own worker pool of -t threads, and the lock keeps the threads computing at any
// moment within -t, so two busy models take turns step by step instead of oversubscribing the
// cores.
type exclusiveDecoder struct {
	*runner.Runtime
	mu *sync.Mutex
}

func (d exclusiveDecoder) Decode(b *batch.Batch) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.Runtime.Decode(b)
}
