package server

// What a browser may do with the server: the headers every response carries, the Host check that
// keeps a server on a loopback address out of reach of DNS rebinding, and CORS.

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
)

// hostGuard decides which Host headers a server answers. A page on another site can reach a
// server on 127.0.0.1 through DNS rebinding: its own name, re-resolved to 127.0.0.1, makes the
// browser treat the server as same-origin, so that the page reads the answers and the API key
// check is the only defence (and a keyless server has none). Such a request still carries the
// other site's name in Host, which a loopback server never legitimately sees.
type hostGuard struct {
	check   bool            // whether Host is checked at all
	any     bool            // "*" in the allowed hosts
	allowed map[string]bool // normalized names (hostName) served besides the loopback ones
	listen  string          // the listen address, for the error message
}

// newHostGuard builds the guard for a server listening on listen (host:port, or a host alone)
// that also answers the Host names in allowed ("*": any). The check is on for a loopback listen
// address (localhost, *.localhost, 127.0.0.0/8, ::1) and, wherever the server listens, when
// allowed names some hosts; otherwise (the server is exposed on purpose) any Host is answered.
// An entry of allowed may carry a port, which is ignored, but must not be a URL or a pattern.
func newHostGuard(listen string, allowed []string) (hostGuard, error) {
	g := hostGuard{allowed: map[string]bool{}, listen: listen}
	for _, h := range allowed {
		h = strings.TrimSpace(h)
		switch {
		case h == "":
			continue
		case h == "*":
			g.any = true
		case strings.ContainsAny(h, "/ *"): // a URL, or a wildcard that would silently match nothing
			return hostGuard{}, fmt.Errorf("server: allowed host %q is not a host name (give names such as example.com, without scheme, path or wildcard; \"*\" alone allows any)", h)
		default:
			g.allowed[hostName(h)] = true
		}
	}
	host := listen
	if h, _, err := net.SplitHostPort(listen); err == nil {
		host = h
	}
	g.check = !g.any && (isLoopback(hostName(host)) || len(g.allowed) > 0)
	return g, nil
}

// hostName is the lower-case name or address of a Host header value (or listen host) without its
// port, brackets or the final dot of a fully qualified name.
func hostName(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	h = strings.TrimPrefix(strings.TrimSuffix(h, "]"), "[")
	return strings.TrimSuffix(strings.ToLower(h), ".")
}

// isLoopback reports whether name (as hostName returns it) is a loopback name or address. An empty
// name (a listen address of ":8080", every interface) is not.
func isLoopback(name string) bool {
	if name == "localhost" || strings.HasSuffix(name, ".localhost") { // RFC 6761: always loopback
		return true
	}
	a, err := netip.ParseAddr(name)
	return err == nil && a.Unmap().IsLoopback()
}

// allows reports whether a request with this Host header is served. A request without Host
// (HTTP/1.0) is: browsers always send one, and the check is about browsers.
func (g hostGuard) allows(host string) bool {
	if !g.check || host == "" {
		return true
	}
	name := hostName(host)
	return isLoopback(name) || g.allowed[name]
}

// refusal is the 403 for a Host the guard does not allow; it names the flag that allows it.
func (g hostGuard) refusal(host string) *APIError {
	name := hostName(host) // the client chose it: echo and clip keep the message short
	return &APIError{Status: http.StatusForbidden, Type: "invalid_request_error", Code: "host_not_allowed",
		Message: fmt.Sprintf("Host %s is not allowed: this server (listening on %s) answers only localhost names and --allowed-hosts, "+
			"so that other sites cannot reach it by DNS rebinding; to serve this name, start it with --allowed-hosts %s (or \"*\" for any)",
			Echo(name), g.listen, clip(name))}
}

// secure sets the headers every response carries and refuses (403) a request whose Host the
// server does not answer. It reports whether the request may go on; it must run before anything
// else writes to w.
func (s *Server) secure(w http.ResponseWriter, r *http.Request) bool { return s.hosts.admit(w, r) }

