package deploy

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"ubatch/internal/testdata"
	"ubatch/kvdisk"
	"ubatch/kvfile"
)

// The slot rows of the hostile-client test (issue 32): llama-server's slot actions against a
// real node with --slot-save-path and --kv-disk. A name that cannot be written, a disk tier's
// block file, a FIFO and a directory in the slot folder are 400s naming filename, answered at
// once; afterwards SIGTERM ends the node, a stream still running included, within
// --shutdown-timeout and the cut's few seconds.

// slotsGrace is the node's --shutdown-timeout.
const slotsGrace = 2 * time.Second

func TestHostileSlots(t *testing.T) {
	statSources("..")
	model := testdata.Model(t, "stories260K.gguf")
	if _, err := os.Stat(model); err != nil {
		t.Skipf("%s not found; skipping the hostile slot test", model)
	}
	slots, disk := t.TempDir(), t.TempDir()
	n := startNode(t, "slots", model, "-np", "2", "-c", "1024", "-t", "1", "--slot-save-path", slots, "--kv-disk", disk,
		"--shutdown-timeout", slotsGrace.String())
	waitHTTP(t, n.p, n.url+"/health", "ok", 20*time.Second)
	// Every row is answered at once: a request still waiting after 3s (the FIFO hung forever)
	// fails its row and is left running, which the SIGTERM below must still end.
	client := &http.Client{Timeout: 3 * time.Second}
	post := func(t *testing.T, path, body string) (int, string) {
		t.Helper()
		resp, err := client.Post(n.url+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Errorf("POST %s: %v", path, err)
			return 0, ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := post(t, "/v1/completions", completion(strings.Repeat("Once upon a time there was a little girl. ", 4), 8, false)); code != 200 {
		t.Fatalf("completion: %d %s", code, body)
	}
	if code, body := post(t, "/slots/0?action=save", `{"filename":"saved.bin"}`); code != 200 {
		t.Fatalf("save: %d %s", code, body)
	}

	// A disk tier's block file is one block of a sequence, named by its key: the saved slot's
	// second block, written alone.
	f, err := os.Open(filepath.Join(slots, "saved.bin"))
	if err != nil {
		t.Fatal(err)
	}
	layout, _, err := kvfile.DecodeHeader(bufio.NewReader(f))
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := kvfile.ReadFile(context.Background(), filepath.Join(slots, "saved.bin"), layout, 0)
	if err != nil || len(blocks) < 2 {
		t.Fatalf("the saved slot: %d blocks, %v; want at least 2", len(blocks), err)
	}
	blockFile := kvdisk.FileName(blocks[1].Key)
	if _, err := kvdisk.WriteBlock(slots, layout, blocks[1]); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(slots, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(slots, "dir"), 0o700); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name     string
		action   string
		filename string
	}{
		{name: "255-byte filename", action: "save", filename: strings.Repeat("a", 255)},
		{name: "kv-disk block file", action: "restore", filename: blockFile},
		{name: "fifo", action: "restore", filename: "fifo"},
		{name: "directory", action: "restore", filename: "dir"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body, _ := json.Marshal(map[string]string{"filename": tc.filename})
			start := time.Now()
			code, reply := post(t, "/slots/0?action="+tc.action, string(body))
			took := time.Since(start)
			var e struct {
				Error struct {
					Param *string `json:"param"`
				} `json:"error"`
			}
			json.Unmarshal([]byte(reply), &e)
			if code != 400 || e.Error.Param == nil || *e.Error.Param != "filename" {
				t.Errorf("%s %s: %d %s; want 400 naming filename", tc.action, tc.name, code, reply)
			}
			if took > 2*time.Second {
				t.Errorf("%s %s: answered after %v", tc.action, tc.name, took)
			}
		})
	}
	if code, body := post(t, "/slots/1?action=restore", `{"filename":"saved.bin"}`); code != 200 {
		t.Errorf("restoring the saved slot: %d %s", code, body)
	}

	// SIGTERM with a long stream running: the node exits within the grace, the cut (2s) and
	// some slack, even if the stream never finishes.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, n.url+"/v1/completions",
		strings.NewReader(completion("Once", 500, true)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); resp.StatusCode != 200 || err != nil {
		t.Fatalf("the stream: %d %q %v", resp.StatusCode, line, err)
	}
	go io.Copy(io.Discard, br)
	start := time.Now()
	n.p.signal(syscall.SIGTERM)
	bound := slotsGrace + 10*time.Second
	select {
	case <-n.p.done:
		t.Logf("the node exited %v after SIGTERM", time.Since(start).Round(time.Millisecond))
	case <-time.After(bound):
		t.Fatalf("the node had not exited %v after SIGTERM (--shutdown-timeout %v)", bound, slotsGrace)
	}
	for _, st := range tests[1:] {
		if _, err := os.Lstat(filepath.Join(slots, st.filename)); err != nil {
			t.Errorf("%s was removed from the slot folder: %v", st.filename, err)
		}
	}
}
