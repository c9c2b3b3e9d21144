package router

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"ubatch/fleet"
)

// node is one inference node as the router sees it. Fields under "guarded" belong to
// Router.mu; inflight is atomic.
type node struct {
	url   string // base URL, no trailing slash
	label string // host:port, the metric label and the X-Ubatch-Node header

	inflight atomic.Int64

	// guarded by Router.mu
	healthy   bool
	probed    bool // had a health check: the first one decides alone
	okStreak  int  // consecutive good health checks while out of rotation
	badStreak int  // consecutive failed health checks while in rotation
	// fails counts failed requests in a row. It is apart from badStreak because a good health
	// check (GET /health answers without the engine) says nothing about requests: a node
	// whose every request times out while /health answers must still leave.
	fails int
	// nctx is the node's context in tokens from its GET /props (0 = unknown), read once it
	// answers its health checks (propsRead) and again after it comes back into rotation.
	nctx      int
	propsRead bool

	status   fleet.Status
	statusAt time.Time // zero: no status from Redis
	seen     bool      // listed in Redis at the last refresh (discovery mode)

	// left is set once Config.Discovery no longer lists the node: it is out of Router.nodes,
	// and a request's retry must not pick it from a decision made before.
	left atomic.Bool
}

// nodeLabel is the host:port of a base URL.
func nodeLabel(base string) string {
	if u, err := url.Parse(base); err == nil && u.Host != "" {
		return u.Host
	}
	return base
}

// normalizeURL trims a node URL for comparison: no trailing slash, lower-case scheme and host.
func normalizeURL(raw string) (string, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil {
		return "", err
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("node URL %q: want http://HOST:PORT or https://HOST:PORT", raw)
	}
	u.Scheme, u.Host = strings.ToLower(u.Scheme), strings.ToLower(u.Host)
	u.Path = strings.TrimSuffix(u.Path, "/")
	return u.String(), nil
}

// snapshot is a consistent copy of a node's state for one decision.
type snapshot struct {
	n        *node
	healthy  bool
	status   fleet.Status
	hasState bool // status is fresh enough to weigh
}

// snapshotNodes copies the state of every node, sorted by label.
func (r *Router) snapshotNodes() []snapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]snapshot, 0, len(r.nodes))
	now := time.Now()
	for _, n := range r.nodes {
		fresh := !n.statusAt.IsZero() && now.Sub(n.statusAt) < r.cfg.StatusMaxAge
		out = append(out, snapshot{n: n, healthy: n.healthy, status: n.status, hasState: fresh})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].n.label < out[j].n.label })
	return out
}

// markFailed counts a failed request on n (kind labels the failure metric) and takes n out of
// rotation at the Fall-th in a row; health checks bring it back.
func (r *Router) markFailed(n *node, kind string) {
	r.m.failures.WithLabelValues(n.label, kind).Inc()
	r.mu.Lock()
	n.fails++
	n.okStreak = 0
	eject := n.healthy && n.fails >= r.cfg.Fall
	if eject {
		n.healthy, n.propsRead = false, false
	}
	fails := n.fails
	r.mu.Unlock()
	if eject {
		r.ejected(n, "requests")
		r.log.Warn("node taken out of rotation", "node", n.label, "failed_requests_in_a_row", fails, "last_failure", kind)
	}
}

// answered notes that n answered a request (below 500, well-formed): its failures in a row
// start again from zero.
func (r *Router) answered(n *node) {
	r.mu.Lock()
	n.fails = 0
	r.mu.Unlock()
}

// ejected records that n left rotation (cause: requests or health) once n.healthy is false.
func (r *Router) ejected(n *node, cause string) {
	r.m.healthy.WithLabelValues(n.label).Set(0)
	r.m.ejections.WithLabelValues(n.label, cause).Inc()
	// Requests of the prompts it held go by load now, not to a node that cannot take them.
	r.recent.forget(n)
}

