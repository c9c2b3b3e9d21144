package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/pflag"

	"ubatch/engine"
	"ubatch/fleet"
	"ubatch/kvcache"
	"ubatch/kvfile"
	"ubatch/peer"
)

// fleetFlags are serve's flags for joining a fleet: publishing the prefix cache and the load to
// Redis for `ubatch route`, and fetching KV blocks from peers (package peer).
type fleetFlags struct {
	redis, nodeID, advertise, namespace string
	ttl                                 time.Duration
	peerKV                              bool
	peerTimeout                         time.Duration
	peerMaxBlocks                       int
	tracker                             *fleet.Tracker

	rdb    *redis.Client // opened by the peer tier (before the engine runs) or start
	source *peer.Source  // the peer tier, nil without --redis or with --peer-kv=false
	layout kvfile.Layout
}

func (f *fleetFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.redis, "redis", "", "publish the prefix cache and load to this Redis (redis://HOST:PORT[/DB]) for ubatch route and the fleet's peers; Redis being down never stops serving")
	fs.StringVar(&f.nodeID, "node-id", "", "this node's id in the fleet (letters, digits, - _ .; default HOSTNAME-PORT)")
	fs.StringVar(&f.advertise, "advertise-url", "", "base URL routers and peers use to reach this node (default http://HOST:PORT of the listener; required when --host is 0.0.0.0)")
	fs.StringVar(&f.advertise, "advertise", "", "old name of --advertise-url")
	fs.MarkDeprecated("advertise", "use --advertise-url")
	fs.StringVar(&f.namespace, "fleet-namespace", fleet.DefaultNamespace, "prefix of the fleet's Redis keys (one per fleet sharing a Redis)")
	fs.DurationVar(&f.ttl, "fleet-ttl", 10*time.Second, "lifetime of this node's Redis entries without a heartbeat (a dead node drops out after it)")
	fs.BoolVar(&f.peerKV, "peer-kv", true, "with --redis: fetch the KV blocks of a prompt prefix that a peer holds instead of computing them, when the transfer is expected to be faster (measured throughput against the step cost model), and serve this node's blocks to peers at POST /kv/blocks (behind --api-key, which every node of the fleet must share)")
	fs.DurationVar(&f.peerTimeout, "peer-timeout", peer.DefaultTimeout, "most a fetch of KV blocks from a peer may take, lookup included; past it the prompt is computed")
	fs.IntVar(&f.peerMaxBlocks, "peer-max-blocks", peer.DefaultMaxBlocks, "most KV blocks a peer may ask for in one POST /kv/blocks (400 beyond it)")
}

// peerTier returns what makes the peer tier for the node's KV layout (nil without --redis or
// with --peer-kv=false): the engine needs it before it runs; the node's id and URL come later
// (start).
func (f *fleetFlags) peerTier(apiKey string, reg prometheus.Registerer, logger *slog.Logger) func(kvfile.Layout) (engine.BlockSource, error) {
	if f.redis == "" || !f.peerKV {
		return nil
	}
	return func(l kvfile.Layout) (engine.BlockSource, error) {
		if f.peerTimeout <= 0 || f.peerMaxBlocks <= 0 {
			return nil, fmt.Errorf("--peer-timeout %v and --peer-max-blocks %d must be positive", f.peerTimeout, f.peerMaxBlocks)
		}
		quietRedis(logger)
		rdb, err := fleet.NewClient(f.redis)
		if err != nil {
			return nil, err
		}
		src, err := peer.NewSource(peer.SourceConfig{Index: fleet.NewIndex(rdb, f.namespace), Layout: l, APIKey: apiKey,
			Timeout: f.peerTimeout, Metrics: peer.NewMetrics(reg), Logger: logger})
		if err != nil {
			rdb.Close()
			return nil, err
		}
		f.rdb, f.layout, f.source = rdb, l, src
		if apiKey == "" {
			logger.Warn("--peer-kv without --api-key: any client that can reach this node can read its KV blocks at POST /kv/blocks (set one --api-key on every node of the fleet)")
		}
		return src, nil
	}
}

// kvBlocks is the POST /kv/blocks handler, nil without the peer tier.
func (f *fleetFlags) kvBlocks(eng *engine.Engine, reg prometheus.Registerer, logger *slog.Logger) http.Handler {
	if f.source == nil {
		return nil
	}
	return peer.Handler(peer.HandlerConfig{Cache: eng, Layout: f.layout, MaxBlocks: f.peerMaxBlocks, Metrics: f.source.Metrics(),
		Logger: logger})
}

// onBlock returns the KV-cache hook that feeds the publisher, nil without --redis.
func (f *fleetFlags) onBlock() func(kvcache.BlockEvent) {
	if f.redis == "" {
		return nil
	}
	f.tracker = fleet.NewTracker(4096)
	return f.tracker.OnBlock
}

// fleetNode is what the publisher announces about a serving node.
type fleetNode struct {
	addr       net.Addr // the listener's
	model      string
	blockSize  int
	maxBody    int64
	maxRunning int
	stats      func() engine.Stats
	reg        prometheus.Registerer
	logger     *slog.Logger
}

