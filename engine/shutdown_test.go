package engine

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"
)

// TestSubmitRacingShutdown submits from several goroutines while Run shuts down: every Submit
// must either fail with ErrClosed (or ErrQueueFull) or return a stream that finishes. A request
// sent after shutdown drained the queue used to stay there, and its stream never ended.
func TestSubmitRacingShutdown(t *testing.T) {
	tests := []struct {
		name       string
		submitters int
		seqs       int
	}{
		{"one submitter", 1, 1},
		{"many submitters", 6, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			end := time.Now().Add(150 * time.Millisecond)
			for iter := 0; iter < 20 || time.Now().Before(end); iter++ {
				d := newFake(t, 16, 4, tc.seqs)
				e, err := New(d, Limits{NCtx: 64, NSeqMax: tc.seqs, NBatch: 64, Vocab: vocab}, Config{MaxQueue: 64})
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				go e.Run(ctx)
				var mu sync.Mutex
				var streams []*Stream
				var wg sync.WaitGroup
				for range tc.submitters {
					wg.Go(func() {
						for range 8 {
							s, err := e.Submit(context.Background(), Request{Prompt: prompt(3, 1), MaxTokens: 2, Sampling: greedy()})
							switch {
							case err == nil:
								mu.Lock()
								streams = append(streams, s)
								mu.Unlock()
							case !errors.Is(err, ErrClosed) && !errors.Is(err, ErrQueueFull):
								t.Errorf("submit: %v", err)
							}
						}
					})
				}
				cancel()
				wg.Wait()
				<-e.Done()
				for i, s := range streams {
					rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Second)
					for {
						_, err := s.Recv(rctx)
						if errors.Is(err, io.EOF) {
							break
						}
						if err != nil {
							rcancel()
							t.Fatalf("iteration %d: stream %d of %d never finished after shutdown (%d requests left in the queue): %v",
								iter, i, len(streams), len(e.incoming), err)
						}
					}
					rcancel()
				}
			}
		})
	}
}
