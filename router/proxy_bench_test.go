package router

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// discardWriter is a ResponseWriter that keeps nothing, so that the benchmark measures the
// router's pass-through and not a recorder's buffer.
type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *discardWriter) WriteHeader(int)             {}
func (w *discardWriter) Flush()                      {}

// BenchmarkStream measures the per-event pass-through of a streamed completion: a node's
// 256 chunks and its usage chunk, through stream, to a client.
func BenchmarkStream(b *testing.B) {
	var body strings.Builder
	for i := range 256 {
		fmt.Fprintf(&body, "data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":\" tok%d\",\"finish_reason\":null}]}\n\n", i)
	}
	body.WriteString("data: {\"id\":\"cmpl-1\",\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":256,\"total_tokens\":261}}\n\n")
	body.WriteString("data: [DONE]\n\n")
	src := []byte(body.String())

	r, err := New(Config{Prompter: &Prompter{}, Nodes: []string{"http://127.0.0.1:1"}, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	n := &node{label: "127.0.0.1:1"}
	req := httptest.NewRequest(http.MethodPost, "/v1/completions", nil)
	resp := &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"text/event-stream"}}}
	w := &discardWriter{h: http.Header{}}
	b.SetBytes(int64(len(src)))
	b.ReportAllocs()
	for b.Loop() {
		ctx, cancel := context.WithCancelCause(context.Background())
		wd := newWatchdog(time.Minute, time.Minute, cancel)
		if a := r.stream(ctx, w, req, resp, bytes.NewReader(src), parsed{}, n, wd); !a.done {
			b.Fatal("stream not done")
		}
		wd.stop()
		cancel(nil)
	}
}
