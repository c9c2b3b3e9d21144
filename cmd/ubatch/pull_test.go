package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"ubatch/internal/testkit"
)

// fakeHub serves root (ORG/REPO/FILE trees) as the Hugging Face Hub does: the model API
// listing and /resolve/main/ downloads. It records the Authorization headers it receives.
func fakeHub(t *testing.T, root string) (url string, auth func() []string) {
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization"))
		mu.Unlock()
		if repo, ok := strings.CutPrefix(r.URL.Path, "/api/models/"); ok {
			type sib struct {
				RFilename string `json:"rfilename"`
				Size      int64  `json:"size"`
			}
			var sibs []sib
			dir := filepath.Join(root, filepath.FromSlash(repo))
			err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
				if err == nil && fi.Mode().IsRegular() {
					rel, _ := filepath.Rel(dir, p)
					sibs = append(sibs, sib{filepath.ToSlash(rel), fi.Size()})
				}
				return err
			})
			if err != nil {
				http.NotFound(w, r)
				return
			}
			json.NewEncoder(w).Encode(map[string]any{"id": repo, "siblings": sibs})
			return
		}
		p := strings.SplitN(strings.TrimPrefix(r.URL.Path, "/"), "/", 5)
		if len(p) != 5 || p[2] != "resolve" {
			http.NotFound(w, r)
			return
		}
		http.ServeFile(w, r, filepath.Join(root, p[0], p[1], filepath.FromSlash(p[4])))
	}))
	t.Cleanup(srv.Close)
	return srv.URL, func() []string { mu.Lock(); defer mu.Unlock(); return append([]string{}, seen...) }
}

// TestPullListRunRm pulls two quants of a synthetic model from a stand-in Hub and uses them by
// name and by -hf, as a user would: pull, list, run, rm.
func TestPullListRunRm(t *testing.T) {
	root := t.TempDir()
	repo := filepath.Join(root, "Org", "Tiny-GGUF")
	if err := os.MkdirAll(repo, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"q8_0", "q4_0"} {
		out := filepath.Join(repo, "tiny-"+strings.ToUpper(q)+".gguf")
		if code, _, errs := ubatch(t, "synth", "--arch", "qwen3", "--shape", "mini", "--vocab", "builtin", "--type", q, "-o", out); code != 0 {
			t.Fatalf("synth: %s", errs)
		}
	}
	url, auth := fakeHub(t, root)
	home := t.TempDir()
	t.Setenv("UBATCH_HOME", home)
	t.Setenv("HF_ENDPOINT", url)
	t.Setenv("HF_TOKEN", "hf_test")
	lib := filepath.Join(home, "models", "Org", "Tiny-GGUF")
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  []string // on stdout
		wantErr  []string // on stderr
	}{
		{name: "pull a quant", args: []string{"pull", "Org/Tiny-GGUF:Q8_0"}, wantOut: []string{"tiny:q8_0", filepath.Join(lib, "tiny-Q8_0.gguf")},
			wantErr: []string{"pull: "}},
		{name: "pull a missing quant", args: []string{"pull", "Org/Tiny-GGUF:Q6_K"}, wantCode: 1,
			wantErr: []string{`no .gguf file for quant "Q6_K"`, "tiny-Q4_0.gguf", "tiny-Q8_0.gguf"}},
		{name: "pull with no argument", args: []string{"pull"}, wantCode: 2, wantErr: []string{"name a model"}},
		{name: "list", args: []string{"list"}, wantOut: []string{"NAME", "FAMILY", "tiny:q8_0", "qwen3", "Q8_0", filepath.Join(lib, "tiny-Q8_0.gguf")}},
		{name: "run by name", args: []string{"run", "-m", "tiny:q8_0", "-p", "a b", "-n", "2", "--temp", "0"}},
		{name: "run by source", args: []string{"run", "-m", "Org/Tiny-GGUF:q8_0", "-p", "a b", "-n", "2", "--temp", "0"}},
		{name: "run -hf pulls", args: []string{"run", "-hf", "Org/Tiny-GGUF:Q4_0", "-p", "a b", "-n", "2", "--temp", "0"},
			wantErr: []string{"model pulled into the library", "tiny:q4_0"}},
		{name: "info by name", args: []string{"info", "-m", "tiny:q4_0"}, wantOut: []string{filepath.Join(lib, "tiny-Q4_0.gguf"), "qwen3"}},
		{name: "list both", args: []string{"list"}, wantOut: []string{"tiny:q4_0", "Q4_0", "tiny:q8_0"}},
		{name: "rm", args: []string{"rm", "tiny:q8_0"}, wantOut: []string{"removed tiny:q8_0"}},
		{name: "rm unknown lists the names", args: []string{"rm", "tiny:q8_0"}, wantCode: 1, wantErr: []string{`no model "tiny:q8_0"`, "the library has: tiny:q4_0"}},
		{name: "run a removed name", args: []string{"run", "-m", "tiny:q8_0", "-p", "a"}, wantCode: 1, wantErr: []string{`"tiny:q8_0" not found`, "ubatch list"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := ubatch(t, tc.args...)
			if code != tc.wantCode {
				t.Fatalf("exit %d, want %d: %s", code, tc.wantCode, errs)
			}
			testkit.CheckText(t, "stdout", out, tc.wantOut, nil)
			testkit.CheckText(t, "stderr", errs, tc.wantErr, nil)
		})
	}
	if _, err := os.Stat(filepath.Join(lib, "tiny-Q8_0.gguf")); err == nil {
		t.Error("rm left the file")
	}
	for _, a := range auth() {
		if a != "Bearer hf_test" {
			t.Errorf("a request to the hub carried Authorization %q, want HF_TOKEN's", a)
		}
	}
}
