package engine

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"ubatch/batch"
)

// hybridFake is a fake hybrid model: each sequence id's recurrent state is a hash of every token
// it consumed, in order, and the greedy successor of a token is read from the state after it.
// So a state that missed a token, saw one twice, or was not cleared or restored as the engine's
// bookkeeping says, gives another text. A token at a position other than the count of tokens
// its state consumed is a Decode error: the bookkeeping lost track.
type hybridFake struct {
	*fakeDecoder
	states []fakeState
	snaps  []fakeState
}

type fakeState struct {
	h uint64
	n int32 // tokens consumed
}

func (s fakeState) eat(tok int32) fakeState {
	h := (s.h ^ uint64(tok+1)) * 0x100000001b3
	return fakeState{h: h ^ h>>29, n: s.n + 1}
}

func (s fakeState) next() int32 { return int32(s.h % vocab) }

func newHybridFake(t *testing.T, blocks, blockSize, seqs int) *hybridFake {
	return &hybridFake{fakeDecoder: newFake(t, blocks, blockSize, seqs), states: make([]fakeState, seqs)}
}

func (f *hybridFake) Recurrent() bool            { return true }
func (f *hybridFake) StateBytes() int            { return 16 }
func (f *hybridFake) StateClear(seq int)         { f.states[seq] = fakeState{} }
func (f *hybridFake) StateCopy(dst, src int)     { f.states[dst] = f.states[src] }
func (f *hybridFake) SnapshotSave(slot, seq int) { f.snaps[slot] = f.states[seq] }
func (f *hybridFake) SnapshotLoad(seq, slot int) { f.states[seq] = f.snaps[slot] }
func (f *hybridFake) SnapshotRead(slot int, dst []byte) {
	binary.LittleEndian.PutUint64(dst, f.snaps[slot].h)
	binary.LittleEndian.PutUint64(dst[8:], uint64(f.snaps[slot].n))
}
func (f *hybridFake) SnapshotWrite(slot int, src []byte) error {
	f.snaps[slot] = fakeState{h: binary.LittleEndian.Uint64(src), n: int32(binary.LittleEndian.Uint64(src[8:]))}
	return nil
}
func (f *hybridFake) ReserveSnapshots(n int) error { f.snaps = make([]fakeState, n); return nil }

func (f *hybridFake) Decode(b *batch.Batch) error {
	if err := checkSchedule(b, f.cfg.MaxSeqs); err != nil {
		return err
	}
	f.logits = f.logits[:0]
	for i := range b.Len() {
		seq := b.Seqs[i][0]
		if len(b.Seqs[i]) != 1 {
			return fmt.Errorf("hybrid fake: token %d belongs to %d sequences", i, len(b.Seqs[i]))
		}
		st := f.states[seq]
		if st.n != b.Pos[i] {
			return fmt.Errorf("hybrid fake: sequence %d's state consumed %d tokens, the batch gives it position %d", seq, st.n, b.Pos[i])
		}
		f.states[seq] = st.eat(b.Tokens[i])
		row := make([]float32, vocab)
		row[f.states[seq].next()] = 10
		f.logits = append(f.logits, row)
	}
	time.Sleep(f.delay)
	return nil
}

// hybridExpected is prompt's greedy continuation under the fake hybrid model.
func hybridExpected(prompt []int32, n int) []int32 {
	var st fakeState
	for _, tok := range prompt {
		st = st.eat(tok)
	}
	var out []int32
	for range n {
		tok := st.next()
		out = append(out, tok)
		st = st.eat(tok)
	}
	return out
}

