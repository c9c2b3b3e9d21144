package runner

import (
	"context"
	"fmt"

	"ubatch/batch"
)

// Loop is the decode loop of everything that decodes without an engine (the run, batched,
// bench and logits commands, tests): prompts fed in chunks of n_batch, then steps that decode
// one token for every live sequence, each token chosen by a callback from the output of the
// sequence's last decoded token. It decodes through a Session, which schedules every batch on
// the session's KV manager, so the Runtime must not belong to an engine. Sequence ids
// are [0, n) of NewLoop; each has its own next position. A Loop reuses its batch: once warm, a
// step allocates nothing.
type Loop struct {
	s    *Session
	c    *Runtime // s's
	b    batch.Batch
	ids  []int32 // 0, 1, ..., n-1: a token's sequence list is a slice of it
	row  []int   // each sequence's token index in the last batch that has its output, -1: none
	pos  []int32 // each sequence's next position
	live []bool
	// Runs counts the decodes of Step and Generate since the Loop was made or Reset.
	Runs int
}

// Next chooses sequence seq's next token from out, the output (logits, or the hidden state in
// an Embeddings context) of its last decoded token, nil before it has one. ok false ends the
// sequence (tok is not decoded); an error stops the loop.
type Next func(seq int, out []float32) (tok int32, ok bool, err error)

// NewLoop makes a loop of n sequences (at most the context's NSeqMax and its NBatch, since a
// step decodes one token of each in one batch) over s; each sequence goes on from what s's KV
// manager holds of it (none on a fresh Session).
func NewLoop(s *Session, n int) (*Loop, error) {
	c := s.c
	if n < 1 || n > c.opts.NSeqMax || n > c.opts.NBatch {
		return nil, fmt.Errorf("runner: a loop of %d sequences on a context of %d (NSeqMax) with batches of %d (NBatch)", n, c.opts.NSeqMax, c.opts.NBatch)
	}
	l := &Loop{s: s, c: c, ids: make([]int32, n), row: make([]int, n), pos: make([]int32, n), live: make([]bool, n)}
	kv := s.kv
	for i := range l.ids {
		l.ids[i], l.row[i], l.pos[i], l.live[i] = int32(i), -1, int32(kv.SeqLen(i)), true
	}
	return l, nil
}

// Reset empties the KV cache of the loop's Session (and its sequences' recurrent states) and
// starts every sequence again at position 0, live, with no output.
func (l *Loop) Reset() {
	l.s.kv.Clear()
	for s := range l.c.opts.NSeqMax {
		l.c.StateClear(s)
	}
	for i := range l.ids {
		l.row[i], l.pos[i], l.live[i] = -1, 0, true
	}
	l.Runs = 0
}

// Session returns the Session the loop decodes through.
func (l *Loop) Session() *Session { return l.s }

// Pos is sequence seq's next position: the tokens it has in the KV cache.
func (l *Loop) Pos(seq int) int32 { return l.pos[seq] }

// Out is the output of sequence seq's last decoded token, nil when it asked for none; it is
// overwritten by the next decode.
func (l *Loop) Out(seq int) []float32 {
	if l.row[seq] < 0 {
		return nil
	}
	if l.c.opts.Embeddings {
		return l.c.Embedding(l.row[seq])
	}
	return l.c.Logits(l.row[seq])
}

// Prompt decodes toks for the sequences seqs (ids of this loop, all at the same position: each
// token belongs to all of them, so a shared prompt is computed once) in chunks of n_batch. With
// each nil only the last token asks for its output (Out); otherwise every token does, and
// each(i, out) gets token i's output after its chunk.
func (l *Loop) Prompt(seqs []int32, toks []int32, each func(i int, out []float32)) error {
	if len(seqs) == 0 || len(toks) == 0 {
		return nil
	}
	pos0 := l.pos[seqs[0]]
	for _, s := range seqs {
		if l.pos[s] != pos0 {
			return fmt.Errorf("runner: a shared prompt for sequences at positions %d and %d", pos0, l.pos[s])
		}
	}
	if l.c.rec != nil && len(seqs) > 1 {
		return l.promptCopied(seqs, toks, each)
	}
	nb := l.c.opts.NBatch
	for start := 0; start < len(toks); start += nb {
		end := min(start+nb, len(toks))
		l.b.Clear()
		for i := start; i < end; i++ {
			l.b.Add(toks[i], pos0+int32(i), seqs, each != nil || i == len(toks)-1)
		}
		if err := l.s.Decode(&l.b); err != nil {
			return err
		}
		for i := range end - start {
			if each != nil {
				each(start+i, l.out(i))
			}
		}
	}
	for _, s := range seqs {
		l.pos[s] = pos0 + int32(len(toks))
		l.row[s] = (len(toks) - 1) % nb
	}
	return nil
}

