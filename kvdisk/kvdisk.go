// Package kvdisk is the KV cache's disk tier: blocks the RAM prefix cache evicts (and preempted
// sequences swapped out) are written, one kvfile image per block, into a directory by a writer
// goroutine, and read back on a prefix miss in RAM instead of being recomputed; the directory
// survives a restart. It is an engine.BlockSource and engine.BlockSink.
//
// Files are named by the block's Key in hex (".kvb"). Writes never block the engine: Put queues
// a block (a bounded queue; a block that does not fit is dropped and counted). Each file is
// written to a temporary name and renamed, and every read checks the file against the layout
// (model identity, type, shapes, block size) and its checksums: a torn or altered file is
// rejected with a warning and removed, a file of another model or layout is never read. Open
// rebuilds the index from the directory (headers and sizes only; the checksums are checked at
// read time), removing torn files and ignoring other models' (left for the server they belong
// to, and not counted against the bound), and the total size is kept under a bound by evicting the blocks of lowest
// priority: the RAM cache's GreedyDual rule (clock + hits × (1 + 1/(1+depth))), so a prefix
// loses its deepest blocks first and blocks read often outlive one-off ones.
package kvdisk

import (
	"container/heap"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"ubatch/engine"
	"ubatch/kvcache"
	"ubatch/kvfile"
)

const ext = ".kvb"

// QueueLen is the number of blocks waiting to be written beyond which Put drops blocks.
const QueueLen = 256

// Stats counts the tier's contents and traffic since Open.
type Stats struct {
	Blocks        int   // blocks on disk
	Bytes         int64 // their file bytes
	Hits          int64 // blocks read back into RAM
	Reads         int64 // fetches (runs of blocks read)
	ReadBytes     int64
	Writes        int64 // blocks written
	WriteBytes    int64
	Dropped       int64 // blocks not written because the queue was full
	Evicted       int64 // blocks removed to stay under the size bound
	Rejected      int64 // files rejected (other model, torn, corrupt) and removed
	SwapOuts      int64 // blocks written because their sequence was preempted
	ReadSeconds   float64
	QueueCapacity int
}

type entry struct {
	key, parent kvcache.Key
	depth       int32
	cells       int32
	tokens      []int32 // partial blocks only: matched by tokens under their parent
	size        int64
	hits        int32
	prio        float64
	idx         int // in the eviction heap
}

// Tier is a disk tier over one directory. Its methods are safe for concurrent use.
type Tier struct {
	dir     string
	layout  kvfile.Layout
	max     int64
	log     *slog.Logger
	queue   chan job
	wg      sync.WaitGroup
	closing atomic.Bool

	mu      sync.Mutex
	index   map[kvcache.Key]*entry
	partial map[kvcache.Key][]*entry // parent key -> partial blocks chained from it
	pending map[kvcache.Key]bool     // queued or being written
	heap    entryHeap
	clock   float64
	bytes   int64
	st      Stats
	rate    float64 // measured read throughput, bytes per second (0: none yet)
	perFile float64 // measured seconds per file beyond the bytes
}

type job struct {
	b    kvfile.Block
	swap bool
}

// Open opens (creating it if need be) the tier in dir for blocks of layout l, bounded to
// maxBytes of files, and starts its writer. It rebuilds the index from the files there: those
// of another layout or model, torn ones (a size that does not match their header) and leftover
// temporary files are removed with a warning (another model's or layout's are ignored, not
// removed); the rest are ranked by modification time (the
// oldest evicted first) and trimmed to maxBytes.
func Open(dir string, l kvfile.Layout, maxBytes int64, log *slog.Logger) (*Tier, error) {
	if err := l.Check(); err != nil {
		return nil, err
	}
	if maxBytes <= 0 {
		return nil, fmt.Errorf("kvdisk: a size bound of %d bytes: give --kv-disk-size a positive size", maxBytes)
	}
	if log == nil {
		log = slog.Default()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("kvdisk: %w", err)
	}
	t := &Tier{dir: dir, layout: l, max: maxBytes, log: log, queue: make(chan job, QueueLen),
		index: map[kvcache.Key]*entry{}, partial: map[kvcache.Key][]*entry{}, pending: map[kvcache.Key]bool{}}
	t.st.QueueCapacity = QueueLen
	if err := t.rebuild(); err != nil {
		return nil, err
	}
	t.wg.Add(1)
	go t.writer()
	return t, nil
}

