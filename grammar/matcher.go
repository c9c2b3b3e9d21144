package grammar

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// Limits of one Matcher. Past maxNodes stack nodes or maxStates states its caches are rebuilt
// from the current state; past maxMaskBytes of cached masks the masks are dropped.
const (
	maxNodes     = 1 << 18
	maxStates    = 1 << 13
	maxMaskBytes = 2 << 20
	// maxVisits bounds the work of one byte step: a grammar so ambiguous that one byte leads to
	// more parses than this is refused rather than allowed to stall the server.
	maxVisits = 1 << 16
)

// ErrTooAmbiguous is returned (wrapped) when one step of a grammar would track more parses than a
// Matcher allows.
var ErrTooAmbiguous = errors.New("grammar: too ambiguous: one character leads to too many parses (simplify the grammar, e.g. x{0,N} instead of x? x? x?)")

// ErrBudget is returned (wrapped, by Err) once one call of a Matcher needed more work than its
// budget (see SetBudget): the grammar is too expensive to match, and the matcher stops.
var ErrBudget = errors.New("grammar: too expensive to match")

// DefaultBudget is a Matcher's work budget per call unless SetBudget changes it: one unit is a
// parse stack stepped over one byte or a parse visited, plus stepCost per new byte step. Issue
// 19's attack grammar stops after 1.7-3 ms of mask computation at this budget on a 2-core EPYC
// (BenchmarkMaskAttack), where its masks took 81 ms (32k vocabulary) to 632 ms (128k); the cold
// mask of JSON inside a string over a 128k vocabulary needs 5501 units, a sixth of it.
const DefaultBudget = 1 << 15

// stepCost is the fixed part of a byte step's work, in the units of the budget.
const stepCost = 8

// stackNode is one frame of a parse stack: pos is the element to match next, parent the frame
// to return to after the current alternative ends (0: the bottom, i.e. the end of the output).
// Nodes are interned, so a stack is identified by the id of its top node.
type stackNode struct{ pos, parent int32 }

// mstate is a set of parse stacks, each topped by a terminal element, or the empty stack (node 0),
// which means the output so far is a complete sentence. States are interned, so that transitions
// and token masks computed once are reused whenever the parse comes back to the same state.
type mstate struct {
	stacks []int32  // sorted node ids
	next   []int32  // next state per byte class; -1 = not computed yet, 0 = dead
	mask   []uint64 // tokens allowed in this state, nil until Mask computes it
	// loop is the set of bytes that lead from this state back to itself, once loopDone.
	loop     byteSet
	loopDone bool
}

// Matcher follows one output through a grammar: it accepts tokens or bytes and tells which
// tokens of a Vocab may come next. It belongs to one sequence and is not safe for concurrent use.
//
// Its state is the set of parse stacks of llama.cpp's grammar sampler, kept as interned nodes in
// a pushdown graph: each byte step is computed once per state and then looked up, and the mask of
// allowed tokens walks the vocabulary's trie along those cached steps, pruning every subtree whose
// prefix the grammar rejects.
type Matcher struct {
	g *Grammar
	v *Vocab

	nodes     []stackNode
	nodeIndex map[uint64]int32
	states    []mstate
	stateIdx  map[string]int32
	cur       int32 // 0 (dead) only when the start state could not be built
	done      bool  // an end-of-generation token was accepted
	err       error // set when a step exceeded maxVisits or a call its budget
	stopped   bool  // err ended the matcher: Mask allows nothing until Reset
	zero      []uint64

	// budget bounds the work of one call; work counts it (stacks stepped, parses visited).
	budget, work int

	// Step scratch: mark[id] == stamp when node id was visited in the current step.
	mark      []uint32
	stamp     uint32
	visits    int
	out       []int32
	key       []byte
	depth     []int32 // fillMask scratch
	maskBytes int

	nodeLimit, stateLimit int // maxNodes and maxStates; lowered by tests
}

// NewMatcher returns a matcher at the start of g. v may be nil when only AcceptBytes and
// Complete are used; the token methods need it.
func NewMatcher(g *Grammar, v *Vocab) *Matcher {
	m := &Matcher{g: g, v: v, nodeLimit: maxNodes, stateLimit: maxStates, budget: DefaultBudget}
	m.Reset()
	return m
}

// SetBudget sets the work one call of Mask, Allowed, AcceptToken or AcceptBytes may do (n < 1:
// DefaultBudget). A call that needs more stops, and the matcher with it: Err wraps ErrBudget,
// Mask allows nothing and the accept methods fail until Reset. Work that a call caches (byte
// steps, masks) costs nothing when a later call reuses it.
func (m *Matcher) SetBudget(n int) {
	if n < 1 {
		n = DefaultBudget
	}
	m.budget = n
}

