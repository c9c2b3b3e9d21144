package ops

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestAttnAsmGenerated checks that each file internal/attngen writes (attn_amd64.h,
// attn_amd64.s, attn_q8_amd64.s, attn_tile_amd64.h, attn_tile_amd64.s, attn_row_amd64.s) is the
// committed one, so that an edit to either side is not lost at the next `go generate`.
func TestAttnAsmGenerated(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the generator with go run")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	dir := t.TempDir()
	cmd := exec.Command(goBin, "run", "./internal/attngen", "-dir", dir)
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go run ./internal/attngen: %v\n%s", err, msg)
	}
	written, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range written {
		name := f.Name()
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from the output of internal/attngen: run go generate ./ops", name)
		}
	}
}
