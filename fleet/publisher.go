package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// PublisherConfig configures a node's publisher. Redis, Tracker, NodeID, URL and Load are
// required.
type PublisherConfig struct {
	Redis     *redis.Client
	Namespace string // "" = DefaultNamespace
	Tracker   *Tracker
	NodeID    string
	URL       string // the node's base URL as routers reach it
	Model     string
	// KVIdentity is published with the status when the node serves its KV blocks to peers
	// (Status.KVIdentity); "" = it does not.
	KVIdentity string
	BlockSize  int // the KV cache's block size, which the routing hashes depend on
	// MaxBody and MaxRunning are published with the status (routers never forward bodies
	// larger than MaxBody).
	MaxBody    int64
	MaxRunning int
	Load       func() Load // called once per heartbeat

	TTL       time.Duration // lifetime of the node's keys without a heartbeat; 0 = 10 s
	Heartbeat time.Duration // 0 = TTL/5
	Flush     time.Duration // how often block changes are written; 0 = 100 ms
	Resync    time.Duration // full rewrite of the block set at least this often; 0 = 1 min

	Logger     *slog.Logger          // nil = slog.Default()
	Registerer prometheus.Registerer // ubatch_fleet_* metrics; nil = not registered
}

// Publisher writes a node's cached blocks and status to Redis. Run it in its own goroutine;
// Redis failures are logged, counted and retried with backoff and never reach the node's serving
// path.
type Publisher struct {
	cfg  PublisherConfig
	keys keys
	log  *slog.Logger

	adds, dels map[uint64]struct{} // pending changes since the last flush
	resync     bool                // the next write rewrites the whole set
	lastResync time.Time
	failing    bool // the last Redis call failed (for logging the transitions only)
	retryAt    time.Time
	backoff    time.Duration

	m publisherMetrics
}

type publisherMetrics struct {
	writes, failures, resyncs prometheus.Counter
	dropped                   prometheus.CounterFunc
	blocks                    prometheus.GaugeFunc
}

// NewPublisher checks cfg and makes a publisher; it talks to Redis only in Run.
func NewPublisher(cfg PublisherConfig) (*Publisher, error) {
	switch {
	case cfg.Redis == nil || cfg.Tracker == nil || cfg.Load == nil:
		return nil, errors.New("fleet: PublisherConfig needs Redis, Tracker and Load")
	case !validID(cfg.NodeID):
		return nil, fmt.Errorf("fleet: node id %q: use 1 to 64 letters, digits, '-', '_' or '.'", cfg.NodeID)
	case cfg.BlockSize <= 0:
		return nil, fmt.Errorf("fleet: block size %d must be positive", cfg.BlockSize)
	case cfg.URL == "":
		return nil, errors.New("fleet: PublisherConfig.URL (the node's advertised URL) is required")
	}
	if cfg.TTL <= 0 {
		cfg.TTL = 10 * time.Second
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = cfg.TTL / 5
	}
	if cfg.Flush <= 0 {
		cfg.Flush = 100 * time.Millisecond
	}
	if cfg.Resync <= 0 {
		cfg.Resync = time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	p := &Publisher{cfg: cfg, keys: newKeys(cfg.Namespace), log: cfg.Logger.With("component", "fleet"),
		adds: map[uint64]struct{}{}, dels: map[uint64]struct{}{}, resync: true}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	p.m = publisherMetrics{
		writes:   counter("ubatch_fleet_redis_writes_total", "Batches of block changes and heartbeats written to Redis."),
		failures: counter("ubatch_fleet_redis_failures_total", "Redis writes that failed (retried with backoff; serving goes on)."),
		resyncs:  counter("ubatch_fleet_resyncs_total", "Full rewrites of the node's block set in Redis."),
		dropped: prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ubatch_fleet_events_dropped_total",
			Help: "Block changes dropped because the publisher's queue was full (repaired by a resync)."},
			func() float64 { return float64(cfg.Tracker.Dropped()) }),
		blocks: prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ubatch_fleet_cached_blocks",
			Help: "Distinct cached KV blocks the node publishes."}, func() float64 { return float64(cfg.Tracker.Len()) }),
	}
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{p.m.writes, p.m.failures, p.m.resyncs, p.m.dropped, p.m.blocks} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("fleet: metrics: %w", err)
			}
		}
	}
	return p, nil
}

// validID accepts ids that are safe inside a Redis key and a metric label.
func validID(id string) bool {
	if len(id) == 0 || len(id) > 64 {
		return false
	}
	for _, c := range id {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
		if !ok {
			return false
		}
	}
	return true
}

// Run publishes until ctx ends, then removes the node's keys (best effort) so that routers stop
// sending it requests at once rather than after the TTL.
func (p *Publisher) Run(ctx context.Context) {
	flush := time.NewTicker(p.cfg.Flush)
	defer flush.Stop()
	beat := time.NewTicker(p.cfg.Heartbeat)
	defer beat.Stop()
	p.heartbeat(ctx)
	for {
		select {
		case <-ctx.Done():
			p.leave()
			return
		case <-flush.C:
			p.flush(ctx)
		case <-beat.C:
			p.heartbeat(ctx)
		}
	}
}

// drain moves the queued changes into the pending sets; while a resync is due they are
// discarded, since the rewrite reads the tracker itself.
func (p *Publisher) drain() {
	if p.cfg.Tracker.lost.Swap(false) {
		p.resync = true
	}
	for {
		select {
		case d := <-p.cfg.Tracker.deltas:
			if p.resync {
				continue
			}
			if d.added {
				delete(p.dels, d.hash)
				p.adds[d.hash] = struct{}{}
			} else {
				delete(p.adds, d.hash)
				p.dels[d.hash] = struct{}{}
			}
		default:
			return
		}
	}
}

