package llamacpp

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"ubatch/engine"
	"ubatch/internal/testdata"
	"ubatch/internal/testmodel"
	"ubatch/kvdisk"
	"ubatch/kvfile"
	"ubatch/quant"
	"ubatch/runner"
	"ubatch/server"
	"ubatch/server/servertest"
)

// slotEnv is a server over a mini synth qwen3 model whose engine has tiers (none beyond RAM:
// SetTiers for slot save and restore) and slotDir as --slot-save-path ("" for none).
func slotEnv(t *testing.T, path, slotDir string) *servertest.Env {
	t.Helper()
	m := testmodel.Open(t, path)
	lctx := testmodel.Runtime(t, m, runner.Options{NCtx: 512, NSeqMax: 2, KVType: quant.F16, Threads: 2})
	eng := testmodel.Engine(t, m, lctx, engine.Config{})
	l := testmodel.Layout(t, m, lctx)
	if slotDir != "" && !eng.SetTiers(nil, nil, l) {
		t.Fatal("SetTiers refused")
	}
	testmodel.Run(t, eng)
	return servertest.Serve(t, m, eng, server.Config{ModelID: "synth", SlotSavePath: slotDir, KVLayout: l, Dialects: []server.Dialect{Routes}})
}

func TestSlotActionErrors(t *testing.T) {
	path := servertest.SynthModel(t, "qwen3", false, false)
	none := slotEnv(t, path, "")
	e := slotEnv(t, path, t.TempDir())
	tests := []struct {
		name   string
		env    *servertest.Env
		url    string
		body   any
		status int
		param  string
	}{
		{name: "no --slot-save-path", env: none, url: "/slots/0?action=save", body: map[string]any{"filename": "a.bin"}, status: 501},
		{name: "no --slot-save-path, erase", env: none, url: "/slots/0?action=erase", body: map[string]any{}, status: 501},
		{name: "path separator", env: e, url: "/slots/0?action=save", body: map[string]any{"filename": "../a.bin"}, status: 400, param: "filename"},
		{name: "backslash", env: e, url: "/slots/0?action=restore", body: map[string]any{"filename": `a\b`}, status: 400, param: "filename"},
		{name: "dot file", env: e, url: "/slots/0?action=save", body: map[string]any{"filename": ".hidden"}, status: 400, param: "filename"},
		{name: "no filename", env: e, url: "/slots/0?action=save", body: map[string]any{}, status: 400, param: "filename"},
		{name: "long filename", env: e, url: "/slots/0?action=save", body: map[string]any{"filename": strings.Repeat("a", 256)}, status: 400, param: "filename"},
		{name: "unknown action", env: e, url: "/slots/0?action=load", body: map[string]any{}, status: 400, param: "action"},
		{name: "slot out of range", env: e, url: "/slots/7?action=erase", body: map[string]any{}, status: 400, param: "id_slot"},
		{name: "missing file", env: e, url: "/slots/0?action=restore", body: map[string]any{"filename": "none.bin"}, status: 404},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var body servertest.ErrorBody
			tc.env.PostJSON(tc.url, tc.body, tc.status, &body)
			if got := body.Error.Param; tc.param != "" && (got == nil || *got != tc.param) {
				t.Fatalf("param %v, want %q", got, tc.param)
			}
		})
	}
}

