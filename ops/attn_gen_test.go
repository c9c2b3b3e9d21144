package ops

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestAttnAsmGenerated checks that attn_amd64.s is what attn_gen.go writes, so that an edit to
// either one is not lost at the next `go generate`.
func TestAttnAsmGenerated(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the generator with go run")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	out := filepath.Join(t.TempDir(), "attn_amd64.s")
	cmd := exec.Command(goBin, "run", "attn_gen.go", "-o", out)
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go run attn_gen.go: %v\n%s", err, msg)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("attn_amd64.s")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("attn_amd64.s differs from the output of attn_gen.go: run go generate ./ops")
	}
}
