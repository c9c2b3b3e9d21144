package router

import (
	"crypto/sha256"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// The query-of-death guard. A request whose node died while serving it (the connection broke,
// reset or EOF, after the request was sent and before the response ended; not an answer, not a
// timeout) may have killed it: any future crash bug of the node's would do that to every node
// the request reaches. So such a request is tried on one more node at most, and a request body
// that has broken two nodes' connections within Config.QuarantineTTL is refused (422
// request_quarantined) until the TTL has passed since its last death, whether it came in one
// request or in several. A body is known by the SHA-256 of its method, path and bytes, computed
// only once a death is on record, so that the usual request pays nothing.

const (
	// maxQuarantined bounds the bodies remembered; beyond it the one remembered longest goes.
	maxQuarantined = 4096
	// quarantineDeaths is how many node deaths refuse a body.
	quarantineDeaths = 2
)

// bodyKey names a request body for the guard.
type bodyKey [sha256.Size]byte

func keyOf(req *http.Request, body []byte) bodyKey {
	h := sha256.New()
	h.Write([]byte(req.Method + " " + req.URL.Path + "\n"))
	h.Write(body)
	var k bodyKey
	h.Sum(k[:0])
	return k
}

// quarantine counts the node deaths of request bodies, each remembered for ttl after its last.
type quarantine struct {
	ttl time.Duration
	max int
	n   atomic.Int64 // entries, read without the lock: while zero, no body need be hashed

	mu sync.Mutex
	m  map[bodyKey]*deathRecord
}

type deathRecord struct {
	deaths int
	until  time.Time
}

func newQuarantine(ttl time.Duration, max int) *quarantine {
	return &quarantine{ttl: ttl, max: max, m: map[bodyKey]*deathRecord{}}
}

// active reports whether any body is on record.
func (q *quarantine) active() bool { return q.n.Load() > 0 }

// deaths is the node deaths on record for k within the ttl.
func (q *quarantine) deaths(k bodyKey, now time.Time) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	if e := q.m[k]; e != nil && now.Before(e.until) {
		return e.deaths
	}
	return 0
}

// record notes one more node death for k and returns its deaths on record.
func (q *quarantine) record(k bodyKey, now time.Time) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	e := q.m[k]
	if e != nil && !now.Before(e.until) {
		e.deaths = 0
	}
	if e == nil {
		if len(q.m) >= q.max {
			q.evict(now)
		}
		e = &deathRecord{}
		q.m[k] = e
	}
	e.deaths++
	e.until = now.Add(q.ttl)
	q.n.Store(int64(len(q.m)))
	return e.deaths
}

// evict drops the expired records, or when none has expired the one expiring first.
func (q *quarantine) evict(now time.Time) {
	var oldest bodyKey
	var first time.Time
	for k, e := range q.m {
		if !now.Before(e.until) {
			delete(q.m, k)
			continue
		}
		if first.IsZero() || e.until.Before(first) {
			oldest, first = k, e.until
		}
	}
	if len(q.m) >= q.max {
		delete(q.m, oldest)
	}
}

// sweep drops the expired records.
func (q *quarantine) sweep(now time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for k, e := range q.m {
		if !now.Before(e.until) {
			delete(q.m, k)
		}
	}
	q.n.Store(int64(len(q.m)))
}

// nodeDied records that n's connection broke while it served req (body k), and returns the
// body's deaths on record.
func (r *Router) nodeDied(req *http.Request, n *node, k bodyKey) int {
	r.m.deaths.WithLabelValues(n.label).Inc()
	deaths := r.qod.record(k, time.Now())
	r.log.Warn("a node's connection broke while it served a request (the node may have crashed on it)",
		"node", n.label, "path", req.URL.Path, "body_sha256", fmt.Sprintf("%x", k), "deaths", deaths)
	return deaths
}

// refuseQuarantined answers 422 request_quarantined for body k and reports true when its
// deaths on record have reached quarantineDeaths; otherwise it does nothing.
func (r *Router) refuseQuarantined(w http.ResponseWriter, req *http.Request, k bodyKey, deaths int) bool {
	if deaths < quarantineDeaths {
		return false
	}
	r.m.rejected.WithLabelValues("quarantined").Inc()
	r.log.Debug("refused a quarantined request", "path", req.URL.Path, "body_sha256", fmt.Sprintf("%x", k))
	writeError(w, http.StatusUnprocessableEntity, "invalid_request_error", "request_quarantined",
		fmt.Sprintf("request refused: %d nodes' connections broke while serving this very request, so it may crash every node "+
			"it reaches; it is refused for %v after its last failure. Give the operator its body's SHA-256, %x, "+
			"which the router's log names", deaths, r.cfg.QuarantineTTL, k))
	return true
}
