package main

import (
	"fmt"
	"strconv"

	"github.com/spf13/pflag"
)

// Notes shared by several of llamaFlagTable's rows.
const (
	noGPU       = "no GPU: ubatch computes on the CPU"
	noPlacement = "threads are placed by the Go scheduler (no affinity, priority or polling)"
	noDevice    = "no devices besides the CPU"
	loading     = "the model is memory-mapped and its weights packed into ubatch's own layout at load"
	noSpec      = "speculative decoding is not supported; drop the draft model and its flags"
	noPreset    = "presets are not built in: give the model with -m hf://ORG/REPO/FILE.gguf"
	perRequest  = "a server-wide default is not supported: set it in each request"
	noSampler   = "this sampler is not implemented"
	samplerOff  = "tunes a sampler that ubatch does not implement (and so is off)"
	logNote     = "ubatch logs to stderr in one format"
	noMultimod  = "no multimodal models (text only)"
	alwaysOn    = "always on in ubatch"
	flashNote   = "--tiled-attention (flash-style, the default): off and 0 take the exact kernels, on, auto and 1 the tiled ones, where not given"
)

// llamaFlagTable lists llama-server's, llama-cli's and llama-bench's documented flags that ubatch
// does not register itself (see llamaflags.go). Flags ubatch implements under llama.cpp's names
// (-m, -c, -t, -b, -ub, -ctk, -ctv, -np, -n, -p, -s, --temp, --top-k, --host, --port, --keep,
// --api-key, --chat-template, --embeddings, --pooling, --context-shift ...) are not here.
var llamaFlagTable = []llamaFlag{
	// Spellings of ubatch's own flags.
	{spell: "-a", cmds: "s", how: aliased, note: "alias"},
	{spell: "--temperature", cmds: "srb", how: aliased, note: "temp"},
	{spell: "--embedding", cmds: "s", how: aliased, note: "embeddings"},
	{spell: "--reranking", cmds: "s", how: aliased, note: "rerank"},
	{spell: "--cors-origins", cmds: "s", how: aliased, note: "cors-origin"},
	{spell: "--log-verbose", cmds: "s", how: aliased, note: "verbose"},
	{spell: "--predict", cmds: "rb", how: aliased, note: "n-predict"},
	{spell: "--output-format", cmds: "B", how: aliased, note: "output"},

	// Flags that set ubatch's own.
	{spell: "-tb, --threads-batch", arg: "N", cmds: "srbB", how: mapped, note: "one worker pool does prompts and generation: -t N when -t is not given",
		apply: func(fs *pflag.FlagSet, v string) error { return setUnlessGiven(fs, "threads", v) }},
	{spell: "-to, --timeout", arg: "N", cmds: "s", how: mapped, note: "--read-timeout and --write-timeout of N seconds, where not given", apply: serveTimeout},
	{spell: "--no-context-shift", cmds: "s", how: mapped, note: "the default: no --context-shift",
		apply: func(fs *pflag.FlagSet, _ string) error { return fs.Set("context-shift", "false") }},
	{spell: "--api-key-file", arg: "FNAME", cmds: "s", how: mapped, note: "--api-key from the file's one key", apply: readAPIKeyFile},
	{spell: "-hf, -hfr, --hf-repo", arg: "<user>/<model>[:quant]", cmds: "srbB", how: mapped, note: "-m ORG/REPO[:QUANT] (pulled into the library if missing); with -hff FILE: -m hf://ORG/REPO/FILE", apply: hfModel},
	{spell: "-hff, --hf-file", arg: "FILE", cmds: "srbB", how: mapped, note: "the file of -hf's repository", apply: needHFRepo},
	{spell: "-e, --escape", cmds: "r", how: mapped, note: "process escapes (\\n, \\t, \\\", \\\\ ...) in -p", apply: unescapePrompt},
	{spell: "--no-display-prompt", cmds: "r", how: mapped, note: "print only the generated text, not the prompt before it"},

	// GPU offload and devices.
	{spell: "-ngl, --gpu-layers, --n-gpu-layers", arg: "N", cmds: "srbB", note: noGPU},
	{spell: "-sm, --split-mode", arg: "{none,layer,row,tensor}", cmds: "srbB", note: noGPU, choices: []string{"none", "layer", "row", "tensor"}},
	{spell: "-ts, --tensor-split", arg: "N0,N1,N2,...", cmds: "srbB", note: noGPU},
	{spell: "-mg, --main-gpu", arg: "INDEX", cmds: "srbB", note: noGPU},
	{spell: "-dev, --device", arg: "<dev1,dev2,..>", cmds: "srbB", note: noDevice},
	{spell: "--list-devices", cmds: "srbB", how: mapped, note: "print the devices (none: ubatch computes on the CPU) and exit, as llama.cpp does",
		apply: func(fs *pflag.FlagSet, _ string) error {
			fmt.Fprintln(fs.Output(), "Available devices: none besides the CPU (ubatch computes on the CPU)")
			return pflag.ErrHelp // exit 0 before anything runs
		}},
	{spell: "-kvo, --kv-offload", cmds: "srb", note: noGPU},
	{spell: "-nkvo, --no-kv-offload", cmds: "srb", note: noGPU},
	{spell: "-nkvo, --no-kv-offload", arg: "<0|1>", cmds: "B", note: noGPU},
	{spell: "--op-offload", cmds: "srb", note: noGPU},
	{spell: "--no-op-offload", cmds: "srb", note: noGPU},
	{spell: "-nopo, --no-op-offload", arg: "<0|1>", cmds: "B", note: noGPU},
	{spell: "--no-host", cmds: "srb", note: noGPU},
	{spell: "--no-host", arg: "<0|1>", cmds: "B", note: noGPU},
	{spell: "-ot, --override-tensor", arg: "<tensor name pattern>=<buffer type>,...", cmds: "srbB", note: noGPU + " (every tensor is in host memory)"},
	{spell: "-cmoe, --cpu-moe", cmds: "srb", note: noGPU},
	{spell: "-ncmoe, --n-cpu-moe", arg: "N", cmds: "srbB", note: noGPU},
	{spell: "-fit, --fit", arg: "[on|off]", cmds: "srb", note: noGPU + " (the KV cache is checked against the available memory, see serve's --mem-limit)", choices: []string{"on", "off"}},
	{spell: "-fitt, --fit-target", arg: "MiB0,MiB1,...", cmds: "srbB", note: noGPU},
	{spell: "-fitc, --fit-ctx", arg: "N", cmds: "srbB", note: noGPU},
	{spell: "-fa, --flash-attn", arg: "[on|off|auto]", cmds: "srb", how: mapped, note: flashNote, choices: []string{"on", "off", "auto"}, apply: flashAttn},
	{spell: "-fa, --flash-attn", arg: "<on|off|auto>", cmds: "B", how: mapped, note: flashNote, choices: []string{"on", "off", "auto", "0", "1"}, apply: flashAttn},
	{spell: "--repack", cmds: "srb", note: "weights are always packed into ubatch's panels"},
	{spell: "-nr, --no-repack", cmds: "srb", note: "weights are always packed into ubatch's panels"},
	{spell: "-bs, --backend-sampling", cmds: "srb", note: noGPU},

	// Threads and placement.
	{spell: "-C, --cpu-mask", arg: "M", cmds: "srbB", note: noPlacement},
	{spell: "-Cr, --cpu-range", arg: "lo-hi", cmds: "srb", note: noPlacement},
	{spell: "--cpu-strict", arg: "<0|1>", cmds: "srbB", note: noPlacement},
	{spell: "--prio", arg: "N", cmds: "srbB", note: noPlacement},
	{spell: "--poll", arg: "<0...100>", cmds: "srbB", note: noPlacement},
	{spell: "-Cb, --cpu-mask-batch", arg: "M", cmds: "srb", note: noPlacement},
	{spell: "-Crb, --cpu-range-batch", arg: "lo-hi", cmds: "srb", note: noPlacement},
	{spell: "--cpu-strict-batch", arg: "<0|1>", cmds: "srb", note: noPlacement},
	{spell: "--prio-batch", arg: "N", cmds: "srb", note: noPlacement},
	{spell: "--poll-batch", arg: "<0|1>", cmds: "srb", note: noPlacement},
	{spell: "--numa", arg: "TYPE", cmds: "srbB", note: noPlacement, choices: []string{"distribute", "isolate", "numactl"}},
	{spell: "--threads-http", arg: "N", cmds: "s", note: "Go serves each connection on its own goroutine"},

	// Loading.
	{spell: "--mlock", cmds: "srb", note: loading + "; it is not locked in RAM"},
	{spell: "--mmap", cmds: "srb", note: loading},
	{spell: "--no-mmap", cmds: "srb", note: loading + " (the packed weights are in memory of their own already)"},
	{spell: "-mmp, --mmap", arg: "<0|1>", cmds: "B", note: loading},
	{spell: "-dio, --direct-io", cmds: "srb", note: loading},
	{spell: "-ndio, --no-direct-io", cmds: "srb", note: loading},
	{spell: "-dio, --direct-io", arg: "<0|1>", cmds: "B", note: loading},
	{spell: "-lm, --load-mode", arg: "MODE", cmds: "srbB", note: loading, choices: []string{"auto", "none", "mmap", "mlock", "mmap+mlock", "dio"}},
	{spell: "--check-tensors", cmds: "srb", note: "tensor data is not scanned for NaN or Inf at load"},
	{spell: "--swa-full", cmds: "srb", note: "ubatch's KV cache keeps every position of sliding-window layers already"},
	{spell: "-dt, --defrag-thold", arg: "N", cmds: "srb", note: "the paged KV cache needs no defragmenting"},
	{spell: "-kvu, --kv-unified", cmds: "srb", note: "the KV cache is one pool shared by all sequences already"},
	{spell: "-no-kvu, --no-kv-unified", cmds: "s", note: "the KV cache is one pool shared by all sequences (-np caps the sequences, not their share)"},
	{spell: "-hft, --hf-token", arg: "TOKEN", cmds: "srbB", note: "downloads are anonymous (gated repositories: download the file and give -m PATH)"},
	{spell: "--offline", cmds: "srbB", note: "a model in $UBATCH_HOME or ../shared is used without the network; only a missing one is downloaded"},
	{spell: "-cl, --cache-list", cmds: "srb", how: refused, note: "not supported: the downloaded models are the files in $UBATCH_HOME"},
	{spell: "--completion-bash", cmds: "srb", how: refused, note: "not supported"},
	{spell: "-mu, --model-url", arg: "MODEL_URL", cmds: "srb", how: refused, note: "not supported: give -m hf://ORG/REPO/FILE.gguf ($HF_ENDPOINT names the mirror) or a path"},
	{spell: "-dr, --docker-repo", arg: "[<repo>/]<model>[:quant]", cmds: "srb", how: refused, note: "not supported: give -m hf://ORG/REPO/FILE.gguf or a path"},
	{spell: "--override-kv", arg: "KEY=TYPE:VALUE,...", cmds: "srb", how: refused, note: "metadata overrides are not supported: the model runs as its file says"},
	{spell: "--lora", arg: "FNAME", cmds: "srb", how: refused, note: "LoRA adapters are not supported"},
	{spell: "--lora-scaled", arg: "FNAME:SCALE,...", cmds: "srb", how: refused, note: "LoRA adapters are not supported"},
	{spell: "--lora-init-without-apply", cmds: "s", how: refused, note: "LoRA adapters are not supported"},
	{spell: "--control-vector", arg: "FNAME", cmds: "srb", how: refused, note: "control vectors are not supported"},
	{spell: "--control-vector-scaled", arg: "FNAME:SCALE,...", cmds: "srb", how: refused, note: "control vectors are not supported"},
	{spell: "--control-vector-layer-range", arg: "START,END", cmds: "srb", how: refused, note: "control vectors are not supported"},

	// RoPE: the model's metadata is what ubatch runs.
	{spell: "--rope-scaling", arg: "{none,linear,yarn}", cmds: "srb", how: refused, note: "RoPE comes from the model's metadata; overrides are not supported"},
	{spell: "--rope-scale", arg: "N", cmds: "srb", how: refused, note: "RoPE comes from the model's metadata; overrides are not supported"},
	{spell: "--rope-freq-base", arg: "N", cmds: "srb", how: refused, note: "RoPE comes from the model's metadata; overrides are not supported"},
	{spell: "--rope-freq-scale", arg: "N", cmds: "srb", how: refused, note: "RoPE comes from the model's metadata; overrides are not supported"},
	{spell: "--yarn-orig-ctx", arg: "N", cmds: "srb", how: refused, note: "RoPE comes from the model's metadata; overrides are not supported", keep: []string{"0"}},
	{spell: "--yarn-ext-factor", arg: "N", cmds: "srb", how: refused, note: "RoPE comes from the model's metadata; overrides are not supported", keep: []string{"-1", "-1.0", "-1.00"}},
	{spell: "--yarn-attn-factor", arg: "N", cmds: "srb", how: refused, note: "RoPE comes from the model's metadata; overrides are not supported", keep: []string{"-1", "-1.0", "-1.00"}},
	{spell: "--yarn-beta-slow", arg: "N", cmds: "srb", how: refused, note: "RoPE comes from the model's metadata; overrides are not supported", keep: []string{"-1", "-1.0", "-1.00"}},
	{spell: "--yarn-beta-fast", arg: "N", cmds: "srb", how: refused, note: "RoPE comes from the model's metadata; overrides are not supported", keep: []string{"-1", "-1.0", "-1.00"}},

	// Logging and timings.
	{spell: "--log-disable", cmds: "srbB", note: logNote + " (redirect it: 2>/dev/null)"},
	{spell: "--log-file", arg: "FNAME", cmds: "srb", note: logNote + " (redirect it: 2>FNAME)"},
	{spell: "--log-colors", arg: "[on|off|auto]", cmds: "srb", note: logNote, choices: []string{"on", "off", "auto"}},
	{spell: "-lv, --verbosity, --log-verbosity", arg: "N", cmds: "srb", note: logNote + " (serve -v logs every request)"},
	{spell: "--log-prefix", cmds: "srb", note: logNote},
	{spell: "--no-log-prefix", cmds: "srb", note: logNote},
	{spell: "--log-timestamps", cmds: "srb", note: logNote},
	{spell: "--no-log-timestamps", cmds: "srb", note: logNote},
	{spell: "-v, --verbose, --log-verbose", cmds: "rb", note: logNote},
	{spell: "-v, --verbose", cmds: "B", note: logNote},
	{spell: "--perf", cmds: "srb", note: "timings are always reported"},
	{spell: "--no-perf", cmds: "srb", note: "timings are always reported"},
	{spell: "--warmup", cmds: "srb", note: "no warm-up run is needed"},
	{spell: "--no-warmup", cmds: "srb", note: "no warm-up run is made"},
	{spell: "--no-warmup", cmds: "B", note: "each test's one warm-up run is always made"},
	{spell: "--progress", cmds: "B", note: "progress is not printed"},
	{spell: "--delay", arg: "<0...N>", cmds: "B", note: "tests run one after the other"},
	{spell: "-oe, --output-err", arg: "<csv|json|jsonl|md|sql>", cmds: "B", note: "results go to stdout only (-o)"},
	{spell: "-no-escape, --no-escape", cmds: "r", note: "the default: -p is taken as it is"},
	{spell: "--no-escape", cmds: "s", note: "the server reads no prompt from its command line"},
	{spell: "-e, --escape", cmds: "s", note: "the server reads no prompt from its command line"},

	// Sampling: ubatch's samplers are the ones it registers; the others are refused unless off.
	{spell: "--samplers", arg: "SAMPLERS", cmds: "srb", how: refused, note: "the sampler order is fixed (penalties, top-k, top-p, min-p, temperature)"},
	{spell: "--sampler-seq, --sampling-seq", arg: "SEQUENCE", cmds: "srb", how: refused, note: "the sampler order is fixed (penalties, top-k, top-p, min-p, temperature)"},
	{spell: "--top-nsigma, --top-n-sigma", arg: "N", cmds: "srb", how: refused, note: noSampler, keep: []string{"-1", "-1.0", "-1.00"}},
	{spell: "--xtc-probability", arg: "N", cmds: "srb", how: refused, note: noSampler, keep: []string{"0", "0.0", "0.00"}},
	{spell: "--xtc-threshold", arg: "N", cmds: "srb", note: samplerOff},
	{spell: "--typical, --typical-p", arg: "N", cmds: "srb", how: refused, note: noSampler, keep: []string{"1", "1.0", "1.00"}},
	{spell: "--dry-multiplier", arg: "N", cmds: "srb", how: refused, note: noSampler, keep: []string{"0", "0.0", "0.00"}},
	{spell: "--dry-base", arg: "N", cmds: "srb", note: samplerOff},
	{spell: "--dry-allowed-length", arg: "N", cmds: "srb", note: samplerOff},
	{spell: "--dry-penalty-last-n", arg: "N", cmds: "srb", note: samplerOff},
	{spell: "--dry-sequence-breaker", arg: "STRING", cmds: "srb", note: samplerOff},
	{spell: "--adaptive-target", arg: "N", cmds: "srb", how: refused, note: noSampler, keep: []string{"-1", "-1.0", "-1.00"}},
	{spell: "--adaptive-decay", arg: "N", cmds: "srb", note: samplerOff},
	{spell: "--dynatemp-range", arg: "N", cmds: "srb", how: refused, note: noSampler, keep: []string{"0", "0.0", "0.00"}},
	{spell: "--dynatemp-exp", arg: "N", cmds: "srb", note: samplerOff},
	{spell: "--mirostat", arg: "N", cmds: "srb", how: refused, note: noSampler, keep: []string{"0"}},
	{spell: "--mirostat-lr", arg: "N", cmds: "srb", note: samplerOff},
	{spell: "--mirostat-ent", arg: "N", cmds: "srb", note: samplerOff},
	{spell: "-l, --logit-bias", arg: "TOKEN_ID(+/-)BIAS", cmds: "s", how: refused, note: perRequest + " (logit_bias)"},
	{spell: "--grammar", arg: "GRAMMAR", cmds: "s", how: refused, note: perRequest + " (grammar)"},
	{spell: "--grammar-file", arg: "FNAME", cmds: "s", how: refused, note: perRequest + " (grammar)"},
	{spell: "-j, --json-schema", arg: "SCHEMA", cmds: "s", how: refused, note: perRequest + " (json_schema or response_format)"},
	{spell: "-jf, --json-schema-file", arg: "FILE", cmds: "s", how: refused, note: perRequest + " (json_schema or response_format)"},
	{spell: "-l, --logit-bias", arg: "TOKEN_ID(+/-)BIAS", cmds: "rb", how: refused, note: "not supported here (serve takes logit_bias per request)"},
	{spell: "--grammar", arg: "GRAMMAR", cmds: "rb", how: refused, note: "not supported here (serve takes grammar per request)"},
	{spell: "--grammar-file", arg: "FNAME", cmds: "rb", how: refused, note: "not supported here (serve takes grammar per request)"},
	{spell: "-j, --json-schema", arg: "SCHEMA", cmds: "rb", how: refused, note: "not supported here (serve takes json_schema per request)"},
	{spell: "-jf, --json-schema-file", arg: "FILE", cmds: "rb", how: refused, note: "not supported here (serve takes json_schema per request)"},

	// Speculative decoding.
	{spell: "-md, --model-draft, --spec-draft-model", arg: "FNAME", cmds: "srb", how: refused, note: noSpec},
	{spell: "-hfd, -hfrd, --hf-repo-draft, --spec-draft-hf", arg: "<user>/<model>[:quant]", cmds: "srb", how: refused, note: noSpec},
	{spell: "--spec-type", arg: "TYPE", cmds: "srb", how: refused, note: "speculative decoding is not supported", keep: []string{"none"}},
	{spell: "--spec-default", cmds: "s", how: refused, note: noSpec},
	{spell: "-lcs, --lookup-cache-static", arg: "FNAME", cmds: "srb", how: refused, note: "lookup decoding is not supported"},
	{spell: "-lcd, --lookup-cache-dynamic", arg: "FNAME", cmds: "srb", how: refused, note: "lookup decoding is not supported"},
	{spell: "-ngld, --gpu-layers-draft, --n-gpu-layers-draft, --spec-draft-ngl", arg: "N", cmds: "srb", note: noGPU},
	{spell: "-devd, --device-draft, --spec-draft-device", arg: "<dev1,dev2,..>", cmds: "srb", note: noDevice},
	{spell: "-ctkd, --cache-type-k-draft, --spec-draft-type-k", arg: "TYPE", cmds: "srb", note: "no draft model"},
	{spell: "-ctvd, --cache-type-v-draft, --spec-draft-type-v", arg: "TYPE", cmds: "srb", note: "no draft model"},
	{spell: "-td, --threads-draft, --spec-draft-threads", arg: "N", cmds: "srb", note: "no draft model"},
	{spell: "-tbd, --threads-batch-draft, --spec-draft-threads-batch", arg: "N", cmds: "srb", note: "no draft model"},
	{spell: "-Cd, --cpu-mask-draft, --spec-draft-cpu-mask", arg: "M", cmds: "srb", note: noPlacement},
	{spell: "-Crd, --cpu-range-draft, --spec-draft-cpu-range", arg: "lo-hi", cmds: "srb", note: noPlacement},
	{spell: "--cpu-strict-draft, --spec-draft-cpu-strict", arg: "<0|1>", cmds: "srb", note: noPlacement},
	{spell: "--prio-draft, --spec-draft-prio", arg: "N", cmds: "srb", note: noPlacement},
	{spell: "--poll-draft, --spec-draft-poll", arg: "<0|1>", cmds: "srb", note: noPlacement},
	{spell: "-Cbd, --cpu-mask-batch-draft, --spec-draft-cpu-mask-batch", arg: "M", cmds: "srb", note: noPlacement},
	{spell: "--cpu-strict-batch-draft, --spec-draft-cpu-strict-batch", arg: "<0|1>", cmds: "srb", note: noPlacement},
	{spell: "--prio-batch-draft, --spec-draft-prio-batch", arg: "N", cmds: "srb", note: noPlacement},
	{spell: "--poll-batch-draft, --spec-draft-poll-batch", arg: "<0|1>", cmds: "srb", note: noPlacement},
	{spell: "-otd, --override-tensor-draft, --spec-draft-override-tensor", arg: "PATTERN=TYPE,...", cmds: "srb", note: noGPU},
	{spell: "-cmoed, --cpu-moe-draft, --spec-draft-cpu-moe", cmds: "srb", note: noGPU},
	{spell: "-ncmoed, --n-cpu-moe-draft, --spec-draft-n-cpu-moe, --spec-draft-ncmoe", arg: "N", cmds: "srb", note: noGPU},
	{spell: "--spec-draft-n-max, --draft, --draft-n, --draft-max", arg: "N", cmds: "srb", note: "no draft model"},
	{spell: "--spec-draft-n-min, --draft-min, --draft-n-min", arg: "N", cmds: "srb", note: "no draft model"},
	{spell: "--spec-draft-p-split, --draft-p-split", arg: "P", cmds: "srb", note: "no draft model"},
	{spell: "--spec-draft-p-min, --draft-p-min", arg: "P", cmds: "srb", note: "no draft model"},
	{spell: "--spec-draft-backend-sampling", cmds: "srb", note: "no draft model"},
	{spell: "--no-spec-draft-backend-sampling", cmds: "srb", note: "no draft model"},
	{spell: "--spec-ngram-mod-n-min", arg: "N", cmds: "srb", note: "no speculative decoding"},
	{spell: "--spec-ngram-mod-n-max", arg: "N", cmds: "srb", note: "no speculative decoding"},
	{spell: "--spec-ngram-mod-n-match", arg: "N", cmds: "srb", note: "no speculative decoding"},
	{spell: "--spec-ngram-simple-size-n", arg: "N", cmds: "srb", note: "no speculative decoding"},
	{spell: "--spec-ngram-simple-size-m", arg: "N", cmds: "srb", note: "no speculative decoding"},
	{spell: "--spec-ngram-simple-min-hits", arg: "N", cmds: "srb", note: "no speculative decoding"},
	{spell: "--spec-ngram-map-k-size-n", arg: "N", cmds: "srb", note: "no speculative decoding"},
	{spell: "--spec-ngram-map-k-size-m", arg: "N", cmds: "srb", note: "no speculative decoding"},
	{spell: "--spec-ngram-map-k-min-hits", arg: "N", cmds: "srb", note: "no speculative decoding"},
	{spell: "--spec-ngram-map-k4v-size-n", arg: "N", cmds: "srb", note: "no speculative decoding"},
	{spell: "--spec-ngram-map-k4v-size-m", arg: "N", cmds: "srb", note: "no speculative decoding"},
	{spell: "--spec-ngram-map-k4v-min-hits", arg: "N", cmds: "srb", note: "no speculative decoding"},
	{spell: "--spec-ngram-size-n", arg: "N", cmds: "srb", note: "no speculative decoding"},
	{spell: "--spec-ngram-size-m", arg: "N", cmds: "srb", note: "no speculative decoding"},
	{spell: "--spec-ngram-min-hits", arg: "N", cmds: "srb", note: "no speculative decoding"},

	// Multimodal.
	{spell: "-mm, --mmproj", arg: "FILE", cmds: "srb", how: refused, note: noMultimod},
	{spell: "-mmu, --mmproj-url", arg: "URL", cmds: "srb", how: refused, note: noMultimod},
	{spell: "--mmproj-auto", cmds: "srb", note: noMultimod},
	{spell: "--no-mmproj, --no-mmproj-auto", cmds: "srb", note: noMultimod},
	{spell: "--mmproj-offload", cmds: "srb", note: noMultimod},
	{spell: "--no-mmproj-offload", cmds: "srb", note: noMultimod},
	{spell: "-mmdev, --mmproj-device", arg: "DEVICE", cmds: "srb", note: noMultimod},
	{spell: "--image-min-tokens", arg: "N", cmds: "srb", note: noMultimod},
	{spell: "--image-max-tokens", arg: "N", cmds: "srb", note: noMultimod},
	{spell: "--mtmd-batch-max-tokens", arg: "N", cmds: "srb", note: noMultimod},
	{spell: "--media-path", arg: "PATH", cmds: "s", note: noMultimod},

	// The server.
	{spell: "-n, --n-predict, --predict", arg: "N", cmds: "s", how: refused, note: perRequest + " (max_tokens or n_predict)", keep: []string{"-1"}},
	{spell: "-cb, --cont-batching", cmds: "s", note: "continuous batching is " + alwaysOn},
	{spell: "-nocb, --no-cont-batching", cmds: "s", note: "continuous batching is " + alwaysOn},
	{spell: "--metrics", cmds: "s", note: "GET /metrics is " + alwaysOn},
	{spell: "--slots", cmds: "s", note: "GET /slots is " + alwaysOn},
	{spell: "--no-slots", cmds: "s", note: "GET /slots is " + alwaysOn},
	{spell: "--props", cmds: "s", note: "GET /props is served; POST /props (changing them) is not supported"},
	{spell: "--ui, --webui", cmds: "s", note: "the web page is " + alwaysOn},
	{spell: "--no-ui, --no-webui", cmds: "s", note: "the web page is " + alwaysOn + " (it only reads the API; --api-key guards it)"},
	{spell: "--ui-config, --webui-config", arg: "JSON", cmds: "s", note: "ubatch's web page has no settings"},
	{spell: "--ui-config-file, --webui-config-file", arg: "PATH", cmds: "s", note: "ubatch's web page has no settings"},
	{spell: "--ui-mcp-proxy, --webui-mcp-proxy", cmds: "s", how: refused, note: "no MCP proxy"},
	{spell: "--no-ui-mcp-proxy, --no-webui-mcp-proxy", cmds: "s", note: "no MCP proxy"},
	{spell: "--tools", arg: "TOOL1,TOOL2,...", cmds: "s", how: refused, note: "built-in agent tools are not supported (requests' tools are)"},
	{spell: "--tools-runtime", arg: "OPTION", cmds: "s", note: "built-in agent tools are not supported"},
	{spell: "--mcp-servers-config", arg: "PATH", cmds: "s", how: refused, note: "MCP servers are not supported"},
	{spell: "--mcp-servers-json", arg: "JSON", cmds: "s", how: refused, note: "MCP servers are not supported"},
	{spell: "-ag, --agent", cmds: "s", how: refused, note: "the agent mode is not supported"},
	{spell: "-no-ag, --no-agent", cmds: "s", note: "no agent mode"},
	{spell: "--path", arg: "PATH", cmds: "s", how: refused, note: "static files are not served (only ubatch's own page)"},
	{spell: "--api-prefix", arg: "PREFIX", cmds: "s", how: refused, note: "routes are served at the root (put a proxy in front to add a prefix)"},
	{spell: "--cors-methods", arg: "METHODS", cmds: "s", note: "the CORS policy is ubatch's own (see --cors-origin)"},
	{spell: "--cors-headers", arg: "HEADERS", cmds: "s", note: "the CORS policy is ubatch's own (see --cors-origin)"},
	{spell: "--cors-credentials", cmds: "s", note: "the CORS policy is ubatch's own (see --cors-origin)"},
	{spell: "--no-cors-credentials", cmds: "s", note: "the CORS policy is ubatch's own (see --cors-origin)"},
	{spell: "--reuse-port", cmds: "s", note: "one process per port"},
	{spell: "--ssl-key-file", arg: "FNAME", cmds: "s", how: refused, note: "no TLS: put nginx in front (see docs/deploy.md)"},
	{spell: "--ssl-cert-file", arg: "FNAME", cmds: "s", how: refused, note: "no TLS: put nginx in front (see docs/deploy.md)"},
	{spell: "--sse-ping-interval", arg: "N", cmds: "s", note: "streams send no pings (--write-timeout bounds a stalled client)"},
	{spell: "--cache-prompt", cmds: "s", note: "prefix caching is " + alwaysOn},
	{spell: "--no-cache-prompt", cmds: "s", note: "prefix caching is " + alwaysOn + " (it does not change the output)"},
	{spell: "--cache-reuse", arg: "N", cmds: "s", note: "cached prefixes are reused block by block, without KV shifting"},
	{spell: "--cache-idle-slots", cmds: "s", note: "freed sequences' blocks stay in the prefix cache already"},
	{spell: "--no-cache-idle-slots", cmds: "s", note: "freed sequences' blocks stay in the prefix cache"},
	{spell: "-cram, --cache-ram", arg: "N", cmds: "s", note: "the prefix cache lives in the KV pool (-c, --mem-limit)"},
	{spell: "-ctxcp, --ctx-checkpoints, --swa-checkpoints", arg: "N", cmds: "s", note: "no context checkpoints are needed"},
	{spell: "-cms, --checkpoint-min-step", arg: "N", cmds: "s", note: "no context checkpoints are needed"},
	{spell: "-sps, --slot-prompt-similarity", arg: "SIMILARITY", cmds: "s", note: "every sequence reads the shared prefix cache; there are no slots to pick"},
	{spell: "--slot-save-path", arg: "PATH", cmds: "s", note: "saving and restoring slots is not supported"},
	{spell: "--sleep-idle-seconds", arg: "SECONDS", cmds: "s", note: "the model stays loaded"},
	{spell: "--log-prompts-dir", arg: "PATH", cmds: "s", note: "prompts are not logged"},
	{spell: "--tags", arg: "STRING", cmds: "s", note: "no model tags"},
	{spell: "--embd-normalize", arg: "N", cmds: "s", how: refused, note: "embeddings are L2-normalised (2) only", keep: []string{"2"}},
	{spell: "--spm-infill", cmds: "s", how: refused, note: "infill prompts are built prefix, suffix, middle only"},
	{spell: "-sp, --special", cmds: "srb", how: refused, note: "special tokens are not printed in the text"},
	{spell: "-r, --reverse-prompt", arg: "PROMPT", cmds: "s", note: "llama-cli's interactive stop string; a request's stop field ends its generation"},
	{spell: "--jinja", cmds: "rb", note: "run completes the raw prompt; no chat template"},
	{spell: "--no-jinja", cmds: "s", note: "templates are always rendered with Jinja"},
	{spell: "--chat-template-kwargs", arg: "STRING", cmds: "s", how: refused, note: perRequest + " (chat_template_kwargs)"},
	{spell: "--skip-chat-parsing", cmds: "s", how: refused, note: "chat output is always parsed (tool calls)"},
	{spell: "--no-skip-chat-parsing", cmds: "s", note: "the default: chat output is parsed"},
	{spell: "--prefill-assistant", cmds: "s", note: "a trailing assistant message is rendered by the chat template"},
	{spell: "--no-prefill-assistant", cmds: "s", note: "a trailing assistant message is rendered by the chat template"},
	{spell: "-rea, --reasoning", arg: "[on|off|auto]", cmds: "s", how: refused, note: "thinking is what the chat template and request say (chat_template_kwargs)", keep: []string{"auto"}, choices: []string{"on", "off", "auto"}},
	{spell: "--reasoning-effort", arg: "LEVEL", cmds: "s", how: refused, note: perRequest + " (chat_template_kwargs)", keep: []string{"default"}},
	{spell: "--reasoning-budget", arg: "N", cmds: "s", how: refused, note: "a thinking budget is not supported", keep: []string{"-1"}},
	{spell: "--reasoning-budget-message", arg: "MESSAGE", cmds: "s", note: "no thinking budget"},
	{spell: "--reasoning-preserve", cmds: "s", note: "history turns are rendered as the chat template says"},
	{spell: "--no-reasoning-preserve", cmds: "s", note: "history turns are rendered as the chat template says"},
	{spell: "--models-preset", arg: "PATH", cmds: "s", how: refused, note: "no model presets: serve the library (--models-dir) or repeat -m"},
	{spell: "--models-max", cmds: "s", how: aliased, note: "max-models"},
	{spell: "--models-autoload", cmds: "s", note: "models always load on their first request"},
	{spell: "--no-models-autoload", cmds: "s", note: "models always load on their first request"},

	// llama-server's presets, which download a model (and a draft) and set its flags.
	{spell: "--embd-gemma-default", cmds: "s", how: refused, note: noPreset},
	{spell: "--fim-qwen-1.5b-default", cmds: "s", how: refused, note: noPreset},
	{spell: "--fim-qwen-3b-default", cmds: "s", how: refused, note: noPreset},
	{spell: "--fim-qwen-7b-default", cmds: "s", how: refused, note: noPreset},
	{spell: "--fim-qwen-7b-spec", cmds: "s", how: refused, note: noPreset},
	{spell: "--fim-qwen-14b-spec", cmds: "s", how: refused, note: noPreset},
	{spell: "--fim-qwen-30b-default", cmds: "s", how: refused, note: noPreset},
	{spell: "--gpt-oss-20b-default", cmds: "s", how: refused, note: noPreset},
	{spell: "--gpt-oss-120b-default", cmds: "s", how: refused, note: noPreset},
	{spell: "--vision-gemma-4b-default", cmds: "s", how: refused, note: noPreset},
	{spell: "--vision-gemma-12b-default", cmds: "s", how: refused, note: noPreset},

	// llama-cli.
	{spell: "-i, --interactive", cmds: "r", how: refused, note: "run is not interactive: it completes -p once (serve has a chat page)"},
	{spell: "-if, --interactive-first", cmds: "r", how: refused, note: "run is not interactive: it completes -p once (serve has a chat page)"},
	{spell: "-cnv, --conversation", cmds: "r", how: refused, note: "run completes the raw prompt once; for chat use serve and its page"},
	{spell: "-no-cnv, --no-conversation", cmds: "r", note: "run completes the raw prompt already"},
	{spell: "-st, --single-turn", cmds: "r", how: refused, note: "run completes the raw prompt once, with no chat template"},
	{spell: "-sys, --system-prompt", arg: "PROMPT", cmds: "r", how: refused, note: "run applies no chat template: put the text in -p"},
	{spell: "-sysf, --system-prompt-file", arg: "FNAME", cmds: "r", how: refused, note: "run applies no chat template: put the text in -p"},
	{spell: "-r, --reverse-prompt", arg: "PROMPT", cmds: "r", how: refused, note: "run stops at -n or the end of generation only"},
	{spell: "--in-prefix", arg: "STRING", cmds: "r", how: refused, note: "run is not interactive"},
	{spell: "--in-suffix", arg: "STRING", cmds: "r", how: refused, note: "run is not interactive"},
	{spell: "--in-prefix-bos", cmds: "r", how: refused, note: "run is not interactive"},
	{spell: "-mli, --multiline-input", cmds: "r", note: "run is not interactive"},
	{spell: "-bf, --binary-file", arg: "FNAME", cmds: "r", how: refused, note: "give the prompt as text (-p or -f)"},
	{spell: "--chat-template", arg: "JINJA_TEMPLATE", cmds: "r", note: "run completes the raw prompt; no chat template"},
	{spell: "--chat-template-file", arg: "JINJA_TEMPLATE_FILE", cmds: "r", note: "run completes the raw prompt; no chat template"},
	{spell: "--display-prompt", cmds: "r", note: "the default: the prompt is printed before the generated text"},
	{spell: "--verbose-prompt", cmds: "r", note: "the prompt's tokens are not printed (ubatch tokenize -p TEXT prints them)"},
	{spell: "-ptc, --print-token-count", arg: "N", cmds: "r", note: "the summary on stderr counts the tokens"},
	{spell: "-co, --color", cmds: "r", note: "no colours"},
	{spell: "--simple-io", cmds: "r", note: "output is plain already"},
	{spell: "--prompt-cache", arg: "FNAME", cmds: "r", note: "no session file: the prompt is decoded each time"},
	{spell: "--prompt-cache-all", cmds: "r", note: "no session file"},
	{spell: "--prompt-cache-ro", cmds: "r", note: "no session file"},
	{spell: "-dkvc, --dump-kv-cache", cmds: "r", note: "the KV summary is not dumped"},
	{spell: "-gan, --grp-attn-n", arg: "N", cmds: "r", how: refused, note: "self-extend is not supported", keep: []string{"1"}},
	{spell: "-gaw, --grp-attn-w", arg: "N", cmds: "r", note: "self-extend is not supported"},
	{spell: "--keep", arg: "N", cmds: "r", note: "run stops at a full context: nothing is shifted out"},
	{spell: "--context-shift", cmds: "r", how: refused, note: "run stops at a full context (serve has --context-shift)"},
	{spell: "--no-context-shift", cmds: "r", note: "the default: run stops at a full context"},

	// llama-bench's tests.
	{spell: "-pg", arg: "<pp,tg>", cmds: "B", how: refused, note: "combined prompt+generation tests are not supported: use -p and -n"},
	{spell: "-embd, --embeddings", arg: "<0|1>", cmds: "B", how: refused, note: "embedding tests are not supported", keep: []string{"0"}},
	{spell: "-pps", cmds: "B", how: refused, note: "a prompt shared across the sequences is not supported in --batched"},
}

// flashAttn is llama.cpp's -fa: ubatch's tiled attention is flash-style attention.
func flashAttn(fs *pflag.FlagSet, v string) error {
	on := v != "off" && v != "0"
	return setUnlessGiven(fs, "tiled-attention", strconv.FormatBool(on))
}

// serveTimeout is llama-server's -to N (seconds): ubatch's read and write timeouts, where the
// command line does not give them.
func serveTimeout(fs *pflag.FlagSet, v string) error {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return fmt.Errorf("must be a positive number of seconds")
	}
	for _, name := range []string{"read-timeout", "write-timeout"} {
		if err := setUnlessGiven(fs, name, fmt.Sprintf("%ds", n)); err != nil {
			return err
		}
	}
	return nil
}