// Close stops the writer after the queued blocks are written.
func (t *Tier) Close() {
	if t.closing.Swap(true) {
		return
	}
	close(t.queue)
	t.wg.Wait()
}

// Name is "disk".
func (t *Tier) Name() string { return "disk" }

// Dir returns the directory.
func (t *Tier) Dir() string { return t.dir }

// Stats returns the counters.
func (t *Tier) Stats() Stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.st
	st.Blocks, st.Bytes = len(t.index), t.bytes
	return st
}

func (t *Tier) path(k kvcache.Key) string { return filepath.Join(t.dir, FileName(k)) }

// FileName is the name of block k's file in a tier's directory: the key in hex, then ".kvb".
func FileName(k kvcache.Key) string { return hex.EncodeToString(k[:]) + ext }

// WriteBlock writes b, of layout l, into dir as the tier writes it (one block, named
// FileName(b.Key)) and returns the bytes written: the tier's files made by hand, in tests and
// tools, are then the tier's own.
func WriteBlock(dir string, l kvfile.Layout, b kvfile.Block) (int64, error) {
	return kvfile.WriteFile(filepath.Join(dir, FileName(b.Key)), l, []kvfile.Block{b})
}

// rebuild indexes the directory's files (see Open).
func (t *Tier) rebuild() error {
	des, err := os.ReadDir(t.dir)
	if err != nil {
		return fmt.Errorf("kvdisk: %w", err)
	}
	type found struct {
		e   *entry
		mod time.Time
	}
	var all []found
	for _, de := range des {
		name := de.Name()
		full := filepath.Join(t.dir, name)
		if strings.HasSuffix(name, ".tmp") && strings.HasPrefix(name, ".") {
			os.Remove(full) // a write cut by a crash
			continue
		}
		if de.IsDir() || !strings.HasSuffix(name, ext) {
			continue
		}
		e, mod, err := t.scan(full, strings.TrimSuffix(name, ext))
		if errors.Is(err, kvfile.ErrForeign) || errors.Is(err, kvfile.ErrNotRegular) {
			// Another model's or cache layout's (a server sharing the directory, another -ctk),
			// or not a file at all: left alone, never read.
			t.log.Warn("kv disk: ignoring a block file of another model or cache layout, or not a regular file", "file", full, "err", err)
			t.st.Rejected++
			continue
		}
		if err != nil {
			t.log.Warn("kv disk: removing a torn or corrupt block file", "file", full, "err", err)
			os.Remove(full)
			t.st.Rejected++
			continue
		}
		all = append(all, found{e, mod})
	}
	slices.SortFunc(all, func(a, b found) int { return a.mod.Compare(b.mod) })
	for i, f := range all {
		f.e.prio = float64(i) / float64(len(all)) // older first, all below one use's worth
		t.add(f.e)
	}
	removeAll(t.trim())
	return nil
}

// scan reads a file's header and record metadata (not its data) and checks its size.
func (t *Tier) scan(path, name string) (*entry, time.Time, error) {
	f, fi, err := kvfile.OpenRegular(path) // a FIFO named like a block must not hang the start
	if err != nil {
		return nil, time.Time{}, err
	}
	defer f.Close()
	b, err := kvfile.DecodeMeta(f, t.layout)
	if err != nil {
		return nil, time.Time{}, err
	}
	if want := kvfile.Size(t.layout, []kvfile.Block{b}); fi.Size() != want {
		return nil, time.Time{}, fmt.Errorf("%w: %d bytes, its header says %d (a torn write)", kvfile.ErrCorrupt, fi.Size(), want)
	}
	if hex.EncodeToString(b.Key[:]) != name {
		return nil, time.Time{}, fmt.Errorf("%w: named for another block", kvfile.ErrCorrupt)
	}
	e := &entry{key: b.Key, parent: b.Parent, depth: b.Depth, cells: int32(len(b.Tokens)), size: fi.Size(), hits: 1}
	if len(b.Tokens) < t.layout.BlockSize {
		e.tokens = b.Tokens
	}
	return e, fi.ModTime(), nil
}

// add puts e in the index (t.mu held or not yet shared).
func (t *Tier) add(e *entry) {
	if old, ok := t.index[e.key]; ok {
		t.drop(old)
	}
	t.index[e.key] = e
	if e.tokens != nil {
		t.partial[e.parent] = append(t.partial[e.parent], e)
	}
	t.bytes += e.size
	heap.Push(&t.heap, e)
}

