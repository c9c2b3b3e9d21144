package deploy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"ubatch/internal/sse"
	"ubatch/internal/testdata"
	"ubatch/internal/testkit"
	"ubatch/internal/testredis"
)

// fleet is the system under test: Redis, three nodes, a router, and (when installed) nginx
// in front and Prometheus scraping them.
type fleet struct {
	t      *testing.T
	model  string
	redis  *testredis.Server
	rdb    *redis.Client
	nodes  []*fleetNode
	router *proc
	rURL   string
	entry  string // nginx's URL, or the router's without nginx
	nginx  bool
	prom   string // Prometheus URL, "" without it
	client *http.Client
}

type fleetNode struct {
	id, url, label string
	p              *proc
}

func startFleet(t *testing.T) *fleet {
	model := testdata.Model(t, "stories260K.gguf")
	if _, err := os.Stat(model); err != nil {
		t.Skipf("%s not found; skipping the fleet test", model)
	}
	f := &fleet{t: t, model: model, redis: testredis.StartTCP(t),
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}, Timeout: time.Minute}}
	f.rdb = f.redis.Client()
	nodeArgs := func(id string) []string {
		return []string{"-np", "8", "-c", "8192", "-t", "1", "--redis", f.redis.URL, "--node-id", id,
			"--fleet-ttl", "3s", "--trusted-proxies", "127.0.0.1/32"}
	}
	// Affinity off: every prefix decision must come from what the nodes publish to Redis.
	f.nodes, f.router, f.rURL = startNodesAndRouter(t, model, []string{"n1", "n2", "n3"}, nodeArgs,
		"--redis", f.redis.URL, "--affinity-ttl", "-1s")
	f.entry = f.rURL
	if f.startNginx() {
		f.nginx = true
	}
	f.startPrometheus()
	return f
}

// startNodesAndRouter starts a node of model for each id (serve -m model nodeArgs(id)...), waits
// until each is healthy, then a router over them (route -m model --nodes ... --port ...
// --health-interval 200ms routerArgs...), and waits until the router sees every node healthy.
func startNodesAndRouter(t *testing.T, model string, ids []string, nodeArgs func(id string) []string, routerArgs ...string) (nodes []*fleetNode, router *proc, url string) {
	t.Helper()
	var urls []string
	for _, id := range ids {
		n := startNode(t, id, model, nodeArgs(id)...)
		nodes = append(nodes, n)
		urls = append(urls, n.url)
	}
	for _, n := range nodes {
		waitHTTP(t, n.p, n.url+"/health", "ok", 20*time.Second)
	}
	rport := freePort(t)
	url = "http://127.0.0.1:" + strconv.Itoa(rport)
	args := append([]string{"route", "-m", model, "--nodes", strings.Join(urls, ","), "--port", strconv.Itoa(rport),
		"--health-interval", "200ms"}, routerArgs...)
	router = startProc(t, "router", append([]string{ubatchBin}, args...)...)
	waitHTTP(t, router, url+"/health", fmt.Sprintf(`"nodes_healthy":%d`, len(ids)), 20*time.Second)
	return nodes, router, url
}

// startNode starts `ubatch serve -m model args...` on a free loopback port as node id; the
// caller waits for its /health.
func startNode(t *testing.T, id, model string, args ...string) *fleetNode {
	port := freePort(t)
	n := &fleetNode{id: id, url: "http://127.0.0.1:" + strconv.Itoa(port)}
	n.label = strings.TrimPrefix(n.url, "http://")
	n.p = startProc(t, "node-"+id, append([]string{ubatchBin, "serve", "-m", model, "--port", strconv.Itoa(port)}, args...)...)
	return n
}

