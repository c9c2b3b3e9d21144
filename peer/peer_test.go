package peer

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"ubatch/fleet"
	"ubatch/internal/testredis"
	"ubatch/prefixhash"
)

const bs = 4

// memLocal is a cache of whole blocks keyed by their routing hash, with K/V bytes derived from
// the tokens, so that a test can tell blocks apart and check what arrived.
type memLocal struct {
	ident string
	mu    sync.Mutex
	held  map[uint64]Block
	cost  time.Duration // PromptCost per token; 0 = not fitted
}

const blockBytes = 64

func newMemLocal(ident string) *memLocal { return &memLocal{ident: ident, held: map[uint64]Block{}} }

func kvData(toks []int32) []byte {
	d := make([]byte, blockBytes)
	for i := range d {
		d[i] = byte(int(toks[i%len(toks)])*7 + i)
	}
	return d
}

// fill makes the cache hold the full blocks of toks.
func (m *memLocal) fill(toks []int32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, h := range prefixhash.Chain(nil, toks, bs) {
		b := slices.Clone(toks[i*bs : (i+1)*bs])
		m.held[h] = Block{Depth: int32(i), Tokens: b, Data: kvData(b)}
	}
}

func (m *memLocal) KVIdentity() string { return m.ident }
func (m *memLocal) BlockSize() int     { return bs }
func (m *memLocal) BlockBytes() int64  { return blockBytes }

func (m *memLocal) leading(toks []int32) []Block {
	var out []Block
	for _, h := range prefixhash.Chain(nil, toks, bs) {
		b, ok := m.held[h]
		if !ok {
			break
		}
		out = append(out, b)
	}
	return out
}

func (m *memLocal) Cached(ctx context.Context, prompt []int32) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.leading(prompt)) * bs, nil
}

func (m *memLocal) Export(ctx context.Context, toks []int32, max int) ([]Block, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b := m.leading(toks)
	return b[:min(len(b), max)], nil
}

func (m *memLocal) Import(ctx context.Context, prompt []int32, blocks []Block) (int, error) {
	m.mu.Lock()
	chain := prefixhash.Chain(nil, prompt, bs)
	for _, b := range blocks {
		m.held[chain[b.Depth]] = b
	}
	m.mu.Unlock()
	return m.Cached(ctx, prompt)
}

func (m *memLocal) PromptCost(cached, n int) (time.Duration, bool) {
	return m.cost * time.Duration(n), m.cost > 0
}

func tokens(n int, base int32) []int32 {
	s := make([]int32, n)
	for i := range s {
		s[i] = base + int32(i)
	}
	return s
}

// fleetOf publishes nodes (id -> URL, identity, and the prompt whose blocks it holds) in Redis
// the way fleet.Publisher lays them out.
type fleetOf struct {
	t  *testing.T
	rs *testredis.Server
}

func (f fleetOf) publish(id, url, ident string, holds []int32) {
	c := f.rs.Client()
	ctx := context.Background()
	st, _ := json.Marshal(fleet.Status{ID: id, URL: url, BlockSize: bs, KVIdentity: ident})
	c.SAdd(ctx, "test:nodes", id)
	c.Set(ctx, "test:node:"+id, st, 0)
	for _, h := range prefixhash.Chain(nil, holds, bs) {
		c.SAdd(ctx, "test:node:"+id+":blocks", fmt.Sprintf("%016x", h))
	}
}

type pair struct {
	a, b    *memLocal
	srv     *httptest.Server
	fetcher *Fetcher
	m       *Metrics
	served  *Metrics
}

