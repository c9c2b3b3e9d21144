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

	"ubatch/engine"
	"ubatch/fleet"
	"ubatch/internal/testredis"
	"ubatch/kvcache"
	"ubatch/kvfile"
	"ubatch/prefixhash"
	"ubatch/quant"
)

const bs = 4

var layout = kvfile.Layout{Model: kvfile.ModelID{1, 2, 3}, DType: quant.F32, BlockSize: bs, Layers: []kvfile.Layer{{KVHeads: 1, HeadDim: 8}, {KVHeads: 1, HeadDim: 8}}}

// memCache is a node's cache of whole blocks for the serving side, K/V bytes derived from the
// tokens so that a test can tell blocks apart and check what arrived.
type memCache struct {
	mu   sync.Mutex
	held map[kvcache.Key]kvfile.Block
	edit func(*kvfile.Block) // alters what is exported, when set
}

func kvData(toks []int32) []byte {
	d := make([]byte, int64(len(toks))*layout.CellBytes())
	for i := range d {
		d[i] = byte(int(toks[i%len(toks)])*7 + i)
	}
	return d
}

func blocksOf(toks []int32) []kvfile.Block { return saltedBlocksOf(kvcache.Salt{}, toks) }

// saltedBlocksOf is blocksOf for a sequence salted salt.
func saltedBlocksOf(salt kvcache.Salt, toks []int32) []kvfile.Block {
	var out []kvfile.Block
	parent := salt.Key
	for i, k := range kvcache.ChainKeysFrom(nil, salt.Key, toks, bs) {
		t := slices.Clone(toks[i*bs : (i+1)*bs])
		pos := make([]int32, bs)
		for j := range pos {
			pos[j] = int32(i*bs + j)
		}
		out = append(out, kvfile.Block{Key: k, Parent: parent, Depth: int32(i), Tokens: t, Pos: pos, Data: kvData(t)})
		parent = k
	}
	return out
}

func newMemCache(salt kvcache.Salt, toks []int32) *memCache {
	m := &memCache{held: map[kvcache.Key]kvfile.Block{}}
	for _, b := range saltedBlocksOf(salt, toks) {
		m.held[b.Key] = b
	}
	return m
}

func (m *memCache) ExportBlocks(ctx context.Context, salt kvcache.Salt, toks []int32, max int) ([]kvfile.Block, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []kvfile.Block
	for _, k := range kvcache.ChainKeysFrom(nil, salt.Key, toks, bs) {
		b, ok := m.held[k]
		if !ok || len(out) == max {
			break
		}
		if m.edit != nil {
			b.Data = slices.Clone(b.Data)
			m.edit(&b)
		}
		out = append(out, b)
	}
	return out, nil
}

func tokens(n int, base int32) []int32 {
	s := make([]int32, n)
	for i := range s {
		s[i] = base + int32(i)
	}
	return s
}

// publish lists node id in Redis as fleet.Publisher does, holding the blocks of holds.
func publish(t *testing.T, rs *testredis.Server, id, url, ident string, holds []int32) {
	publishSalted(t, rs, id, url, ident, kvcache.Salt{}, holds)
}

// publishSalted is publish for blocks of salt.
func publishSalted(t *testing.T, rs *testredis.Server, id, url, ident string, salt kvcache.Salt, holds []int32) {
	c := rs.Client()
	ctx := context.Background()
	st, _ := json.Marshal(fleet.Status{ID: id, URL: url, BlockSize: bs, KVIdentity: ident})
	c.SAdd(ctx, "test:nodes", id)
	c.Set(ctx, "test:node:"+id, st, 0)
	for _, h := range prefixhash.ChainFrom(nil, salt.Routing, holds, bs) {
		c.SAdd(ctx, "test:node:"+id+":blocks", fmt.Sprintf("%016x", h))
	}
}

type pair struct {
	a      *memCache
	srv    *httptest.Server
	src    *Source
	m      *Metrics
	served *Metrics
}

