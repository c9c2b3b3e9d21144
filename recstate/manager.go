package recstate

import (
	"errors"
	"fmt"
	"math"

	"ubatch/kvcache"
)

// DefaultEvery is Policy.Every's default: a snapshot every 32 blocks (512 tokens of 16). Of
// the grids TestPolicySimulation measures (1, 8, 32, 128 blocks), it is the coarsest with which
// DefaultPolicy meets the targets: the second of 16 questions after a 2,000-token prefix
// starts from 1,536 (every later one from the branch point, 1,984), with 48 snapshots against
// 233 for every block. It also bounds what a cut back recomputes to 512 tokens.
const DefaultEvery = 32

// Policy says at which block boundaries a sequence keeps a snapshot of its state. Each costs
// StateBytes of the budget until evicted.
type Policy struct {
	// Every keeps one at every Every-th boundary (positions Every*BlockSize, 2*Every*BlockSize,
	// ...); 0 keeps none of these.
	Every int
	// Branch keeps one where a prompt's cached attention prefix ends beyond its snapshot hit:
	// there the prompt shares its prefix with an earlier one, so a third prompt like them will
	// start there.
	Branch bool
	// PromptEnd keeps one at the prompt's last full block, for the same prompt again.
	PromptEnd bool
	// Tail keeps one at the latest boundary a sequence reached, superseded (and freed) as it
	// passes the next, kept when it ends: the next turn of a chat starts there.
	Tail bool
}

// DefaultPolicy is the policy the simulation justifies (see DefaultEvery).
var DefaultPolicy = Policy{Every: DefaultEvery, Branch: true, PromptEnd: true, Tail: true}

// Config describes a Manager. MaxSeqs and StateBytes must be positive; Budget/StateBytes
// snapshot slots are kept (0 keeps none: every cut back and every new sequence starts from 0).
type Config struct {
	MaxSeqs    int   // sequence ids are in [0, MaxSeqs), as the runner's and kvcache's
	BlockSize  int   // kvcache's block size (0: kvcache.DefaultBlockSize)
	StateBytes int64 // one sequence's recurrent state (the runner's StateBytes)
	Budget     int64 // bytes the snapshots may take
	Policy     Policy
}

// maxSlots bounds the snapshot slots a budget may ask for (ids are int32).
const maxSlots = 1 << 24

// Check returns cfg with defaults filled in, or an error naming the bad field.
func (cfg Config) Check() (Config, error) {
	if cfg.BlockSize == 0 {
		cfg.BlockSize = kvcache.DefaultBlockSize
	}
	switch {
	case cfg.MaxSeqs <= 0 || cfg.MaxSeqs > math.MaxInt32:
		return cfg, fmt.Errorf("recstate: MaxSeqs %d: want a count in [1, %d]", cfg.MaxSeqs, math.MaxInt32)
	case cfg.BlockSize < 0:
		return cfg, fmt.Errorf("recstate: BlockSize %d: want kvcache's block size (> 0)", cfg.BlockSize)
	case cfg.StateBytes <= 0:
		return cfg, fmt.Errorf("recstate: StateBytes %d: want the runner's StateBytes (> 0)", cfg.StateBytes)
	case cfg.Budget < 0:
		return cfg, fmt.Errorf("recstate: Budget %d: want a byte count >= 0", cfg.Budget)
	case cfg.Budget/cfg.StateBytes > maxSlots:
		return cfg, fmt.Errorf("recstate: Budget %d holds %d snapshots of %d bytes, more than %d: lower it",
			cfg.Budget, cfg.Budget/cfg.StateBytes, cfg.StateBytes, maxSlots)
	case cfg.Policy.Every < 0:
		return cfg, fmt.Errorf("recstate: Policy.Every %d: want a block count >= 0 (0: none)", cfg.Policy.Every)
	}
	return cfg, nil
}

// ErrContextShift is returned by Shift: a hybrid model cannot shift its context.
var ErrContextShift = errors.New("recstate: context shift is impossible for a hybrid recurrent model: " +
	"its state summarizes every token since position 0 and cannot drop the oldest; serve it without --context-shift")

