// Package batch holds a batch of tokens to decode, in the spirit of llama.cpp's llama_batch:
// parallel slices indexed by token, reusable across steps without allocation, plus the
// structural validation and micro-batch split the forward pass needs.
//
// A Batch is not safe for concurrent use.
package batch

import "fmt"

// Batch is a set of tokens to decode together. Token i is Tokens[i] at position Pos[i] in every
// sequence listed in Seqs[i]; Logits[i] tells whether its output row is wanted. All four slices
// have the same length (checked by Validate). A token listed with several sequences is decoded
// once for all of them (they must share their whole history in the KV cache).
type Batch struct {
	Tokens []int32
	Pos    []int32
	Seqs   [][]int32 // sequence ids of each token; at least one, no duplicates
	Logits []bool    // whether the token's logits are wanted
	// Hidden marks the output tokens (Logits set) whose output is their final-norm hidden state
	// (an embedding) instead of logits: the prompt-only sequences of embedding requests, decoded
	// beside generating ones. Empty (none), or as long as Tokens (Add keeps it so).
	Hidden []bool
	// KV is the step's KV-cache schedule (cells and store operations), set by the KV manager's
	// owner after the batch is built; nil until then. Clear resets it.
	KV *KV

	// Validate scratch, indexed by sequence id, kept to avoid allocating on every step.
	lastPos []int32
	seenAt  []int32 // token index + 1 at which the seq id was last seen
}

// Add appends one token. seqs is copied; the inner slice left over from earlier use (after
// Clear) is reused when its capacity allows, so a batch refilled every step stops allocating.
func (b *Batch) Add(tok, pos int32, seqs []int32, logits bool) {
	b.add(tok, pos, seqs, logits, false)
}

// AddHidden appends one token as Add does; when out is set its output is its final-norm hidden
// state (Hidden) rather than logits.
func (b *Batch) AddHidden(tok, pos int32, seqs []int32, out bool) {
	b.add(tok, pos, seqs, out, out)
}

func (b *Batch) add(tok, pos int32, seqs []int32, logits, hidden bool) {
	b.Tokens = append(b.Tokens, tok)
	b.Pos = append(b.Pos, pos)
	b.Logits = append(b.Logits, logits)
	b.Hidden = append(b.Hidden, hidden)
	n := len(b.Seqs)
	if n < cap(b.Seqs) {
		b.Seqs = b.Seqs[:n+1]
		b.Seqs[n] = append(b.Seqs[n][:0], seqs...)
	} else {
		b.Seqs = append(b.Seqs, append(make([]int32, 0, max(len(seqs), 1)), seqs...))
	}
}

// Clear empties the batch and keeps every slice's capacity (inner Seqs slices included).
func (b *Batch) Clear() {
	b.Tokens = b.Tokens[:0]
	b.Pos = b.Pos[:0]
	b.Seqs = b.Seqs[:0]
	b.Logits = b.Logits[:0]
	b.Hidden = b.Hidden[:0]
	b.KV = nil
}

// Len is the number of tokens, len(Tokens).
func (b *Batch) Len() int { return len(b.Tokens) }

