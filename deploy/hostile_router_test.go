package deploy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"ubatch/internal/testdata"
)

// The hostile-client test's rows for `ubatch route` (issue 32): a foreign Host, heavy chats that
// the router would once render whole, and a query of death, sent to three real nodes behind a
// real router.

// hostileRouterRSS bounds the router's resident memory under the heavy chats (it died at 1.9 GB).
const hostileRouterRSS = 1536 << 20

func TestHostileRouter(t *testing.T) {
	statSources("..")
	model := testdata.Model(t, "stories260K.gguf")
	if _, err := os.Stat(model); err != nil {
		t.Skipf("%s not found; skipping the hostile router test", model)
	}
	nodeArgs := func(string) []string {
		return []string{"-np", "8", "-c", "4096", "-t", "1", "--trusted-proxies", "127.0.0.1/32"}
	}
	nodes, router, rURL := startNodesAndRouter(t, model, []string{"q1", "q2", "q3"}, nodeArgs)
	client := &http.Client{Timeout: 2 * time.Minute}

	t.Run("foreign Host", func(t *testing.T) {
		tests := []struct {
			name, host string
			want       int
		}{
			{"loopback name", "localhost", http.StatusOK},
			{"rebinding name", "rebind.example:8000", http.StatusForbidden},
		}
		for _, tc := range tests {
			req, _ := http.NewRequest(http.MethodGet, rURL+"/v1/models", nil)
			req.Host = tc.host
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("%s: Host %q: %d, want %d", tc.name, tc.host, resp.StatusCode, tc.want)
			}
		}
	})
	t.Run("connections from one address", func(t *testing.T) { oneAddress(t, rURL) })
	t.Run("heavy chats", func(t *testing.T) { heavyChats(t, client, router, rURL, len(nodes)) })
	t.Run("query of death", func(t *testing.T) { queryOfDeath(t, client, router, rURL, nodes) })
}

// oneAddress opens 100 idle connections to the router from 127.0.0.5, more than
// --max-conns-per-client (64): the connections beyond it are answered 429, and another address
// (127.0.0.6) is still served.
func oneAddress(t *testing.T, rURL string) {
	addr := strings.TrimPrefix(rURL, "http://")
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	refused := 0
	for range 100 {
		d := net.Dialer{Timeout: time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.5")}}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			refused++
			continue
		}
		conns = append(conns, c)
	}
	// A connection over the cap is answered at once; one within it waits for a request.
	for _, c := range conns {
		c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		buf := make([]byte, 12)
		if n, _ := io.ReadFull(c, buf); n == len(buf) && string(buf) == "HTTP/1.1 429" {
			refused++
		}
	}
	if refused != 100-64 {
		t.Errorf("%d of 100 connections from one address refused, want %d (--max-conns-per-client 64)", refused, 100-64)
	}
	other := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.6")}}).DialContext}}
	resp, err := other.Get(rURL + "/v1/models")
	if err != nil {
		t.Fatalf("another address meanwhile: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("another address meanwhile: %d", resp.StatusCode)
	}
}

// heavyChats sends 24 concurrent chats of 100,000 short messages (3.5 MB each) through the
// router: each must be refused with a 4xx or served, the router must stay under its memory bound,
// and every node must stay in rotation.
func heavyChats(t *testing.T, client *http.Client, router *proc, rURL string, nodes int) {
	var b strings.Builder
	b.WriteString(`{"max_tokens": 1, "messages": [`)
	for i := range 100_000 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"role":"user","content":"m%d"}`, i)
	}
	b.WriteString(`]}`)
	body := b.String()
	var peak atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			peak.Store(max(peak.Load(), rssOf(router)))
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	t0 := time.Now()
	statuses := make([]int, 24)
	var wg sync.WaitGroup
	for i := range statuses {
		wg.Go(func() {
			resp, err := client.Post(rURL+"/v1/chat/completions", "application/json", strings.NewReader(body))
			if err != nil {
				t.Errorf("chat %d: %v", i, err)
				return
			}
			msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			statuses[i] = resp.StatusCode
			if resp.StatusCode >= 500 {
				t.Logf("chat %d: %d: %.200s", i, resp.StatusCode, msg)
			}
		})
	}
	wg.Wait()
	close(stop)
	<-sampled
	t.Logf("24 chats of %d bytes through the router in %v: statuses %v, router peak RSS %d MB",
		len(body), time.Since(t0).Round(time.Millisecond), statuses, peak.Load()>>20)
	for i, st := range statuses {
		if st != 0 && st != http.StatusOK && (st < 400 || st >= 500) {
			t.Errorf("chat %d: status %d, want a 4xx or 200", i, st)
		}
	}
	if router.exited() {
		t.Fatal("the router died")
	}
	if peak.Load() > hostileRouterRSS {
		t.Errorf("the router's RSS reached %d MB, over the %d MB bound", peak.Load()>>20, hostileRouterRSS>>20)
	}
	waitHTTP(t, router, rURL+"/health", fmt.Sprintf(`"nodes_healthy":%d`, nodes), 5*time.Second)
}

// queryOfDeath sends a stream and kills the node serving it, twice (a real node killed
// mid-request stands for one the request crashed): the third time the router refuses the
// request without sending it anywhere, so it has taken out two nodes and no more, and other
// requests are still served.
func queryOfDeath(t *testing.T, client *http.Client, router *proc, rURL string, nodes []*fleetNode) {
	body := completion(fmt.Sprintf("The query of death %d", time.Now().UnixNano()), 1500, true)
	byLabel := map[string]*fleetNode{}
	for _, n := range nodes {
		byLabel[n.label] = n
	}
	killed := 0
	for round := 1; round <= 3; round++ {
		resp, err := client.Post(rURL+"/v1/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if round == 3 {
			msg, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var e struct {
				Error struct {
					Code string `json:"code"`
				} `json:"error"`
			}
			json.Unmarshal(msg, &e)
			if resp.StatusCode != http.StatusUnprocessableEntity || e.Error.Code != "request_quarantined" {
				t.Fatalf("after two nodes died serving it: %d %.300s, want 422 request_quarantined", resp.StatusCode, msg)
			}
			break
		}
		n := byLabel[resp.Header.Get("X-Ubatch-Node")]
		if resp.StatusCode != http.StatusOK || n == nil {
			resp.Body.Close()
			t.Fatalf("round %d: status %d from node %q", round, resp.StatusCode, resp.Header.Get("X-Ubatch-Node"))
		}
		n.p.kill()
		killed++
		select {
		case <-n.p.done:
		case <-time.After(10 * time.Second):
			t.Fatalf("node %s did not exit after SIGKILL", n.id)
		}
		sc := bufio.NewScanner(resp.Body)
		sawError := false
		for sc.Scan() {
			sawError = sawError || strings.Contains(sc.Text(), "node_failed")
		}
		resp.Body.Close()
		if !sawError {
			t.Errorf("round %d: the stream of a killed node ended without an error event", round)
		}
	}
	alive := 0
	for _, n := range nodes {
		if !n.p.exited() {
			alive++
		}
	}
	if alive != len(nodes)-killed || killed != 2 {
		t.Fatalf("%d of %d nodes alive after %d kills", alive, len(nodes), killed)
	}
	if router.exited() {
		t.Fatal("the router died")
	}
	resp, err := client.Post(rURL+"/v1/completions", "application/json", strings.NewReader(completion("Once upon a time", 4, false)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("another request after the query of death: %d", resp.StatusCode)
	}
}
