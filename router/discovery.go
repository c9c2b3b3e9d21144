package router

import (
	"context"
	"slices"
)

// Discovery is a source of the fleet's membership that changes while the router runs, such as
// a Kubernetes Service's EndpointSlices (package router/kube). With one, the nodes are exactly
// the URLs it lists: Redis still gives their cached prefixes and load, matched by URL (a node's
// --advertise-url must be the URL discovery gives), and Redis entries of other nodes are
// ignored, as with a static Config.Nodes.
type Discovery interface {
	// Watch calls set with the whole set of node base URLs (http://HOST:PORT) once the current
	// set is known and again each time it changes, until ctx ends; it then returns. It never
	// calls set concurrently. An empty set empties the fleet (requests get 503).
	Watch(ctx context.Context, set func(urls []string))
}

// setNodes makes the fleet exactly urls (Config.Discovery's membership). A node that is not
// in urls leaves at once: it is never picked again, not even for a retry, while the requests it
// is serving finish on it. A node that joins starts out of rotation and is probed at once, so
// that it takes requests as soon as its first health check passes. URLs that do not parse are
// logged and skipped.
func (r *Router) setNodes(ctx context.Context, urls []string) {
	want := make(map[string]bool, len(urls))
	for _, raw := range urls {
		u, err := normalizeURL(raw)
		if err != nil {
			r.log.Warn("discovery gave a node URL that does not parse: skipped", "url", raw, "err", err)
			continue
		}
		want[u] = true
	}
	var added, left []*node
	r.mu.Lock()
	for u, n := range r.nodes {
		if !want[u] {
			delete(r.nodes, u)
			// In-flight requests keep their *node; retries check this (see handlePrompt).
			n.left.Store(true)
			left = append(left, n)
		}
	}
	for u := range want {
		if _, ok := r.nodes[u]; !ok {
			n := &node{url: u, label: nodeLabel(u)}
			r.nodes[u] = n
			added = append(added, n)
		}
	}
	size := len(r.nodes)
	r.mu.Unlock()
	byLabel := func(a, b *node) int {
		if a.label < b.label {
			return -1
		}
		if a.label > b.label {
			return 1
		}
		return 0
	}
	slices.SortFunc(left, byLabel)
	slices.SortFunc(added, byLabel)
	for _, n := range left {
		r.m.healthy.DeleteLabelValues(n.label)
		r.recent.forget(n)
		r.log.Info("node left the fleet", "node", n.label, "in_flight", n.inflight.Load(), "nodes", size)
	}
	for _, n := range added {
		r.m.healthy.WithLabelValues(n.label).Set(0)
		r.log.Info("node joined the fleet", "node", n.label, "nodes", size)
	}
	if size == 0 && len(left) > 0 {
		r.log.Warn("discovery lists no node: requests get 503 until one joins")
	}
	if len(added) > 0 {
		r.probeNodes(ctx, added)
	}
}

// nodeCount is the number of nodes in the fleet, in rotation or not.
func (r *Router) nodeCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.nodes)
}