func freePort(t *testing.T) int {
	t.Helper()
	p, err := testredis.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (f *fleet) startNginx() bool {
	t := f.t
	nginx, err := lookPath("nginx")
	if err != nil {
		t.Log("nginx is not installed (Debian: apt-get install nginx): requests go to the router directly")
		return false
	}
	dir := t.TempDir()
	port := freePort(t)
	conf := renderNginx(t, dir, port, strings.TrimPrefix(f.rURL, "http://"))
	p := startProc(t, "nginx", nginx, "-p", dir, "-c", conf, "-g", "daemon off; pid "+filepath.Join(dir, "nginx.pid")+";")
	f.entry = "http://127.0.0.1:" + strconv.Itoa(port)
	waitHTTP(t, p, f.entry+"/health", "ok", 10*time.Second)
	return true
}

func (f *fleet) startPrometheus() {
	t := f.t
	bin, err := lookPath("prometheus")
	if err != nil {
		t.Log("prometheus is not installed (Debian: apt-get install prometheus): the dashboard queries are not evaluated")
		return
	}
	dir := t.TempDir()
	cfg, err := os.ReadFile("prometheus.yml")
	if err != nil {
		t.Fatal(err)
	}
	s := string(cfg)
	for _, old := range []string{"scrape_interval: 5s", "evaluation_interval: 5s"} {
		if !strings.Contains(s, old) {
			t.Fatalf("prometheus.yml: %q not found (the test shortens it)", old)
		}
		s = strings.Replace(s, old, strings.Replace(old, "5s", "1s", 1), 1)
	}
	write := func(name string, b []byte) {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("prometheus.yml", []byte(s))
	alerts, _ := os.ReadFile("alerts.yml")
	write("alerts.yml", alerts)
	var nodes []string
	for _, n := range f.nodes {
		nodes = append(nodes, n.label)
	}
	tg := func(targets []string) []byte {
		b, _ := json.Marshal([]map[string]any{{"targets": targets, "labels": map[string]string{"fleet": "e2e"}}})
		return b
	}
	write("targets/nodes.json", tg(nodes))
	write("targets/routers.json", tg([]string{strings.TrimPrefix(f.rURL, "http://")}))
	port := freePort(t)
	p := startProc(t, "prometheus", bin, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address=127.0.0.1:"+strconv.Itoa(port),
		"--log.level=warn")
	f.prom = "http://127.0.0.1:" + strconv.Itoa(port)
	waitHTTP(t, p, f.prom+"/-/ready", "", 20*time.Second)
}

// result is one request's outcome as a client sees it.
type result struct {
	status int
	node   string
	events []string // SSE data payloads
	body   []byte   // non-streaming body
	done   bool     // the stream ended with [DONE]
	err    error
}

func (r result) text() string {
	var b strings.Builder
	for _, e := range r.events {
		var c struct {
			Choices []struct {
				Text  string `json:"text"`
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if json.Unmarshal([]byte(e), &c) == nil {
			for _, ch := range c.Choices {
				b.WriteString(ch.Text + ch.Delta.Content)
			}
		}
	}
	return b.String()
}

func (r result) errorEvent() bool {
	return len(r.events) > 0 && strings.Contains(r.events[len(r.events)-1], `"error"`)
}

// post sends body to base+path; for a stream it calls started (if not nil) after the first event.
func (f *fleet) post(base, path, body string, started func()) result {
	resp, err := f.client.Post(base+path, "application/json", strings.NewReader(body))
	if err != nil {
		return result{err: err}
	}
	defer resp.Body.Close()
	r := result{status: resp.StatusCode, node: resp.Header.Get("X-Ubatch-Node")}
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		r.body, r.err = io.ReadAll(resp.Body)
		return r
	}
	sc := sse.NewReader(resp.Body, 1<<20)
	for sc.Next() {
		d := sc.Text()
		if d == "[DONE]" {
			r.done = true
			break
		}
		r.events = append(r.events, d)
		if len(r.events) == 1 && started != nil {
			started()
		}
	}
	r.err = sc.Err()
	return r
}

// metric sums the router's (or another target's) samples of name whose labels contain every
// label="value" pair given.
func (f *fleet) metric(url, name string, labels ...string) float64 {
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	sum := 0.0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(line, l)
		}
		if i := strings.LastIndexByte(line, ' '); ok && i > 0 {
			v, _ := strconv.ParseFloat(line[i+1:], 64)
			sum += v
		}
	}
	return sum
}

func (f *fleet) node(label string) *fleetNode {
	for _, n := range f.nodes {
		if n.label == label {
			return n
		}
	}
	f.t.Fatalf("no node %q", label)
	return nil
}

// tenant returns tenant i's system prompt (about 250 tokens) and a request body with question q.
func tenant(i int) string {
	words := []string{"castle", "river", "garden", "morning", "window", "letter", "forest", "music", "stone", "harbor"}
	var b strings.Builder
	fmt.Fprintf(&b, "You are the helper of tenant %d. ", i)
	for k := range 70 {
		b.WriteString(words[(k*7+i*3)%len(words)] + " ")
	}
	return b.String()
}

func completion(prompt string, maxTokens int, stream bool) string {
	b, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": maxTokens, "temperature": 0, "stream": stream,
		"ignore_eos": true, "stream_options": map[string]bool{"include_usage": true}})
	return string(b)
}

