package loadgen

import (
	"io"

	"ubatch/internal/sse"
)

// maxSSEEvent bounds one event of a stream; a server that never ends an event gets
// sse.ErrTooLarge instead of unbounded buffering. A completion chunk is far smaller.
const maxSSEEvent = 4 << 20

// newEventReader reads the events of a completion stream. It is lenient about the end: a final
// event cut off by EOF without its blank line is still reported, because some servers end the
// stream right after "data: [DONE]\n" (the run still fails without [DONE]).
func newEventReader(r io.Reader) *sse.Reader {
	rd := sse.NewReader(r, maxSSEEvent)
	rd.Lenient = true
	return rd
}