// flush writes the pending changes (or the whole set, when a resync is due).
func (p *Publisher) flush(ctx context.Context) {
	p.drain()
	if time.Since(p.lastResync) > p.cfg.Resync {
		p.resync = true
	}
	if time.Now().Before(p.retryAt) {
		return
	}
	if p.resync {
		p.writeAll(ctx)
		return
	}
	if len(p.adds) == 0 && len(p.dels) == 0 {
		return
	}
	pipe := p.cfg.Redis.Pipeline()
	key := p.keys.blocks(p.cfg.NodeID)
	if len(p.dels) > 0 {
		pipe.SRem(ctx, key, members(p.dels)...)
	}
	if len(p.adds) > 0 {
		pipe.SAdd(ctx, key, members(p.adds)...)
	}
	pipe.Expire(ctx, key, p.cfg.TTL)
	if p.exec(ctx, pipe) {
		clear(p.adds)
		clear(p.dels)
	}
}

// writeAll replaces the node's block set with the tracker's, atomically, with the status.
func (p *Publisher) writeAll(ctx context.Context) {
	// Changes queued before the snapshot are in it; those queued after it are applied on top,
	// in order, which is idempotent.
	p.drain()
	clear(p.adds)
	clear(p.dels)
	snap := p.cfg.Tracker.Snapshot()
	key := p.keys.blocks(p.cfg.NodeID)
	pipe := p.cfg.Redis.TxPipeline()
	pipe.Del(ctx, key)
	const chunk = 1024
	for i := 0; i < len(snap); i += chunk {
		ms := make([]any, 0, min(chunk, len(snap)-i))
		for _, h := range snap[i:min(i+chunk, len(snap))] {
			ms = append(ms, hashMember(h))
		}
		pipe.SAdd(ctx, key, ms...)
	}
	pipe.Expire(ctx, key, p.cfg.TTL)
	p.addStatus(ctx, pipe, len(snap))
	p.resync = false // changes from now on are deltas against this snapshot
	if !p.exec(ctx, pipe) {
		p.resync = true
		return
	}
	p.lastResync = time.Now()
	p.m.resyncs.Inc()
	p.log.Debug("block set rewritten", "blocks", len(snap))
}

// heartbeat refreshes the status and the TTLs. A block set that vanished while the node holds
// blocks (Redis restarted or evicted it) is rewritten.
func (p *Publisher) heartbeat(ctx context.Context) {
	p.drain()
	if p.resync || time.Now().Before(p.retryAt) {
		p.flush(ctx)
		return
	}
	n := p.cfg.Tracker.Len()
	pipe := p.cfg.Redis.Pipeline()
	p.addStatus(ctx, pipe, n)
	exp := pipe.Expire(ctx, p.keys.blocks(p.cfg.NodeID), p.cfg.TTL)
	if p.exec(ctx, pipe) && !exp.Val() && n > 0 {
		p.log.Info("the node's block set is gone from Redis (restarted?): rewriting it", "blocks", n)
		p.resync = true
		p.flush(ctx)
	}
}

func (p *Publisher) addStatus(ctx context.Context, pipe redis.Pipeliner, blocks int) {
	st := Status{ID: p.cfg.NodeID, URL: p.cfg.URL, Model: p.cfg.Model, BlockSize: p.cfg.BlockSize,
		MaxBody: p.cfg.MaxBody, MaxRunning: p.cfg.MaxRunning, Load: p.cfg.Load(), Blocks: blocks, KVIdentity: p.cfg.KVIdentity,
		TimeMS: time.Now().UnixMilli()}
	b, _ := json.Marshal(st) // plain fields: cannot fail
	pipe.Set(ctx, p.keys.status(p.cfg.NodeID), b, p.cfg.TTL)
	pipe.SAdd(ctx, p.keys.nodes(), p.cfg.NodeID)
}

// exec runs a pipeline, tracking failures: after one the next write waits a backoff (doubling,
// 100 ms to 5 s) and rewrites the whole set, since what was lost is unknown.
func (p *Publisher) exec(ctx context.Context, pipe redis.Pipeliner) bool {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := pipe.Exec(cctx)
	if err != nil && ctx.Err() == nil {
		p.m.failures.Inc()
		p.backoff = min(max(2*p.backoff, 100*time.Millisecond), 5*time.Second)
		p.retryAt = time.Now().Add(p.backoff)
		p.resync = true
		if !p.failing {
			p.log.Warn("Redis write failed; serving goes on, retrying with backoff (check --redis and that Redis is up)",
				"err", err)
		}
		p.failing = true
		return false
	}
	p.m.writes.Inc()
	if p.failing {
		p.log.Info("Redis reachable again: publishing resumed")
	}
	p.failing, p.backoff = false, 0
	return err == nil
}

// leave deletes the node's keys so that routers drop it at once.
func (p *Publisher) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	pipe := p.cfg.Redis.TxPipeline()
	pipe.Del(ctx, p.keys.status(p.cfg.NodeID), p.keys.blocks(p.cfg.NodeID))
	pipe.SRem(ctx, p.keys.nodes(), p.cfg.NodeID)
	if _, err := pipe.Exec(ctx); err != nil {
		p.log.Warn("could not remove the node from Redis; its entries expire by themselves", "err", err, "ttl", p.cfg.TTL)
	}
}

func members(set map[uint64]struct{}) []any {
	out := make([]any, 0, len(set))
	for h := range set {
		out = append(out, hashMember(h))
	}
	return out
}
