package hub

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
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
	"ubatch/internal/demo"
	"ubatch/quant"
)

// ggufBlob returns a complete GGUF file of about n bytes (at least ~100): one F32 tensor whose data
// reaches the end of the file, so any cut is detectable.
func ggufBlob(n int) []byte {
	w := gguf.NewWriter()
	if err := w.Set("general.architecture", "test"); err != nil {
		panic(err)
	}
	elems := max(1, (n-96)/4)
	data := make([]byte, 4*elems)
	for i := range data {
		data[i] = byte(i * 31)
	}
	if err := w.AddTensor("t", quant.F32, []uint64{uint64(elems)}, data); err != nil {
		panic(err)
	}
	var b bytes.Buffer
	if _, err := w.WriteTo(&b); err != nil {
		panic(err)
	}
	return b.Bytes()
}

// serve starts a test hub and counts the requests it receives.
func serve(t *testing.T, h http.HandlerFunc) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		h(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

// files lists the regular files under dir, relative to it.
func files(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	return out
}

const modelPath = "/org/repo/resolve/main/sub/model.gguf"

func TestResolveHF(t *testing.T) {
	blob := ggufBlob(5000)
	tests := []struct {
		name    string
		handler http.HandlerFunc
		wantErr string
	}{
		{
			name: "success",
			handler: func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != modelPath {
					http.NotFound(w, r)
					return
				}
				w.Header().Set("Content-Length", strconv.Itoa(len(blob)))
				w.Write(blob)
			},
		},
		{
			name: "redirect with matching linked size",
			handler: func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == modelPath {
					w.Header().Set("X-Linked-Size", strconv.Itoa(len(blob)))
					http.Redirect(w, r, "/cdn/blob", http.StatusFound)
					return
				}
				w.Write(blob)
			},
		},
		{
			name: "unknown length",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Write(blob[:100])
				w.(http.Flusher).Flush() // forces chunked encoding: no Content-Length
				w.Write(blob[100:])
			},
		},
		{name: "not found", handler: http.NotFound, wantErr: "404"},
		{
			name:    "gated",
			handler: func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusForbidden) },
			wantErr: "gated",
		},
		{
			name:    "server error",
			handler: func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusBadGateway) },
			wantErr: "502",
		},
		{
			name: "truncated body",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Length", strconv.Itoa(len(blob)))
				w.Write(blob[:1000])
			},
			wantErr: "truncated",
		},
		{
			name: "wrong size",
			handler: func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == modelPath {
					w.Header().Set("X-Linked-Size", strconv.Itoa(len(blob)+10))
					http.Redirect(w, r, "/cdn/blob", http.StatusFound)
					return
				}
				w.Write(blob)
			},
			wantErr: "size mismatch",
		},
		{
			name: "wrong size without Content-Length",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("X-Linked-Size", strconv.Itoa(len(blob)+10))
				w.Write(blob[:100])
				w.(http.Flusher).Flush()
				w.Write(blob[100:])
			},
			wantErr: "size mismatch",
		},
		{
			name: "not a GGUF",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Write([]byte("<!DOCTYPE html><html>sign in</html>"))
			},
			wantErr: "not a GGUF",
		},
		{
			name:    "too short",
			handler: func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("GG")) },
			wantErr: "too short",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv, _ := serve(t, tc.handler)
			home := t.TempDir()
			got, err := Resolve(context.Background(), "hf://org/repo/sub/model.gguf", Options{Home: home, Endpoint: srv.URL})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one mentioning %q", err, tc.wantErr)
				}
				if left := files(t, home); len(left) != 0 {
					t.Fatalf("failed download left files behind: %v", left)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if want := filepath.Join(home, "org", "repo", "sub", "model.gguf"); got != want {
				t.Fatalf("path %q, want %q", got, want)
			}
			data, err := os.ReadFile(got)
			if err != nil || !bytes.Equal(data, blob) {
				t.Fatalf("downloaded content differs (err %v, %d bytes)", err, len(data))
			}
			if left := files(t, home); len(left) != 1 {
				t.Fatalf("cache holds %v, want only the model", left)
			}
		})
	}
}

