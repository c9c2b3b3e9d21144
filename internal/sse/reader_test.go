package sse

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
)

// event is what a test expects of one reported event.
type event struct{ name, data, id string }

func (e event) String() string { return fmt.Sprintf("{%q %q id %q}", e.name, e.data, e.id) }

// readAll reads every event of in, through one-byte reads when split (so that events, lines
// and "\r\n" pairs straddle reads).
func readAll(in string, max int, all, lenient, split bool) (evs []event, raws []string, err error) {
	var src io.Reader = strings.NewReader(in)
	if split {
		src = iotest.OneByteReader(src)
	}
	rd := NewReader(src, max)
	rd.All, rd.Lenient = all, lenient
	for rd.Next() {
		evs = append(evs, event{rd.Name(), rd.Text(), rd.ID()})
		raws = append(raws, string(rd.Raw()))
	}
	return evs, raws, rd.Err()
}

// runSplit runs f as subtest name twice: with whole reads, then with one-byte reads.
func runSplit(t *testing.T, name string, f func(t *testing.T, split bool)) {
	t.Run(name, func(t *testing.T) { f(t, false) })
	t.Run(name+"/one byte reads", func(t *testing.T) { f(t, true) })
}

func TestReader(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		lenient bool
		want    []event
		err     error
	}{
		// The examples of the WHATWG spec, §9.2.6.
		{name: "spec: three data lines", in: "data: YHOO\ndata: +2\ndata: 10\n\n",
			want: []event{{"", "YHOO\n+2\n10", ""}}},
		{name: "spec: comment, ids, no space, two spaces",
			in:   ": test stream\n\ndata: first event\nid: 1\n\ndata:second event\nid\n\ndata:  third event\n\n",
			want: []event{{"", "first event", "1"}, {"", "second event", ""}, {"", " third event", ""}}},
		{name: "spec: bare data fields; final event without blank line dropped",
			in: "data\n\ndata\ndata\n\ndata:", want: []event{{"", "", ""}, {"", "\n", ""}}, err: ErrTruncated},
		{name: "spec: space after colon optional", in: "data:test\n\ndata: test\n\n",
			want: []event{{"", "test", ""}, {"", "test", ""}}},
		{name: "crlf", in: "data: x\r\n\r\ndata: y\r\n\r\n", want: []event{{"", "x", ""}, {"", "y", ""}}},
		{name: "bare cr", in: "data: x\r\rdata: y\r\r", want: []event{{"", "x", ""}, {"", "y", ""}}},
		{name: "mixed line ends", in: "data: a\rdata: b\r\ndata: c\n\r\n", want: []event{{"", "a\nb\nc", ""}}},
		{name: "named events", in: "event: response.created\ndata: {}\n\nevent: done\ndata: 1\n\ndata: 2\n\n",
			want: []event{{"response.created", "{}", ""}, {"done", "1", ""}, {"", "2", ""}}},
		{name: "id carries over, NUL ignored", in: "id: 7\ndata: a\n\ndata: b\n\nid: x\x00\ndata: c\n\n",
			want: []event{{"", "a", "7"}, {"", "b", "7"}, {"", "c", "7"}}},
		{name: "events without data not dispatched", in: "event: foo\n\n: ping\n\nid: 1\n\nretry: 10\ndata: x\n\n",
			want: []event{{"", "x", "1"}}},
		{name: "unknown field and field without colon ignored", in: "foo: bar\nbaz\ndata: x\n\n",
			want: []event{{"", "x", ""}}},
		{name: "colon in value kept", in: "data: {\"t\":\"a:b\"}\n\n", want: []event{{"", `{"t":"a:b"}`, ""}}},
		{name: "[DONE] is data", in: "data: {\"a\":1}\n\ndata: [DONE]\n\n",
			want: []event{{"", `{"a":1}`, ""}, {"", "[DONE]", ""}}},
		{name: "byte order mark", in: "\xef\xbb\xbfdata: x\n\n", want: []event{{"", "x", ""}}},
		{name: "empty stream", in: ""},
		{name: "only blank lines", in: "\n\r\n\r\n"},
		{name: "truncated mid-line", in: "data: a\n\ndata: {\"cho", want: []event{{"", "a", ""}}, err: ErrTruncated},
		{name: "truncated before blank line", in: "data: a\n", err: ErrTruncated},
		{name: "lenient: final event reported", in: "data: a\n\ndata: [DONE]", lenient: true,
			want: []event{{"", "a", ""}, {"", "[DONE]", ""}}},
		{name: "lenient: final line ended", in: "data: [DONE]\n", lenient: true, want: []event{{"", "[DONE]", ""}}},
		{name: "lenient: final comment not dispatched", in: "data: a\n\n: bye", lenient: true,
			want: []event{{"", "a", ""}}},
	}
	for _, tt := range tests {
		runSplit(t, tt.name, func(t *testing.T, split bool) {
			got, _, err := readAll(tt.in, 1<<10, false, tt.lenient, split)
			if !slices.Equal(got, tt.want) || !errors.Is(err, tt.err) {
				t.Errorf("got %v, err %v; want %v, %v", got, err, tt.want, tt.err)
			}
		})
	}
}

