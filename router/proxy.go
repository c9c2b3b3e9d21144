package router

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"ubatch/internal/sse"
	"ubatch/prefixhash"
)

// maxEvent bounds one SSE event of a stream (Config.MaxResponseBytes bounds whole responses).
const maxEvent = 16 << 20

// NodeHeader names the node that served a response (host:port), added by the router.
const NodeHeader = "X-Ubatch-Node"

func (r *Router) handlePrompt(w http.ResponseWriter, req *http.Request) {
	body, ok := r.readBody(w, req)
	if !ok {
		return
	}
	var p parsed
	if req.Method == http.MethodPost {
		if p, ok = r.parse(w, req, body); !ok {
			return
		}
	}
	r.route(w, req, body, p)
}

func (r *Router) handleOther(w http.ResponseWriter, req *http.Request) {
	if body, ok := r.readBody(w, req); ok {
		r.route(w, req, body, parsed{})
	}
}

// readBody reads the request body up to MaxBodyBytes, answering 413 beyond it.
func (r *Router) readBody(w http.ResponseWriter, req *http.Request) ([]byte, bool) {
	src := req.Body
	tooLarge := func() ([]byte, bool) {
		r.m.rejected.WithLabelValues("too_large").Inc()
		refuseTooLarge(w, src, fmt.Sprintf("request body is larger than %d bytes, the router's --max-body: send less", r.cfg.MaxBodyBytes))
		return nil, false
	}
	if req.ContentLength > r.cfg.MaxBodyBytes {
		return tooLarge()
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, r.cfg.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return tooLarge()
		}
		r.m.rejected.WithLabelValues("bad_request").Inc()
		writeError(w, http.StatusBadRequest, "invalid_request_error", "", "reading the request body: "+err.Error())
		return nil, false
	}
	return body, true
}

// attempt is the outcome of sending a request to one node.
type attempt struct {
	done   bool   // the client has its answer (or is gone): stop
	reason string // why another node should be tried
	// status, header and body are the node's error answer (429, a retryable 5xx) to pass on if
	// no other node does better.
	status int
	header http.Header
	body   []byte
	node   string
	// died is whether the node's connection broke while it served the request (see guard.go);
	// with done, after part of a stream had reached the client.
	died bool
}