// drop takes e out of the index (t.mu held); the caller removes its file.
func (t *Tier) drop(e *entry) {
	delete(t.index, e.key)
	if e.tokens != nil {
		sib := slices.DeleteFunc(t.partial[e.parent], func(x *entry) bool { return x == e })
		if len(sib) == 0 {
			delete(t.partial, e.parent)
		} else {
			t.partial[e.parent] = sib
		}
	}
	t.bytes -= e.size
	if e.idx >= 0 {
		heap.Remove(&t.heap, e.idx)
	}
}

// trim evicts the blocks of lowest priority while the files exceed the bound (t.mu held or
// not yet shared) and returns the files to remove, which the caller removes without holding
// t.mu (the engine goroutine takes it in Want: it must never wait for the disk).
func (t *Tier) trim() []string {
	var gone []string
	for t.bytes > t.max && t.heap.Len() > 0 {
		e := t.heap[0]
		t.clock = max(t.clock, e.prio)
		t.drop(e)
		gone = append(gone, t.path(e.key))
		t.st.Evicted++
	}
	return gone
}

func removeAll(paths []string) {
	for _, p := range paths {
		os.Remove(p)
	}
}

func blockCost(depth int32) float64 { return 1 + 1/float64(1+depth) }

// Want reports whether the tier would take the block with this key: it does not hold it nor
// has it queued, and the queue has room (else the block is counted as dropped).
func (t *Tier) Want(k kvcache.Key) bool {
	if t.closing.Load() {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.index[k]; ok || t.pending[k] {
		return false
	}
	if len(t.queue) >= cap(t.queue) {
		t.st.Dropped++
		return false
	}
	return true
}

// Put queues b for writing, or drops it (counted) when the queue is full. It never blocks.
func (t *Tier) Put(b kvfile.Block, swap bool) {
	if t.closing.Load() {
		return
	}
	t.mu.Lock()
	if _, ok := t.index[b.Key]; ok || t.pending[b.Key] {
		t.mu.Unlock()
		return
	}
	select {
	case t.queue <- job{b: b, swap: swap}:
		t.pending[b.Key] = true
	default:
		t.st.Dropped++
	}
	t.mu.Unlock()
}

// writer writes queued blocks until Close.
func (t *Tier) writer() {
	defer t.wg.Done()
	for j := range t.queue {
		size, err := WriteBlock(t.dir, t.layout, j.b)
		t.mu.Lock()
		delete(t.pending, j.b.Key)
		if err != nil {
			t.mu.Unlock()
			t.log.Warn("kv disk: writing a block failed", "dir", t.dir, "err", err)
			continue
		}
		e := &entry{key: j.b.Key, parent: j.b.Parent, depth: j.b.Depth, cells: int32(len(j.b.Tokens)), size: size, hits: 1}
		if len(j.b.Tokens) < t.layout.BlockSize {
			e.tokens = j.b.Tokens
		}
		e.prio = t.clock + blockCost(e.depth)
		t.add(e)
		t.st.Writes++
		t.st.WriteBytes += size
		if j.swap {
			t.st.SwapOuts++
		}
		gone := t.trim()
		t.mu.Unlock()
		removeAll(gone)
	}
}

// Probe reports the blocks the tier holds in a row from block q.From of q's prompt: full ones
// by Key, then a partial block chained from the last of them whose tokens continue the prompt
// (the longest such). In memory; no I/O.
func (t *Tier) Probe(q *engine.Lookup) engine.Hit {
	_, h := t.hitKeys(q)
	return h
}

// hitKeys returns the Keys of the blocks Probe counts, and the count.
func (t *Tier) hitKeys(q *engine.Lookup) ([]kvcache.Key, engine.Hit) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var h engine.Hit
	bs := q.BlockSize
	if bs != t.layout.BlockSize || q.From < 0 {
		return nil, h
	}
	var keys []kvcache.Key
	take := func(e *entry) {
		keys = append(keys, e.key)
		h.Blocks++
		h.Cells += int(e.cells)
		h.Bytes += e.size
	}
	d := q.From
	for ; d < len(q.Keys); d++ {
		e, ok := t.index[q.Keys[d]]
		if !ok {
			break
		}
		take(e)
	}
	parent := q.Salt.Key // a partial first block chains from the request's salt
	if d > 0 {
		if d-1 >= len(q.Keys) {
			return keys, h
		}
		parent = q.Keys[d-1]
	}
	rest := q.Tokens[min(d*bs, len(q.Tokens)):]
	var best *entry
	for _, e := range t.partial[parent] {
		if e.depth == int32(d) && len(e.tokens) <= len(rest) && slices.Equal(e.tokens, rest[:len(e.tokens)]) &&
			(best == nil || len(e.tokens) > len(best.tokens)) {
			best = e
		}
	}
	if best != nil {
		take(best)
	}
	return keys, h
}

