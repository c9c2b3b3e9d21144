package hub

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestNormalizeName(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"tag implied", "Qwen3", "qwen3:latest"},
		{"tag kept", "qwen3:0.6B", "qwen3:0.6b"},
		{"namespace", "me/story", "me/story:latest"},
		{"namespace and tag", "me/story:v1", "me/story:v1"},
		{"a colon in the namespace is no tag", "host:5000/story", "host:5000/story:latest"},
		{"file names stay", "stories260K.gguf", "stories260k.gguf"},
		{"references stay", "hf://Org/Repo/x.gguf", "hf://org/repo/x.gguf"},
		{"empty", "  ", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := NormalizeName(tc.in); got != tc.want {
				t.Errorf("NormalizeName(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// TestCreate: a local GGUF joins the library under NAME:TAG as a hard link (same file system),
// with a manifest a pull would write; the name resolves with ":latest" implied; creating it
// again replaces it; bad names, non-GGUF files and a pulled model's name are refused.
func TestCreate(t *testing.T) {
	home := t.TempDir()
	src := filepath.Join(t.TempDir(), "mine.gguf")
	blob := modelBlob(t, "llama", 7, 4096)
	if err := os.WriteFile(src, blob, 0o644); err != nil {
		t.Fatal(err)
	}
	notGGUF := filepath.Join(t.TempDir(), "notes.txt")
	os.WriteFile(notGGUF, []byte("hello"), 0o644)
	opts := Options{Home: home}
	// a pulled model's manifest, to be protected from create
	pulled := Model{Name: "qwen3:q8_0", Source: "Qwen/Qwen3-GGUF:Q8_0", Repo: "Qwen/Qwen3-GGUF", File: "q.gguf", Size: int64(len(blob)),
		Path: filepath.Join(home, "models", "Qwen", "Qwen3-GGUF", "q.gguf")}
	pulled.Manifest = pulled.Path + manifestExt
	os.MkdirAll(filepath.Dir(pulled.Path), 0o755)
	os.WriteFile(pulled.Path, blob, 0o644)
	if err := writeManifest(pulled); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name, model, src string
		wantName, err    string
	}{
		{"bare name", "Mine", src, "mine:latest", ""},
		{"name and tag", "me/mine:v1", src, "me/mine:v1", ""},
		{"again: replaced", "mine", src, "mine:latest", ""},
		{"path escape", "../up", src, "", "use NAME[:TAG]"},
		{"empty tag", "mine:", src, "", "use NAME[:TAG]"},
		{"not a GGUF", "notes", notGGUF, "", "not a GGUF file"},
		{"missing file", "gone", filepath.Join(home, "nope.gguf"), "", "no such file"},
		{"a pulled model's name", "qwen3:q8_0", src, "", "is the name of a pulled model"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Create(tc.model, tc.src, opts)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Create(%q, %q) = %v, want an error with %q", tc.model, tc.src, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if m.Name != tc.wantName || m.Size != int64(len(blob)) || m.Quant != "q8_0" || m.Source != src {
				t.Errorf("model %+v", m)
			}
			a, _ := os.Stat(src)
			b, err := os.Stat(m.Path)
			if err != nil || !os.SameFile(a, b) {
				t.Errorf("%s is not a hard link of %s (%v)", m.Path, src, err)
			}
			back, err := readManifest(m.Manifest)
			if err != nil || back.Problem != "" || back.SHA256 != m.SHA256 || len(m.SHA256) != 64 {
				t.Errorf("manifest %+v, %v", back, err)
			}
			p, err := Resolve(context.Background(), strings.TrimSuffix(tc.wantName, ":latest"), opts)
			if err != nil || p != m.Path {
				t.Errorf("Resolve(%q) = %q, %v; want %s", tc.wantName, p, err, m.Path)
			}
		})
	}
	models, err := List(opts)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range models {
		names = append(names, m.Name)
	}
	if got := strings.Join(names, " "); got != "me/mine:v1 mine:latest qwen3:q8_0" {
		t.Errorf("the library lists %q", got)
	}
	if _, err := Remove("mine", opts); err != nil {
		t.Errorf("rm mine: %v", err)
	}
	if _, err := os.Stat(src); err != nil {
		t.Errorf("removing the library's link removed the source: %v", err)
	}
}

// TestPlaceFileCopies: where a hard link cannot be made the file is copied.
func TestPlaceFileCopies(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "a.gguf")
	os.WriteFile(src, []byte("GGUF some bytes"), 0o644)
	dest := filepath.Join(dir, "lib", "x.gguf")
	// /dev/shm is another file system on Linux; skip where there is none.
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		if d, err := os.MkdirTemp("/dev/shm", "ubatch-create"); err == nil {
			defer os.RemoveAll(d)
			dest = filepath.Join(d, "lib", "x.gguf")
		}
	}
	sum, err := placeFile(src, dest)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(dest)
	if err != nil || string(b) != "GGUF some bytes" || len(sum) != 64 {
		t.Errorf("dest %q, %v, sum %q", b, err, sum)
	}
	if _, err := os.Stat(dest + partSuffix); err == nil {
		t.Error("the part file is left behind")
	}
}
