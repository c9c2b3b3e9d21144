package engine

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"ubatch/batch"
	"ubatch/kvcache"
	"ubatch/kvfile"
)

// KV tiers beyond RAM. A BlockSource (the disk, package kvdisk; a peer node) may hold blocks of
// a prompt's prefix the RAM cache lacks: when a waiting request's turn to be admitted comes, the
// engine probes the sources (in memory, on its goroutine), and when one holds more of the
// prefix and reading it is expected to be cheaper than computing it (the step cost model's
// prompt cost against the source's ReadCost), it fetches those blocks on a goroutine of its own
// while the request waits (others are admitted past it). The blocks then enter the RAM prefix
// cache (kvcache.Manager.Import: KVLoad store operations, applied in order before the next
// forward pass) and the request is admitted as usual, counting them as cached tokens. A
// BlockSink (the disk) receives the blocks the RAM cache evicts and, when the cost model says a
// read beats a recompute, a preempted sequence's blocks (swap-out, the seeds' n_kv_swap):
// their cells are read out by KVSave operations of the step that reuses them and handed to the
// sink after it, which writes them on a goroutine of its own and never blocks the step.

// BlockSource is a tier that may provide blocks of a prefix. Probe is called on the engine
// goroutine and must not do I/O; Fetch on a goroutine of the engine's, one at a time per
// request.
type BlockSource interface {
	// Name labels the tier in metrics ("disk", "peer").
	Name() string
	// Probe reports how much of q's prefix, from block q.From on, the source holds in a row:
	// full blocks by Key, then possibly a partial block whose cells continue q.Tokens.
	Probe(q *Lookup) Hit
	// Fetch reads what Probe found: the blocks from q.From on, in chain order (a shorter run
	// when some could not be read, the reason logged by the source). Each block's tokens are
	// checked against q.Tokens before use.
	Fetch(ctx context.Context, q *Lookup, h Hit) ([]kvfile.Block, error)
	// ReadCost is the time Fetch is expected to take for bytes (from measured throughput).
	ReadCost(bytes int64) time.Duration
}

// Lookup is a prefix a source is asked about: Tokens are the prompt but its last token (what
// admission may attach), Keys the kvcache.ChainKey of each of its full blocks of BlockSize
// (len(Tokens)/BlockSize of them, chained from Salt.Key), From the first block the RAM cache
// does not hold whole, Salt the request's (a partial first block chains from Salt.Key, a peer
// routes by hashes from Salt.Routing).
type Lookup struct {
	Tokens    []int32
	Keys      []kvcache.Key
	From      int
	BlockSize int
	Salt      kvcache.Salt
}

// Hit is what a source holds of a Lookup: Blocks blocks from From on, covering Cells cells
// (full blocks, and a partial last one when Cells is not a multiple of BlockSize), of Bytes
// bytes of K/V.
type Hit struct {
	Blocks, Cells int
	Bytes         int64
}

// BlockSink is a tier that takes blocks leaving RAM. Both methods are called on the engine
// goroutine and must not block.
type BlockSink interface {
	// Want reports whether the sink would take the block with this Key now: it does not hold
	// it and has room in its queue (a sink that is behind says no and counts a dropped write).
	Want(key kvcache.Key) bool
	// Put hands a block over (its Data is the sink's from then on); swap marks a preempted
	// sequence's block.
	Put(b kvfile.Block, swap bool)
}

// TierObserver is an Observer that also counts the tiers' traffic, from the engine goroutine.
type TierObserver interface {
	// TierFetched: a fetch from tier brought blocks (bytes of K/V) into RAM in took; swapIn
	// when the request was a preempted one coming back.
	TierFetched(tier string, blocks int, bytes int64, took time.Duration, swapIn bool)
	// TierSwappedOut: a preempted sequence's blocks were handed to the sink.
	TierSwappedOut(blocks int)
}