// TestReaderRaw checks what a proxy sees (All): every event, as sent.
func TestReaderRaw(t *testing.T) {
	long := "data: " + strings.Repeat("x", 100000) + "\n\n"
	tests := []struct {
		name string
		in   string
		want []string
		err  error
	}{
		{name: "two events", in: "data: a\n\ndata: b\n\n", want: []string{"data: a\n\n", "data: b\n\n"}},
		{name: "crlf", in: "data: a\r\n\r\n", want: []string{"data: a\r\n\r\n"}},
		{name: "bare cr", in: "data: a\r\r", want: []string{"data: a\r\r"}},
		{name: "multi-line event", in: "event: x\ndata: a\n\n", want: []string{"event: x\ndata: a\n\n"}},
		{name: "blank lines between", in: "\n\ndata: a\n\n\n", want: []string{"data: a\n\n"}},
		{name: "comments and empty events kept", in: ": ping\n\nevent: x\n\ndata: a\n\n",
			want: []string{": ping\n\n", "event: x\n\n", "data: a\n\n"}},
		{name: "truncated", in: "data: a\n\ndata: {\"cho", want: []string{"data: a\n\n"}, err: ErrTruncated},
		{name: "line without end", in: "data: a\n", err: ErrTruncated},
		{name: "long event", in: long, want: []string{long}},
	}
	for _, tt := range tests {
		runSplit(t, tt.name, func(t *testing.T, split bool) {
			_, got, err := readAll(tt.in, 1<<20, true, false, split)
			if !slices.Equal(got, tt.want) || !errors.Is(err, tt.err) {
				t.Errorf("got %q, err %v; want %q, %v", got, err, tt.want, tt.err)
			}
		})
	}
}

func TestReaderErrors(t *testing.T) {
	tests := []struct {
		name string
		r    io.Reader
		max  int
		want []string // the data of the events before the error
		err  error
	}{
		{name: "read error", r: io.MultiReader(strings.NewReader("data: a\n\ndata: b"), iotest.ErrReader(io.ErrClosedPipe)),
			max: 100, want: []string{"a"}, err: io.ErrClosedPipe},
		{name: "line too long", r: strings.NewReader("data: a\n\ndata: " + strings.Repeat("x", 200) + "\n\n"),
			max: 100, want: []string{"a"}, err: ErrTooLarge},
		{name: "event too long in short lines", r: strings.NewReader(strings.Repeat("data: x\n", 20) + "\n"),
			max: 100, err: ErrTooLarge},
		{name: "never a line end", r: iotest.OneByteReader(strings.NewReader(strings.Repeat("x", 1000))),
			max: 100, err: ErrTooLarge},
		{name: "at the bound", r: strings.NewReader("data: " + strings.Repeat("x", 92) + "\n\n"),
			max: 100, want: []string{strings.Repeat("x", 92)}},
		{name: "one past the bound", r: strings.NewReader("data: " + strings.Repeat("x", 92) + "\r\n\n"),
			max: 100, err: ErrTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rd := NewReader(tt.r, tt.max)
			var got []string
			for rd.Next() {
				got = append(got, rd.Text())
			}
			if !slices.Equal(got, tt.want) || !errors.Is(rd.Err(), tt.err) {
				t.Errorf("got %q, err %v; want %q, %v", got, rd.Err(), tt.want, tt.err)
			}
			if rd.Next() {
				t.Error("Next after the end reported an event")
			}
		})
	}
}

// FuzzReader checks that any input is read without a panic, within the bound, that every
// event a proxy sees (All) is passed on byte for byte, and that a split of the input into
// one-byte reads changes nothing.
func FuzzReader(f *testing.F) {
	for _, s := range []string{"data: a\n\n", "data: a\r\n\r\n", "data:x\rid: 1\r\r", ": c\n\nevent: e\ndata\n\n",
		"\xef\xbb\xbfdata: a\n\ndata: b", "data: a\r", "\r\n\r\n\n"} {
		f.Add(s, 64)
	}
	f.Fuzz(func(t *testing.T, in string, max int) {
		max = 1 + abs(max)%256
		for _, all := range []bool{false, true} {
			evs, raws, err := readAll(in, max, all, false, false)
			evs1, raws1, err1 := readAll(in, max, all, false, true)
			if !slices.Equal(evs, evs1) || !slices.Equal(raws, raws1) || !errors.Is(err1, err) {
				t.Fatalf("one-byte reads differ: %v %q %v, then %v %q %v", evs, raws, err, evs1, raws1, err1)
			}
			rest := in
			for _, r := range raws {
				if len(r) > max {
					t.Fatalf("event of %d bytes passed a bound of %d", len(r), max)
				}
				i := strings.Index(rest, r)
				if i < 0 || all && strings.Trim(rest[:i], "\r\n") != "" {
					t.Fatalf("raw event %q is not the next event of %q", r, rest)
				}
				rest = rest[i+len(r):]
			}
			if all {
				// Passed on, the events read the same.
				_, again, _ := readAll(strings.Join(raws, ""), max, true, false, false)
				if !slices.Equal(again, raws) {
					t.Fatalf("raw events %q read again as %q", raws, again)
				}
			}
		}
	})
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}