// ErrHole is returned by Remove for a range that ends before the sequence's history does.
var ErrHole = errors.New("recstate: a recurrent state cannot drop positions inside its history: " +
	"remove to the end (p1 = -1) and decode the rest again")

// seqState is one sequence's live state: valid at pos (tokens consumed), the Keys of its full
// blocks, the tokens since the last boundary, and the snapshot it is anchored on.
type seqState struct {
	live      bool
	pos       int32
	root      kvcache.Key   // its salt's Key
	keys      []kvcache.Key // keys[i]: block i, positions [i*bs, (i+1)*bs)
	part      []int32       // tokens [len(keys)*bs, pos)
	anchor    int32         // the slot it holds a reference to, -1 when none
	promptEnd int32         // the prompt's last full-block boundary (Policy.PromptEnd), 0 when none
	branch    int32         // the boundary Policy.Branch keeps, 0 when none
}

// Manager is the bookkeeping of hybrid models' recurrent states: per sequence the position its
// live state is valid at, and a pool of snapshots keyed by the kvcache Key of the block ending at
// their boundary. It holds no state bytes: every change of them it decides is an Op, appended in
// order to a pending list (TakeOps). Not safe for concurrent use: the engine goroutine owns it,
// beside its kvcache.Manager.
type Manager struct {
	cfg  Config
	bs   int32
	seqs []seqState
	snap pool
	ops  []Op
	keys []kvcache.Key // scratch of Match

	saves, skipped int64
}

// New returns a Manager for cfg (see Config.Check).
func New(cfg Config) (*Manager, error) {
	cfg, err := cfg.Check()
	if err != nil {
		return nil, err
	}
	m := &Manager{cfg: cfg, bs: int32(cfg.BlockSize), seqs: make([]seqState, cfg.MaxSeqs),
		snap: newPool(int(cfg.Budget / cfg.StateBytes))}
	for s := range m.seqs {
		m.seqs[s].anchor = -1
	}
	return m, nil
}

// Config returns the Manager's configuration, defaults filled in.
func (m *Manager) Config() Config { return m.cfg }

// Slots returns the number of snapshot slots: Op.Snap is in [0, Slots()).
func (m *Manager) Slots() int { return len(m.snap.key) }

// Pos returns the position seq's live state is valid at (tokens consumed), 0 when not live.
func (m *Manager) Pos(seq int) int {
	if seq < 0 || seq >= len(m.seqs) {
		return 0
	}
	return int(m.seqs[seq].pos)
}

// Live reports whether seq was started and not freed.
func (m *Manager) Live(seq int) bool { return seq >= 0 && seq < len(m.seqs) && m.seqs[seq].live }

// TakeOps appends the pending state operations to dst, in order, clears them and returns dst.
// Apply them in order before the next forward pass (see Op).
func (m *Manager) TakeOps(dst []Op) []Op {
	dst = append(dst, m.ops...)
	m.ops = m.ops[:0]
	return dst
}

func (m *Manager) check(op string, seq int, live bool) error {
	if seq < 0 || seq >= len(m.seqs) {
		return fmt.Errorf("recstate: %s: sequence id %d outside [0, %d)", op, seq, len(m.seqs))
	}
	if m.seqs[seq].live != live {
		if live {
			return fmt.Errorf("recstate: %s: sequence %d is not live: Start it first", op, seq)
		}
		return fmt.Errorf("recstate: %s: sequence %d is live: Free it first", op, seq)
	}
	return nil
}

