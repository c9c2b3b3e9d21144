package server

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
)

// DefaultMaxConnsPerClient is the default of `ubatch serve --max-conns-per-client`: an eighth
// of the default connection cap, so that one client (a browser opens six connections, a load
// test a few dozen) cannot take more than that and the rest stays free for other clients and
// load-balancer probes. (ServeConfig's zero value means no per-client cap.)
const DefaultMaxConnsPerClient = 64

// Per-client limits: why two of them.
//
// The connection cap (--max-connections) counts connections when they are accepted, before any
// request on them is read, so one client holding slow-header or idle connections could take every
// slot and every route, /health included, would answer 503: a load balancer then marks the node
// dead. Serve therefore also caps the connections of each client address (--max-conns-per-client):
// a client over its share is refused at accept time, with a 429 written by the same refusal path
// as the global cap's 503, and the remaining slots stay free for others.
//
// A reverse proxy (nginx, a router) in front is one address for many users, so its connections
// cannot be capped per user: connections from --trusted-proxies are exempt from the per-address
// connection cap (they still count against --max-connections). For requests instead, Serve caps
// those in flight per client (the same limit), keying each request by its client: the connection's
// address, or for a connection from a trusted proxy the rightmost address of X-Forwarded-For that
// is not a trusted proxy (the one the nearest trusted proxy saw). X-Forwarded-For is believed only
// from trusted proxies, as anyone can send it. Over the cap a request gets 429 with Retry-After;
// /health and /metrics are exempt, so that probes through the proxy keep answering. For a direct
// client the request cap never binds before the connection cap does (HTTP/1.1 has one request in
// flight per connection).
//
// An IPv6 client is keyed by its /64: a single host usually holds a whole /64 and could otherwise
// open its connections from as many addresses as it likes.

// ParseTrustedProxies parses a comma-separated list of CIDR prefixes or bare addresses (as the
// --trusted-proxies flag takes them); an address is a prefix of its full length.
func ParseTrustedProxies(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		if p, err := netip.ParsePrefix(f); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(f)
		if err != nil {
			return nil, fmt.Errorf("%q is neither a CIDR prefix nor an IP address", f)
		}
		a = a.Unmap()
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

// trusted reports whether a is in one of the prefixes.
func trusted(prefixes []netip.Prefix, a netip.Addr) bool {
	for _, p := range prefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// clientKey is the key a client address is counted under: the address itself for IPv4, its /64
// for IPv6 (see above). a must be valid and unmapped.
func clientKey(a netip.Addr) netip.Addr {
	if a.Is6() {
		return netip.PrefixFrom(a, 64).Masked().Addr()
	}
	return a
}

// addrOf is the unmapped IP address of a net.Addr or of a "host:port" string; ok is false for
// addresses that are not IP (a Unix socket), which no per-client limit applies to.
func addrOf(s string) (netip.Addr, bool) {
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		return netip.Addr{}, false
	}
	return ap.Addr().Unmap(), true
}

// forwardedClient is the client of a request that came from the trusted proxy at remote: the
// rightmost X-Forwarded-For address (over all the header's lines, in order) that is not a trusted
// proxy. When every address listed is trusted, it is the leftmost (the request began inside);
// with no header, or when the rightmost untrusted entry is not an address (the nearest proxy did
// not write it as one), it is remote, so that such requests share the proxy's own budget rather
// than escape it.
func forwardedClient(xff []string, prefixes []netip.Prefix, remote netip.Addr) netip.Addr {
	client := remote
	for i := len(xff) - 1; i >= 0; i-- {
		line := xff[i]
		for line != "" {
			var entry string
			if j := strings.LastIndexByte(line, ','); j >= 0 {
				line, entry = line[:j], line[j+1:]
			} else {
				line, entry = "", line
			}
			if entry = strings.TrimSpace(entry); entry == "" {
				continue
			}
			a, ok := parseForwarded(entry)
			if !ok {
				return remote
			}
			if !trusted(prefixes, a) {
				return a
			}
			client = a
		}
	}
	return client
}

// parseForwarded parses one X-Forwarded-For entry: an address, or an address with a port
// ("1.2.3.4:80", "[2001:db8::1]:80"), which some proxies write.
func parseForwarded(s string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap(), true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap(), true
	}
	return netip.Addr{}, false
}

// clientCounts counts something per client key under a cap: connections, or requests in flight.
// An entry exists only while its count is positive, so the map holds at most as many entries as
// there are things counted.
type clientCounts struct {
	max    int
	what   string // for the log: "connections" or "requests in flight"
	logger *slog.Logger
	mu     sync.Mutex
	n      map[netip.Addr]*clientCount
}

