// Package sse reads server-sent events (the text/event-stream format of the WHATWG HTML
// standard, §9.2 "Server-sent events"), for the clients and the proxy in this module: the
// load generator, the fleet router and the tests. Writing events stays with the server.
package sse

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

var (
	// ErrTooLarge is returned by Err when one event (its lines as sent) exceeds the Reader's
	// bound: a peer that never ends an event must not make the reader buffer without limit.
	ErrTooLarge = errors.New("sse: event larger than the reader's bound")
	// ErrTruncated is returned by Err when the stream ends inside an event, before the blank
	// line that dispatches it; it wraps io.ErrUnexpectedEOF.
	ErrTruncated = fmt.Errorf("sse: stream ended inside an event: %w", io.ErrUnexpectedEOF)
)

// bom is the UTF-8 byte order mark the spec lets a stream begin with.
var bom = []byte("\xef\xbb\xbf")

// Reader reads the events of one stream. Usage mirrors bufio.Scanner:
//
//	rd := sse.NewReader(body, 1<<20)
//	for rd.Next() { use(rd.Name(), rd.Data()) }
//	if err := rd.Err(); err != nil { ... }
//
// Parsing follows the spec: lines end in "\n", "\r\n" or "\r"; a blank line dispatches the
// event; a line starting with ":" is a comment; a line's field is what precedes its first
// colon (the whole line if it has none) and its value what follows, less one leading space;
// "data" values are joined with "\n"; "event" names the event, "id" sets the last event ID
// (unless it contains NUL); other fields, "retry" included, are ignored. "[DONE]" is data like
// any other: what it means is the caller's business.
//
// The slices returned are valid until the next call to Next; nothing is allocated per event
// once the buffers have grown to the largest event, which keeps the router's pass-through cheap.
type Reader struct {
	// All makes Next report every event, including those the spec does not dispatch because
	// they have no data line (comments such as keep-alives, a lone "event:" or "id:"): a proxy
	// passes them on. Set it before the first Next.
	All bool
	// Lenient makes Next report a final event the stream ends inside (no blank line after it;
	// even its last line unterminated) instead of dropping it as the spec says and failing with
	// ErrTruncated: some servers close the stream right after "data: [DONE]\n". Set it before
	// the first Next.
	Lenient bool

	br    *bufio.Reader
	max   int
	raw   []byte // the current event's bytes as read, its terminating blank line included
	data  []byte // the data buffer: each data value followed by "\n"
	name  []byte
	id    []byte // the last event ID: it carries over from event to event, as in the spec
	dataN int    // len(data) of the dispatched event, its final "\n" dropped
	lines int    // non-blank lines in raw
	first bool   // no line has been read yet (a BOM may start it)
	err   error
}

// NewReader reads events from r, failing with ErrTooLarge on an event of more than maxEvent
// bytes as sent (its lines, their line ends and the blank line that ends it).
func NewReader(r io.Reader, maxEvent int) *Reader {
	return &Reader{br: bufio.NewReaderSize(r, min(maxEvent, 32<<10)), max: maxEvent, first: true}
}

// Next advances to the next event, returning false at the end of the stream or on an error.
// Blank lines between events are skipped, not reported as events of their own.
func (r *Reader) Next() bool {
	if r.err != nil {
		return false
	}
	r.raw, r.data, r.name, r.lines = r.raw[:0], r.data[:0], r.name[:0], 0
	for {
		line, err := r.readLine()
		if err != nil {
			return r.end(err)
		}
		if len(line) == 0 {
			if r.lines == 0 {
				r.raw = r.raw[:0] // a blank line between events belongs to no event
				continue
			}
			if r.dispatch() {
				return true
			}
			r.raw, r.data, r.name, r.lines = r.raw[:0], r.data[:0], r.name[:0], 0
			continue
		}
		r.lines++
		r.field(line)
	}
}

// end handles the end of the stream (err is io.EOF) or a read error.
func (r *Reader) end(err error) bool {
	r.err = err
	if err != io.EOF {
		return false
	}
	r.err = nil
	if r.lines == 0 {
		return false // a clean end between events
	}
	if r.Lenient {
		return r.dispatch()
	}
	r.err = ErrTruncated
	return false
}