// Start makes the free sequence seq live for prompt, salted salt, from the longest snapshot
// Match finds within the first cached tokens (kvcache's prefix match for the same prompt), and
// returns its position hit: an OpLoad of that snapshot, or an OpClear when hit is 0. The caller
// then decodes prompt[hit:] from position hit, its chunks cut by ChunkEnd, and keeps only the
// first hit tokens of the attention prefix (Admit does both).
func (m *Manager) Start(seq int, salt kvcache.Salt, prompt []int32, cached int) (int, error) {
	if err := m.check("Start", seq, false); err != nil {
		return 0, err
	}
	hit := m.Match(salt, prompt, cached)
	sq := &m.seqs[seq]
	*sq = seqState{live: true, root: salt.Key, keys: sq.keys[:0], part: sq.part[:0], anchor: -1}
	sq.keys = append(sq.keys, m.keys[:hit/int(m.bs)]...)
	if p := m.cfg.Policy; p.PromptEnd {
		sq.promptEnd = int32(len(prompt)) / m.bs * m.bs
	}
	if c := int32(min(cached, len(prompt))) / m.bs * m.bs; m.cfg.Policy.Branch && c > int32(hit) {
		sq.branch = c
	}
	if hit == 0 {
		m.ops = append(m.ops, Op{Kind: OpClear, Seq: int32(seq)})
		return 0, nil
	}
	id := m.snap.find(sq.keys[len(sq.keys)-1])
	m.load(seq, id)
	return hit, nil
}

// load restores slot id into seq: an OpLoad, and seq anchored on id.
func (m *Manager) load(seq int, id int32) {
	sq := &m.seqs[seq]
	sq.pos = m.snap.pos[id]
	m.snap.use(id)
	m.ops = append(m.ops, Op{Kind: OpLoad, Seq: int32(seq), Snap: id})
	m.anchor(seq, id)
}

// anchor moves seq's reference to slot id (-1: none), dropping a superseded tail.
func (m *Manager) anchor(seq int, id int32) {
	sq := &m.seqs[seq]
	if sq.anchor == id {
		return
	}
	if id >= 0 {
		m.snap.pin(id)
	}
	if old := sq.anchor; old >= 0 {
		m.snap.unpin(old, true)
	}
	sq.anchor = id
}

// Match returns the longest boundary a sequence salted salt can start prompt from: the largest
// multiple n of BlockSize, at most cached and less than len(prompt) (the last prompt token is
// always computed), whose block ending at n has a snapshot; 0 when none. cached is kvcache's
// prefix match (Admission.Cached), so the attention blocks of [0, n) are there too.
func (m *Manager) Match(salt kvcache.Salt, prompt []int32, cached int) int {
	n := min(cached, len(prompt)-1)
	if n < int(m.bs) || len(m.snap.byKey) == 0 {
		m.keys = m.keys[:0]
		return 0
	}
	m.keys = kvcache.ChainKeysFrom(m.keys[:0], salt.Key, prompt[:n], int(m.bs))
	for i := len(m.keys) - 1; i >= 0; i-- {
		if id := m.snap.find(m.keys[i]); id >= 0 && m.snap.pos[id] == int32(i+1)*m.bs {
			return (i + 1) * int(m.bs)
		}
	}
	return 0
}

// ChunkEnd returns where seq's next prompt chunk, about to cover positions [Pos, end), must end:
// the first boundary in (Pos, end) at which seq keeps a snapshot (Policy.Every, Branch,
// PromptEnd), else end (always end with no snapshot slots). A state is valid only where a step
// ends, so a chunk that crossed the boundary could not save it.
func (m *Manager) ChunkEnd(seq int, end int) int {
	if !m.Live(seq) || m.Slots() == 0 {
		return end
	}
	sq := &m.seqs[seq]
	if int32(end) <= sq.pos {
		return end
	}
	b := int32(end)
	if e := int32(m.cfg.Policy.Every) * m.bs; e > 0 {
		b = min(b, (sq.pos/e+1)*e)
	}
	for _, w := range [2]int32{sq.branch, sq.promptEnd} {
		if w > sq.pos {
			b = min(b, w)
		}
	}
	return int(b)
}

// wanted reports whether boundary b is one seq keeps a snapshot at by policy (not a tail).
func (m *Manager) wanted(sq *seqState, b int32) bool {
	if e := int32(m.cfg.Policy.Every) * m.bs; e > 0 && b%e == 0 {
		return true
	}
	return b == sq.branch || b == sq.promptEnd
}
