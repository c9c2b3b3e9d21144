package loadgen

import (
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"testing/iotest"

	"ubatch/internal/sse"
)

func TestEventReader(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{name: "basic", in: "data: {\"a\":1}\n\ndata: [DONE]\n\n", want: []string{`{"a":1}`, "[DONE]"}},
		{name: "crlf", in: "data: x\r\n\r\ndata: y\r\n\r\n", want: []string{"x", "y"}},
		{name: "bare cr", in: "data: x\r\rdata: y\r\r", want: []string{"x", "y"}},
		{name: "no space after colon", in: "data:x\n\n", want: []string{"x"}},
		{name: "only one space stripped", in: "data:  x\n\n", want: []string{" x"}},
		{name: "multi-line data joined", in: "data: a\ndata: b\n\n", want: []string{"a\nb"}},
		{name: "comments and other fields ignored",
			in:   ": ping\nevent: message\nid: 3\nretry: 10\ndata: x\n\n: keepalive\n\n",
			want: []string{"x"}},
		{name: "event without data not reported", in: "event: foo\n\ndata: x\n\n", want: []string{"x"}},
		{name: "bare data field is empty data", in: "data\n\n", want: []string{""}},
		{name: "last event without blank line", in: "data: a\n\ndata: [DONE]", want: []string{"a", "[DONE]"}},
		{name: "empty stream", in: "", want: nil},
		{name: "colon in value kept", in: "data: {\"t\":\"a:b\"}\n\n", want: []string{`{"t":"a:b"}`}},
	}
	for _, tt := range tests {
		for _, split := range []bool{false, true} {
			name := tt.name
			if split {
				name += "/one byte reads"
			}
			t.Run(name, func(t *testing.T) {
				var r io.Reader = strings.NewReader(tt.in)
				if split {
					// Events and even "\r\n" pairs straddle reads.
					r = iotest.OneByteReader(r)
				}
				s := newEventReader(r)
				var got []string
				for s.Next() {
					got = append(got, s.Text())
				}
				if err := s.Err(); err != nil {
					t.Fatalf("Err() = %v", err)
				}
				if !slices.Equal(got, tt.want) {
					t.Errorf("got %q, want %q", got, tt.want)
				}
			})
		}
	}
}

func TestEventReaderErrors(t *testing.T) {
	tests := []struct {
		name string
		r    io.Reader
		want error
	}{
		{name: "read error", r: io.MultiReader(strings.NewReader("data: a\n\n"), iotest.ErrReader(io.ErrUnexpectedEOF)),
			want: io.ErrUnexpectedEOF},
		{name: "event too long", r: strings.NewReader("data: " + strings.Repeat("x", maxSSEEvent+10) + "\n\n"),
			want: sse.ErrTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newEventReader(tt.r)
			for s.Next() {
			}
			if !errors.Is(s.Err(), tt.want) {
				t.Errorf("Err() = %v, want %v", s.Err(), tt.want)
			}
		})
	}
}