// route sends the request to the best node, then to the next ones while they fail for reasons
// of their own (see try) before the first byte.
func (r *Router) route(w http.ResponseWriter, req *http.Request, body []byte, p parsed) {
	var key *bodyKey // the body's name for the query-of-death guard, once needed
	if r.qod.active() {
		k := keyOf(req, body)
		if r.refuseQuarantined(w, req, k, r.qod.deaths(k, time.Now())) {
			return
		}
		key = &k
	}
	d := r.decideFrom(req.Context(), p.tokens, p.root, len(body))
	if len(d.order) == 0 {
		if r.Healthy() > 0 {
			r.m.rejected.WithLabelValues("too_large").Inc()
			writeError(w, http.StatusRequestEntityTooLarge, "invalid_request_error", "request_too_large",
				fmt.Sprintf("request body of %d bytes is larger than every healthy node accepts", len(body)))
			return
		}
		r.m.rejected.WithLabelValues("no_node").Inc()
		msg := "no inference node is in rotation: check the nodes' /health and the router's log"
		if r.cfg.Discovery != nil && r.nodeCount() == 0 {
			msg = "no inference node is in the fleet: the nodes' discovery lists none (see the router's log)"
		}
		writeError(w, http.StatusServiceUnavailable, "server_error", "no_healthy_node", msg)
		return
	}
	best := d.order[0]
	r.m.routed(best.n.label, d.reason, len(p.tokens), best.cached+best.fetch)
	if r.log.Enabled(req.Context(), slog.LevelDebug) {
		r.log.Debug("routed", "node", best.n.label, "reason", d.reason, "prompt_tokens", len(p.tokens),
			"cached", best.cached, "load", best.load, "prefix", prefixKey(p.tokens), "candidates", d.String())
	}
	var last attempt
	died := false // a node died serving the request
	limit := min(len(d.order), r.cfg.MaxAttempts)
	for i := 0; i < limit; i++ {
		c := d.order[i]
		if i > 0 && c.n.left.Load() {
			limit = min(limit+1, len(d.order)) // it left the fleet since the decision: not an attempt
			continue
		}
		if i > 0 {
			r.m.retries.WithLabelValues(last.reason).Inc()
			// decide claimed the first node; a retry claims its own.
			var hashes []uint64
			if len(p.tokens) > 0 {
				hashes = prefixhash.ChainFrom(nil, p.root, p.tokens, c.blockSize(r.cfg.BlockSize))
			}
			r.claim(c.n, hashes)
		}
		last = r.try(w, req, body, p, c.n)
		r.release(c.n)
		last.node = c.n.label
		if last.died {
			if key == nil {
				k := keyOf(req, body)
				key = &k
			}
			deaths := r.nodeDied(req, c.n, *key)
			if last.done {
				return
			}
			if died || deaths >= quarantineDeaths {
				r.log.Warn("refusing a request that broke two nodes (query of death)", "path", req.URL.Path,
					"body_sha256", fmt.Sprintf("%x", *key), "for", r.cfg.QuarantineTTL)
				r.refuseQuarantined(w, req, *key, max(deaths, quarantineDeaths))
				return
			}
			// One more node at most: a request that kills nodes must not reach every node.
			died, limit = true, min(limit, i+2)
			continue
		}
		if last.done {
			return
		}
	}
	if last.status != 0 {
		passOn(w, last.node, last.status, last.header, last.body)
		return
	}
	writeError(w, http.StatusBadGateway, "server_error", "node_failed",
		fmt.Sprintf("every node tried failed before answering (last failure: %s); retry later", last.reason))
}

// passOn writes a node's whole answer to the client.
func passOn(w http.ResponseWriter, node string, status int, header http.Header, body []byte) {
	copyHeader(w.Header(), header)
	w.Header().Set(NodeHeader, node)
	w.WriteHeader(status)
	w.Write(body)
}

// try forwards the request to n. It streams an event-stream response through event by event
// and buffers any other response whole (up to MaxResponseBytes), so that a node failing before
// its first byte (or answering garbage) can be retried elsewhere.
//
// What is retried: transport errors (refused, first-byte timeout; a connection broken while
// the node served it once only, see guard.go), garbage, 429, a busy 503 with Retry-After, and
// the 5xx that retryable accepts; each but 429 and the busy 503 counts towards the node's Fall.
// A 4xx is the request's own fault: the client gets it as is. A 5xx that is the node's verdict
// on the request is passed on too, and does not count.
func (r *Router) try(w http.ResponseWriter, req *http.Request, body []byte, p parsed, n *node) attempt {
	ctx, cancel := context.WithCancelCause(req.Context())
	defer cancel(nil)
	wd := newWatchdog(r.cfg.FirstByteTimeout, r.cfg.StreamIdleTimeout, cancel)
	defer wd.stop()

	out, err := http.NewRequestWithContext(ctx, req.Method, n.url+req.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return attempt{done: true}
	}
	copyHeader(out.Header, req.Header)
	if host, _, err := net.SplitHostPort(req.RemoteAddr); err == nil {
		out.Header.Add("X-Forwarded-For", host)
	}
	start := time.Now()
	resp, err := r.client.Do(out)
	if err != nil {
		return r.failed(ctx, req, n, transportFailure(err))
	}
	defer resp.Body.Close()
	r.m.ttfb.WithLabelValues(n.label).Observe(time.Since(start).Seconds())
	defer func() { r.m.duration.WithLabelValues(n.label).Observe(time.Since(start).Seconds()) }()

	src := watched{r: resp.Body, wd: wd}
	if resp.StatusCode == http.StatusOK && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		return r.stream(ctx, w, req, resp, src, p, n, wd)
	}
	return r.whole(ctx, w, req, resp, src, p, n)
}

