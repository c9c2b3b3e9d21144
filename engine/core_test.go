package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// memRecorder is a seqMemory that checks the core's calls against a sequence's life: admitted
// once per admission with an id no live sequence holds, released once for each admission
// before the id is freed. It refuses every refuseEvery-th admission (0: none).
type memRecorder struct {
	mu          sync.Mutex
	live        map[int32]*sequence
	admits      int
	preempted   int
	refuseEvery int
	refused     int
	errs        []string
}

var errRefused = errors.New("memRecorder: no room for this sequence's state")

func (m *memRecorder) admitted(s *sequence) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.admits++
	if m.refuseEvery > 0 && m.admits%m.refuseEvery == 0 {
		m.refused++
		return errRefused
	}
	if s.kvSeq < 0 {
		m.errs = append(m.errs, "admitted without an id")
	} else if o := m.live[s.kvSeq]; o != nil {
		m.errs = append(m.errs, fmt.Sprintf("id %d admitted twice", s.kvSeq))
	}
	m.live[s.kvSeq] = s
	return nil
}

func (m *memRecorder) released(s *sequence, preempted bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.live[s.kvSeq] != s {
		m.errs = append(m.errs, fmt.Sprintf("id %d released, not held by that sequence", s.kvSeq))
	}
	delete(m.live, s.kvSeq)
	if preempted {
		m.preempted++
	}
}

// TestSeqMemoryFollowsSequences: a per-sequence memory component joined to Engine.mem sees
// every admission and every release, preemptions marked, and none twice; a component that
// refuses an admission fails that request alone, with its error, and the id goes back.
func TestSeqMemoryFollowsSequences(t *testing.T) {
	tests := []struct {
		name          string
		seqs          int
		refuseEvery   int
		first, second Priority // of the first four requests, and of the four sent once they run
		preempts      bool
	}{
		{name: "roomy", seqs: 8},
		{name: "higher priority preempts", seqs: 4, first: PriorityLow, second: PriorityHigh, preempts: true},
		{name: "refusing", seqs: 8, refuseEvery: 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := newFake(t, 64, 4, tc.seqs)
			d.delay = 200 * time.Microsecond // keep the requests overlapping
			e, err := New(d, Limits{NCtx: 256, NSeqMax: tc.seqs, NBatch: 64, Vocab: vocab}, Config{BatchSize: 32, ChunkSize: 8, MaxQueue: 32})
			if err != nil {
				t.Fatal(err)
			}
			rec := &memRecorder{live: map[int32]*sequence{}, refuseEvery: tc.refuseEvery}
			e.mem = append(e.mem, rec)
			run(t, e)
			var wg sync.WaitGroup
			var mu sync.Mutex
			failed := 0
			send := func(i int, pri Priority, started *sync.WaitGroup) {
				defer wg.Done()
				p := prompt(3+i*2, int32(i))
				s, err := e.Submit(context.Background(), Request{Prompt: p, MaxTokens: 12, Sampling: greedy(), Priority: pri})
				if err != nil {
					t.Error(err)
					started.Done()
					return
				}
				var got []int32
				var last Output
				for first := true; ; first = false {
					o, err := s.Recv(context.Background())
					if first {
						started.Done()
					}
					if err != nil {
						t.Error(err)
						return
					}
					if o.Done {
						last = o
						break
					}
					got = append(got, o.Token)
				}
				if errors.Is(last.Err, errRefused) {
					mu.Lock()
					failed++
					mu.Unlock()
					return
				}
				if last.Err != nil || len(got) != 12 {
					t.Errorf("request %d: %d tokens, final %+v", i, len(got), last)
				}
			}
			var started, ignored sync.WaitGroup
			ignored.Add(4)
			started.Add(4)
			for i := range 4 {
				wg.Add(1)
				go send(i, tc.first, &started)
			}
			started.Wait() // each of the first four has its first output
			for i := 4; i < 8; i++ {
				wg.Add(1)
				go send(i, tc.second, &ignored)
			}
			wg.Wait()
			waitIdle(t, e)
			rec.mu.Lock()
			defer rec.mu.Unlock()
			for _, msg := range rec.errs {
				t.Error(msg)
			}
			if len(rec.live) != 0 {
				t.Errorf("%d sequences never released", len(rec.live))
			}
			if st := e.Stats(); uint64(rec.preempted) != st.Preemptions || (st.Preemptions > 0) != tc.preempts {
				t.Errorf("%d releases marked preempted, %d preemptions; want preemptions: %v", rec.preempted, st.Preemptions, tc.preempts)
			}
			if failed != rec.refused || (tc.refuseEvery > 0) != (failed > 0) {
				t.Errorf("%d requests failed with the component's error, it refused %d", failed, rec.refused)
			}
			if st := e.Stats(); st.KV.Used != 0 {
				t.Errorf("%d KV blocks still used", st.KV.Used)
			}
		})
	}
}