// TestSlotSaveRestoreHybrid: a hybrid model's slot file carries snapshots of its recurrent
// state beside its blocks (version 3), so a new server that restores it answers the same
// prompt, and the next turn of it, from the cache with the greedy text of a server that
// computed them.
func TestSlotSaveRestoreHybrid(t *testing.T) {
	path := testdata.Model(t, "arch/synth-qwen35-f16.gguf")
	dir := t.TempDir()
	prompt := strings.Repeat("Tom and Sue went to the park to play with a big red ball. ", 4)
	req := map[string]any{"prompt": prompt, "max_tokens": 8, "temperature": 0}

	a := slotEnv(t, path, dir)
	first := a.Complete(req)
	next := map[string]any{"prompt": prompt + first.Choices[0].Text + " The end.", "max_tokens": 8, "temperature": 0}
	var saved slotSaveReply
	a.PostJSON("/slots/0?action=save", map[string]any{"filename": "h.bin"}, 200, &saved)
	data, err := os.ReadFile(filepath.Join(dir, "h.bin"))
	if err != nil || len(data) < 8 || data[4] != kvfile.VersionStates || int64(len(data)) != saved.NWritten {
		t.Fatalf("the file: %d bytes (n_written %d), %v: want a version %d image", len(data), saved.NWritten, err, kvfile.VersionStates)
	}
	want := slotEnv(t, path, "").Complete(next) // computed from scratch

	b := slotEnv(t, path, dir)
	var restored slotRestoreReply
	b.PostJSON("/slots/1?action=restore", map[string]any{"filename": "h.bin"}, 200, &restored)
	if restored.NRestored != saved.NSaved || restored.NRead != saved.NWritten {
		t.Fatalf("restore: %+v, saved %+v", restored, saved)
	}
	again := b.Complete(req)
	if again.Choices[0].Text != first.Choices[0].Text || again.Usage.PromptTokensDetails.CachedTokens == 0 {
		t.Fatalf("after restore: %q with %d cached tokens, before: %q", again.Choices[0].Text, again.Usage.PromptTokensDetails.CachedTokens, first.Choices[0].Text)
	}
	// A fresh server again, so that the next turn finds only what the file brought.
	c := slotEnv(t, path, dir)
	c.PostJSON("/slots/0?action=restore", map[string]any{"filename": "h.bin"}, 200, &restored)
	turn := c.Complete(next)
	if turn.Choices[0].Text != want.Choices[0].Text {
		t.Fatalf("next turn after restore: %q, computed: %q", turn.Choices[0].Text, want.Choices[0].Text)
	}
	// At least the prompt's last full block: the next turn's text is tokenized afresh, so its
	// tokens may part from the generated ones inside the reply.
	if cached := turn.Usage.PromptTokensDetails.CachedTokens; cached < again.Usage.PromptTokensDetails.CachedTokens {
		t.Fatalf("next turn after restore: %d of %d prompt tokens cached, the same prompt %d", cached, turn.Usage.PromptTokens, again.Usage.PromptTokensDetails.CachedTokens)
	}
	t.Logf("saved %d tokens in %d bytes; same prompt %d cached, next turn %d of %d", saved.NSaved, saved.NWritten,
		again.Usage.PromptTokensDetails.CachedTokens, turn.Usage.PromptTokensDetails.CachedTokens, turn.Usage.PromptTokens)
}

// TestSlotSaveRestore saves a slot after a completion, restores the file into a new server
// (another process, in effect) and checks that the same prompt then comes from the cache with
// the same greedy text; a file of another model is refused.
func TestSlotSaveRestore(t *testing.T) {
	path := servertest.SynthModel(t, "qwen3", false, false)
	dir := t.TempDir()
	prompt := strings.Repeat("the quick brown fox jumps over the lazy dog ", 6)
	req := map[string]any{"prompt": prompt, "max_tokens": 6, "temperature": 0}

	a := slotEnv(t, path, dir)
	first := a.Complete(req)
	var saved slotSaveReply
	a.PostJSON("/slots/0?action=save", map[string]any{"filename": "s.bin"}, 200, &saved)
	n := first.Usage.PromptTokens + first.Usage.CompletionTokens - 1 // the last token is never in the cache
	if saved.IDSlot != 0 || saved.Filename != "s.bin" || saved.NSaved != n || saved.NWritten <= 0 {
		t.Fatalf("save: %+v, want %d tokens saved", saved, n)
	}
	if fi, err := os.Stat(filepath.Join(dir, "s.bin")); err != nil || fi.Size() != saved.NWritten {
		t.Fatalf("the file: %v, %v; n_written %d", fi, err, saved.NWritten)
	}

	b := slotEnv(t, path, dir)
	var restored slotRestoreReply
	b.PostJSON("/slots/1?action=restore", map[string]any{"filename": "s.bin"}, 200, &restored)
	if restored.IDSlot != 1 || restored.NRestored != n || restored.NRead != saved.NWritten {
		t.Fatalf("restore: %+v, want %d tokens, %d bytes", restored, n, saved.NWritten)
	}
	again := b.Complete(req)
	if again.Choices[0].Text != first.Choices[0].Text {
		t.Fatalf("after restore: %q, before: %q", again.Choices[0].Text, first.Choices[0].Text)
	}
	if c := again.Usage.PromptTokensDetails.CachedTokens; c < first.Usage.PromptTokens-1-15 {
		t.Fatalf("after restore %d of %d prompt tokens cached", c, first.Usage.PromptTokens)
	}
	var erased slotEraseReply
	b.PostJSON("/slots/1?action=erase", map[string]any{}, 200, &erased)
	if erased.NErased != n {
		t.Fatalf("erase: %+v, want %d", erased, n)
	}

	// The same file under another model's identity is refused.
	other := filepath.Join(t.TempDir(), "other.gguf")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(other, append(data, 0), 0o644); err != nil { // one byte longer: another identity
		t.Fatal(err)
	}
	c := slotEnv(t, other, dir)
	var body servertest.ErrorBody
	c.PostJSON("/slots/0?action=restore", map[string]any{"filename": "s.bin"}, 400, &body)
	if !strings.Contains(body.Error.Message, "another model") {
		t.Fatalf("restore into another model: %s", body.Error.Message)
	}
}

