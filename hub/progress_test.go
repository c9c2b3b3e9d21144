package hub

import (
	"bytes"
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

func TestProgressPrinter(t *testing.T) {
	const mib = 1 << 20
	tests := []struct {
		name  string
		calls [][2]int64
		want  []string // substrings, in order
		lines int      // newlines expected
	}{
		{
			name:  "known total",
			calls: [][2]int64{{0, 4 * mib}, {mib, 4 * mib}, {4 * mib, 4 * mib}},
			want:  []string{"\rmodel [", "0.0 / 4.0 MiB   0%", "1.0 / 4.0 MiB  25%", "4.0 / 4.0 MiB 100%"},
			lines: 1,
		},
		{
			name:  "half bar",
			calls: [][2]int64{{mib, 2 * mib}},
			want:  []string{"[" + strings.Repeat("#", 15) + strings.Repeat("-", 15) + "]", "50%"},
		},
		{
			name:  "unknown total",
			calls: [][2]int64{{3 * mib / 2, -1}},
			want:  []string{"\rmodel     1.5 MiB"},
		},
		{
			name:  "silent after completion",
			calls: [][2]int64{{10, 10}, {10, 10}},
			want:  []string{"100%"},
			lines: 1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			p := ProgressPrinter(&buf, "model")
			for _, c := range tc.calls {
				p(c[0], c[1])
			}
			out := buf.String()
			rest := out
			for _, w := range tc.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("output %q lacks %q (in order)", out, w)
				}
				rest = rest[i+len(w):]
			}
			if n := strings.Count(out, "\n"); n != tc.lines {
				t.Fatalf("output %q has %d newlines, want %d", out, n, tc.lines)
			}
			if strings.Count(out, "100%") > 1 {
				t.Fatalf("completion printed twice: %q", out)
			}
		})
	}
}

func TestDownloadReportsProgress(t *testing.T) {
	blob := ggufBlob(3 << 20)
	srv, _ := serve(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(blob)))
		w.Write(blob)
	})
	var calls [][2]int64
	_, err := Resolve(context.Background(), "hf://o/r/m.gguf", Options{
		Home: t.TempDir(), Endpoint: srv.URL,
		Progress: func(done, total int64) { calls = append(calls, [2]int64{done, total}) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) == 0 {
		t.Fatal("Progress never called")
	}
	for i, c := range calls {
		if c[1] != int64(len(blob)) {
			t.Fatalf("call %d: total %d, want %d", i, c[1], len(blob))
		}
		if i > 0 && c[0] < calls[i-1][0] {
			t.Fatalf("progress went backwards: %v", calls)
		}
	}
	if last := calls[len(calls)-1]; last[0] != int64(len(blob)) {
		t.Fatalf("last progress %v, want done = total", last)
	}
}
