package hub

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"ubatch/gguf"
	"ubatch/quant"
)

// modelBlob is a complete GGUF of about n bytes of family arch with general.file_type ft.
func modelBlob(t testing.TB, arch string, ft uint32, n int) []byte {
	t.Helper()
	w := gguf.NewWriter()
	for k, v := range map[string]any{"general.architecture": arch, "general.file_type": ft} {
		if err := w.Set(k, v); err != nil {
			t.Fatal(err)
		}
	}
	data := make([]byte, 4*max(1, n/4))
	for i := range data {
		data[i] = byte(i*7 + int(ft))
	}
	if err := w.AddTensor("t", quant.F32, []uint64{uint64(len(data) / 4)}, data); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if _, err := w.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// standIn is a local Hugging Face Hub: /api/models/ORG/REPO?blobs=true lists the files with
// their sizes and sha256, /ORG/REPO/resolve/main/FILE serves them (with Range, through
// http.ServeContent). cutNext makes the next download send half the file and close.
type standIn struct {
	t       *testing.T
	repos   map[string]map[string][]byte // "ORG/REPO" -> file -> content
	mu      sync.Mutex
	auth    []string // the Authorization header of each request
	ranges  []string // the Range header of each download
	cutNext bool
	url     string
}

func newStandIn(t *testing.T, repos map[string]map[string][]byte) *standIn {
	s := &standIn{t: t, repos: repos}
	srv, _ := serve(t, s.handle)
	s.url = srv.URL
	return s
}

func (s *standIn) handle(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.auth = append(s.auth, r.Header.Get("Authorization"))
	s.mu.Unlock()
	if repo, ok := strings.CutPrefix(r.URL.Path, "/api/models/"); ok {
		files, ok := s.repos[repo]
		if !ok || r.URL.Query().Get("blobs") != "true" {
			http.NotFound(w, r)
			return
		}
		type lfs struct {
			SHA256 string `json:"sha256"`
			Size   int    `json:"size"`
		}
		type sib struct {
			RFilename string `json:"rfilename"`
			Size      int    `json:"size"`
			LFS       *lfs   `json:"lfs,omitempty"`
		}
		info := struct {
			ID       string `json:"id"`
			Siblings []sib  `json:"siblings"`
		}{ID: repo, Siblings: []sib{{RFilename: "README.md", Size: 10}}}
		for name, data := range files {
			sum := sha256.Sum256(data)
			info.Siblings = append(info.Siblings, sib{name, len(data), &lfs{hex.EncodeToString(sum[:]), len(data)}})
		}
		json.NewEncoder(w).Encode(info)
		return
	}
	parts := strings.SplitN(strings.TrimPrefix(r.URL.Path, "/"), "/", 5) // ORG REPO resolve main FILE
	if len(parts) != 5 || parts[2] != "resolve" {
		http.NotFound(w, r)
		return
	}
	data, ok := s.repos[parts[0]+"/"+parts[1]][parts[4]]
	if !ok {
		http.NotFound(w, r)
		return
	}
	s.mu.Lock()
	s.ranges = append(s.ranges, r.Header.Get("Range"))
	cut := s.cutNext
	s.cutNext = false
	s.mu.Unlock()
	if cut { // announce the whole file, send half, drop the connection
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		w.WriteHeader(http.StatusOK)
		w.Write(data[:len(data)/2])
		w.(http.Flusher).Flush()
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
		return
	}
	http.ServeContent(w, r, path.Base(parts[4]), time.Time{}, bytes.NewReader(data))
}

// quantRepo is a GGUF repository with three quants, a projector and a README.
func quantRepo(t *testing.T) map[string][]byte {
	return map[string][]byte{
		"Qwen3-0.6B-Q4_K_M.gguf": modelBlob(t, "qwen3", 15, 3000),
		"Qwen3-0.6B-Q8_0.gguf":   modelBlob(t, "qwen3", 7, 5000),
		"Qwen3-0.6B-F16.gguf":    modelBlob(t, "qwen3", 1, 8000),
		"mmproj-Qwen3-F16.gguf":  modelBlob(t, "clip", 1, 500),
	}
}

func TestPullPicksTheQuant(t *testing.T) {
	hub := newStandIn(t, map[string]map[string][]byte{
		"Qwen/Qwen3-0.6B-GGUF": quantRepo(t),
		"ggml-org/split": {
			"m-Q4_K_S.gguf": modelBlob(t, "llama", 14, 400), "m-q4_k_s-v2.gguf": modelBlob(t, "llama", 14, 400),
			"big-Q2_K-00001-of-00002.gguf": modelBlob(t, "llama", 10, 400), "big-Q2_K-00002-of-00002.gguf": modelBlob(t, "llama", 10, 400),
		},
		"a/one": {"sub/only.gguf": modelBlob(t, "llama", 0, 400)},
	})
	tests := []struct {
		name     string
		arg      string
		wantFile string // path relative to the library; "" = an error
		wantName string
		wantErr  []string
		wantNote string
	}{
		{name: "quant tag", arg: "Qwen/Qwen3-0.6B-GGUF:Q8_0", wantFile: "Qwen/Qwen3-0.6B-GGUF/Qwen3-0.6B-Q8_0.gguf", wantName: "qwen3-0.6b:q8_0"},
		{name: "lower-case tag", arg: "Qwen/Qwen3-0.6B-GGUF:f16", wantFile: "Qwen/Qwen3-0.6B-GGUF/Qwen3-0.6B-F16.gguf", wantName: "qwen3-0.6b:f16"},
		{name: "no tag takes Q4_K_M", arg: "Qwen/Qwen3-0.6B-GGUF", wantFile: "Qwen/Qwen3-0.6B-GGUF/Qwen3-0.6B-Q4_K_M.gguf",
			wantName: "qwen3-0.6b:q4_k_m", wantNote: "took Qwen3-0.6B-Q4_K_M.gguf"},
		{name: "hf reference", arg: "hf://Qwen/Qwen3-0.6B-GGUF/Qwen3-0.6B-Q8_0.gguf", wantFile: "Qwen/Qwen3-0.6B-GGUF/Qwen3-0.6B-Q8_0.gguf", wantName: "qwen3-0.6b:q8_0"},
		{name: "one file", arg: "a/one", wantFile: "a/one/sub/only.gguf", wantName: "one:only"},
		{name: "first shard only", arg: "ggml-org/split:Q2_K", wantFile: "ggml-org/split/big-Q2_K-00001-of-00002.gguf", wantName: "split:q2_k"},
		{name: "missing quant lists the files", arg: "Qwen/Qwen3-0.6B-GGUF:Q5_K_M",
			wantErr: []string{`no .gguf file for quant "Q5_K_M"`, "Qwen3-0.6B-Q4_K_M.gguf", "Qwen3-0.6B-Q8_0.gguf", "Qwen3-0.6B-F16.gguf"}},
		{name: "Q4_K is not Q4_K_M", arg: "Qwen/Qwen3-0.6B-GGUF:Q4_K", wantErr: []string{`no .gguf file for quant "Q4_K"`}},
		{name: "ambiguous quant lists the matches", arg: "ggml-org/split:q4_k_s",
			wantErr: []string{`2 .gguf files for quant "q4_k_s"`, "m-Q4_K_S.gguf", "m-q4_k_s-v2.gguf", "hf://ggml-org/split/FILE.gguf"}},
		{name: "unknown repository", arg: "nobody/nothing", wantErr: []string{"nobody/nothing", "404"}},
		{name: "bad reference", arg: "a/b/c:Q8_0", wantErr: []string{"want ORG/REPO[:QUANT]"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			home := t.TempDir()
			m, note, err := Pull(context.Background(), tc.arg, Options{Home: home, Endpoint: hub.url})
			if tc.wantFile == "" {
				if err == nil {
					t.Fatalf("pulled %s, want an error", m.Path)
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not say %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if want := filepath.Join(home, "models", filepath.FromSlash(tc.wantFile)); m.Path != want {
				t.Errorf("path %s, want %s", m.Path, want)
			}
			if m.Name != tc.wantName {
				t.Errorf("name %q, want %q", m.Name, tc.wantName)
			}
			if !strings.Contains(note, tc.wantNote) || (tc.wantNote == "") != (note == "") {
				t.Errorf("note %q, want one saying %q", note, tc.wantNote)
			}
			p := strings.SplitN(tc.wantFile, "/", 3) // ORG, REPO, FILE
			want := hub.repos[p[0]+"/"+p[1]][p[2]]
			data, _ := os.ReadFile(m.Path)
			sum := sha256.Sum256(want)
			if !bytes.Equal(data, want) || m.SHA256 != hex.EncodeToString(sum[:]) || m.Size != int64(len(want)) {
				t.Errorf("file or manifest differ from the hub's: %d bytes, manifest %+v", len(data), m)
			}
			// The manifest is on disk and both the name and the source resolve to the file.
			for _, arg := range []string{tc.wantName, tc.arg, strings.ToUpper(tc.wantName)} {
				got, err := Resolve(context.Background(), arg, Options{Home: home, Endpoint: "http://127.0.0.1:1"})
				if err != nil || got != m.Path {
					t.Errorf("Resolve(%q) = %q, %v; want %s", arg, got, err, m.Path)
				}
			}
		})
	}
}

func TestPullResumesACutDownload(t *testing.T) {
	repo := quantRepo(t)
	hub := newStandIn(t, map[string]map[string][]byte{"Qwen/Qwen3-0.6B-GGUF": repo})
	home := t.TempDir()
	opts := Options{Home: home, Endpoint: hub.url, Token: "hf_secret"}
	hub.cutNext = true
	_, _, err := Pull(context.Background(), "Qwen/Qwen3-0.6B-GGUF:Q8_0", opts)
	if err == nil || !strings.Contains(err.Error(), "run the same pull again to resume") {
		t.Fatalf("cut pull: error %v, want one saying how to resume", err)
	}
	dest := filepath.Join(home, "models", "Qwen", "Qwen3-0.6B-GGUF", "Qwen3-0.6B-Q8_0.gguf")
	want := repo["Qwen3-0.6B-Q8_0.gguf"]
	if st, err := os.Stat(dest + ".part"); err != nil || st.Size() != int64(len(want)/2) {
		t.Fatalf("part file after the cut: %v, %v; want %d bytes", st, err, len(want)/2)
	}
	if _, err := os.Stat(dest); err == nil {
		t.Fatal("a cut download reached the library")
	}
	m, _, err := Pull(context.Background(), "Qwen/Qwen3-0.6B-GGUF:Q8_0", opts)
	if err != nil {
		t.Fatal(err)
	}
	if got := hub.ranges[len(hub.ranges)-1]; got != "bytes="+strconv.Itoa(len(want)/2)+"-" {
		t.Errorf("the second pull sent Range %q, want the rest from byte %d", got, len(want)/2)
	}
	data, _ := os.ReadFile(m.Path)
	sum := sha256.Sum256(want)
	if !bytes.Equal(data, want) || m.SHA256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("resumed file differs (%d bytes, sha %s)", len(data), m.SHA256)
	}
	if _, err := os.Stat(dest + ".part"); err == nil {
		t.Error("the part file is left after the download completed")
	}
	for i, a := range hub.auth {
		if a != "Bearer hf_secret" {
			t.Errorf("request %d sent Authorization %q, want the HF token", i, a)
		}
	}
}

func TestPullRejectsBadContent(t *testing.T) {
	good := modelBlob(t, "llama", 7, 2000)
	tests := []struct {
		name    string
		part    []byte // left by an earlier pull
		serve   []byte // what the hub sends; the API announces good's size and sha256
		wantErr string
	}{
		{name: "not a GGUF", serve: append([]byte("<html>"), good[6:]...), wantErr: "not a GGUF file"},
		{name: "checksum differs", serve: append(append([]byte{}, good[:len(good)-1]...), good[len(good)-1]^1), wantErr: "checksum mismatch"},
		{name: "bad part file is replaced", part: []byte("junkjunk"), serve: good},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hub := newStandIn(t, map[string]map[string][]byte{"o/r": {"m-Q8_0.gguf": good}})
			hub.repos["o/r"]["m-Q8_0.gguf"] = good
			home := t.TempDir()
			dest := filepath.Join(home, "models", "o", "r", "m-Q8_0.gguf")
			if tc.part != nil {
				writeFile(t, dest+".part", tc.part)
			}
			// The listing announces good; the download sends tc.serve.
			srv, _ := serve(t, func(w http.ResponseWriter, r *http.Request) {
				if strings.HasPrefix(r.URL.Path, "/api/") {
					hub.handle(w, r)
					return
				}
				http.ServeContent(w, r, "m.gguf", time.Time{}, bytes.NewReader(tc.serve))
			})
			m, _, err := Pull(context.Background(), "o/r:Q8_0", Options{Home: home, Endpoint: srv.URL})
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if data, _ := os.ReadFile(m.Path); !bytes.Equal(data, good) {
					t.Fatal("the pulled file differs")
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want one saying %q", err, tc.wantErr)
			}
			if left := files(t, home); len(left) != 0 {
				t.Errorf("bad content left files behind: %v", left)
			}
		})
	}
}

