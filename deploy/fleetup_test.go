package deploy

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// freeBase is a port p with p..p+n-1 free on the loopback (a check, not a reservation).
func freeBase(t *testing.T, n int) int {
	t.Helper()
	for range 50 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		base := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if base+n > 65535 {
			continue
		}
		ok := true
		for p := base; p < base+n && ok; p++ {
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
			ok = err == nil
			if ok {
				l.Close()
			}
		}
		if ok {
			return base
		}
	}
	t.Fatal("no run of free ports")
	return 0
}

// fleetUpLine is one of the URL lines fleet-up.sh prints.
var fleetUpLine = regexp.MustCompile(`^  (nginx|router|node n1|node n2|redis|prometheus|pids)\s+(.+?)\s*(  |$)`)

// TestFleetUp runs scripts/fleet-up.sh as docs/deploy.md says: it brings nginx, the router, two
// nodes on the demo model, Redis and Prometheus up on consecutive ports and prints their URLs;
// a completion answers through nginx, the web page and its live feed through the router and
// nginx, Prometheus scrapes the nodes; on SIGINT (Ctrl-C) the script stops every process it
// started and removes its folder.
func TestFleetUp(t *testing.T) {
	if testing.Short() {
		t.Skip("starts six processes")
	}
	tool(t, "redis-server", "redis-server")
	tool(t, "nginx", "nginx")
	tool(t, "prometheus", "prometheus")
	tool(t, "curl", "curl")
	base := freeBase(t, 6)
	p := startProc(t, "fleet-up", "env", "UBATCH_BIN="+ubatchBin, "DIR="+t.TempDir()+"/fleet", "bash", "../scripts/fleet-up.sh", strconv.Itoa(base))
	urls, dir := fleetUpURLs(t, p)
	for i, name := range []string{"nginx", "router", "node n1", "node n2", "redis", "prometheus"} {
		scheme := "http"
		if name == "redis" {
			scheme = "redis"
		}
		if want := scheme + "://127.0.0.1:" + strconv.Itoa(base+i); urls[name] != want {
			t.Errorf("%s at %q, want %s", name, urls[name], want)
		}
	}

	get := func(url string) (int, string, string) {
		t.Helper()
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
	}
	t.Run("a completion through nginx", func(t *testing.T) {
		resp, err := http.Post(urls["nginx"]+"/v1/completions", "application/json",
			strings.NewReader(`{"prompt": "Once upon a time", "max_tokens": 16, "temperature": 0}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var c struct {
			Choices []struct{ Text string }
		}
		if err := json.NewDecoder(resp.Body).Decode(&c); err != nil || resp.StatusCode != 200 || len(c.Choices) != 1 ||
			len(strings.Fields(c.Choices[0].Text)) < 3 || resp.Header.Get("X-Ubatch-Node") == "" {
			t.Errorf("%s, %v, %+v, node %q", resp.Status, err, c, resp.Header.Get("X-Ubatch-Node"))
		}
	})
	for _, front := range []string{"router", "nginx"} {
		t.Run("the page through "+front, func(t *testing.T) {
			if code, ct, body := get(urls[front] + "/"); code != 200 || !strings.HasPrefix(ct, "text/html") || !strings.Contains(body, "<!doctype html>") {
				t.Errorf("GET /: %d %s %.200s", code, ct, body)
			}
			if code, _, body := get(urls[front] + "/ui/app.js"); code != 200 || !strings.Contains(body, "/live") {
				t.Errorf("GET /ui/app.js: %d %.200s", code, body)
			}
		})
		t.Run("the live feed through "+front, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, urls[front]+"/live", nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			line, err := bufio.NewReader(resp.Body).ReadString('\n')
			if resp.StatusCode != 200 || !strings.HasPrefix(line, `data: {"seq":`) {
				t.Errorf("GET /live: %s, first line %q, %v", resp.Status, line, err)
			}
		})
	}
	t.Run("Prometheus scrapes both nodes", func(t *testing.T) {
		deadline := time.Now().Add(30 * time.Second)
		for {
			_, _, body := get(urls["prometheus"] + `/api/v1/query?query=up{job="ubatch-node"}==1`)
			if strings.Count(body, `"instance"`) == 2 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the nodes are not up in Prometheus: %s", body)
			}
			time.Sleep(500 * time.Millisecond)
		}
	})

	checkFleetStops(t, p, strings.Fields(urls["pids"]), dir)
}

// fleetUpURLs waits for fleet-up.sh's URL lines in its log and returns them by name (and
// "pids"), with the folder it runs in.
func fleetUpURLs(t *testing.T, p *proc) (map[string]string, string) {
	t.Helper()
	urls := map[string]string{}
	deadline := time.Now().Add(3 * time.Minute)
	for len(urls) < 7 {
		if p.exited() || time.Now().After(deadline) {
			t.Fatalf("fleet-up.sh did not print its URLs (exited: %v)", p.exited())
		}
		time.Sleep(200 * time.Millisecond)
		f, err := os.Open(p.log)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if m := fleetUpLine.FindStringSubmatch(sc.Text()); m != nil {
				urls[m[1]] = m[2]
			}
		}
		f.Close()
	}
	dir := ""
	if b, err := os.ReadFile(p.log); err == nil {
		if m := regexp.MustCompile(`fleet: up under (\S+)`).FindSubmatch(b); m != nil {
			dir = string(m[1])
		}
	}
	return urls, dir
}

// checkFleetStops sends the script SIGINT (Ctrl-C) and checks that it exits 0 having stopped
// every process it started (pids) and removed its folder.
func checkFleetStops(t *testing.T, p *proc, pids []string, dir string) {
	t.Helper()
	p.signal(syscall.SIGINT) // Ctrl-C
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		t.Fatal("fleet-up.sh did not stop within 60 s of SIGINT")
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("fleet-up.sh exited %d after SIGINT", code)
	}
	if len(pids) != 6 {
		t.Errorf("pids %q, want six", pids)
	}
	for _, s := range pids {
		pid, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("pid %q", s)
		}
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process %d outlived the fleet (%v)", pid, err)
		}
	}
	if _, err := os.Stat(dir); dir == "" || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the fleet's folder %q is left (%v)", dir, err)
	}
}