// newPair runs node A's handler (behind wrap, if set) and makes node B's fetcher over a fleet
// in which A holds prompt.
func newPair(t *testing.T, prompt []int32, wrap func(http.Handler) http.Handler) *pair {
	rs := testredis.Start(t)
	p := &pair{a: newMemLocal("m1"), b: newMemLocal("m1"), m: NewMetrics(prometheus.NewRegistry()),
		served: NewMetrics(prometheus.NewRegistry())}
	p.a.fill(prompt)
	var h http.Handler = Handler(HandlerConfig{Local: p.a, Metrics: p.served, Logger: slog.New(slog.DiscardHandler)})
	if wrap != nil {
		h = wrap(h)
	}
	p.srv = httptest.NewServer(h)
	t.Cleanup(p.srv.Close)
	fleetOf{t, rs}.publish("a", p.srv.URL, "m1", prompt)
	fleetOf{t, rs}.publish("b", "http://127.0.0.1:1", "m1", nil)
	var err error
	p.fetcher, err = NewFetcher(FetcherConfig{Local: p.b, Index: fleet.NewIndex(rs.Client(), "test"), Self: "b",
		Timeout: 500 * time.Millisecond, Metrics: p.m, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPrefetchBringsThePeersBlocks(t *testing.T) {
	prompt := tokens(10*bs+3, 100)
	p := newPair(t, prompt, nil)
	p.b.fill(prompt[:2*bs]) // B holds the first two blocks already: only the rest travels
	got := p.fetcher.Prefetch(context.Background(), prompt)
	if got != 8*bs {
		t.Fatalf("Prefetch brought %d tokens, want %d", got, 8*bs)
	}
	for i, h := range prefixhash.Chain(nil, prompt, bs) {
		b, ok := p.b.held[h]
		if !ok || b.Depth != int32(i) || !bytes.Equal(b.Data, kvData(prompt[i*bs:(i+1)*bs])) {
			t.Fatalf("block %d: held %v, depth %d, data as computed: %v", i, ok, b.Depth, bytes.Equal(b.Data, kvData(prompt[i*bs:(i+1)*bs])))
		}
	}
	if v := testutil.ToFloat64(p.m.fetchedBlocks); v != 8 {
		t.Fatalf("%v blocks fetched, want 8", v)
	}
	if v := testutil.ToFloat64(p.served.servedBlocks); v != 8 {
		t.Fatalf("%v blocks served, want 8", v)
	}
	if v := testutil.ToFloat64(p.m.importedTokens); v != 32 {
		t.Fatalf("%v tokens imported, want 32", v)
	}
	if n := testutil.CollectAndCount(p.m.latency); n != 1 {
		t.Fatalf("latency histogram has %d series", n)
	}
	// Now B holds it all: nothing more to fetch.
	if got := p.fetcher.Prefetch(context.Background(), prompt); got != 0 {
		t.Fatalf("a second Prefetch brought %d tokens", got)
	}
	if v := testutil.ToFloat64(p.m.fetches); v != 1 {
		t.Fatalf("%v fetches, want 1", v)
	}
}

func TestPrefetchSkipsWhenRecomputingIsFaster(t *testing.T) {
	prompt := tokens(10*bs+1, 7)
	p := newPair(t, prompt, nil)
	p.b.cost = time.Nanosecond // far below any transfer
	if got := p.fetcher.Prefetch(context.Background(), prompt); got != 0 {
		t.Fatalf("fetched %d tokens although recomputing was cheaper", got)
	}
	if v := testutil.ToFloat64(p.m.skipped.WithLabelValues("cost")); v != 1 {
		t.Fatalf("skipped %v, want 1", v)
	}
	p.b.cost = time.Second // far above
	if got := p.fetcher.Prefetch(context.Background(), prompt); got != 10*bs {
		t.Fatalf("fetched %d tokens, want %d", got, 10*bs)
	}
}

// TestPrefetchFailuresFallBack: whatever goes wrong with the peer, Prefetch brings nothing,
// counts the reason and leaves the cache as it was.
func TestPrefetchFailuresFallBack(t *testing.T) {
	prompt := tokens(6*bs+1, 50)
	// corrupt flips one byte of the answer past its header.
	corrupt := func(at int) func(http.Handler) http.Handler {
		return func(h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, r)
				body := rec.Body.Bytes()
				body[len(body)-at] ^= 0x40
				w.Header().Set("Content-Type", rec.Header().Get("Content-Type"))
				w.WriteHeader(rec.Code)
				w.Write(body)
			})
		}
	}
	tests := []struct {
		name   string
		wrap   func(http.Handler) http.Handler
		setup  func(p *pair)
		reason string
	}{
		{"peer down", nil, func(p *pair) { p.srv.Close() }, ReasonDown},
		{"peer slow", func(h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				select {
				case <-time.After(2 * time.Second):
				case <-r.Context().Done():
				}
				h.ServeHTTP(w, r)
			})
		}, nil, ReasonTimeout},
		{"another model", nil, func(p *pair) { p.a.ident = "m2" }, ReasonIdentity},
		{"bad checksum", corrupt(10), nil, ReasonCorrupt},
		{"evicted meanwhile", nil, func(p *pair) { clear(p.a.held) }, ReasonStatus},
		{"other tokens", nil, func(p *pair) {
			for h, b := range p.a.held {
				b.Tokens = slices.Clone(b.Tokens)
				b.Tokens[0]++
				p.a.held[h] = b
			}
		}, ReasonTokens},
		{"not a block answer", func(h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", ContentType)
				io.WriteString(w, strings.Repeat("x", 100))
			})
		}, nil, ReasonCorrupt},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, prompt, tc.wrap)
			if tc.setup != nil {
				tc.setup(p)
			}
			if got := p.fetcher.Prefetch(context.Background(), prompt); got != 0 {
				t.Fatalf("brought %d tokens", got)
			}
			if len(p.b.held) != 0 {
				t.Fatalf("the cache took %d blocks", len(p.b.held))
			}
			if v := testutil.ToFloat64(p.m.failures.WithLabelValues(tc.reason)); v != 1 {
				t.Fatalf("failures{reason=%q} = %v, want 1", tc.reason, v)
			}
		})
	}
}

