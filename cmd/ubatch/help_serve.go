package main

// serveHelpGroups are the sections of serve's --help, the basics first. A flag no group names
// is listed under otherFlags (TestServeHelpGroups fails until it is given a group here).
var serveHelpGroups = []flagGroup{
	{"Basics", []string{"model", "host", "port", "ctx-size", "threads", "parallel"}},
	{"Models (several, the library)", []string{"alias", "models-dir", "keep-alive", "max-models", "load-timeout"}},
	{"Sampling defaults (a request's own fields win)", []string{"temp", "top-k", "top-p", "min-p", "repeat-penalty",
		"repeat-last-n", "frequency-penalty", "presence-penalty", "seed", "ignore-eos"}},
	{"Scheduling", []string{"batch-size", "ubatch-size", "chunk-size", "target-itl", "policy", "tiled-attention"}},
	{"Limits: memory, connections, requests", []string{"mem-limit", "max-queue", "max-body", "read-timeout", "write-timeout",
		"max-connections", "max-conns-per-client", "trusted-proxies", "max-client-priority", "max-live-streams",
		"max-embedding-inputs", "max-embedding-tokens", "max-n", "max-messages", "max-content-parts", "render-timeout",
		"parse-budget", "parse-wait"}},
	{"Limits: output constraints and tools", []string{"grammar-max-bytes", "grammar-max-rules", "grammar-max-alternatives",
		"grammar-max-repetition", "grammar-max-elements", "grammar-max-time", "grammar-budget", "max-sample-time",
		"max-tools", "max-tools-bytes"}},
	{"KV cache and its tiers", []string{"kv-type", "cache-type-k", "cache-type-v", "kv-block", "context-shift", "keep", "state-cache",
		"kv-disk", "kv-disk-size", "slot-save-path"}},
	{"Fleet (ubatch route, Redis, peers)", []string{"redis", "node-id", "advertise-url", "fleet-namespace", "fleet-ttl",
		"peer-kv", "peer-timeout", "peer-max-blocks"}},
	{"API and security", []string{"api-key", "cors-origin", "allowed-hosts", "embeddings", "rerank", "embedding-priority",
		"pooling", "chat-template", "chat-template-file", "jinja", "reasoning-format", "cache-salt-per-key"}},
	{"Process", []string{"verbose", "shutdown-timeout", "cpuprofile", "version"}},
}

// serveHelpText follows serve's flags in its --help.
const serveHelpText = `Models: each -m (a path, a library name, ORG/REPO[:QUANT]); without -m, every model of the library
(--models-dir; the demo model when it is empty). One -m is loaded at start and kept (unless --keep-alive);
otherwise a model loads on its first request and unloads after --keep-alive idle. Requests name it in "model".
Routes: POST /v1/completions, /v1/chat/completions, /v1/responses, /v1/embeddings (--embeddings), GET /v1/models
(OpenAI; also without /v1); POST /completion, /infill, /v1/rerank (--rerank), /tokenize, /detokenize,
/apply-template, GET /props, /slots, /health (llama.cpp); POST /api/chat, /api/generate, /api/embed, GET /api/tags,
/api/ps ... (Ollama); GET /metrics (Prometheus); GET / (the web page), GET /live (its event feed).
Requests may set "priority": "low"|"normal"|"high" or an integer (a waiting request gains one level per 5 s,
up to high). SIGINT/SIGTERM stops accepting connections, lets running requests finish for up to
--shutdown-timeout, then exits.`