// tierOwner is what the tiers need of the KV manager beyond kvOwner.
type tierOwner interface {
	SetSpill(want func(kvcache.Key) bool)
	Import(salt kvcache.Salt, prompt []int32, blocks []kvcache.ImportBlock, imgs []int32) ([]int32, int)
	SpillSeq(seq int) (blocks, cells int)
	TakeSpills(dst []kvcache.Spill) []kvcache.Spill
	Prefix(dst []kvcache.CachedBlock, salt kvcache.Salt, tokens []int32) []kvcache.CachedBlock
	SaveCells(cell, n int32) (int32, error)
	Config() kvcache.Config
}

// tierState is the KV tiers beyond RAM, owned by the Run goroutine: the core reaches it as a
// prefixFetcher (admission), stepImages (around decode) and seqMemory (swap-out at
// preemption). Its zero value, an engine without SetTiers, does nothing.
type tierState struct {
	sources  []BlockSource
	sink     BlockSink
	kv       kvOwner
	m        tierOwner // kv, when SetTiers took it; nil: no tiers
	cost     *costModel
	obs      TierObserver // nil: the Observer does not count tiers
	log      *slog.Logger
	ap       KVApplier // nil: the decoder cannot apply store operations outside a step
	layout   kvfile.Layout
	cellB    int64
	inflight map[*sequence]bool    // a fetch is in flight for the request
	tried    map[*sequence]*Lookup // a waiting request's prompt keys, hashed once per length
	stuck    map[*sequence]int     // the length at which a fetch for the request imported nothing
	fetched  chan fetchResult
	imgs     [][]byte // images of the pending KVLoad/KVSave operations, by index
	spills   []kvcache.Spill
	loads    []kvcache.ImportBlock
	imgIdx   []int32
	ops      []batch.KVOp // applyNow's, reused
}

type fetchResult struct {
	s      *sequence
	src    BlockSource
	from   int
	blocks []kvfile.Block
	took   time.Duration
	err    error
}

// SetTiers gives the engine its tiers beyond RAM: sources probed, in order, for prefixes the
// RAM cache lacks, and a sink for the blocks it evicts (nil: none), of layout l (the blocks'
// model and cache layout, as kvfile writes them). Call it before Run. It fails when the KV
// manager cannot have tiers (a test's fake), or the model is a hybrid and sources or sink are
// given (ErrRecurrentTiers: a hybrid's tiers are its slot files alone).
func (e *Engine) SetTiers(sources []BlockSource, sink BlockSink, l kvfile.Layout) bool {
	if e.rec != nil && (len(sources) > 0 || sink != nil) {
		return false
	}
	m, ok := e.kv.(tierOwner)
	if !ok {
		return false
	}
	t := e.tier
	t.sources, t.sink, t.kv, t.m, t.layout, t.cellB = sources, sink, e.kv, m, l, l.CellBytes()
	t.cost, t.log = &e.cost, e.cfg.Logger
	t.obs, _ = e.cfg.Observer.(TierObserver)
	t.ap, _ = e.dec.(KVApplier)
	t.inflight, t.tried, t.stuck = map[*sequence]bool{}, map[*sequence]*Lookup{}, map[*sequence]int{}
	t.fetched = make(chan fetchResult, e.cfg.MaxQueue+e.lim.NSeqMax)
	e.saved.kv = e.kv
	var want func(kvcache.Key) bool
	if sink != nil {
		want = sink.Want
	}
	m.SetSpill(want)
	return true
}

