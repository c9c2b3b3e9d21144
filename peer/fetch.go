package peer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"ubatch/engine"
	"ubatch/fleet"
	"ubatch/internal/iocount"
	"ubatch/kvfile"
	"ubatch/prefixhash"
)

// SourceConfig configures a Source. Index and Layout are required, and Self before Run (or
// SetSelf).
type SourceConfig struct {
	Index  *fleet.Index
	Self   string        // this node's fleet id: never its own peer
	Layout kvfile.Layout // this node's KV layout
	APIKey string        // sent to peers as "Authorization: Bearer KEY" (the fleet shares one key)
	// Timeout bounds one fetch, lookup included (0: DefaultTimeout); the engine's cost
	// decision keeps fetches that are expected to be slower than computing from starting.
	Timeout time.Duration
	// MaxBytes bounds the K/V one fetch brings (0: DefaultFetchBytes), AnswerBytes the K/V
	// asked for in one request to the peer (0: DefaultMaxBytes, the peer's default bound of an
	// answer); a fetch makes as many requests as it takes.
	MaxBytes, AnswerBytes int64
	MinBlocks             int // fewest missing blocks worth a fetch; 0 = 1
	// Refresh is how often the fleet's node list is read (Run): Probe answers from it. 0 = 1 s.
	Refresh time.Duration
	Client  *http.Client // nil: one with a 1 s dial timeout
	Metrics *Metrics
	Logger  *slog.Logger
}

// Defaults of SourceConfig.
const (
	DefaultTimeout    = 2 * time.Second
	DefaultFetchBytes = 1 << 30
)

// Source is the peer tier: an engine.BlockSource. Run must run for Probe to see peers. It is
// safe for concurrent use.
type Source struct {
	cfg        SourceConfig
	ident      string
	blockBytes int64
	est        *estimator
	log        *slog.Logger
	peers      atomic.Pointer[[]fleet.Status] // live nodes of this identity, not this one
	self       atomic.Pointer[string]

	mu       sync.Mutex
	inflight map[uint64]*call // fetches under way, by the last routing hash fetched
}

// call is one fetch that concurrent requests for the same prefix share.
type call struct {
	done   chan struct{}
	blocks []kvfile.Block
	err    error
}

// NewSource checks cfg and makes the peer tier.
func NewSource(cfg SourceConfig) (*Source, error) {
	if cfg.Index == nil {
		return nil, errors.New("peer: SourceConfig needs Index")
	}
	if err := cfg.Layout.Check(); err != nil {
		return nil, err
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = DefaultFetchBytes
	}
	if cfg.AnswerBytes <= 0 {
		cfg.AnswerBytes = DefaultMaxBytes
	}
	cfg.MinBlocks = max(cfg.MinBlocks, 1)
	if cfg.Refresh <= 0 {
		cfg.Refresh = time.Second
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Transport: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConnsPerHost: 4, IdleConnTimeout: 90 * time.Second,
			DisableCompression: true, // K/V rows do not compress; the CPU is the model's
		}}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Source{cfg: cfg, ident: Identity(cfg.Layout), blockBytes: int64(cfg.Layout.BlockSize) * cfg.Layout.CellBytes(),
		est: newEstimator(), log: cfg.Logger.With("component", "peer"), inflight: map[uint64]*call{}}
	s.peers.Store(&[]fleet.Status{})
	s.SetSelf(cfg.Self)
	return s, nil
}

// SetSelf sets this node's fleet id, when it is known only once the node listens (the engine
// needs its tiers before that).
func (s *Source) SetSelf(id string) { s.self.Store(&id) }

// KVIdentity is what the node publishes as fleet.Status.KVIdentity.
func (s *Source) KVIdentity() string { return s.ident }

