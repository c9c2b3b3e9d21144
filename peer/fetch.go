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
	"strings"
	"sync"
	"time"

	"ubatch/fleet"
	"ubatch/prefixhash"
)

// FetcherConfig configures a Fetcher. Local, Index and Self are required.
type FetcherConfig struct {
	Local     Local
	Index     *fleet.Index
	Self      string // this node's fleet id: never its own peer
	APIKey    string // sent to peers as "Authorization: Bearer KEY" (the fleet shares one key)
	Timeout   time.Duration
	MaxBytes  int64 // most bytes of K/V in one fetch; 0 = DefaultMaxBytes
	MinBlocks int   // fewest missing blocks worth a fetch; 0 = 1
	// NodesTTL is how long the fleet's node list is reused between lookups (the blocks are
	// looked up afresh every time); 0 = 1 s.
	NodesTTL time.Duration
	Client   *http.Client // nil: one with a 1 s dial timeout
	Metrics  *Metrics
	Logger   *slog.Logger
}

// DefaultTimeout bounds a fetch when FetcherConfig.Timeout is 0.
const DefaultTimeout = 2 * time.Second

// Fetcher brings prompt prefixes that peers hold into the local cache. It is safe for
// concurrent use.
type Fetcher struct {
	cfg FetcherConfig
	est *estimator
	log *slog.Logger

	mu       sync.Mutex
	nodes    []fleet.Status
	nodesAt  time.Time
	inflight map[uint64]chan struct{} // fetches under way, by the last hash fetched
}

