package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/spf13/pflag"
	"io"
	"log/slog"
	"math"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"ubatch/gguf"
	"ubatch/hub"
	"ubatch/kvcache"
	"ubatch/kvformat"
	"ubatch/model"
	_ "ubatch/model/all"
	"ubatch/quant"
	"ubatch/runner"
	"ubatch/sample"
)

// modelFlags are the flags every model-running command shares, named as in llama.cpp.
type modelFlags struct {
	path      string
	ctx       int
	threads   int
	batch     int
	ubatch    int
	kvType    string
	kvTypeK   string // -ctk, an alias of kvType
	kvTypeV   string // -ctv
	blockSize int
	tiled     bool // --tiled-attention
}

// register adds the flags; batch is -b's default (serve: its step budget).
func (f *modelFlags) register(fs *pflag.FlagSet, batch int) {
	fs.StringVarP(&f.path, "model", "m", "", "model: a GGUF path, a library name (ubatch list), ORG/REPO[:QUANT] (pulled into the library if missing) or hf://ORG/REPO/FILE.gguf (downloaded from $HF_ENDPOINT, default https://huggingface.co, into $UBATCH_HOME; HF_TOKEN for gated repositories) (default: the demo model stories260K.gguf)")
	fs.IntVarP(&f.ctx, "ctx-size", "c", 0, "KV cache size in tokens, shared by all sequences (0 = the model's training context, at most 4096; for serve, room for every parallel sequence: up to 2048 tokens each within 2 GiB; serve refuses a KV cache larger than the available memory, see --mem-limit)")
	fs.IntVarP(&f.threads, "threads", "t", 0, "worker threads (0 = all cores)")
	fs.IntVarP(&f.batch, "batch-size", "b", batch, "logical batch size: most tokens one decode call takes (serve: the token budget of one engine step: one decode token per running sequence plus prompt chunks; smaller = steadier streams, larger = faster prompts)")
	fs.IntVar(&f.ubatch, "ubatch-size", runner.DefaultNUBatch, "physical batch size: most tokens one forward pass computes")
	fs.StringVar(&f.kvType, "kv-type", "f16", "KV cache element type: f16, f32 or q8_0 (about half the memory of f16; needs a head dimension that is a multiple of 32)")
	// llama.cpp sets K and V apart; ubatch stores both alike, so they must agree.
	fs.StringVar(&f.kvTypeK, "cache-type-k", "", "llama.cpp's -ctk: the same as --kv-type (must equal -ctv if both are given)")
	fs.StringVar(&f.kvTypeV, "cache-type-v", "", "llama.cpp's -ctv: the same as --kv-type (must equal -ctk if both are given)")
	fs.IntVar(&f.blockSize, "kv-block", kvcache.DefaultBlockSize, "KV cache block size in tokens")
	fs.BoolVar(&f.tiled, "tiled-attention", true, "attend by tiles (flash-style; AVX-512 only, elsewhere the exact kernels run anyway): prompts about 10% faster at the start of the context and about 2x deep in it (thousands of tokens), decode about as fast; =false: the exact kernels (llama.cpp's -fa off)")
}

// check validates the values before a model is loaded.
func (f *modelFlags) check() error {
	switch {
	case f.ctx < 0:
		return fmt.Errorf("-c %d: the KV cache size must be positive (or 0 for the default)", f.ctx)
	case f.threads < 0:
		return fmt.Errorf("-t %d: threads must be positive (or 0 for all cores)", f.threads)
	case f.batch < 1:
		return fmt.Errorf("-b %d: must be positive", f.batch)
	case f.ubatch < 1:
		return fmt.Errorf("--ubatch-size %d: must be positive", f.ubatch)
	case f.blockSize < 1:
		return fmt.Errorf("--kv-block %d: must be positive", f.blockSize)
	}
	_, err := f.kvDType()
	return err
}

func (f *modelFlags) options(nSeq int) (runner.Options, error) {
	o := runner.Options{NCtx: f.ctx, NBatch: f.batch, NUBatch: f.ubatch, NSeqMax: nSeq, Threads: f.threads, BlockSize: f.blockSize, TiledAttention: f.tiled}
	if f.ctx < 0 {
		return o, fmt.Errorf("-c %d: the KV cache size must be positive (or 0 for the default)", f.ctx)
	}
	kv, err := f.kvDType()
	o.KVType = kv
	return o, err
}

