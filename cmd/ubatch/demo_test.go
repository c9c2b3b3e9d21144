package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"ubatch/internal/demo"
)

// TestMain lets the test binary stand in for the ubatch command: with UBATCH_TEST_AS_MAIN=1 in
// its environment it runs mainCode on its arguments, so that the tests below start real
// processes without a go build.
func TestMain(m *testing.M) {
	if os.Getenv("UBATCH_TEST_AS_MAIN") == "1" {
		os.Exit(mainCode(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// freshCommand is ubatch ARGS as a new process on a fresh machine: an empty $UBATCH_HOME, a
// working directory with nothing beside it (no ../shared), and a Hugging Face endpoint that
// refuses every connection (no network).
func freshCommand(t *testing.T, ctx context.Context, args ...string) (*exec.Cmd, string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	home, work := filepath.Join(root, "home"), filepath.Join(root, "work")
	for _, d := range []string{home, work} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.CommandContext(ctx, self, args...)
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "UBATCH_TEST_AS_MAIN=1", "UBATCH_HOME="+home,
		"HF_ENDPOINT=http://127.0.0.1:1", "HF_TOKEN=", "UBATCH_SHARED="+filepath.Join(root, "none"))
	cmd.WaitDelay = 10 * time.Second
	return cmd, home
}

// checkDemoWritten: the process served the embedded model from $UBATCH_HOME/demo.
func checkDemoWritten(t *testing.T, home string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(home, "demo", demo.Name))
	if err != nil || string(b) != demo.GGUF {
		t.Errorf("$UBATCH_HOME/demo/%s does not hold the embedded model (%d bytes, %v)", demo.Name, len(b), err)
	}
}

// TestRunDemoOffline: `ubatch run` with no -m prints a continuation from the embedded model.
func TestRunDemoOffline(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd, home := freshCommand(t, ctx, "run", "-p", "Once upon a time", "-n", "24", "--temp", "0")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("ubatch run: %v\n%s", err, stderr.String())
	}
	text := strings.TrimSpace(string(out))
	rest, ok := strings.CutPrefix(text, "Once upon a time")
	if !ok || len(strings.Fields(rest)) < 5 {
		t.Fatalf("run printed %q, want the prompt and a continuation of several words", text)
	}
	checkDemoWritten(t, home)
}

// TestServeDemoOffline: `ubatch serve` with no -m listens and answers a completion with text,
// from the embedded model.
func TestServeDemoOffline(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd, home := freshCommand(t, ctx, "serve", "--port", "0", "-np", "1")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(os.Interrupt)
		if err := cmd.Wait(); err != nil {
			t.Errorf("serve after SIGINT: %v", err)
		}
	}()
	url, log := listeningURL(stderr)
	if url == "" {
		cmd.Process.Kill()
		t.Fatalf("serve printed no listening line:\n%s", log)
	}
	go io.Copy(io.Discard, stderr) // the server must never block on a full pipe
	body := `{"prompt": "Once upon a time", "max_tokens": 24, "temperature": 0}`
	resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got struct {
		Model   string `json:"model"`
		Choices []struct {
			Text string `json:"text"`
		} `json:"choices"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/v1/completions: %s, %v", resp.Status, err)
	}
	if len(got.Choices) != 1 || len(strings.Fields(got.Choices[0].Text)) < 5 {
		t.Fatalf("completion %+v, want one choice of several words", got)
	}
	if !strings.HasPrefix(got.Model, "stories260K") {
		t.Errorf("model %q, want the demo model", got.Model)
	}
	checkDemoWritten(t, home)
}

// listeningLine is serve's log line saying where it listens; its group is the URL.
var listeningLine = regexp.MustCompile(`msg=listening url=(http://\S+)`)

// listeningURL reads the server's log until its listening line and returns the URL in it
// (or "" at the end of the log) and the lines read.
func listeningURL(r io.Reader) (string, string) {
	var log strings.Builder
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		log.WriteString(sc.Text() + "\n")
		if m := listeningLine.FindStringSubmatch(sc.Text()); m != nil {
			return m[1], log.String()
		}
	}
	return "", log.String()
}