// newPair runs node A's handler (behind wrap, if set) over a cache holding prompt, and makes
// node B's peer tier over a fleet in which A holds it.
func newPair(t *testing.T, prompt []int32, wrap func(http.Handler) http.Handler) *pair {
	return newSaltedPair(t, kvcache.Salt{}, prompt, wrap)
}

// newSaltedPair is newPair for a node A that holds prompt's blocks of salt.
func newSaltedPair(t *testing.T, salt kvcache.Salt, prompt []int32, wrap func(http.Handler) http.Handler) *pair {
	rs := testredis.Start(t)
	p := &pair{a: newMemCache(salt, prompt), m: NewMetrics(prometheus.NewRegistry()), served: NewMetrics(prometheus.NewRegistry())}
	var h http.Handler = Handler(HandlerConfig{Cache: p.a, Layout: layout, Metrics: p.served, Logger: slog.New(slog.DiscardHandler)})
	if wrap != nil {
		h = wrap(h)
	}
	p.srv = httptest.NewServer(h)
	t.Cleanup(p.srv.Close)
	publishSalted(t, rs, "a", p.srv.URL, Identity(layout), salt, prompt)
	publish(t, rs, "b", "http://127.0.0.1:1", Identity(layout), nil)
	var err error
	p.src, err = NewSource(SourceConfig{Index: fleet.NewIndex(rs.Client(), "test"), Self: "b", Layout: layout,
		Timeout: 500 * time.Millisecond, Metrics: p.m, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	p.src.refresh(context.Background())
	return p
}

// lookup is what the engine asks about prompt when RAM holds its first from blocks.
func lookup(prompt []int32, from int) *engine.Lookup {
	toks := prompt[:len(prompt)-1]
	return &engine.Lookup{Tokens: toks, Keys: kvcache.ChainKeys(nil, toks, bs), From: from, BlockSize: bs}
}

func TestFetchBringsThePeersBlocks(t *testing.T) {
	prompt := tokens(10*bs+3, 100)
	p := newPair(t, prompt, nil)
	q := lookup(prompt, 2) // B holds the first two blocks already: only the rest travels
	h := p.src.Probe(q)
	if h.Blocks != 8 || h.Cells != 8*bs || h.Bytes != 8*bs*layout.CellBytes() {
		t.Fatalf("Probe = %+v, want the 8 missing blocks", h)
	}
	got, err := p.src.Fetch(context.Background(), q, h)
	if err != nil || len(got) != 8 {
		t.Fatalf("Fetch = %d blocks, %v; want 8", len(got), err)
	}
	for i, b := range got {
		d := 2 + i
		if int(b.Depth) != d || !bytes.Equal(b.Data, kvData(prompt[d*bs:(d+1)*bs])) || b.Key != q.Keys[d] {
			t.Fatalf("block %d: depth %d, data as computed %v", d, b.Depth, bytes.Equal(b.Data, kvData(prompt[d*bs:(d+1)*bs])))
		}
	}
	if v := testutil.ToFloat64(p.m.fetchedBlocks); v != 8 {
		t.Fatalf("%v blocks fetched, want 8", v)
	}
	if v := testutil.ToFloat64(p.served.servedBlocks); v != 8 {
		t.Fatalf("%v blocks served, want 8", v)
	}
	if v := testutil.ToFloat64(p.m.fetchedBytes); v != float64(kvfile.Size(layout, got)) {
		t.Fatalf("%v bytes fetched, want the image's %d", v, kvfile.Size(layout, got))
	}
	if v := testutil.ToFloat64(p.served.servedBytes); v != float64(kvfile.Size(layout, got)) {
		t.Fatalf("%v bytes served, want %d", v, kvfile.Size(layout, got))
	}
	// A prompt that parts from A's after 5 blocks: A sends those it holds.
	other := append(slices.Clone(prompt[:5*bs]), tokens(3*bs, 9000)...)
	q = lookup(other, 0)
	if got, _ := p.src.Fetch(context.Background(), q, p.src.Probe(q)); len(got) != 5 {
		t.Fatalf("fetched %d blocks of a prompt sharing 5 with the peer's", len(got))
	}
	// Nobody holds this one: nothing, and no failure.
	q = lookup(tokens(4*bs, 5000), 0)
	if got, err := p.src.Fetch(context.Background(), q, p.src.Probe(q)); len(got) != 0 || err != nil {
		t.Fatalf("fetched %d blocks (%v) that no peer holds", len(got), err)
	}
	if v := testutil.ToFloat64(p.m.fetches); v != 2 {
		t.Fatalf("%v fetches, want 2", v)
	}
}

// TestFetchKeepsSaltsApart: a peer holding a prompt's blocks of one salt gives them to a fetch
// of that salt (the routing hashes, the request's salt and the keys all chain from it) and none
// to a fetch of another salt or of none.
func TestFetchKeepsSaltsApart(t *testing.T) {
	prompt := tokens(6*bs+3, 700)
	t1 := kvcache.NewSalt("tenant-1")
	p := newSaltedPair(t, t1, prompt, nil)
	tests := []struct {
		name string
		salt kvcache.Salt
		want int
	}{
		{name: "same salt", salt: t1, want: 6},
		{name: "another salt", salt: kvcache.NewSalt("tenant-2")},
		{name: "no salt", salt: kvcache.Salt{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			toks := prompt[:len(prompt)-1]
			q := &engine.Lookup{Tokens: toks, Keys: kvcache.ChainKeysFrom(nil, tc.salt.Key, toks, bs), BlockSize: bs, Salt: tc.salt}
			got, err := p.src.Fetch(context.Background(), q, p.src.Probe(q))
			if err != nil || len(got) != tc.want {
				t.Fatalf("Fetch = %d blocks, %v; want %d", len(got), err, tc.want)
			}
			for i, b := range got {
				if b.Key != q.Keys[i] {
					t.Fatalf("block %d is not the prompt's of its salt", i)
				}
			}
		})
	}
	// A request whose hashes are the salt's but which names no salt is refused: the hashes are
	// checked against the chain from the salt it names.
	hs := prefixhash.ChainFrom(nil, t1.Routing, prompt[:2*bs], bs)
	body, _ := json.Marshal(blocksRequest{KVIdentity: Identity(layout), BlockSize: bs, Tokens: prompt[:2*bs],
		Hashes: []string{fmt.Sprintf("%016x", hs[0]), fmt.Sprintf("%016x", hs[1])}})
	resp, err := http.Post(p.srv.URL, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("salted hashes without the salt: %d, want 400", resp.StatusCode)
	}
}

func TestProbeNeedsAPeer(t *testing.T) {
	prompt := tokens(4*bs, 1)
	p := newPair(t, prompt, nil)
	p.src.peers.Store(&[]fleet.Status{})
	if h := p.src.Probe(lookup(prompt, 0)); h.Blocks != 0 {
		t.Fatalf("Probe without peers = %+v", h)
	}
}

// TestFetchFailuresFallBack: whatever goes wrong with the peer, Fetch brings nothing, counts
// the reason, and returns no error (the engine computes the prompt).
func TestFetchFailuresFallBack(t *testing.T) {
	prompt := tokens(6*bs+1, 50)
	// corrupt flips one byte of the answer at offset at from its end.
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
	otherModel := layout
	otherModel.Model = kvfile.ModelID{9}
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
		{"another identity", func(http.Handler) http.Handler {
			return Handler(HandlerConfig{Cache: newMemCache(kvcache.Salt{}, prompt), Layout: otherModel, Logger: slog.New(slog.DiscardHandler)})
		}, nil, ReasonIdentity},
		{"image of another model", func(http.Handler) http.Handler {
			// A peer that answers with a valid image of another model under our identity.
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", ContentType)
				kvfile.Encode(w, otherModel, blocksOf(prompt)[:2])
			})
		}, nil, ReasonIdentity},
		{"bad checksum", corrupt(10), nil, ReasonCorrupt},
		{"truncated", func(h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, r)
				w.Header().Set("Content-Type", ContentType)
				w.Write(rec.Body.Bytes()[:rec.Body.Len()/2])
			})
		}, nil, ReasonCorrupt},
		{"evicted meanwhile", nil, func(p *pair) { clear(p.a.held) }, ReasonStatus},
		{"other tokens", nil, func(p *pair) {
			p.a.edit = func(b *kvfile.Block) {
				b.Tokens = slices.Clone(b.Tokens)
				b.Tokens[0]++
				b.Key = kvcache.ChainKey(b.Parent, b.Tokens) // a valid record, of another prompt
			}
		}, ReasonTokens},
		{"not a block answer", func(h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", ContentType)
				io.WriteString(w, strings.Repeat("x", 100))
			})
		}, nil, ReasonCorrupt},
		{"too large", func(h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", ContentType)
				w.Header().Set("Content-Length", "100000000")
				w.WriteHeader(200)
			})
		}, nil, ReasonTooLarge},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, prompt, tc.wrap)
			if tc.setup != nil {
				tc.setup(p)
			}
			q := lookup(prompt, 0)
			if got, err := p.src.Fetch(context.Background(), q, p.src.Probe(q)); len(got) != 0 || err != nil {
				t.Fatalf("brought %d blocks, err %v", len(got), err)
			}
			if v := testutil.ToFloat64(p.m.failures.WithLabelValues(tc.reason)); v != 1 {
				t.Fatalf("failures{reason=%q} = %v, want 1", tc.reason, v)
			}
		})
	}
}

