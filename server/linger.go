package server

import (
	"io"
	"net/http"
	"strings"
	"time"
)

// After a 413 the body's rest is still on its way. Closing the connection over unread data
// makes the kernel reset it, and a client still sending then sees ECONNRESET instead of the
// 413. So, as nginx's lingering close does, the handler reads and discards the rest, up to
// lingerFactor times the body limit and for lingerTime at most, before the connection closes.
const (
	lingerFactor = 4
	lingerTime   = 5 * time.Second
)

// linger drains body, the request's own (before any handler wrapped it), after a 413 was
// written to rec. Nothing is drained for a client that waits for "100 Continue" (it has sent
// no body) or when the connection gives no read deadline.
func (s *Server) linger(rec *recorder, r *http.Request, body io.Reader) {
	if rec.status != http.StatusRequestEntityTooLarge || body == nil || body == http.NoBody ||
		strings.EqualFold(r.Header.Get("Expect"), "100-continue") {
		return
	}
	rc := http.NewResponseController(rec)
	rc.Flush() // the client reads the 413 while the rest of its body is discarded
	if rc.SetReadDeadline(time.Now().Add(lingerTime)) != nil {
		return
	}
	io.CopyN(io.Discard, body, lingerFactor*s.cfg.MaxBodyBytes)
}
