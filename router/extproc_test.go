package router

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	"ubatch/fleet"
	"ubatch/internal/testkit"
	"ubatch/internal/testredis"
)

// gateway plays Envoy's ext_proc filter (request bodies BUFFERED) against a picker over gRPC.
type gateway struct {
	t      *testing.T
	client extprocv3.ExternalProcessorClient
}

func startPicker(t *testing.T, r *Router) *gateway {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	extprocv3.RegisterExternalProcessorServer(gs, r.ExtProc())
	go gs.Serve(ln)
	conn, err := grpc.NewClient("passthrough:///"+ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); gs.Stop() })
	return &gateway{t: t, client: extprocv3.NewExternalProcessorClient(conn)}
}

// pickResult is what the picker told the gateway about one request.
type pickResult struct {
	header, meta, fallback string // DestinationHeader's value, and the envoy.lb metadata's
	status                 int    // an immediate response's status; 0 when forwarded
	body                   string // an immediate response's body
	headersOnly            bool   // the pick came with the headers (no body sent)
}

// send runs one request through the picker: headers (with the endpoint subset when allow is
// not nil), then the body in one BUFFERED message when there is one.
func (g *gateway) send(method, path, body string, allow []string) pickResult {
	g.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := g.client.Process(ctx)
	if err != nil {
		g.t.Fatal(err)
	}
	hdrs := &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
		{Key: ":method", RawValue: []byte(method)}, {Key: ":path", RawValue: []byte(path)},
		{Key: "content-type", RawValue: []byte("application/json")}}}, EndOfStream: body == ""}
	req := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: hdrs}}
	if allow != nil {
		vals := make([]any, len(allow))
		for i, a := range allow {
			vals[i] = a
		}
		hint, err := structpb.NewStruct(map[string]any{subsetKey: vals})
		if err != nil {
			g.t.Fatal(err)
		}
		req.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{subsetNamespace: hint}}
	}
	if err := st.Send(req); err != nil {
		g.t.Fatal(err)
	}
	resp, err := st.Recv()
	if err != nil {
		g.t.Fatal(err)
	}
	if body != "" {
		if resp.GetRequestHeaders() == nil || resp.GetRequestHeaders().GetResponse().GetHeaderMutation() != nil {
			g.t.Fatalf("headers of a request with a body: %v, want an empty headers response (the pick waits for the body)", resp)
		}
		if err := st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
			RequestBody: &extprocv3.HttpBody{Body: []byte(body), EndOfStream: true}}}); err != nil {
			g.t.Fatal(err)
		}
		if resp, err = st.Recv(); err != nil {
			g.t.Fatal(err)
		}
	}
	_ = st.CloseSend()
	var out pickResult
	if im := resp.GetImmediateResponse(); im != nil {
		out.status, out.body = int(im.GetStatus().GetCode()), string(im.GetBody())
		return out
	}
	common := resp.GetRequestBody().GetResponse()
	if resp.GetRequestHeaders() != nil {
		common, out.headersOnly = resp.GetRequestHeaders().GetResponse(), true
	}
	for _, h := range common.GetHeaderMutation().GetSetHeaders() {
		if h.GetHeader().GetKey() == DestinationHeader {
			out.header = string(h.GetHeader().GetRawValue())
		}
	}
	lb := resp.GetDynamicMetadata().GetFields()[lbNamespace].GetStructValue().GetFields()
	out.meta, out.fallback = lb[DestinationHeader].GetStringValue(), lb[fallbackKey].GetStringValue()
	return out
}