// whole reads a non-streamed response from src (resp's body) and answers the client with it, or
// says why the next node should be tried.
func (r *Router) whole(ctx context.Context, w http.ResponseWriter, req *http.Request, resp *http.Response,
	src io.Reader, p parsed, n *node) attempt {
	data, err := readCapped(src, resp.ContentLength, r.cfg.MaxResponseBytes)
	if errors.Is(err, errTooLarge) {
		// Not retried and not counted against the node: a request asking for a huge answer
		// (n, max_tokens, logprobs) would get it from any node.
		r.m.rejected.WithLabelValues("response_too_large").Inc()
		r.log.Warn("node response over --max-response-bytes: answered 502", "node", n.label,
			"limit", r.cfg.MaxResponseBytes, "content_length", resp.ContentLength, "path", req.URL.Path)
		writeError(w, http.StatusBadGateway, "server_error", "response_too_large",
			fmt.Sprintf("node %s answered more than the router's --max-response-bytes (%d bytes): ask for less output "+
				"(max_tokens, n, logprobs) or stream it (\"stream\": true), or raise the limit", n.label, r.cfg.MaxResponseBytes))
		return attempt{done: true}
	}
	if err != nil {
		return r.failed(ctx, req, n, "died") // the body broke off
	}
	switch st := resp.StatusCode; {
	case st == http.StatusTooManyRequests:
		r.answered(n) // busy, not broken
		return attempt{reason: "status_429", status: st, header: resp.Header, body: data}
	case st == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != "" && isOpenAIError(data):
		// A node's own "busy, come back" (its parse budget or queue full, shutting down): tried
		// elsewhere, and not counted towards --fall, or a burst of heavy requests would eject
		// every node for being busy with them.
		r.answered(n)
		return attempt{reason: "status_503_busy", status: st, header: resp.Header, body: data}
	case st >= 500 && retryable(st, data):
		r.markFailed(n, "status_5xx")
		return attempt{reason: "status_5xx", status: st, header: resp.Header, body: data}
	case st >= 500:
		// The node's verdict on this very request, well-formed: it is up and answering. Not
		// counted towards --fall (the count stays as it was), or a client sending requests the
		// node fails (prompts it takes too long to render) would eject every node.
		r.m.failures.WithLabelValues(n.label, "verdict_5xx").Inc()
	case st == http.StatusOK && !webPage(req.URL.Path) && (p.stream || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") || !json.Valid(data)):
		// A node answers 200 with JSON, or with an event stream when asked to stream (its web
		// page, HTML, JavaScript and CSS, aside).
		r.markFailed(n, "garbage")
		return attempt{reason: "garbage"}
	default:
		r.answered(n)
	}
	if resp.StatusCode == http.StatusOK {
		r.observeUsage(p, data)
	}
	passOn(w, n.label, resp.StatusCode, resp.Header, data)
	return attempt{done: true}
}

// webPage reports whether path is the node's web page or one of its files (GET /, /ui/*).
func webPage(path string) bool { return path == "/" || strings.HasPrefix(path, "/ui/") }

// failed handles a transport error: a client that went away ends the request; otherwise the
// failure counts against n and the next node is tried.
func (r *Router) failed(ctx context.Context, req *http.Request, n *node, kind string) attempt {
	if req.Context().Err() != nil {
		return attempt{done: true}
	}
	if c := context.Cause(ctx); errors.Is(c, errIdle) || errors.Is(c, errFirstByte) {
		kind = "timeout"
	}
	r.markFailed(n, kind)
	return attempt{reason: kind, died: kind == "died"}
}

// transportFailure is the failure kind of a transport error of client.Do: "connect" when the
// request never reached the node (dial, DNS, TLS), "died" when the connection broke after it
// was sent. (The transport itself resends a request on a kept-alive connection the node had
// closed before it was written.)
func transportFailure(err error) string {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return "connect"
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return "connect"
	}
	return "died"
}