// checkHealth probes every node once, concurrently, and updates rotation: a node leaves after
// Fall failed probes in a row and comes back after Rise good ones, whichever way it left.
func (r *Router) checkHealth(ctx context.Context) {
	r.mu.Lock()
	nodes := make([]*node, 0, len(r.nodes))
	for _, n := range r.nodes {
		nodes = append(nodes, n)
	}
	r.mu.Unlock()
	r.probeNodes(ctx, nodes)
}

// probeNodes is checkHealth over these nodes only.
func (r *Router) probeNodes(ctx context.Context, nodes []*node) {
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Go(func() {
			ok, timedOut := r.probe(ctx, n)
			if ctx.Err() != nil {
				return
			}
			r.mu.Lock()
			if timedOut && n.healthy && n.inflight.Load() > 0 && n.fails == 0 {
				// Busy with this router's requests, none of which has failed: a node parsing
				// heavy prompts may answer its probe late, and three heavy chats must not eject
				// it. A hung node's requests reach their first-byte timeout and fail, and then its
				// probes count again.
				r.mu.Unlock()
				r.m.failures.WithLabelValues(n.label, "health_busy").Inc()
				return
			}
			was := n.healthy
			if !n.probed {
				n.probed, n.healthy = true, ok
			} else if ok {
				n.badStreak = 0
				if !n.healthy {
					n.okStreak++
					n.healthy = n.okStreak >= r.cfg.Rise
					if n.healthy {
						n.fails = 0 // back with a clean slate: its old failures led to the ejection
					}
				}
			} else {
				n.okStreak = 0
				if n.healthy {
					n.badStreak++
					n.healthy = n.badStreak < r.cfg.Fall
				}
			}
			now := n.healthy
			if !now {
				n.propsRead = false
			}
			readProps := now && !n.propsRead
			n.propsRead = n.propsRead || readProps
			r.mu.Unlock()
			if !ok {
				r.m.failures.WithLabelValues(n.label, "health").Inc()
			}
			if readProps {
				r.readProps(ctx, n)
			}
			if was != now {
				if now {
					r.log.Info("node back in rotation", "node", n.label)
					r.m.healthy.WithLabelValues(n.label).Set(1)
				} else {
					r.ejected(n, "health")
					r.log.Warn("node failed its health checks: out of rotation", "node", n.label, "failed_checks_in_a_row", r.cfg.Fall)
				}
			}
		})
	}
	wg.Wait()
}

// probe is one GET /health: healthy means 200 with {"status":"ok"}, within the timeout;
// timedOut is whether it failed by the timeout alone (the node took too long, it did not refuse).
func (r *Router) probe(ctx context.Context, n *node) (ok, timedOut bool) {
	pctx, cancel := context.WithTimeout(ctx, r.cfg.HealthTimeout)
	defer cancel()
	late := func() bool { return ctx.Err() == nil && errors.Is(pctx.Err(), context.DeadlineExceeded) }
	req, err := http.NewRequestWithContext(pctx, http.MethodGet, n.url+"/health", nil)
	if err != nil {
		return false, false
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return false, late()
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil || resp.StatusCode != http.StatusOK {
		return false, err != nil && late()
	}
	var h struct {
		Status string `json:"status"`
	}
	return json.Unmarshal(body, &h) == nil && h.Status == "ok", false
}

// readProps reads n's context size from its GET /props (llama-server's
// default_generation_settings.n_ctx, the tokens its KV cache holds), which bounds the prompts
// the router parses (see nodeContext). A node without it keeps nctx 0.
func (r *Router) readProps(ctx context.Context, n *node) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.HealthTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.url+"/props", nil)
	if err != nil {
		return
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	var props struct {
		Settings struct {
			NCtx int `json:"n_ctx"`
		} `json:"default_generation_settings"`
	}
	// The chat template makes /props a few kilobytes; a megabyte is far beyond any.
	if resp.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&props) != nil {
		return
	}
	r.mu.Lock()
	n.nctx = max(props.Settings.NCtx, 0)
	r.mu.Unlock()
}

