package grammar

import (
	"context"
	"fmt"
)

// Element kinds of the compiled program.
const (
	opTerm uint8 = iota // match one byte of sets[arg]
	opRef               // call rule arg
	opEnd               // end of an alternative: return to the caller
)

type elem struct {
	op  uint8
	arg int32
}

type rule struct {
	name string
	alts []int32 // start of each alternative in Grammar.elems
}

// Grammar is a compiled grammar: immutable, safe for concurrent use, shared by every Matcher of
// it. Characters are matched as UTF-8 bytes: a character class lowers to the byte sequences of its
// code points, so a token that ends inside a multi-byte character is accepted exactly when some
// completion of that character can follow.
type Grammar struct {
	elems []elem // alternatives, each ended by opEnd
	rules []rule
	sets  []byteSet
	root  int32
	// class maps a byte to its equivalence class: bytes in the same class belong to exactly the
	// same sets, so a Matcher's transition tables are indexed by class rather than by byte.
	class    [256]uint8
	nClasses int
	source   string
}

// String returns the grammar's source text.
func (g *Grammar) String() string { return g.source }

// Parse is Compile with no deadline but the default Limits' MaxTime.
func Parse(src string) (*Grammar, error) { return Compile(context.Background(), src, Limits{}) }

// Compile parses and compiles GBNF source (llama.cpp's grammar format) whose start rule is
// "root", within lim (zero fields: the defaults). It rejects undefined rules, left recursion
// (which a top-down matcher cannot run), rules that can never finish and, with a *LimitError, a
// grammar that needs more than a limit allows, including one whose start alone leads to more
// parses than a Matcher tracks. It stops soon after ctx is done, with an error wrapping
// ctx.Err(). Its time and memory are linear in the source and the expanded program.
func Compile(ctx context.Context, src string, lim Limits) (*Grammar, error) {
	g, err := compile(ctx, src, lim)
	if err != nil {
		return nil, err
	}
	// A start state the matcher cannot build would leave every matcher of g dead: refuse g now.
	if m := NewMatcher(g, nil); m.cur == 0 {
		return nil, &LimitError{Limit: LimitStart, Max: maxVisits, Got: m.visits}
	}
	return g, nil
}

// compile is Compile without the check of the start state.
func compile(ctx context.Context, src string, lim Limits) (*Grammar, error) {
	lim = lim.withDefaults()
	if len(src) > lim.MaxBytes {
		return nil, &LimitError{Limit: LimitBytes, Max: lim.MaxBytes, Got: len(src)}
	}
	clk := newClock(ctx, lim.MaxTime)
	if err := clk.check(); err != nil {
		return nil, err
	}
	defs, err := parseGBNF(src, lim, clk)
	if err != nil {
		return nil, err
	}
	c := &compiler{names: map[string]int32{}, setIndex: map[byteSet]int32{}, lim: lim, clk: clk}
	// Rules get their ids in order of appearance, so that errors and names are stable; a rule
	// defined twice keeps its last definition, as in llama.cpp.
	for _, d := range defs {
		id := c.ruleID(d.name)
		c.defined[id] = true
		c.body[id] = nil
	}
	for _, d := range defs {
		id := c.names[d.name]
		var alts [][]elem
		for _, a := range d.alts {
			seq, err := c.seq(a, d.name)
			if err != nil {
				return nil, err
			}
			alts = append(alts, seq)
		}
		c.body[id] = alts
	}
	root, ok := c.names["root"]
	if !ok || !c.defined[root] {
		return nil, fmt.Errorf("grammar: no rule named root: the root rule is where the output starts")
	}
	for id, def := range c.defined {
		if !def {
			return nil, fmt.Errorf("grammar: rule %q is used but never defined", c.ruleNames[id])
		}
	}
	g, err := c.link(root)
	if err != nil {
		return nil, err
	}
	if err := g.check(); err != nil {
		return nil, err
	}
	g.source = src
	if err := g.buildClasses(clk); err != nil {
		return nil, err
	}
	return g, clk.check()
}

// compiler lowers parsed rules into elements. Each rule body is kept as separate alternatives
// until link lays them out, so that groups and repetitions can add rules while a body is built.
type compiler struct {
	names     map[string]int32 // user rules only
	ruleNames []string         // a synthetic rule has the name of the user rule it belongs to
	defined   []bool
	body      [][][]elem
	sets      []byteSet
	setIndex  map[byteSet]int32
	size      int // elements so far, against lim.MaxElements
	lim       Limits
	clk       *clock
}

// grow adds n elements to the program's size.
func (c *compiler) grow(n int) error {
	if c.size += n; c.size > c.lim.MaxElements {
		return &LimitError{Limit: LimitElements, Max: c.lim.MaxElements, Got: c.size}
	}
	return nil
}

func (c *compiler) ruleID(name string) int32 {
	if id, ok := c.names[name]; ok {
		return id
	}
	id := int32(len(c.ruleNames))
	c.names[name] = id
	c.ruleNames = append(c.ruleNames, name)
	c.defined = append(c.defined, false)
	c.body = append(c.body, nil)
	return id
}

