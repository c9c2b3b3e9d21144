package server

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/netip"
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

// limitListener hands out at most max connections at a time, and at most clients.max (when
// clients is not nil) from one client address (see clientlimit.go; connections of trusted proxies are not counted per client).
// A connection beyond the global cap gets the 503 response refusal, one beyond its client's cap
// the 429 clientRefusal, and is closed; Accept goes on waiting for the next one. A connection may
// leave the global cap while it stays open (leaveConnectionCap): GET /live streams do, having a
// cap of their own.
type limitListener struct {
	net.Listener
	max           int64
	open          atomic.Int64
	refusing      atomic.Int64
	refusal       []byte
	clients       *clientCounts
	clientRefusal []byte
	trusted       []netip.Prefix
	logger        *slog.Logger
	full          atomic.Bool // whether the last connection was refused, to log a full server once
}

// newLimitListener caps ln at max connections (positive) and perClient per client address, not
// counting per client the connections from trusted; perClient 0 means no per-client cap.
func newLimitListener(ln net.Listener, max, perClient int, trusted []netip.Prefix, logger *slog.Logger) *limitListener {
	l := &limitListener{Listener: ln, max: int64(max), refusal: tooManyConnections(max), trusted: trusted, logger: logger}
	if perClient > 0 {
		l.clients, l.clientRefusal = newClientCounts(perClient, "connections", logger), tooManyClientConnections(perClient)
	}
	return l
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		// The client's cap first: a client over it must not take a global slot even for a moment.
		var client netip.Addr
		perClient := false
		if l.clients != nil {
			client, perClient = connClient(c, l.trusted)
		}
		if perClient && !l.clients.acquire(client) {
			l.refuse(c, l.clientRefusal)
			continue
		}
		if l.open.Add(1) <= l.max {
			if l.full.Swap(false) {
				l.logger.Info("accepting connections again", "open", l.open.Load())
			}
			cc := &countedConn{Conn: c, l: l, client: client, perClient: perClient}
			cc.holds.Store(true)
			return cc, nil
		}
		l.open.Add(-1)
		if perClient {
			l.clients.release(client)
		}
		if !l.full.Swap(true) {
			l.logger.Warn("connection limit reached: new connections get 503", "max_connections", l.max)
		}
		l.refuse(c, l.refusal)
	}
}

// refuse writes the response refusal and closes c. It half-closes first and reads what the client
// sends until it closes too (or refuseLinger passes): closing a socket with unread data resets the
// connection, and the client might then never read the refusal.
func (l *limitListener) refuse(c net.Conn, refusal []byte) {
	if l.refusing.Add(1) > maxRefusing {
		l.refusing.Add(-1)
		c.Close()
		return
	}
	go func() {
		defer l.refusing.Add(-1)
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(refuseLinger))
		if _, err := c.Write(refusal); err != nil {
			return
		}
		if tc, ok := c.(interface{ CloseWrite() error }); ok {
			_ = tc.CloseWrite()
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(c, 64<<10))
	}()
}

// countedConn gives its slots back when closed (once, however often Close is called).
type countedConn struct {
	net.Conn
	l         *limitListener
	client    netip.Addr
	perClient bool        // whether it counts against its client's cap
	holds     atomic.Bool // whether it holds a slot of the global cap
	once      sync.Once
}

// leaveCap gives back c's slot of the global cap while c stays open (once; Close then gives back
// only its client's count).
func (c *countedConn) leaveCap() {
	if c.holds.Swap(false) {
		c.l.open.Add(-1)
	}
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.leaveCap()
		if c.perClient {
			c.l.clients.release(c.client)
		}
	})
	return err
}

// connKey is the request-context key of the connection a request arrived on (Serve's ConnContext).
type connKey struct{}

// leaveConnectionCap takes the connection of the request whose context is ctx out of the global
// connection cap (--max-connections), for long-lived requests that another cap bounds. The
// connection must not carry another request after this one: the caller sends Connection: close.
// It does nothing for a request not served by Serve.
func leaveConnectionCap(ctx context.Context) {
	if c, ok := ctx.Value(connKey{}).(*countedConn); ok {
		c.leaveCap()
	}
}
