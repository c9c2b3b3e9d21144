package hub

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"ubatch/gguf"
)

// rawHub answers every request with a hand-written HTTP/1.1 response: status line, head (header
// lines, each ending in CRLF), then body, then it closes the connection. Without a Content-Length
// in head the body is delimited by the close, so a cut looks to the client like a normal end.
func rawHub(t *testing.T, head string, body []byte) *httptest.Server {
	t.Helper()
	srv, _ := serve(t, func(w http.ResponseWriter, r *http.Request) {
		conn, bw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		bw.WriteString("HTTP/1.1 200 OK\r\nConnection: close\r\n" + head + "\r\n")
		bw.Write(body)
		bw.Flush()
	})
	return srv
}

// TestDownloadNeedsAKnownOrVerifiableSize cuts responses short in ways the client cannot see
// from the transfer alone, and checks that only complete files reach the cache.
func TestDownloadNeedsAKnownOrVerifiableSize(t *testing.T) {
	blob := ggufBlob(5000)
	f, err := gguf.Parse(blob)
	if err != nil {
		t.Fatal(err)
	}
	// Where the tensor infos end and the tensor data does (alignment padding may follow it).
	infoEnd, dataEnd := int(f.DataOffset), int(f.DataOffset+f.Tensors[0].Offset+f.Tensors[0].Size)
	tests := []struct {
		name    string
		head    string
		body    []byte
		wantErr []string // all must appear; none means success
	}{
		{name: "no length, complete", body: blob},
		{name: "no length, matching X-Linked-Size", head: "X-Linked-Size: " + strconv.Itoa(len(blob)) + "\r\n", body: blob},
		{name: "no length, cut in the tensor data", body: blob[:dataEnd-1],
			wantErr: []string{"announced no size", "not a complete GGUF", "outside the file", "partial download was deleted"}},
		{name: "no length, cut in the tensor infos", body: blob[:infoEnd-40],
			wantErr: []string{"not a complete GGUF", "partial download was deleted"}},
		{name: "no length, cut in the metadata", body: blob[:30],
			wantErr: []string{"not a complete GGUF", "partial download was deleted"}},
		{name: "no length, X-Linked-Size larger than the body", head: "X-Linked-Size: " + strconv.Itoa(len(blob)) + "\r\n", body: blob[:4000],
			wantErr: []string{"size mismatch: got 4000 bytes, expected " + strconv.Itoa(len(blob)), "partial download was deleted"}},
		{name: "Content-Length larger than the body", head: "Content-Length: " + strconv.Itoa(len(blob)) + "\r\n", body: blob[:4000],
			wantErr: []string{"truncated download: got 4000 of " + strconv.Itoa(len(blob)), "partial download was deleted"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := rawHub(t, tc.head, tc.body)
			home := t.TempDir()
			got, err := Resolve(context.Background(), "hf://org/repo/model.gguf", Options{Home: home, Endpoint: srv.URL})
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				if data, _ := os.ReadFile(got); len(data) != len(blob) {
					t.Fatalf("cached %d bytes, want %d", len(data), len(blob))
				}
				return
			}
			if err == nil {
				t.Fatalf("a cut download was accepted into the cache: %v", files(t, home))
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if left := files(t, home); len(left) != 0 {
				t.Fatalf("failed download left files behind: %v", left)
			}
			// Nothing was cached, so the next resolve downloads again (and gets the whole file).
			full := rawHub(t, "", blob)
			if _, err := Resolve(context.Background(), "hf://org/repo/model.gguf", Options{Home: home, Endpoint: full.URL}); err != nil {
				t.Fatalf("retry after the cut: %v", err)
			}
		})
	}
}