// kvDType is the KV cache type the flags ask for.
func (f *modelFlags) kvDType() (quant.Type, error) {
	kvType, err := f.cacheType()
	if err != nil {
		return 0, err
	}
	if t, ok := kvformat.Parse(kvType); ok {
		return t, nil
	}
	return 0, fmt.Errorf("--kv-type %q: use %s", kvType, kvformat.Names())
}

// cacheType reconciles --kv-type with llama.cpp's -ctk/-ctv: either alias, when given, sets the
// type, and K and V must agree.
func (f *modelFlags) cacheType() (string, error) {
	k, v := f.kvTypeK, f.kvTypeV
	switch {
	case k != "" && v != "" && k != v:
		return "", fmt.Errorf("-ctk %q and -ctv %q differ: ubatch stores K and V alike, give one type (e.g. -ctk q8_0 -ctv q8_0)", k, v)
	case k != "":
		return strings.ToLower(k), nil
	case v != "":
		return strings.ToLower(v), nil
	}
	return strings.ToLower(f.kvType), nil
}

// newContext makes a context for nSeq sequences over m with the flags' options; fit, when not
// nil, adjusts them first (e.g. sizes the KV cache for the job when -c was not given).
func (f *modelFlags) newContext(m *model.Model, nSeq int, fit func(*runner.Options)) (*runner.Runtime, error) {
	o, err := f.options(nSeq)
	if err != nil {
		return nil, err
	}
	if fit != nil {
		fit(&o)
	}
	return runner.New(m.Graph, o)
}

// newLoop is a decode loop of n sequences over lctx through a new Session (an empty KV cache):
// the commands that decode without an engine.
func newLoop(lctx *runner.Runtime, n int) (*runner.Loop, error) {
	s, err := runner.NewSession(lctx)
	if err != nil {
		return nil, err
	}
	return runner.NewLoop(s, n)
}

// load opens the model (open) and makes a runtime of nSeq sequences over it (newContext, with
// fit); the caller closes the runtime, then the model.
func (f *modelFlags) load(ctx context.Context, stderr io.Writer, nSeq int, fit func(*runner.Options)) (*model.Model, *runner.Runtime, time.Duration, error) {
	m, loadTime, err := f.open(ctx, stderr)
	if err != nil {
		return nil, nil, 0, err
	}
	rt, err := f.newContext(m, nSeq, fit)
	if err != nil {
		m.Close()
		return nil, nil, 0, err
	}
	return m, rt, loadTime, nil
}

// openGGUF resolves a model argument (a file, a hub reference, or "" for the demo model) without
// progress output and maps the file, for the commands that read only its metadata and tensors'
// table (info, tokenize); the caller closes it.
func openGGUF(ctx context.Context, arg string) (f *gguf.File, path string, err error) {
	if path, err = hub.Resolve(ctx, arg, hub.Options{}); err != nil {
		return nil, "", err
	}
	f, err = gguf.Open(path)
	return f, path, err
}

// open resolves, maps and pre-faults the model, reporting progress on stderr when it takes a while.
func (f *modelFlags) open(ctx context.Context, stderr io.Writer) (*model.Model, time.Duration, error) {
	start := time.Now()
	path, err := hub.Resolve(ctx, f.path, hub.Options{Progress: hub.ProgressPrinter(stderr, "download"), Logger: slog.Default()})
	if err != nil {
		return nil, 0, err
	}
	big := false
	if st, err := os.Stat(path); err == nil && st.Size() > 256<<20 {
		big = true
	}
	progress := func(label string) func(done, total int64) {
		if !big {
			return nil
		}
		return hub.ProgressPrinter(stderr, label)
	}
	m, err := model.OpenWithProgress(path, progress("pack"))
	if err != nil {
		return nil, 0, err
	}
	m.Prefetch(progress("load"))
	h := m.Hparams()
	slog.Info("model loaded", "path", path, "arch", m.Arch, "dim", h.Dim, "layers", h.NLayers,
		"heads", h.NHeads, "kv_heads", h.NKVHeads, "head_dim", h.HeadDim, "vocab", h.Vocab, "size_mib", m.Size>>20)
	return m, time.Since(start), nil
}