func TestCacheHit(t *testing.T) {
	blob := ggufBlob(300)
	srv, requests := serve(t, func(w http.ResponseWriter, r *http.Request) { w.Write(blob) })
	opts := Options{Home: t.TempDir(), Endpoint: srv.URL}
	first, err := Resolve(context.Background(), "hf://org/repo/model.gguf", opts)
	if err != nil {
		t.Fatal(err)
	}
	second, err := Resolve(context.Background(), "hf://org/repo/model.gguf", opts)
	if err != nil {
		t.Fatal(err)
	}
	if first != second {
		t.Fatalf("second resolve gave %q, first %q", second, first)
	}
	if n := requests.Load(); n != 1 {
		t.Fatalf("%d requests, want 1 (the second resolve must use the cache)", n)
	}
}

func TestBadReferences(t *testing.T) {
	tests := []struct {
		name, arg, wantErr string
	}{
		{name: "empty", arg: "hf://", wantErr: "organisation"},
		{name: "org only", arg: "hf://org", wantErr: "organisation"},
		{name: "no file", arg: "hf://org/repo", wantErr: "organisation"},
		{name: "trailing slash", arg: "hf://org/repo/", wantErr: "empty path"},
		{name: "double slash", arg: "hf://org/repo/a//b.gguf", wantErr: "empty path"},
		{name: "parent escape", arg: "hf://org/../x/y.gguf", wantErr: "relative"},
		{name: "dot", arg: "hf://org/repo/./y.gguf", wantErr: "relative"},
		{name: "not gguf", arg: "hf://org/repo/model.safetensors", wantErr: ".gguf"},
		{name: "query", arg: "hf://org/repo/m.gguf?x=1", wantErr: "unsupported character"},
		{name: "backslash", arg: `hf://org/repo/..\m.gguf`, wantErr: "unsupported character"},
	}
	srv, requests := serve(t, func(w http.ResponseWriter, r *http.Request) { w.Write(ggufBlob(10)) })
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Resolve(context.Background(), tc.arg, Options{Home: t.TempDir(), Endpoint: srv.URL})
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want one mentioning %q", err, tc.wantErr)
			}
		})
	}
	if n := requests.Load(); n != 0 {
		t.Fatalf("bad references caused %d requests", n)
	}
}

func TestBadEndpoint(t *testing.T) {
	_, err := Resolve(context.Background(), "hf://o/r/m.gguf", Options{Home: t.TempDir(), Endpoint: "ftp://x"})
	if err == nil || !strings.Contains(err.Error(), "endpoint") {
		t.Fatalf("error %v, want one about the endpoint", err)
	}
}

func TestLocalPath(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "m.gguf")
	if err := os.WriteFile(model, ggufBlob(10), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, arg, wantErr string
	}{
		{name: "existing file", arg: model},
		{name: "missing", arg: filepath.Join(dir, "nope.gguf"), wantErr: "pass -m PATH.gguf"},
		{name: "looks like a hub path", arg: "org/repo/file.gguf", wantErr: "hf://org/repo/file.gguf"},
		{name: "directory", arg: dir, wantErr: "directory"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Resolve(context.Background(), tc.arg, Options{Home: t.TempDir()})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one mentioning %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.arg {
				t.Fatalf("Resolve = %q, %v; want %q", got, err, tc.arg)
			}
		})
	}
}

func writeFile(t *testing.T, p string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestDemoLookup lays out the cache in a temporary directory and checks which file the demo
// model comes from: a copy placed by hand or downloaded by an earlier version, else the
// embedded one, written out (again, when the file there differs from it). The hub is never asked.
func TestDemoLookup(t *testing.T) {
	blob := ggufBlob(700)
	embedded := "home/demo/" + demo.Name
	tests := []struct {
		name string
		// setup creates files under home and returns the expected path relative to its parent.
		setup func(t *testing.T, home string)
		want  string
	}{
		{name: "empty home: the embedded model", setup: func(*testing.T, string) {}, want: embedded},
		{
			name:  "file placed by hand in home",
			setup: func(t *testing.T, home string) { writeFile(t, filepath.Join(home, demo.Name), blob) },
			want:  "home/" + demo.Name,
		},
		{
			name: "hub-layout download of an earlier version",
			setup: func(t *testing.T, home string) {
				writeFile(t, filepath.Join(home, "ggml-org/models/tinyllamas", demo.Name), blob)
			},
			want: "home/ggml-org/models/tinyllamas/" + demo.Name,
		},
		{
			name: "a cut-short copy is rewritten",
			setup: func(t *testing.T, home string) {
				writeFile(t, filepath.Join(home, "demo", demo.Name), []byte(demo.GGUF[:1000]))
			},
			want: embedded,
		},
		{
			name: "an edited copy is rewritten",
			setup: func(t *testing.T, home string) {
				b := []byte(demo.GGUF)
				b[len(b)/2] ^= 1
				writeFile(t, filepath.Join(home, "demo", demo.Name), b)
			},
			want: embedded,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			home := filepath.Join(root, "home")
			tc.setup(t, home)
			srv, requests := serve(t, http.NotFound)
			got, err := Resolve(context.Background(), "", Options{Home: home, Endpoint: srv.URL})
			if err != nil {
				t.Fatal(err)
			}
			if n := requests.Load(); n != 0 {
				t.Errorf("%d requests to the hub, want none", n)
			}
			if got != filepath.Join(root, tc.want) {
				t.Fatalf("demo model resolved to %q, want %q", got, filepath.Join(root, tc.want))
			}
			if tc.want != embedded {
				return
			}
			if b, err := os.ReadFile(got); err != nil || string(b) != demo.GGUF {
				t.Fatalf("%s does not hold the embedded model (%d bytes, %v)", got, len(b), err)
			}
			if left := files(t, filepath.Dir(got)); len(left) != 1 {
				t.Fatalf("files left beside the demo model: %v", left)
			}
		})
	}
}

