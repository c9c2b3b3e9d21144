package loadgen

import (
	"bufio"
	"bytes"
	"io"
	"strings"
)

// maxSSELine bounds one line of an event stream; a server that never sends a
// newline gets bufio.ErrTooLong instead of unbounded buffering.
const maxSSELine = 4 << 20

// eventScanner reads the data of server-sent events (the text/event-stream
// format) from r. Lines end in "\n", "\r\n" or "\r"; an empty line dispatches
// the event; "data:" lines (one optional space after the colon) are joined
// with "\n"; comment lines (":...") and other fields (event, id, retry) are
// ignored; an event with no data line is not reported. A final event cut off
// by EOF without its blank line is still reported, because some servers end
// the stream right after "data: [DONE]\n".
//
// Usage mirrors bufio.Scanner: for s.Next() { use s.Data() }; then s.Err().
type eventScanner struct {
	sc   *bufio.Scanner
	data strings.Builder
	has  bool // some data line was seen for the pending event
	out  string
}

func newEventScanner(r io.Reader) *eventScanner {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 16<<10), maxSSELine)
	sc.Split(splitSSELines)
	return &eventScanner{sc: sc}
}

// Next advances to the next event with data, returning false at EOF or on a
// read error.
func (s *eventScanner) Next() bool {
	for s.sc.Scan() {
		line := s.sc.Bytes()
		if len(line) == 0 {
			if s.dispatch() {
				return true
			}
			continue
		}
		field, value, found := bytes.Cut(line, []byte{':'})
		if len(field) == 0 {
			continue // comment
		}
		if string(field) != "data" {
			continue
		}
		if !found {
			value = nil // a bare "data" line is a data line with an empty value
		}
		value = bytes.TrimPrefix(value, []byte{' '})
		if s.has {
			s.data.WriteByte('\n')
		}
		s.data.Write(value)
		s.has = true
	}
	return s.sc.Err() == nil && s.dispatch()
}

func (s *eventScanner) dispatch() bool {
	if !s.has {
		return false
	}
	s.out = s.data.String()
	s.data.Reset()
	s.has = false
	return true
}

// Data is the current event's data, valid after Next returned true.
func (s *eventScanner) Data() string { return s.out }

// Err is the first read error, nil at a clean EOF.
func (s *eventScanner) Err() error { return s.sc.Err() }

// splitSSELines is a bufio.SplitFunc for the three SSE line terminators. A
// "\r" at the end of the buffered data waits for one more byte to tell "\r"
// from "\r\n"; that only delays events of servers using bare "\r".
func splitSSELines(data []byte, atEOF bool) (advance int, token []byte, err error) {
	if i := bytes.IndexAny(data, "\r\n"); i >= 0 {
		if data[i] == '\n' {
			return i + 1, data[:i], nil
		}
		if i+1 < len(data) {
			if data[i+1] == '\n' {
				return i + 2, data[:i], nil
			}
			return i + 1, data[:i], nil
		}
		if atEOF {
			return i + 1, data[:i], nil
		}
		return 0, nil, nil
	}
	if atEOF && len(data) > 0 {
		return len(data), data, nil
	}
	return 0, nil, nil
}