// newRule adds a synthetic rule of user rule parent. It shares parent's name (for errors) rather
// than getting one of its own such as llama.cpp's parent_N: a repetition adds a rule per unit of
// its bound, and names of their own would cost the parent's length each.
func (c *compiler) newRule(parent string, alts [][]elem) (int32, error) {
	id := int32(len(c.ruleNames))
	c.ruleNames = append(c.ruleNames, parent)
	c.defined = append(c.defined, true)
	c.body = append(c.body, alts)
	n := 0
	for _, a := range alts {
		n += len(a) + 1
	}
	return id, c.grow(n)
}

func (c *compiler) set(s byteSet) int32 {
	if i, ok := c.setIndex[s]; ok {
		return i
	}
	i := int32(len(c.sets))
	c.sets = append(c.sets, s)
	c.setIndex[s] = i
	return i
}

// seq lowers n (any kind) into a sequence of elements for a body of rule parent.
func (c *compiler) seq(n *node, parent string) ([]elem, error) {
	var out []elem
	if err := c.emit(n, parent, &out); err != nil {
		return nil, err
	}
	return out, c.grow(len(out))
}

func (c *compiler) emit(n *node, parent string, out *[]elem) error {
	if err := c.clk.tick(); err != nil {
		return err
	}
	switch n.kind {
	case nSeq:
		for _, k := range n.kids {
			if err := c.emit(k, parent, out); err != nil {
				return err
			}
		}
	case nLit:
		for _, b := range n.lit {
			var s byteSet
			s.add(b, b)
			*out = append(*out, elem{opTerm, c.set(s)})
		}
	case nClass:
		seqs := utf8Sequences(n.ranges)
		if len(seqs) == 1 {
			for _, s := range seqs[0] {
				*out = append(*out, elem{opTerm, c.set(s)})
			}
			return nil
		}
		alts := make([][]elem, len(seqs))
		for i, sq := range seqs {
			for _, s := range sq {
				alts[i] = append(alts[i], elem{opTerm, c.set(s)})
			}
		}
		id, err := c.newRule(parent, alts)
		if err != nil {
			return err
		}
		*out = append(*out, elem{opRef, id})
	case nRef:
		*out = append(*out, elem{opRef, c.ruleID(n.name)})
	case nAlt:
		if len(n.kids) == 1 { // a group without "|" is just its sequence
			return c.emit(n.kids[0], parent, out)
		}
		var alts [][]elem
		for _, k := range n.kids {
			s, err := c.seq(k, parent)
			if err != nil {
				return err
			}
			alts = append(alts, s)
		}
		id, err := c.newRule(parent, alts)
		if err != nil {
			return err
		}
		*out = append(*out, elem{opRef, id})
	case nRepeat:
		return c.repeat(n, parent, out)
	}
	return nil
}

// repeat lowers x{min,max} as llama.cpp does: min copies of x, then for an unbounded maximum
// S ::= x S | ε, else a chain of max-min nested optionals O_k ::= x O_{k-1} | ε. Every recursive
// reference is the last element of its alternative, so matching keeps the stack flat.
func (c *compiler) repeat(n *node, parent string, out *[]elem) error {
	body, err := c.seq(n.kids[0], parent)
	if err != nil || len(body) == 0 {
		return err // repeating nothing is nothing
	}
	// x as one element: itself when it is one, else a rule of its own.
	var atom elem
	switch {
	case len(body) == 1:
		atom = body[0]
	default:
		id, err := c.newRule(parent, [][]elem{body})
		if err != nil {
			return err
		}
		atom = elem{opRef, id}
	}
	// The min copies are counted before they are made, so that the limit bounds the memory.
	if err := c.grow(n.min); err != nil {
		return err
	}
	for range n.min {
		*out = append(*out, atom)
	}
	switch {
	case n.max < 0:
		id, err := c.newRule(parent, nil)
		if err != nil {
			return err
		}
		c.body[id] = [][]elem{{atom, {opRef, id}}, {}}
		if err := c.grow(4); err != nil {
			return err
		}
		*out = append(*out, elem{opRef, id})
	case n.max > n.min:
		var prev int32 = -1
		for k := 1; k <= n.max-n.min; k++ {
			if err := c.clk.tick(); err != nil {
				return err
			}
			first := []elem{atom}
			if prev >= 0 {
				first = append(first, elem{opRef, prev})
			}
			id, err := c.newRule(parent, [][]elem{first, {}})
			if err != nil {
				return err
			}
			prev = id
		}
		*out = append(*out, elem{opRef, prev})
	}
	return nil
}