// TestDemoUnwritableHome: a home the demo model cannot be written to is an error that says
// what to do, not a panic or a download.
func TestDemoUnwritableHome(t *testing.T) {
	home := filepath.Join(t.TempDir(), "home")
	writeFile(t, filepath.Join(home, "demo"), []byte("a file where the folder should be"))
	_, err := Resolve(context.Background(), "", Options{Home: home, Endpoint: "http://127.0.0.1:1"})
	if err == nil || !strings.Contains(err.Error(), "set UBATCH_HOME to a writable folder") {
		t.Fatalf("error %v, want one saying to set UBATCH_HOME", err)
	}
}

func TestEnvironmentDefaults(t *testing.T) {
	blob := ggufBlob(64)
	srv, _ := serve(t, func(w http.ResponseWriter, r *http.Request) { w.Write(blob) })
	t.Setenv("HF_ENDPOINT", srv.URL)
	tests := []struct {
		name     string
		ubHome   string
		userHome string
		want     string // relative to the temp dir
	}{
		{name: "UBATCH_HOME", ubHome: "cache", userHome: "user", want: "cache/o/r/m.gguf"},
		{name: "home directory", userHome: "user", want: "user/.cache/ubatch/o/r/m.gguf"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			ub := ""
			if tc.ubHome != "" {
				ub = filepath.Join(dir, tc.ubHome)
			}
			t.Setenv("UBATCH_HOME", ub)
			t.Setenv("HOME", filepath.Join(dir, tc.userHome))
			got, err := Resolve(context.Background(), "hf://o/r/m.gguf", Options{})
			if err != nil {
				t.Fatal(err)
			}
			if want := filepath.Join(dir, tc.want); got != want {
				t.Fatalf("cached at %q, want %q", got, want)
			}
		})
	}
}

// stallingHub sends the start of a GGUF file, then nothing until the client goes away.
func stallingHub(t *testing.T, started chan<- struct{}) http.HandlerFunc {
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100000")
		w.Write(ggufBlob(1000))
		w.(http.Flusher).Flush()
		if started != nil {
			close(started)
		}
		select {
		case <-r.Context().Done():
		case <-done:
		}
	}
}

func TestStalledDownload(t *testing.T) {
	srv, _ := serve(t, stallingHub(t, nil))
	home := t.TempDir()
	start := time.Now()
	_, err := Resolve(context.Background(), "hf://o/r/m.gguf", Options{Home: home, Endpoint: srv.URL, IdleTimeout: 100 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "no data received") {
		t.Fatalf("error %v, want the idle timeout", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("stall detected only after %v", d)
	}
	if left := files(t, home); len(left) != 0 {
		t.Fatalf("stalled download left files behind: %v", left)
	}
}

func TestCancelledDownload(t *testing.T) {
	started := make(chan struct{})
	srv, _ := serve(t, stallingHub(t, started))
	home := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-started
		cancel()
	}()
	_, err := Resolve(ctx, "hf://o/r/m.gguf", Options{Home: home, Endpoint: srv.URL})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
	if left := files(t, home); len(left) != 0 {
		t.Fatalf("cancelled download left files behind: %v", left)
	}
}
