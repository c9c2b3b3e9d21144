package demo

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"ubatch/gguf"
)

// TestEmbeddedModel: the embedded bytes are the file LICENSE names (its hash) and parse as the
// tiny Llama the demo promises.
func TestEmbeddedModel(t *testing.T) {
	sum := sha256.Sum256([]byte(GGUF))
	if got := hex.EncodeToString(sum[:]); got != SHA256 {
		t.Fatalf("embedded %s has SHA-256 %s, want %s (update SHA256 and LICENSE with the file)", Name, got, SHA256)
	}
	f, err := gguf.Parse([]byte(GGUF))
	if err != nil {
		t.Fatal(err)
	}
	if arch := f.Architecture(); arch != "llama" {
		t.Fatalf("architecture %q, want llama", arch)
	}
	if n := len(f.Tensors); n == 0 {
		t.Fatal("no tensors")
	}
}