// Reset returns to the start of the grammar and drops every cache.
func (m *Matcher) Reset() {
	m.nodes = append(m.nodes[:0], stackNode{-1, -1})
	m.nodeIndex = map[uint64]int32{}
	m.states = append(m.states[:0], mstate{}) // state 0: dead
	m.stateIdx = map[string]int32{}
	m.mark = append(m.mark[:0], 0)
	m.maskBytes, m.done, m.err, m.stopped = 0, false, nil, false
	m.begin()
	for _, a := range m.g.rules[m.g.root].alts {
		m.push(a, 0)
	}
	if m.visits > maxVisits {
		// Compile refuses such grammars; this keeps a matcher safe (dead, not panicking) anyway.
		m.err, m.cur, m.stopped = fmt.Errorf("%w (at the start of the grammar)", ErrTooAmbiguous), 0, true
		return
	}
	m.cur = m.intern()
}

// stop ends the matcher with err.
func (m *Matcher) stop(err error) {
	m.err, m.stopped = err, true
}

// over reports whether the current call has spent its budget, and then stops the matcher.
func (m *Matcher) over(what string) bool {
	if m.work <= m.budget {
		return false
	}
	if !m.stopped {
		m.stop(fmt.Errorf("%w: one %s needed more than %d units of work, the matcher's budget "+
			"(simplify the grammar: fewer alternatives that match the same text, smaller {m,n} bounds)",
			ErrBudget, what, m.budget))
	}
	return true
}

// Complete reports whether the output so far is a complete sentence of the grammar (an
// end-of-generation token may come next).
func (m *Matcher) Complete() bool { return m.accepting(m.cur) }

// Done reports whether an end-of-generation token was accepted.
func (m *Matcher) Done() bool { return m.done }

func (m *Matcher) accepting(s int32) bool {
	st := m.states[s].stacks
	return len(st) > 0 && st[0] == 0
}

// AcceptBytes advances by b. On error (b cannot continue the output) the state is unchanged.
// The budget applies to each byte of b, not to the whole: b may be a whole document.
func (m *Matcher) AcceptBytes(b []byte) error {
	return m.accept(b, true)
}

// accept advances by b; perByte starts the budget afresh at each byte, else once for all of b.
func (m *Matcher) accept(b []byte, perByte bool) error {
	if m.stopped {
		return m.err
	}
	if m.done {
		return errors.New("grammar: the output already ended")
	}
	m.work = 0
	s := m.walk(m.cur, b, perByte, "text")
	if s == 0 {
		if m.err != nil {
			return m.err
		}
		return fmt.Errorf("grammar: %q cannot continue the output here", b)
	}
	m.moveTo(s)
	return nil
}

// AcceptToken advances by one token of the matcher's Vocab: its text, or for an end-of-generation
// token the end of the output, which is allowed only when the output is complete. On error the
// state is unchanged.
func (m *Matcher) AcceptToken(tok int32) error {
	v := m.v
	if tok < 0 || int(tok) >= v.n {
		return fmt.Errorf("grammar: token %d is outside the vocabulary [0, %d)", tok, v.n)
	}
	if m.stopped {
		return m.err
	}
	if m.done {
		return errors.New("grammar: the output already ended")
	}
	if v.isEOG(tok) {
		if !m.accepting(m.cur) {
			return errors.New("grammar: the output cannot end here: the grammar is not complete")
		}
		m.done = true
		return nil
	}
	p := v.piece(tok)
	if len(p) == 0 {
		return fmt.Errorf("grammar: token %d has no text", tok)
	}
	return m.accept(p, false)
}

// Allowed reports whether tok may come next, without advancing.
func (m *Matcher) Allowed(tok int32) bool {
	v := m.v
	if m.done || m.stopped || tok < 0 || int(tok) >= v.n {
		return false
	}
	if v.isEOG(tok) {
		return m.accepting(m.cur)
	}
	p := v.piece(tok)
	m.work = 0
	return len(p) > 0 && m.walk(m.cur, p, false, "token check") != 0
}