// promptCopied is Prompt of a prompt shared by several fresh sequences of a hybrid model, whose
// tokens may belong to one sequence only: it decodes the prompt for seqs[0], then copies that
// sequence's KV cells and recurrent state to the others.
func (l *Loop) promptCopied(seqs []int32, toks []int32, each func(i int, out []float32)) error {
	if l.pos[seqs[0]] != 0 {
		return fmt.Errorf("runner: a prompt shared by %d sequences at position %d of a hybrid model: share a prompt from position 0 only", len(seqs), l.pos[seqs[0]])
	}
	if err := l.Prompt(seqs[:1], toks, each); err != nil {
		return err
	}
	for _, s := range seqs[1:] {
		if err := l.s.kv.SeqCopy(int(seqs[0]), int(s), 0, -1); err != nil {
			return err
		}
		l.c.StateCopy(int(s), int(seqs[0]))
		l.pos[s], l.row[s] = l.pos[seqs[0]], l.row[seqs[0]]
	}
	return nil
}

// Prompts decodes toks[s] for each sequence s of the loop (len(toks) at most its sequences;
// empty ones are skipped), packed together in chunks of n_batch; only each prompt's last token
// asks for its output.
func (l *Loop) Prompts(toks [][]int32) error {
	if len(toks) > len(l.ids) {
		return fmt.Errorf("runner: %d prompts for a loop of %d sequences", len(toks), len(l.ids))
	}
	nb := l.c.opts.NBatch
	l.b.Clear()
	for s, p := range toks {
		for i, tok := range p {
			if l.b.Len() == nb {
				if err := l.s.Decode(&l.b); err != nil {
					return err
				}
				l.b.Clear()
			}
			l.b.Add(tok, l.pos[s]+int32(i), l.ids[s:s+1], i == len(p)-1)
		}
		l.pos[s] += int32(len(p))
	}
	if l.b.Len() == 0 {
		return nil
	}
	if err := l.s.Decode(&l.b); err != nil {
		return err
	}
	// Only the last chunk's outputs are left to read: a prompt that ended earlier has none.
	for s := range toks {
		l.row[s] = -1
	}
	for i := range l.b.Len() {
		if l.b.Logits[i] {
			l.row[l.b.Seqs[i][0]] = i
		}
	}
	return nil
}

// Step decodes one token for every live sequence whose next position is inside the context:
// next chooses it from the sequence's last output; a sequence that ends (ok false, or a full
// context) is not decoded again. It returns the tokens decoded: 0 when every sequence ended.
func (l *Loop) Step(next Next) (int, error) {
	return l.step(next, true)
}

// step asks next for every live sequence's token and decodes them when decode is set.
func (l *Loop) step(next Next, decode bool) (int, error) {
	l.b.Clear()
	for s := range l.ids {
		if !l.live[s] {
			continue
		}
		if int(l.pos[s]) >= l.c.opts.NCtx {
			l.live[s] = false
			continue
		}
		tok, ok, err := next(s, l.Out(s))
		if err != nil {
			return 0, err
		}
		if !ok {
			l.live[s] = false
			continue
		}
		if !decode {
			continue
		}
		l.row[s] = l.b.Len()
		l.b.Add(tok, l.pos[s], l.ids[s:s+1], true)
	}
	if l.b.Len() == 0 {
		return 0, nil
	}
	if err := l.s.Decode(&l.b); err != nil {
		return 0, err
	}
	for i := range l.b.Len() {
		l.pos[l.b.Seqs[i][0]]++
	}
	l.Runs++
	return l.b.Len(), nil
}

// Generate is the generation phase after a prompt: up to n rounds (n < 0: until every
// sequence ends) in which next chooses a token for every live sequence and the tokens are
// decoded together, but for the last round's, which nothing would read. It stops early when
// every sequence ended or ctx ends (not an error).
func (l *Loop) Generate(ctx context.Context, n int, next Next) error {
	for round := 0; n < 0 || round < n; round++ {
		if ctx.Err() != nil {
			return nil
		}
		decoded, err := l.step(next, round != n-1)
		if err != nil {
			return err
		}
		if decoded == 0 && !l.anyLive() {
			return nil
		}
	}
	return nil
}

func (l *Loop) anyLive() bool {
	for _, v := range l.live {
		if v {
			return true
		}
	}
	return false
}

// out is batch token i's output from the last decode.
func (l *Loop) out(i int) []float32 {
	if l.c.opts.Embeddings {
		return l.c.Embedding(i)
	}
	return l.c.Logits(i)
}