// wait reports whether the waiting request s must wait for blocks a tier is fetching for
// it; at its first turn (for its current length) it probes the sources and starts a fetch when
// one holds more of its prefix than RAM and reading it is expected to beat computing it.
func (t *tierState) wait(s *sequence) bool {
	if t.m == nil || len(t.sources) == 0 {
		return false
	}
	if t.inflight[s] {
		return true
	}
	if t.stuck[s] == len(s.tokens) {
		return false // a fetch at this length brought nothing in (no room): recompute instead
	}
	bs := t.m.Config().BlockSize
	a := t.kv.CanAdmit(s.req.Salt, s.tokens, 0)
	if a.Cached+bs > len(s.tokens)-1 {
		return false // RAM holds all but a partial block of it
	}
	// The prompt's keys are hashed once per length (SHA-256 of every block); probing is then
	// map lookups, done at every turn, since RAM and the tiers change between turns.
	q := t.tried[s]
	if q == nil || len(q.Tokens) != len(s.tokens)-1 {
		toks := slices.Clone(s.tokens[:len(s.tokens)-1])
		q = &Lookup{Tokens: toks, Keys: kvcache.ChainKeysFrom(nil, s.req.Salt.Key, toks, bs), BlockSize: bs, Salt: s.req.Salt}
		t.tried[s] = q
	}
	q = &Lookup{Tokens: q.Tokens, Keys: q.Keys, From: a.Cached / bs, BlockSize: bs, Salt: q.Salt}
	for _, src := range t.sources {
		h := src.Probe(q)
		gain := q.From*bs + h.Cells - a.Cached
		if h.Blocks == 0 || gain <= 0 {
			continue
		}
		if t.cost.ready() {
			compute := time.Duration(t.cost.promptCost(a.Cached, gain) * float64(time.Second))
			if src.ReadCost(h.Bytes) >= compute {
				continue
			}
		} // before the model is fitted (a fresh start, the case a disk tier is for) reading wins
		t.inflight[s] = true
		go t.fetch(s, src, q, h)
		return true
	}
	return false
}

// fetch runs on its own goroutine: it reads the blocks and hands them to the Run goroutine.
func (t *tierState) fetch(s *sequence, src BlockSource, q *Lookup, h Hit) {
	start := time.Now()
	blocks, err := src.Fetch(s.ctx, q, h)
	t.fetched <- fetchResult{s: s, src: src, from: q.From, blocks: blocks, took: time.Since(start), err: err}
}

// fetching reports whether a fetch is in flight for s.
func (t *tierState) fetching(s *sequence) bool { return t.inflight[s] }

// done is the channel finished fetches arrive on; nil without tiers.
func (t *tierState) done() <-chan fetchResult { return t.fetched }

// imported brings a finished fetch's blocks into the RAM prefix cache: those whose tokens and
// chain continue the request's prompt, in order from the first block RAM lacked.
func (t *tierState) imported(r fetchResult) {
	s := r.s
	delete(t.inflight, s)
	if r.err != nil && t.log != nil {
		t.log.Warn("kv tier fetch failed", "tier", r.src.Name(), "err", r.err)
	}
	if s.done || s.kvSeq >= 0 {
		return
	}
	if len(r.blocks) == 0 {
		// Nothing came (a peer tier's probe is optimistic: no peer held it, or it failed):
		// probing again at every turn would fetch again at every turn.
		t.stuck[s] = len(s.tokens)
		return
	}
	bs := t.m.Config().BlockSize
	prompt := s.tokens[:len(s.tokens)-1]
	t.loads = t.loads[:0]
	var bytes int64
	for i, b := range r.blocks {
		d := r.from + i
		lo := d * bs
		if int(b.Depth) != d || lo+len(b.Tokens) > len(prompt) || !slices.Equal(b.Tokens, prompt[lo:lo+len(b.Tokens)]) ||
			int64(len(b.Data)) != int64(len(b.Tokens))*t.cellB || (len(b.Tokens) < bs && i != len(r.blocks)-1) {
			break
		}
		t.loads = append(t.loads, kvcache.ImportBlock{Depth: int32(d), Cells: int32(len(b.Tokens))})
	}
	t.imgIdx, _ = t.m.Import(s.req.Salt, prompt, t.loads, t.imgIdx[:0])
	loaded := t.setLoads(t.imgIdx, r.blocks)
	if loaded == 0 {
		t.stuck[s] = len(s.tokens)
	}
	for i, idx := range t.imgIdx {
		if idx >= 0 {
			bytes += int64(len(r.blocks[i].Data))
		}
	}
	if t.obs != nil && loaded > 0 {
		t.obs.TierFetched(r.src.Name(), loaded, bytes, r.took, s.usage.Preemptions > 0)
	}
}