// nodeContext is the largest context, in tokens, of the nodes in rotation: no prompt of more
// tokens fits any of them. 0 when it is unknown (no node in rotation, or one that has not told).
func (r *Router) nodeContext() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	most := 0
	for _, n := range r.nodes {
		if !n.healthy {
			continue
		}
		if n.nctx <= 0 {
			return 0
		}
		most = max(most, n.nctx)
	}
	return most
}

// refresh reads the nodes' statuses from Redis. With a static fleet (--nodes, or the membership
// of Config.Discovery) a status is
// matched to a node by its URL and statuses naming other URLs are ignored; without one, nodes
// are added as they appear and dropped once their status expires.
func (r *Router) refresh(ctx context.Context) {
	if r.index == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	statuses, bad, err := r.index.Nodes(ctx)
	if err != nil {
		r.redisFailed(err)
		return
	}
	r.redisOK()
	now := time.Now()
	unknown := bad
	var strangers []string
	var added []*node
	r.mu.Lock()
	for _, n := range r.nodes {
		n.seen = false
	}
	for _, st := range statuses {
		u, err := normalizeURL(st.URL)
		if err != nil {
			unknown++
			strangers = append(strangers, st.ID)
			continue
		}
		n, ok := r.nodes[u]
		if !ok {
			if r.static {
				unknown++
				strangers = append(strangers, st.ID+"="+u)
				continue
			}
			n = &node{url: u, label: nodeLabel(u)}
			r.nodes[u] = n
			added = append(added, n)
		}
		n.status, n.statusAt, n.seen = st, now, true
	}
	if !r.static {
		for u, n := range r.nodes {
			if !n.seen && n.inflight.Load() == 0 {
				delete(r.nodes, u)
				r.m.healthy.DeleteLabelValues(n.label)
				r.log.Info("node left the fleet", "node", n.label)
			}
		}
	}
	r.mu.Unlock()
	r.mu.Lock()
	changed := r.unknown != unknown
	r.unknown = unknown
	r.mu.Unlock()
	if changed && len(strangers) > 0 {
		r.log.Warn("ignoring Redis entries of nodes that are not in --nodes (or have bad URLs); "+
			"a node's --advertise-url must equal its --nodes entry (or, discovered, its endpoint's http://IP:PORT)", "nodes", strangers)
	}
	r.m.unknownNodes.Set(float64(unknown))
	for _, n := range added {
		r.log.Info("node joined the fleet", "node", n.label, "id", n.status.ID)
		r.m.healthy.WithLabelValues(n.label).Set(0)
	}
	if len(added) > 0 {
		r.checkHealth(ctx)
	}
}

// redisFailed notes an index failure: lookups pause for a backoff so that requests do not each
// wait for a timeout while Redis is away.
func (r *Router) redisFailed(err error) {
	r.m.redisErrors.Inc()
	r.mu.Lock()
	r.redisBackoff = min(max(2*r.redisBackoff, 200*time.Millisecond), 5*time.Second)
	r.redisRetryAt = time.Now().Add(r.redisBackoff)
	first := !r.redisDown
	r.redisDown = true
	r.mu.Unlock()
	if first {
		r.log.Warn("Redis unreachable: routing by load and recent affinity until it is back", "err", err)
	}
}

func (r *Router) redisOK() {
	r.mu.Lock()
	was := r.redisDown
	r.redisDown, r.redisBackoff = false, 0
	r.mu.Unlock()
	if was {
		r.log.Info("Redis reachable again: prefix-aware routing resumed")
	}
}

// redisUsable reports whether lookups may try Redis now.
func (r *Router) redisUsable() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.index != nil && (!r.redisDown || time.Now().After(r.redisRetryAt))
}