func TestLibraryListAndRemove(t *testing.T) {
	hub := newStandIn(t, map[string]map[string][]byte{"Qwen/Qwen3-0.6B-GGUF": quantRepo(t)})
	home := t.TempDir()
	opts := Options{Home: home, Endpoint: hub.url}
	for _, q := range []string{"Q8_0", "Q4_K_M"} {
		if _, _, err := Pull(context.Background(), "Qwen/Qwen3-0.6B-GGUF:"+q, opts); err != nil {
			t.Fatal(err)
		}
	}
	models, err := List(opts)
	if err != nil || len(models) != 2 || models[0].Name != "qwen3-0.6b:q4_k_m" || models[1].Name != "qwen3-0.6b:q8_0" {
		t.Fatalf("List = %+v, %v", models, err)
	}
	family, qt, err := Describe(models[1].Path)
	if err != nil || family != "qwen3" || qt != "Q8_0" {
		t.Errorf("Describe = %q, %q, %v; want qwen3, Q8_0", family, qt, err)
	}
	tests := []struct {
		name    string
		arg     string
		wantErr []string
	}{
		{name: "unknown name lists the names", arg: "llama:q4_0", wantErr: []string{`no model "llama:q4_0"`, "qwen3-0.6b:q4_k_m, qwen3-0.6b:q8_0"}},
		{name: "by name", arg: "qwen3-0.6b:q8_0"},
		{name: "by source", arg: "Qwen/Qwen3-0.6B-GGUF:Q4_K_M"},
		{name: "gone", arg: "qwen3-0.6b:q8_0", wantErr: []string{"the library is empty"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Remove(tc.arg, opts)
			if len(tc.wantErr) > 0 {
				for _, w := range tc.wantErr {
					if err == nil || !strings.Contains(err.Error(), w) {
						t.Errorf("error %v does not say %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range []string{m.Path, m.Manifest} {
				if _, err := os.Stat(p); err == nil {
					t.Errorf("%s is still there", p)
				}
			}
		})
	}
	if left := files(t, home); len(left) != 0 {
		t.Errorf("the library holds %v after removing everything", left)
	}
}

func TestLibraryBadEntries(t *testing.T) {
	hub := newStandIn(t, map[string]map[string][]byte{"Qwen/Qwen3-0.6B-GGUF": quantRepo(t)})
	home := t.TempDir()
	opts := Options{Home: home, Endpoint: hub.url}
	m, _, err := Pull(context.Background(), "Qwen/Qwen3-0.6B-GGUF:Q8_0", opts)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(home, "models", "x", "y", "z.gguf.json"), []byte("{not json"))
	if err := os.Remove(m.Path); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		arg     string
		wantErr string
	}{
		{name: "manifest names a missing file", arg: "qwen3-0.6b:q8_0", wantErr: "is missing: ubatch pull Qwen/Qwen3-0.6B-GGUF:Q8_0 again, or ubatch rm qwen3-0.6b:q8_0"},
		{name: "unknown name", arg: "nothing:q8_0", wantErr: `model file "nothing:q8_0" not found`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Resolve(context.Background(), tc.arg, opts)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want one saying %q", err, tc.wantErr)
			}
		})
	}
	if _, err := Remove("qwen3-0.6b:q8_0", opts); err != nil {
		t.Errorf("rm of an entry whose file is gone: %v", err)
	}
	if _, _, err := Describe(filepath.Join(home, "models", "x", "y", "z.gguf.json")); err == nil {
		t.Error("Describe accepted a file that is not a GGUF")
	}
}

func TestHasQuant(t *testing.T) {
	tests := []struct {
		name, file, quant string
		want              bool
	}{
		{name: "dash", file: "Qwen3-0.6B-Q4_K_M.gguf", quant: "q4_k_m", want: true},
		{name: "dot", file: "tinyllama.q4_k_m.gguf", quant: "Q4_K_M", want: true},
		{name: "prefix of a longer tag", file: "x-Q4_K_M.gguf", quant: "Q4_K", want: false},
		{name: "inside a word", file: "xq8_0.gguf", quant: "Q8_0", want: false},
		{name: "before a suffix", file: "x-Q8_0-v2.gguf", quant: "Q8_0", want: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := hasQuant(tc.file, tc.quant); got != tc.want {
				t.Errorf("hasQuant(%q, %q) = %v", tc.file, tc.quant, got)
			}
		})
	}
}