// openProfiled is open with a CPU profile written to profile ("" = none) from before the load
// until done, which closes the model and then ends the profile.
func (f *modelFlags) openProfiled(ctx context.Context, stderr io.Writer, profile string) (m *model.Model, done func(), err error) {
	stop, err := startCPUProfile(profile)
	if err != nil {
		return nil, nil, err
	}
	if m, _, err = f.open(ctx, stderr); err != nil {
		stop()
		return nil, nil, err
	}
	return m, func() { m.Close(); stop() }, nil
}

// samplingFlags are llama.cpp's sampling flags.
type samplingFlags struct {
	temp, topP, minP, repeatPenalty, freqPenalty, presPenalty float64
	topK, repeatLastN                                         int
	seed                                                      int64
	ignoreEOS                                                 bool
}

func (s *samplingFlags) register(fs *pflag.FlagSet) {
	d := sample.DefaultParams()
	f64 := func(x float32) float64 { return math.Round(float64(x)*1e6) / 1e6 } // 0.05, not 0.0500000007
	fs.Float64Var(&s.temp, "temp", f64(d.Temperature), "temperature; 0 = greedy")
	fs.IntVar(&s.topK, "top-k", d.TopK, "top-k sampling (0 = off)")
	fs.Float64Var(&s.topP, "top-p", f64(d.TopP), "top-p (nucleus) sampling (1 = off)")
	fs.Float64Var(&s.minP, "min-p", f64(d.MinP), "min-p sampling (0 = off)")
	fs.Float64Var(&s.repeatPenalty, "repeat-penalty", f64(d.RepeatPenalty), "penalty for repeated tokens (1 = off)")
	fs.IntVar(&s.repeatLastN, "repeat-last-n", d.RepeatLastN, "tokens of history the penalties look at (-1 = all)")
	fs.Float64Var(&s.freqPenalty, "frequency-penalty", 0, "frequency penalty (0 = off)")
	fs.Float64Var(&s.presPenalty, "presence-penalty", 0, "presence penalty (0 = off)")
	fs.Int64VarP(&s.seed, "seed", "s", -1, "random seed; -1 = from the clock")
	fs.BoolVar(&s.ignoreEOS, "ignore-eos", false, "keep generating past the end-of-generation token")
}

// names are the sampling flags' names.
func (s *samplingFlags) names() []string {
	return []string{"temp", "top-k", "top-p", "min-p", "repeat-penalty", "repeat-last-n", "frequency-penalty", "presence-penalty", "seed", "ignore-eos"}
}

// check validates the sampling flags before a model is loaded, with the sampler's own check
// (sample.Params.Validate), its errors worded with the flag's name.
func (s *samplingFlags) check() error {
	p := s.params(nil)
	err := p.Validate(0)
	var pe *sample.ParamError
	if !errors.As(err, &pe) {
		return err
	}
	flag := "--" + strings.ReplaceAll(pe.Name, "_", "-")
	if pe.Name == "temperature" {
		flag = "--temp"
	}
	return fmt.Errorf("%s %v: must be %s", flag, pe.Value, pe.Want)
}

// params are the flags' sampling parameters; with --ignore-eos the sampler never picks one of
// eog, the model's end-of-generation tokens (llama.cpp's way: nothing else checks for them).
func (s *samplingFlags) params(eog []int32) sample.Params {
	p := sample.Params{
		Temperature: float32(s.temp), TopK: s.topK, TopP: float32(s.topP), MinP: float32(s.minP),
		RepeatPenalty: float32(s.repeatPenalty), RepeatLastN: s.repeatLastN,
		FrequencyPenalty: float32(s.freqPenalty), PresencePenalty: float32(s.presPenalty), Seed: s.seedValue(),
	}
	if s.ignoreEOS {
		p.IgnoreTokens = slices.Clone(eog)
	}
	return p
}

func (s *samplingFlags) seedValue() uint64 {
	if s.seed < 0 {
		return uint64(time.Now().UnixNano())
	}
	return uint64(s.seed)
}

// startCPUProfile starts writing a CPU profile to path (nothing when path is ""); the returned
// func stops it and closes the file.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