// Fetch reads the blocks Probe found, in chain order, stopping at the first that cannot be read
// (a file rejected is removed, with a warning). ctx ending stops it too.
func (t *Tier) Fetch(ctx context.Context, q *engine.Lookup, h engine.Hit) ([]kvfile.Block, error) {
	keys, _ := t.hitKeys(q)
	if len(keys) > h.Blocks {
		keys = keys[:h.Blocks]
	}
	start := time.Now()
	var out []kvfile.Block
	var bytes int64
	for _, k := range keys {
		if ctx.Err() != nil {
			break
		}
		b, size, err := t.read(k)
		if err != nil {
			break
		}
		out = append(out, b)
		bytes += size
	}
	took := time.Since(start)
	t.mu.Lock()
	t.st.Reads++
	t.st.Hits += int64(len(out))
	t.st.ReadBytes += bytes
	t.st.ReadSeconds += took.Seconds()
	if len(out) > 0 && took > 0 {
		// Throughput, weighted toward recent reads.
		r := float64(bytes) / took.Seconds()
		if t.rate == 0 {
			t.rate = r
		} else {
			t.rate += 0.2 * (r - t.rate)
		}
	}
	t.mu.Unlock()
	return out, nil
}

// read reads and verifies one block; a file that fails is removed from the index and disk.
func (t *Tier) read(k kvcache.Key) (kvfile.Block, int64, error) {
	path := t.path(k)
	f, fi, err := kvfile.OpenRegular(path)
	if err == nil {
		var blocks []kvfile.Block
		blocks, err = kvfile.Decode(f, t.layout, 1)
		f.Close()
		if err == nil && (len(blocks) != 1 || blocks[0].Key != k) {
			err = fmt.Errorf("%w: not the block it is named for", kvfile.ErrCorrupt)
		}
		if err == nil {
			t.mu.Lock()
			if e, ok := t.index[k]; ok {
				e.hits = min(e.hits+1, 16)
				e.prio = t.clock + float64(e.hits)*blockCost(e.depth)
				heap.Fix(&t.heap, e.idx)
			}
			t.mu.Unlock()
			return blocks[0], fi.Size(), nil
		}
	}
	level := slog.LevelWarn
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, io.EOF) {
		level = slog.LevelDebug // evicted meanwhile
	}
	t.log.Log(context.Background(), level, "kv disk: rejecting a block file", "file", path, "err", err)
	t.mu.Lock()
	if e, ok := t.index[k]; ok {
		t.drop(e)
		t.st.Rejected++
	}
	t.mu.Unlock()
	os.Remove(path)
	return kvfile.Block{}, 0, err
}

// ReadCost estimates the time to read bytes: at the measured throughput, or, before any read,
// at a conservative 200 MB/s (a SATA SSD's sequential reads; the page cache is far faster).
func (t *Tier) ReadCost(bytes int64) time.Duration {
	t.mu.Lock()
	r := t.rate
	t.mu.Unlock()
	if r <= 0 {
		r = 200e6
	}
	return time.Duration(float64(bytes) / r * float64(time.Second))
}

// Flush waits until the queued blocks are written (for tests and shutdown).
func (t *Tier) Flush() {
	for {
		t.mu.Lock()
		n := len(t.pending)
		t.mu.Unlock()
		if n == 0 {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

type entryHeap []*entry

func (h entryHeap) Len() int           { return len(h) }
func (h entryHeap) Less(i, j int) bool { return h[i].prio < h[j].prio }
func (h entryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *entryHeap) Push(x any) {
	e := x.(*entry)
	e.idx = len(*h)
	*h = append(*h, e)
}
func (h *entryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.idx = -1
	return e
}