// sweep forgets the prompt keys and stuck lengths of requests that ended.
func (t *tierState) sweep() {
	for s := range t.tried {
		if s.done {
			delete(t.tried, s)
			delete(t.stuck, s)
		}
	}
}

// admitted: the tiers keep nothing per running sequence.
func (t *tierState) admitted(*sequence) error { return nil }

// released hands a preempted sequence's blocks to the sink when reading them back is expected
// to be cheaper than computing them again; otherwise they stay in the RAM prefix cache (and
// follow the evicted blocks to the sink if they are evicted) and are recomputed as before.
func (t *tierState) released(victim *sequence, preempted bool) {
	if !preempted || t.m == nil || t.sink == nil || len(t.sources) == 0 || !t.cost.ready() {
		return
	}
	n := t.kv.SeqLen(int(victim.kvSeq))
	compute := time.Duration(t.cost.promptCost(0, n) * float64(time.Second))
	if t.sources[0].ReadCost(int64(n)*t.cellB) >= compute {
		return
	}
	if blocks, _ := t.m.SpillSeq(int(victim.kvSeq)); blocks > 0 && t.obs != nil {
		t.obs.TierSwappedOut(blocks)
	}
}

// stage sets the images of the step's KVLoad and KVSave operations (kv, right after
// Schedule): the blocks imported since the last step, and a buffer for every block spilled.
func (t *tierState) stage(kv *batch.KV) {
	if t.m == nil {
		return
	}
	t.spills = t.m.TakeSpills(t.spills[:0])
	for _, sp := range t.spills {
		t.setImage(sp.Img, make([]byte, int64(len(sp.Tokens))*t.cellB))
	}
	kv.Images = t.imgs
}

// staged hands the step's spilled blocks, their images now filled by the store, to the
// sink (when the step's operations were applied: ok) and forgets the step's images.
func (t *tierState) staged(kv *batch.KV, ok bool) {
	if t.m == nil {
		return
	}
	if ok && t.sink != nil {
		for _, sp := range t.spills {
			t.sink.Put(t.block(sp.Key, sp.Parent, sp.Depth, slices.Clone(sp.Tokens), t.imgs[sp.Img]), sp.Swap)
		}
	}
	clear(t.imgs)
	t.imgs = t.imgs[:0]
	t.spills = t.spills[:0]
	kv.Images = nil
}

// flush writes the RAM prefix cache out to the sink when the engine stops, so that it
// survives a restart: the cached blocks the sink does not hold yet, in rounds the sink's queue
// takes, waiting for each round to be written (shutdown, not a step, waits here).
func (t *tierState) flush() {
	if t.m == nil || t.sink == nil || t.ap == nil {
		return
	}
	flush, _ := t.sink.(interface{ Flush() })
	m, ok := t.m.(interface{ SpillCached(max int) int })
	if !ok || flush == nil {
		return
	}
	for range t.kv.Stats().Total {
		if m.SpillCached(flushRound) == 0 {
			return
		}
		if _, err := t.applyNow(nil, nil); err != nil {
			if t.log != nil {
				t.log.Warn("kv tier: writing the prefix cache out at shutdown", "err", err)
			}
			return
		}
		flush.Flush()
	}
}

// flushRound is how many blocks flush hands over at a time: within the disk tier's queue.
const flushRound = 64

// setImage puts data at image idx.
func (t *tierState) setImage(idx int32, data []byte) {
	for int(idx) >= len(t.imgs) {
		t.imgs = append(t.imgs, nil)
	}
	t.imgs[idx] = data
}

// setLoads puts the data of blocks[i] at image imgs[i] (Import's numbering; -1: not loaded) and
// returns how many were loaded.
func (t *tierState) setLoads(imgs []int32, blocks []kvfile.Block) int {
	n := 0
	for i, idx := range imgs {
		if idx < 0 {
			continue
		}
		t.setImage(idx, blocks[i].Data)
		n++
	}
	return n
}
