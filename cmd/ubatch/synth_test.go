package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSynthArch writes a mini model of one family with the builtin vocabulary and a chat
// template, and runs it: no ../shared needed.
func TestSynthArch(t *testing.T) {
	dir := t.TempDir()
	tmpl := filepath.Join(dir, "chat.jinja")
	if err := os.WriteFile(tmpl, []byte("{% for m in messages %}{{ m.content }}{% endfor %}"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "gemma3.gguf")
	code, stdout, errs := ubatch(t, "synth", "--arch", "gemma3", "--shape", "mini", "--vocab", "builtin",
		"--chat-template", tmpl, "--type", "q8_0", "-o", out)
	if code != 0 {
		t.Fatalf("synth: exit %d: %s", code, errs)
	}
	if !strings.Contains(stdout, "gemma3, shape mini") {
		t.Errorf("synth output %q", stdout)
	}
	code, stdout, errs = ubatch(t, "info", "-m", out, "--tensors")
	if code != 0 {
		t.Fatalf("info: exit %d: %s", code, errs)
	}
	for _, want := range []string{`general.architecture                          "gemma3"`, "gemma3.attention.sliding_window_pattern",
		"tokenizer.chat_template", "blk.1.attn_q_norm.weight", "blk.1.post_ffw_norm.weight"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("info output lacks %q:\n%s", want, stdout)
		}
	}
	if code, _, errs = ubatch(t, "run", "-m", out, "-p", "a b", "-n", "4", "--temp", "0"); code != 0 {
		t.Fatalf("run: exit %d: %s", code, errs)
	}
	if code, _, errs = ubatch(t, "synth", "--arch", "mamba", "--vocab", "builtin", "-o", out); code == 0 || !strings.Contains(errs, `unknown architecture "mamba"`) {
		t.Errorf("unknown arch: exit %d: %s", code, errs)
	}
}