// stream passes an event stream from src (resp's body) through, whole events at a time, each
// as the node sent it (comments too). Until the first event has arrived nothing is written, so
// a node failing before it is retried; after it, a broken stream ends with an error event in
// OpenAI's shape.
func (r *Router) stream(ctx context.Context, w http.ResponseWriter, req *http.Request, resp *http.Response,
	src io.Reader, p parsed, n *node, wd *watchdog) attempt {
	rd := newEventReader(src)
	if !rd.Next() {
		kind := "garbage" // an empty stream
		if rd.Err() != nil {
			kind = "died"
		}
		return r.failed(ctx, req, n, kind)
	}
	copyHeader(w.Header(), resp.Header)
	w.Header().Del("Content-Length")
	w.Header().Set(NodeHeader, n.label)
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	for {
		wd.pause()
		if _, werr := w.Write(rd.Raw()); werr != nil {
			return attempt{done: true} // the client is gone; the deferred cancel frees the node's sequence
		}
		rc.Flush()
		wd.resume()
		if bytes.Contains(rd.Data(), []byte(`"usage":{`)) {
			r.observeUsage(p, rd.Data())
		}
		if !rd.Next() {
			break
		}
	}
	err := rd.Err()
	if err == nil {
		r.answered(n)
		return attempt{done: true}
	}
	if req.Context().Err() != nil {
		return attempt{done: true}
	}
	why := "the node's connection broke"
	if errors.Is(context.Cause(ctx), errIdle) {
		why = fmt.Sprintf("the node sent nothing for %v", r.cfg.StreamIdleTimeout)
	}
	r.m.streamErrors.WithLabelValues(n.label).Inc()
	r.markFailed(n, "mid_stream")
	dead := !errors.Is(context.Cause(ctx), errIdle)
	r.log.Warn("stream broken mid-way; ended with an error event", "node", n.label, "err", err)
	msg := fmt.Sprintf("node %s failed mid-stream (%s); the output so far is incomplete: retry the request", n.label, why)
	w.Write(append(append([]byte("data: "), bytes.TrimSpace(errorJSON("server_error", "node_failed", msg))...), "\n\n"...))
	rc.Flush()
	return attempt{done: true, died: dead}
}

// newEventReader reads a node's event stream as the router passes it on: every event (a
// keep-alive comment too), each at most maxEvent bytes; one the stream ends inside is an error,
// so that the client gets an error event rather than half an event.
func newEventReader(src io.Reader) *sse.Reader {
	rd := sse.NewReader(src, maxEvent)
	rd.All = true
	return rd
}

// usage is the part of OpenAI's usage object the router counts.
type usage struct {
	Usage *struct {
		PromptTokens        int `json:"prompt_tokens"`
		PromptTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

func (r *Router) observeUsage(p parsed, data []byte) {
	var u usage
	if json.Unmarshal(data, &u) != nil || u.Usage == nil {
		return
	}
	r.m.reportedPrompt.Add(float64(u.Usage.PromptTokens))
	r.m.reportedCached.Add(float64(u.Usage.PromptTokensDetails.CachedTokens))
	if p.tokens != nil && !p.multi && p.whole && u.Usage.PromptTokens != len(p.tokens) {
		r.m.mismatch.Inc()
	}
}

// hopByHop are the headers that describe one connection, not the message.
var hopByHop = map[string]bool{"Connection": true, "Keep-Alive": true, "Proxy-Authenticate": true,
	"Proxy-Authorization": true, "Proxy-Connection": true, "Te": true, "Trailer": true, "Transfer-Encoding": true,
	"Upgrade": true, "Content-Length": true}

func copyHeader(dst, src http.Header) {
	for k, vs := range src {
		if hopByHop[http.CanonicalHeaderKey(k)] {
			continue
		}
		dst[k] = append([]string(nil), vs...)
	}
}
