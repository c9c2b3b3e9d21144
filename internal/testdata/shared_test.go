package testdata

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestInModule checks the spelling declare stats: it starts with the repository root (so that
// go test's cache rechecks it) and names the same file as the path, whether the path is outside
// the repository (a temporary folder: what is beside the repository is read-only) or inside, and
// also before the path exists (a cached skip is recorded then).
func TestInModule(t *testing.T) {
	if realRoot == "" {
		t.Skip("built with -trimpath: no repository path to spell names from")
	}
	outside := filepath.Join(t.TempDir(), "shared", "models")
	for _, path := range []string{outside, filepath.Join(repoRoot(), "go.mod")} {
		name, ok := inModule(path)
		if !ok {
			t.Fatalf("%s: no spelling from the repository root", path)
		}
		if !strings.HasPrefix(name, realRoot+string(filepath.Separator)) {
			t.Errorf("%s spelt %s, not under the root %s", path, name, realRoot)
		}
		if path == outside {
			if _, err := os.Stat(name); !os.IsNotExist(err) {
				t.Fatalf("%s spelt %s: before it exists, stat gives %v", path, name, err)
			}
			if err := os.MkdirAll(path, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		a, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.Stat(name)
		if err != nil {
			t.Fatalf("%s spelt %s: %v", path, name, err)
		}
		if !os.SameFile(a, b) {
			t.Errorf("%s spelt %s, another file", path, name)
		}
	}
}
