package main

import (
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"

	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/pflag"

	"ubatch/fleet"
	"ubatch/gguf"
	"ubatch/hub"
	"ubatch/kvcache"
	"ubatch/router"
	"ubatch/router/kube"
	"ubatch/server"
)

// cmdRoute serves an OpenAI-compatible front over a fleet of `ubatch serve` nodes, sending each
// request to the node whose prefix cache holds the most of its prompt (package router).
func cmdRoute(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("route", "route -m MODEL (--redis URL | --nodes URL,URL,... | --kube-service NS/NAME) [--host 127.0.0.1] [--port 8000] [flags]\n\n"+
		"Routes the same API as serve to the nodes: each prompt is tokenized with MODEL's tokenizer (no weights are\n"+
		"loaded) and sent to the node holding its longest cached prefix (from the nodes' entries in --redis), weighed\n"+
		"against load. The nodes are --nodes, or a Kubernetes Service's ready endpoints (--kube-service), or else those\n"+
		"publishing to --redis. GET /health and /metrics are the router's own.", stderr)
	modelPath := fs.StringP("model", "m", "", "model whose tokenizer and chat template the nodes use: a GGUF path or hf://ORG/REPO/FILE.gguf (default: the demo model)")
	redisURL := fs.String("redis", "", "Redis the nodes publish to (redis://HOST:PORT[/DB]); without it, routing is by load and recent affinity only")
	nodes := fs.String("nodes", "", "comma-separated node base URLs (http://HOST:PORT); without it, every node publishing to --redis is used")
	kubeService := fs.String("kube-service", "", "discover the nodes from this Kubernetes Service's EndpointSlices, NAMESPACE/NAME[:PORTNAME]: each ready endpoint is a node at http://IP:PORT, joining and leaving as the Service's pods do (the port named PORTNAME, default the Service's only port; nodes must --advertise-url that URL for --redis to match them). Needs list and watch on endpointslices in NAMESPACE")
	kubeconfig := fs.String("kubeconfig", "", "with --kube-service: the kubeconfig file to reach the API server with (default: the pod's in-cluster ServiceAccount)")
	namespace := fs.String("fleet-namespace", fleet.DefaultNamespace, "prefix of the fleet's Redis keys, as given to serve")
	host := fs.String("host", "127.0.0.1", "address to listen on (0.0.0.0 for every interface)")
	port := fs.Int("port", 8000, "TCP port to listen on (0 = any free port; the log says which)")
	extProc := fs.Int("ext-proc-port", -1, "also serve Envoy's ext_proc gRPC protocol on this port (on --host) as the endpoint picker of a gateway with the Gateway API Inference Extension; the gateway then forwards each request to the node named in x-gateway-destination-endpoint (-1 = off, 0 = any free port)")
	maxBody := fs.Int64("max-body", server.DefaultMaxBodyBytes, "largest request body in bytes (413 beyond it); never more than a node accepts is forwarded")
	loadWeight := fs.Float64("load-weight", 16, "cached prompt tokens one request in flight on a node is worth when scoring nodes")
	peerCredit := fs.Float64("peer-credit", 0, "share (0..1) of a prompt prefix that another node of the same KV identity holds counted as cached on a node that lacks it, since nodes fetch blocks from their peers (serve --peer-kv): 0 pins a tenant to its node until load outweighs the whole prefix; 0.9 spreads a busy node's tenant to a less loaded peer")
	queueWeight := fs.Float64("queue-weight", 256, "cached prompt tokens one request queued beyond a node's -np costs besides (spills a hot prefix to a free node)")
	affinity := fs.Duration("affinity-ttl", 10*time.Second, "how long the router remembers where it sent a prompt, until the node publishes its blocks (negative = off)")
	health := fs.Duration("health-interval", time.Second, "how often every node's /health is probed")
	firstByte := fs.Duration("first-byte-timeout", 2*time.Minute, "give up on a node that sends no response byte this long after the request was forwarded, and try the next "+
		"node (nothing has reached the client yet). It covers the node's queue and prefill and, for a non-streamed request, the whole "+
		"generation, which a node answers when done: raise it if non-streamed answers take longer")
	idle := fs.Duration("stream-idle-timeout", 5*time.Minute, "after a response's first byte, end it (a stream with an error event) when its node sends nothing for this long")
	maxResp := fs.Int64("max-response-bytes", router.DefaultMaxResponseBytes, "largest non-streamed response read from a node, and so held in memory per request; "+
		"beyond it the client gets 502 response_too_large (streams pass through event by event and are not bounded as a whole)")
	fall := fs.Int("fall", 3, "take a node out of rotation after this many failed requests in a row (a 5xx without the node's OpenAI error body, or 502/504, "+
		"transport error, timeout, garbage; an answer below 500, a 4xx included, resets the count; a 503 with Retry-After or a node's "+
		"well-formed 500 about the request counts neither way), or this many failed health checks in a row")
	rise := fs.Int("rise", 2, "good health checks in a row that bring a node back into rotation")
	saltPerKey := fs.Bool("cache-salt-per-key", false, "root each request's routing hashes at its bearer token and cache_salt, as nodes started with serve --cache-salt-per-key salt their blocks: set it when the nodes do, or their salted prefixes are never found")
	blockSize := fs.Int("kv-block", kvcache.DefaultBlockSize, "KV block size of nodes that publish none (as serve's --kv-block)")
	grace := fs.Duration("shutdown-timeout", server.DefaultGrace, "on SIGINT/SIGTERM, how long in-flight requests may run")
	maxConns := fs.Int("max-connections", 4096, "most open client connections; beyond it new connections get 503 at once")
	bf := newRouteBoundFlags(fs)
	verbose := fs.BoolP("verbose", "v", false, "debug logging")
	if err := parse(fs, args); err != nil {
		return err
	}
	nodeList := splitList(*nodes)
	var svc kube.Service
	switch {
	case len(nodeList) == 0 && *redisURL == "" && *kubeService == "":
		return flagError(fs, errors.New("no nodes: give --nodes, --kube-service or --redis (--redis with either of the others for prefix-aware routing)"))
	case len(nodeList) > 0 && *kubeService != "":
		return flagError(fs, errors.New("--nodes and --kube-service: give one of them"))
	case *kubeconfig != "" && *kubeService == "":
		return flagError(fs, errors.New("--kubeconfig without --kube-service: it says where to watch the Service's endpoints"))
	case *port < 0 || *port > 65535:
		return flagError(fs, fmt.Errorf("--port %d: must be in [0, 65535]", *port))
	case *extProc < -1 || *extProc > 65535:
		return flagError(fs, fmt.Errorf("--ext-proc-port %d: must be -1 (off) or in [0, 65535]", *extProc))
	}
	if err := mustBePositive(fs, "max-body", "kv-block", "max-connections", "shutdown-timeout", "first-byte-timeout",
		"stream-idle-timeout", "max-response-bytes", "fall", "rise", "max-conns-per-client", "prefix-bytes", "quarantine-ttl"); err != nil {
		return flagError(fs, err)
	}
	lim, err := bf.limits()
	if err != nil {
		return flagError(fs, err)
	}
	if *kubeService != "" {
		if svc, err = kube.ParseService(*kubeService); err != nil {
			return flagError(fs, err)
		}
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	if lim.goMem > 0 {
		debug.SetMemoryLimit(lim.goMem)
		logger.Info("Go memory limit set", "limit", fmtBytes(lim.goMem), "source", lim.goMemSource)
	}

	path, err := hub.Resolve(ctx, *modelPath, hub.Options{Progress: hub.ProgressPrinter(stderr, "download"), Logger: logger})
	if err != nil {
		return err
	}
	f, err := gguf.Open(path)
	if err != nil {
		return fmt.Errorf("model %s: %w", path, err)
	}
	defer f.Close()
	prompter, err := router.NewPrompter(f)
	if err != nil {
		return fmt.Errorf("model %s: tokenizer: %w", path, err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cfg := router.Config{Prompter: prompter, Nodes: nodeList, BlockSize: *blockSize, MaxBodyBytes: *maxBody,
		LoadWeight: *loadWeight, QueueWeight: *queueWeight, PeerCredit: *peerCredit, AffinityTTL: *affinity, HealthInterval: *health,
		FirstByteTimeout: *firstByte, StreamIdleTimeout: *idle, MaxResponseBytes: *maxResp, Fall: *fall, Rise: *rise,
		PrefixBytes: *bf.prefixBytes, ParseBudget: lim.parseBudget, QuarantineTTL: *bf.quarantine, CacheSaltPerKey: *saltPerKey,
		Logger: logger, Registerer: reg, Gatherer: reg}
	if *redisURL != "" {
		quietRedis(logger)
		rdb, err := fleet.NewClient(*redisURL)
		if err != nil {
			return err
		}
		defer rdb.Close()
		cfg.Index = fleet.NewIndex(rdb, *namespace)
	}
	if *kubeService != "" {
		w, err := kube.New(ctx, kube.Config{Service: svc, Kubeconfig: *kubeconfig, Logger: logger})
		if err != nil {
			return err
		}
		cfg.Discovery = w
	}
	rt, err := router.New(cfg)
	if err != nil {
		return err
	}
	listen := net.JoinHostPort(*host, strconv.Itoa(*port))
	handler, err := server.HostCheck(rt.Handler(), listen, splitList(*bf.allowedHosts))
	if err != nil {
		return flagError(fs, fmt.Errorf("--allowed-hosts: %w", err))
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	rctx, stop := context.WithCancel(context.Background())
	defer stop()
	rt.Start(rctx)
	if *extProc >= 0 {
		stopPicker, err := servePicker(rt, net.JoinHostPort(*host, strconv.Itoa(*extProc)), logger)
		if err != nil {
			return err
		}
		defer stopPicker()
	}
	logger.Info("routing", "url", "http://"+ln.Addr().String(), "model", path, "nodes", len(nodeList),
		"kube_service", *kubeService, "redis", *redisURL != "", "healthy", rt.Healthy())
	scfg := server.ServeConfig{Grace: *grace, MaxConnections: *maxConns, MaxConnsPerClient: *bf.perClient,
		TrustedProxies: lim.proxies, Logger: logger}
	if err := server.Serve(ctx, ln, handler, scfg); err != nil {
		return err
	}
	logger.Info("router stopped")
	return nil
}

// routeBoundFlags are route's flags that bound what clients may make it do.
type routeBoundFlags struct {
	perClient, prefixBytes                              *int
	trustedProxies, allowedHosts, parseBudget, memLimit *string
	quarantine                                          *time.Duration
}

func newRouteBoundFlags(fs *pflag.FlagSet) routeBoundFlags {
	var b routeBoundFlags
	b.perClient = fs.Int("max-conns-per-client", server.DefaultMaxConnsPerClient, "most open connections from one client address (IPv6: its /64), so one client cannot take every --max-connections slot; beyond it new connections get 429 at once. Behind --trusted-proxies it caps each client's requests in flight instead (/health, /metrics exempt)")
	b.trustedProxies = fs.String("trusted-proxies", "", "reverse proxies (nginx) in front, comma-separated CIDRs or addresses: their connections are not capped per address, and their X-Forwarded-For names the client that --max-conns-per-client counts (default: none)")
	b.allowedHosts = fs.String("allowed-hosts", "", "Host header names served besides localhost ones, comma-separated (\"*\" for any); on a loopback --host other names get 403, so that a web page cannot reach the router by DNS rebinding")
	b.prefixBytes = fs.Int("prefix-bytes", router.DefaultPrefixBytes, "leading bytes of a prompt's text (a chat's rendered messages) the router tokenizes to route by prefix; the nodes read the rest")
	b.parseBudget = fs.String("parse-budget", "64M", "request body bytes the router parses at once, all requests together; a request beyond it is routed by load, unparsed")
	b.quarantine = fs.Duration("quarantine-ttl", 10*time.Minute, "how long a request body is refused (422) once the connections of two nodes broke while serving it (a query of death), counted from its last failure")
	b.memLimit = fs.String("mem-limit", "", "the Go runtime's soft memory limit, e.g. 1G, so that memory goes back to the system after large requests (default: nine tenths of the room under the cgroup's memory limit, none without one; GOMEMLIMIT overrides the default)")
	return b
}

// routeFlagLimits are the values of routeBoundFlags that need parsing.
type routeFlagLimits struct {
	parseBudget int64
	proxies     []netip.Prefix
	goMem       int64 // the Go memory limit to set; 0 = none
	goMemSource string
}

// limits parses --parse-budget, --trusted-proxies and --mem-limit.
func (b routeBoundFlags) limits() (routeFlagLimits, error) {
	var l routeFlagLimits
	var err error
	if l.parseBudget, err = parseSize(*b.parseBudget); err != nil || l.parseBudget <= 0 {
		return l, fmt.Errorf("--parse-budget %q: want a positive size such as 64M", *b.parseBudget)
	}
	if l.proxies, err = server.ParseTrustedProxies(*b.trustedProxies); err != nil {
		return l, fmt.Errorf("--trusted-proxies: %w", err)
	}
	l.goMem, l.goMemSource, err = routeMemLimit(*b.memLimit, os.DirFS("/"), os.Getenv("GOMEMLIMIT"))
	return l, err
}

// servePicker serves the router's ext_proc endpoint picker (router.Router.ExtProc) on addr
// until the returned stop, which lets the exchanges in flight end.
func servePicker(rt *router.Router, addr string, logger *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--ext-proc-port: %w", err)
	}
	gs := grpc.NewServer()
	extprocv3.RegisterExternalProcessorServer(gs, rt.ExtProc())
	go func() {
		if err := gs.Serve(ln); err != nil {
			logger.Error("ext_proc picker stopped", "err", err)
		}
	}()
	logger.Info("endpoint picker (ext_proc)", "addr", ln.Addr().String())
	return gs.GracefulStop, nil
}