// TestExtProcPicksByPrefix: as a gateway's endpoint picker the router names the node holding a
// prompt's prefix (header and metadata agreeing, the other node as fallback), keeps to the
// gateway's endpoint subset, picks a body-less request by load on its headers, and answers the
// client itself (413, 503) where Handler would.
func TestExtProcPicksByPrefix(t *testing.T) {
	rs := testredis.Start(t)
	a, b := startNode(t, "a", rs.URL), startNode(t, "b", rs.URL)
	rt := startRouter(t, Config{Index: fleet.NewIndex(rs.Client(), ""), AffinityTTL: -1, MaxBodyBytes: 1 << 20})
	testkit.Eventually(t, 10*time.Second, "two healthy nodes", func() bool { return rt.r.Healthy() == 2 })
	g := startPicker(t, rt.r)
	labels := map[string]string{label(a.url): a.url, label(b.url): b.url}

	first := fmt.Sprintf(`{"prompt": %q, "max_tokens": 2, "temperature": 0}`, story+" The end.")
	p := g.send("POST", "/v1/completions", first, nil)
	if p.header == "" || p.header != p.meta || labels[p.header] == "" || labels[p.fallback] == "" || p.fallback == p.header {
		t.Fatalf("first pick %+v: want a node in the header and the metadata, the other as fallback", p)
	}
	owner := p.header
	// The gateway forwards the request to the picked node, which caches the prompt.
	resp, err := http.Post(labels[owner]+"/v1/completions", "application/json", strings.NewReader(first))
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the picked node: %v %v", resp, err)
	}
	resp.Body.Close()
	testkit.Eventually(t, 10*time.Second, "the blocks published", func() bool {
		return rt.r.decide(context.Background(), rt.r.cfg.Prompter.parse("/v1/completions", []byte(first), testLimits).tokens, 10).maxCached > 0
	})
	inflight := func() (n int64) {
		for _, s := range rt.r.snapshotNodes() {
			n += s.n.inflight.Load()
		}
		return n
	}
	base := inflight() // the test's own decide calls above claimed nodes too
	before := rt.counter("decisions", owner, ReasonPrefix)
	for i := range 3 {
		again := fmt.Sprintf(`{"prompt": %q, "max_tokens": 2}`, story+fmt.Sprintf(" Ending %d.", i))
		if p := g.send("POST", "/v1/completions", again, nil); p.header != owner || p.meta != owner {
			t.Fatalf("repeat %d picked %+v, the prefix is on %s", i, p, owner)
		}
	}
	if got := rt.counter("decisions", owner, ReasonPrefix) - before; got != 3 {
		t.Errorf("prefix decisions %v, want 3", got)
	}
	var other string
	for l := range labels {
		if l != owner {
			other = l
		}
	}
	tests := []struct {
		name, method, path, body string
		allow                    []string
		want                     string // the node picked, or "" for an immediate response
		status                   int
	}{
		{name: "subset without the owner", method: "POST", path: "/v1/completions", body: first, allow: []string{other}, want: other},
		{name: "subset of the owner", method: "POST", path: "/v1/completions", body: first, allow: []string{owner, "10.9.9.9:80"}, want: owner},
		{name: "empty subset", method: "POST", path: "/v1/completions", body: first, allow: []string{}, status: http.StatusServiceUnavailable},
		{name: "no node of the subset", method: "POST", path: "/v1/completions", body: first, allow: []string{"10.9.9.9:80"}, status: http.StatusServiceUnavailable},
		{name: "body over max-body", method: "POST", path: "/v1/completions", body: `{"prompt": "` + strings.Repeat("a", 1<<20) + `"}`, status: http.StatusRequestEntityTooLarge},
		{name: "no body", method: "GET", path: "/v1/models", want: "any"},
		{name: "unreadable body", method: "POST", path: "/v1/completions", body: `{"prompt": `, want: "any"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := g.send(tc.method, tc.path, tc.body, tc.allow)
			switch {
			case tc.status != 0:
				if p.status != tc.status || !strings.Contains(p.body, `"error"`) {
					t.Fatalf("%+v, want an immediate %d with an error body", p, tc.status)
				}
			case tc.want == "any":
				if labels[p.header] == "" || p.header != p.meta || p.headersOnly != (tc.body == "") {
					t.Fatalf("%+v, want a node (on the headers: %v)", p, tc.body == "")
				}
			case p.header != tc.want || p.meta != tc.want:
				t.Fatalf("picked %+v, want %s", p, tc.want)
			}
		})
	}
	testkit.Eventually(t, 5*time.Second, "every pick released when its exchange ended", func() bool { return inflight() == base })
}