// TestHybridScheduling: the engine keeps a hybrid model's recurrent states right through
// continuous batching, prompt chunks cut at snapshot boundaries, prefix hits resumed from
// snapshots, and preemption by recompute; each text equals the model's sequential one.
func TestHybridScheduling(t *testing.T) {
	shared := prompt(36, 3) // 9 blocks of 4: the first prompt's last full block ends there
	tests := []struct {
		name       string
		blocks     int
		stateCache int64
		prompts    [][]int32
		hits       int // 1: prefix hits must happen, -1: must not (no snapshots), 0: either
		// preempt submits the last prompt at PriorityHigh once the others run: it must preempt.
		preempt bool
	}{
		{name: "distinct prompts", blocks: 256, prompts: [][]int32{prompt(9, 1), prompt(30, 2), prompt(17, 4), prompt(5, 5), prompt(44, 6), prompt(23, 7)}},
		{name: "shared prefix, snapshots", blocks: 256, hits: 1, prompts: [][]int32{
			append(slices.Clone(shared), 1, 2, 3), append(slices.Clone(shared), 4, 5), append(slices.Clone(shared), 6, 7, 8, 9), append(slices.Clone(shared), 10)}},
		{name: "shared prefix, no snapshots", blocks: 256, stateCache: -1, hits: -1, prompts: [][]int32{
			append(slices.Clone(shared), 1, 2, 3), append(slices.Clone(shared), 4, 5)}},
		{name: "high priority preempts", blocks: 40, preempt: true, prompts: [][]int32{
			prompt(30, 11), prompt(31, 12), prompt(29, 13), prompt(33, 14), prompt(30, 15), prompt(60, 16)}},
		{name: "tight KV, shared prefix", blocks: 40, prompts: [][]int32{
			append(slices.Clone(shared), 1), append(slices.Clone(shared), 2), append(slices.Clone(shared), 3), append(slices.Clone(shared), 4),
			append(slices.Clone(shared), 5), append(slices.Clone(shared), 6)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := newHybridFake(t, tc.blocks, 4, 8)
			d.delay = 200 * time.Microsecond // the low ones still run when the high one comes
			e, err := New(d, Limits{NCtx: tc.blocks * 4, NSeqMax: 8, NBatch: 64, Vocab: vocab},
				Config{BatchSize: 32, ChunkSize: 8, StateCacheBytes: tc.stateCache})
			if err != nil {
				t.Fatal(err)
			}
			// Short requests first lower the admission watermark's growth estimate, so that a
			// tight pool admits more than it holds and preempts.
			var warm []*Stream
			for i := range 4 {
				st, err := e.Submit(context.Background(), Request{Prompt: []int32{int32(i + 1), 9}, MaxTokens: 1, Sampling: greedy()})
				if err != nil {
					t.Fatal(err)
				}
				warm = append(warm, st)
			}
			run(t, e)
			for _, st := range warm {
				collect(t, st)
			}
			var streams []*Stream
			var firsts [][]int32 // a token read from each stream before the high one was sent
			for i, p := range tc.prompts {
				req := Request{Prompt: p, MaxTokens: 24, Sampling: greedy()}
				if tc.preempt && i == len(tc.prompts)-1 {
					o, err := streams[0].Recv(context.Background())
					if err != nil || o.Done {
						t.Fatalf("the first stream: %+v, %v", o, err)
					}
					firsts = append(firsts, []int32{o.Token})
					req.Priority = PriorityHigh
				}
				st, err := e.Submit(context.Background(), req)
				if err != nil {
					t.Fatal(err)
				}
				streams = append(streams, st)
			}
			cached := 0
			for i, st := range streams {
				got, last := collect(t, st)
				if i < len(firsts) {
					got = append(firsts[i], got...)
				}
				if last.Finish == FinishError {
					t.Fatalf("prompt %d: %v", i, last.Err)
				}
				if want := hybridExpected(tc.prompts[i], 24); !slices.Equal(got, want) {
					t.Errorf("prompt %d: %v, want %v", i, got, want)
				}
				cached += last.Usage.CachedTokens
			}
			st := e.Stats()
			if (tc.hits > 0 && cached == 0) || (tc.hits < 0 && cached > 0) {
				t.Errorf("%d prompt tokens cached (stats %+v): want hits %d", cached, st.States, tc.hits)
			}
			if tc.preempt && st.Preemptions == 0 {
				t.Errorf("no preemption with %d blocks", tc.blocks)
			}
			t.Logf("cached %d, preemptions %d, snapshots %+v", cached, st.Preemptions, st.States)
		})
	}
}

// recurrentFake is a decoder of a hybrid model that says it keeps a recurrent state per
// sequence; stateFake can also clear and copy it.
type recurrentFake struct{ *fakeDecoder }

func (recurrentFake) Recurrent() bool { return true }

type stateFake struct{ recurrentFake }

func (stateFake) StateBytes() int                 { return 64 }
func (stateFake) StateClear(int)                  {}
func (stateFake) StateCopy(int, int)              {}
func (stateFake) ReserveSnapshots(int) error      { return nil }
func (stateFake) SnapshotSave(int, int)           {}
func (stateFake) SnapshotLoad(int, int)           {}
func (stateFake) SnapshotRead(int, []byte)        {}
func (stateFake) SnapshotWrite(int, []byte) error { return nil }

// TestNewRecurrent: a decoder with a recurrent state is scheduled only when the engine can
// manage the state, and never with a context shift, which a state cannot follow.
func TestNewRecurrent(t *testing.T) {
	lim := Limits{NCtx: 32, NSeqMax: 2, NBatch: 8, Vocab: vocab}
	tests := []struct {
		name string
		dec  Decoder
		cfg  Config
		want string // "" for success
	}{
		{name: "no state operations", dec: recurrentFake{newFake(t, 8, 4, 2)}, want: "has no StateClear"},
		{name: "context shift", dec: stateFake{recurrentFake{newFake(t, 8, 4, 2)}}, cfg: Config{ContextShift: true}, want: "context shift is refused"},
		{name: "hybrid", dec: stateFake{recurrentFake{newFake(t, 8, 4, 2)}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e, err := New(tc.dec, lim, tc.cfg)
			switch {
			case tc.want == "" && (err != nil || !e.Recurrent()):
				t.Fatalf("New: %v, want a hybrid engine", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("New: %v, want an error saying %q", err, tc.want)
			}
		})
	}
}