// TestStalePartFilesAreRemoved leaves part files behind as a download killed with SIGKILL does
// (the process dies holding the file, so its lock goes with it), and checks that the next download
// of the same file removes them, whether it succeeds or fails, and leaves other files alone.
func TestStalePartFilesAreRemoved(t *testing.T) {
	blob := ggufBlob(3000)
	ok := func(w http.ResponseWriter, r *http.Request) { w.Write(blob) }
	tests := []struct {
		name    string
		handler http.HandlerFunc
		wantErr string
	}{
		{name: "next download succeeds", handler: ok},
		{name: "next download fails", handler: http.NotFound, wantErr: "404"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv, _ := serve(t, tc.handler)
			home := t.TempDir()
			dir := filepath.Join(home, "org", "repo")
			stale := []string{".model.gguf.12345.part", ".model.gguf.9.part"}
			kept := []string{
				".model.gguf.b.gguf.77.part", // a part file of model.gguf.b.gguf, not of model.gguf
				".other.gguf.1.part",
				"notes.txt",
			}
			for _, name := range append(append([]string{}, stale...), kept...) {
				writeFile(t, filepath.Join(dir, name), blob[:1000])
			}
			_, err := Resolve(context.Background(), "hf://org/repo/model.gguf", Options{Home: home, Endpoint: srv.URL})
			if tc.wantErr == "" && err != nil {
				t.Fatal(err)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("error %v, want one mentioning %q", err, tc.wantErr)
			}
			want := map[string]bool{}
			for _, k := range kept {
				want["org/repo/"+k] = true
			}
			if tc.wantErr == "" {
				want["org/repo/model.gguf"] = true
			}
			left := files(t, home)
			for _, f := range left {
				if !want[f] {
					t.Errorf("%s is still in the cache", f)
				}
				delete(want, f)
			}
			for f := range want {
				t.Errorf("%s was removed, but it is not a stale part file of model.gguf", f)
			}
		})
	}
}

func TestIsPartOf(t *testing.T) {
	tests := []struct {
		name, file, dest string
		want             bool
	}{
		{name: "os.CreateTemp name", file: ".m.gguf.3141592.part", dest: "/c/m.gguf", want: true},
		{name: "no digits", file: ".m.gguf..part", dest: "/c/m.gguf"},
		{name: "another file's part", file: ".m.gguf.x.gguf.1.part", dest: "/c/m.gguf"},
		{name: "the model itself", file: "m.gguf", dest: "/c/m.gguf"},
		{name: "not hidden", file: "m.gguf.1.part", dest: "/c/m.gguf"},
		{name: "other suffix", file: ".m.gguf.1.partial", dest: "/c/m.gguf"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := isPartOf(tc.file, tc.dest); got != tc.want {
				t.Fatalf("isPartOf(%q, %q) = %v, want %v", tc.file, tc.dest, got, tc.want)
			}
		})
	}
}

// TestPartFileOfALiveDownloadIsKept runs two downloads of one file at once: the second must not
// delete the first one's part file, and both must end with the complete file.
func TestPartFileOfALiveDownloadIsKept(t *testing.T) {
	blob := ggufBlob(4000)
	first := make(chan struct{})
	release := make(chan struct{})
	var calls atomic.Int32
	srv, _ := serve(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(blob)))
		if calls.Add(1) == 1 {
			w.Write(blob[:1000])
			w.(http.Flusher).Flush()
			close(first)
			<-release
			w.Write(blob[1000:])
			return
		}
		w.Write(blob)
	})
	home := t.TempDir()
	opts := Options{Home: home, Endpoint: srv.URL, IdleTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() {
		_, err := Resolve(context.Background(), "hf://org/repo/model.gguf", opts)
		errc <- err
	}()
	<-first
	for deadline := time.Now().Add(5 * time.Second); !hasPart(t, home); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first download wrote no part file")
		}
	}
	// The first download's part file exists and is held; a second download starts meanwhile. The
	// cache file is not there yet, so it downloads too.
	if _, err := Resolve(context.Background(), "hf://org/repo/model.gguf", opts); err != nil {
		t.Fatalf("second download: %v", err)
	}
	close(release)
	if err := <-errc; err != nil {
		t.Fatalf("the first download failed (its part file was removed under it?): %v", err)
	}
	if left := files(t, home); len(left) != 1 || left[0] != "org/repo/model.gguf" {
		t.Fatalf("cache holds %v, want only the model", left)
	}
}

func hasPart(t *testing.T, home string) bool {
	for _, f := range files(t, home) {
		if strings.HasSuffix(f, partSuffix) {
			return true
		}
	}
	return false
}
