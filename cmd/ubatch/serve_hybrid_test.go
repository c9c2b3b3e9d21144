package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"ubatch/internal/testdata"
)

// TestServeHybrid: serve -m on the hybrid qwen35 answers a chat completion, and refuses at start,
// with the reason, what its recurrent state rules out: --context-shift and the KV tier that does
// not carry the state (--kv-disk); slot files, which carry it, are served.
func TestServeHybrid(t *testing.T) {
	model := testdata.Model(t, "arch/synth-qwen35-f16.gguf")
	refusals := []struct {
		name string
		args []string
		want string
	}{
		{name: "context shift", args: []string{"--context-shift"}, want: "context shift is refused for this hybrid recurrent model"},
		{name: "disk tier", args: []string{"--kv-disk", t.TempDir()}, want: "--kv-disk: engine: a hybrid recurrent model"},
		{name: "bad snapshot size", args: []string{"--state-cache", "lots"}, want: "--state-cache"},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], append([]string{"serve", "--port", "0", "-m", model, "-np", "2", "-c", "512", "-t", "1"}, tc.args...)...)
			cmd.Env = append(os.Environ(), "UBATCH_TEST_AS_MAIN=1")
			out, err := cmd.CombinedOutput()
			if err == nil || !strings.Contains(string(out), tc.want) {
				t.Fatalf("serve %v: %v, output %.500s; want a failure saying %q", tc.args, err, out, tc.want)
			}
		})
	}
	t.Run("chat", func(t *testing.T) {
		p := startServeProc(t, nil, "-m", model, "-np", "4", "-c", "1024", "-t", "2", "--state-cache", "8M", "--slot-save-path", t.TempDir())
		code, body := p.call(t, "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":8,"temperature":0,"n":2}`)
		if code != 200 || !strings.Contains(body, `"completion_tokens":`) {
			t.Fatalf("chat completion: %d %.300s", code, body)
		}
		if code, body := p.call(t, "/slots/0?action=save", `{"filename":"s.bin"}`); code != 200 || !strings.Contains(body, `"n_saved":`) {
			t.Fatalf("slot save: %d %.300s", code, body)
		}
	})
}