type clientCount struct {
	n      int
	warned bool // whether this client's refusal was logged since its count was last zero
}

func newClientCounts(max int, what string, logger *slog.Logger) *clientCounts {
	return &clientCounts{max: max, what: what, logger: logger, n: make(map[netip.Addr]*clientCount)}
}

// acquire counts one more for key, or reports false, counting nothing, when key is at the cap. It
// logs the first refusal of an episode only, so a flood does not flood the log.
func (c *clientCounts) acquire(key netip.Addr) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.n[key]
	if e == nil {
		e = &clientCount{}
		c.n[key] = e
	}
	if e.n >= c.max {
		if !e.warned {
			e.warned = true
			c.logger.Warn("a client reached its limit: refusing more", "client", key, "what", c.what, "limit", c.max)
		}
		return false
	}
	e.n++
	return true
}

// release gives back one count that acquire took for key.
func (c *clientCounts) release(key netip.Addr) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.n[key]; e != nil {
		if e.n--; e.n <= 0 {
			delete(c.n, key)
		}
	}
}

// count is key's current count.
func (c *clientCounts) count(key netip.Addr) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.n[key]; e != nil {
		return e.n
	}
	return 0
}

// unlimitedPath reports whether path is exempt from the per-client request cap: the probes of
// load balancers and monitoring, cheap and needed most when a client misbehaves.
func unlimitedPath(path string) bool {
	return path == "/health" || path == "/ready" || path == "/metrics"
}

// withClientRequestLimit caps the requests in flight per client (see the comment at the top of
// this file) at counts.max; prefixes are the trusted proxies. Requests whose remote address is not
// IP are not limited.
func withClientRequestLimit(h http.Handler, counts *clientCounts, prefixes []netip.Prefix) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, ok := requestClient(r, prefixes)
		if !ok || unlimitedPath(r.URL.Path) {
			h.ServeHTTP(w, r)
			return
		}
		key := clientKey(a)
		if !counts.acquire(key) {
			WriteError(w, &APIError{Status: http.StatusTooManyRequests, Type: "rate_limit_error", Code: "too_many_client_requests",
				Message: fmt.Sprintf("your address (%s) has %d requests in flight, the limit per client: wait for one to finish", a, counts.max)})
			return
		}
		defer counts.release(key)
		h.ServeHTTP(w, r)
	})
}

// requestClient is the client of r: its connection's address, or behind a trusted proxy the
// X-Forwarded-For client (forwardedClient); false when the address is not IP.
func requestClient(r *http.Request, prefixes []netip.Prefix) (netip.Addr, bool) {
	a, ok := addrOf(r.RemoteAddr)
	if ok && trusted(prefixes, a) {
		a = forwardedClient(r.Header.Values("X-Forwarded-For"), prefixes, a)
	}
	return a, ok
}

type clientIDKey struct{}

// withClientID puts every request's client identity, its client key (requestClient, an IPv6
// client's /64) as text, in the request's context, where generate gives it to the engine
// (engine.Request.Client) so that the engine shares its slots and KV cache fairly between
// clients. A non-IP client (a Unix socket) has none.
func withClientID(h http.Handler, prefixes []netip.Prefix) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a, ok := requestClient(r, prefixes); ok {
			r = r.WithContext(context.WithValue(r.Context(), clientIDKey{}, clientKey(a).String()))
		}
		h.ServeHTTP(w, r)
	})
}

// clientID is the client identity withClientID put in ctx, "" when none.
func clientID(ctx context.Context) string {
	id, _ := ctx.Value(clientIDKey{}).(string)
	return id
}

// connClient is the key a new connection is counted under by the per-client connection cap, and
// false when the cap does not apply to it: a trusted proxy's (shared by many users) or a non-IP one.
func connClient(c net.Conn, prefixes []netip.Prefix) (netip.Addr, bool) {
	a, ok := addrOf(c.RemoteAddr().String())
	if !ok || trusted(prefixes, a) {
		return netip.Addr{}, false
	}
	return clientKey(a), true
}

// tooManyClientConnections is the whole HTTP response a connection over its client's cap gets.
func tooManyClientConnections(limit int) []byte {
	return rawError(http.StatusTooManyRequests, &APIError{Type: "rate_limit_error", Code: "too_many_client_connections",
		Message: fmt.Sprintf("your address has %d connections open, the limit per client: close some or retry later", limit)})
}
