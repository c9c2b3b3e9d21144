package kube

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"ubatch/internal/testkit"
)

var quietLog = slog.New(slog.DiscardHandler)

var (
	buildOnce sync.Once
	ubatchBin string
	buildErr  error
)

// ubatch builds the ubatch binary once per test run (static, as the image's).
func ubatch(t *testing.T) string {
	t.Helper()
	// go test's cache records the files a test opens; the go build child's are not recorded.
	testkit.StatSources("../..")
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "ubatch-kube-bin-")
		if err != nil {
			buildErr = err
			return
		}
		ubatchBin = filepath.Join(dir, "ubatch")
		cmd := exec.Command("go", "build", "-o", ubatchBin, "ubatch/cmd/ubatch")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("building ubatch: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return ubatchBin
}

// process starts a ubatch command, its output in a log printed if the test fails; it returns
// the log's path.
func process(t *testing.T, name string, args ...string) string {
	t.Helper()
	log := filepath.Join(t.TempDir(), name+".log")
	f, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(ubatch(t), args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), "UBATCH_HOME="+t.TempDir()) // an empty library: the demo model
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); f.Close(); close(done) }()
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		if t.Failed() {
			b, _ := os.ReadFile(log)
			if len(b) > 4000 {
				b = b[len(b)-4000:]
			}
			t.Logf("--- %s log (its end):\n%s", name, b)
		}
	})
	return log
}

// complete posts a completion to the router and returns the status, the node that served it
// (X-Ubatch-Node) and the body.
func complete(t *testing.T, router string, i int) (int, string, string) {
	t.Helper()
	body := fmt.Sprintf(`{"prompt": "Once upon a time, story %d", "max_tokens": 4}`, i)
	resp, err := http.Post(router+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("X-Ubatch-Node"), string(b)
}

// gone reports whether the router's /metrics no longer lists node (host:port): it left the
// router's fleet.
func gone(t *testing.T, router, node string) bool {
	t.Helper()
	resp, err := http.Get(router + "/metrics")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return !strings.Contains(string(b), `ubatch_route_node_healthy{node="`+node+`"}`)
}

// hostIP is an IPv4 address of this host that an EndpointSlice accepts (the API server refuses
// loopback and link-local ones), or skips the test.
func hostIP(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Skipf("no interface addresses (%v): the nodes need a non-loopback IPv4 address, as EndpointSlices refuse loopback ones", err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip := n.IP.To4(); ip != nil && !ip.IsLoopback() && !ip.IsLinkLocalUnicast() {
				return ip.String()
			}
		}
	}
	t.Skip("no non-loopback IPv4 address on this host: the nodes need one, as EndpointSlices refuse loopback addresses")
	return ""
}

// TestRouteDiscoversNodes: `ubatch route --kube-service` over real `ubatch serve` processes
// whose endpoints the test writes into the real API server: the router finds the first two,
// picks a third within 10 s of its slice, never picks one marked not ready or removed again,
// and answers 503 once the Service has no slice.
func TestRouteDiscoversNodes(t *testing.T) {
	c := sharedControlPlane(t)
	ip := hostIP(t)
	ns := c.namespace(t, "route")
	c.grantRouter(t, ns)
	c.createService(t, ns, "ubatch-node")
	var ports [3]int
	for i := range ports {
		p, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = p
		process(t, fmt.Sprintf("node%d", i), "serve", "--host", ip, "--port", strconv.Itoa(p), "-t", "1", "-np", "2")
	}
	node := func(i int) string { return net.JoinHostPort(ip, strconv.Itoa(ports[i])) }
	for i := range ports {
		testkit.Eventually(t, 2*time.Minute, node(i)+" up", func() bool {
			resp, err := http.Get("http://" + node(i) + "/health")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		})
	}
	// One slice per node: a slice's port is one for all its endpoints, and these differ.
	c.createSlice(t, ns, endpointSlice("ubatch-node-0", "ubatch-node", int32(ports[0]), true, ip))
	c.createSlice(t, ns, endpointSlice("ubatch-node-1", "ubatch-node", int32(ports[1]), true, ip))

	rp, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	router := "http://127.0.0.1:" + strconv.Itoa(rp)
	routerLog := process(t, "router", "route", "--host", "127.0.0.1", "--port", strconv.Itoa(rp),
		"--kube-service", ns+"/ubatch-node:http", "--kubeconfig", c.router, "--health-interval", "200ms")
	testkit.Eventually(t, 2*time.Minute, "the router's two nodes in rotation", func() bool {
		resp, err := http.Get(router + "/health")
		if err != nil {
			return false
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return strings.Contains(string(b), `"nodes_healthy":2`)
	})
	served := map[string]int{}
	for i := range 8 {
		status, by, body := complete(t, router, i)
		if status != http.StatusOK || !strings.Contains(body, `"text"`) {
			t.Fatalf("completion through the router: %d %s", status, body)
		}
		served[by]++
	}
	if served[node(0)]+served[node(1)] != 8 {
		t.Fatalf("served by %v, want the two discovered nodes", served)
	}

	// A third endpoint: picked within 10 s, no restart.
	added := time.Now()
	c.createSlice(t, ns, endpointSlice("ubatch-node-2", "ubatch-node", int32(ports[2]), true, ip))
	for i := 100; ; i++ {
		if _, by, _ := complete(t, router, i); by == node(2) {
			t.Logf("the third node served a request %v after its slice was created", time.Since(added).Round(time.Millisecond))
			break
		}
		if time.Since(added) > 10*time.Second {
			t.Fatalf("the third node was not picked within 10 s of its slice")
		}
	}

	// Not ready, then removed: never picked again.
	c.setReady(t, ns, "ubatch-node-0", false)
	testkit.Eventually(t, 10*time.Second, node(0)+" out of the router's fleet", func() bool { return gone(t, router, node(0)) })
	c.deleteSlice(t, ns, "ubatch-node-1")
	testkit.Eventually(t, 10*time.Second, node(1)+" out of the router's fleet", func() bool { return gone(t, router, node(1)) })
	for i := 200; i < 210; i++ {
		status, by, body := complete(t, router, i)
		if status != http.StatusOK || by != node(2) {
			t.Fatalf("after nodes 0 and 1 left: %d from %q: %s", status, by, body)
		}
	}

	// No slice at all: a clear 503.
	c.deleteSlices(t, ns, "ubatch-node")
	testkit.Eventually(t, 10*time.Second, "503 with an empty Service", func() bool {
		status, _, body := complete(t, router, 300)
		return status == http.StatusServiceUnavailable && strings.Contains(body, "discovery lists none")
	})
	b, err := os.ReadFile(routerLog)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	for i := range ports {
		for _, what := range []string{`msg="node joined the fleet"`, `msg="node left the fleet"`} {
			if !slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, what) && strings.Contains(l, " node="+node(i)+" ") }) {
				t.Errorf("the router's log has no %s for %s", what, node(i))
			}
		}
	}
}
