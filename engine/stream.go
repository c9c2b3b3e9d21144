package engine

import (
	"context"
	"io"
	"sync"
	"sync/atomic"
)

// Stream delivers the outputs of the requests of one Submit call, interleaved in the order the
// engine produced them; Output.Seq says which request each belongs to. The engine never blocks
// on a slow reader: outputs are buffered until Recv takes them.
type Stream struct {
	mu     sync.Mutex
	buf    []Output
	open   int // requests whose final output has not been pushed
	notify chan struct{}
	seqs   []seqCancel // by Output.Seq
}

// seqCancel is the cancellation of one request of a stream, set by the reader's goroutine and
// read by the engine's.
type seqCancel struct {
	cancelled atomic.Bool
	reason    atomic.Value // FinishReason given to Cancel
}

func newStream(n int) *Stream {
	return &Stream{notify: make(chan struct{}, 1), open: n, seqs: make([]seqCancel, n)}
}

func (s *Stream) push(o Output) {
	s.mu.Lock()
	s.buf = append(s.buf, o)
	if o.Done {
		s.open--
	}
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// Recv returns the next output, waiting for it; io.EOF after the final output of every request
// was returned, ctx.Err() when ctx ends first.
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
		done := s.open == 0
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

// Cancel asks the engine to stop every request of the stream at its next step and free its KV
// blocks; each final output then carries reason (FinishCancelled when the client left,
// FinishStop when the caller found a stop string).
func (s *Stream) Cancel(reason FinishReason) {
	for i := range s.seqs {
		s.CancelSeq(i, reason)
	}
}

// CancelSeq is Cancel for the request with Output.Seq seq alone; a seq outside the stream's
// requests is ignored.
func (s *Stream) CancelSeq(seq int, reason FinishReason) {
	if seq < 0 || seq >= len(s.seqs) {
		return
	}
	c := &s.seqs[seq]
	c.reason.CompareAndSwap(nil, reason)
	c.cancelled.Store(true)
}

// cancelled reports whether request seq was cancelled, and why.
func (s *Stream) cancelled(seq int) (FinishReason, bool) {
	c := &s.seqs[seq]
	if !c.cancelled.Load() {
		return "", false
	}
	if r, ok := c.reason.Load().(FinishReason); ok {
		return r, true
	}
	return FinishCancelled, true
}
