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
			got, err := Resolve(context.Background(), tc.arg, Options{Home: t.TempDir(), SearchFrom: dir})
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

// TestDemoLookup lays out cache, shared folders and hub in temporary directories and checks
// which one the demo model comes from.
func TestDemoLookup(t *testing.T) {
	blob := ggufBlob(700)
	const demoURL = "/ggml-org/models/resolve/main/tinyllamas/stories260K.gguf"
	hubOK := func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != demoURL {
			http.NotFound(w, r)
			return
		}
		w.Write(blob)
	}
	tests := []struct {
		name string
		// setup creates files under root (which holds home/ and tree/) and returns the expected
		// path relative to root.
		setup        func(t *testing.T, root string) string
		searchFrom   string // relative to root
		hub          http.HandlerFunc
		wantRequests int32
		wantErr      string
	}{
		{
			name: "hub-layout cache beats shared",
			setup: func(t *testing.T, root string) string {
				writeFile(t, filepath.Join(root, "tree/shared/models", demoFile), blob)
				writeFile(t, filepath.Join(root, "home/ggml-org/models/tinyllamas", demoFile), blob)
				return "home/ggml-org/models/tinyllamas/" + demoFile
			},
			searchFrom: "tree",
			hub:        hubOK,
		},
		{
			name: "file placed by hand in home",
			setup: func(t *testing.T, root string) string {
				writeFile(t, filepath.Join(root, "tree/shared/models", demoFile), blob)
				writeFile(t, filepath.Join(root, "home", demoFile), blob)
				return "home/" + demoFile
			},
			searchFrom: "tree",
			hub:        hubOK,
		},
		{
			name: "shared in the start directory",
			setup: func(t *testing.T, root string) string {
				writeFile(t, filepath.Join(root, "tree/shared/models", demoFile), blob)
				return "tree/shared/models/" + demoFile
			},
			searchFrom: "tree",
			hub:        hubOK,
		},
		{
			name: "shared beside the repository, started deep inside it",
			setup: func(t *testing.T, root string) string {
				writeFile(t, filepath.Join(root, "tree/shared/models", demoFile), blob)
				if err := os.MkdirAll(filepath.Join(root, "tree/main/cmd/tool"), 0o755); err != nil {
					t.Fatal(err)
				}
				return "tree/shared/models/" + demoFile
			},
			searchFrom: "tree/main/cmd/tool",
			hub:        hubOK,
		},
		{
			name: "shared model directory without the file is skipped",
			setup: func(t *testing.T, root string) string {
				writeFile(t, filepath.Join(root, "tree/shared/models/other.gguf"), blob)
				return "home/ggml-org/models/tinyllamas/" + demoFile
			},
			searchFrom:   "tree",
			hub:          hubOK,
			wantRequests: 1,
		},
		{
			name:         "downloaded when found nowhere",
			setup:        func(t *testing.T, root string) string { return "home/ggml-org/models/tinyllamas/" + demoFile },
			searchFrom:   "tree",
			hub:          hubOK,
			wantRequests: 1,
		},
		{
			name:         "offline",
			setup:        func(t *testing.T, root string) string { return "" },
			searchFrom:   "tree",
			hub:          http.NotFound,
			wantRequests: 1,
			wantErr:      "no model: pass -m PATH.gguf, -m NAME (see ubatch list), -m ORG/REPO[:QUANT] or -m hf://ORG/REPO/FILE.gguf (offline? put the file in $UBATCH_HOME",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			if err := os.MkdirAll(filepath.Join(root, "tree"), 0o755); err != nil {
				t.Fatal(err)
			}
			if p := sharedAbove(root); p != "" && tc.wantRequests > 0 {
				t.Skipf("%s is above the test's temporary directory (TMPDIR), so the demo model is found there: run with TMPDIR elsewhere", p)
			}
			want := tc.setup(t, root)
			srv, requests := serve(t, tc.hub)
			got, err := Resolve(context.Background(), "", Options{
				Home:       filepath.Join(root, "home"),
				Endpoint:   srv.URL,
				SearchFrom: filepath.Join(root, tc.searchFrom),
			})
			if n := requests.Load(); n != tc.wantRequests {
				t.Errorf("%d requests to the hub, want %d", n, tc.wantRequests)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != filepath.Join(root, want) {
				t.Fatalf("demo model resolved to %q, want %q", got, filepath.Join(root, want))
			}
		})
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

// sharedAbove returns the demo model that findShared would find walking up from dir's parent,
// outside the test's own tree, or "".
func sharedAbove(dir string) string {
	for d := filepath.Dir(dir); ; d = filepath.Dir(d) {
		for _, base := range []string{d, filepath.Join(d, "..")} {
			if p := filepath.Join(base, "shared", "models", demoFile); isFile(p) {
				return p
			}
		}
		if filepath.Dir(d) == d {
			return ""
		}
	}
}
