package router

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"sync/atomic"
	"time"
)

var (
	errFirstByte = errors.New("the node sent no byte within the first-byte timeout")
	errIdle      = errors.New("the node sent nothing for too long")
	errTooLarge  = errors.New("the node's response is larger than the limit")
)

// watchdog cancels one upstream request when the node is silent for too long: FirstByteTimeout
// until the first body byte, then StreamIdleTimeout between reads. The two are apart because a
// node may queue a request for minutes before its first token, while tokens, once flowing, come
// every few tens of milliseconds.
type watchdog struct {
	t       *time.Timer
	idle    time.Duration
	started atomic.Bool // a body byte has arrived: the timer now measures idle gaps
}

// newWatchdog arms the first-byte timer; it calls cancel with errFirstByte or errIdle, which
// context.Cause then reports. Stop it when the request is over.
func newWatchdog(firstByte, idle time.Duration, cancel context.CancelCauseFunc) *watchdog {
	wd := &watchdog{idle: idle}
	wd.t = time.AfterFunc(firstByte, func() {
		if wd.started.Load() {
			cancel(errIdle)
		} else {
			cancel(errFirstByte)
		}
	})
	return wd
}

// pause stops the clock while the router writes to its client: a slow client is not the node's
// silence. resume restarts it for a full idle gap.
func (wd *watchdog) pause()  { wd.t.Stop() }
func (wd *watchdog) resume() { wd.t.Reset(wd.idle) }
func (wd *watchdog) stop()   { wd.t.Stop() }

// watched is a node's response body whose every read that returns data restarts the watchdog
// for an idle gap.
type watched struct {
	r  io.Reader
	wd *watchdog
}

func (b watched) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if n > 0 {
		b.wd.started.Store(true)
		b.wd.t.Reset(b.wd.idle)
	}
	return n, err
}

// readCapped reads r to its end and returns what it read, or errTooLarge as soon as r has more
// than limit bytes; the buffer never grows beyond limit bytes and at most limit+1 bytes are
// consumed from r. hint is the expected length (a Content-Length; negative when unknown): a
// hint above limit fails at once, without reading. limit must be positive.
func readCapped(r io.Reader, hint, limit int64) ([]byte, error) {
	if hint > limit {
		return nil, errTooLarge
	}
	size := int64(512)
	if hint >= 0 {
		size = hint // exact: a body as long as announced needs no growth
	}
	buf := make([]byte, 0, min(size, limit))
	var one [1]byte
	for {
		if len(buf) == cap(buf) {
			// Full: read one byte apart before growing, so that a body that ends exactly here (the
			// usual case with a Content-Length) costs no larger buffer, and one over the limit is
			// caught without holding more than limit bytes.
			n, err := io.ReadFull(r, one[:])
			if n == 0 {
				if errors.Is(err, io.EOF) {
					return buf, nil
				}
				return nil, err
			}
			if int64(len(buf)) >= limit {
				return nil, errTooLarge
			}
			grown := make([]byte, len(buf), min(max(2*int64(cap(buf)), 512), limit))
			copy(grown, buf)
			buf = append(grown, one[0])
			continue
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// retryable reports whether a node's 5xx answer (status, body read whole) may be sent to another
// node. 502, 503 and 504 say the node could not take the request (shutting down, too many
// connections, a gateway in front of it failing): another node may well serve it. Any other 5xx
// with an OpenAI-shaped error body is the node's verdict on this very request (the node
// validated it, ran it and failed); another node would fail it the same way, so the client gets
// it as is, and retrying would only let one bad request knock on every node. A 5xx without that
// body did not come from the node's handler (a crash page, a proxy's HTML): retried.
func retryable(status int, body []byte) bool {
	switch status {
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return !isOpenAIError(body)
}

// isOpenAIError reports whether body is OpenAI's error object: {"error": {"message": "..."}}.
func isOpenAIError(body []byte) bool {
	var e struct {
		Error *struct {
			Message *string `json:"message"`
		} `json:"error"`
	}
	return json.Unmarshal(body, &e) == nil && e.Error != nil && e.Error.Message != nil
}