// admit is secure for guard g.
func (g hostGuard) admit(w http.ResponseWriter, r *http.Request) bool {
	// Browsers must not guess a type: a JSON error echoing request text must never run as HTML.
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if g.allows(r.Host) {
		return true
	}
	WriteError(w, g.refusal(r.Host))
	return false
}

// HostCheck wraps h in the Host check of a server listening on listen (host:port) that also
// answers the Host names in allowed (as --allowed-hosts: "*" for any), for fronts such as
// `ubatch route`: on a loopback listen address, or when allowed names some hosts, a request
// whose Host is neither a localhost name nor allowed gets 403 host_not_allowed (DNS rebinding,
// see hostGuard). Every response carries X-Content-Type-Options: nosniff.
func HostCheck(h http.Handler, listen string, allowed []string) (http.Handler, error) {
	g, err := newHostGuard(listen, allowed)
	if err != nil {
		return nil, err
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if g.admit(w, r) {
			h.ServeHTTP(w, r)
		}
	}), nil
}

// corsHeaders are the request headers a cross-origin page may send (lower case): the API's own,
// and those the official OpenAI SDKs add (OpenAI-*, and X-Stainless-* by prefix, see
// corsHeaderPrefixes).
var corsHeaders = []string{"authorization", "content-type", "accept", "openai-organization", "openai-project", "openai-beta"}

// corsHeaderPrefixes allow families of SDK headers: X-Stainless-Lang, -Package-Version, -OS,
// -Arch, -Runtime, -Runtime-Version, -Retry-Count, -Timeout, and whatever the SDKs add next.
var corsHeaderPrefixes = []string{"x-stainless-"}

// allowedRequestHeaders is the preflight's Access-Control-Allow-Headers: the headers of
// Access-Control-Request-Headers that are allowed, in lower case, in the order asked. A header
// left out makes the browser fail the preflight, as it should.
func allowedRequestHeaders(r *http.Request) string {
	var out []string
	for _, v := range r.Header.Values("Access-Control-Request-Headers") {
		for h := range strings.SplitSeq(v, ",") {
			h = strings.ToLower(strings.TrimSpace(h))
			if h == "" || slices.Contains(out, h) {
				continue
			}
			if slices.Contains(corsHeaders, h) || slices.ContainsFunc(corsHeaderPrefixes, func(p string) bool { return strings.HasPrefix(h, p) }) {
				out = append(out, h)
			}
		}
	}
	return strings.Join(out, ", ")
}

// cors answers a browser's cross-origin requests: for an allowed Origin it sets the CORS headers,
// and a preflight (OPTIONS) ends here with 204 (true). Allowed are Config.CORSOrigins ("*" for
// any), or, when that is empty, pages served from localhost.
func (s *Server) cors(w http.ResponseWriter, r *http.Request) bool {
	origin := r.Header.Get("Origin")
	preflight := r.Method == http.MethodOptions
	if origin == "" || !s.originAllowed(origin) {
		if preflight {
			w.WriteHeader(http.StatusForbidden)
		}
		return preflight
	}
	hd := w.Header()
	hd.Set("Access-Control-Allow-Origin", origin)
	hd.Add("Vary", "Origin")
	if preflight {
		hd.Add("Vary", "Access-Control-Request-Headers")
		hd.Set("Access-Control-Allow-Methods", "GET, POST, OPTIONS")
		if allow := allowedRequestHeaders(r); allow != "" {
			hd.Set("Access-Control-Allow-Headers", allow)
		}
		hd.Set("Access-Control-Max-Age", "600")
		w.WriteHeader(http.StatusNoContent)
	}
	return preflight
}

func (s *Server) originAllowed(origin string) bool {
	if len(s.cfg.CORSOrigins) > 0 {
		return slices.Contains(s.cfg.CORSOrigins, "*") || slices.Contains(s.cfg.CORSOrigins, origin)
	}
	u, err := url.Parse(origin)
	if err != nil {
		return false
	}
	return isLoopback(hostName(u.Hostname()))
}