// Mask returns the tokens that may come next as a bitset (bit t%64 of word t/64 for token t),
// end-of-generation tokens included when the output is complete; all zero means a dead end, or,
// when Err is not nil, a matcher that stopped (its budget, or a start it could not build). The
// slice belongs to the matcher and stays valid until the state changes.
func (m *Matcher) Mask() []uint64 {
	words := (m.v.n + 63) / 64
	if m.stopped {
		return m.zeroMask(words)
	}
	st := &m.states[m.cur]
	if st.mask != nil {
		return st.mask
	}
	if m.maskBytes+8*words > maxMaskBytes {
		for i := range m.states {
			m.states[i].mask = nil
		}
		m.maskBytes = 0
	}
	mask := make([]uint64, words)
	m.work = 0
	if !m.fillMask(m.cur, mask) {
		return m.zeroMask(words) // the steps it made stay cached; the partial mask is dropped
	}
	m.states[m.cur].mask = mask
	m.maskBytes += 8 * words
	return mask
}

func (m *Matcher) zeroMask(words int) []uint64 {
	if len(m.zero) != words {
		m.zero = make([]uint64, words)
	}
	clear(m.zero) // a caller may have written to it
	return m.zero
}

// Err returns why the matcher failed other than by the grammar rejecting the text: a step
// that led to too many parses (ErrTooAmbiguous: that step was refused), or a call that spent its
// budget (ErrBudget) or a start state that could not be built, which stop the matcher until
// Reset; nil when none.
func (m *Matcher) Err() error { return m.err }

// fillMask sets the bits of the tokens allowed in state start: one forward scan of the trie
// along cached steps, which skips every subtree whose prefix the grammar rejects, and takes a
// large subtree whole when every byte in it leads from the current state back to itself (inside
// a JSON string, for instance, nearly the whole vocabulary). It returns false when the budget ran
// out first (mask is then incomplete). Only new byte steps count against the budget: a walk along
// cached ones is bounded by the vocabulary's trie.
func (m *Matcher) fillMask(start int32, mask []uint64) bool {
	v := m.v
	if m.accepting(start) {
		for _, t := range v.eog {
			mask[t>>6] |= 1 << (t & 63)
		}
	}
	if cap(m.depth) < v.maxDepth+1 {
		m.depth = make([]int32, v.maxDepth+1)
	}
	at := m.depth[:v.maxDepth+1] // at[d]: the state after the first d bytes of the current path
	at[0] = start
	set := func(ts []int32) {
		for _, t := range ts {
			mask[t>>6] |= 1 << (t & 63)
		}
	}
	for i, n := int32(1), int32(len(v.nb)); i < n; {
		s := at[v.ndepth[i]-1]
		b := v.nb[i]
		ns := m.states[s].next[m.g.class[b]]
		if ns < 0 {
			if ns = m.step(s, b); m.work > m.budget {
				return !m.over("mask")
			}
		}
		if ns == 0 {
			i = v.nend[i]
			continue
		}
		if k := v.nsub[i]; k >= 0 {
			loop := m.loopOf(ns)
			if loop == nil {
				return !m.over("mask")
			}
			if subset(&v.subBytes[k], loop) {
				set(v.toks[v.ntok[i]:v.ntok[v.nend[i]]])
				i = v.nend[i]
				continue
			}
		}
		set(v.toks[v.ntok[i]:v.ntok[i+1]])
		at[v.ndepth[i]] = ns
		i++
	}
	return true
}

// loopOf returns the bytes that lead from state s back to s, computing every step of s once.
// It returns nil when the budget runs out on the way.
func (m *Matcher) loopOf(s int32) *byteSet {
	if !m.states[s].loopDone {
		var loop byteSet
		for b := range 256 {
			if m.step(s, byte(b)) == s {
				loop.add(byte(b), byte(b))
			}
			if m.work > m.budget {
				return nil
			}
		}
		m.states[s].loop, m.states[s].loopDone = loop, true
	}
	return &m.states[s].loop
}

func subset(a, b *byteSet) bool {
	return a[0]&^b[0]|a[1]&^b[1]|a[2]&^b[2]|a[3]&^b[3] == 0
}

// walk returns the state after b from s (0 when b cannot follow, or the budget ran out: what
// names the call in the budget's error); perByte starts the budget afresh at each byte.
func (m *Matcher) walk(s int32, b []byte, perByte bool, what string) int32 {
	for _, c := range b {
		if perByte {
			m.work = 0
		}
		if s = m.step(s, c); m.work > m.budget {
			m.over(what)
			return 0
		}
		if s == 0 {
			return 0
		}
	}
	return s
}

// moveTo makes s current; when the caches have grown past their limits it rebuilds them around s.
func (m *Matcher) moveTo(s int32) {
	m.cur = s
	if len(m.nodes) > m.nodeLimit || len(m.states) > m.stateLimit {
		m.compact()
	}
}