func TestFleetEndToEnd(t *testing.T) {
	statSources("..")
	if testredis.Binary() == "" {
		t.Skip("redis-server is not installed (Debian: apt-get install redis-server); skipping the fleet test")
	}
	start := time.Now()
	f := startFleet(t)
	t.Logf("fleet up in %v (nginx: %v, prometheus: %v)", time.Since(start).Round(time.Millisecond), f.nginx, f.prom != "")
	t.Run("streams through nginx", f.testStreams)
	owner := ""
	t.Run("repeated tenant prompt lands on the node that cached it", func(t *testing.T) { owner = f.testAffinity(t) })
	t.Run("node killed mid-run", func(t *testing.T) { f.testKill(t, owner) })
	t.Run("Redis restarted", f.testRedisRestart)
	t.Run("dashboard queries return data", f.testDashboard)
	t.Logf("whole test: %v", time.Since(start).Round(time.Millisecond))
}

func (f *fleet) testStreams(t *testing.T) {
	if !f.nginx {
		t.Skip("nginx is not installed (Debian: apt-get install nginx)")
	}
	direct := f.post(f.nodes[0].url, "/v1/completions", completion("Once upon a time", 40, false), nil)
	if direct.status != 200 {
		t.Fatalf("direct request: %d %s", direct.status, direct.body)
	}
	var want struct {
		Choices []struct{ Text string } `json:"choices"`
	}
	json.Unmarshal(direct.body, &want)
	r := f.post(f.entry, "/v1/completions", completion("Once upon a time", 40, true), nil)
	if r.err != nil || r.status != 200 || !r.done || r.node == "" {
		t.Fatalf("stream through nginx: status %d, done %v, node %q, err %v, %d events", r.status, r.done, r.node, r.err, len(r.events))
	}
	if got := r.text(); got != want.Choices[0].Text {
		t.Fatalf("streamed text %q, the node answers %q", got, want.Choices[0].Text)
	}
	chat := `{"messages": [{"role": "user", "content": "Tell me a story"}], "max_tokens": 20, "stream": true}`
	if r := f.post(f.entry, "/v1/chat/completions", chat, nil); r.status != 200 || !r.done || len(r.events) < 3 {
		t.Fatalf("chat stream through nginx: status %d, done %v, %d events", r.status, r.done, len(r.events))
	}
	// Streaming is passed on chunk by chunk: the first event arrives before the stream ends.
	var first, end time.Time
	t0 := time.Now()
	r = f.post(f.entry, "/v1/completions", completion("Once upon a time", 1500, true), func() { first = time.Now() })
	end = time.Now()
	if !r.done || first.IsZero() || end.Sub(first) < end.Sub(t0)/4 {
		t.Fatalf("a 1500-token stream: first event after %v of %v: nginx buffers the stream", first.Sub(t0), end.Sub(t0))
	}
}

