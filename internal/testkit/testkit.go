// Package testkit holds small helpers that tests of several packages share. It imports only the
// standard library, so any package's tests may use it.
package testkit

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// SyncBuffer is a bytes.Buffer that goroutines under test (an engine's, a server's handlers)
// and the test itself may share, e.g. as a slog handler's writer. The zero value is empty.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what has been written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Eventually polls cond every 10 ms until it holds, failing t (as waiting for what) once d has
// passed without it.
func Eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
	}
}

// CheckText reports (without stopping t) each string of want that got, a command's or a
// renderer's output named what ("stdout", "prompt"), lacks, and each of notWant that it holds.
func CheckText(t testing.TB, what, got string, want, notWant []string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, got)
		}
	}
	for _, w := range notWant {
		if strings.Contains(got, w) {
			t.Errorf("%s holds %q:\n%s", what, w, got)
		}
	}
}

// StatSources stats every Go source and module file under root (the module's root, from the
// test's directory), so that go test's cache, which records the files a test looks at, reruns
// a test that builds and runs a binary of the module when that binary's code changes (the go
// build child's reads are not recorded). Only calls from tests are recorded, not from TestMain.
func StatSources(root string) {
	filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata" || d.Name() == ".ci") {
			return filepath.SkipDir
		}
		if n := d.Name(); strings.HasSuffix(n, ".go") || strings.HasSuffix(n, ".s") || n == "go.mod" || n == "go.sum" {
			os.Stat(path)
		}
		return nil
	})
}
