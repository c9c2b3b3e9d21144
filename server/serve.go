package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"time"
)

// Defaults of ServeConfig.
const (
	DefaultGrace          = 30 * time.Second
	DefaultReadTimeout    = 30 * time.Second
	DefaultWriteTimeout   = 30 * time.Second
	DefaultMaxConnections = 512
)

// cutWait is how long streams cut at the end of the grace period get to send their error event
// before their connections are closed regardless.
const cutWait = 2 * time.Second

// errShutdown is the cause of the request contexts that Serve cancels when the shutdown grace
// period is over; handlers report it to clients that are still there.
var errShutdown = errors.New("the server shut down before the request finished (it ran past the shutdown grace period): retry it")

// ServeConfig bounds what clients may hold on to. Zero fields take the defaults above.
type ServeConfig struct {
	// Grace is how long in-flight requests may run once Serve's context ends.
	Grace time.Duration
	// ReadTimeout bounds reading one request, headers and body, so that neither headers nor a
	// body that never end can hold a connection (a late body gets a 408). The deadline ends with
	// the body: net/http clears it when it starts watching the idle connection during the handler.
	ReadTimeout time.Duration
	// WriteTimeout bounds every write to a client: a response, or one event of a stream, each
	// write setting a new deadline, so a stream may last as long as it produces and a client that
	// stops reading is cut (its sequences cancelled) instead of holding KV blocks.
	WriteTimeout time.Duration
	// MaxConnections caps open connections, idle keep-alive ones included; beyond it a new
	// connection gets a 503 at once and is closed.
	MaxConnections int
	// MaxConnsPerClient caps the open connections of one client address (an IPv6 client's /64),
	// so that one client cannot take every slot of MaxConnections: beyond it a new connection
	// gets a 429 at once and is closed. Connections from TrustedProxies are not counted per
	// address; the requests in flight of each client are capped at the same number instead
	// (429), the client of a request from a trusted proxy being named by X-Forwarded-For.
	// /health and /metrics are exempt from the request cap. See clientlimit.go. 0 means no
	// per-client cap, as a router in front of nodes needs (`ubatch serve` defaults to
	// DefaultMaxConnsPerClient).
	MaxConnsPerClient int
	// TrustedProxies are the reverse proxies (nginx, a router) whose X-Forwarded-For is believed;
	// empty trusts none.
	TrustedProxies []netip.Prefix
	// Logger receives the server's warnings; nil means slog.Default().
	Logger *slog.Logger
}

func (c ServeConfig) withDefaults() ServeConfig {
	pick := func(v, d time.Duration) time.Duration {
		if v <= 0 {
			return d
		}
		return v
	}
	c.Grace = pick(c.Grace, DefaultGrace)
	c.ReadTimeout = pick(c.ReadTimeout, DefaultReadTimeout)
	c.WriteTimeout = pick(c.WriteTimeout, DefaultWriteTimeout)
	if c.MaxConnections <= 0 {
		c.MaxConnections = DefaultMaxConnections
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Serve serves h on ln until ctx ends, then shuts down gracefully: it stops accepting
// connections and waits up to cfg.Grace for in-flight requests (streams included) to finish.
// Requests still running then are cut: their contexts end (which cancels their engine sequences),
// streams end with an error event and other requests with a 503, and after a short wait for
// those to be written their connections are closed. Serve returns nil after a shutdown caused by
// ctx, or the error that stopped serving. The engine is the caller's to stop afterwards, once no
// request needs it.
func Serve(ctx context.Context, ln net.Listener, h http.Handler, cfg ServeConfig) error {
	cfg = cfg.withDefaults()
	logger := cfg.Logger
	base, cut := context.WithCancelCause(context.Background())
	defer cut(nil)
	perClient := max(cfg.MaxConnsPerClient, 0)
	if perClient > 0 {
		h = withClientRequestLimit(h, newClientCounts(perClient, "requests in flight", logger), cfg.TrustedProxies)
	}
	h = withClientID(h, cfg.TrustedProxies)
	srv := &http.Server{
		Handler:     withWriteDeadlines(h, cfg.WriteTimeout),
		ReadTimeout: cfg.ReadTimeout,
		IdleTimeout: 2 * time.Minute,
		ErrorLog:    slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		BaseContext: func(net.Listener) context.Context { return base },
		// Handlers reach their connection through the context (leaveConnectionCap).
		ConnContext: func(ctx context.Context, c net.Conn) context.Context { return context.WithValue(ctx, connKey{}, c) },
	}
	errc := make(chan error, 1)
	limited := newLimitListener(ln, cfg.MaxConnections, perClient, cfg.TrustedProxies, logger)
	go func() { errc <- srv.Serve(limited) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	logger.Info("shutting down: waiting for in-flight requests", "grace", cfg.Grace)
	sctx, cancel := context.WithTimeout(context.Background(), cfg.Grace)
	defer cancel()
	err := srv.Shutdown(sctx)
	if errors.Is(err, context.DeadlineExceeded) {
		logger.Warn("in-flight requests did not finish in time; cutting them")
		cut(errShutdown)
		cctx, cancel := context.WithTimeout(context.Background(), cutWait)
		defer cancel()
		if err = srv.Shutdown(cctx); errors.Is(err, context.DeadlineExceeded) {
			err = srv.Close()
		}
	}
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

// withWriteDeadlines bounds each write of h's responses by timeout. (http.Server.WriteTimeout
// cannot: it is one deadline for the whole response, which a stream outlasts.)
func withWriteDeadlines(h http.Handler, timeout time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		dw := &deadlineWriter{ResponseWriter: w, rc: http.NewResponseController(w), timeout: timeout}
		// The connection keeps the deadline of its previous response, and the server may write
		// before the handler does (100 Continue).
		dw.extend()
		h.ServeHTTP(dw, r)
	})
}

// deadlineWriter sets a write deadline of timeout from now before every write and flush.
type deadlineWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
}

func (d *deadlineWriter) extend() { _ = d.rc.SetWriteDeadline(time.Now().Add(d.timeout)) }

func (d *deadlineWriter) Write(p []byte) (int, error) {
	d.extend()
	return d.ResponseWriter.Write(p)
}

// FlushError is what http.ResponseController.Flush calls.
func (d *deadlineWriter) FlushError() error {
	d.extend()
	return d.rc.Flush()
}

func (d *deadlineWriter) Unwrap() http.ResponseWriter { return d.ResponseWriter }

// tooManyConnections is the whole HTTP response a connection beyond the cap gets.
func tooManyConnections(limit int) []byte {
	return rawError(http.StatusServiceUnavailable, &APIError{Type: "server_error", Code: "too_many_connections",
		Message: fmt.Sprintf("the server has %d connections open, its limit: retry later", limit)})
}

// rawError is the whole HTTP/1.1 response, closing the connection, that reports ae with status:
// the listener writes it to connections it refuses, before net/http ever sees them.
func rawError(status int, ae *APIError) []byte {
	body, _ := json.Marshal(ae.body())
	body = append(body, '\n')
	head := fmt.Sprintf("HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"+
		"Connection: close\r\nContent-Length: %d\r\n\r\n", status, http.StatusText(status), len(body))
	return append([]byte(head), body...)
}