func (f *fleet) testAffinity(t *testing.T) string {
	// A Redis entry naming a node that is not in --nodes is ignored.
	ctx := context.Background()
	f.rdb.SAdd(ctx, "ubatch:nodes", "stranger")
	f.rdb.Set(ctx, "ubatch:node:stranger", `{"id":"stranger","url":"http://127.0.0.1:9","block_size":16}`, time.Minute)
	testkit.Eventually(t, 5*time.Second, "the stranger ignored", func() bool { return f.metric(f.rURL, "ubatch_route_unknown_nodes") == 1 })

	sys := tenant(1)
	first := f.post(f.entry, "/v1/completions", completion(sys+"Question zero.", 8, false), nil)
	if first.status != 200 || first.node == "" {
		t.Fatalf("first request: %d %q %s", first.status, first.node, first.body)
	}
	owner := f.node(first.node)
	testkit.Eventually(t, 5*time.Second, "the owner's blocks in Redis", func() bool {
		return f.rdb.SCard(ctx, "ubatch:node:"+owner.id+":blocks").Val() >= 10
	})
	before := f.metric(f.rURL, "ubatch_route_decisions_total", `node="`+owner.label+`"`, `reason="prefix"`)
	for i := range 5 {
		r := f.post(f.entry, "/v1/completions", completion(sys+fmt.Sprintf("Question %d.", i+1), 8, i%2 == 0), nil)
		if r.status != 200 || r.node != owner.label {
			t.Fatalf("repeat %d served by %q (status %d), the prefix is on %s", i, r.node, r.status, owner.label)
		}
	}
	if got := f.metric(f.rURL, "ubatch_route_decisions_total", `node="`+owner.label+`"`, `reason="prefix"`) - before; got != 5 {
		t.Fatalf("router metrics: %v prefix decisions for %s, want 5", got, owner.label)
	}
	if f.metric(f.rURL, "ubatch_route_prompt_mismatch_total") != 0 {
		t.Fatal("router and node tokenized a prompt differently")
	}
	if hit := f.metric(owner.url, "ubatch_prefix_cache_hit_tokens_total"); hit < 5*200 {
		t.Fatalf("the owner reports %v prefix-cache hit tokens after 5 repeats of a ~250-token prefix", hit)
	}
	return owner.label
}

func (f *fleet) testKill(t *testing.T, ownerLabel string) {
	if ownerLabel == "" {
		t.Skip("no tenant owner (the previous part failed)")
	}
	victim := f.node(ownerLabel)
	sys := tenant(1)
	// Streams of the victim's tenant: long enough to be mid-way when the victim stops.
	const streaming, waiting = 6, 4
	results := make([]result, streaming+waiting)
	var wg, started sync.WaitGroup
	started.Add(streaming)
	for i := range streaming {
		wg.Go(func() {
			var once sync.Once
			results[i] = f.post(f.entry, "/v1/completions", completion(sys+fmt.Sprintf("Story %d.", i), 1800, true),
				func() { once.Do(started.Done) })
			once.Do(started.Done)
		})
	}
	started.Wait()
	// Freeze the victim, so that the next requests reach it but get no byte, then kill it.
	victim.p.signal(syscall.SIGSTOP)
	for i := streaming; i < streaming+waiting; i++ {
		wg.Go(func() {
			results[i] = f.post(f.entry, "/v1/completions", completion(sys+fmt.Sprintf("Late %d.", i), 30, true), nil)
		})
	}
	time.Sleep(500 * time.Millisecond)
	victim.p.kill()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("requests still hang 30 s after the node was killed")
	}
	broken := 0
	for i, r := range results[:streaming] {
		switch {
		case r.status == 200 && r.node == victim.label && r.errorEvent() && !r.done:
			broken++
		case r.status == 200 && r.done && !r.errorEvent():
			// finished before the node was stopped
		default:
			t.Errorf("stream %d (node %s): status %d, done %v, %d events, err %v: neither complete nor ended by an error event",
				i, r.node, r.status, r.done, len(r.events), r.err)
		}
	}
	if broken == 0 {
		t.Fatal("every stream had finished before the node was stopped: the kill tested nothing")
	}
	for i, r := range results[streaming:] {
		if r.status != 200 || !r.done || r.errorEvent() || r.node == victim.label || r.node == "" {
			t.Errorf("request %d sent while the node was frozen: status %d, node %q, done %v, err %v: not served by another node",
				i, r.status, r.node, r.done, r.err)
		}
	}
	t.Logf("%d streams ended with an error event, %d late requests served elsewhere", broken, waiting)
	testkit.Eventually(t, 5*time.Second, "the victim out of rotation", func() bool {
		return f.metric(f.rURL, "ubatch_route_node_healthy", `node="`+victim.label+`"`) == 0
	})
	testkit.Eventually(t, 6*time.Second, "the dead node's Redis entries expired (--fleet-ttl 3s)", func() bool {
		return f.rdb.Exists(context.Background(), "ubatch:node:"+victim.id, "ubatch:node:"+victim.id+":blocks").Val() == 0
	})
	if f.metric(f.rURL, "ubatch_route_retries_total") < 1 {
		t.Fatal("no retry counted for the requests the victim never answered")
	}
}