// Run reads the fleet's node list every Refresh until ctx ends.
func (s *Source) Run(ctx context.Context) {
	t := time.NewTicker(s.cfg.Refresh)
	defer t.Stop()
	for {
		s.refresh(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// refresh reads the live peers of this identity; on a Redis failure the last list stays.
func (s *Source) refresh(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	nodes, _, err := s.cfg.Index.Nodes(rctx)
	if err != nil {
		return
	}
	peers := nodes[:0]
	for _, n := range nodes {
		if n.ID != *s.self.Load() && n.KVIdentity == s.ident && n.BlockSize == s.cfg.Layout.BlockSize {
			peers = append(peers, n)
		}
	}
	s.peers.Store(&peers)
}

// Name labels the tier in the engine's metrics.
func (s *Source) Name() string { return "peer" }

// Probe answers, in memory, what a fetch could bring at best: every full block of q from From
// on (up to MaxBytes), when a live peer of this identity exists. Which peer holds how much is
// looked up by Fetch; one holding less brings less, and none nothing.
func (s *Source) Probe(q *engine.Lookup) engine.Hit {
	if len(*s.peers.Load()) == 0 {
		return engine.Hit{}
	}
	n := min(len(q.Keys)-q.From, int(s.cfg.MaxBytes/max(s.blockBytes, 1)))
	if n < s.cfg.MinBlocks {
		return engine.Hit{}
	}
	return engine.Hit{Blocks: n, Cells: n * q.BlockSize, Bytes: int64(n) * s.blockBytes}
}

// ReadCost is the expected time of fetching bytes of K/V: the measured latency (lookup and
// round trip) plus bytes over the measured throughput.
func (s *Source) ReadCost(bytes int64) time.Duration { return s.est.estimate(bytes) }

// Fetch brings the blocks of q from From on that the best peer holds (the longest run, then the
// least loaded): nil when no peer holds any. Requests for the same prefix at once share one
// fetch. A peer's failure is logged and counted and brings nothing.
func (s *Source) Fetch(ctx context.Context, q *engine.Lookup, h engine.Hit) ([]kvfile.Block, error) {
	bs := s.cfg.Layout.BlockSize
	if q.BlockSize != bs || h.Blocks <= 0 {
		return nil, nil
	}
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	start := time.Now()
	end := min(len(q.Keys), q.From+h.Blocks)
	hashes := prefixhash.ChainFrom(make([]uint64, 0, end), q.Salt.Routing, q.Tokens[:end*bs], bs)
	holders, err := s.cfg.Index.Holders(ctx, *s.peers.Load(), fleet.HolderQuery{Self: *s.self.Load(), KVIdentity: s.ident, BlockSize: bs},
		hashes, q.From+s.cfg.MinBlocks)
	if err != nil {
		s.cfg.Metrics.fail(ReasonRedis)
		s.log.Debug("peer lookup failed", "err", err)
		return nil, nil
	}
	if len(holders) == 0 {
		return nil, nil
	}
	peer := holders[0]
	want := min(peer.Match, end)
	c, first := s.join(hashes[want-1])
	if !first {
		select {
		case <-c.done:
			return c.blocks, nil
		case <-ctx.Done():
			return nil, nil
		}
	}
	defer s.leave(hashes[want-1], c)
	blocks, n, reason, err := s.fetchRun(ctx, peer, hashes[:want], q)
	took := time.Since(start)
	if err != nil && parent.Err() != nil {
		return nil, nil // the client left: not the peer's failure
	}
	if err != nil {
		s.log.Warn("fetching KV blocks from a peer failed; computing the prompt", "peer", peer.ID, "url", peer.URL,
			"reason", reason, "err", err, "took", took, "blocks_fetched", len(blocks))
	}
	s.cfg.Metrics.fetched(took, len(blocks), n, reason)
	if len(blocks) == 0 {
		return nil, nil
	}
	if err == nil {
		s.est.observe(n, took)
	}
	c.blocks = blocks
	s.log.Debug("fetched KV blocks from a peer", "peer", peer.ID, "blocks", len(blocks), "bytes", n, "took", took)
	return blocks, nil
}

// fetchRun fetches blocks q.From..len(hashes) from peer p in requests of at most AnswerBytes
// each, until the peer has no more. It returns the blocks verified (a failure after some keeps
// them) and the bytes read, and the failure's reason and error if one ended it early.
func (s *Source) fetchRun(ctx context.Context, p fleet.Holder, hashes []uint64, q *engine.Lookup) ([]kvfile.Block, int64, string, error) {
	per := int(max(1, s.cfg.AnswerBytes/max(s.blockBytes, 1)))
	var all []kvfile.Block
	var total int64
	for from := q.From; from < len(hashes); {
		to := min(len(hashes), from+per)
		blocks, n, reason, err := s.fetch(ctx, p, hashes[:to], q, from)
		total += n
		if err != nil {
			if len(all) > 0 && reason == ReasonStatus { // evicted since: what came is good
				return all, total, "", nil
			}
			return all, total, reason, err
		}
		all = append(all, blocks...)
		if from += len(blocks); from < to {
			break // the peer holds no more (or answers less per request)
		}
	}
	return all, total, "", nil
}

func (s *Source) join(last uint64) (*call, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.inflight[last]; ok {
		return c, false
	}
	c := &call{done: make(chan struct{})}
	s.inflight[last] = c
	return c, true
}

func (s *Source) leave(last uint64, c *call) {
	s.mu.Lock()
	delete(s.inflight, last)
	s.mu.Unlock()
	close(c.done)
}

// fetch asks peer p for blocks from..len(hashes) of q and reads and verifies the answer. It
// returns the blocks and the bytes read, or the failure's reason.
func (s *Source) fetch(ctx context.Context, p fleet.Holder, hashes []uint64, q *engine.Lookup, from int) ([]kvfile.Block, int64, string, error) {
	bs := s.cfg.Layout.BlockSize
	want := len(hashes)
	req := blocksRequest{KVIdentity: s.ident, BlockSize: bs, Tokens: q.Tokens[:want*bs], From: from,
		Hashes: make([]string, len(hashes))}
	for i, x := range hashes {
		req.Hashes[i] = fmt.Sprintf("%016x", x)
	}
	req.encodeSalt(q.Salt)
	body, _ := json.Marshal(req) // plain fields: cannot fail
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(p.URL, "/")+"/kv/blocks", bytes.NewReader(body))
	if err != nil {
		return nil, 0, ReasonDown, err
	}
	hr.Header.Set("Content-Type", "application/json")
	if s.cfg.APIKey != "" {
		hr.Header.Set("Authorization", "Bearer "+s.cfg.APIKey)
	}
	resp, err := s.cfg.Client.Do(hr)
	if err != nil {
		return nil, 0, netReason(ctx, err), err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		reason := ReasonStatus
		if resp.StatusCode == http.StatusConflict {
			reason = ReasonIdentity
		}
		return nil, 0, reason, fmt.Errorf("peer answered %s: %s", resp.Status, strings.TrimSpace(string(msg)))
	}
	if ct := resp.Header.Get("Content-Type"); ct != ContentType {
		return nil, 0, ReasonCorrupt, fmt.Errorf("peer answered Content-Type %q, want %s", ct, ContentType)
	}
	nb := want - from
	limit := 4096 + int64(len(s.cfg.Layout.Layers))*8 + int64(nb)*(80+8*int64(bs)+s.blockBytes)
	if resp.ContentLength > limit {
		return nil, 0, ReasonTooLarge, fmt.Errorf("answer of %d bytes, at most %d expected", resp.ContentLength, limit)
	}
	cr := &iocount.Reader{R: io.LimitReader(resp.Body, limit)}
	blocks, err := kvfile.Decode(cr, s.cfg.Layout, nb)
	switch {
	case err == nil:
	case errors.Is(err, kvfile.ErrForeign):
		return nil, cr.N, ReasonIdentity, err
	case ctx.Err() != nil:
		return nil, cr.N, ReasonTimeout, err
	default:
		return nil, cr.N, ReasonCorrupt, err
	}
	// kvfile checked each record's checksum, positions and key = hash(parent, tokens); the
	// chain must be the prompt's: depth, tokens and key of every block.
	for i, b := range blocks {
		d := from + i
		if int(b.Depth) != d || len(b.Tokens) != bs {
			return nil, cr.N, ReasonCorrupt, fmt.Errorf("block %d: depth %d with %d tokens", d, b.Depth, len(b.Tokens))
		}
		if !slices.Equal(b.Tokens, q.Tokens[d*bs:(d+1)*bs]) || b.Key != q.Keys[d] {
			return nil, cr.N, ReasonTokens, fmt.Errorf("block %d holds other tokens than the prompt's", d)
		}
	}
	return blocks, cr.N, "", nil
}

// netReason classifies a transport error.
func netReason(ctx context.Context, err error) string {
	var ne net.Error
	if ctx.Err() != nil || (errors.As(err, &ne) && ne.Timeout()) {
		return ReasonTimeout
	}
	return ReasonDown
}

// Metrics returns the tier's metrics, for the node's Handler to count what it serves.
func (s *Source) Metrics() *Metrics { return s.cfg.Metrics }
