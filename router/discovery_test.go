package router

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"ubatch/internal/testkit"
)

// chanDiscovery is a Discovery whose membership the test sends: each value on sets is the
// whole fleet.
type chanDiscovery struct{ sets chan []string }

func (d chanDiscovery) Watch(ctx context.Context, set func([]string)) {
	for {
		select {
		case <-ctx.Done():
			return
		case urls := <-d.sets:
			set(urls)
		}
	}
}

// servedBy posts a distinct prompt n times and counts the answers per node (X-Ubatch-Node).
func servedBy(t *testing.T, rt *testRouter, n int) map[string]int {
	t.Helper()
	by := map[string]int{}
	for i := range n {
		status, node, body := rt.post("/v1/completions", fmt.Sprintf(`{"prompt": "Tale %d of a cat", "max_tokens": 2}`, i))
		if status != http.StatusOK {
			t.Fatalf("status %d: %s", status, body)
		}
		by[node]++
	}
	return by
}

func TestDiscoveryMembership(t *testing.T) {
	n1, n2 := startNode(t, "n1", ""), startNode(t, "n2", "")
	d := chanDiscovery{sets: make(chan []string)}
	rt := startRouter(t, Config{Discovery: d})
	d.sets <- []string{n1.url}
	testkit.Eventually(t, 10*time.Second, "n1 in rotation", func() bool { return rt.r.Healthy() == 1 })
	if by := servedBy(t, rt, 3); by[label(n1.url)] != 3 {
		t.Fatalf("served by %v, want n1 alone", by)
	}

	d.sets <- []string{n1.url, n2.url}
	testkit.Eventually(t, 10*time.Second, "n2 in rotation", func() bool { return rt.r.Healthy() == 2 })
	if by := servedBy(t, rt, 6); by[label(n2.url)] == 0 {
		t.Fatalf("served by %v: the node that joined takes no request", by)
	}

	// A stream in flight on the node that leaves finishes there.
	resp, err := http.Post(rt.ts.URL+"/v1/completions", "application/json",
		strings.NewReader(`{"prompt": "Once upon a time", "max_tokens": 64, "stream": true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	leaving := resp.Header.Get(NodeHeader)
	staying := n1.url
	if leaving == label(n1.url) {
		staying = n2.url
	}
	d.sets <- []string{staying}
	testkit.Eventually(t, 10*time.Second, "the node gone", func() bool { return rt.r.nodeCount() == 1 })
	rest, err := io.ReadAll(br)
	if err != nil {
		t.Fatal(err)
	}
	if ev := events(rest); len(ev) == 0 || ev[len(ev)-1] != "[DONE]" || strings.Contains(string(rest), `"error"`) {
		t.Fatalf("the stream on the node that left did not finish: %q", ev)
	}
	if by := servedBy(t, rt, 6); by[leaving] != 0 || by[label(staying)] != 6 {
		t.Fatalf("served by %v after %s left", by, leaving)
	}

	d.sets <- []string{}
	testkit.Eventually(t, 10*time.Second, "an empty fleet", func() bool { return rt.r.nodeCount() == 0 })
	status, _, body := rt.post("/v1/completions", `{"prompt": "x"}`)
	if status != http.StatusServiceUnavailable || !strings.Contains(string(body), "discovery lists none") {
		t.Fatalf("an empty fleet answered %d: %s", status, body)
	}
	if got := rt.counter("rejected", "no_node"); got != 1 {
		t.Fatalf("no_node rejections %v, want 1", got)
	}
}