// step returns the state after byte b in state s (0 when b cannot follow).
func (m *Matcher) step(s int32, b byte) int32 {
	if s == 0 {
		return 0
	}
	c := m.g.class[b]
	if n := m.states[s].next[c]; n >= 0 {
		return n
	}
	if m.work > m.budget {
		return 0 // not cached: the step is not dead, just not computed
	}
	m.begin()
	for _, id := range m.states[s].stacks {
		if id == 0 {
			continue
		}
		nd := m.nodes[id]
		if m.g.sets[m.g.elems[nd.pos].arg].has(b) {
			m.push(nd.pos+1, nd.parent)
		}
	}
	// A step costs per stack it reads and per parse it visits, plus a fixed part for the new state
	// it may intern (its transition table, its key): stepCost.
	m.work += len(m.states[s].stacks) + m.visits + stepCost
	n := int32(0)
	if m.visits <= maxVisits {
		n = m.intern()
	} else if m.err == nil {
		m.err = ErrTooAmbiguous
	}
	m.states[s].next[c] = n
	return n
}

func (m *Matcher) begin() {
	m.stamp++
	if m.stamp == 0 { // wrapped: old marks could collide
		clear(m.mark)
		m.stamp = 1
	}
	m.out = m.out[:0]
	m.visits = 0
}

// push continues at element pos with return frame parent: an alternative that ends returns at
// once, so no frame for a finished alternative is ever kept (recursion in last position runs in
// constant stack depth).
func (m *Matcher) push(pos, parent int32) {
	if m.g.elems[pos].op == opEnd {
		m.visit(parent)
		return
	}
	m.visit(m.node(pos, parent))
}

// visit expands node id until every resulting stack is topped by a terminal.
func (m *Matcher) visit(id int32) {
	if m.mark[id] == m.stamp {
		return
	}
	m.mark[id] = m.stamp
	if m.visits++; m.visits > maxVisits {
		return
	}
	if id == 0 {
		m.out = append(m.out, 0)
		return
	}
	nd := m.nodes[id]
	e := m.g.elems[nd.pos]
	if e.op == opTerm {
		m.out = append(m.out, id)
		return
	}
	ret := nd.parent
	if m.g.elems[nd.pos+1].op != opEnd {
		ret = m.node(nd.pos+1, nd.parent)
	}
	for _, a := range m.g.rules[e.arg].alts {
		m.push(a, ret)
	}
}

func (m *Matcher) node(pos, parent int32) int32 {
	k := uint64(uint32(pos))<<32 | uint64(uint32(parent))
	if id, ok := m.nodeIndex[k]; ok {
		return id
	}
	id := int32(len(m.nodes))
	m.nodes = append(m.nodes, stackNode{pos, parent})
	m.mark = append(m.mark, 0)
	m.nodeIndex[k] = id
	return id
}

// intern returns the state whose stacks are m.out (0 when empty).
func (m *Matcher) intern() int32 {
	if len(m.out) == 0 {
		return 0
	}
	slices.Sort(m.out)
	m.key = m.key[:0]
	for _, id := range m.out {
		m.key = binary.LittleEndian.AppendUint32(m.key, uint32(id))
	}
	if s, ok := m.stateIdx[string(m.key)]; ok {
		return s
	}
	s := int32(len(m.states))
	next := make([]int32, m.g.nClasses)
	for i := range next {
		next[i] = -1
	}
	m.states = append(m.states, mstate{stacks: slices.Clone(m.out), next: next})
	m.stateIdx[string(m.key)] = s
	return s
}

// compact rebuilds the node and state tables with only the current state's stacks.
func (m *Matcher) compact() {
	oldNodes := m.nodes
	stacks := m.states[m.cur].stacks
	m.nodes = []stackNode{{-1, -1}}
	m.nodeIndex = map[uint64]int32{}
	m.states = []mstate{{}}
	m.stateIdx = map[string]int32{}
	m.mark = []uint32{0}
	m.maskBytes = 0
	remap := map[int32]int32{0: 0}
	var copyNode func(id int32) int32
	copyNode = func(id int32) int32 {
		if n, ok := remap[id]; ok {
			return n
		}
		// Parent chains are deep only for deeply nested output; walk them iteratively.
		var chain []int32
		for p := id; ; p = oldNodes[p].parent {
			if _, ok := remap[p]; ok {
				break
			}
			chain = append(chain, p)
		}
		for i := len(chain) - 1; i >= 0; i-- {
			o := oldNodes[chain[i]]
			remap[chain[i]] = m.node(o.pos, remap[o.parent])
		}
		return remap[id]
	}
	m.begin()
	for _, id := range stacks {
		m.out = append(m.out, copyNode(id))
	}
	m.cur = m.intern()
}
