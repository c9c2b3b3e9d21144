package server

import (
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Refusing a connection takes one short-lived goroutine: at most maxRefusing run at once, and
// connections beyond that are closed without a response, so a flood costs bounded work.
const (
	maxRefusing  = 64
	refuseLinger = 500 * time.Millisecond
)

// limitListener hands out at most max connections at a time. A connection beyond the cap gets
// the 503 response refusal and is closed; Accept goes on waiting for the next one.
type limitListener struct {
	net.Listener
	max      int64
	open     atomic.Int64
	refusing atomic.Int64
	refusal  []byte
	logger   *slog.Logger
	full     atomic.Bool // whether the last connection was refused, to log a full server once
}

func newLimitListener(ln net.Listener, max int, logger *slog.Logger) *limitListener {
	return &limitListener{Listener: ln, max: int64(max), refusal: tooManyConnections(max), logger: logger}
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) <= l.max {
			if l.full.Swap(false) {
				l.logger.Info("accepting connections again", "open", l.open.Load())
			}
			return &countedConn{Conn: c, l: l}, nil
		}
		l.open.Add(-1)
		if !l.full.Swap(true) {
			l.logger.Warn("connection limit reached: new connections get 503", "max_connections", l.max)
		}
		l.refuse(c)
	}
}

// refuse writes the 503 and closes c. It half-closes first and reads what the client sends
// until it closes too (or refuseLinger passes): closing a socket with unread data resets the
// connection, and the client might then never read the 503.
func (l *limitListener) refuse(c net.Conn) {
	if l.refusing.Add(1) > maxRefusing {
		l.refusing.Add(-1)
		c.Close()
		return
	}
	go func() {
		defer l.refusing.Add(-1)
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(refuseLinger))
		if _, err := c.Write(l.refusal); err != nil {
			return
		}
		if tc, ok := c.(interface{ CloseWrite() error }); ok {
			_ = tc.CloseWrite()
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(c, 64<<10))
	}()
}

// countedConn gives its slot back when closed (once, however often Close is called).
type countedConn struct {
	net.Conn
	l    *limitListener
	once sync.Once
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.open.Add(-1) })
	return err
}