// start runs the publisher until ctx ends (without --redis it does nothing). The returned stop
// waits for it to remove the node from Redis.
func (f *fleetFlags) start(ctx context.Context, n fleetNode) (stop func(), err error) {
	if f.redis == "" {
		if f.nodeID != "" || f.advertise != "" {
			return nil, fmt.Errorf("--node-id and --advertise-url need --redis")
		}
		return func() {}, nil
	}
	tcp, _ := n.addr.(*net.TCPAddr)
	if f.nodeID == "" {
		host, _ := os.Hostname()
		f.nodeID = strings.NewReplacer(":", "-", "/", "-").Replace(host) + "-" + strconv.Itoa(tcp.Port)
	}
	adv, err := advertiseURL(f.advertise, n.addr)
	if err != nil {
		return nil, err
	}
	f.advertise = adv
	quietRedis(n.logger)
	rdb := f.rdb
	if rdb == nil {
		if rdb, err = fleet.NewClient(f.redis); err != nil {
			return nil, err
		}
	}
	ident := ""
	if f.source != nil {
		ident = f.source.KVIdentity()
		f.source.SetSelf(f.nodeID)
	}
	pub, err := fleet.NewPublisher(fleet.PublisherConfig{Redis: rdb, Namespace: f.namespace, Tracker: f.tracker,
		NodeID: f.nodeID, URL: f.advertise, Model: n.model, KVIdentity: ident, BlockSize: n.blockSize,
		MaxBody: n.maxBody, MaxRunning: n.maxRunning, TTL: f.ttl, Logger: n.logger, Registerer: n.reg,
		Load: func() fleet.Load {
			st := n.stats()
			return fleet.Load{Running: st.Running, Waiting: st.Waiting, Bound: st.Bound, KVTotal: st.KV.Total, KVFree: st.KV.Free, KVCached: st.KV.Cached}
		}})
	if err != nil {
		rdb.Close()
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		pub.Run(ctx)
	}()
	peerDone := make(chan struct{})
	go func() {
		defer close(peerDone)
		if f.source != nil {
			f.source.Run(ctx)
		}
	}()
	n.logger.Info("publishing to the fleet", "node_id", f.nodeID, "advertise_url", f.advertise, "redis", f.redis,
		"peer_kv", f.source != nil)
	return func() {
		<-done
		<-peerDone
		rdb.Close()
	}, nil
}

// check refuses, before the model is loaded, fleet flags that start cannot honour: --node-id
// or --advertise-url without --redis, a malformed or unspecified --advertise-url, and no
// --advertise-url while listening on every interface.
func (f *fleetFlags) check(host string) error {
	if f.redis == "" {
		if f.nodeID != "" || f.advertise != "" {
			return fmt.Errorf("--node-id and --advertise-url need --redis")
		}
		return nil
	}
	if f.advertise != "" {
		_, err := advertiseURL(f.advertise, nil)
		return err
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		return fmt.Errorf("--host %q listens on every interface: set --advertise-url http://THIS_HOST:PORT, the URL routers and peers reach this node at", host)
	}
	return nil
}

// advertiseURL checks --advertise-url, or makes it from the listener's address: the URL routers
// and peers reach this node at, which an unspecified address (0.0.0.0, ::) is not.
func advertiseURL(flag string, addr net.Addr) (string, error) {
	if flag == "" {
		tcp, _ := addr.(*net.TCPAddr)
		if tcp == nil || tcp.IP.IsUnspecified() {
			return "", fmt.Errorf("listening on %v (every interface): set --advertise-url http://THIS_HOST:PORT, the URL routers and peers reach this node at", addr)
		}
		return "http://" + addr.String(), nil
	}
	u, err := url.Parse(flag)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("--advertise-url %q: want http://HOST:PORT or https://HOST:PORT (an optional path prefix, no query)", flag)
	}
	if ip := net.ParseIP(u.Hostname()); ip != nil && ip.IsUnspecified() {
		return "", fmt.Errorf("--advertise-url %q: %s is not an address routers and peers can reach; give this node's own host name or IP", flag, u.Hostname())
	}
	return strings.TrimSuffix(u.String(), "/"), nil
}

// apiModelID is the model id the server reports (server.Config.ModelID's default).
func apiModelID(alias, path string) string {
	if alias != "" {
		return alias
	}
	return filepath.Base(path)
}

// redisLog sends go-redis's own messages (a failed dial on every retry while Redis is down) to
// the debug level: the fleet code already logs each outage once, with what to do.
type redisLog struct{ l *slog.Logger }

func (r redisLog) Printf(ctx context.Context, format string, v ...any) {
	r.l.DebugContext(ctx, fmt.Sprintf(format, v...), "component", "go-redis")
}

// quietRedis installs redisLog as go-redis's process-wide logger (a library setting: only the
// commands, which own the process, call it).
func quietRedis(l *slog.Logger) { redis.SetLogger(redisLog{l}) }
