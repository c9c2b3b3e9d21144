package tokenizer

// symbol is a span of the text being merged, linked to its live neighbours. A symbol merged into
// its left neighbour has n == 0.
type symbol struct {
	start, n   int32 // byte span in the text
	prev, next int32 // neighbour indices, -1 at the ends
}

// bigram is a candidate merge of two adjacent symbols. Higher priority merges first; ties go to
// the leftmost pair, as in llama.cpp (SPM: score; BPE: minus the merge rank).
type bigram struct {
	left, right int32
	size        int32 // byte length of the merged text, to detect stale candidates
	prio        float64
}

// scratch holds the buffers one Encode call reuses across fragments and words.
type scratch struct {
	syms  []symbol
	heap  []bigram
	runes []rune
	ends  []int32
	tmp   []int32
	word  []byte
	cpt   [4]byte
}

func (t *Tokenizer) getScratch() *scratch {
	if s, ok := t.scratch.Get().(*scratch); ok {
		return s
	}
	return &scratch{}
}

// utf8Len is llama.cpp's unicode_len_utf8: the character length announced by a lead byte (stray
// continuation bytes count as one).
func utf8Len(b byte) int32 {
	return [16]int32{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4}[b>>4]
}

// splitChars fills s.syms with one symbol per character of text.
func (s *scratch) splitChars(text string) {
	s.syms = s.syms[:0]
	for off := int32(0); off < int32(len(text)); {
		n := min(utf8Len(text[off]), int32(len(text))-off)
		idx := int32(len(s.syms))
		s.syms = append(s.syms, symbol{start: off, n: n, prev: idx - 1, next: idx + 1})
		off += n
	}
	if k := len(s.syms); k > 0 {
		s.syms[k-1].next = -1
	}
}

// mergeSymbols repeatedly merges the highest-priority adjacent pair of s.syms over text; prio
// reports whether the pair text[start:mid] + text[mid:end] may merge, and with what priority.
func (s *scratch) mergeSymbols(text string, prio func(start, mid, end int32) (float64, bool)) {
	s.heap = s.heap[:0]
	try := func(l, r int32) {
		if l < 0 || r < 0 {
			return
		}
		a, b := s.syms[l], s.syms[r]
		p, ok := prio(a.start, b.start, b.start+b.n)
		if ok {
			s.push(bigram{left: l, right: r, size: a.n + b.n, prio: p})
		}
	}
	for i := int32(1); i < int32(len(s.syms)); i++ {
		try(i-1, i)
	}
	for len(s.heap) > 0 {
		bg := s.pop()
		l, r := &s.syms[bg.left], &s.syms[bg.right]
		if l.n == 0 || r.n == 0 || l.n+r.n != bg.size {
			continue // one side has merged since this candidate was queued
		}
		l.n += r.n
		r.n = 0
		l.next = r.next
		if r.next >= 0 {
			s.syms[r.next].prev = bg.left
		}
		try(l.prev, bg.left)
		try(bg.left, l.next)
	}
}

func (a bigram) before(b bigram) bool {
	return a.prio > b.prio || a.prio == b.prio && a.left < b.left
}

func (s *scratch) push(b bigram) {
	h := append(s.heap, b)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !h[i].before(h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
	s.heap = h
}

func (s *scratch) pop() bigram {
	h := s.heap
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	for i := 0; ; {
		c := 2*i + 1
		if c >= len(h) {
			break
		}
		if c+1 < len(h) && h[c+1].before(h[c]) {
			c++
		}
		if !h[c].before(h[i]) {
			break
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
	s.heap = h
	return top
}

// appendMerged appends, for each symbol of text left after mergeSymbols in order, the token of
// its text, or, when the vocabulary has none, what byteTokens makes of its bytes (both encoders
// fall back to one token per byte, each its own way).
func (s *scratch) appendMerged(out []int32, text string, ids map[string]int32, byteTokens func(out []int32, piece string) []int32) []int32 {
	for i := int32(0); i >= 0 && int(i) < len(s.syms); i = s.syms[i].next {
		sym := s.syms[i]
		piece := text[sym.start : sym.start+sym.n]
		if id, ok := ids[piece]; ok {
			out = append(out, id)
		} else {
			out = byteTokens(out, piece)
		}
	}
	return out
}