// link lays the rule bodies out in one element slice.
func (c *compiler) link(root int32) (*Grammar, error) {
	g := &Grammar{rules: make([]rule, len(c.body)), sets: c.sets, root: root}
	for id, alts := range c.body {
		r := &g.rules[id]
		r.name = c.ruleNames[id]
		for _, a := range alts {
			r.alts = append(r.alts, int32(len(g.elems)))
			g.elems = append(g.elems, a...)
			g.elems = append(g.elems, elem{op: opEnd})
		}
	}
	if len(g.elems) > c.lim.MaxElements {
		return nil, &LimitError{Limit: LimitElements, Max: c.lim.MaxElements, Got: len(g.elems)}
	}
	return g, c.clk.check()
}

// check rejects what the matcher cannot run: left recursion (a rule that can call itself before
// reading a byte would expand forever) and rules reachable from root that can never finish.
func (g *Grammar) check() error {
	n := len(g.rules)
	reach := make([]bool, n)
	work := []int32{g.root}
	reach[g.root] = true
	for len(work) > 0 {
		r := work[len(work)-1]
		work = work[:len(work)-1]
		for _, a := range g.rules[r].alts {
			for p := a; g.elems[p].op != opEnd; p++ {
				if e := g.elems[p]; e.op == opRef && !reach[e.arg] {
					reach[e.arg] = true
					work = append(work, e.arg)
				}
			}
		}
	}
	nullable := g.closure(true)
	productive := g.closure(false)
	for id := range g.rules {
		if reach[id] && !productive[id] {
			return fmt.Errorf("grammar: rule %q can never finish: each of its alternatives recurses without end; add an alternative that ends", g.userName(id))
		}
	}
	// Left recursion: a cycle in the graph "r calls s before reading a byte".
	const (
		white = iota
		grey
		black
	)
	color := make([]uint8, n)
	var dfs func(r int32) int32
	dfs = func(r int32) int32 {
		color[r] = grey
		for _, a := range g.rules[r].alts {
			for p := a; g.elems[p].op == opRef; p++ {
				s := g.elems[p].arg
				if color[s] == grey {
					return s
				}
				if color[s] == white {
					if bad := dfs(s); bad >= 0 {
						return bad
					}
				}
				if !nullable[s] {
					break
				}
			}
		}
		color[r] = black
		return -1
	}
	for id := range g.rules {
		if reach[id] && color[id] == white {
			if bad := dfs(int32(id)); bad >= 0 {
				return fmt.Errorf("grammar: rule %q is left-recursive (it can reach itself before reading a character); rewrite it with repetition, e.g. list ::= item (\",\" item)*", g.userName(int(bad)))
			}
		}
	}
	return nil
}

// closure returns, for every rule, whether it derives the empty string (nullable) or, without
// nullable, whether it derives any string at all. It runs in time linear in the grammar: each
// alternative counts the references it still waits for, and a rule that becomes true releases
// the alternatives that use it.
func (g *Grammar) closure(nullable bool) []bool {
	type alt struct {
		rule int32
		wait int
	}
	var alts []alt
	users := make([][]int32, len(g.rules)) // users[r]: alternatives that reference r, once per reference
	var queue []int32
	done := make([]bool, len(g.rules))
	for id, r := range g.rules {
		for _, a := range r.alts {
			ai := int32(len(alts))
			wait, hasTerm := 0, false
			for p := a; g.elems[p].op != opEnd; p++ {
				if e := g.elems[p]; e.op == opRef {
					wait++
					users[e.arg] = append(users[e.arg], ai)
				} else {
					hasTerm = true
				}
			}
			if nullable && hasTerm {
				wait = -1 // never nullable
			}
			alts = append(alts, alt{int32(id), wait})
			if wait == 0 && !done[id] {
				done[id] = true
				queue = append(queue, int32(id))
			}
		}
	}
	for len(queue) > 0 {
		r := queue[len(queue)-1]
		queue = queue[:len(queue)-1]
		for _, ai := range users[r] {
			a := &alts[ai]
			if a.wait <= 0 {
				continue
			}
			if a.wait--; a.wait == 0 && !done[a.rule] {
				done[a.rule] = true
				queue = append(queue, a.rule)
			}
		}
	}
	return done
}

// userName is the name of the user rule a (possibly synthetic) rule belongs to.
func (g *Grammar) userName(id int) string { return g.rules[id].name }

// buildClasses partitions the 256 byte values into classes that no set tells apart. Each set
// refines the partition in one pass over the bytes, with an array for the (class, in set) pairs
// so that a grammar with many distinct sets costs 256 steps per set, no map.
func (g *Grammar) buildClasses(clk *clock) error {
	var cls [256]int
	n := 1
	var split [512]int // (old class, in set) -> new class + 1; 0: not seen in this pass
	for _, s := range g.sets {
		if err := clk.tick(); err != nil {
			return err
		}
		clear(split[:2*n])
		next := 0
		for b := range 256 {
			k := 2 * cls[b]
			if s.has(byte(b)) {
				k++
			}
			if split[k] == 0 {
				next++
				split[k] = next
			}
			cls[b] = split[k] - 1
		}
		n = next
	}
	for b := range 256 {
		g.class[b] = uint8(cls[b])
	}
	g.nClasses = n
	return nil
}
