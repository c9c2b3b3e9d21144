package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"ubatch/engine"
)

// ollamaNodeVersion is the release of the official ollama npm client the test runs.
const ollamaNodeVersion = "0.6.4"

// nodePackage installs npm "pkg@version" once per machine under os.TempDir (keyed by the
// package and version, so reruns reuse it) and returns the folder holding node_modules. The
// install goes to a fresh folder renamed into place, so that concurrent test processes never see
// half of one. It skips when node or npm is missing outside CI; in CI it fails instead.
func nodePackage(t *testing.T, pkg, version string) string {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s is needed for the %s client test: %v", tool, pkg, err)
			}
			t.Skipf("%s not found: the %s Node client test needs Node.js and npm", tool, pkg)
		}
	}
	dir := filepath.Join(os.TempDir(), "ubatch-test-"+pkg+"-node-"+version)
	installed := func() bool {
		_, err := os.Stat(filepath.Join(dir, "node_modules", pkg, "package.json"))
		return err == nil
	}
	if installed() {
		return dir
	}
	tmp, err := os.MkdirTemp(os.TempDir(), "ubatch-"+pkg+"-install-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	var out []byte
	for try := range 3 { // the registry is over the network: retry a transient failure
		cmd := exec.Command("npm", "install", "--no-audit", "--no-fund", "--silent", pkg+"@"+version)
		cmd.Dir = tmp
		if out, err = cmd.CombinedOutput(); err == nil {
			break
		}
		time.Sleep(time.Duration(try+1) * 2 * time.Second)
	}
	if err != nil {
		t.Fatalf("npm install %s@%s: %v\n%s", pkg, version, err, out)
	}
	os.RemoveAll(dir) // a partial folder left by an interrupted older version of this helper
	if err := os.Rename(tmp, dir); err != nil && !installed() {
		t.Fatalf("installing %s@%s: %v", pkg, version, err)
	}
	return dir
}

// runNodeScript runs testdata/SCRIPT with node in dir (an npm install of nodePackage), env added
// to the environment, and returns what it printed; it fails the test when node fails or takes
// over 90 s.
func runNodeScript(t *testing.T, dir, script string, env ...string) []byte {
	t.Helper()
	path, err := filepath.Abs(filepath.Join("testdata", script))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("node", path)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), env...), "NODE_PATH="+filepath.Join(dir, "node_modules"))
	done := make(chan struct{})
	var out []byte
	go func() { out, err = cmd.Output(); close(done) }()
	select {
	case <-done:
	case <-time.After(90 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("node %s did not finish in 90 s", script)
	}
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("node %s: %v\n%s", script, err, ee.Stderr)
		}
		t.Fatalf("node %s: %v", script, err)
	}
	t.Logf("%s output: %s", script, out)
	return out
}

