package grammar

import (
	"slices"
	"unicode/utf8"
)

// runeRange is an inclusive range of code points.
type runeRange struct{ lo, hi rune }

// byteSet is a set of bytes, one bit per value.
type byteSet [4]uint64

func (s *byteSet) add(lo, hi byte) {
	for b := int(lo); b <= int(hi); b++ {
		s[b>>6] |= 1 << (b & 63)
	}
}

func (s *byteSet) has(b byte) bool { return s[b>>6]&(1<<(b&63)) != 0 }

func (s *byteSet) empty() bool { return s[0]|s[1]|s[2]|s[3] == 0 }

const (
	surrogateLo = 0xD800
	surrogateHi = 0xDFFF
)

// normalize sorts ranges, merges overlapping or adjacent ones and removes the surrogates, which
// valid UTF-8 cannot encode. With negate it returns the complement within [0, utf8.MaxRune].
func normalize(rs []runeRange, negate bool) []runeRange {
	rs = slices.Clone(rs)
	slices.SortFunc(rs, func(a, b runeRange) int { return int(a.lo) - int(b.lo) })
	var out []runeRange
	for _, r := range rs {
		if n := len(out); n > 0 && r.lo <= out[n-1].hi+1 {
			out[n-1].hi = max(out[n-1].hi, r.hi)
			continue
		}
		out = append(out, r)
	}
	if negate {
		var comp []runeRange
		next := rune(0)
		for _, r := range out {
			if r.lo > next {
				comp = append(comp, runeRange{next, r.lo - 1})
			}
			next = r.hi + 1
		}
		if next <= utf8.MaxRune {
			comp = append(comp, runeRange{next, utf8.MaxRune})
		}
		out = comp
	}
	var clean []runeRange
	for _, r := range out {
		if r.lo < surrogateLo && r.hi > surrogateHi {
			clean = append(clean, runeRange{r.lo, surrogateLo - 1}, runeRange{surrogateHi + 1, r.hi})
			continue
		}
		if r.lo >= surrogateLo && r.lo <= surrogateHi {
			r.lo = surrogateHi + 1
		}
		if r.hi >= surrogateLo && r.hi <= surrogateHi {
			r.hi = surrogateLo - 1
		}
		if r.lo <= r.hi {
			clean = append(clean, r)
		}
	}
	return clean
}

// utf8Sequences returns byte-level sequences whose union is exactly the UTF-8 encodings of the
// code points in rs (normalized: sorted, disjoint, no surrogates). Each sequence is a list of byte
// sets, one per byte of the encoding. Sequences that differ only in their first byte are merged,
// and single-byte ranges are gathered into one set, so that a class such as [^"\\] lowers to a
// handful of sequences.
func utf8Sequences(rs []runeRange) [][]byteSet {
	var seqs [][]byteSet
	for _, r := range rs {
		splitUTF8(r.lo, r.hi, func(lo, hi []byte) {
			seq := make([]byteSet, len(lo))
			for i := range lo {
				seq[i].add(lo[i], hi[i])
			}
			seqs = append(seqs, seq)
		})
	}
	// Merge sequences with the same length and the same tail: their first sets union.
	var out [][]byteSet
	for _, s := range seqs {
		merged := false
		for _, o := range out {
			if len(o) == len(s) && slices.Equal(o[1:], s[1:]) {
				for w := range o[0] {
					o[0][w] |= s[0][w]
				}
				merged = true
				break
			}
		}
		if !merged {
			out = append(out, s)
		}
	}
	return out
}

// splitUTF8 calls emit with the first and last encodings of sub-ranges of [lo, hi] such that each
// sub-range is exactly the set of sequences whose i-th byte lies in [first[i], last[i]] for
// every i (the classic decomposition used by regular-expression compilers).
func splitUTF8(lo, hi rune, emit func(lo, hi []byte)) {
	if lo > hi {
		return
	}
	// Split at encoding-length boundaries first.
	for _, b := range []rune{0x7F, 0x7FF, 0xFFFF} {
		if lo <= b && hi > b {
			splitUTF8(lo, b, emit)
			splitUTF8(b+1, hi, emit)
			return
		}
	}
	if hi <= 0x7F {
		emit([]byte{byte(lo)}, []byte{byte(hi)})
		return
	}
	// Then make every continuation byte span its full range or a single value.
	for i := 1; i < 4; i++ {
		m := rune(1)<<(6*i) - 1
		if lo&^m != hi&^m {
			if lo&m != 0 {
				splitUTF8(lo, lo|m, emit)
				splitUTF8((lo|m)+1, hi, emit)
				return
			}
			if hi&m != m {
				splitUTF8(lo, (hi&^m)-1, emit)
				splitUTF8(hi&^m, hi, emit)
				return
			}
		}
	}
	var a, b [utf8.UTFMax]byte
	n := utf8.EncodeRune(a[:], lo)
	utf8.EncodeRune(b[:], hi)
	emit(a[:n], b[:n])
}