// dispatch finishes the current event, saying whether it is to be reported.
func (r *Reader) dispatch() bool {
	if len(r.data) == 0 && !r.All {
		return false
	}
	r.dataN = max(len(r.data)-1, 0)
	return true
}

// field interprets one non-blank line.
func (r *Reader) field(line []byte) {
	if line[0] == ':' {
		return // a comment
	}
	name, value, found := bytes.Cut(line, []byte{':'})
	if found {
		value = bytes.TrimPrefix(value, []byte{' '})
	}
	switch string(name) { // no allocation: the compiler compares in place
	case "data":
		r.data = append(append(r.data, value...), '\n')
	case "event":
		r.name = append(r.name[:0], value...)
	case "id":
		if bytes.IndexByte(value, 0) < 0 {
			r.id = append(r.id[:0], value...)
		}
	}
}

// readLine reads one line into raw and returns it without its line end. A "\r" that is the last
// byte buffered waits for the next byte to tell "\r" from "\r\n", so that a "\r\n" split across
// two reads stays one line end; that only delays the events of a server ending lines in a bare
// "\r" until its next byte. The returned error is io.EOF at the end of the stream (with a
// final unterminated line in raw, not returned), ErrTooLarge, or the read error.
func (r *Reader) readLine() ([]byte, error) {
	start := len(r.raw)
	for {
		buf, err := r.br.Peek(max(r.br.Buffered(), 1))
		if len(buf) == 0 {
			if line := r.trimBOM(r.raw[start:]); err == io.EOF && len(line) > 0 {
				r.lines++ // the unterminated line counts towards the event Lenient reports
				r.field(line)
			}
			return nil, err
		}
		i := lineEnd(buf)
		if i == len(buf) {
			if len(r.raw)+i > r.max {
				return nil, ErrTooLarge
			}
			r.raw = append(r.raw, buf...)
			r.br.Discard(len(buf))
			continue
		}
		end := i + 1
		if buf[i] == '\r' {
			if i+1 == len(buf) {
				// Peek may move the buffered bytes: buf is only valid as Peek returns it.
				buf, _ = r.br.Peek(i + 2)
			}
			if i+1 < len(buf) && buf[i+1] == '\n' {
				end = i + 2
			}
		}
		if len(r.raw)+end > r.max {
			return nil, ErrTooLarge
		}
		n := len(r.raw) + i
		r.raw = append(r.raw, buf[:end]...)
		r.br.Discard(end)
		return r.trimBOM(r.raw[start:n]), nil
	}
}

// lineEnd is the index of the first "\r" or "\n" in buf, len(buf) if none. Two IndexByte
// scans (vectorized) beat bytes.IndexAny's byte-at-a-time loop on the router's hot path.
func lineEnd(buf []byte) int {
	i := bytes.IndexByte(buf, '\n')
	if i < 0 {
		i = len(buf)
	}
	if j := bytes.IndexByte(buf[:i], '\r'); j >= 0 {
		return j
	}
	return i
}

// trimBOM drops the byte order mark from the stream's first line.
func (r *Reader) trimBOM(line []byte) []byte {
	if r.first {
		r.first = false
		return bytes.TrimPrefix(line, bom)
	}
	return line
}

// Raw is the current event exactly as read: its lines with their line ends and the blank line
// that ended it (absent for a final event Lenient reports), without the blank lines before it.
func (r *Reader) Raw() []byte { return r.raw }

// Data is the current event's data: its data values joined with "\n".
func (r *Reader) Data() []byte { return r.data[:r.dataN] }

// Text is Data as a string.
func (r *Reader) Text() string { return string(r.Data()) }

// HasData says whether the current event had a data line (only such events are dispatched by
// the spec; with All the others are reported too).
func (r *Reader) HasData() bool { return len(r.data) > 0 }

// Name is the current event's type, its "event" field; "" when it had none (the spec's
// "message").
func (r *Reader) Name() string { return string(r.name) }

// ID is the last event ID: the value of the latest "id" field so far, this event's or an
// earlier one's, as the spec keeps it.
func (r *Reader) ID() string { return string(r.id) }

// Err is the error that stopped Next: nil at a clean end of the stream, ErrTruncated when it
// ended inside an event (unless Lenient), ErrTooLarge, or the underlying reader's error.
func (r *Reader) Err() error { return r.err }