// TestOllamaNodeClient: the official ollama npm client's list, show, chat (whole and streamed),
// generate, embed, ps and version against a real server on stories260K with the embedder, and
// its ResponseError with status 404 for a model the server does not have.
func TestOllamaNodeClient(t *testing.T) {
	dir := nodePackage(t, "ollama", ollamaNodeVersion)
	e := newEnv(t, envOptions{embedder: engine.PoolMean})
	out := runNodeScript(t, dir, "ollama_client.js", "OLLAMA_HOST="+e.URL)
	type final struct {
		Done            bool   `json:"done"`
		DoneReason      string `json:"done_reason"`
		EvalCount       int    `json:"eval_count"`
		PromptEvalCount int    `json:"prompt_eval_count"`
	}
	var got struct {
		List []struct {
			Name, Model, Digest, Format, Family, Quant, Params string
			Size                                               int64
			Modified                                           bool
		} `json:"list"`
		Show struct {
			Arch, Format, Template string
			Capabilities           []string
		} `json:"show"`
		Chat struct {
			final
			Role, Content string
			TotalDuration int64 `json:"total_duration"`
		} `json:"chat"`
		Stream struct {
			Text         string `json:"text"`
			Parts        int    `json:"parts"`
			Done         bool   `json:"done"`
			EvalCount    int    `json:"eval_count"`
			EvalDuration int64  `json:"eval_duration"`
		} `json:"stream"`
		Generate struct {
			final
			Response string `json:"response"`
			Context  int    `json:"context"`
		} `json:"generate"`
		Embed struct{ N, Dim, Count int } `json:"embed"`
		PS    []struct {
			Name    string
			Size    int64
			Expires bool
		} `json:"ps"`
		Version string `json:"version"`
		Unknown struct {
			Name   string `json:"name"`
			Status int    `json:"status"`
			Error  string `json:"error"`
		} `json:"unknown"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("client output: %v", err)
	}
	if len(got.List) != 1 || got.List[0].Name != "stories:latest" || got.List[0].Format != "gguf" || got.List[0].Family != "llama" ||
		len(got.List[0].Digest) != 64 || got.List[0].Size != e.model.Size || got.List[0].Quant == "" || got.List[0].Params == "" || !got.List[0].Modified {
		t.Errorf("list: %+v", got.List)
	}
	if got.Show.Arch != "llama" || got.Show.Format != "gguf" || got.Show.Template != "string" || len(got.Show.Capabilities) == 0 {
		t.Errorf("show: %+v", got.Show)
	}
	if c := got.Chat; c.Role != "assistant" || c.Content == "" || !c.Done || c.DoneReason != "length" || c.EvalCount != 8 ||
		c.PromptEvalCount < 2 || c.TotalDuration <= 0 {
		t.Errorf("chat: %+v", c)
	}
	if s := got.Stream; s.Text == "" || s.Parts < 2 || !s.Done || s.EvalCount != 8 || s.EvalDuration <= 0 {
		t.Errorf("streamed chat: %+v", s)
	}
	if g := got.Generate; g.Response == "" || !g.Done || g.EvalCount != 8 || g.Context != g.PromptEvalCount+g.EvalCount {
		t.Errorf("generate: %+v", g)
	}
	if em := got.Embed; em.N != 2 || em.Dim != e.model.Hparams().Dim || em.Count < 4 {
		t.Errorf("embed: %+v", em)
	}
	if len(got.PS) != 1 || got.PS[0].Name != "stories:latest" || got.PS[0].Size <= 0 || !got.PS[0].Expires {
		t.Errorf("ps: %+v", got.PS)
	}
	if got.Version == "" {
		t.Error("version is empty")
	}
	if u := got.Unknown; u.Name != "ResponseError" || u.Status != 404 || u.Error != `model "no-such-model" not found` {
		t.Errorf("unknown model: %+v, want a ResponseError with status 404", u)
	}
}

// TestOllamaNodeClientModels: the official ollama npm client against a server of two models
// (qwen3 alpha and llama beta), choosing one per request: list, show, chat streamed, generate,
// embed and ps on each (each loaded by its first request), keep_alive 0 unloading one, and a
// ResponseError with status 404 from every route for a model the server does not have.
func TestOllamaNodeClientModels(t *testing.T) {
	dir := nodePackage(t, "ollama", ollamaNodeVersion)
	e := newMultiEnv(t, multiOptions{embedder: true, cfg: RegistryConfig{KeepAlive: time.Hour}})
	out := runNodeScript(t, dir, "ollama_multi_client.js", "OLLAMA_HOST="+e.ts.URL)
	type stream struct {
		Text, Model string
		Parts       int
		Done        bool
		EvalCount   int `json:"eval_count"`
	}
	type gen struct {
		Response, Model string
		EvalCount       int `json:"eval_count"`
	}
	var got struct {
		PsBefore, PsAfter []string
		List              []struct{ Name, Family, Quant string }
		Show              map[string]string
		Stream            map[string]stream
		Generate          map[string]gen
		Embed             map[string]struct{ N, Dim int }
		PS                map[string][]string
		Unknown           map[string]struct {
			Name   string
			Status int
			Error  string
		}
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("client output: %v", err)
	}
	if len(got.PsBefore) != 0 {
		t.Errorf("ps before any request: %v, want none loaded", got.PsBefore)
	}
	if len(got.List) != 2 || got.List[0].Name != "alpha:latest" || got.List[0].Family != "qwen3" || got.List[0].Quant != "Q8_0" ||
		got.List[1].Name != "beta:latest" || got.List[1].Family != "llama" || got.List[1].Quant != "Q4_0" {
		t.Errorf("list: %+v", got.List)
	}
	arch := map[string]string{"alpha": "qwen3", "beta": "llama"}
	for _, m := range []string{"alpha", "beta"} {
		if got.Show[m] != arch[m] {
			t.Errorf("show %s: architecture %q, want %q", m, got.Show[m], arch[m])
		}
		if s := got.Stream[m]; s.Text == "" || s.Parts < 2 || !s.Done || s.Model != m || s.EvalCount != 6 {
			t.Errorf("streamed chat on %s: %+v", m, s)
		}
		if g := got.Generate[m]; g.Response == "" || g.Model != m || g.EvalCount != 6 {
			t.Errorf("generate on %s: %+v", m, g)
		}
		if em := got.Embed[m]; em.N != 2 || em.Dim <= 0 {
			t.Errorf("embed on %s: %+v", m, em)
		}
	}
	if fmt.Sprint(got.PS["alpha"]) != "[alpha:latest]" || fmt.Sprint(got.PS["beta"]) != "[alpha:latest beta:latest]" {
		t.Errorf("ps after each model's requests: %v", got.PS)
	}
	if fmt.Sprint(got.PsAfter) != "[beta:latest]" {
		t.Errorf("ps after keep_alive 0 on alpha: %v, want [beta:latest]", got.PsAfter)
	}
	if len(got.Unknown) != 4 {
		t.Errorf("unknown model: %+v", got.Unknown)
	}
	for what, u := range got.Unknown {
		if u.Name != "ResponseError" || u.Status != 404 || !strings.HasPrefix(u.Error, `model "no-such-model" not found`) {
			t.Errorf("%s on an unknown model: %+v, want a ResponseError with status 404", what, u)
		}
	}
	if n := e.loads.Load(); n != 2 {
		t.Errorf("%d loads, want one per model", n)
	}
}