func TestHandlerRejectsBadRequests(t *testing.T) {
	a := newMemLocal("m1")
	toks := tokens(3*bs, 9)
	a.fill(toks)
	srv := httptest.NewServer(Handler(HandlerConfig{Local: a, MaxBlocks: 4, Logger: slog.New(slog.DiscardHandler)}))
	defer srv.Close()
	hashes := func(t []int32) []string {
		var out []string
		for _, h := range prefixhash.Chain(nil, t, bs) {
			out = append(out, fmt.Sprintf("%016x", h))
		}
		return out
	}
	good := blocksRequest{KVIdentity: "m1", BlockSize: bs, Tokens: toks, Hashes: hashes(toks)}
	with := func(f func(*blocksRequest)) string {
		r := good
		f(&r)
		b, _ := json.Marshal(r)
		return string(b)
	}
	tests := []struct {
		name, body string
		status     int
		code       string
	}{
		{"good", with(func(*blocksRequest) {}), 200, ""},
		{"from the second", with(func(r *blocksRequest) { r.From = 1 }), 200, ""},
		{"not JSON", "{", 400, "invalid_json"},
		{"another identity", with(func(r *blocksRequest) { r.KVIdentity = "m2" }), 409, "kv_identity_mismatch"},
		{"another block size", with(func(r *blocksRequest) { r.BlockSize = 8 }), 409, "kv_identity_mismatch"},
		{"no hashes", with(func(r *blocksRequest) { r.Hashes, r.Tokens = nil, nil }), 400, "invalid_hashes"},
		{"too many", with(func(r *blocksRequest) { r.Tokens = tokens(5*bs, 9); r.Hashes = hashes(r.Tokens) }), 400, "invalid_hashes"},
		{"tokens short", with(func(r *blocksRequest) { r.Tokens = r.Tokens[:5] }), 400, "invalid_tokens"},
		{"hash of other tokens", with(func(r *blocksRequest) { r.Hashes[1] = hashes(tokens(2*bs, 1))[1] }), 400, "invalid_hashes"},
		{"hash not hex", with(func(r *blocksRequest) { r.Hashes = slices.Clone(r.Hashes); r.Hashes[0] = "zz" }), 400, "invalid_hashes"},
		{"from past the end", with(func(r *blocksRequest) { r.From = 3 }), 400, "invalid_from"},
		{"not held", with(func(r *blocksRequest) { r.Tokens = tokens(2*bs, 500); r.Hashes = hashes(r.Tokens) }), 404, "blocks_not_found"},
		{"huge body", `{"tokens":[` + strings.Repeat("1,", 100000) + `1]}`, 413, "body_too_large"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := http.Post(srv.URL, "application/json", strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d (%s), want %d", resp.StatusCode, body, tc.status)
			}
			if tc.code != "" && !strings.Contains(string(body), `"code":"`+tc.code+`"`) {
				t.Fatalf("body %s, want code %s", body, tc.code)
			}
		})
	}
}

func TestDecide(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name     string
		est, rec time.Duration
		known    bool
		fetch    bool
		deadline time.Duration
	}{
		{"no cost model yet", 10 * ms, 0, false, true, time.Second},
		{"transfer faster", 10 * ms, 100 * ms, true, true, 100 * ms},
		{"transfer slower", 100 * ms, 10 * ms, true, false, 0},
		{"deadline at most the timeout", 10 * ms, 5 * time.Second, true, true, time.Second},
		{"deadline twice the estimate", 40 * ms, 50 * ms, true, true, 80 * ms},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, d := decide(tc.est, tc.rec, tc.known, time.Second)
			if f != tc.fetch || d != tc.deadline {
				t.Fatalf("decide = %v, %v; want %v, %v", f, d, tc.fetch, tc.deadline)
			}
		})
	}
}

func TestEstimatorLearns(t *testing.T) {
	e := newEstimator()
	for range 20 {
		e.observe(1<<10, 200*time.Microsecond) // small: latency
		e.observe(10<<20, 10*time.Millisecond) // ~1 GB/s
	}
	got := e.estimate(100 << 20)
	if got < 80*time.Millisecond || got > 130*time.Millisecond {
		t.Fatalf("100 MiB estimated at %v after learning ~1 GB/s", got)
	}
}
