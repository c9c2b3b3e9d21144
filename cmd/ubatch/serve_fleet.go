package main

import (
	"context"
	"fmt"
	"github.com/spf13/pflag"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"ubatch/engine"
	"ubatch/fleet"
	"ubatch/kvcache"
)

// fleetFlags are serve's flags for joining a fleet: publishing the prefix cache and the load to
// Redis for `ubatch route`.
type fleetFlags struct {
	redis, nodeID, advertise, namespace string
	ttl                                 time.Duration
	tracker                             *fleet.Tracker
}

func (f *fleetFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.redis, "redis", "", "publish the prefix cache and load to this Redis (redis://HOST:PORT[/DB]) for ubatch route; Redis being down never stops serving")
	fs.StringVar(&f.nodeID, "node-id", "", "this node's id in the fleet (letters, digits, - _ .; default HOSTNAME-PORT)")
	fs.StringVar(&f.advertise, "advertise", "", "base URL routers use to reach this node (default http://HOST:PORT of the listener)")
	fs.StringVar(&f.namespace, "fleet-namespace", fleet.DefaultNamespace, "prefix of the fleet's Redis keys (one per fleet sharing a Redis)")
	fs.DurationVar(&f.ttl, "fleet-ttl", 10*time.Second, "lifetime of this node's Redis entries without a heartbeat (a dead node drops out after it)")
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
			return nil, fmt.Errorf("--node-id and --advertise need --redis")
		}
		return func() {}, nil
	}
	tcp, _ := n.addr.(*net.TCPAddr)
	if f.nodeID == "" {
		host, _ := os.Hostname()
		f.nodeID = strings.NewReplacer(":", "-", "/", "-").Replace(host) + "-" + strconv.Itoa(tcp.Port)
	}
	if f.advertise == "" {
		if tcp == nil || tcp.IP.IsUnspecified() {
			return nil, fmt.Errorf("listening on %v: pass --advertise http://THIS_HOST:PORT, the URL routers reach this node at", n.addr)
		}
		f.advertise = "http://" + n.addr.String()
	}
	quietRedis(n.logger)
	rdb, err := fleet.NewClient(f.redis)
	if err != nil {
		return nil, err
	}
	pub, err := fleet.NewPublisher(fleet.PublisherConfig{Redis: rdb, Namespace: f.namespace, Tracker: f.tracker,
		NodeID: f.nodeID, URL: strings.TrimSuffix(f.advertise, "/"), Model: n.model, BlockSize: n.blockSize,
		MaxBody: n.maxBody, MaxRunning: n.maxRunning, TTL: f.ttl, Logger: n.logger, Registerer: n.reg,
		Load: func() fleet.Load {
			st := n.stats()
			return fleet.Load{Running: st.Running, Waiting: st.Waiting, KVTotal: st.KV.Total, KVFree: st.KV.Free, KVCached: st.KV.Cached}
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
	n.logger.Info("publishing to the fleet", "node_id", f.nodeID, "advertise", f.advertise, "redis", f.redis)
	return func() {
		<-done
		rdb.Close()
	}, nil
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
