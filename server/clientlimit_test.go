package server

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestParseTrustedProxies(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []string
		bad      bool
	}{
		{"empty", "", nil, false},
		{"prefixes and addresses", " 10.0.0.0/8, 192.168.1.7 ,::1,2001:db8::/32", []string{"10.0.0.0/8", "192.168.1.7/32", "::1/128", "2001:db8::/32"}, false},
		{"host bits are dropped", "10.1.2.3/8", []string{"10.0.0.0/8"}, false},
		{"mapped address", "::ffff:10.0.0.1", []string{"10.0.0.1/32"}, false},
		{"not an address", "10.0.0.0/8,proxy.local", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseTrustedProxies(tc.in)
			if (err != nil) != tc.bad {
				t.Fatalf("error %v, want one: %v", err, tc.bad)
			}
			var s []string
			for _, p := range got {
				s = append(s, p.String())
			}
			if fmt.Sprint(s) != fmt.Sprint(tc.want) {
				t.Errorf("got %v, want %v", s, tc.want)
			}
		})
	}
}

func TestForwardedClient(t *testing.T) {
	proxies, _ := ParseTrustedProxies("10.0.0.0/8,fd00::/8")
	remote := netip.MustParseAddr("10.0.0.1")
	for _, tc := range []struct {
		name string
		xff  []string
		want string
	}{
		{"no header", nil, "10.0.0.1"},
		{"one client", []string{"203.0.113.7"}, "203.0.113.7"},
		{"through two trusted proxies", []string{"203.0.113.7, 10.0.0.9"}, "203.0.113.7"},
		{"a spoofed entry left of the real client", []string{"198.51.100.1, 203.0.113.7, 10.0.0.9"}, "203.0.113.7"},
		{"over two header lines", []string{"198.51.100.1", "203.0.113.7"}, "203.0.113.7"},
		{"every entry trusted", []string{"10.0.0.5, 10.0.0.9"}, "10.0.0.5"},
		{"with ports", []string{"203.0.113.7:4711", "[fd00::1]:80"}, "203.0.113.7"},
		{"IPv6 client", []string{"2001:db8::1"}, "2001:db8::1"},
		{"garbage where the client should be", []string{"198.51.100.1, unknown"}, "10.0.0.1"},
		{"empty entries", []string{" , 203.0.113.7 ,, "}, "203.0.113.7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := forwardedClient(tc.xff, proxies, remote); got.String() != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestClientKey(t *testing.T) {
	for _, tc := range []struct{ name, addr, want string }{
		{"IPv4 is itself", "203.0.113.7", "203.0.113.7"},
		{"IPv6 by its /64", "2001:db8:1:2:aaaa::1", "2001:db8:1:2::"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := clientKey(netip.MustParseAddr(tc.addr)); got.String() != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// dialFrom opens a TCP connection to addr from the local address from (any port); on Linux all
// of 127/8 is on the loopback interface, so tests get distinct client addresses.
func dialFrom(t *testing.T, from, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Skipf("cannot dial from %s (needs 127/8 on the loopback interface): %v", from, err)
	}
	c.SetDeadline(time.Now().Add(30 * time.Second))
	t.Cleanup(func() { c.Close() })
	return c
}

// response reads one response from c within d; its error code is "" when the body has none.
func response(c net.Conn, d time.Duration) (status int, code string, err error) {
	c.SetReadDeadline(time.Now().Add(d))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	var eb errorBody
	if json.Unmarshal(body, &eb) == nil && eb.Error.Code != nil {
		code = *eb.Error.Code
	}
	return resp.StatusCode, code, nil
}

// TestHealthUnderOneClientsFlood opens more slow-header connections (headers that never end) from
// one address than its cap: those over it must be refused at once, and /health and /metrics from
// another address must still answer, unless the per-client cap leaves the flood every slot.
func TestHealthUnderOneClientsFlood(t *testing.T) {
	e := newEnv(t, envOptions{})
	const flood = 20
	for _, tc := range []struct {
		name              string
		perClient, global int
		refusal           string // error code of the flood's refused connections
		status            int    // of /health and /metrics from another address
	}{
		{"the per-client cap leaves room", 4, 8, "too_many_client_connections", http.StatusOK},
		{"a per-client cap above the global one (as before it existed)", 64, 8, "too_many_connections", http.StatusServiceUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := startServe(t, e.srv.Handler(), ServeConfig{MaxConnections: tc.global, MaxConnsPerClient: tc.perClient, ReadTimeout: 20 * time.Second})
			conns := make([]net.Conn, flood)
			for i := range conns {
				conns[i] = dialFrom(t, "127.0.0.2", addr)
				fmt.Fprintf(conns[i], "GET /health HTTP/1.1\r\nHost: x\r\n") // and never the blank line
			}
			type result struct {
				status int
				code   string
				err    error
			}
			results := make(chan result, flood)
			start := time.Now()
			for _, c := range conns {
				go func() {
					s, code, err := response(c, time.Second)
					results <- result{s, code, err}
				}()
			}
			refused, held := 0, 0
			for range flood {
				r := <-results
				switch {
				case r.err != nil: // still waiting for its headers: it holds a slot
					held++
				case r.code == tc.refusal && (r.status == http.StatusTooManyRequests || r.status == http.StatusServiceUnavailable):
					refused++
				default:
					t.Errorf("a flood connection got %d %q, want %s", r.status, r.code, tc.refusal)
				}
			}
			want := min(tc.perClient, tc.global)
			t.Logf("%d slow-header connections from one address: %d held, %d refused (%s) within %v", flood, held, refused, tc.refusal, time.Since(start).Round(time.Millisecond))
			if held != want || refused != flood-want {
				t.Fatalf("%d held and %d refused, want %d held", held, refused, want)
			}
			for _, path := range []string{"/health", "/metrics"} {
				c := dialFrom(t, "127.0.0.1", addr)
				fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path)
				status, code, err := response(c, 5*time.Second)
				if err != nil || status != tc.status {
					t.Errorf("GET %s from another address: %d %q %v, want %d", path, status, code, err, tc.status)
				}
			}
		})
	}
}

// TestTrustedProxyLimitsRequestsPerClient: connections from a trusted proxy are not capped per
// address, but each client behind it (by X-Forwarded-For) has its requests in flight capped, and
// /health is exempt; an untrusted address's X-Forwarded-For is ignored and its connections capped.
func TestTrustedProxyLimitsRequestsPerClient(t *testing.T) {
	entered := make(chan struct{}, 16)
	release := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/block" {
			entered <- struct{}{}
			<-release
		}
		WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	proxies, _ := ParseTrustedProxies("127.0.0.2")
	addr := startServe(t, h, ServeConfig{MaxConnections: 32, MaxConnsPerClient: 2, TrustedProxies: proxies})
	t.Cleanup(func() { close(release) })
	const inFlight = 0 // a request that reached the handler and stays there
	for _, tc := range []struct {
		name, from string
		reqs       []string // path and X-Forwarded-For, one request per connection
		want       []int    // status of each, or inFlight
		codes      []string // of the refusals
	}{
		{"two users behind the proxy", "127.0.0.2",
			[]string{"/block 203.0.113.7", "/block 203.0.113.7", "/block 203.0.113.7", "/health 203.0.113.7", "/block 198.51.100.1, 203.0.113.8"},
			[]int{inFlight, inFlight, 429, 200, inFlight}, []string{"too_many_client_requests"}},
		{"an untrusted address sending X-Forwarded-For", "127.0.0.3",
			[]string{"/block 203.0.113.20", "/block 203.0.113.21", "/block 203.0.113.22"},
			[]int{inFlight, inFlight, 429}, []string{"too_many_client_connections"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var codes []string
			for i, req := range tc.reqs {
				path, xff, _ := strings.Cut(req, " ")
				c := dialFrom(t, tc.from, addr)
				fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: %s\r\n\r\n", path, xff)
				type result struct {
					status int
					code   string
				}
				got := make(chan result, 1)
				go func() {
					s, code, _ := response(c, 10*time.Second)
					got <- result{s, code}
				}()
				status := -1
				select {
				case <-entered:
					status = inFlight
				case r := <-got:
					status = r.status
					if r.code != "" {
						codes = append(codes, r.code)
					}
				case <-time.After(5 * time.Second):
				}
				if status != tc.want[i] {
					t.Errorf("request %d (%s from %s): status %d, want %d (0: in flight)", i, req, tc.from, status, tc.want[i])
				}
			}
			if fmt.Sprint(codes) != fmt.Sprint(tc.codes) {
				t.Errorf("refusals %v, want %v", codes, tc.codes)
			}
		})
	}
}

// TestLimitListenerAccounting: a connection's slots come back once however often it leaves the
// cap or is closed, and a trusted proxy's connections are not counted per client.
func TestLimitListenerAccounting(t *testing.T) {
	for _, tc := range []struct {
		name      string
		trusted   string
		perClient int // counted for 127.0.0.1 while the connections are open
	}{
		{"a client", "", 3},
		{"a trusted proxy", "127.0.0.1", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			proxies, _ := ParseTrustedProxies(tc.trusted)
			l := newLimitListener(ln, 8, 4, proxies, slog.New(slog.DiscardHandler))
			key := netip.MustParseAddr("127.0.0.1")
			var conns []*countedConn
			for range 3 {
				d := dial(t, ln.Addr().String(), 5*time.Second)
				defer d.Close()
				c, err := l.Accept()
				if err != nil {
					t.Fatal(err)
				}
				conns = append(conns, c.(*countedConn))
			}
			if l.open.Load() != 3 || l.clients.count(key) != tc.perClient {
				t.Fatalf("open %d, per client %d; want 3 and %d", l.open.Load(), l.clients.count(key), tc.perClient)
			}
			conns[0].leaveCap()
			conns[0].leaveCap()
			if l.open.Load() != 2 || l.clients.count(key) != tc.perClient {
				t.Fatalf("after leaving the cap: open %d, per client %d", l.open.Load(), l.clients.count(key))
			}
			for _, c := range conns {
				c.Close()
				c.Close()
			}
			if l.open.Load() != 0 || l.clients.count(key) != 0 || len(l.clients.n) != 0 {
				t.Fatalf("after closing: open %d, per client %d, %d entries", l.open.Load(), l.clients.count(key), len(l.clients.n))
			}
		})
	}
}