func (f *fleet) testRedisRestart(t *testing.T) {
	ctx := context.Background()
	f.redis.Stop()
	testkit.Eventually(t, 5*time.Second, "the router noticing", func() bool { return f.metric(f.rURL, "ubatch_route_redis_errors_total") > 0 })
	sys := tenant(2)
	served := map[string]bool{}
	for i := range 4 {
		r := f.post(f.entry, "/v1/completions", completion(sys+fmt.Sprintf("While Redis is down %d.", i), 8, false), nil)
		if r.status != 200 {
			t.Fatalf("request %d with Redis down: %d %s", i, r.status, r.body)
		}
		served[r.node] = true
	}
	f.redis.Restart()
	testkit.Eventually(t, 10*time.Second, "the nodes republishing their caches", func() bool {
		for n := range served {
			if f.rdb.SCard(ctx, "ubatch:node:"+f.node(n).id+":blocks").Val() < 10 {
				return false
			}
		}
		return true
	})
	before := f.metric(f.rURL, "ubatch_route_decisions_total", `reason="prefix"`)
	var r result
	testkit.Eventually(t, 10*time.Second, "a prefix decision after the restart", func() bool {
		r = f.post(f.entry, "/v1/completions", completion(sys+"After the restart.", 8, false), nil)
		return r.status == 200 && f.metric(f.rURL, "ubatch_route_decisions_total", `reason="prefix"`) > before
	})
	if !served[r.node] {
		t.Fatalf("after the restart the tenant went to %s, which never served it (%v did)", r.node, served)
	}
}

func (f *fleet) testDashboard(t *testing.T) {
	if f.prom == "" {
		t.Skip("prometheus is not installed (Debian: apt-get install prometheus)")
	}
	// Prometheus must scrape before and after fresh traffic for rates over the last minute.
	testkit.Eventually(t, 20*time.Second, "Prometheus scraping the live targets", func() bool {
		return f.hasData(t, `count(up == 1) >= 3`)
	})
	traffic := func(i int) {
		f.post(f.entry, "/v1/completions", completion(tenant(3)+fmt.Sprintf("Q %d.", i), 16, i%2 == 0), nil)
	}
	exprs := panelExprs(t)
	pending := map[string]string{}
	for title, es := range exprs {
		for _, e := range es {
			pending[e] = title
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; len(pending) > 0 && time.Now().Before(deadline); i++ {
		traffic(i)
		for e := range pending {
			if f.hasData(t, e) {
				delete(pending, e)
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	for e, title := range pending {
		t.Errorf("panel %q: %s returns no data", title, e)
	}
	var rules struct {
		Data struct {
			Groups []struct{ Rules []any } `json:"groups"`
		} `json:"data"`
	}
	if err := getJSON(f.prom+"/api/v1/rules", &rules); err != nil || len(rules.Data.Groups) != 2 {
		t.Fatalf("Prometheus loaded %d rule groups from alerts.yml (err %v), want 2", len(rules.Data.Groups), err)
	}
}

// hasData evaluates expr through Prometheus's HTTP API and reports whether some series has a
// finite value.
func (f *fleet) hasData(t *testing.T, expr string) bool {
	var res struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := getJSON(f.prom+"/api/v1/query?query="+urlEscape(expr), &res); err != nil {
		t.Fatalf("query %s: %v", expr, err)
	}
	if res.Status != "success" {
		t.Fatalf("query %s: %s", expr, res.Error)
	}
	for _, s := range res.Data.Result {
		if v, ok := s.Value[1].(string); ok {
			if x, err := strconv.ParseFloat(v, 64); err == nil && !math.IsNaN(x) && !math.IsInf(x, 0) {
				return true
			}
		}
	}
	return false
}