// Validate checks the structural rules of the batch and returns an error naming the first
// offending token index: the batch is non-empty and its slices have equal lengths, token ids are
// in [0, nVocab), each token has at least one sequence id, sequence ids are in [0, nSeqMax) and
// not repeated within a token, positions are >= 0 and strictly increasing within each sequence.
// Continuity with the KV cache (the first position of a sequence following its last cached one)
// is checked by kvcache.Manager's CanSchedule, not here.
func (b *Batch) Validate(nVocab, nSeqMax int) error {
	n := len(b.Tokens)
	switch {
	case nVocab <= 0:
		return fmt.Errorf("batch: vocabulary size %d must be positive", nVocab)
	case nSeqMax <= 0:
		return fmt.Errorf("batch: maximum sequence count %d must be positive", nSeqMax)
	case n == 0:
		return fmt.Errorf("batch: empty batch")
	case len(b.Pos) != n || len(b.Seqs) != n || len(b.Logits) != n || (len(b.Hidden) != 0 && len(b.Hidden) != n):
		return fmt.Errorf("batch: slice lengths differ: %d tokens, %d positions, %d seq lists, %d logits flags, %d hidden flags",
			n, len(b.Pos), len(b.Seqs), len(b.Logits), len(b.Hidden))
	}
	if cap(b.lastPos) < nSeqMax {
		b.lastPos = make([]int32, nSeqMax)
		b.seenAt = make([]int32, nSeqMax)
	}
	b.lastPos = b.lastPos[:nSeqMax]
	b.seenAt = b.seenAt[:nSeqMax]
	for i := range b.lastPos {
		b.lastPos[i] = -1
		b.seenAt[i] = 0
	}
	for i := range n {
		if t := b.Tokens[i]; t < 0 || int(t) >= nVocab {
			return fmt.Errorf("batch: token %d: id %d outside vocabulary [0, %d)", i, t, nVocab)
		}
		p := b.Pos[i]
		if p < 0 {
			return fmt.Errorf("batch: token %d: negative position %d", i, p)
		}
		if len(b.Seqs[i]) == 0 {
			return fmt.Errorf("batch: token %d: no sequence id", i)
		}
		for _, s := range b.Seqs[i] {
			if s < 0 || int(s) >= nSeqMax {
				return fmt.Errorf("batch: token %d: sequence id %d outside [0, %d)", i, s, nSeqMax)
			}
			if b.seenAt[s] == int32(i+1) {
				return fmt.Errorf("batch: token %d: sequence id %d listed twice", i, s)
			}
			b.seenAt[s] = int32(i + 1)
			if b.lastPos[s] >= p {
				return fmt.Errorf("batch: token %d: position %d in sequence %d does not follow position %d of an earlier token",
					i, p, s, b.lastPos[s])
			}
			b.lastPos[s] = p
		}
	}
	return nil
}

// UBatch is a micro-batch: a contiguous run of a Batch's tokens, starting at batch index Start.
// Its slices are views into the Batch (no copy), valid until the Batch is modified.
type UBatch struct {
	Start  int
	Tokens []int32
	Pos    []int32
	Seqs   [][]int32
	Logits []bool
	Hidden []bool  // a view of Batch.Hidden; empty when the batch has none
	Slots  []int32 // the tokens' KV cells, a view of Batch.KV.Slots; nil without KV
}

// Len is the number of tokens in the micro-batch.
func (u *UBatch) Len() int { return len(u.Tokens) }

// Split cuts the batch, in order, into micro-batches of at most nUBatch tokens (nUBatch <= 0 means
// no limit: one micro-batch), appended to dst[:0], which is returned. The views are capped so an
// append to one of them cannot overwrite the next. Slices shorter than Tokens (a batch that would
// fail Validate) yield shorter views rather than a panic.
func (b *Batch) Split(nUBatch int, dst []UBatch) []UBatch {
	dst = dst[:0]
	n := len(b.Tokens)
	if nUBatch <= 0 {
		nUBatch = max(n, 1)
	}
	for lo := 0; lo < n; lo += nUBatch {
		hi := min(lo+nUBatch, n)
		dst = append(dst, UBatch{
			Start:  lo,
			Tokens: view(b.Tokens, lo, hi),
			Pos:    view(b.Pos, lo, hi),
			Seqs:   view(b.Seqs, lo, hi),
			Logits: view(b.Logits, lo, hi),
			Hidden: view(b.Hidden, lo, hi),
			Slots:  b.slots(lo, hi),
		})
	}
	return dst
}

func (b *Batch) slots(lo, hi int) []int32 {
	if b.KV == nil {
		return nil
	}
	return view(b.KV.Slots, lo, hi)
}

// view is s[lo:hi:hi] clamped to len(s).
func view[T any](s []T, lo, hi int) []T {
	hi = min(hi, len(s))
	lo = min(lo, hi)
	return s[lo:hi:hi]
}

// OutputRows maps each token index to its row in the logits output, in token order, or -1 when
// its logits are not wanted. It reuses dst's capacity and returns the map and the number of rows.
func (b *Batch) OutputRows(dst []int32) (rows []int32, n int) {
	rows = dst[:0]
	for i := range b.Tokens {
		if i < len(b.Logits) && b.Logits[i] {
			rows = append(rows, int32(n))
			n++
		} else {
			rows = append(rows, -1)
		}
	}
	return rows, n
}