// TestSlotRestoreWrongFiles: names up to what fits with the save's temporary suffix are saved
// and a longer one is a 400 (a 255-byte name was a 500: its temporary name did not fit); a
// disk-tier block file (one block deep in a sequence), a FIFO and a directory in the slot
// folder are 400s naming filename, answered at once (the FIFO hung the request forever).
func TestSlotRestoreWrongFiles(t *testing.T) {
	path := servertest.SynthModel(t, "qwen3", false, false)
	dir := t.TempDir()
	e := slotEnv(t, path, dir)
	e.Complete(map[string]any{"prompt": strings.Repeat("the quick brown fox jumps over the lazy dog ", 6), "max_tokens": 2, "temperature": 0})
	longest := strings.Repeat("s", kvfile.MaxName)
	e.PostJSON("/slots/0?action=save", map[string]any{"filename": longest}, 200, nil)

	// A disk tier's block file: one block of the saved run, written alone as kvdisk writes it.
	l := e.Server.Config().KVLayout
	blocks, err := kvfile.ReadFile(context.Background(), filepath.Join(dir, longest), l, 0)
	if err != nil || len(blocks) < 2 {
		t.Fatalf("the saved slot: %d blocks, %v; want at least 2", len(blocks), err)
	}
	if _, err := kvdisk.WriteBlock(dir, l, blocks[1]); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		url      string
		filename string
		status   int
		message  string
	}{
		{name: "255 bytes", url: "/slots/0?action=save", filename: strings.Repeat("a", 255), status: 400, message: "at most"},
		{name: "one byte over", url: "/slots/0?action=save", filename: longest + "s", status: 400, message: "at most"},
		{name: "restore the longest", url: "/slots/1?action=restore", filename: longest, status: 200},
		{name: "disk tier block file", url: "/slots/0?action=restore", filename: kvdisk.FileName(blocks[1].Key), status: 400, message: "not a saved slot"},
		{name: "fifo", url: "/slots/0?action=restore", filename: "fifo", status: 400, message: "not a regular file"},
		{name: "directory", url: "/slots/0?action=restore", filename: "sub", status: 400, message: "not a regular file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			var body servertest.ErrorBody
			e.PostJSON(tc.url, map[string]any{"filename": tc.filename}, tc.status, &body)
			if took := time.Since(start); took > 10*time.Second {
				t.Fatalf("answered after %v", took)
			}
			if tc.status == 200 {
				return
			}
			if p := body.Error.Param; p == nil || *p != "filename" || !strings.Contains(body.Error.Message, tc.message) {
				t.Fatalf("param %v, message %q; want filename, %q", p, body.Error.Message, tc.message)
			}
		})
	}
}