// NewFetcher checks cfg and makes a fetcher.
func NewFetcher(cfg FetcherConfig) (*Fetcher, error) {
	if cfg.Local == nil || cfg.Index == nil || cfg.Self == "" {
		return nil, errors.New("peer: FetcherConfig needs Local, Index and Self")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	cfg.MinBlocks = max(cfg.MinBlocks, 1)
	if cfg.NodesTTL <= 0 {
		cfg.NodesTTL = time.Second
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
	return &Fetcher{cfg: cfg, est: newEstimator(), log: cfg.Logger.With("component", "peer"),
		inflight: map[uint64]chan struct{}{}}, nil
}

// Prefetch brings into the local cache the leading full blocks of prompt that the best peer
// holds and the cache lacks, when the transfer is expected to take less than computing them,
// and returns the prompt tokens that came from the peer (0 when nothing did). Failures are
// logged and counted, never returned: the prompt is then computed as without peers. The
// prompt's last token is never fetched (its logits must be computed).
func (f *Fetcher) Prefetch(ctx context.Context, prompt []int32) int {
	l := f.cfg.Local
	bs := l.BlockSize()
	usable := (len(prompt) - 1) / bs
	if usable < f.cfg.MinBlocks {
		return 0
	}
	cached, err := l.Cached(ctx, prompt)
	if err != nil {
		return 0 // the engine is shutting down or the client left
	}
	have := cached / bs
	if usable-have < f.cfg.MinBlocks {
		return 0
	}
	hashes := prefixhash.Chain(make([]uint64, 0, usable), prompt[:usable*bs], bs)
	holders, err := f.holders(ctx, hashes, have+f.cfg.MinBlocks)
	if err != nil {
		f.cfg.Metrics.fail(ReasonRedis)
		f.log.Debug("peer lookup failed", "err", err)
		return 0
	}
	if len(holders) == 0 {
		return 0
	}
	h := holders[0]
	want := min(h.Match, have+int(f.cfg.MaxBytes/max(l.BlockBytes(), 1)))
	if want-have < f.cfg.MinBlocks {
		return 0
	}
	size := encodedBytes(want-have, bs, l.BlockBytes())
	est := f.est.estimate(size)
	rec, known := l.PromptCost(cached, (want-have)*bs)
	fetch, deadline := decide(est, rec, known, f.cfg.Timeout)
	if !fetch {
		f.cfg.Metrics.skip("cost")
		f.log.Debug("recomputing is faster than fetching", "peer", h.ID, "blocks", want-have, "fetch", est, "recompute", rec)
		return 0
	}
	done, first := f.join(hashes[want-1])
	if !first {
		// The same prefix is on its way for another request: wait for it, then let admission
		// find what it brought.
		select {
		case <-done:
		case <-ctx.Done():
		}
		return 0
	}
	defer f.leave(hashes[want-1], done)
	fctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	start := time.Now()
	blocks, n, reason, err := f.fetch(fctx, h, hashes[:want], prompt[:want*bs], have)
	took := time.Since(start)
	if err != nil {
		if ctx.Err() != nil { // the client left: not the peer's failure
			return 0
		}
		f.cfg.Metrics.fetched(took, 0, 0, reason)
		f.log.Warn("fetching KV blocks from a peer failed; computing the prompt", "peer", h.ID, "url", h.URL,
			"reason", reason, "err", err, "took", took)
		return 0
	}
	f.cfg.Metrics.fetched(took, len(blocks), n, "")
	f.est.observe(n, took)
	held, err := l.Import(ctx, prompt, blocks)
	if err != nil {
		f.cfg.Metrics.fail(ReasonImport)
		f.log.Warn("importing KV blocks from a peer failed; computing the prompt", "peer", h.ID, "err", err)
		return 0
	}
	got := max(0, min(held, want*bs)-cached)
	f.cfg.Metrics.imported(got)
	f.log.Debug("fetched KV blocks from a peer", "peer", h.ID, "blocks", len(blocks), "bytes", n, "took", took,
		"estimate", est, "recompute", rec, "tokens", got)
	return got
}

// holders looks the chain up in the fleet, with the node list cached for NodesTTL.
func (f *Fetcher) holders(ctx context.Context, hashes []uint64, min int) ([]fleet.Holder, error) {
	f.mu.Lock()
	nodes, at := f.nodes, f.nodesAt
	f.mu.Unlock()
	if time.Since(at) > f.cfg.NodesTTL {
		var err error
		if nodes, _, err = f.cfg.Index.Nodes(ctx); err != nil {
			return nil, err
		}
		f.mu.Lock()
		f.nodes, f.nodesAt = nodes, time.Now()
		f.mu.Unlock()
	}
	l := f.cfg.Local
	return f.cfg.Index.Holders(ctx, nodes, fleet.HolderQuery{Self: f.cfg.Self, KVIdentity: l.KVIdentity(), BlockSize: l.BlockSize()},
		hashes, min)
}

// join registers a fetch of the prefix ending with hash last; first is false when one is
// under way already (done is closed when it ends).
func (f *Fetcher) join(last uint64) (done chan struct{}, first bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ch, ok := f.inflight[last]; ok {
		return ch, false
	}
	ch := make(chan struct{})
	f.inflight[last] = ch
	return ch, true
}

func (f *Fetcher) leave(last uint64, done chan struct{}) {
	f.mu.Lock()
	delete(f.inflight, last)
	f.mu.Unlock()
	close(done)
}

// fetch asks peer h for blocks from..len(hashes) of tokens and reads and verifies the answer.
// It returns the blocks and the bytes read, or the failure's reason.
func (f *Fetcher) fetch(ctx context.Context, h fleet.Holder, hashes []uint64, tokens []int32, from int) ([]Block, int64, string, error) {
	l := f.cfg.Local
	req := blocksRequest{KVIdentity: l.KVIdentity(), BlockSize: l.BlockSize(), Tokens: tokens, From: from,
		Hashes: make([]string, len(hashes))}
	for i, x := range hashes {
		req.Hashes[i] = fmt.Sprintf("%016x", x)
	}
	body, _ := json.Marshal(req) // plain fields: cannot fail
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(h.URL, "/")+"/kv/blocks", bytes.NewReader(body))
	if err != nil {
		return nil, 0, ReasonDown, err
	}
	hr.Header.Set("Content-Type", "application/json")
	if f.cfg.APIKey != "" {
		hr.Header.Set("Authorization", "Bearer "+f.cfg.APIKey)
	}
	resp, err := f.cfg.Client.Do(hr)
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
	limit := encodedBytes(len(hashes)-from, l.BlockSize(), l.BlockBytes()) + 16 + maxHeader
	if resp.ContentLength > limit {
		return nil, 0, ReasonTooLarge, fmt.Errorf("answer of %d bytes, at most %d expected", resp.ContentLength, limit)
	}
	cr := &countReader{r: io.LimitReader(resp.Body, limit)}
	blocks, err := readBlocks(cr, wireHeader{KVIdentity: l.KVIdentity(), BlockSize: l.BlockSize(), BlockBytes: l.BlockBytes()},
		tokens, from)
	switch {
	case err == nil:
		return blocks, cr.n, "", nil
	case errors.Is(err, errIdentity):
		return nil, cr.n, ReasonIdentity, err
	case errors.Is(err, errTokens):
		return nil, cr.n, ReasonTokens, err
	case ctx.Err() != nil:
		return nil, cr.n, ReasonTimeout, err
	}
	return nil, cr.n, ReasonCorrupt, err
}

// netReason classifies a transport error.
func netReason(ctx context.Context, err error) string {
	var ne net.Error
	if ctx.Err() != nil || (errors.As(err, &ne) && ne.Timeout()) {
		return ReasonTimeout
	}
	return ReasonDown
}

type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