func TestConcurrentFetchesOfOnePrefixShareOne(t *testing.T) {
	prompt := tokens(6*bs+1, 70)
	var asked sync.WaitGroup
	asked.Add(1)
	release := make(chan struct{})
	var requests int
	var mu sync.Mutex
	p := newPair(t, prompt, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			requests++
			mu.Unlock()
			asked.Done()
			<-release
			h.ServeHTTP(w, r)
		})
	})
	q := lookup(prompt, 0)
	results := make(chan int, 2)
	go func() { b, _ := p.src.Fetch(context.Background(), q, p.src.Probe(q)); results <- len(b) }()
	asked.Wait() // the first fetch is at the peer
	go func() { b, _ := p.src.Fetch(context.Background(), q, p.src.Probe(q)); results <- len(b) }()
	time.Sleep(50 * time.Millisecond) // the second joins it (or, were it not shared, asks the peer: counted below)
	close(release)
	if a, b := <-results, <-results; a != 6 || b != 6 {
		t.Fatalf("fetches brought %d and %d blocks, want 6 each", a, b)
	}
	if requests != 1 {
		t.Fatalf("%d requests reached the peer, want 1", requests)
	}
}

func TestHandlerRejectsBadRequests(t *testing.T) {
	toks := tokens(3*bs, 9)
	srv := httptest.NewServer(Handler(HandlerConfig{Cache: newMemCache(kvcache.Salt{}, toks), Layout: layout, MaxBlocks: 4, Logger: slog.New(slog.DiscardHandler)}))
	defer srv.Close()
	hashes := func(t []int32) []string {
		var out []string
		for _, h := range prefixhash.Chain(nil, t, bs) {
			out = append(out, fmt.Sprintf("%016x", h))
		}
		return out
	}
	good := blocksRequest{KVIdentity: Identity(layout), BlockSize: bs, Tokens: toks, Hashes: hashes(toks)}
	with := func(f func(*blocksRequest)) string {
		r := good
		r.Hashes = slices.Clone(r.Hashes)
		f(&r)
		b, _ := json.Marshal(r)
		return string(b)
	}
	tests := []struct {
		name, body string
		status     int
		code       string
		blocks     int
	}{
		{"good", with(func(*blocksRequest) {}), 200, "", 3},
		{"from the second", with(func(r *blocksRequest) { r.From = 1 }), 200, "", 2},
		{"not JSON", "{", 400, "invalid_json", 0},
		{"another identity", with(func(r *blocksRequest) { r.KVIdentity = "m2" }), 409, "kv_identity_mismatch", 0},
		{"another block size", with(func(r *blocksRequest) { r.BlockSize = 8 }), 409, "kv_identity_mismatch", 0},
		{"no hashes", with(func(r *blocksRequest) { r.Hashes, r.Tokens = nil, nil }), 400, "invalid_hashes", 0},
		{"too many", with(func(r *blocksRequest) { r.Tokens = tokens(5*bs, 9); r.Hashes = hashes(r.Tokens) }), 400, "invalid_hashes", 0},
		{"tokens short", with(func(r *blocksRequest) { r.Tokens = r.Tokens[:5] }), 400, "invalid_tokens", 0},
		{"hash of other tokens", with(func(r *blocksRequest) { r.Hashes[1] = hashes(tokens(2*bs, 1))[1] }), 400, "invalid_hashes", 0},
		{"hash not hex", with(func(r *blocksRequest) { r.Hashes[0] = "zz" }), 400, "invalid_hashes", 0},
		{"from past the end", with(func(r *blocksRequest) { r.From = 3 }), 400, "invalid_from", 0},
		{"negative from", with(func(r *blocksRequest) { r.From = -1 }), 400, "invalid_from", 0},
		{"not held", with(func(r *blocksRequest) { r.Tokens = tokens(2*bs, 500); r.Hashes = hashes(r.Tokens) }), 404, "blocks_not_found", 0},
		{"huge body", `{"tokens":[` + strings.Repeat("1,", 100000) + `1]}`, 413, "body_too_large", 0},
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
			if tc.status == 200 {
				blocks, err := kvfile.Decode(bytes.NewReader(body), layout, 0)
				if err != nil || len(blocks) != tc.blocks {
					t.Fatalf("answer: %d blocks, %v; want %d", len(blocks), err, tc.blocks)
				}
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

// TestFetchInSeveralRequests: a fetch larger than one answer asks again from where the last
// answer ended; a peer that evicted the rest meanwhile leaves the blocks that came.
func TestFetchInSeveralRequests(t *testing.T) {
	prompt := tokens(10*bs+1, 300)
	var requests int
	var mu sync.Mutex
	evictAfter := 0 // answer 404 from this request on (0: never)
	p := newPair(t, prompt, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			requests++
			n := requests
			mu.Unlock()
			if evictAfter > 0 && n >= evictAfter {
				http.Error(w, `{"error":{"code":"blocks_not_found"}}`, http.StatusNotFound)
				return
			}
			h.ServeHTTP(w, r)
		})
	})
	p.src.cfg.AnswerBytes = 3 * bs * layout.CellBytes() // three blocks per answer
	q := lookup(prompt, 0)
	got, _ := p.src.Fetch(context.Background(), q, p.src.Probe(q))
	if len(got) != 10 || requests != 4 {
		t.Fatalf("%d blocks in %d requests, want 10 in 4", len(got), requests)
	}
	for i, b := range got {
		if int(b.Depth) != i || b.Key != q.Keys[i] {
			t.Fatalf("block %d: depth %d", i, b.Depth)
		}
	}
	requests, evictAfter = 0, 3
	got, _ = p.src.Fetch(context.Background(), q, p.src.Probe(q))
	if len(got) != 6 {
		t.Fatalf("%d blocks when the peer evicted the rest after two answers, want 6", len(got))
	}
	if v := testutil.ToFloat64(p.m.failures.WithLabelValues(ReasonStatus)); v != 0 {
		t.Fatalf("a partial fetch counted %v failures", v)
	}
	if v := testutil.ToFloat64(p.m.fetchedBlocks); v != 16 {
		t.Fatalf("%v blocks fetched in all, want 16", v)
	}
}
