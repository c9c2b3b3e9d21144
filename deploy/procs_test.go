package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"ubatch/internal/testkit"
)

// ubatchBin is the ubatch binary TestMain builds.
var ubatchBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "ubatch-deploy-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ubatchBin = filepath.Join(dir, "ubatch")
	killGroupsOnInterrupt(dir)
	if b := os.Getenv("UBATCH_BIN"); b != "" {
		// A binary built elsewhere, e.g. from an older commit, to measure a change before and after.
		ubatchBin = b
		code := m.Run()
		os.RemoveAll(dir)
		os.Exit(code)
	}
	build := exec.Command("go", "build", "-o", ubatchBin, "ubatch/cmd/ubatch")
	// Static, as the image (image_test.go) needs it: with cgo the net package links the C library.
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building ubatch:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// statSources is testkit.StatSources: this package's tests run the binary TestMain builds.
func statSources(root string) { testkit.StatSources(root) }

// tool returns the path of an installed program or skips the (sub)test with what to install.
func tool(t *testing.T, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s is not installed (Debian: apt-get install %s); skipping this part", name, pkg)
	}
	return p
}

// proc is a process started by a test, its output in a log file that is printed when the
// test fails.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	once sync.Once
	done chan struct{}
}

func startProc(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	dir := t.TempDir()
	p := &proc{name: name, log: filepath.Join(dir, name+".log"), done: make(chan struct{})}
	f, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(args[0], args[1:]...)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	// Its own process group, so that kill also ends what it forks (nginx's workers, which
	// outlive a killed master and keep listening).
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	groups.Lock()
	if err := p.cmd.Start(); err != nil {
		groups.Unlock()
		f.Close()
		t.Fatalf("starting %s: %v", name, err)
	}
	groups.pgids[p.cmd.Process.Pid] = true
	groups.Unlock()
	go func() { p.cmd.Wait(); f.Close(); close(p.done) }()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			b, _ := os.ReadFile(p.log)
			t.Logf("--- %s log (last 3000 bytes):\n%s", name, tail(b, 3000))
		}
	})
	return p
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// groups holds the process groups of the procs not yet killed (the group id is the leader's
// pid), for killGroupsOnInterrupt.
var groups = struct {
	sync.Mutex
	pgids map[int]bool
}{pgids: map[int]bool{}}

// killGroupsOnInterrupt makes an interrupt (^C, or SIGTERM) kill the process groups and remove
// dir before the test binary exits: in their own groups the children no longer get the
// terminal's SIGINT with it, and without this they would outlive an interrupted run.
func killGroupsOnInterrupt(dir string) {
	c := make(chan os.Signal, 1)
	signal.Notify(c, os.Interrupt, syscall.SIGTERM)
	go func() {
		sig := <-c
		groups.Lock()
		for pgid := range groups.pgids {
			syscall.Kill(-pgid, syscall.SIGKILL)
		}
		fmt.Fprintf(os.Stderr, "%v: killed the %d process groups the tests started\n", sig, len(groups.pgids))
		os.RemoveAll(dir)
		os.Exit(1)
	}()
}

// kill ends the process and everything in its group with SIGKILL, and waits for the process.
func (p *proc) kill() {
	p.once.Do(func() {
		groups.Lock()
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		delete(groups.pgids, p.cmd.Process.Pid)
		groups.Unlock()
	})
	<-p.done
}

// signal sends sig to the process alone (SIGSTOP freezes a node: one ubatch process).
func (p *proc) signal(sig syscall.Signal) { p.cmd.Process.Signal(sig) }

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitHTTP polls url until it answers 200 (and, when want is not empty, a body containing
// want), or fails the test after d.
func waitHTTP(t *testing.T, p *proc, url, want string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && strings.Contains(string(b), want) {
				cancel()
				return
			}
		}
		cancel()
		if p != nil && p.exited() {
			t.Fatalf("%s exited before %s answered", p.name, url)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not answer 200 within %v", url, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func lookPath(name string) (string, error) { return exec.LookPath(name) }

func getJSON(url string, v any) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}

func urlEscape(s string) string { return url.QueryEscape(s) }
