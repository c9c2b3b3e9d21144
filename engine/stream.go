package engine

import (
	"context"
	"io"
	"sync"
	"sync/atomic"
)

// Stream delivers one request's outputs. The engine never blocks on a slow reader: outputs are
// buffered until Recv takes them.
type Stream struct {
	mu        sync.Mutex
	buf       []Output
	done      bool // the final output has been pushed
	notify    chan struct{}
	cancelled atomic.Bool
	reason    atomic.Value // FinishReason given to Cancel
}

func newStream() *Stream { return &Stream{notify: make(chan struct{}, 1)} }

func (s *Stream) push(o Output) {
	s.mu.Lock()
	s.buf = append(s.buf, o)
	s.done = s.done || o.Done
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// Recv returns the next output, waiting for it; io.EOF after the final output was returned,
// ctx.Err() when ctx ends first.
func (s *Stream) Recv(ctx context.Context) (Output, error) {
	for {
		s.mu.Lock()
		if len(s.buf) > 0 {
			o := s.buf[0]
			s.buf[0] = Output{}
			s.buf = s.buf[1:]
			s.mu.Unlock()
			return o, nil
		}
		done := s.done
		s.mu.Unlock()
		if done {
			return Output{}, io.EOF
		}
		select {
		case <-s.notify:
		case <-ctx.Done():
			return Output{}, ctx.Err()
		}
	}
}

// Cancel asks the engine to stop the request at its next step and free its KV blocks; the final
// output then carries reason (FinishCancelled when the client left, FinishStop when the caller
// found a stop string).
func (s *Stream) Cancel(reason FinishReason) {
	s.reason.CompareAndSwap(nil, reason)
	s.cancelled.Store(true)
}

func (s *Stream) cancelReason() FinishReason {
	if r, ok := s.reason.Load().(FinishReason); ok {
		return r
	}
	return FinishCancelled
}
